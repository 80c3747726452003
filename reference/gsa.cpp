// reference/gsa.cpp — float64 gsa: the two chained recurrences, their checkpointed reverse, and
// the parallel form that checks them. Plain at:: ops on CPU tensors; no kernel code here.
#include "gsa.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "gsa";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::rows;

// The sizes of one call, read from the inputs once they are checked.
struct Dims {
    int64_t B, T, H, K, V, M, N;
    double scale;  // resolved: never 0
};

Dims check_inputs(const GsaInputs& in) {
    LAV_ASSERT(
        in.q.defined() && in.k.defined() && in.v.defined() && in.s.defined() && in.g.defined(),
        "gsa reference called without q, k, v, s or g");
    assert_fp64(kFamily, in.q, "q");
    assert_fp64(kFamily, in.k, "k");
    assert_fp64(kFamily, in.v, "v");
    assert_fp64(kFamily, in.s, "s");
    assert_fp64(kFamily, in.g, "g");
    assert_fp64(kFamily, in.hk0, "hk0");
    assert_fp64(kFamily, in.hv0, "hv0");
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4 && in.s.dim() == 4,
              "gsa: q, v and s must be [B, T, H, D], got q ", in.q.sizes(), ", v ", in.v.sizes(),
              " and s ", in.s.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.V = in.v.size(3);
    d.M = in.s.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0 && d.M > 0, "gsa: K, V and M must be positive, got K = ", d.K,
              ", V = ", d.V, ", M = ", d.M);
    check_shape(kFamily, in.k, "k", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.H, d.V});
    check_shape(kFamily, in.s, "s", {d.B, d.T, d.H, d.M});
    check_shape(kFamily, in.g, "g", {d.B, d.T, d.H, d.M});
    if (in.hk0.defined()) check_shape(kFamily, in.hk0, "hk0", {d.N, d.H, d.K, d.M});
    if (in.hv0.defined()) check_shape(kFamily, in.hv0, "hv0", {d.N, d.H, d.M, d.V});
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

// A state of sequence `index` from `h0` ([N, H, a, b]), copied, or zeros of shape [H, a, b].
at::Tensor initial_state(const at::Tensor& h0, int64_t index, int64_t H, int64_t a, int64_t b,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({H, a, b}, opts);
}

// One sequence's inputs as [L, H, D] views.
struct SequenceInputs {
    at::Tensor q;      // [L, H, K] scale·q
    at::Tensor k;      // [L, H, K]
    at::Tensor v;      // [L, H, V]
    at::Tensor s;      // [L, H, M]
    at::Tensor decay;  // [L, H, M] exp(g)
};

SequenceInputs sequence_inputs(const GsaInputs& in, const at::Tensor& q_scaled,
                               const Sequence& seq) {
    return {rows(q_scaled, seq), rows(in.k, seq), rows(in.v, seq), rows(in.s, seq),
            rows(in.g, seq).exp()};
}

// Both states of one sequence, every head: Hk [H, K, M] and Hv [H, M, V].
struct States {
    at::Tensor hk;
    at::Tensor hv;
};

// As in gla's reference, every per-step product is an elementwise op plus a reduction rather
// than a bmm: at [H, K, M] sizes ATen runs these on the calling thread, while MKL would fork
// and join threads for each small product.

// Hk ← Hk·diag(exp(g_t)) + k_t s_tᵀ and Hv ← diag(exp(g_t))·Hv + s_t v_tᵀ, in place.
void step_inplace(States& st, const SequenceInputs& x, int64_t t) {
    const at::Tensor a = x.decay.select(0, t);  // [H, M]
    const at::Tensor s = x.s.select(0, t);      // [H, M]
    st.hk.mul_(a.unsqueeze(1)).addcmul_(x.k.select(0, t).unsqueeze(2), s.unsqueeze(1));
    st.hv.mul_(a.unsqueeze(2)).addcmul_(s.unsqueeze(2), x.v.select(0, t).unsqueeze(1));
}

// p_t = softmax(Hk_tᵀ (scale·q_t)) over the slots: [H, M].
at::Tensor slot_probs(const at::Tensor& hk, const SequenceInputs& x, int64_t t) {
    return (hk * x.q.select(0, t).unsqueeze(2)).sum(1).softmax(-1);
}

