// reference/delta_rule.cpp — float64 delta rule: the recurrence, its checkpointed reverse, and the
// WY form that checks it. Plain at:: ops on CPU tensors; no kernel code here.
#include "delta_rule.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "delta_rule";
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

Dims check_inputs(const DeltaRuleInputs& in) {
    LAV_ASSERT(in.q.defined() && in.k.defined() && in.v.defined() && in.beta.defined(),
               "delta_rule reference called without q, k, v or beta");
    assert_fp64(kFamily, in.q, "q");
    assert_fp64(kFamily, in.k, "k");
    assert_fp64(kFamily, in.v, "v");
    assert_fp64(kFamily, in.beta, "beta");
    assert_fp64(kFamily, in.h0, "h0");
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4,
              "delta_rule: q and v must be [B, T, H, D], got q ", in.q.sizes(), " and v ",
              in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.V = in.v.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0, "delta_rule: K and V must be positive, got K = ", d.K,
              ", V = ", d.V);
    check_shape(kFamily, in.k, "k", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.H, d.V});
    check_shape(kFamily, in.beta, "beta", {d.B, d.T, d.H});
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.H, d.K, d.V});
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

// The state before the first step of sequence `index`: h0's row, or zeros.
at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.H, d.K, d.V}, opts);
}

// √(Σ x² + eps) over the last dim, kept as a size-1 dim.
at::Tensor l2_norm_of(const at::Tensor& x) {
    return (x.square().sum(-1, /*keepdim=*/true) + kDeltaRuleL2NormEps).sqrt();
}

// dx from dy through y = x / √(Σ x² + eps): ∂y/∂x = (I − y yᵀ) / √(Σ x² + eps).
at::Tensor l2norm_backward(const at::Tensor& x, const at::Tensor& dy) {
    const at::Tensor norm = l2_norm_of(x);  // [.., 1]
    const at::Tensor y = x / norm;
    return (dy - (dy * y).sum(-1, /*keepdim=*/true) * y) / norm;
}

// The q and k the recurrence reads: the inputs, or their l2-normalised rows.
struct QueryKey {
    at::Tensor q;  // [B, T, H, K]
    at::Tensor k;  // [B, T, H, K]
};

QueryKey query_key(const DeltaRuleInputs& in) {
    if (!in.use_qk_l2norm_in_kernel) return {in.q, in.k};
    return {in.q / l2_norm_of(in.q), in.k / l2_norm_of(in.k)};
}

// One sequence's inputs as [L, H, D] views.
struct SequenceInputs {
    at::Tensor q;     // [L, H, K]
    at::Tensor k;     // [L, H, K]
    at::Tensor v;     // [L, H, V]
    at::Tensor beta;  // [L, H]
};

SequenceInputs sequence_inputs(const QueryKey& qk, const DeltaRuleInputs& in, const Sequence& seq) {
    return {rows(qk.q, seq), rows(qk.k, seq), rows(in.v, seq), rows(in.beta, seq)};
}

// Every per-step product below is an elementwise op plus a reduction rather than a bmm: at
// [H, K, V] sizes ATen runs these on the calling thread, while MKL would fork and join threads
// for each small product (reference/README.md has the measurement).

// Per-step buffers, allocated once per sequence.
struct Workspace {
    at::Tensor scratch;  // [H, K, V]
    at::Tensor p;        // [H, V] Sᵀ k_t
    at::Tensor u;        // [H, V] β_t (v_t − Sᵀ k_t)
    Workspace(const Dims& d, const at::TensorOptions& opts)
        : scratch(at::empty({d.H, d.K, d.V}, opts)),
          p(at::empty({d.H, d.V}, opts)),
          u(at::empty({d.H, d.V}, opts)) {}
};

// S ← S + k_t u_tᵀ with u_t = β_t (v_t − Sᵀ k_t), for every head, overwriting `state`.
void step_inplace(at::Tensor& state, const SequenceInputs& s, int64_t t, Workspace& w) {
    const at::Tensor k_t = s.k.select(0, t);  // [H, K]
    contract_out(w.p, w.scratch, state, k_t.unsqueeze(2), 1);
    at::sub_out(w.u, s.v.select(0, t), w.p).mul_(s.beta.select(0, t).unsqueeze(1));
    state.addcmul_(k_t.unsqueeze(2), w.u.unsqueeze(1));
}

}  // namespace

