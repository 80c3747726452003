"""lav's Python package: providers that run other libraries' linear-attention kernels under lav."""
