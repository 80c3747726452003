"""lav's Python package: providers of other libraries' kernels, the report reader, the HTML report."""
