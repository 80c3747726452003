"""The Python halves of bench_provider_overhead: a provider's function called bare, and called
through lav's Python shim.

bench_provider_overhead (bench/provider_overhead.cpp) imports this module in lav's embedded
interpreter and calls seconds() with one case's call as JSON: the tensors' dtypes, shapes and
device and the settings lav hands the provider. It makes tensors of those shapes, dtypes and
device and times one of two calls:
- "bare": the function itself under torch.no_grad(), its keyword arguments prepared once
  (lav._provider_call.arguments), as lav calls a forward;
- "shim": lav._provider_call.forward, as lav's C++ side calls it (under torch.no_grad(), which
  lav sets from C++): lav's Python half without its C++ half.
"""

import json
import statistics
import time

import torch

from lav import _provider_call

_DTYPES = {"Float": torch.float32, "Half": torch.float16, "BFloat16": torch.bfloat16,
           "Double": torch.float64, "Long": torch.int64, "Int": torch.int32}
_modules = {}


def _tensor(dtype, shape, device):
    dtype = _DTYPES[dtype]
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=torch.float64).to(dtype).to(device)
    return torch.zeros(shape, dtype=dtype, device=device)


def seconds(provider, call_json, repeats, mode):
    """Median seconds of `repeats` calls of `mode` (after 3 warm-up calls); a CUDA call ends
    with torch.cuda.synchronize()."""
    call = json.loads(call_json)
    module = _modules.setdefault(provider, _provider_call.load(provider))
    fn = getattr(module, f"{call['variant']}_{call['family']}")
    bound = _provider_call.bind(module, fn, call["family"], call["variant"])
    tensors = {name: _tensor(*spec) for name, spec in call["tensors"].items()}
    settings = dict(call["settings"])
    if settings["cu_seqlens"] is not None:
        settings["cu_seqlens"] = torch.tensor(settings["cu_seqlens"], device=call["device"])
    cuda = call["device"] == "cuda"
    if mode == "bare":
        fn, kwargs = _provider_call.arguments(bound, tensors, _provider_call._settings(settings))

        def run():
            with torch.no_grad():
                fn(**kwargs)
    elif mode == "shim":
        def run():
            with torch.no_grad():
                _provider_call.forward(bound, dict(tensors), settings)
    else:
        raise ValueError(f"unknown mode {mode!r}")

    def once():
        run()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3):
        once()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
