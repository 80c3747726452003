"""Save a kernel call's arguments for lav to replay: `[inputs] from = "capture.pt"`.

As a decorator, the first call of the function is saved (later calls run as they are):

    from lav.capture import capture

    @capture("capture.pt")
    def attention(q, k, v, scale=None): ...

Around the user's code, a call of `module.name` made inside the block is saved:

    with capture("capture.pt", fla.ops.simple_gla, "chunk_simple_gla"):
        model(x)

The file is torch.save of a dict that lav reads in C++ without Python:
  "lav_capture": 1, "function": the callee's qualified name,
  "tensors": {argument name: tensor} (on the CPU, values, dtype, shape and strides as given),
  "devices": {argument name: "cuda:0", ...} (where each tensor was),
  "kwargs": {argument name: value} for the other arguments that are None, bools, numbers,
            strings or lists of them (others as their repr).
Positional arguments are named by the callee's signature, and its defaults are saved too.
"""

import functools
import inspect

import torch

FORMAT = 1


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(
        v is None or isinstance(v, (bool, int, float, str)) for v in value
    ):
        return list(value)
    return repr(value)


def save(path, fn, args, kwargs):
    """Saves the call fn(*args, **kwargs) to `path` (without calling it)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        # defaults too: a head_first=False left out still says the layout
        bound.apply_defaults()
        arguments = dict(bound.arguments)
    except (TypeError, ValueError):
        arguments = {f"arg{i}": a for i, a in enumerate(args)}
        arguments.update(kwargs)
    tensors, devices, plain = {}, {}, {}
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor):
            tensors[name] = value.detach().cpu()
            devices[name] = str(value.device)
        else:
            plain[name] = _plain(value)
    torch.save(
        {
            "lav_capture": FORMAT,
            "function": getattr(fn, "__qualname__", repr(fn)),
            "tensors": tensors,
            "devices": devices,
            "kwargs": plain,
        },
        path,
    )


class capture:
    """Saves the first call of a function to `path`: a decorator, or, given a module (or any
    object) and an attribute name, a context manager that wraps that attribute meanwhile."""

    def __init__(self, path, owner=None, name=None):
        self.path = path
        self.owner = owner
        self.name = name
        self.saved = False
        self._original = None

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not self.saved:
                save(self.path, fn, args, kwargs)
                self.saved = True
            return fn(*args, **kwargs)

        return wrapper

    def __enter__(self):
        if self.owner is None or self.name is None:
            raise TypeError("capture(path, owner, name) wraps owner.name inside a with block")
        self._original = getattr(self.owner, self.name)
        setattr(self.owner, self.name, self(self._original))
        return self

    def __exit__(self, *exc):
        setattr(self.owner, self.name, self._original)
        return False
