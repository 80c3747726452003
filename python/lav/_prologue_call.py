"""How lav calls a Python prologue: the Python half of run_python_prologue (src/providers/python.cpp).

A scenario's `[prologue] python = "file.py:function"` names a function of the user's file. lav
calls it with keyword arguments taken from its parameter names:

- a tensor of the case (q, k, v, ..., cu_seqlens for a varlen case, and each [prologue.tensors]
  entry) for each parameter named like one; a function with **kwargs gets them all;
- `module` (when it has a parameter of that name): what the file's `make_module(...)` returns,
  called with the case's sizes it names (B, T, H, K, V, HV) and `device`, under a fixed random
  seed; lav names each of its parameters and buffers by qualified name in findings.

It returns the tensors it made for the kernel: a dict {name: tensor}, or a tensor or a tuple
matched in order to the function's own parameters that name tensors of the case (so that
`def prologue(q, k, v, module): ... return q, k, v` assigns q, k and v). A name that is not a
tensor of the case is an error. Tensors cross as DLPack capsules one way, and come back as
themselves (their TensorImpl, `_cdata`), so that lav's tracer knows them.
"""

import inspect

import torch
from torch.utils import dlpack

from lav import _provider_call

# a user's file is executed once per run, whatever number of cases call it
_modules = {}


def _module_of(path):
    if path not in _modules:
        _modules[path] = _provider_call.load(path)
    return _modules[path]


def prepare(path, function, capsules, sizes, seed):
    """The call to make, and the tensors lav labels: [(name, cdata)] of the inputs as the
    function gets them, and [(qualified name, cdata, is_buffer)] of the module's."""
    mod = _module_of(path)
    fn = getattr(mod, function, None)
    if not callable(fn):
        raise TypeError(f"{path} has no function {function!r}")
    tensors = {k: dlpack.from_dlpack(v) for k, v in capsules.items()}
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: t for k, t in tensors.items() if takes_all or k in params}
    owned = []
    if "module" in params:
        factory = getattr(mod, "make_module", None)
        if not callable(factory):
            raise TypeError(
                f"{function}() takes a module, and {path} defines no make_module() to build it"
            )
        device = next(iter(tensors.values())).device if tensors else torch.device("cpu")
        given = dict(sizes, device=device)
        wanted = inspect.signature(factory).parameters
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = factory(**{k: v for k, v in given.items() if k in wanted})
        if isinstance(module, torch.nn.Module):
            module = module.to(device)
            owned = [(n, p._cdata, False) for n, p in module.named_parameters()]
            owned += [(n, b._cdata, True) for n, b in module.named_buffers()]
        kwargs["module"] = module
    # what a tuple's items are, in order: the function's parameters that are tensors of the case
    order = [k for k in params if k in tensors]
    inputs = [(k, t._cdata) for k, t in kwargs.items() if isinstance(t, torch.Tensor)]
    return (fn, kwargs, order, set(tensors)), inputs, owned


def run(call):
    """Calls the function; its ops are traced by lav meanwhile."""
    fn, kwargs, _, _ = call
    with torch.no_grad():
        return fn(**kwargs)


def results(call, out):
    """[(name, tensor, cdata)] of what the function returned (the tensor keeps it alive)."""
    fn, _, order, known = call
    if isinstance(out, torch.Tensor):
        out = (out,)
    if isinstance(out, dict):
        items = list(out.items())
    elif isinstance(out, (tuple, list)):
        if len(out) > len(order):
            raise TypeError(
                f"{fn.__name__}() returned {len(out)} values for its {len(order)} tensor "
                f"parameters ({', '.join(order)}); return a dict {{name: tensor}} instead"
            )
        items = list(zip(order, out))
    else:
        raise TypeError(
            f"{fn.__name__}() returned {type(out).__name__}; return a dict {{name: tensor}}, "
            "a tensor or a tuple of tensors"
        )
    for name, t in items:
        if name not in known:
            raise TypeError(
                f"{fn.__name__}() returned {name!r}, which is no tensor of this case "
                f"({', '.join(sorted(known))})"
            )
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn.__name__}() returned {type(t).__name__} for {name!r}")
    return [(name, t, t._cdata) for name, t in items]


def skipped_dirs():
    """Source folders whose frames are not the user's: torch's and lav's own."""
    import os

    return [
        os.path.dirname(torch.__file__) + os.sep,
        os.path.dirname(os.path.abspath(__file__)) + os.sep,
    ]
