// reference/rwkv6.cpp — float64 rwkv6: the recurrence, its checkpointed reverse, and the parallel
// form that checks it. Plain at:: ops on CPU tensors; no kernel code here.
#include "rwkv6.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "rwkv6";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::contract_out;
using common::rows;
using common::StateSamples;

struct Dims {
    int64_t B, T, H, K, V, N;
    double scale;  // resolved: never 0
};

Dims check_inputs(const Rwkv6Inputs& in) {
    LAV_ASSERT(
        in.q.defined() && in.k.defined() && in.v.defined() && in.w.defined() && in.u.defined(),
        "rwkv6 reference called without q, k, v, w or u");
    assert_fp64(kFamily, in.q, "q");
    assert_fp64(kFamily, in.k, "k");
    assert_fp64(kFamily, in.v, "v");
    assert_fp64(kFamily, in.w, "w");
    assert_fp64(kFamily, in.u, "u");
    assert_fp64(kFamily, in.h0, "h0");
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4, "rwkv6: q and v must be [B, T, H, D], got q ",
              in.q.sizes(), " and v ", in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.V = in.v.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0, "rwkv6: K and V must be positive, got K = ", d.K, ", V = ", d.V);
    check_shape(kFamily, in.k, "k", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.H, d.V});
    check_shape(kFamily, in.w, "w", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.u, "u", {d.H, d.K});
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.H, d.K, d.V});
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.H, d.K, d.V}, opts);
}

// One sequence's inputs as [L, H, D] views.
struct SequenceInputs {
    at::Tensor q;      // [L, H, K]
    at::Tensor k;      // [L, H, K]
    at::Tensor v;      // [L, H, V]
    at::Tensor decay;  // [L, H, K] exp(w)
    at::Tensor bonus;  // [L, H] Σ_d q_td u_d k_td
};

SequenceInputs sequence_inputs(const Rwkv6Inputs& in, const Sequence& seq) {
    SequenceInputs s{rows(in.q, seq), rows(in.k, seq), rows(in.v, seq), rows(in.w, seq).exp(), {}};
    s.bonus = (s.q * in.u * s.k).sum(2);
    return s;
}

// S ← diag(exp(w_t))·S + k_t v_tᵀ for every head, in place ([H, K, V]). The per-step products
// are elementwise ops and reductions, not bmm: at these sizes that keeps every op on the calling
// thread (reference/README.md, simple_gla).
void step_inplace(at::Tensor& state, const SequenceInputs& s, int64_t t) {
    state.mul_(s.decay.select(0, t).unsqueeze(2));
    state.addcmul_(s.k.select(0, t).unsqueeze(2), s.v.select(0, t).unsqueeze(1));
}

// the parallel form's elementwise blocks hold at most this many doubles (16 MiB)
constexpr int64_t kBlockElements = int64_t{1} << 21;

}  // namespace

Rwkv6Outputs rwkv6_fwd(const Rwkv6Inputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    at::Tensor o = at::zeros_like(in.v);                    // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, d.H, d.K, d.V}, opts);  // [N, H, K, V]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    const std::vector<Sequence> seqs = sequences(d.B, d.T, in.cu_seqlens);
    StateSamples samples(seqs, in.state_stride, {d.H, d.K, d.V}, opts);  // [NT, H, K, V]
    for (const Sequence& seq : seqs) {
        const SequenceInputs s = sequence_inputs(in, seq);
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
        at::Tensor scratch = at::empty({d.H, d.K, d.V}, opts);        // [H, K, V]
        const at::Tensor o_seq = rows(o, seq);                        // [L, H, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            samples.keep(t, state);
            // o_t = scale·[S_{t-1}ᵀ q_t + bonus_t v_t], read before the step
            at::Tensor o_t = o_seq.select(0, t);  // [H, V]
            contract_out(o_t, scratch, state, s.q.select(0, t).unsqueeze(2), 1);
            o_t.addcmul_(s.bonus.select(0, t).unsqueeze(1), s.v.select(0, t)).mul_(d.scale);
            step_inplace(state, s, t);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht, samples.states()};
}

