"""flash-linear-attention (FLA) as a lav provider.

``lav run --provider lav.providers.fla`` runs FLA's Triton kernels (``fla.ops``) as rows of lav's
families: ``chunk_<family>`` calls FLA's ``chunk_*`` function, ``recurrent_<family>`` its
``fused_recurrent_*`` function, and ``parallel_based`` / ``parallel_rebased`` the parallel
forms. Written against FLA 0.6.0 (``fla-core``).

Calling convention (lav's provider convention): tensors by lav's declared names as keyword
arguments (absent optional tensors as ``None``), in the case's dtypes and layout, on the case's
device; the settings ``scale`` (resolved), ``head_first``, ``cu_seqlens`` (int64), ``chunk_size``,
``state_dtype`` and ``output_dtype``; every family option by its declared name, as a string
("true", "false", "-5", ...). Each function returns its forward outputs in declaration order
(``o`` then the final states), in the inputs' layout; autograd gives the gradients.

How lav's conventions become FLA's, for every function:

- Layout. FLA 0.6.0 has no ``head_first`` any more (passing it raises), and takes every
  sequence tensor as ``[B, T, H, ...]``. With ``head_first=True`` lav's ``[B, H, T, ...]``
  tensors are transposed to that layout (and made contiguous) before the call and ``o`` is
  transposed back after it; final states ``[N, H, ...]`` have no time axis and are the same in
  both layouts.
- ``cu_seqlens`` is handed on as int64 offsets on the inputs' device (FLA takes int64 or int32
  there; lav's caller may hand a CPU tensor).
  Where an FLA function has no ``cu_seqlens`` (``chunk_hgrn``, ``parallel_based``,
  ``fused_chunk_based``, ``parallel_rebased``) a packed batch runs as one call per sequence,
  which is what a packed batch means: each sequence starts from its own initial state.
- ``scale``: lav hands it resolved; a scale of 0 or ``None`` is taken as ``K^-0.5`` (lav's
  references' meaning) and always passed explicitly, so FLA's own defaults never apply
  (``chunk_rwkv7`` defaults to 1.0, ``fused_recurrent_rwkv7`` to ``K^-0.5``).
- ``chunk_size`` is passed to the chunk functions that take one (simple_gla, delta_rule,
  gated_delta_rule, kda, rwkv6, rwkv7, gsa); FLA checks the value itself (kda takes 32 or 64,
  the delta rules 16, 32 or 64). The others choose their own (chunk_gla
  ``min(64, max(16, next_pow2(T)))``; comba, gated_delta_product and mesa_net 64; hgrn 128;
  fused_chunk_based 16).
- ``state_dtype``: FLA has no such argument. Its final states are fp32 (``fused_recurrent_hgrn``:
  x's dtype); initial states are passed in lav's state dtype, except where FLA asserts fp32
  (``chunk_gla``, ``chunk_kda``, ``chunk_mesa_net``), where they are widened to fp32 (exact).
  Nothing returned is cast: lav's contract check sees the dtypes FLA returns.
- ``output_dtype``: FLA has none either; ``o`` comes back in the dtype FLA chooses (q's or v's).
- Final states are always asked for (``output_final_state=True``).
- rwkv7's option ``b`` and tensor ``b`` share one keyword; see ``recurrent_rwkv7``'s section.

What FLA 0.6.0 lacks is said by ``unsupported()`` for (family, variant, option) combinations;
limits that depend on the tensors are left to FLA's own checks, whose messages lav records:
fp32 inputs (``chunk_delta_rule``, ``chunk_gated_delta_product`` assert they are not fp32),
``K > 16`` in ``fused_chunk_based``, ``K != V`` in ``chunk_mesa_net``. Backward passes FLA
does not implement raise from autograd (``fused_recurrent_gated_delta_rule``,
``fused_recurrent_comba``, ``fused_recurrent_rwkv7`` in the DPLR form and
``chunk_iplr_delta_rule``), and ``fused_recurrent_kda`` is forward only (its outputs carry no
graph). ``chunk_hgrn``'s backward ignores ``dht`` and gives no ``dh0``. On Hopper GPUs with
Triton >= 3.4 and < 3.7.1, FLA 0.6.0 also refuses the gated ``chunk_bwd_dqkwg`` backward (its
issue #640) unless tilelang is installed: the backward of ``chunk_gated_delta_rule`` and of
``chunk_gated_delta_product`` with a gate then raises a RuntimeError saying so (so does
``chunk_simple_gla``'s with a per-token gate ``g``: seen on an H200 with Triton 3.6).

``jit_seconds()`` counts the time Triton spends compiling FLA's kernels and autotuning them, for
the records' ``jit_seconds``; ``LAV_FLA_AUTOTUNE=first`` (environment) skips the autotuning.
"""

from __future__ import annotations

import os
import time

try:
    import torch
except ImportError as exc:  # pragma: no cover - torch is lav's own requirement
    raise ImportError("lav.providers.fla needs PyTorch (torch), which is not importable: "
                      f"{exc}") from exc

try:
    import triton
except ImportError as exc:
    raise ImportError(
        "lav.providers.fla needs Triton, which flash-linear-attention's kernels are written in, "
        f"and it is not importable: {exc}. Install the triton that matches your torch.") from exc

try:
    import fla
except ImportError as exc:
    raise ImportError(
        "lav.providers.fla needs flash-linear-attention (the `fla` package, PyPI `fla-core` or "
        f"`flash-linear-attention`, 0.6.0 or later), and it is not importable: {exc}") from exc

NAME = "fla"

__all__ = [
    "NAME", "versions", "unsupported",
    "chunk_simple_gla", "recurrent_simple_gla",
    "chunk_gla", "recurrent_gla",
    "chunk_hgrn", "recurrent_hgrn",
    "chunk_delta_rule", "recurrent_delta_rule",
    "chunk_gated_delta_rule", "recurrent_gated_delta_rule",
    "chunk_kda", "recurrent_kda",
    "chunk_rwkv6", "recurrent_rwkv6",
    "chunk_rwkv7", "recurrent_rwkv7",
    "chunk_comba", "recurrent_comba",
    "chunk_gated_delta_product",
    "chunk_mesa_net",
    "parallel_based", "chunk_based",
    "parallel_rebased",
    "chunk_gsa", "recurrent_gsa",
]


