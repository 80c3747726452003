// reference/gla.cpp — float64 gla: the recurrence, its checkpointed reverse, and the parallel form
// that checks it. Plain at:: ops on CPU tensors; no kernel code here.
#include "gla.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "gla";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::contract_out;
using common::rows;
using common::StateSamples;

// The sizes of one call, read from the inputs once they are checked.
struct Dims {
    int64_t B, T, H, K, V, N;
    double scale;  // resolved: never 0
};

Dims check_inputs(const GlaInputs& in) {
    LAV_ASSERT(in.q.defined() && in.k.defined() && in.v.defined() && in.g.defined(),
               "gla reference called without q, k, v or g");
    assert_fp64(kFamily, in.q, "q");
    assert_fp64(kFamily, in.k, "k");
    assert_fp64(kFamily, in.v, "v");
    assert_fp64(kFamily, in.g, "g");
    assert_fp64(kFamily, in.h0, "h0");
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4, "gla: q and v must be [B, T, H, D], got q ",
              in.q.sizes(), " and v ", in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.V = in.v.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0, "gla: K and V must be positive, got K = ", d.K, ", V = ", d.V);
    check_shape(kFamily, in.k, "k", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.H, d.V});
    check_shape(kFamily, in.g, "g", {d.B, d.T, d.H, d.K});
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.H, d.K, d.V});
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

// The state before the first step of sequence `index`: h0's row, or zeros.
at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.H, d.K, d.V}, opts);
}

// One sequence's inputs as [L, H, D] views.
struct SequenceInputs {
    at::Tensor q;      // [L, H, K] q, or scale·q where the caller passed it scaled
    at::Tensor k;      // [L, H, K]
    at::Tensor v;      // [L, H, V]
    at::Tensor decay;  // [L, H, K] exp(g)
};

SequenceInputs sequence_inputs(const GlaInputs& in, const at::Tensor& q, const Sequence& seq) {
    return {rows(q, seq), rows(in.k, seq), rows(in.v, seq), rows(in.g, seq).exp()};
}

// Every per-step product below is an elementwise op plus a reduction rather than a bmm: at
// [H, K, V] sizes ATen runs these on the calling thread, while MKL would fork and join threads
// for each small product (see reference/README.md, simple_gla).

// S ← diag(exp(g_t))·S + k_t v_tᵀ for every head, overwriting `state` ([H, K, V]).
void step_inplace(at::Tensor& state, const SequenceInputs& s, int64_t t) {
    state.mul_(s.decay.select(0, t).unsqueeze(2));
    state.addcmul_(s.k.select(0, t).unsqueeze(2), s.v.select(0, t).unsqueeze(1));
}

// the parallel form's elementwise blocks hold at most this many doubles (16 MiB)
constexpr int64_t kBlockElements = int64_t{1} << 21;

}  // namespace

GlaOutputs gla_fwd(const GlaInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const at::Tensor q_scaled = in.q * d.scale;             // [B, T, H, K]
    at::Tensor o = at::zeros_like(in.v);                    // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, d.H, d.K, d.V}, opts);  // [N, H, K, V]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    const std::vector<Sequence> seqs = sequences(d.B, d.T, in.cu_seqlens);
    StateSamples samples(seqs, in.state_stride, {d.H, d.K, d.V}, opts);  // [NT, H, K, V]
    for (const Sequence& seq : seqs) {
        const SequenceInputs s = sequence_inputs(in, q_scaled, seq);
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
        at::Tensor scratch = at::empty({d.H, d.K, d.V}, opts);        // [H, K, V]
        const at::Tensor o_seq = rows(o, seq);                        // [L, H, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            samples.keep(t, state);
            step_inplace(state, s, t);
            // o_t = S_tᵀ (scale·q_t), written straight into o's row
            at::Tensor o_t = o_seq.select(0, t);  // [H, V]
            contract_out(o_t, scratch, state, s.q.select(0, t).unsqueeze(2), 1);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht, samples.states()};
}