Rwkv6Grads rwkv6_bwd(const Rwkv6Inputs& in, const at::Tensor& d_o, const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "rwkv6 reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.V});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.H, d.K, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;

    Rwkv6Grads grads;
    grads.dq = at::zeros_like(in.q);                                       // [B, T, H, K]
    grads.dk = at::zeros_like(in.k);                                       // [B, T, H, K]
    grads.dv = at::zeros_like(in.v);                                       // [B, T, H, V]
    grads.dw = at::zeros_like(in.w);                                       // [B, T, H, K]
    grads.du = at::zeros_like(in.u);                                       // [H, K]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]

    const at::Tensor do_scaled = d_o * d.scale;  // [B, T, H, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const SequenceInputs s = sequence_inputs(in, seq);
        const at::Tensor dO = rows(do_scaled, seq);  // [L, H, V]
        const at::Tensor dq = rows(grads.dq, seq);   // [L, H, K]
        const at::Tensor dk = rows(grads.dk, seq);   // [L, H, K]
        const at::Tensor dv = rows(grads.dv, seq);   // [L, H, V]
        const at::Tensor dw = rows(grads.dw, seq);   // [L, H, K]
        // [H, K, V] ∂L/∂S_t, from the future
        at::Tensor dS =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({H, d.K, d.V}, opts);
        if (L > 0) {
            // memory O(√L) states (reference/README.md, rule 5): keep the state entering
            // every c-th step
            const int64_t P = ceil_sqrt(L);
            const int64_t num_segments = (L + P - 1) / P;
            at::Tensor checkpoints = at::empty({num_segments, H, d.K, d.V}, opts);  // [NS, H, K, V]
            at::Tensor state = initial_state(in.h0, seq.index, d, opts);            // [H, K, V]
            for (int64_t t = 0; t < L; ++t) {
                if (t % P == 0) checkpoints.select(0, t / P).copy_(state);
                step_inplace(state, s, t);
            }
            // states[i] is S_{start+i-1}: the segment's entering state, then its P states
            at::Tensor states = at::empty({P + 1, H, d.K, d.V}, opts);  // [P + 1, H, K, V]
            at::Tensor scratch = at::empty({H, d.K, d.V}, opts);        // [H, K, V]
            for (int64_t j = num_segments - 1; j >= 0; --j) {
                const int64_t start = j * P;
                const int64_t end = std::min(start + P, L);
                states.select(0, 0).copy_(checkpoints.select(0, j));
                for (int64_t t = start; t < end; ++t) {
                    at::Tensor next = states.select(0, t - start + 1);  // [H, K, V]
                    next.copy_(states.select(0, t - start));
                    step_inplace(next, s, t);
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const at::Tensor S_prev = states.select(0, t - start);  // [H, K, V]
                    const at::Tensor do_t = dO.select(0, t);                // [H, V]
                    const at::Tensor decay_t = s.decay.select(0, t);        // [H, K]
                    // dS is ∂L/∂S_t here: S_t feeds only S_{t+1}, o_{t+1} and ht
                    at::Tensor dk_t = dk.select(0, t);  // [H, K]
                    contract_out(dk_t, scratch, dS, s.v.select(0, t).unsqueeze(1), 2);
                    at::Tensor dv_t = dv.select(0, t);  // [H, V]
                    contract_out(dv_t, scratch, dS, s.k.select(0, t).unsqueeze(2), 1);
                    // dw_t[d] = exp(w_t[d])·⟨S_{t-1}[d, :], dS_t[d, :]⟩
                    at::Tensor dw_t = dw.select(0, t);  // [H, K]
                    contract_out(dw_t, scratch, S_prev, dS, 2);
                    dw_t.mul_(decay_t);
                    // dq_t += scale·S_{t-1} d_o_t
                    at::Tensor dq_t = dq.select(0, t);  // [H, K]
                    contract_out(dq_t, scratch, S_prev, do_t.unsqueeze(1), 2);
                    // ∂L/∂S_{t-1} = diag(exp(w_t))·dS_t + scale·q_t d_o_tᵀ
                    dS.mul_(decay_t.unsqueeze(2));
                    dS.addcmul_(s.q.select(0, t).unsqueeze(2), do_t.unsqueeze(1));
                }
            }
        }
        // the bonus path is local to each token: with c_t = scale·(d_o_t·v_t),
        // dq_t += c_t u ⊙ k_t, dk_t += c_t u ⊙ q_t, dv_t += scale·bonus_t d_o_t
        const at::Tensor c = (dO * s.v).sum(2, /*keepdim=*/true);  // [L, H, 1]
        dq.add_(c * in.u * s.k);
        dk.add_(c * in.u * s.q);
        dv.add_(s.bonus.unsqueeze(2) * dO);
        grads.du.add_((c * s.q * s.k).sum(0));
        if (grads.dh0.defined()) grads.dh0.select(0, seq.index).copy_(dS);
    }
    return grads;
}