def versions() -> dict[str, str]:
    """The versions lav records in a report's run attributes, Triton's precision of fp32 dots
    (unset, Triton takes tf32 on GPUs that have it, and FLA sets "ieee" only on those without,
    which puts FLA's fp32 chunk results near 1e-3 instead of 1e-7) and LAV_FLA_AUTOTUNE."""
    return {"fla": str(getattr(fla, "__version__", "unknown")),
            "triton": str(getattr(triton, "__version__", "unknown")),
            "TRITON_F32_DEFAULT": os.environ.get("TRITON_F32_DEFAULT", "unset"),
            "autotune": AUTOTUNE}


# ------------------------------------------------------------------------------------------
# Compile time: Triton's JIT and autotuner, counted for lav's jit_seconds column
# ------------------------------------------------------------------------------------------

class _JitClock:
    """Wall seconds spent inside Triton's compile of a kernel (JITFunction._do_compile, a hit in
    Triton's on-disk cache included) or its autotuner's timing of a config (Autotuner._bench,
    which compiles that config first); nested spans count once. Both are Triton internals
    (3.x): where a Triton lacks them nothing is wrapped and the count stays 0."""

    def __init__(self):
        self.seconds = 0.0
        self._depth = 0
        self._start = 0.0

    def wrap(self, owner, name):
        inner = getattr(owner, name, None)
        if inner is None:
            return

        def timed(*args, **kwargs):
            if self._depth == 0:
                self._start = time.perf_counter()
            self._depth += 1
            try:
                return inner(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - self._start

        setattr(owner, name, timed)


# LAV_FLA_AUTOTUNE=first: each autotuned kernel runs the first of the configs FLA's own pruning
# keeps instead of timing them all. FLA's kernels list up to dozens of configs (block sizes,
# warps, stages), each compiled on first use, so a cold run compiles one config per kernel
# instead; the numbers are that config's, and versions() puts the choice in the report.
AUTOTUNE = os.environ.get("LAV_FLA_AUTOTUNE", "full")
if AUTOTUNE not in ("full", "first"):
    raise ValueError(f"LAV_FLA_AUTOTUNE={AUTOTUNE!r}: give 'full' (Triton's autotuning, the "
                     "default) or 'first' (the first config FLA's pruning keeps)")

_clock = _JitClock()
try:
    from triton.runtime.autotuner import Autotuner as _Autotuner
    from triton.runtime.jit import JITFunction as _JITFunction
except ImportError:  # a Triton laid out otherwise: nothing is counted
    if AUTOTUNE == "first":
        raise
else:
    _clock.wrap(_JITFunction, "_do_compile")
    _clock.wrap(_Autotuner, "_bench")
    if AUTOTUNE == "first":
        _prune = _Autotuner.prune_configs
        _Autotuner.prune_configs = lambda self, kwargs: _prune(self, kwargs)[:1]


def jit_seconds() -> float:
    """Seconds FLA's kernels have spent compiling and autotuning in this process so far."""
    return _clock.seconds


# ------------------------------------------------------------------------------------------
# What FLA lacks
# ------------------------------------------------------------------------------------------

# (family, variant) -> FLA function; every pair lav declares that is absent here is unsupported
# for the reason in _MISSING.
FUNCTIONS: dict[tuple[str, str], str] = {
    ("simple_gla", "chunk"): "fla.ops.simple_gla.chunk_simple_gla",
    ("simple_gla", "recurrent"): "fla.ops.simple_gla.fused_recurrent_simple_gla",
    ("gla", "chunk"): "fla.ops.gla.chunk_gla",
    ("gla", "recurrent"): "fla.ops.gla.fused_recurrent_gla",
    ("hgrn", "chunk"): "fla.ops.hgrn.chunk_hgrn",
    ("hgrn", "recurrent"): "fla.ops.hgrn.fused_recurrent_hgrn",
    ("delta_rule", "chunk"): "fla.ops.delta_rule.chunk_delta_rule",
    ("delta_rule", "recurrent"): "fla.ops.delta_rule.fused_recurrent_delta_rule",
    ("gated_delta_rule", "chunk"): "fla.ops.gated_delta_rule.chunk_gated_delta_rule",
    ("gated_delta_rule", "recurrent"): "fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule",
    ("kda", "chunk"): "fla.ops.kda.chunk_kda",
    ("kda", "recurrent"): "fla.ops.kda.fused_recurrent_kda",
    ("rwkv6", "chunk"): "fla.ops.rwkv6.chunk_rwkv6",
    ("rwkv6", "recurrent"): "fla.ops.rwkv6.fused_recurrent_rwkv6",
    ("rwkv7", "chunk"): "fla.ops.rwkv7.chunk_rwkv7 (form=dplr), "
                        "fla.ops.generalized_delta_rule.chunk_iplr_delta_rule (form=iplr)",
    ("rwkv7", "recurrent"): "fla.ops.rwkv7.fused_recurrent_rwkv7 (form=dplr), "
                            "fla.ops.generalized_delta_rule.fused_recurrent_iplr_delta_rule "
                            "(form=iplr)",
    ("comba", "chunk"): "fla.ops.comba.chunk_comba",
    ("comba", "recurrent"): "fla.ops.comba.fused_recurrent_comba",
    ("gated_delta_product", "chunk"): "fla.ops.gated_delta_product.chunk_gated_delta_product",
    ("mesa_net", "chunk"): "fla.ops.mesa_net.chunk_mesa_net",
    ("based", "parallel"): "fla.ops.based.parallel_based",
    ("based", "chunk"): "fla.ops.based.fused_chunk_based",
    ("rebased", "parallel"): "fla.ops.rebased.parallel_rebased",
    ("gsa", "chunk"): "fla.ops.gsa.chunk_gsa",
    ("gsa", "recurrent"): "fla.ops.gsa.fused_recurrent_gsa",
}

_MISSING: dict[tuple[str, str], str] = {
    ("gated_delta_product", "recurrent"):
        "FLA has no fused recurrent gated DeltaProduct: fla.ops.gated_delta_product exports "
        "chunk_gated_delta_product only (its naive_recurrent_gated_delta_product is a Python "
        "reference loop, not a kernel)",
    ("mesa_net", "recurrent"):
        "FLA has no recurrent MesaNet over a sequence: fla.ops.mesa_net has chunk_mesa_net and "
        "mesa_net_decoding_one_step, a single-token inference step without a backward",
    ("based", "recurrent"):
        "FLA has no recurrent Based: fla.ops.based has parallel_based and fused_chunk_based only",
    ("rebased", "chunk"):
        "FLA has no chunked ReBased: fla.ops.rebased has parallel_rebased only",
    ("rebased", "recurrent"):
        "FLA has no recurrent ReBased: fla.ops.rebased has parallel_rebased only",
}

_FAMILIES = {f for f, _ in FUNCTIONS} | {f for f, _ in _MISSING}


def unsupported(family: str, variant: str, options: dict | None = None) -> str | None:
    """Why FLA cannot run this (family, variant, options), or None when it can."""
    options = dict(options or {})
    if family not in _FAMILIES:
        return f"the FLA provider has no family '{family}'"
    if (family, variant) in _MISSING:
        return _MISSING[(family, variant)]
    if (family, variant) not in FUNCTIONS:
        return f"FLA has no '{variant}' form of {family}"

    def flag(name: str) -> bool:
        return _flag(options.get(name), False, name)

    try:
        return _option_issue(family, options, flag)
    except ValueError as exc:
        return str(exc)


def _option_issue(family: str, options: dict, flag) -> str | None:
    if family in ("gated_delta_rule", "kda"):
        if flag("allow_neg_eigval") and not flag("use_beta_sigmoid_in_kernel"):
            return ("allow_neg_eigval=true needs use_beta_sigmoid_in_kernel=true: FLA scales "
                    "beta to [0, 2) only inside its in-kernel sigmoid (and raises otherwise)")
    if family == "kda":
        lb = _lower_bound(options.get("lower_bound"))
        if lb is not None and not flag("use_gate_in_kernel"):
            return ("lower_bound applies only to FLA's in-kernel KDA gate "
                    "(use_gate_in_kernel=true); without it FLA ignores the bound")
        if lb is not None and lb >= 0:
            return f"FLA's lower_bound must be negative, got {lb}"
    if family == "rwkv7":
        form = options.get("form", "dplr")
        if form not in ("dplr", "iplr"):
            return f"FLA has no rwkv7 form '{form}' (dplr and iplr only)"
        b = options.get("b", "neg_a")
        if b not in ("neg_a", "input"):
            return f"unknown rwkv7 option b='{b}' (neg_a or input)"
    if family == "gated_delta_product":
        try:
            n = int(options.get("num_householder", "1"))
        except ValueError:
            return f"num_householder must be an integer, got {options.get('num_householder')!r}"
        if n < 1:
            return f"num_householder must be at least 1, got {n}"
    if family == "mesa_net":
        it = options.get("max_cg_iterations", "K")
        if it != "K":
            try:
                if int(it) < 1:
                    return f"max_cg_iterations must be positive, got {it}"
            except ValueError:
                return f"max_cg_iterations must be 'K' or an integer, got {it!r}"
    return None


# ------------------------------------------------------------------------------------------
# Shared translation helpers
# ------------------------------------------------------------------------------------------

def _flag(value, default: bool, name: str = "option") -> bool:
    """lav passes boolean options as the strings "true"/"false"; bools are taken too."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{name} must be 'true' or 'false', got {value!r}")


def _lower_bound(value) -> float | None:
    if value is None or str(value).strip().lower() in ("none", ""):
        return None
    return float(value)


def _scale(scale, k: torch.Tensor) -> float:
    """lav's resolved scale; 0 or None means K^-0.5 (k's last size), as in lav's references."""
    if scale is None or float(scale) == 0.0:
        return float(k.shape[-1]) ** -0.5
    return float(scale)


