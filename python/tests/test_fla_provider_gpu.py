"""GPU test of lav's flash-linear-attention provider (lav.providers.fla).

For every family and variant the provider offers, this calls the provider function the way lav
does (tensors by lav's names, settings and string options as keywords) with small random inputs
(B=2, T=100, H=2, K=V=32, or what the family needs), in bf16 and fp32, head_last and
head_first, and once packed (B=1, cu_seqlens [0, 0, 37, 100]), runs the forward and the
backward through autograd, and checks

- the outputs' number, shapes and finiteness, and the gradients' shapes and finiteness;
- that head_first and head_last give the same results (after transposing back);
- agreement with a float64 reference of lav's definition of the family (reference/<f>.md),
  written here in plain torch and fed the same rounded inputs: fp32 within a tight bound, bf16
  within a loose one (printed either way).

The references are lav's math rather than FLA's ``naive.py`` files: those are FLA's own
conventions (fixed ``K^-0.5`` scales, head-first layouts, no in-kernel options, and comba's
``naive_recurrent_comba`` disagrees with its kernels), so checking against lav's definitions
also checks the provider's translation from lav's conventions to FLA's. (That FLA's naive
references agree with these, and the provider's translation on the CPU with FLA's kernels faked
by them, is test_fla_provider_translation.py.)

What FLA 0.6.0 is known to lack (fp32 refusals, forward-only kernels, chunk_hgrn's backward) is
listed in KNOWN and reported, not failed; so is a backward FLA refuses on the machine's Triton
and GPU (on Hopper with Triton < 3.7.1, the gated delta rule's, FLA issue #640). Skipped
without CUDA or without FLA. Run with
``python -m pytest python/tests -x -q`` or as a script (``python python/tests/<this file>``);
``LAV_FLA_FAMILIES=gla,kda`` limits the run to some families, ``LAV_FLA_QUICK=1`` to lav's
default options in one dtype and no varlen case, ``LAV_FLA_VERBOSE=1`` prints each sub-case's
time. A cold Triton cache makes the first run slow, since FLA compiles and autotunes every
kernel: minutes per family (one case of rwkv7's chunk form took 7 minutes on an H100).
"""

from __future__ import annotations

import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the folder holding the `lav` package

try:
    import pytest
except ImportError:  # run as a script without pytest
    pytest = None


def _environment():
    """(torch or None, provider module or None, why the GPU tests skip or None)."""
    try:
        import torch
    except Exception as exc:  # a broken CUDA install raises more than ImportError
        return None, None, f"torch is not importable ({type(exc).__name__}: {exc})"
    try:
        from lav.providers import fla as provider
    except Exception as exc:
        return torch, None, f"the FLA provider is not importable ({exc})"
    if not torch.cuda.is_available():
        return torch, provider, "no CUDA device"
    return torch, provider, None


torch, P, SKIP = _environment()
PROVIDER_SKIP = None if P is not None else (SKIP or "no provider")
if torch is not None:
    import torch.nn.functional as F

DEVICE = "cuda"
B, T, H, K, V = 2, 100, 2, 32, 32
CU_SEQLENS = [0, 0, 37, 100]

# the (family -> variants) lav declares (`lav list --format json`)
LAV_VARIANTS = {
    "simple_gla": ("chunk", "recurrent"), "gla": ("chunk", "recurrent"),
    "hgrn": ("chunk", "recurrent"), "delta_rule": ("chunk", "recurrent"),
    "gated_delta_rule": ("chunk", "recurrent"), "kda": ("chunk", "recurrent"),
    "rwkv6": ("chunk", "recurrent"), "rwkv7": ("chunk", "recurrent"),
    "comba": ("chunk", "recurrent"), "gated_delta_product": ("chunk", "recurrent"),
    "mesa_net": ("chunk", "recurrent"), "based": ("parallel", "chunk", "recurrent"),
    "rebased": ("parallel", "chunk", "recurrent"), "gsa": ("chunk", "recurrent"),
}

