"""A provider whose forward does no work (it hands v back), so that bench_provider_overhead on
provider_overhead_fixed.toml measures what a provider call costs lav beyond the kernel."""

DEVICE = "cpu"


def chunk_simple_gla(q, k, v, g=None, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
                     chunk_size=64, state_dtype=None, output_dtype=None):
    return v, None