def _in(head_first: bool, x: torch.Tensor | None) -> torch.Tensor | None:
    """A sequence tensor in FLA's layout: [B, H, T, ...] -> [B, T, H, ...], contiguous."""
    if x is None:
        return None
    if head_first:
        x = x.transpose(1, 2)
    return x.contiguous()


def _out(head_first: bool, x: torch.Tensor | None) -> torch.Tensor | None:
    """A sequence result back in the inputs' layout (a view; autograd flows through it)."""
    if x is None or not head_first:
        return x
    return x.transpose(1, 2)


def _state(x: torch.Tensor | None, fp32: bool = False) -> torch.Tensor | None:
    """An initial state as FLA takes it; widened to fp32 (exact) where FLA asserts fp32."""
    if x is None:
        return None
    if fp32 and x.dtype != torch.float32:
        x = x.float()
    return x.contiguous()


def _offsets(cu_seqlens, like: torch.Tensor) -> torch.Tensor | None:
    """cu_seqlens as FLA takes it: an int64 (or int32) tensor on the inputs' device."""
    if cu_seqlens is None:
        return None
    if not isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = torch.tensor(list(cu_seqlens), dtype=torch.int64)
    if cu_seqlens.dtype not in (torch.int64, torch.int32):
        cu_seqlens = cu_seqlens.to(torch.int64)
    return cu_seqlens.to(like.device)


def _chunk(chunk_size, default: int = 64) -> int:
    return default if chunk_size is None else int(chunk_size)


def _hf(head_first) -> bool:
    return _flag(head_first, False, "head_first")