# option sets per family: the first is lav's default (every option's first value) and runs the
# full matrix (bf16 and fp32, both layouts, varlen); the others run once (fp32, head_last)
OPTION_SETS = {
    "simple_gla": [{"gate": "g"}, {"gate": "g_gamma"}, {"gate": "none"}],
    "gla": [{}],
    "hgrn": [{}],
    "delta_rule": [{"use_qk_l2norm_in_kernel": "true"}, {"use_qk_l2norm_in_kernel": "false"}],
    "gated_delta_rule": [
        {"allow_neg_eigval": "false", "use_beta_sigmoid_in_kernel": "false",
         "use_gate_in_kernel": "false", "use_qk_l2norm_in_kernel": "true"},
        {"allow_neg_eigval": "true", "use_beta_sigmoid_in_kernel": "true",
         "use_gate_in_kernel": "true", "use_qk_l2norm_in_kernel": "true"},
    ],
    "kda": [
        {"allow_neg_eigval": "false", "lower_bound": "none", "use_beta_sigmoid_in_kernel": "false",
         "use_gate_in_kernel": "false", "use_qk_l2norm_in_kernel": "true"},
        {"allow_neg_eigval": "false", "lower_bound": "none", "use_beta_sigmoid_in_kernel": "true",
         "use_gate_in_kernel": "true", "use_qk_l2norm_in_kernel": "true"},
        {"allow_neg_eigval": "true", "lower_bound": "-5", "use_beta_sigmoid_in_kernel": "true",
         "use_gate_in_kernel": "true", "use_qk_l2norm_in_kernel": "true"},
    ],
    "rwkv6": [{}],
    "rwkv7": [{"b": "neg_a", "form": "dplr"}, {"b": "input", "form": "dplr"},
              {"b": "neg_a", "form": "iplr"}],
    "comba": [{"use_qk_l2norm_in_kernel": "true"}, {"use_qk_l2norm_in_kernel": "false"}],
    "gated_delta_product": [
        {"gate": "g", "num_householder": "2", "use_qk_l2norm_in_kernel": "true"},
        {"gate": "none", "num_householder": "1", "use_qk_l2norm_in_kernel": "true"},
        {"gate": "g", "num_householder": "3", "use_qk_l2norm_in_kernel": "false"},
    ],
    "mesa_net": [{"max_cg_iterations": "K", "use_qk_l2norm_in_kernel": "true"},
                 {"max_cg_iterations": "30", "use_qk_l2norm_in_kernel": "false"}],
    "based": [{"use_norm": "true"}, {"use_norm": "false"}],
    "rebased": [{"use_normalize": "true", "use_scale": "true"},
                {"use_normalize": "true", "use_scale": "false"},
                {"use_normalize": "false", "use_scale": "true"}],
    "gsa": [{"slots": "16"}],
}

OUTPUTS = {"mesa_net": ("o", "ht_kk", "ht_kv"), "gsa": ("o", "hkt", "hvt"),
           "based": ("o",), "rebased": ("o",)}
INPUTS = {"q", "k", "v", "x", "a", "b", "p", "s"}                  # the case's input dtype
GATES = {"g", "g_gamma", "beta", "A_log", "dt_bias", "w", "u", "lamb"}  # fp32 (lav's default)
STATES = {"h0", "hk0", "hv0", "h_kk0", "h_kv0"}                     # fp32 (lav's default)
TIMED = {"q", "k", "v", "x", "a", "b", "p", "s", "g", "beta", "w"}  # have a time axis
NO_GRAD = {"g_gamma"}

# known FLA 0.6.0 limits: (family, variant, option filter) -> what is expected
KNOWN = [
    # chunk_delta_rule and chunk_gated_delta_product assert their inputs are not fp32
    ("delta_rule", "chunk", {}, "fp32_refused"),
    ("gated_delta_product", "chunk", {}, "fp32_refused"),
    # forward-only kernels: their autograd backward raises, or their outputs carry no graph
    ("gated_delta_rule", "recurrent", {}, "no_backward"),
    ("comba", "recurrent", {}, "no_backward"),
    ("kda", "recurrent", {}, "no_backward"),
    ("rwkv7", "recurrent", {"form": "dplr"}, "no_backward"),
    ("rwkv7", "chunk", {"form": "iplr"}, "no_backward"),
    # chunk_hgrn's backward ignores dht and returns no dh0 (fused_recurrent_hgrn has both)
    ("hgrn", "chunk", {}, "grads_off"),
]

TOL = {  # rel_rmse bounds against the fp64 reference: (fp32, bf16)
    "default": (1e-2, 6e-2),
    "mesa_net": (3e-2, 8e-2),  # FLA's conjugate-gradient solve, fp16 q and k inside
}
SAME_LAYOUT_TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-3} if torch is not None else {}


def known(family, variant, opts, what):
    for f, v, filt, w in KNOWN:
        if (f, v, w) == (family, variant, what) and all(opts.get(a) == b for a, b in filt.items()):
            return True
    return False


def dims_of(family, opts):
    d = {"K": K, "V": V, "HV": H, "M": None, "n": 1}
    if family in ("based", "rebased"):
        d["K"] = 16  # fused_chunk_based takes K <= 16
    if family in ("gated_delta_rule", "kda"):
        d["HV"] = 2 * H  # grouped value heads
    if family == "gsa":
        d["M"] = int(opts.get("slots", "64"))
    if family == "gated_delta_product":
        d["n"] = int(opts["num_householder"])
    return d


# ------------------------------------------------------------------------------------------
# inputs (fp64 masters, head_last) and the fp64 references of lav's definitions
# ------------------------------------------------------------------------------------------

