"""CPU test of lav's FLA provider's translation layer, with FLA's kernels replaced by fakes.

The Triton kernels need a GPU; the translation from lav's convention to FLA's does not. Here
every FLA function the provider calls is swapped (for the duration of the test) for a fake that

1. binds the provider's keywords against the real FLA function's signature (a keyword FLA does
   not take fails; for FLA functions with ``**kwargs`` only the keywords their bodies read are
   allowed), and checks what FLA requires of its arguments: contiguous tensors in FLA's
   ``[B, T, H, ...]`` layout, int64 ``cu_seqlens``, a float scale, fp32 initial states where FLA
   asserts them, no fp32 inputs where FLA refuses them, ``K <= 16`` for ``fused_chunk_based``;
2. computes the op with FLA's own Python references (``fla/ops/<f>/naive.py``), in FLA's
   conventions, per packed sequence where a reference has no ``cu_seqlens``, and returns FLA's
   output formats (hgrn ``[B, T, D]``, gsa's state list, mesa_net's three results).

Then the GPU test's ``check_variant`` runs unchanged on the CPU: every family, variant, option
set, dtype, layout and the packed case, against the fp64 references of lav's definitions. So it
checks the provider's translation end to end (names, layouts, reshapes, rwkv7's tied ``b``,
per-sequence emulation, output order), and, through the same comparison, that FLA's naive
references and lav's definitions agree. It does not check FLA's kernels: the GPU test does.
Skipped when FLA cannot be imported.
"""

from __future__ import annotations

import inspect
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import test_fla_provider_gpu as TST  # noqa: E402  (the shared machinery and references)

try:
    import pytest
except ImportError:
    pytest = None

torch = TST.torch
P = TST.P
FLA_SKIP = TST.PROVIDER_SKIP
if FLA_SKIP is None:
    try:
        import fla.ops.based as m_based
        import fla.ops.comba as m_comba
        import fla.ops.delta_rule as m_dr
        import fla.ops.gated_delta_product as m_gdp
        import fla.ops.gated_delta_rule as m_gdr
        import fla.ops.generalized_delta_rule as m_gdr2
        import fla.ops.gla as m_gla
        import fla.ops.gsa as m_gsa
        import fla.ops.hgrn as m_hgrn
        import fla.ops.kda as m_kda
        import fla.ops.mesa_net as m_mesa
        import fla.ops.rebased as m_rebased
        import fla.ops.rwkv6 as m_rwkv6
        import fla.ops.rwkv7 as m_rwkv7
        import fla.ops.simple_gla as m_sgla
        from fla.ops.based.naive import naive_parallel_based
        from fla.ops.comba.naive import naive_chunk_comba
        from fla.ops.delta_rule.naive import delta_rule_recurrence
        from fla.ops.gated_delta_product.naive import naive_recurrent_gated_delta_product
        from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
        from fla.ops.generalized_delta_rule.dplr.naive import dplr_recurrence
        from fla.ops.gla.naive import naive_recurrent_gla
        from fla.ops.gsa.naive import naive_recurrent_gsa
        from fla.ops.hgrn.naive import naive_recurrent_hgrn
        from fla.ops.kda.naive import naive_recurrent_kda
        from fla.ops.mesa_net.naive import naive_mesa_net_exact
        from fla.ops.rwkv6.recurrent_naive import naive_recurrent_rwkv6
        from fla.ops.simple_gla.naive import naive_recurrent_simple_gla
    except Exception as exc:
        FLA_SKIP = f"FLA's modules are not importable ({exc})"

CALLS = []


def check_call(real, kwargs, allowed_extra=(), fp32_states=(), no_fp32=False):
    sig = inspect.signature(real)
    sig.bind(**kwargs)  # TypeError on a keyword FLA does not take
    named = {n for n, p in sig.parameters.items() if p.kind != p.VAR_KEYWORD}
    extra = set(kwargs) - named
    assert extra <= set(allowed_extra), f"{real.__name__}: unexpected **kwargs {extra}"
    for n, t in kwargs.items():
        if isinstance(t, torch.Tensor):
            assert t.is_contiguous(), f"{real.__name__}: {n} not contiguous"
        if isinstance(t, (tuple, list)):
            for x in t:
                assert x is None or x.is_contiguous(), f"{real.__name__}: {n} not contiguous"
    cu = kwargs.get("cu_seqlens")
    if cu is not None:
        assert cu.dtype == torch.int64, cu.dtype
    if "scale" in kwargs:
        assert isinstance(kwargs["scale"], float) and kwargs["scale"] > 0
    for n in fp32_states:
        if kwargs.get(n) is not None:
            assert kwargs[n].dtype == torch.float32, f"{real.__name__}: {n} must be fp32"
    q = kwargs.get("q", kwargs.get("r"))
    if no_fp32 and q is not None:
        assert q.dtype != torch.float32, f"{real.__name__} does not support float32"
    assert kwargs.get("output_final_state", True) is True
    CALLS.append(real.__name__)