class _GradTo(torch.autograd.Function):
    """Returns ``value`` (no graph) and hands its gradient to ``target`` (same shape).

    rwkv7 with b = "neg_a": the kernel's b is exactly -a, and lav measures ``db`` as the
    gradient w.r.t. the kernel's b argument and ``da`` as the gradient w.r.t. its a argument
    only (reference/rwkv7.md: ``db_t = G ha_t``, ``da_t = S_{t-1} (G^T b_t)``), so -a must
    not feed a second path back into a; the tensor lav passes as ``b`` collects db.
    """

    @staticmethod
    def forward(ctx, target, value):
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _per_sequence(run, cu_seqlens, seqs: dict, states: dict, empty):
    """Runs ``run(**seqs_i, **states_i)`` once per packed sequence, for FLA functions without
    ``cu_seqlens``. ``seqs`` are [1, T, ...] tensors cut along T, ``states`` [N, ...] tensors
    cut along N. ``empty(i)`` gives the results of an empty sequence i (no call: FLA's kernels
    are not run on zero rows). Returns the per-sequence results, in order."""
    bounds = [int(x) for x in cu_seqlens.tolist()]
    results = []
    for i, (bos, eos) in enumerate(zip(bounds[:-1], bounds[1:])):
        if eos == bos:
            results.append(empty(i))
            continue
        part = {n: (t[:, bos:eos] if t is not None else None) for n, t in seqs.items()}
        part.update({n: (t[i:i + 1] if t is not None else None) for n, t in states.items()})
        results.append(run(**part))
    return results


# ------------------------------------------------------------------------------------------
# simple_gla: S = exp(g) S + k v^T, o = scale S^T q (lav's g, g_gamma, or none)
# ------------------------------------------------------------------------------------------

def _simple_gla_gates(g, g_gamma, gate):
    # lav's option picks one gate, and only that one reaches FLA (whose docstring asks for one
    # of g and g_gamma at most)
    gate = "g" if gate is None else str(gate)
    if gate == "g":
        return g, None
    if gate == "g_gamma":
        return None, g_gamma
    if gate == "none":
        return None, None
    raise ValueError(f"simple_gla gate must be g, g_gamma or none, got {gate!r}")


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, h0=None, *, scale=None, head_first=False,
                     cu_seqlens=None, chunk_size=64, state_dtype=None, output_dtype=None,
                     gate=None, **_options):
    from fla.ops.simple_gla import chunk_simple_gla as fla_fn
    hf = _hf(head_first)
    g, g_gamma = _simple_gla_gates(g, g_gamma, gate)
    q, k, v, g = (_in(hf, x) for x in (q, k, v, g))
    o, ht = fla_fn(q=q, k=k, v=v, g=g, g_gamma=g_gamma, scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q), chunk_size=_chunk(chunk_size))
    return _out(hf, o), ht