// the parallel form's elementwise blocks hold at most this many doubles (16 MiB)
constexpr int64_t kBlockElements = int64_t{1} << 21;

}  // namespace

GsaOutputs gsa_fwd(const GsaInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const at::Tensor q_scaled = in.q * d.scale;              // [B, T, H, K]
    at::Tensor o = at::zeros_like(in.v);                     // [B, T, H, V]
    at::Tensor hkt = at::empty({d.N, d.H, d.K, d.M}, opts);  // [N, H, K, M]
    at::Tensor hvt = at::empty({d.N, d.H, d.M, d.V}, opts);  // [N, H, M, V]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const SequenceInputs x = sequence_inputs(in, q_scaled, seq);
        States st{initial_state(in.hk0, seq.index, d.H, d.K, d.M, opts),
                  initial_state(in.hv0, seq.index, d.H, d.M, d.V, opts)};
        const at::Tensor o_seq = rows(o, seq);  // [L, H, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            step_inplace(st, x, t);
            const at::Tensor p = slot_probs(st.hk, x, t);  // [H, M]
            // o_t = Hv_tᵀ p_t
            o_seq.select(0, t).copy_((st.hv * p.unsqueeze(2)).sum(1));
        }
        hkt.select(0, seq.index).copy_(st.hk);
        hvt.select(0, seq.index).copy_(st.hv);
    }
    return {o, hkt, hvt};
}