def make_inputs(family, opts, b, t, n_seq, seed):
    """name -> fp64 master tensor (CPU, head_last), as lav would draw the case."""
    gen = torch.Generator().manual_seed(seed)
    d = dims_of(family, opts)
    Kd, Vd, HV, M, nh = d["K"], d["V"], d["HV"], d["M"], d["n"]

    def R(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float64)

    def LS(*s):
        return F.logsigmoid(R(*s))

    def SIG(*s):
        return torch.sigmoid(R(*s))

    def U(*s):
        return torch.rand(*s, generator=gen, dtype=torch.float64)

    def unit(x):
        return x / x.norm(dim=-1, keepdim=True)

    l2 = opts.get("use_qk_l2norm_in_kernel", "true") == "true"
    x = {}
    if family == "simple_gla":
        x.update(q=R(b, t, H, Kd), k=R(b, t, H, Kd), v=R(b, t, H, Vd), h0=R(n_seq, H, Kd, Vd))
        if opts["gate"] == "g":
            x["g"] = LS(b, t, H)
        elif opts["gate"] == "g_gamma":  # retention's decays
            x["g_gamma"] = torch.log1p(-torch.pow(2.0, -5.0 - torch.arange(H, dtype=torch.float64)))
    elif family == "gla":
        x.update(q=R(b, t, H, Kd), k=R(b, t, H, Kd), v=R(b, t, H, Vd), g=LS(b, t, H, Kd),
                 h0=R(n_seq, H, Kd, Vd))
    elif family == "hgrn":
        x.update(x=R(b, t, H, Kd), g=LS(b, t, H, Kd), h0=R(n_seq, H, Kd))
    elif family == "delta_rule":
        k = R(b, t, H, Kd)
        x.update(q=R(b, t, H, Kd), k=k if l2 else unit(k), v=R(b, t, H, Vd), beta=SIG(b, t, H),
                 h0=R(n_seq, H, Kd, Vd))
    elif family in ("gated_delta_rule", "kda"):
        k = R(b, t, H, Kd)
        x.update(q=R(b, t, H, Kd), k=k if l2 else unit(k), v=R(b, t, HV, Vd),
                 h0=R(n_seq, HV, Kd, Vd))
        gshape = (b, t, HV) if family == "gated_delta_rule" else (b, t, HV, Kd)
        if opts["use_gate_in_kernel"] == "true":
            x["g"] = R(*gshape)
            x["A_log"] = torch.log(1 + 3 * U(HV))
            x["dt_bias"] = 0.5 * R(HV if family == "gated_delta_rule" else HV * Kd)
        else:
            x["g"] = LS(*gshape)
        x["beta"] = R(b, t, HV) if opts["use_beta_sigmoid_in_kernel"] == "true" else SIG(b, t, HV)
    elif family == "rwkv6":
        x.update(q=R(b, t, H, Kd), k=R(b, t, H, Kd), v=R(b, t, H, Vd), w=LS(b, t, H, Kd),
                 u=0.5 * R(H, Kd), h0=R(n_seq, H, Kd, Vd))
    elif family == "rwkv7":
        a = unit(R(b, t, H, Kd))
        bb = -a * SIG(b, t, H, 1) if opts["b"] == "input" else R(b, t, H, Kd) * Kd ** -0.5
        x.update(q=R(b, t, H, Kd), k=R(b, t, H, Kd) * Kd ** -0.5, v=R(b, t, H, Vd), a=a, b=bb,
                 h0=R(n_seq, H, Kd, Vd))
        if opts["form"] == "dplr":
            x["w"] = LS(b, t, H, Kd)
    elif family == "comba":
        k = R(b, t, H, Kd)
        p = k + 0.3 * R(b, t, H, Kd)
        x.update(q=R(b, t, H, Kd), k=k if l2 else unit(k), p=p if l2 else unit(p),
                 v=R(b, t, H, Vd), g=LS(b, t, H), beta=SIG(b, t, H), h0=R(n_seq, H, Kd, Vd))
    elif family == "gated_delta_product":
        k = R(b, t * nh, H, Kd)
        x.update(q=R(b, t, H, Kd), k=k if l2 else unit(k), v=R(b, t * nh, H, Vd),
                 beta=SIG(b, t * nh, H), h0=R(n_seq, H, Kd, Vd))
        if opts["gate"] == "g":
            x["g"] = LS(b, t, H)
    elif family == "mesa_net":
        q, k = R(b, t, H, Kd), R(b, t, H, Kd)
        x.update(q=q if l2 else unit(q), k=k if l2 else unit(k), v=R(b, t, H, Vd),
                 g=LS(b, t, H), beta=SIG(b, t, H), lamb=0.25 + U(H, Kd),
                 h_kk0=torch.ones(n_seq, H, Kd, Kd, dtype=torch.float64) / Kd,
                 h_kv0=R(n_seq, H, Kd, Vd))
    elif family in ("based", "rebased"):
        x.update(q=R(b, t, H, Kd), k=R(b, t, H, Kd), v=R(b, t, H, Vd))
    elif family == "gsa":
        x.update(q=R(b, t, H, Kd), k=R(b, t, H, Kd), v=R(b, t, H, Vd), s=R(b, t, H, M),
                 g=LS(b, t, H, M), hk0=R(n_seq, H, Kd, M), hv0=R(n_seq, H, M, Vd))
    else:
        raise KeyError(family)
    return x