def recurrent_simple_gla(q, k, v, g=None, g_gamma=None, h0=None, *, scale=None,
                         head_first=False, cu_seqlens=None, chunk_size=None, state_dtype=None,
                         output_dtype=None, gate=None, **_options):
    from fla.ops.simple_gla import fused_recurrent_simple_gla as fla_fn
    hf = _hf(head_first)
    g, g_gamma = _simple_gla_gates(g, g_gamma, gate)
    q, k, v, g = (_in(hf, x) for x in (q, k, v, g))
    o, ht = fla_fn(q=q, k=k, v=v, g=g, g_gamma=g_gamma, scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# gla: S = diag(exp(g)) S + k v^T (FLA's chunk g, fused_recurrent gk)
# ------------------------------------------------------------------------------------------

def chunk_gla(q, k, v, g, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
              chunk_size=None, state_dtype=None, output_dtype=None, **_options):
    from fla.ops.gla import chunk_gla as fla_fn
    hf = _hf(head_first)
    q, k, v, g = (_in(hf, x) for x in (q, k, v, g))
    # chunk_gla asserts an fp32 initial state; its chunk size is its own (64)
    o, ht = fla_fn(q=q, k=k, v=v, g=g, scale=_scale(scale, k),
                   initial_state=_state(h0, fp32=True), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht


def recurrent_gla(q, k, v, g, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
                  chunk_size=None, state_dtype=None, output_dtype=None, **_options):
    from fla.ops.gla import fused_recurrent_gla as fla_fn
    hf = _hf(head_first)
    q, k, v, g = (_in(hf, x) for x in (q, k, v, g))
    o, ht = fla_fn(q=q, k=k, v=v, gk=g, scale=_scale(scale, k), initial_state=_state(h0),
                   output_final_state=True, cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# hgrn: h = exp(g) * h + x. lav splits FLA's width D into H heads of K channels:
# x, g, o [B, T, H, K] <-> FLA's [B, T, D]; h0, ht [N, H, K] <-> [N, D]
# ------------------------------------------------------------------------------------------

def _hgrn_in(hf, x):
    x = _in(hf, x)
    return x.reshape(x.shape[0], x.shape[1], -1)


def chunk_hgrn(x, g, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
               chunk_size=None, state_dtype=None, output_dtype=None, **_options):
    from fla.ops.hgrn import chunk_hgrn as fla_fn
    hf = _hf(head_first)
    H, K = (x.shape[1], x.shape[3]) if hf else (x.shape[2], x.shape[3])
    xf, gf = _hgrn_in(hf, x), _hgrn_in(hf, g)
    h0f = None if h0 is None else _state(h0).reshape(h0.shape[0], -1)

    def run(x, g, h0):
        return fla_fn(x, g, initial_state=h0, output_final_state=True)

    if cu_seqlens is None:
        o, ht = run(xf, gf, h0f)
    else:
        # chunk_hgrn takes no cu_seqlens: one call per packed sequence, each from its own h0
        # row; an empty sequence has no rows and keeps h0 as its final state, detached: FLA's
        # backward gives no dh0, and an empty sequence's row alone must not give one either
        def empty(i):
            hti = h0f[i:i + 1].detach() if h0f is not None else xf.new_zeros(
                1, xf.shape[-1], dtype=torch.float32)
            return xf[:, :0], hti
        parts = _per_sequence(run, _offsets(cu_seqlens, xf), {"x": xf, "g": gf}, {"h0": h0f},
                              empty)
        o = torch.cat([p[0] for p in parts], dim=1)
        ht = torch.cat([p[1] for p in parts], dim=0)
    o = o.reshape(o.shape[0], o.shape[1], H, K)
    return _out(hf, o), ht.reshape(ht.shape[0], H, K)


def recurrent_hgrn(x, g, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
                   chunk_size=None, state_dtype=None, output_dtype=None, **_options):
    from fla.ops.hgrn import fused_recurrent_hgrn as fla_fn
    hf = _hf(head_first)
    H, K = (x.shape[1], x.shape[3]) if hf else (x.shape[2], x.shape[3])
    xf, gf = _hgrn_in(hf, x), _hgrn_in(hf, g)
    h0f = None if h0 is None else _state(h0).reshape(h0.shape[0], -1)
    # fused_recurrent_hgrn returns its final state in x's dtype (not fp32)
    o, ht = fla_fn(xf, gf, initial_state=h0f, output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, xf))
    o = o.reshape(o.shape[0], o.shape[1], H, K)
    return _out(hf, o), ht.reshape(ht.shape[0], H, K)


# ------------------------------------------------------------------------------------------
# delta_rule: u = beta (v - S^T k), S = S + k u^T
# ------------------------------------------------------------------------------------------

def chunk_delta_rule(q, k, v, beta, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
                     chunk_size=64, state_dtype=None, output_dtype=None,
                     use_qk_l2norm_in_kernel="true", **_options):
    from fla.ops.delta_rule import chunk_delta_rule as fla_fn
    hf = _hf(head_first)
    q, k, v, beta = (_in(hf, x) for x in (q, k, v, beta))
    # FLA asserts q is not fp32 here; that refusal reaches lav as this case's error
    o, ht = fla_fn(q=q, k=k, v=v, beta=beta, scale=_scale(scale, k), initial_state=_state(h0),
                   output_final_state=True,
                   use_qk_l2norm_in_kernel=_flag(use_qk_l2norm_in_kernel, True),
                   cu_seqlens=_offsets(cu_seqlens, q), chunk_size=_chunk(chunk_size))
    return _out(hf, o), ht


def recurrent_delta_rule(q, k, v, beta, h0=None, *, scale=None, head_first=False,
                         cu_seqlens=None, chunk_size=None, state_dtype=None, output_dtype=None,
                         use_qk_l2norm_in_kernel="true", **_options):
    from fla.ops.delta_rule import fused_recurrent_delta_rule as fla_fn
    hf = _hf(head_first)
    q, k, v, beta = (_in(hf, x) for x in (q, k, v, beta))
    o, ht = fla_fn(q=q, k=k, v=v, beta=beta, scale=_scale(scale, k), initial_state=_state(h0),
                   output_final_state=True,
                   use_qk_l2norm_in_kernel=_flag(use_qk_l2norm_in_kernel, True),
                   cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# gated_delta_rule: S' = exp(g) S, u = beta (v - S'^T k), S = S' + k u^T; GVA (HV = G H) is
# FLA's own. The options are FLA's flags of the same names; A_log and dt_bias ([HV]) are FLA's
# in-kernel gate -exp(A_log) softplus(g + dt_bias).
# ------------------------------------------------------------------------------------------

def _gdr_flags(use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
               allow_neg_eigval):
    return dict(use_qk_l2norm_in_kernel=_flag(use_qk_l2norm_in_kernel, True),
                use_gate_in_kernel=_flag(use_gate_in_kernel, False),
                use_beta_sigmoid_in_kernel=_flag(use_beta_sigmoid_in_kernel, False),
                allow_neg_eigval=_flag(allow_neg_eigval, False))


def chunk_gated_delta_rule(q, k, v, g, beta, A_log=None, dt_bias=None, h0=None, *, scale=None,
                           head_first=False, cu_seqlens=None, chunk_size=64, state_dtype=None,
                           output_dtype=None, use_qk_l2norm_in_kernel="true",
                           use_gate_in_kernel="false", use_beta_sigmoid_in_kernel="false",
                           allow_neg_eigval="false", **_options):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_fn
    hf = _hf(head_first)
    flags = _gdr_flags(use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                       allow_neg_eigval)
    q, k, v, g, beta = (_in(hf, x) for x in (q, k, v, g, beta))
    gate = {}
    if flags["use_gate_in_kernel"]:
        gate = dict(A_log=A_log, dt_bias=dt_bias)
    o, ht = fla_fn(q=q, k=k, v=v, g=g, beta=beta, scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q), chunk_size=_chunk(chunk_size),
                   **flags, **gate)
    return _out(hf, o), ht


def recurrent_gated_delta_rule(q, k, v, g, beta, A_log=None, dt_bias=None, h0=None, *,
                               scale=None, head_first=False, cu_seqlens=None, chunk_size=None,
                               state_dtype=None, output_dtype=None,
                               use_qk_l2norm_in_kernel="true", use_gate_in_kernel="false",
                               use_beta_sigmoid_in_kernel="false", allow_neg_eigval="false",
                               **_options):
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_fn
    hf = _hf(head_first)
    flags = _gdr_flags(use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                       allow_neg_eigval)
    q, k, v, g, beta = (_in(hf, x) for x in (q, k, v, g, beta))
    if not flags["use_gate_in_kernel"]:
        A_log = dt_bias = None
    # forward only in FLA 0.6.0: its backward raises NotImplementedError
    o, ht = fla_fn(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias,
                   scale=_scale(scale, k), initial_state=_state(h0), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q), **flags)
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# kda: gated delta rule with a per-key-dimension decay g [B, T, HV, K]; A_log [HV],
# dt_bias [HV*K]; lower_bound = lb gives FLA's lb * sigmoid(exp(A_log) (g + dt_bias)) gate
# ------------------------------------------------------------------------------------------

def _kda_args(use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
              allow_neg_eigval, lower_bound, A_log, dt_bias):
    flags = _gdr_flags(use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                       allow_neg_eigval)
    lb = _lower_bound(lower_bound)
    extra = {"lower_bound": lb if flags["use_gate_in_kernel"] else None}
    if flags["use_gate_in_kernel"]:
        extra.update(A_log=A_log, dt_bias=dt_bias)
    return flags, extra


def chunk_kda(q, k, v, g, beta, A_log=None, dt_bias=None, h0=None, *, scale=None,
              head_first=False, cu_seqlens=None, chunk_size=64, state_dtype=None,
              output_dtype=None, use_qk_l2norm_in_kernel="true", use_gate_in_kernel="false",
              use_beta_sigmoid_in_kernel="false", allow_neg_eigval="false", lower_bound="none",
              **_options):
    from fla.ops.kda import chunk_kda as fla_fn
    hf = _hf(head_first)
    flags, extra = _kda_args(use_qk_l2norm_in_kernel, use_gate_in_kernel,
                             use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, A_log,
                             dt_bias)
    q, k, v, g, beta = (_in(hf, x) for x in (q, k, v, g, beta))
    # chunk_kda asserts an fp32 initial state; it takes chunk sizes 32 and 64 only
    o, ht = fla_fn(q=q, k=k, v=v, g=g, beta=beta, scale=_scale(scale, k),
                   initial_state=_state(h0, fp32=True), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q), chunk_size=_chunk(chunk_size),
                   **flags, **extra)
    return _out(hf, o), ht


def recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None, h0=None, *, scale=None,
                  head_first=False, cu_seqlens=None, chunk_size=None, state_dtype=None,
                  output_dtype=None, use_qk_l2norm_in_kernel="true", use_gate_in_kernel="false",
                  use_beta_sigmoid_in_kernel="false", allow_neg_eigval="false",
                  lower_bound="none", **_options):
    from fla.ops.kda import fused_recurrent_kda as fla_fn
    hf = _hf(head_first)
    flags, extra = _kda_args(use_qk_l2norm_in_kernel, use_gate_in_kernel,
                             use_beta_sigmoid_in_kernel, allow_neg_eigval, lower_bound, A_log,
                             dt_bias)
    extra.setdefault("A_log", None)
    extra.setdefault("dt_bias", None)
    q, k, v, g, beta = (_in(hf, x) for x in (q, k, v, g, beta))
    # fused_recurrent_kda is FLA's inference kernel: no autograd graph, so no gradients
    o, ht = fla_fn(q=q, k=k, v=v, g=g, beta=beta, scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q), **flags, **extra)
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# rwkv6: o = scale [S_{t-1}^T q + (q . (u * k)) v], S = diag(exp(w)) S + k v^T.
# lav's q is FLA's r; w is a natural-log decay in both.
# ------------------------------------------------------------------------------------------

def chunk_rwkv6(q, k, v, w, u, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
                chunk_size=64, state_dtype=None, output_dtype=None, **_options):
    from fla.ops.rwkv6 import chunk_rwkv6 as fla_fn
    hf = _hf(head_first)
    q, k, v, w = (_in(hf, x) for x in (q, k, v, w))
    o, ht = fla_fn(r=q, k=k, v=v, w=w, u=u.contiguous(), scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q), chunk_size=_chunk(chunk_size))
    return _out(hf, o), ht


