"""Providers: modules that expose another library's kernels under lav's calling convention.

A provider module has a ``NAME``, optional ``versions()`` and ``unsupported(family, variant,
options)``, and one function per (family, variant) named ``<variant>_<family>``
(``chunk_gla``, ``recurrent_simple_gla``, ``parallel_based``...), called with the case's
tensors and settings as keyword arguments and returning the forward outputs in declaration
order. ``lav run --provider lav.providers.fla`` loads the flash-linear-attention one.
"""