GsaGrads gsa_bwd(const GsaInputs& in, const at::Tensor& d_o, const at::Tensor& dhkt,
                 const at::Tensor& dhvt) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dhkt, "dhkt");
    assert_fp64(kFamily, dhvt, "dhvt");
    LAV_ASSERT(d_o.defined(), "gsa reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.V});
    if (dhkt.defined()) check_shape(kFamily, dhkt, "dhkt", {d.N, d.H, d.K, d.M});
    if (dhvt.defined()) check_shape(kFamily, dhvt, "dhvt", {d.N, d.H, d.M, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;

    GsaGrads grads;
    grads.dq = at::zeros_like(in.q);                                         // [B, T, H, K]
    grads.dk = at::zeros_like(in.k);                                         // [B, T, H, K]
    grads.dv = at::zeros_like(in.v);                                         // [B, T, H, V]
    grads.ds = at::zeros_like(in.s);                                         // [B, T, H, M]
    grads.dg = at::zeros_like(in.g);                                         // [B, T, H, M]
    if (in.hk0.defined()) grads.dhk0 = at::empty({d.N, H, d.K, d.M}, opts);  // [N, H, K, M]
    if (in.hv0.defined()) grads.dhv0 = at::empty({d.N, H, d.M, d.V}, opts);  // [N, H, M, V]

    const at::Tensor q_scaled = in.q * d.scale;  // [B, T, H, K]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const SequenceInputs x = sequence_inputs(in, q_scaled, seq);
        const at::Tensor dO = rows(d_o, seq);       // [L, H, V]
        const at::Tensor dq = rows(grads.dq, seq);  // [L, H, K]
        const at::Tensor dk = rows(grads.dk, seq);  // [L, H, K]
        const at::Tensor dv = rows(grads.dv, seq);  // [L, H, V]
        const at::Tensor ds = rows(grads.ds, seq);  // [L, H, M]
        const at::Tensor dg = rows(grads.dg, seq);  // [L, H, M]
        // gradients w.r.t. the current states, from the future
        at::Tensor dHk = dhkt.defined() ? dhkt.select(0, seq.index).clone()
                                        : at::zeros({H, d.K, d.M}, opts);  // [H, K, M]
        at::Tensor dHv = dhvt.defined() ? dhvt.select(0, seq.index).clone()
                                        : at::zeros({H, d.M, d.V}, opts);  // [H, M, V]
        if (L > 0) {
            // memory O(√L) states (reference/README.md, rule 5): keep both states entering every
            // c-th step
            const int64_t c = ceil_sqrt(L);
            const int64_t num_segments = (L + c - 1) / c;
            at::Tensor ck_hk = at::empty({num_segments, H, d.K, d.M}, opts);  // [NS, H, K, M]
            at::Tensor ck_hv = at::empty({num_segments, H, d.M, d.V}, opts);  // [NS, H, M, V]
            States st{initial_state(in.hk0, seq.index, H, d.K, d.M, opts),
                      initial_state(in.hv0, seq.index, H, d.M, d.V, opts)};
            for (int64_t t = 0; t < L; ++t) {
                if (t % c == 0) {
                    ck_hk.select(0, t / c).copy_(st.hk);
                    ck_hv.select(0, t / c).copy_(st.hv);
                }
                step_inplace(st, x, t);
            }
            // entry i of hk/hv is the state after step start + i − 1 (entry 0: entering the
            // segment); probs[i] is p at step start + i
            at::Tensor hk = at::empty({c + 1, H, d.K, d.M}, opts);  // [c + 1, H, K, M]
            at::Tensor hv = at::empty({c + 1, H, d.M, d.V}, opts);  // [c + 1, H, M, V]
            at::Tensor probs = at::empty({c, H, d.M}, opts);        // [c, H, M]
            for (int64_t j = num_segments - 1; j >= 0; --j) {
                const int64_t start = j * c;
                const int64_t end = std::min(start + c, L);
                hk.select(0, 0).copy_(ck_hk.select(0, j));
                hv.select(0, 0).copy_(ck_hv.select(0, j));
                for (int64_t t = start; t < end; ++t) {
                    States next{hk.select(0, t - start + 1), hv.select(0, t - start + 1)};
                    next.hk.copy_(hk.select(0, t - start));
                    next.hv.copy_(hv.select(0, t - start));
                    step_inplace(next, x, t);
                    probs.select(0, t - start).copy_(slot_probs(next.hk, x, t));
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const int64_t i = t - start;
                    const at::Tensor Hk_t = hk.select(0, i + 1);  // [H, K, M]
                    const at::Tensor Hk_prev = hk.select(0, i);   // [H, K, M]
                    const at::Tensor Hv_t = hv.select(0, i + 1);  // [H, M, V]
                    const at::Tensor Hv_prev = hv.select(0, i);   // [H, M, V]
                    const at::Tensor p = probs.select(0, i);      // [H, M]
                    const at::Tensor a = x.decay.select(0, t);    // [H, M]
                    const at::Tensor s_t = x.s.select(0, t);      // [H, M]
                    const at::Tensor do_t = dO.select(0, t);      // [H, V]

                    // value pass: o_t = Hv_tᵀ p_t
                    dHv.addcmul_(p.unsqueeze(2), do_t.unsqueeze(1));
                    const at::Tensor dp = (Hv_t * do_t.unsqueeze(1)).sum(2);  // [H, M]
                    ds.select(0, t).copy_((dHv * x.v.select(0, t).unsqueeze(1)).sum(2));
                    dv.select(0, t).copy_((dHv * s_t.unsqueeze(2)).sum(1));
                    // ∂/∂g_t of diag(exp(g_t))·Hv_{t-1}: exp(g_t) ⊙ rowsum(Hv_{t-1} ⊙ dHv_t)
                    dg.select(0, t).copy_((Hv_prev * dHv).sum(2).mul_(a));
                    dHv.mul_(a.unsqueeze(2));

                    // softmax: dok = p ⊙ (dp − ⟨p, dp⟩)
                    const at::Tensor dok = p * (dp - (p * dp).sum(1, true));  // [H, M]

                    // key pass: ok_t = Hk_tᵀ (scale·q_t)
                    const at::Tensor q_t = x.q.select(0, t);  // [H, K] scale·q
                    dHk.addcmul_(q_t.unsqueeze(2), dok.unsqueeze(1));
                    // dq_t = scale·Hk_t dok_t (the scale rides on q_t in dHk, not here)
                    dq.select(0, t).copy_((Hk_t * dok.unsqueeze(1)).sum(2).mul_(d.scale));
                    dk.select(0, t).copy_((dHk * s_t.unsqueeze(1)).sum(2));
                    ds.select(0, t).add_((dHk * x.k.select(0, t).unsqueeze(2)).sum(1));
                    // ∂/∂g_t of Hk_{t-1}·diag(exp(g_t)): exp(g_t) ⊙ colsum(Hk_{t-1} ⊙ dHk_t)
                    dg.select(0, t).add_((Hk_prev * dHk).sum(1).mul_(a));
                    dHk.mul_(a.unsqueeze(1));
                }
            }
        }
        if (grads.dhk0.defined()) grads.dhk0.select(0, seq.index).copy_(dHk);
        if (grads.dhv0.defined()) grads.dhv0.select(0, seq.index).copy_(dHv);
    }
    return grads;
}

GsaOutputs gsa_fwd_parallel(const GsaInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H, M = d.M;
    at::Tensor o = at::zeros_like(in.v);                 // [B, T, H, V]
    at::Tensor hkt = at::empty({d.N, H, d.K, M}, opts);  // [N, H, K, M]
    at::Tensor hvt = at::empty({d.N, H, M, d.V}, opts);  // [N, H, M, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor hk0 = in.hk0.defined() ? in.hk0.select(0, seq.index)
                                                : at::zeros({H, d.K, M}, opts);  // [H, K, M]
        const at::Tensor hv0 = in.hv0.defined() ? in.hv0.select(0, seq.index)
                                                : at::zeros({H, M, d.V}, opts);  // [H, M, V]
        if (L == 0) {
            hkt.select(0, seq.index).copy_(hk0);
            hvt.select(0, seq.index).copy_(hv0);
            continue;
        }
        const at::Tensor q = rows(in.q, seq).permute({1, 0, 2}) * d.scale;  // [H, L, K]
        const at::Tensor k = rows(in.k, seq).permute({1, 0, 2});            // [H, L, K]
        const at::Tensor v = rows(in.v, seq).permute({1, 0, 2});            // [H, L, V]
        const at::Tensor s = rows(in.s, seq).permute({1, 0, 2});            // [H, L, M]
        // G_t = Σ_{r≤t} g_r per slot, along the whole sequence
        const at::Tensor G = rows(in.g, seq).permute({1, 0, 2}).cumsum(1);  // [H, L, M]
        const at::Tensor qk = at::bmm(q, k.transpose(1, 2));                // [H, L, L]

        // both passes need D[t, j, m] = exp(G_tm − G_jm) for j ≤ t; it is built elementwise in
        // blocks of R rows, the future masked to −inf before the exp so that it is exactly 0
        const int64_t R = std::max<int64_t>(1, kBlockElements / (H * L * M));
        const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));  // [L]
        const at::Tensor ok = at::bmm(q, hk0).mul_(G.exp());          // [H, L, M]
        at::Tensor O = at::empty({H, L, d.V}, opts);                  // [H, L, V]
        for (int64_t t0 = 0; t0 < L; t0 += R) {
            const int64_t n = std::min(R, L - t0);
            const at::Tensor future =
                (idx.unsqueeze(0) > idx.narrow(0, t0, n).unsqueeze(1)).view({1, n, L, 1});
            const at::Tensor D = (G.narrow(1, t0, n).unsqueeze(2) - G.unsqueeze(1))
                                     .masked_fill_(future, -std::numeric_limits<double>::infinity())
                                     .exp_();          // [H, n, L, M]
            at::Tensor ok_rows = ok.narrow(1, t0, n);  // [H, n, M]
            // key pass: Σ_j (q_t·k_j) s_j ⊙ D[t, j]
            ok_rows.add_((D * qk.narrow(1, t0, n).unsqueeze(3) * s.unsqueeze(1)).sum(2));
            const at::Tensor p = ok_rows.softmax(-1);  // [H, n, M]
            // value pass: A[t, j] = Σ_m p_tm s_jm D[t, j, m]
            const at::Tensor A = (D * p.unsqueeze(2) * s.unsqueeze(1)).sum(3);  // [H, n, L]
            O.narrow(1, t0, n).copy_(
                at::bmm(A, v).add_(at::bmm(p * G.narrow(1, t0, n).exp(), hv0)));
        }
        rows(o, seq).copy_(O.permute({1, 0, 2}));

        // Hk_T = Hk0·diag(exp(G_last)) + Σ_j k_j (s_j ⊙ exp(G_last − G_j))ᵀ, Hv_T likewise
        const at::Tensor G_last = G.select(1, L - 1);               // [H, M]
        const at::Tensor sw = s * (G_last.unsqueeze(1) - G).exp();  // [H, L, M]
        hkt.select(0, seq.index)
            .copy_(hk0 * G_last.exp().unsqueeze(1) + at::bmm(k.transpose(1, 2), sw));
        hvt.select(0, seq.index)
            .copy_(G_last.exp().unsqueeze(2) * hv0 + at::bmm(sw.transpose(1, 2), v));
    }
    return {o, hkt, hvt};
}

}  // namespace lav::ref