def recurrent_rwkv6(q, k, v, w, u, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
                    chunk_size=None, state_dtype=None, output_dtype=None, **_options):
    from fla.ops.rwkv6 import fused_recurrent_rwkv6 as fla_fn
    hf = _hf(head_first)
    q, k, v, w = (_in(hf, x) for x in (q, k, v, w))
    o, ht = fla_fn(r=q, k=k, v=v, w=w, u=u.contiguous(), scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# rwkv7: S = diag(exp(w)) S + b (a^T S) + k v^T, o = scale S^T q (iplr: no w).
# This is the K x V orientation FLA's DPLR/IPLR kernels compute, with the same a and b
# (FLA's docstrings write the V x K transpose S (D + a b^T) + v k^T); lav's q is FLA's r.
#
# lav's option b (neg_a | input) shares its name with the tensor b, so it arrives as b_option.
# ------------------------------------------------------------------------------------------

def _rwkv7_b(a, b, b_option):
    mode = "input" if b_option is None else str(b_option)
    if mode == "input":
        if b is None:
            raise ValueError("rwkv7 with b = input needs the b tensor")
        return b
    if mode != "neg_a":
        raise ValueError(f"rwkv7 option b must be neg_a or input, got {mode!r}")
    neg_a = -a.detach()  # negation is exact in every dtype
    if b is None:
        return neg_a
    return _GradTo.apply(b, neg_a)


def _rwkv7_args(hf, q, k, v, a, b, w, form, b_option):
    form = "dplr" if form is None else str(form)
    if form not in ("dplr", "iplr"):
        raise ValueError(f"rwkv7 form must be dplr or iplr, got {form!r}")
    b = _rwkv7_b(a, b, b_option)
    q, k, v, a, b, w = (_in(hf, x) for x in (q, k, v, a, b, w))
    if form == "dplr" and w is None:
        raise ValueError("rwkv7 form=dplr needs the decay w")
    return form, q, k, v, a, b, w


def chunk_rwkv7(q, k, v, a, b=None, w=None, h0=None, *, scale=None, head_first=False,
                cu_seqlens=None, chunk_size=64, state_dtype=None, output_dtype=None,
                form="dplr", b_option=None, **_options):
    hf = _hf(head_first)
    form, q, k, v, a, b, w = _rwkv7_args(hf, q, k, v, a, b, w, form, b_option)
    common = dict(scale=_scale(scale, k), initial_state=_state(h0), output_final_state=True,
                  cu_seqlens=_offsets(cu_seqlens, q), chunk_size=_chunk(chunk_size))
    if form == "dplr":
        from fla.ops.rwkv7 import chunk_rwkv7 as fla_fn
        o, ht = fla_fn(r=q, w=w, k=k, v=v, a=a, b=b, **common)
    else:
        # forward only in FLA 0.6.0: its backward raises NotImplementedError
        from fla.ops.generalized_delta_rule import chunk_iplr_delta_rule as fla_fn
        o, ht = fla_fn(q=q, k=k, v=v, a=a, b=b, **common)
    return _out(hf, o), ht


def recurrent_rwkv7(q, k, v, a, b=None, w=None, h0=None, *, scale=None, head_first=False,
                    cu_seqlens=None, chunk_size=None, state_dtype=None, output_dtype=None,
                    form="dplr", b_option=None, **_options):
    hf = _hf(head_first)
    form, q, k, v, a, b, w = _rwkv7_args(hf, q, k, v, a, b, w, form, b_option)
    common = dict(scale=_scale(scale, k), initial_state=_state(h0), output_final_state=True,
                  cu_seqlens=_offsets(cu_seqlens, q))
    if form == "dplr":
        # forward only in FLA 0.6.0 (fused_recurrent_dplr_delta_rule's backward raises)
        from fla.ops.rwkv7 import fused_recurrent_rwkv7 as fla_fn
        o, ht = fla_fn(r=q, w=w, k=k, v=v, a=a, b=b, **common)
    else:
        from fla.ops.generalized_delta_rule import fused_recurrent_iplr_delta_rule as fla_fn
        o, ht = fla_fn(q=q, k=k, v=v, a=a, b=b, **common)
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# comba: u = beta (v - S_{t-1}^T p), S = exp(g) S_{t-1} + k u^T (the correction reads the
# state before the decay: FLA's kernels and naive_chunk_comba; FLA's naive_recurrent_comba
# decays first and disagrees with them). The in-kernel l2norm normalises q, k and p.
# ------------------------------------------------------------------------------------------

def chunk_comba(q, k, v, p, g, beta, h0=None, *, scale=None, head_first=False, cu_seqlens=None,
                chunk_size=None, state_dtype=None, output_dtype=None,
                use_qk_l2norm_in_kernel="true", **_options):
    from fla.ops.comba import chunk_comba as fla_fn
    hf = _hf(head_first)
    q, k, v, p, g, beta = (_in(hf, x) for x in (q, k, v, p, g, beta))
    o, ht = fla_fn(q=q, k=k, v=v, p=p, g=g, beta=beta, scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   use_qk_l2norm_in_kernel=_flag(use_qk_l2norm_in_kernel, True),
                   cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht


def recurrent_comba(q, k, v, p, g, beta, h0=None, *, scale=None, head_first=False,
                    cu_seqlens=None, chunk_size=None, state_dtype=None, output_dtype=None,
                    use_qk_l2norm_in_kernel="true", **_options):
    from fla.ops.comba import fused_recurrent_comba as fla_fn
    hf = _hf(head_first)
    q, k, v, p, g, beta = (_in(hf, x) for x in (q, k, v, p, g, beta))
    # forward only in FLA 0.6.0: its backward raises NotImplementedError
    o, ht = fla_fn(q=q, k=k, p=p, v=v, g=g, beta=beta, scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   use_qk_l2norm_in_kernel=_flag(use_qk_l2norm_in_kernel, True),
                   cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# gated_delta_product: k, v, beta carry num_householder sub-steps per token interleaved along
# time ([B, T*n, H, .]), as FLA lays them out; cu_seqlens are token offsets in both. FLA 0.6.0
# applies scale (its kernels and naive_recurrent_gated_delta_product alike).
# ------------------------------------------------------------------------------------------

def chunk_gated_delta_product(q, k, v, beta, g=None, h0=None, *, scale=None, head_first=False,
                              cu_seqlens=None, chunk_size=None, state_dtype=None,
                              output_dtype=None, gate="g", num_householder="1",
                              use_qk_l2norm_in_kernel="true", **_options):
    from fla.ops.gated_delta_product import chunk_gated_delta_product as fla_fn
    hf = _hf(head_first)
    gate = "g" if gate is None else str(gate)
    if gate not in ("g", "none"):
        raise ValueError(f"gated_delta_product gate must be g or none, got {gate!r}")
    if gate == "none":
        g = None
    q, k, v, beta, g = (_in(hf, x) for x in (q, k, v, beta, g))
    n = int(num_householder)
    if k.shape[1] != q.shape[1] * n:
        raise ValueError(f"gated_delta_product: k has {k.shape[1]} rows along time, "
                         f"expected T * num_householder = {q.shape[1]} * {n}")
    # FLA asserts q is not fp32 here; its chunk size is fixed at 64 sub-steps
    o, ht = fla_fn(q=q, k=k, v=v, g=g, beta=beta, num_householder=n, scale=_scale(scale, k),
                   initial_state=_state(h0), output_final_state=True,
                   use_qk_l2norm_in_kernel=_flag(use_qk_l2norm_in_kernel, True),
                   cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht


# ------------------------------------------------------------------------------------------
# mesa_net: Hkk = e^g Hkk + beta k k^T, Hkv = e^g Hkv + beta k v^T,
# o = Hkv^T (Hkk + diag(lamb))^-1 q, no scale; FLA solves by max_CG_iteration steps of
# conjugate gradient (lav's max_cg_iterations; "K" means K steps)
# ------------------------------------------------------------------------------------------

def chunk_mesa_net(q, k, v, g, beta, lamb, h_kk0=None, h_kv0=None, *, scale=None,
                   head_first=False, cu_seqlens=None, chunk_size=None, state_dtype=None,
                   output_dtype=None, max_cg_iterations="K", use_qk_l2norm_in_kernel="true",
                   **_options):
    from fla.ops.mesa_net import chunk_mesa_net as fla_fn
    hf = _hf(head_first)
    q, k, v, g, beta = (_in(hf, x) for x in (q, k, v, g, beta))
    iters = str(max_cg_iterations)
    iters = int(k.shape[-1]) if iters == "K" else int(iters)
    # chunk_mesa_net asserts fp32 initial states and K == V; it has no scale (lav passes one,
    # FLA's op has none, so it is not used) and casts q and k to fp16 inside
    o, ht_kk, ht_kv = fla_fn(q=q, k=k, v=v, g=g, beta=beta, lamb=lamb.contiguous(),
                             h_kk_init=_state(h_kk0, fp32=True),
                             h_kv_init=_state(h_kv0, fp32=True), output_final_state=True,
                             max_CG_iteration=iters,
                             use_qk_l2norm_in_kernel=_flag(use_qk_l2norm_in_kernel, True),
                             cu_seqlens=_offsets(cu_seqlens, q))
    return _out(hf, o), ht_kk, ht_kv


# ------------------------------------------------------------------------------------------
# based / rebased: o_t = sum_s f(x_ts) v_s / (sum_s f(x_ts) + eps), x_ts = scale q_t . k_s;
# no state, no cu_seqlens in FLA (a packed batch runs one call per sequence)
# ------------------------------------------------------------------------------------------

def _feature_map(run, hf, q, k, v, cu_seqlens):
    q, k, v = (_in(hf, x) for x in (q, k, v))
    if cu_seqlens is None:
        o = run(q=q, k=k, v=v)
    else:
        def empty(i):
            return v[:, :0]
        parts = _per_sequence(run, _offsets(cu_seqlens, q), {"q": q, "k": k, "v": v}, {}, empty)
        o = torch.cat(parts, dim=1)
    return _out(hf, o)


def parallel_based(q, k, v, *, scale=None, head_first=False, cu_seqlens=None, chunk_size=None,
                   state_dtype=None, output_dtype=None, use_norm="true", **_options):
    from fla.ops.based import parallel_based as fla_fn
    s, norm = _scale(scale, k), _flag(use_norm, True)

    def run(q, k, v):
        return fla_fn(q, k, v, scale=s, use_norm=norm)
    return (_feature_map(run, _hf(head_first), q, k, v, cu_seqlens),)


def chunk_based(q, k, v, *, scale=None, head_first=False, cu_seqlens=None, chunk_size=None,
                state_dtype=None, output_dtype=None, use_norm="true", **_options):
    from fla.ops.based import fused_chunk_based as fla_fn
    s, norm = _scale(scale, k), _flag(use_norm, True)

    # FLA's fused chunk form takes K <= 16 and fixes its chunk at 16 rows
    def run(q, k, v):
        return fla_fn(q, k, v, scale=s, use_norm=norm)
    return (_feature_map(run, _hf(head_first), q, k, v, cu_seqlens),)


def parallel_rebased(q, k, v, *, scale=None, head_first=False, cu_seqlens=None,
                     chunk_size=None, state_dtype=None, output_dtype=None, use_scale="true",
                     use_normalize="true", **_options):
    from fla.ops.rebased import parallel_rebased as fla_fn
    # ReBased's scale is K^-0.5 or 1 by use_scale, as lav's family reads it (the `scale`
    # setting is not used); eps is FLA's 1e-5, lav's too
    use_s, norm = _flag(use_scale, True), _flag(use_normalize, True)

    def run(q, k, v):
        return fla_fn(q, k, v, eps=1e-5, use_scale=use_s, use_normalize=norm)
    return (_feature_map(run, _hf(head_first), q, k, v, cu_seqlens),)


# ------------------------------------------------------------------------------------------
# gsa: two gated passes over M slots (M = s's last size, lav's option `slots`):
# Hk = Hk diag(exp g) + k s^T, p = softmax(scale Hk^T q), Hv = diag(exp g) Hv + s v^T,
# o = Hv^T p. FLA's initial_state is the pair (hk0, hv0); g is always given (FLA's g = None
# form derives s and g from s, which lav's family does not use).
# ------------------------------------------------------------------------------------------

def _gsa_state(hk0, hv0):
    if hk0 is None and hv0 is None:
        return None
    return (_state(hk0), _state(hv0))


def _gsa_results(hf, o, final_state):
    hkt, hvt = (tuple(final_state) + (None, None))[:2] if final_state else (None, None)
    return _out(hf, o), hkt, hvt


def chunk_gsa(q, k, v, s, g, hk0=None, hv0=None, *, scale=None, head_first=False,
              cu_seqlens=None, chunk_size=64, state_dtype=None, output_dtype=None, slots=None,
              **_options):
    from fla.ops.gsa import chunk_gsa as fla_fn
    hf = _hf(head_first)
    q, k, v, s, g = (_in(hf, x) for x in (q, k, v, s, g))
    o, final_state = fla_fn(q=q, k=k, v=v, s=s, g=g, scale=_scale(scale, k),
                            initial_state=_gsa_state(hk0, hv0), output_final_state=True,
                            cu_seqlens=_offsets(cu_seqlens, q), chunk_size=_chunk(chunk_size))
    return _gsa_results(hf, o, final_state)


def recurrent_gsa(q, k, v, s, g, hk0=None, hv0=None, *, scale=None, head_first=False,
                  cu_seqlens=None, chunk_size=None, state_dtype=None, output_dtype=None,
                  slots=None, **_options):
    from fla.ops.gsa import fused_recurrent_gsa as fla_fn
    hf = _hf(head_first)
    q, k, v, s, g = (_in(hf, x) for x in (q, k, v, s, g))
    o, final_state = fla_fn(q=q, k=k, v=v, s=s, g=g, scale=_scale(scale, k),
                            initial_state=_gsa_state(hk0, hv0), output_final_state=True,
                            cu_seqlens=_offsets(cu_seqlens, q))
    return _gsa_results(hf, o, final_state)