def seqwise(run, cu, seqs, states, rep=None):
    """run(**seqs_i, states=tuple_i) -> (o, tuple_of_states); per sequence when cu is given."""
    if cu is None:
        return run(**seqs, states=states)
    b = cu.tolist()
    os_, sts = [], []
    for i, (s, e) in enumerate(zip(b[:-1], b[1:])):
        st = tuple(None if x is None else x[i:i + 1] for x in states)
        if e == s:
            sts.append(st)
            continue
        part = {n: (None if t is None else t[:, s * (rep or {}).get(n, 1):e * (rep or {}).get(n, 1)])
                for n, t in seqs.items()}
        o, st2 = run(**part, states=st)
        os_.append(o)
        sts.append(st2)
    o = torch.cat(os_, 1)
    return o, tuple(torch.cat([s[j] for s in sts], 0) for j in range(len(states)))


def l2n(x):
    x32 = x.float()
    return (x32 / torch.sqrt((x32 * x32).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)


def prescale(q, scale):  # naive refs with a fixed K^-0.5
    return q * (scale / q.shape[-1] ** -0.5)


def hf(x):
    return None if x is None else x.transpose(1, 2)


# ---- simple_gla
def mk_sgla(real, chunk):
    def fake(**kw):
        check_call(real, kw, ("chunk_size",) if chunk else ())
        q, k, v, g, gg = kw["q"], kw["k"], kw["v"], kw.get("g"), kw.get("g_gamma")
        G = torch.zeros(q.shape[:3], dtype=torch.float32)
        if g is not None:
            G = G + g
        if gg is not None:
            G = G + gg
        def run(q, k, v, g, states):
            o, h = naive_recurrent_simple_gla(q, k, v, g, scale=kw["scale"], initial_state=states[0],
                                              output_final_state=True)
            return o, (h,)
        o, (h,) = seqwise(run, kw.get("cu_seqlens"), dict(q=q, k=k, v=v, g=G), (kw["initial_state"],))
        return o, h
    return fake


# ---- gla
def mk_gla(real, chunk):
    def fake(**kw):
        check_call(real, kw, (), fp32_states=("initial_state",) if chunk else ())
        g = kw["g"] if chunk else kw["gk"]
        def run(q, k, v, g, states):
            o, h = naive_recurrent_gla(prescale(q, kw["scale"]), k, v, g, states[0], True)
            return o, (h,)
        o, (h,) = seqwise(run, kw.get("cu_seqlens"), dict(q=kw["q"], k=kw["k"], v=kw["v"], g=g),
                          (kw["initial_state"],))
        return o, h
    return fake


# ---- hgrn (positional x, g like the provider calls them)
def mk_hgrn(real, chunk):
    def fake(x, g, **kw):
        check_call(real, dict(x=x, g=g, **kw))
        assert x.dim() == 3 and g.shape == x.shape
        def run(x, g, states):
            o, h = naive_recurrent_hgrn(x, g, states[0], True)
            return o, (h,)
        o, (h,) = seqwise(run, kw.get("cu_seqlens"), dict(x=x, g=g), (kw["initial_state"],))
        return o, (h if chunk else h.to(x.dtype))
    return fake


# ---- delta_rule
def mk_dr(real, chunk):
    def fake(**kw):
        check_call(real, kw, ("chunk_size",) if chunk else (), no_fp32=chunk)
        q, k = kw["q"], kw["k"]
        if kw["use_qk_l2norm_in_kernel"]:
            q, k = l2n(q), l2n(k)
        def run(q, k, v, beta, states):
            o, h = delta_rule_recurrence(hf(prescale(q, kw["scale"])), hf(k), hf(v), hf(beta),
                                         states[0], True)
            return hf(o), (h,)
        o, (h,) = seqwise(run, kw.get("cu_seqlens"), dict(q=q, k=k, v=kw["v"], beta=kw["beta"]),
                          (kw["initial_state"],))
        return o, h
    return fake


def softplus(x):
    return torch.where(x > 20, x, torch.log1p(torch.exp(x)))  # FLA's threshold


# ---- gated_delta_rule / kda
def mk_gdr(real, chunk, kda):
    def fake(**kw):
        allowed = ("chunk_size", "A_log", "dt_bias") + (() if kda else ("use_gate_in_kernel",))
        check_call(real, kw, allowed if chunk else (),
                   fp32_states=("initial_state",) if (chunk and kda) else ())
        q, k, v, g, beta = kw["q"], kw["k"], kw["v"], kw["g"], kw["beta"]
        HV, H = v.shape[2], q.shape[2]
        if kw.get("use_qk_l2norm_in_kernel"):
            q, k = l2n(q), l2n(k)
        if kw.get("use_gate_in_kernel"):
            A, dt = kw.get("A_log"), kw.get("dt_bias")
            g = g.float()
            if kda:
                z = g + (dt.view(HV, -1) if dt is not None else 0)
                lb = kw.get("lower_bound")
                g = (lb * torch.sigmoid(torch.exp(A)[:, None] * z) if lb is not None
                     else -torch.exp(A)[:, None] * softplus(z))
            else:
                g = -torch.exp(A) * softplus(g + (dt if dt is not None else 0))
        else:
            assert kw.get("A_log") is None and kw.get("lower_bound") is None
        if kw.get("use_beta_sigmoid_in_kernel"):
            beta = torch.sigmoid(beta.float()) * (2.0 if kw.get("allow_neg_eigval") else 1.0)
        else:
            assert not kw.get("allow_neg_eigval")
        def run(q, k, v, g, beta, states):
            if kda:
                o, h = naive_recurrent_kda(q, k, v, g, beta, scale=kw["scale"],
                                           initial_state=states[0], output_final_state=True)
            else:
                qq, kk = (x.repeat_interleave(HV // H, dim=2) for x in (q, k))
                o, h = naive_recurrent_gated_delta_rule(qq, kk, v, beta, g, scale=kw["scale"],
                                                        initial_state=states[0],
                                                        output_final_state=True)
                o = o.to(v.dtype)
            return o, (h,)
        o, (h,) = seqwise(run, kw.get("cu_seqlens"), dict(q=q, k=k, v=v, g=g, beta=beta),
                          (kw["initial_state"],))
        return o, h
    return fake


# ---- rwkv6
def mk_rwkv6(real, chunk):
    def fake(**kw):
        check_call(real, kw, ("chunk_size",) if chunk else ())
        def run(r, k, v, w, states):
            o, h = naive_recurrent_rwkv6(hf(r), hf(k), hf(v), hf(w), kw["u"], scale=kw["scale"],
                                         initial_state=states[0], output_final_state=True)
            return hf(o), (h,)
        o, (h,) = seqwise(run, kw.get("cu_seqlens"), dict(r=kw["r"], k=kw["k"], v=kw["v"], w=kw["w"]),
                          (kw["initial_state"],))
        return o, h
    return fake


# ---- rwkv7 (dplr via rwkv7 entry points, iplr via the generalized delta rule)
def mk_dplr(real, chunk, iplr):
    def fake(**kw):
        check_call(real, kw, ("chunk_size",) if (chunk and iplr) else ())
        q = kw["q"] if iplr else kw["r"]
        w = torch.zeros_like(kw["a"], dtype=torch.float32) if iplr else kw["w"]
        def run(q, k, v, a, b, w, states):
            o, h = dplr_recurrence(hf(prescale(q, kw["scale"])), hf(k), hf(v), hf(a), hf(b), hf(w),
                                   states[0], True)
            return hf(o), (h,)
        o, (h,) = seqwise(run, kw.get("cu_seqlens"),
                          dict(q=q, k=kw["k"], v=kw["v"], a=kw["a"], b=kw["b"], w=w),
                          (kw["initial_state"],))
        return o, h
    return fake


# ---- comba
def mk_comba(real, chunk):
    def fake(**kw):
        check_call(real, kw)
        q, k, p = kw["q"], kw["k"], kw["p"]
        if kw["use_qk_l2norm_in_kernel"]:
            q, k, p = l2n(q), l2n(k), l2n(p)
        def run(q, k, v, p, g, beta, states):
            o, h = naive_chunk_comba(q, k, v, p, g, beta, chunk_size=16, scale=kw["scale"],
                                     initial_state=states[0], output_final_state=True)
            return o.to(v.dtype), (h,)
        o, (h,) = seqwise(run, kw.get("cu_seqlens"),
                          dict(q=q, k=k, v=kw["v"], p=p, g=kw["g"], beta=kw["beta"]),
                          (kw["initial_state"],))
        return o, h
    return fake


# ---- gated_delta_product
def mk_gdp(real):
    def fake(**kw):
        check_call(real, kw, no_fp32=True)
        q, k, n = kw["q"], kw["k"], kw["num_householder"]
        if kw["use_qk_l2norm_in_kernel"]:
            q, k = l2n(q), l2n(k)
        o, h = naive_recurrent_gated_delta_product(
            q, k, kw["v"], kw["g"], kw["beta"], kw["scale"], cu_seqlens=kw.get("cu_seqlens"),
            initial_state=kw["initial_state"], output_final_state=True, num_householder=n)
        return o, h
    return fake


# ---- mesa_net
def mk_mesa(real):
    def fake(**kw):
        check_call(real, kw, fp32_states=("h_kk_init", "h_kv_init"))
        q, k = kw["q"], kw["k"]
        assert q.shape[-1] == kw["v"].shape[-1]
        if kw["use_qk_l2norm_in_kernel"]:
            q, k = l2n(q), l2n(k)
        def run(q, k, v, g, beta, states):
            o, hkk, hkv = naive_mesa_net_exact(q, k, v, g, kw["lamb"], beta, *states)
            return o.to(v.dtype), (hkk, hkv)
        o, (hkk, hkv) = seqwise(run, kw.get("cu_seqlens"),
                                dict(q=q, k=k, v=kw["v"], g=kw["g"], beta=kw["beta"]),
                                (kw["h_kk_init"], kw["h_kv_init"]))
        return o, hkk, hkv
    return fake


# ---- based / rebased (positional q, k, v)
def mk_based(real, chunk):
    def fake(q, k, v, **kw):
        check_call(real, dict(q=q, k=k, v=v, **kw))
        if chunk:
            assert q.shape[-1] <= 16
        o = naive_parallel_based(hf(q).float(), hf(k).float(), hf(v).float(), kw["scale"], kw["use_norm"])
        return hf(o).to(q.dtype)
    return fake


def mk_rebased(real):
    def fake(q, k, v, **kw):
        check_call(real, dict(q=q, k=k, v=v, **kw))
        assert kw["eps"] == 1e-5
        s = q.shape[-1] ** -0.5 if kw["use_scale"] else 1.0
        # naive_parallel_rebased's eps is 1e-6; FLA's kernel and lav use 1e-5
        X = s * hf(q).float() @ hf(k).float().transpose(-1, -2)
        f = (X * X).masked_fill(~torch.ones(X.shape[-1], X.shape[-1], dtype=torch.bool).tril(), 0)
        o = f @ hf(v).float()
        if kw["use_normalize"]:
            o = o / (f.sum(-1, keepdim=True) + 1e-5)
        return hf(o).to(q.dtype)
    return fake


# ---- gsa
def mk_gsa(real, chunk):
    def fake(**kw):
        check_call(real, kw, ("chunk_size",) if chunk else ())
        def run(q, k, v, s, g, states):
            o, st = naive_recurrent_gsa(q, k, v, s, g, scale=kw["scale"], initial_state=states,
                                        output_final_state=True)
            return o, tuple(st)
        o, st = seqwise(run, kw.get("cu_seqlens"),
                        dict(q=kw["q"], k=kw["k"], v=kw["v"], s=kw["s"], g=kw["g"]),
                        tuple(kw["initial_state"]))
        return o, list(st)
    return fake


def fake_table():
    """(module, FLA function name, maker(real function) -> fake) for every function used."""
    return [
        (m_sgla, "chunk_simple_gla", lambda r: mk_sgla(r, True)),
        (m_sgla, "fused_recurrent_simple_gla", lambda r: mk_sgla(r, False)),
        (m_gla, "chunk_gla", lambda r: mk_gla(r, True)),
        (m_gla, "fused_recurrent_gla", lambda r: mk_gla(r, False)),
        (m_hgrn, "chunk_hgrn", lambda r: mk_hgrn(r, True)),
        (m_hgrn, "fused_recurrent_hgrn", lambda r: mk_hgrn(r, False)),
        (m_dr, "chunk_delta_rule", lambda r: mk_dr(r, True)),
        (m_dr, "fused_recurrent_delta_rule", lambda r: mk_dr(r, False)),
        (m_gdr, "chunk_gated_delta_rule", lambda r: mk_gdr(r, True, False)),
        (m_gdr, "fused_recurrent_gated_delta_rule", lambda r: mk_gdr(r, False, False)),
        (m_kda, "chunk_kda", lambda r: mk_gdr(r, True, True)),
        (m_kda, "fused_recurrent_kda", lambda r: mk_gdr(r, False, True)),
        (m_rwkv6, "chunk_rwkv6", lambda r: mk_rwkv6(r, True)),
        (m_rwkv6, "fused_recurrent_rwkv6", lambda r: mk_rwkv6(r, False)),
        (m_rwkv7, "chunk_rwkv7", lambda r: mk_dplr(r, True, False)),
        (m_rwkv7, "fused_recurrent_rwkv7", lambda r: mk_dplr(r, False, False)),
        (m_gdr2, "chunk_iplr_delta_rule", lambda r: mk_dplr(r, True, True)),
        (m_gdr2, "fused_recurrent_iplr_delta_rule", lambda r: mk_dplr(r, False, True)),
        (m_comba, "chunk_comba", lambda r: mk_comba(r, True)),
        (m_comba, "fused_recurrent_comba", lambda r: mk_comba(r, False)),
        (m_gdp, "chunk_gated_delta_product", mk_gdp),
        (m_mesa, "chunk_mesa_net", mk_mesa),
        (m_based, "parallel_based", lambda r: mk_based(r, False)),
        (m_based, "fused_chunk_based", lambda r: mk_based(r, True)),
        (m_rebased, "parallel_rebased", mk_rebased),
        (m_gsa, "chunk_gsa", lambda r: mk_gsa(r, True)),
        (m_gsa, "fused_recurrent_gsa", lambda r: mk_gsa(r, False)),
    ]


def install_fakes():
    """Swaps the fakes in; returns the function that puts FLA's functions back."""
    saved = []
    for mod, name, make in fake_table():
        real = getattr(mod, name)
        saved.append((mod, name, real))
        setattr(mod, name, make(real))

    def restore():
        for mod, name, real in saved:
            setattr(mod, name, real)
    return restore


def run_all(families=None):
    """check_variant for every provider case on the CPU; returns (failed variants, lines)."""
    restore, device = install_fakes(), TST.DEVICE
    TST.DEVICE, TST.EMULATED = "cpu", True
    start = len(TST.SUMMARY)
    failed = []
    try:
        for family, variant in TST.provider_cases():
            if families and family not in families:
                continue
            if TST.check_variant(family, variant):
                failed.append(f"{family}/{variant}")
    finally:
        TST.DEVICE, TST.EMULATED = device, False
        restore()
    lines = ["[cpu, FLA naive fakes] " + x for x in TST.SUMMARY[start:]]
    TST.SUMMARY[start:] = lines
    return failed, lines


def rwkv7_option_in_b():
    """rwkv7 called as lav's caller does (the option `b` shadows the tensor `b`) against the
    call that keeps both (b tensor, b_option): the same outputs; b = input without its tensor
    is refused with a message naming the clash."""
    restore = install_fakes()
    try:
        opts = {"b": "neg_a", "form": "dplr"}
        x = {n: t.float() for n, t in TST.make_inputs("rwkv7", opts, 2, 20, 2, seed=3).items()}
        settings = dict(scale=1.0, head_first=False, cu_seqlens=None, chunk_size=64,
                        state_dtype=torch.float32, output_dtype="Undefined")
        for variant in ("chunk", "recurrent"):
            fn = getattr(P, f"{variant}_rwkv7")
            both = fn(**x, **settings, form="dplr", b_option="neg_a")
            shadowed = fn(**{n: t for n, t in x.items() if n != "b"}, **settings, form="dplr",
                          b="neg_a")
            for u, w in zip(both, shadowed):
                assert torch.equal(u, w), variant
            try:
                fn(**{n: t for n, t in x.items() if n != "b"}, **settings, form="dplr", b="input")
            except ValueError as exc:
                assert "b_option" in str(exc)
            else:
                raise AssertionError("b = input without the b tensor was not refused")
    finally:
        restore()


if pytest is not None:
    @pytest.mark.skipif(FLA_SKIP is not None, reason=str(FLA_SKIP))
    def test_rwkv7_option_in_b():
        rwkv7_option_in_b()

    @pytest.mark.skipif(FLA_SKIP is not None, reason=str(FLA_SKIP))
    def test_translation_against_fla_naive_references():
        failed, lines = run_all()
        assert not failed, "translation problems:\n" + "\n".join(
            x for x in lines if x.startswith("[cpu, FLA naive fakes]     "))
        assert len(CALLS) > 0


if __name__ == "__main__":
    if FLA_SKIP is not None:
        print(f"skipped: {FLA_SKIP}")
        sys.exit(0)
    fams = [f for f in os.environ.get("LAV_FLA_FAMILIES", "").split(",") if f]
    failed, lines = run_all(fams or None)
    print("\n".join(lines))
    print(f"{len(failed)} failed: {failed}; {len(CALLS)} FLA calls checked")
    sys.exit(1 if failed else 0)