def l2n(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def softplus(x):
    return torch.logaddexp(x, torch.zeros_like(x))  # exact at every x


def mv(S, x):
    """S^T x per batch and head: S [B, H, K, V], x [B, H, K] -> [B, H, V]."""
    return (S * x[..., None]).sum(-2)


def outer(x, y):
    return x[..., :, None] * y[..., None, :]


def ref_dense(family, x, opts, scale):
    """lav's definition on one dense batch (fp64, head_last); states [B, ...]."""
    l2 = opts.get("use_qk_l2norm_in_kernel", "true") == "true"
    if family in ("simple_gla", "gla", "rwkv6"):
        q, k, v, S = x["q"], x["k"], x["v"], x["h0"]
        bsz, tt = q.shape[:2]
        if family == "simple_gla":
            if "g" in x:
                g = x["g"][..., None, None]
            elif "g_gamma" in x:
                g = x["g_gamma"].expand(bsz, tt, -1)[..., None, None]
            else:
                g = torch.zeros(bsz, tt, q.shape[2], 1, 1, dtype=q.dtype, device=q.device)
        else:
            g = (x["g"] if family == "gla" else x["w"])[..., None]
        o = []
        for i in range(tt):
            if family == "rwkv6":  # the output reads the state before the step, plus the bonus
                bonus = (q[:, i] * x["u"] * k[:, i]).sum(-1, keepdim=True) * v[:, i]
                o.append(scale * (mv(S, q[:, i]) + bonus))
            S = torch.exp(g[:, i]) * S + outer(k[:, i], v[:, i])
            if family != "rwkv6":
                o.append(scale * mv(S, q[:, i]))
        return {"o": torch.stack(o, 1), "ht": S}
    if family == "hgrn":
        h, o = x["h0"], []
        for i in range(x["x"].shape[1]):
            h = torch.exp(x["g"][:, i]) * h + x["x"][:, i]
            o.append(h)
        return {"o": torch.stack(o, 1), "ht": h}
    if family in ("delta_rule", "gated_delta_rule", "kda"):
        q, k, v, beta, S = x["q"], x["k"], x["v"], x["beta"], x["h0"]
        if l2:
            q, k = l2n(q), l2n(k)
        HV = v.shape[2]
        q, k = (y.repeat_interleave(HV // y.shape[2], dim=2) for y in (q, k))
        if family == "delta_rule":
            g = torch.zeros_like(beta)[..., None]
        else:
            g = x["g"]
            if opts["use_gate_in_kernel"] == "true":
                A = torch.exp(x["A_log"])
                if family == "gated_delta_rule":
                    g = -A * softplus(g + x["dt_bias"])
                else:
                    z = g + x["dt_bias"].view(HV, -1)
                    lb = opts.get("lower_bound", "none")
                    g = (float(lb) * torch.sigmoid(A[:, None] * z) if lb != "none"
                         else -A[:, None] * softplus(z))
            g = g[..., None] if family == "kda" else g[..., None, None]
            if opts["use_beta_sigmoid_in_kernel"] == "true":
                beta = torch.sigmoid(beta) * (2.0 if opts["allow_neg_eigval"] == "true" else 1.0)
        o = []
        for i in range(q.shape[1]):
            S = torch.exp(g[:, i]) * S if family != "delta_rule" else S
            u = beta[:, i, :, None] * (v[:, i] - mv(S, k[:, i]))
            S = S + outer(k[:, i], u)
            o.append(scale * mv(S, q[:, i]))
        return {"o": torch.stack(o, 1), "ht": S}
    if family == "rwkv7":
        q, k, v, a, b, S = x["q"], x["k"], x["v"], x["a"], x["b"], x["h0"]
        o = []
        for i in range(q.shape[1]):
            ha = mv(S, a[:, i])  # a^T S, read before the decay
            D = torch.exp(x["w"][:, i])[..., None] if "w" in x else 1.0
            S = D * S + outer(b[:, i], ha) + outer(k[:, i], v[:, i])
            o.append(scale * mv(S, q[:, i]))
        return {"o": torch.stack(o, 1), "ht": S}
    if family == "comba":
        q, k, p, v, S = x["q"], x["k"], x["p"], x["v"], x["h0"]
        if l2:
            q, k, p = l2n(q), l2n(k), l2n(p)
        o = []
        for i in range(q.shape[1]):  # the correction reads the state before the decay
            u = x["beta"][:, i, :, None] * (v[:, i] - mv(S, p[:, i]))
            S = torch.exp(x["g"][:, i])[..., None, None] * S + outer(k[:, i], u)
            o.append(scale * mv(S, q[:, i]))
        return {"o": torch.stack(o, 1), "ht": S}
    if family == "gated_delta_product":
        q, k, v, beta, S = x["q"], x["k"], x["v"], x["beta"], x["h0"]
        nh = k.shape[1] // q.shape[1]
        if l2:
            q, k = l2n(q), l2n(k)
        o = []
        for i in range(q.shape[1]):
            if "g" in x:
                S = torch.exp(x["g"][:, i])[..., None, None] * S
            for j in range(nh):
                r = i * nh + j
                u = beta[:, r, :, None] * (v[:, r] - mv(S, k[:, r]))
                S = S + outer(k[:, r], u)
            o.append(scale * mv(S, q[:, i]))
        return {"o": torch.stack(o, 1), "ht": S}
    if family == "mesa_net":
        q, k, v, Hkk, Hkv = x["q"], x["k"], x["v"], x["h_kk0"], x["h_kv0"]
        if l2:
            q, k = l2n(q), l2n(k)
        lam = torch.diag_embed(x["lamb"])
        o = []
        for i in range(q.shape[1]):
            e = torch.exp(x["g"][:, i])[..., None, None]
            bk = x["beta"][:, i, :, None] * k[:, i]
            Hkk = e * Hkk + outer(bk, k[:, i])
            Hkv = e * Hkv + outer(bk, v[:, i])
            xs = torch.linalg.solve(Hkk + lam, q[:, i][..., None])[..., 0]
            o.append(mv(Hkv, xs))
        return {"o": torch.stack(o, 1), "ht_kk": Hkk, "ht_kv": Hkv}
    if family in ("based", "rebased"):
        q, k, v = (y.transpose(1, 2) for y in (x["q"], x["k"], x["v"]))  # [B, H, T, D]
        tt = q.shape[2]
        if family == "rebased":
            scale = q.shape[-1] ** -0.5 if opts["use_scale"] == "true" else 1.0
        X = scale * q @ k.transpose(-1, -2)
        f = 1 + X + X * X / 2 if family == "based" else X * X
        f = f.masked_fill(~torch.ones(tt, tt, dtype=torch.bool, device=q.device).tril(), 0.0)
        o = f @ v
        norm = opts["use_norm"] if family == "based" else opts["use_normalize"]
        if norm == "true":
            o = o / (f.sum(-1, keepdim=True) + (1e-6 if family == "based" else 1e-5))
        return {"o": o.transpose(1, 2)}
    if family == "gsa":
        q, k, v, s, g, Hk, Hv = (x[n] for n in ("q", "k", "v", "s", "g", "hk0", "hv0"))
        o = []
        for i in range(q.shape[1]):
            e = torch.exp(g[:, i])
            Hk = Hk * e[..., None, :] + outer(k[:, i], s[:, i])
            p = torch.softmax(scale * mv(Hk, q[:, i]), -1)
            Hv = e[..., None] * Hv + outer(s[:, i], v[:, i])
            o.append(mv(Hv, p))
        return {"o": torch.stack(o, 1), "hkt": Hk, "hvt": Hv}
    raise KeyError(family)


def reference(family, x, opts, scale, cu_seqlens):
    """lav's definition, packed sequences one by one (states cut along N)."""
    if cu_seqlens is None:
        return ref_dense(family, x, opts, scale)
    nh = dims_of(family, opts)["n"]
    outs = []
    for i, (bos, eos) in enumerate(zip(cu_seqlens[:-1], cu_seqlens[1:])):
        part = {}
        for n, t in x.items():
            if n in STATES:
                part[n] = t[i:i + 1]
            elif n in TIMED:
                r = nh if (family == "gated_delta_product" and n in ("k", "v", "beta")) else 1
                part[n] = t[:, bos * r:eos * r]
            else:
                part[n] = t
        if eos == bos:  # an empty sequence keeps its initial states
            res = {"o": None}
            for name, st in zip(OUTPUTS.get(family, ("o", "ht"))[1:],
                                [n for n in ("h0", "hk0", "hv0", "h_kk0", "h_kv0") if n in x]):
                res[name] = part[st]
        else:
            res = ref_dense(family, part, opts, scale)
        outs.append(res)
    merged = {"o": torch.cat([r["o"] for r in outs if r["o"] is not None], 1)}
    for name in OUTPUTS.get(family, ("o", "ht"))[1:]:
        merged[name] = torch.cat([r[name] for r in outs], 0)
    return merged


# ------------------------------------------------------------------------------------------
# running one case through the provider
# ------------------------------------------------------------------------------------------

def rel_rmse(a, b):
    a, b = a.detach().double(), b.detach().double()
    den = b.norm()
    return float((a - b).norm() / den) if den > 0 else float((a - b).norm())


def to_layout(t, name, head_first):
    return t.transpose(1, 2) if (head_first and name in TIMED) else t


ENV_REFUSAL = "FLA refuses this backward on this Triton/GPU"


class Refused(Exception):
    pass


class NoBackward(Exception):
    pass


def run_provider(family, variant, opts, cast, cot, head_first, cu_seqlens, scale):
    """Calls the provider as lav does. Returns ({output: tensor, head_last}, {grad: tensor})."""
    fn = getattr(P, f"{variant}_{family}")
    leaves = {}
    kwargs = {}
    for n, t in cast.items():
        t = to_layout(t, n, head_first).contiguous().detach()
        if n not in NO_GRAD:
            t.requires_grad_(True)
            leaves[n] = t
        kwargs[n] = t
    options = dict(opts)
    if family == "rwkv7":  # lav declares a tensor and an option both named b
        options["b_option"] = options.pop("b")
    settings = dict(scale=scale, head_first=head_first, chunk_size=64,
                    cu_seqlens=(None if cu_seqlens is None else
                                torch.tensor(cu_seqlens, dtype=torch.int64, device=DEVICE)),
                    state_dtype=torch.float32, output_dtype=None)
    try:
        res = fn(**kwargs, **settings, **options)
    except (AssertionError, ValueError, NotImplementedError) as exc:
        raise Refused(f"{type(exc).__name__}: {exc}") from exc
    if isinstance(res, dict):
        res = tuple(res[n] for n in OUTPUTS.get(family, ("o", "ht")))
    names = OUTPUTS.get(family, ("o", "ht"))
    assert isinstance(res, tuple) and len(res) == len(names), \
        f"expected {len(names)} outputs {names}, got {type(res).__name__} of {len(res)}"
    outs = dict(zip(names, res))
    outs_hl = {n: (to_layout(t, "q", head_first) if n == "o" and t is not None else t)
               for n, t in outs.items()}
    grads = None
    live = [(outs[n], to_layout(cot[n].to(outs[n].dtype), "q", head_first and n == "o"))
            for n in names if outs[n] is not None and outs[n].requires_grad]
    try:
        if not live:
            raise NoBackward("no output carries an autograd graph")
        gs = torch.autograd.grad([o for o, _ in live], list(leaves.values()),
                                 [c for _, c in live], allow_unused=True)
        grads = {n: (to_layout(g, n, head_first) if g is not None else None)
                 for n, g in zip(leaves, gs)}
    except NotImplementedError as exc:
        grads = NoBackward(f"NotImplementedError: {str(exc)[:80]}")
    except RuntimeError as exc:
        # FLA 0.6.0 refuses some backward kernels on Hopper with Triton < 3.7.1 (its issue
        # #640: wrong gated chunk_bwd_dqkwg) unless tilelang is installed: an environment
        # limit, reported as such
        if "Triton" not in str(exc):
            raise
        grads = NoBackward(f"{ENV_REFUSAL}: {str(exc).splitlines()[0][:160]}")
    except NoBackward as exc:
        grads = exc
    return outs_hl, grads


def expected_shapes(family, cast):
    o_like = cast["x"] if family == "hgrn" else cast["v"]
    heads = o_like.shape[2]
    tt = cast["q"].shape[1] if "q" in cast else o_like.shape[1]
    shapes = {"o": (o_like.shape[0], tt, heads, o_like.shape[3])}
    states = {"ht": "h0", "hkt": "hk0", "hvt": "hv0", "ht_kk": "h_kk0", "ht_kv": "h_kv0"}
    for out, st in states.items():
        if st in cast:
            shapes[out] = tuple(cast[st].shape)
    return shapes


def run_case(family, variant, opts, dtype, head_first, varlen, seed=0):
    """One forward + backward; returns a dict of findings (raises AssertionError on a failure)."""
    b, n_seq = (1, len(CU_SEQLENS) - 1) if varlen else (B, B)
    cu = CU_SEQLENS if varlen else None
    master = make_inputs(family, opts, b, T, n_seq, seed)
    cast = {}
    for n, t in master.items():
        dt = dtype if n in INPUTS else torch.float32
        cast[n] = t.to(device=DEVICE, dtype=dt)
    d = dims_of(family, opts)
    scale = 1.0 if family == "rwkv7" else d["K"] ** -0.5  # lav's resolved defaults
    ref_in = {n: t.double().detach().requires_grad_(n not in NO_GRAD) for n, t in cast.items()}
    if family == "rwkv7" and opts["b"] == "neg_a":
        # the kernel's b is exactly -a; its gradient is measured on b, da is the direct part
        ref_in["b"] = (-cast["a"].double()).detach().requires_grad_(True)
    ref = reference(family, ref_in, opts, scale, cu)
    gen = torch.Generator().manual_seed(seed + 1)
    # cotangents rounded first (d_o in the case's dtype, state cotangents fp32), as lav does
    cot = {n: torch.randn(r.shape, generator=gen, dtype=torch.float64)
           .to(device=DEVICE, dtype=dtype if n == "o" else torch.float32).double()
           for n, r in ref.items()}
    names = OUTPUTS.get(family, ("o", "ht"))

    outs, grads = run_provider(family, variant, opts, cast, cot, head_first, cu, scale)
    shapes = expected_shapes(family, cast)
    found = {"outs": outs, "grads": grads, "err": {}}
    for n in names:
        o = outs[n]
        assert o is not None, f"{n} is None"
        assert tuple(o.shape) == shapes[n], f"{n} shape {tuple(o.shape)} != {shapes[n]}"
        assert torch.isfinite(o).all(), f"{n} has non-finite values"
        found["err"][n] = rel_rmse(o, ref[n])
    if isinstance(grads, NoBackward):
        found["no_backward"] = str(grads)
        return found
    ref_leaves = [n for n in ref_in if ref_in[n].requires_grad]
    ref_g = torch.autograd.grad([ref[n] for n in names], [ref_in[n] for n in ref_leaves],
                                [cot[n] for n in names], allow_unused=True)
    ref_g = dict(zip(ref_leaves, ref_g))
    found["missing"] = []
    for n, g in grads.items():
        if g is None:
            found["missing"].append("d" + n)
            continue
        assert tuple(g.shape) == tuple(cast[n].shape), \
            f"d{n} shape {tuple(g.shape)} != {tuple(cast[n].shape)}"
        assert torch.isfinite(g).all(), f"d{n} has non-finite values"
        if ref_g.get(n) is not None:
            found["err"]["d" + n] = rel_rmse(g, ref_g[n])
    return found


# ------------------------------------------------------------------------------------------
# one (family, variant): every sub-case, checks, one summary line
# ------------------------------------------------------------------------------------------

# LAV_FLA_QUICK=1: lav's default options only, in fp32 (bf16 where FLA refuses fp32), both
# layouts, no varlen: far fewer Triton compilations on a cold cache.
QUICK = os.environ.get("LAV_FLA_QUICK", "") not in ("", "0")
VERBOSE = os.environ.get("LAV_FLA_VERBOSE", "") not in ("", "0")
EMULATED = False  # set by test_fla_provider_translation.py while FLA's kernels are faked

SUMMARY: list[str] = []
LAV_FLA_SUMMARY = SUMMARY  # read by conftest.py's terminal summary


def worst(err):
    if not err:
        return "-", 0.0
    n = max(err, key=err.get)
    return n, err[n]


def check_variant(family, variant):
    t0 = time.time()
    notes, problems = [], []
    tol_fp32, tol_bf16 = TOL.get(family, TOL["default"])
    parts = []
    for idx, opts in enumerate(OPTION_SETS[family]):
        label = ",".join(f"{k}={v}" for k, v in opts.items() if v != OPTION_SETS[family][0].get(k))
        label = label or "default"
        reason = P.unsupported(family, variant, opts)
        if reason is not None:
            problems.append(f"[{label}] unsupported() refused: {reason}")
            continue
        fp32_refused = known(family, variant, opts, "fp32_refused")
        no_bwd = known(family, variant, opts, "no_backward")
        grads_off = known(family, variant, opts, "grads_off")
        main_dt = torch.bfloat16 if fp32_refused else torch.float32
        if QUICK:
            if idx > 0:
                continue
            cases = [(main_dt, False, False), (main_dt, True, False)]
        elif idx == 0:
            cases = [(torch.bfloat16, False, False), (torch.bfloat16, True, False),
                     (torch.float32, False, False), (torch.float32, True, False),
                     (main_dt, False, True)]
        else:
            cases = [(main_dt, False, False)]
        results = {}
        for dt, hf, vl in cases:
            key = (dt, hf, vl)
            tag = f"[{label}] {str(dt)[6:]} {'head_first' if hf else 'head_last'}" + \
                  (" varlen" if vl else "")
            t1 = time.time()
            try:
                results[key] = run_case(family, variant, opts, dt, hf, vl)
                if VERBOSE:
                    print(f"  {family}/{variant} {tag}: {time.time() - t1:.1f}s", flush=True)
            except Refused as exc:
                if dt == torch.float32 and fp32_refused:
                    results[key] = None
                    continue
                problems.append(f"{tag}: refused: {exc}")
                continue
            except AssertionError as exc:
                problems.append(f"{tag}: {exc}")
                continue
            except Exception as exc:  # anything else FLA or the provider raised
                where = traceback.extract_tb(exc.__traceback__)[-1]
                problems.append(f"{tag}: {type(exc).__name__}: {str(exc)[:300]} "
                                f"(at {os.path.basename(where.filename)}:{where.lineno})")
                continue
            r = results[key]
            if "no_backward" in r and r["no_backward"].startswith(ENV_REFUSAL):
                note = r["no_backward"]
                if note not in notes:
                    notes.append(note)
            elif "no_backward" in r and not no_bwd:
                problems.append(f"{tag}: no backward ({r['no_backward']})")
            if "no_backward" not in r and no_bwd and not EMULATED:
                note = f"[{label}] backward ran although KNOWN says none"
                if note not in notes:
                    notes.append(note)
            if r.get("missing") and not grads_off:
                problems.append(f"{tag}: gradients missing: {r['missing']}")
            tol = tol_fp32 if dt == torch.float32 else tol_bf16
            errs = {n: e for n, e in r["err"].items()
                    if not (grads_off and n.startswith("d"))}
            n_w, e_w = worst(errs)
            if e_w > tol:
                problems.append(f"{tag}: {n_w} rel_rmse {e_w:.2e} > {tol:.0e} against the fp64 "
                                f"reference (all: " +
                                ", ".join(f"{n} {e:.1e}" for n, e in errs.items()) + ")")
        # head_first == head_last
        for dt in (torch.bfloat16, torch.float32):
            a, b_ = results.get((dt, False, False)), results.get((dt, True, False))
            if not a or not b_:
                continue
            diffs = {n: rel_rmse(b_["outs"][n], a["outs"][n]) for n in a["outs"]}
            if isinstance(a["grads"], dict) and isinstance(b_["grads"], dict):
                diffs.update({"d" + n: rel_rmse(b_["grads"][n], g)
                              for n, g in a["grads"].items()
                              if g is not None and b_["grads"].get(n) is not None})
            n_w, e_w = worst(diffs)
            if e_w > SAME_LAYOUT_TOL[dt]:
                problems.append(f"[{label}] {str(dt)[6:]}: head_first and head_last differ: "
                                f"{n_w} rel {e_w:.1e}")
            elif idx == 0:
                parts.append(f"hf=hl {str(dt)[6:]} " + ("bitwise" if e_w == 0 else f"{e_w:.0e}"))
        # one line per option set
        for (dt, hf, vl), r in results.items():
            if r is None or hf:
                continue
            n_w, e_w = worst(r["err"])
            what = f"{str(dt)[6:]}{' varlen' if vl else ''}"
            extra = ""
            if "no_backward" in r:
                extra = " fwd only"
            if r.get("missing"):
                extra += f" missing {','.join(r['missing'])}"
            parts.append(f"{'' if idx == 0 else label + ' '}{what} {n_w} {e_w:.1e}{extra}")
        if fp32_refused and idx == 0:
            notes.append("fp32 refused by FLA")
    status = "FAIL" if problems else "ok"
    line = f"{family + '/' + variant:<30} {status:<4} {time.time() - t0:5.1f}s  " + \
           " | ".join(parts)
    if notes:
        line += "  (" + "; ".join(notes) + ")"
    SUMMARY.append(line)
    for p in problems:
        SUMMARY.append(f"    {p}")
    return problems


def selected_families():
    sel = os.environ.get("LAV_FLA_FAMILIES", "").strip()
    fams = list(LAV_VARIANTS)
    if sel:
        fams = [f for f in (s.strip() for s in sel.split(",")) if f in LAV_VARIANTS]
    return fams


def provider_cases():
    """The (family, variant) pairs FLA offers (a static list: collecting needs no GPU)."""
    missing = {("gated_delta_product", "recurrent"), ("mesa_net", "recurrent"),
               ("based", "recurrent"), ("rebased", "chunk"), ("rebased", "recurrent")}
    return [(f, v) for f in selected_families() for v in LAV_VARIANTS[f]
            if (f, v) not in missing]


# ------------------------------------------------------------------------------------------
# pytest entry points
# ------------------------------------------------------------------------------------------

if pytest is not None:
    @pytest.mark.skipif(PROVIDER_SKIP is not None, reason=str(PROVIDER_SKIP))
    def test_convention_surface():
        """versions(), unsupported() and the function names, for every lav pair (no GPU)."""
        v = P.versions()
        assert set(v) == {"fla", "triton", "TRITON_F32_DEFAULT"} and all(isinstance(x, str) for x in v.values())
        assert P.NAME == "fla"
        for family, variants in LAV_VARIANTS.items():
            for variant in variants:
                reason = P.unsupported(family, variant, {})
                fn = getattr(P, f"{variant}_{family}", None)
                if reason is None:
                    assert callable(fn), f"{variant}_{family} missing"
                else:
                    assert isinstance(reason, str) and reason, (family, variant)
                    assert fn is None, f"{variant}_{family} exists but is unsupported"
        assert P.unsupported("kda", "chunk", {"allow_neg_eigval": "true",
                                              "use_beta_sigmoid_in_kernel": "false"})
        assert P.unsupported("kda", "chunk", {"lower_bound": "-5",
                                              "use_gate_in_kernel": "false"})
        assert P.unsupported("rwkv7", "chunk", {"form": "xplr"})
        assert P.unsupported("no_such_family", "chunk", {})
        assert P.unsupported("gla", "parallel", {})

    @pytest.mark.skipif(SKIP is not None, reason=str(SKIP))
    @pytest.mark.parametrize("family,variant", provider_cases(),
                             ids=[f"{f}-{v}" for f, v in provider_cases()])
    def test_fla_provider(family, variant):
        problems = check_variant(family, variant)
        assert not problems, f"{family}/{variant}:\n  " + "\n  ".join(problems)


def main() -> int:
    if SKIP is not None:
        print(f"skipped: {SKIP}")
        return 0
    print(f"fla {P.versions()}  torch {torch.__version__}  {torch.cuda.get_device_name()}")
    failed = 0
    for family, variant in provider_cases():
        failed += bool(check_variant(family, variant))
        for line in SUMMARY:
            print(line, flush=True)
        SUMMARY.clear()
    print(f"{len(provider_cases())} family variants, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