GlaGrads gla_bwd(const GlaInputs& in, const at::Tensor& d_o, const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "gla reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.V});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.H, d.K, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;

    GlaGrads grads;
    grads.dq = at::zeros_like(in.q);                                       // [B, T, H, K]
    grads.dk = at::zeros_like(in.k);                                       // [B, T, H, K]
    grads.dv = at::zeros_like(in.v);                                       // [B, T, H, V]
    grads.dg = at::zeros_like(in.g);                                       // [B, T, H, K]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]

    // q is not pre-scaled here; the scale rides on d_o, which enters dS and dq alike
    const at::Tensor do_scaled = d_o * d.scale;  // [B, T, H, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const SequenceInputs s = sequence_inputs(in, in.q, seq);
        const at::Tensor dO = rows(do_scaled, seq);  // [L, H, V]
        const at::Tensor dq = rows(grads.dq, seq);   // [L, H, K]
        const at::Tensor dk = rows(grads.dk, seq);   // [L, H, K]
        const at::Tensor dv = rows(grads.dv, seq);   // [L, H, V]
        const at::Tensor dg = rows(grads.dg, seq);   // [L, H, K]
        // [H, K, V] the gradient w.r.t. the current state, from the future
        at::Tensor dS =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({H, d.K, d.V}, opts);
        if (L > 0) {
            // memory O(√L) states (reference/README.md, rule 5): keep the state entering
            // every c-th step
            const int64_t c = ceil_sqrt(L);
            const int64_t num_segments = (L + c - 1) / c;
            at::Tensor checkpoints = at::empty({num_segments, H, d.K, d.V}, opts);  // [NS, H, K, V]
            at::Tensor state = initial_state(in.h0, seq.index, d, opts);            // [H, K, V]
            for (int64_t t = 0; t < L; ++t) {
                if (t % c == 0) checkpoints.select(0, t / c).copy_(state);
                step_inplace(state, s, t);
            }
            // states[i] is S_{start+i-1}: the segment's entering state, then its c states
            at::Tensor states = at::empty({c + 1, H, d.K, d.V}, opts);  // [c + 1, H, K, V]
            at::Tensor scratch = at::empty({H, d.K, d.V}, opts);        // [H, K, V]
            for (int64_t j = num_segments - 1; j >= 0; --j) {
                const int64_t start = j * c;
                const int64_t end = std::min(start + c, L);
                states.select(0, 0).copy_(checkpoints.select(0, j));
                for (int64_t t = start; t < end; ++t) {
                    at::Tensor next = states.select(0, t - start + 1);  // [H, K, V]
                    next.copy_(states.select(0, t - start));
                    step_inplace(next, s, t);
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const at::Tensor S_t = states.select(0, t - start + 1);  // [H, K, V]
                    const at::Tensor S_prev = states.select(0, t - start);   // [H, K, V]
                    const at::Tensor do_t = dO.select(0, t);                 // [H, V]
                    const at::Tensor decay_t = s.decay.select(0, t);         // [H, K]
                    // dS_t = dS + scale·q_t d_o_tᵀ
                    dS.addcmul_(s.q.select(0, t).unsqueeze(2), do_t.unsqueeze(1));
                    // dq_t = scale·S_t d_o_t
                    at::Tensor dq_t = dq.select(0, t);  // [H, K]
                    contract_out(dq_t, scratch, S_t, do_t.unsqueeze(1), 2);
                    // dk_t = dS_t v_t
                    at::Tensor dk_t = dk.select(0, t);  // [H, K]
                    contract_out(dk_t, scratch, dS, s.v.select(0, t).unsqueeze(1), 2);
                    // dv_t = dS_tᵀ k_t
                    at::Tensor dv_t = dv.select(0, t);  // [H, V]
                    contract_out(dv_t, scratch, dS, s.k.select(0, t).unsqueeze(2), 1);
                    // dg_t[d] = exp(g_t[d])·⟨S_{t-1}[d, :], dS_t[d, :]⟩
                    at::Tensor dg_t = dg.select(0, t);  // [H, K]
                    contract_out(dg_t, scratch, S_prev, dS, 2);
                    dg_t.mul_(decay_t);
                    // S_t = diag(exp(g_t))·S_{t-1} + …, so the step before sees diag(exp(g_t))·dS_t
                    dS.mul_(decay_t.unsqueeze(2));
                }
            }
        }
        if (grads.dh0.defined()) grads.dh0.select(0, seq.index).copy_(dS);
    }
    return grads;
}

GlaOutputs gla_fwd_parallel(const GlaInputs& in) {
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
        // G_t = Σ_{r≤t} g_r, per key dimension, along the whole sequence
        const at::Tensor G = rows(in.g, seq).permute({1, 0, 2}).cumsum(1);  // [H, L, K]

        // A[t, s] = Σ_d q_td k_sd exp(G_td − G_sd) for s ≤ t, elementwise in [H, R, L, K] blocks
        // of R rows (about 16 MiB each); −inf before the exp makes the future exactly 0 rather
        // than exp of a large positive number times a 0 mask
        const int64_t R = std::max<int64_t>(1, kBlockElements / (H * L * d.K));
        const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));  // [L]
        at::Tensor A = at::empty({H, L, L}, opts);                    // [H, L, L]
        for (int64_t t0 = 0; t0 < L; t0 += R) {
            const int64_t rows_here = std::min(R, L - t0);
            const at::Tensor G_t = G.narrow(1, t0, rows_here).unsqueeze(2);  // [H, R, 1, K]
            const at::Tensor q_t = q.narrow(1, t0, rows_here).unsqueeze(2);  // [H, R, 1, K]
            // future[t, s] is true for s > t
            const at::Tensor future = (idx.unsqueeze(0) > idx.narrow(0, t0, rows_here).unsqueeze(1))
                                          .view({1, rows_here, L, 1});  // [1, R, L, 1]
            const at::Tensor D = (G_t - G.unsqueeze(1))
                                     .masked_fill_(future, -std::numeric_limits<double>::infinity())
                                     .exp_();  // [H, R, L, K]
            A.narrow(1, t0, rows_here).copy_(D.mul_(q_t).mul_(k.unsqueeze(1)).sum(3));
        }
        const at::Tensor from_h0 = at::bmm(q * G.exp(), h0);             // [H, L, V]
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