Rwkv6Outputs rwkv6_fwd_parallel(const Rwkv6Inputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;
    at::Tensor o = at::zeros_like(in.v);                  // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor h0 = in.h0.defined() ? in.h0.select(0, seq.index)
                                              : at::zeros({H, d.K, d.V}, opts);  // [H, K, V]
        if (L == 0) {
            ht.select(0, seq.index).copy_(h0);
            continue;
        }
        const at::Tensor q = rows(in.q, seq).permute({1, 0, 2});  // [H, L, K]
        const at::Tensor k = rows(in.k, seq).permute({1, 0, 2});  // [H, L, K]
        const at::Tensor v = rows(in.v, seq).permute({1, 0, 2});  // [H, L, V]
        const at::Tensor w = rows(in.w, seq).permute({1, 0, 2});  // [H, L, K]
        const at::Tensor G = w.cumsum(1);                         // [H, L, K] inclusive
        const at::Tensor Gx = G - w;                              // [H, L, K] exclusive

        // A[t, s] = Σ_d q_td k_sd exp(Gx_td − G_sd) for s < t, built elementwise in [H, R, L, K]
        // blocks; the diagonal and future are masked to −∞ before the exp, so exactly 0
        const int64_t R = std::max<int64_t>(1, kBlockElements / (H * L * d.K));
        const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));  // [L]
        at::Tensor A = at::empty({H, L, L}, opts);                    // [H, L, L]
        for (int64_t t0 = 0; t0 < L; t0 += R) {
            const int64_t n = std::min(R, L - t0);
            const at::Tensor Gx_t = Gx.narrow(1, t0, n).unsqueeze(2);  // [H, R, 1, K]
            const at::Tensor q_t = q.narrow(1, t0, n).unsqueeze(2);    // [H, R, 1, K]
            const at::Tensor not_past = (idx.unsqueeze(0) >= idx.narrow(0, t0, n).unsqueeze(1))
                                            .view({1, n, L, 1});  // [1, R, L, 1]
            const at::Tensor D =
                (Gx_t - G.unsqueeze(1))
                    .masked_fill_(not_past, -std::numeric_limits<double>::infinity())
                    .exp_();  // [H, R, L, K]
            A.narrow(1, t0, n).copy_(D.mul_(q_t).mul_(k.unsqueeze(1)).sum(3));
        }
        // the bonus sits on the diagonal
        A.diagonal(0, 1, 2).copy_((q * in.u.unsqueeze(1) * k).sum(2));
        const at::Tensor from_h0 = at::bmm(q * Gx.exp(), h0);            // [H, L, V]
        const at::Tensor O = at::bmm(A, v).add_(from_h0).mul_(d.scale);  // [H, L, V]
        rows(o, seq).copy_(O.permute({1, 0, 2}));

        // ht = diag(exp(G_last)) h0 + Σ_s (k_s ⊙ exp(G_last − G_s)) v_sᵀ
        const at::Tensor G_last = G.select(1, L - 1);               // [H, K]
        const at::Tensor kw = k * (G_last.unsqueeze(1) - G).exp();  // [H, L, K]
        ht.select(0, seq.index)
            .copy_(G_last.exp().unsqueeze(2) * h0 + at::bmm(kw.transpose(1, 2), v));
    }
    return {o, ht, {}};
}

}  // namespace lav::ref
