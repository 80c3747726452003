"""How lav calls a Python provider: the Python half of src/providers/python.cpp.

lav hands its tensors over as themselves (torch tensors sharing lav's TensorImpls: no copies, no
conversion) and takes the results back the same way, so a provider must not change the tensors
it is given. A provider module has one function per (family, variant) named
"<variant>_<family>", taking the family's declared tensors and lav's settings as keyword
arguments and returning the declared outputs in order; gradients come from autograd here, seeded
with the cotangents.
"""

import importlib
import importlib.util
import inspect
import os
import sys
import traceback

import torch

_DTYPES = {
    "Float": torch.float32,
    "Half": torch.float16,
    "BFloat16": torch.bfloat16,
    "Double": torch.float64,
}


def load(module):
    """The module named `module`, or the file `module` when it ends in .py."""
    if module.endswith(".py"):
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no such file: {module}")
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(module)


def provider_name(mod):
    return getattr(mod, "NAME", mod.__name__.rsplit(".", 1)[-1])


def versions(mod):
    fn = getattr(mod, "versions", None)
    return {str(k): str(v) for k, v in (fn() if fn else {}).items()}


def device(mod):
    return getattr(mod, "DEVICE", "cuda" if torch.cuda.is_available() else "cpu")


def absent(mod, family, variant):
    """Why the module has no function for (family, variant): what its unsupported() says of it
    where it has one and says anything, else that the function is not there."""
    unsupported = getattr(mod, "unsupported", None)
    try:
        reason = unsupported(family, variant, {}) if unsupported else None
    except Exception:  # noqa: BLE001 (a check that cannot judge empty options says nothing)
        reason = None
    return str(reason) if reason else f"the provider module has no function {variant}_{family}"


def bind(mod, fn, family, variant):
    """The callable lav runs: `fn`, preceded by the module's unsupported() check if it has one,
    with the keyword names `fn` takes (None: it takes any). Reading a signature costs more than
    the rest of a call's handling, so it is read once here, not per call."""
    unsupported = getattr(mod, "unsupported", None)
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    return (fn, unsupported, family, variant, None if takes_any else frozenset(params))


def _checked(tensor):
    if tensor is not None and not isinstance(tensor, torch.Tensor):
        raise TypeError(f"a provider returned {type(tensor).__name__} where a tensor was expected")
    return tensor


def _settings(settings):
    out = dict(settings)
    out["state_dtype"] = _DTYPES.get(settings["state_dtype"], settings["state_dtype"])
    out["output_dtype"] = _DTYPES.get(settings["output_dtype"], settings["output_dtype"])
    return out


def arguments(bound, tensors, settings):
    """The provider's function and the keyword arguments lav calls it with (tensors and
    settings as _settings makes them), after its unsupported() check."""
    fn, unsupported, family, variant, accepted = bound
    options = {k: v for k, v in settings.items() if isinstance(v, str)}
    if unsupported is not None:
        reason = unsupported(family, variant, options)
        if reason:
            raise NotImplementedError(reason)
    # an option named like a tensor (rwkv7's b) comes as <name>_option
    kwargs = {(k + "_option" if k in tensors else k): v for k, v in settings.items()}
    kwargs.update(tensors)
    # a function that does not take every setting gets the ones it names
    if accepted is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    return fn, kwargs


def _call(bound, tensors, settings):
    fn, kwargs = arguments(bound, tensors, settings)
    out = fn(**kwargs)
    if isinstance(out, torch.Tensor):
        out = (out,)
    return list(out.values()) if isinstance(out, dict) else list(out)


def forward(bound, tensors, settings):
    """The forward outputs (None where the function returns none). lav calls it with autograd
    off (torch.no_grad() set from C++, where it costs nothing)."""
    return [_checked(t) for t in _call(bound, tensors, _settings(settings))]


def backward(bound, tensors, settings, differentiated, cotangents):
    """The gradients of sum(<output, cotangent>) for the `differentiated` inputs."""
    inputs = dict(tensors)
    leaves = []
    for name in differentiated:
        inputs[name] = inputs[name].detach().requires_grad_(True)
        leaves.append(inputs[name])
    with torch.enable_grad():
        outputs = _call(bound, inputs, _settings(settings))
    roots, seeds = [], []
    for out, seed in zip(outputs, cotangents):
        if out is not None and seed is not None and out.requires_grad:
            roots.append(out)
            seeds.append(seed.to(out.dtype))
    if not roots:
        name = getattr(bound[0], "__name__", "the provider's function")
        raise RuntimeError(f"{name}: no output takes part in autograd, so there is no backward to "
                           "check (the function it calls is forward-only, or detaches its outputs)")
    grads = torch.autograd.grad(roots, leaves, seeds, allow_unused=True)
    return [_checked(g) for g in grads]


def describe_error(exc):
    """The exception's last line, then the user's own frames nearest it (innermost last): the
    provider's or the prologue's, not those of lav's package."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(here) and not f.filename.startswith("<frozen")
    ][-4:]
    where = "".join(f"\n  at {f.filename}:{f.lineno} in {f.name}" for f in frames)
    return "".join(traceback.format_exception_only(type(exc), exc)).strip() + where