DeltaRuleOutputs delta_rule_fwd(const DeltaRuleInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    QueryKey qk = query_key(in);
    qk.q = qk.q * d.scale;
    at::Tensor o = at::zeros_like(in.v);                    // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, d.H, d.K, d.V}, opts);  // [N, H, K, V]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    const std::vector<Sequence> seqs = sequences(d.B, d.T, in.cu_seqlens);
    StateSamples samples(seqs, in.state_stride, {d.H, d.K, d.V}, opts);  // [NT, H, K, V]
    for (const Sequence& seq : seqs) {
        const SequenceInputs s = sequence_inputs(qk, in, seq);
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
        Workspace w(d, opts);
        const at::Tensor o_seq = rows(o, seq);  // [L, H, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            samples.keep(t, state);
            step_inplace(state, s, t, w);
            // o_t = S_tᵀ (scale·q_t), written straight into o's row
            at::Tensor o_t = o_seq.select(0, t);  // [H, V]
            contract_out(o_t, w.scratch, state, s.q.select(0, t).unsqueeze(2), 1);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht, samples.states()};
}

DeltaRuleGrads delta_rule_bwd(const DeltaRuleInputs& in, const at::Tensor& d_o,
                              const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "delta_rule reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.V});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.H, d.K, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;

    DeltaRuleGrads grads;
    // dq and dk hold the gradients w.r.t. the normalised q̂, k̂ until the end
    grads.dq = at::zeros_like(in.q);                                       // [B, T, H, K]
    grads.dk = at::zeros_like(in.k);                                       // [B, T, H, K]
    grads.dv = at::zeros_like(in.v);                                       // [B, T, H, V]
    grads.dbeta = at::zeros_like(in.beta);                                 // [B, T, H]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]

    const QueryKey qk = query_key(in);
    // q is not pre-scaled here; the scale rides on d_o, which enters dS and dq alike
    const at::Tensor do_scaled = d_o * d.scale;  // [B, T, H, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const SequenceInputs s = sequence_inputs(qk, in, seq);
        const at::Tensor dO = rows(do_scaled, seq);       // [L, H, V]
        const at::Tensor dq = rows(grads.dq, seq);        // [L, H, K]
        const at::Tensor dk = rows(grads.dk, seq);        // [L, H, K]
        const at::Tensor dv = rows(grads.dv, seq);        // [L, H, V]
        const at::Tensor dbeta = rows(grads.dbeta, seq);  // [L, H]
        // [H, K, V] the gradient w.r.t. the current state, from the future
        at::Tensor dS =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({H, d.K, d.V}, opts);
        if (L > 0) {
            Workspace w(d, opts);
            // memory O(√L) states (reference/README.md, rule 5): keep the state entering
            // every c-th step
            const int64_t c = ceil_sqrt(L);
            const int64_t num_segments = (L + c - 1) / c;
            at::Tensor checkpoints = at::empty({num_segments, H, d.K, d.V}, opts);  // [NS, H, K, V]
            at::Tensor state = initial_state(in.h0, seq.index, d, opts);            // [H, K, V]
            for (int64_t t = 0; t < L; ++t) {
                if (t % c == 0) checkpoints.select(0, t / c).copy_(state);
                step_inplace(state, s, t, w);
            }
            // states[i] is S_{start+i-1}: the segment's entering state, then its c states
            at::Tensor states = at::empty({c + 1, H, d.K, d.V}, opts);  // [c + 1, H, K, V]
            at::Tensor r = at::empty({H, d.V}, opts);                   // [H, V] v_t − Sᵀ k_t
            at::Tensor du = at::empty({H, d.V}, opts);                  // [H, V] ∂L/∂u_t
            at::Tensor dp = at::empty({H, d.V}, opts);                  // [H, V] ∂L/∂(Sᵀ k_t)
            at::Tensor dk_extra = at::empty({H, d.K}, opts);            // [H, K]
            for (int64_t j = num_segments - 1; j >= 0; --j) {
                const int64_t start = j * c;
                const int64_t end = std::min(start + c, L);
                states.select(0, 0).copy_(checkpoints.select(0, j));
                for (int64_t t = start; t < end; ++t) {
                    at::Tensor next = states.select(0, t - start + 1);  // [H, K, V]
                    next.copy_(states.select(0, t - start));
                    step_inplace(next, s, t, w);
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const at::Tensor S_t = states.select(0, t - start + 1);      // [H, K, V]
                    const at::Tensor S_prev = states.select(0, t - start);       // [H, K, V]
                    const at::Tensor do_t = dO.select(0, t);                     // [H, V]
                    const at::Tensor k_t = s.k.select(0, t).unsqueeze(2);        // [H, K, 1]
                    const at::Tensor beta_t = s.beta.select(0, t).unsqueeze(1);  // [H, 1]
                    // dS_t = dS + scale·q_t d_o_tᵀ
                    dS.addcmul_(s.q.select(0, t).unsqueeze(2), do_t.unsqueeze(1));
                    // dq̂_t = scale·S_t d_o_t
                    at::Tensor dq_t = dq.select(0, t);  // [H, K]
                    contract_out(dq_t, w.scratch, S_t, do_t.unsqueeze(1), 2);
                    // the step's residual r = v_t − S_{t-1}ᵀ k_t and update u = β_t r
                    contract_out(w.p, w.scratch, S_prev, k_t, 1);
                    at::sub_out(r, s.v.select(0, t), w.p);
                    at::mul_out(w.u, r, beta_t);
                    // S_t = S_{t-1} + k_t u_tᵀ: du = dS_tᵀ k_t, dk̂_t = dS_t u_t
                    contract_out(du, w.scratch, dS, k_t, 1);
                    at::Tensor dk_t = dk.select(0, t);  // [H, K]
                    contract_out(dk_t, w.scratch, dS, w.u.unsqueeze(1), 2);
                    // u_t = β_t (v_t − p_t): dv_t = β_t du, dβ_t = du·r, dp = −β_t du
                    at::Tensor dv_t = dv.select(0, t);  // [H, V]
                    at::mul_out(dv_t, du, beta_t);
                    at::Tensor dbeta_t = dbeta.select(0, t);  // [H]
                    at::mul_out(dp, du, r);
                    at::sum_out(dbeta_t, dp, 1);
                    at::mul_out(dp, du, beta_t).neg_();
                    // p_t = S_{t-1}ᵀ k_t: dk̂_t += S_{t-1} dp, and dS_{t-1} = dS_t + k_t dpᵀ
                    contract_out(dk_extra, w.scratch, S_prev, dp.unsqueeze(1), 2);
                    dk_t.add_(dk_extra);
                    dS.addcmul_(k_t, dp.unsqueeze(1));
                }
            }
        }
        if (grads.dh0.defined()) grads.dh0.select(0, seq.index).copy_(dS);
    }
    if (in.use_qk_l2norm_in_kernel) {
        grads.dq = l2norm_backward(in.q, grads.dq);
        grads.dk = l2norm_backward(in.k, grads.dk);
    }
    return grads;
}

DeltaRuleOutputs delta_rule_fwd_wy(const DeltaRuleInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const QueryKey qk = query_key(in);
    at::Tensor o = at::zeros_like(in.v);                    // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, d.H, d.K, d.V}, opts);  // [N, H, K, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor h0 = in.h0.defined() ? in.h0.select(0, seq.index)
                                              : at::zeros({d.H, d.K, d.V}, opts);  // [H, K, V]
        if (L == 0) {
            ht.select(0, seq.index).copy_(h0);
            continue;
        }
        const at::Tensor q = rows(qk.q, seq).permute({1, 0, 2});  // [H, L, K]
        const at::Tensor k = rows(qk.k, seq).permute({1, 0, 2});  // [H, L, K]
        const at::Tensor v = rows(in.v, seq).permute({1, 0, 2});  // [H, L, V]
        const at::Tensor beta = rows(in.beta, seq).t();           // [H, L]

        const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));  // [L]
        // [L, L] true for s > t (the future) and for s ≥ t (not strictly in the past)
        const at::Tensor future = idx.unsqueeze(0) > idx.unsqueeze(1);
        const at::Tensor not_past = idx.unsqueeze(0) >= idx.unsqueeze(1);
        // u_t = β_t (v_t − k_tᵀ h0 − Σ_{s<t} (k_t·k_s) u_s), i.e. (I + A) U = diag(β)(V − K h0)
        const at::Tensor A = (at::bmm(k, k.transpose(1, 2)) * beta.unsqueeze(2))
                                 .masked_fill_(not_past, 0.0);            // [H, L, L]
        const at::Tensor I_plus_A = A + at::eye(L, opts);                 // [H, L, L]
        const at::Tensor rhs = (v - at::bmm(k, h0)) * beta.unsqueeze(2);  // [H, L, V]
        const at::Tensor U = at::linalg_solve_triangular(I_plus_A, rhs, /*upper=*/false,
                                                         /*left=*/true, /*unitriangular=*/true);
        const at::Tensor scores =
            at::bmm(q, k.transpose(1, 2)).masked_fill_(future, 0.0);           // [H, L, L]
        const at::Tensor O = (at::bmm(q, h0) + at::bmm(scores, U)) * d.scale;  // [H, L, V]
        rows(o, seq).copy_(O.permute({1, 0, 2}));
        ht.select(0, seq.index).copy_(h0 + at::bmm(k.transpose(1, 2), U));
    }
    return {o, ht, {}};
}

}  // namespace lav::ref
