// reference/gated_delta_rule.cpp — float64 gated delta rule: the recurrence, its checkpointed
// reverse, and the WY form that checks it. Plain at:: ops on CPU tensors; no kernel code here.
#include "gated_delta_rule.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "gated_delta_rule";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::contract_out;
using common::rows;
using common::StateSamples;

// The sizes of one call, read from the inputs once they are checked.
struct Dims {
    int64_t B, T, H, HV, K, V, N;
    int64_t group;  // HV / H value heads per key head
    double scale;   // resolved: never 0
};

Dims check_inputs(const GatedDeltaRuleInputs& in) {
    LAV_ASSERT(
        in.q.defined() && in.k.defined() && in.v.defined() && in.g.defined() && in.beta.defined(),
        "gated_delta_rule reference called without q, k, v, g or beta");
    assert_fp64(kFamily, in.q, "q");
    assert_fp64(kFamily, in.k, "k");
    assert_fp64(kFamily, in.v, "v");
    assert_fp64(kFamily, in.g, "g");
    assert_fp64(kFamily, in.beta, "beta");
    assert_fp64(kFamily, in.A_log, "A_log");
    assert_fp64(kFamily, in.dt_bias, "dt_bias");
    assert_fp64(kFamily, in.h0, "h0");
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4,
              "gated_delta_rule: q and v must be [B, T, heads, D], got q ", in.q.sizes(), " and v ",
              in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.HV = in.v.size(2);
    d.V = in.v.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0 && d.H > 0 && d.HV > 0,
              "gated_delta_rule: heads, K and V must be positive");
    LAV_CHECK(d.HV % d.H == 0, "gated_delta_rule: v's heads (HV = ", d.HV,
              ") must be a multiple of q's heads (H = ", d.H, ")");
    d.group = d.HV / d.H;
    check_shape(kFamily, in.k, "k", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.HV, d.V});
    check_shape(kFamily, in.g, "g", {d.B, d.T, d.HV});
    check_shape(kFamily, in.beta, "beta", {d.B, d.T, d.HV});
    if (in.use_gate_in_kernel) {
        LAV_CHECK(in.A_log.defined(), "gated_delta_rule: use_gate_in_kernel needs A_log");
        check_shape(kFamily, in.A_log, "A_log", {d.HV});
        if (in.dt_bias.defined()) check_shape(kFamily, in.dt_bias, "dt_bias", {d.HV});
    } else {
        LAV_CHECK(!in.A_log.defined() && !in.dt_bias.defined(),
                  "gated_delta_rule: A_log and dt_bias are read only with use_gate_in_kernel");
    }
    LAV_CHECK(!in.allow_neg_eigval || in.use_beta_sigmoid_in_kernel,
              "gated_delta_rule: allow_neg_eigval needs use_beta_sigmoid_in_kernel");
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.HV, d.K, d.V});
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

// The state before the first step of sequence `index`: h0's row, or zeros.
at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.HV, d.K, d.V}, opts);
}

// √(Σ x² + eps) over the last dim, kept as a size-1 dim.
at::Tensor l2_norm_of(const at::Tensor& x) {
    return (x.square().sum(-1, /*keepdim=*/true) + kGatedDeltaRuleL2NormEps).sqrt();
}

// dx from dy through y = x / √(Σ x² + eps): ∂y/∂x = (I − y yᵀ) / √(Σ x² + eps).
at::Tensor l2norm_backward(const at::Tensor& x, const at::Tensor& dy) {
    const at::Tensor norm = l2_norm_of(x);  // [.., 1]
    const at::Tensor y = x / norm;
    return (dy - (dy * y).sum(-1, /*keepdim=*/true) * y) / norm;
}

// log(1 + eˣ) without overflow, exact in fp64 for every x.
at::Tensor softplus_exact(const at::Tensor& x) {
    return x.clamp_min(0.0) + (-x.abs()).exp().log1p();
}

// The inputs as the recurrence reads them, per value head.
struct Prepared {
    at::Tensor q;     // [B, T, HV, K] q (normalised if asked) of each value head's key head
    at::Tensor k;     // [B, T, HV, K]
    at::Tensor beta;  // [B, T, HV] β as used
    at::Tensor g;     // [B, T, HV] log decay as used
};

// [B, T, H, K] rows repeated for each key head's value heads: [B, T, HV, K].
at::Tensor by_value_head(const at::Tensor& x, const Dims& d) {
    return d.group == 1 ? x : x.repeat_interleave(d.group, 2);
}

double beta_scale(const GatedDeltaRuleInputs& in) { return in.allow_neg_eigval ? 2.0 : 1.0; }

Prepared prepare(const GatedDeltaRuleInputs& in, const Dims& d) {
    Prepared p;
    at::Tensor q = in.q, k = in.k;
    if (in.use_qk_l2norm_in_kernel) {
        q = q / l2_norm_of(q);
        k = k / l2_norm_of(k);
    }
    p.q = by_value_head(q, d);
    p.k = by_value_head(k, d);
    p.beta = in.use_beta_sigmoid_in_kernel ? at::sigmoid(in.beta) * beta_scale(in) : in.beta;
    if (in.use_gate_in_kernel) {
        const at::Tensor bias = in.dt_bias.defined() ? in.dt_bias : at::zeros_like(in.A_log);
        p.g = -in.A_log.exp() * softplus_exact(in.g + bias);
    } else {
        p.g = in.g;
    }
    return p;
}

// One sequence's inputs as [L, HV, D] views.
struct SequenceInputs {
    at::Tensor q;      // [L, HV, K]
    at::Tensor k;      // [L, HV, K]
    at::Tensor v;      // [L, HV, V]
    at::Tensor beta;   // [L, HV]
    at::Tensor decay;  // [L, HV] exp(g)
};

SequenceInputs sequence_inputs(const Prepared& p, const at::Tensor& q, const at::Tensor& v,
                               const Sequence& seq) {
    return {rows(q, seq), rows(p.k, seq), rows(v, seq), rows(p.beta, seq), rows(p.g, seq).exp()};
}

// Every per-step product below is an elementwise op plus a reduction rather than a bmm: at
// [HV, K, V] sizes ATen runs these on the calling thread, while MKL would fork and join threads
// for each small product (reference/README.md has the measurement).

// Per-step buffers, allocated once per sequence.
struct Workspace {
    at::Tensor scratch;  // [HV, K, V]
    at::Tensor p;        // [HV, V] S̄ᵀ k_t
    at::Tensor u;        // [HV, V] β_t (v_t − S̄ᵀ k_t)
    Workspace(const Dims& d, const at::TensorOptions& opts)
        : scratch(at::empty({d.HV, d.K, d.V}, opts)),
          p(at::empty({d.HV, d.V}, opts)),
          u(at::empty({d.HV, d.V}, opts)) {}
};

// S ← exp(g_t) S, then S ← S + k_t u_tᵀ with u_t = β_t (v_t − Sᵀ k_t), for every value head.
void step_inplace(at::Tensor& state, const SequenceInputs& s, int64_t t, Workspace& w) {
    const int64_t HV = state.size(0);
    const at::Tensor k_t = s.k.select(0, t);  // [HV, K]
    state.mul_(s.decay.select(0, t).view({HV, 1, 1}));
    contract_out(w.p, w.scratch, state, k_t.unsqueeze(2), 1);
    at::sub_out(w.u, s.v.select(0, t), w.p).mul_(s.beta.select(0, t).unsqueeze(1));
    state.addcmul_(k_t.unsqueeze(2), w.u.unsqueeze(1));
}

}  // namespace

GatedDeltaRuleOutputs gated_delta_rule_fwd(const GatedDeltaRuleInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const Prepared p = prepare(in, d);
    const at::Tensor q_scaled = p.q * d.scale;               // [B, T, HV, K]
    at::Tensor o = at::zeros_like(in.v);                     // [B, T, HV, V]
    at::Tensor ht = at::empty({d.N, d.HV, d.K, d.V}, opts);  // [N, HV, K, V]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    const std::vector<Sequence> seqs = sequences(d.B, d.T, in.cu_seqlens);
    StateSamples samples(seqs, in.state_stride, {d.HV, d.K, d.V}, opts);  // [NT, HV, K, V]
    for (const Sequence& seq : seqs) {
        const SequenceInputs s = sequence_inputs(p, q_scaled, in.v, seq);
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [HV, K, V]
        Workspace w(d, opts);
        const at::Tensor o_seq = rows(o, seq);  // [L, HV, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            samples.keep(t, state);
            step_inplace(state, s, t, w);
            // o_t = S_tᵀ (scale·q_t), written straight into o's row
            at::Tensor o_t = o_seq.select(0, t);  // [HV, V]
            contract_out(o_t, w.scratch, state, s.q.select(0, t).unsqueeze(2), 1);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht, samples.states()};
}

GatedDeltaRuleGrads gated_delta_rule_bwd(const GatedDeltaRuleInputs& in, const at::Tensor& d_o,
                                         const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "gated_delta_rule reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.HV, d.V});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.HV, d.K, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t HV = d.HV;
    const Prepared p = prepare(in, d);

    // per value head, w.r.t. the normalised q̂, k̂, the β and the log decay as used
    at::Tensor dq = at::zeros_like(p.q);      // [B, T, HV, K]
    at::Tensor dk = at::zeros_like(p.k);      // [B, T, HV, K]
    at::Tensor dbeta = at::zeros_like(in.g);  // [B, T, HV]
    at::Tensor dg = at::zeros_like(in.g);     // [B, T, HV]
    GatedDeltaRuleGrads grads;
    grads.dv = at::zeros_like(in.v);                                        // [B, T, HV, V]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, HV, d.K, d.V}, opts);  // [N, HV, K, V]

    // q is not pre-scaled here; the scale rides on d_o, which enters dS and dq alike
    const at::Tensor do_scaled = d_o * d.scale;  // [B, T, HV, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const SequenceInputs s = sequence_inputs(p, p.q, in.v, seq);
        const at::Tensor dO = rows(do_scaled, seq);     // [L, HV, V]
        const at::Tensor dq_seq = rows(dq, seq);        // [L, HV, K]
        const at::Tensor dk_seq = rows(dk, seq);        // [L, HV, K]
        const at::Tensor dv_seq = rows(grads.dv, seq);  // [L, HV, V]
        const at::Tensor dbeta_seq = rows(dbeta, seq);  // [L, HV]
        const at::Tensor dg_seq = rows(dg, seq);        // [L, HV]
        // [HV, K, V] the gradient w.r.t. the current state, from the future
        at::Tensor dS =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({HV, d.K, d.V}, opts);
        if (L > 0) {
            Workspace w(d, opts);
            // memory O(√L) states (reference/README.md, rule 5): keep the state entering
            // every c-th step
            const int64_t c = ceil_sqrt(L);
            const int64_t num_segments = (L + c - 1) / c;
            at::Tensor checkpoints = at::empty({num_segments, HV, d.K, d.V}, opts);
            at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [HV, K, V]
            for (int64_t t = 0; t < L; ++t) {
                if (t % c == 0) checkpoints.select(0, t / c).copy_(state);
                step_inplace(state, s, t, w);
            }
            // states[i] is S_{start+i-1}: the segment's entering state, then its c states
            at::Tensor states = at::empty({c + 1, HV, d.K, d.V}, opts);  // [c + 1, HV, K, V]
            at::Tensor decayed = at::empty({HV, d.K, d.V}, opts);        // [HV, K, V] S̄
            at::Tensor r = at::empty({HV, d.V}, opts);         // [HV, V] v_t − S̄ᵀ k_t
            at::Tensor du = at::empty({HV, d.V}, opts);        // [HV, V] ∂L/∂u_t
            at::Tensor dp = at::empty({HV, d.V}, opts);        // [HV, V] ∂L/∂(S̄ᵀ k_t)
            at::Tensor dk_extra = at::empty({HV, d.K}, opts);  // [HV, K]
            for (int64_t j = num_segments - 1; j >= 0; --j) {
                const int64_t start = j * c;
                const int64_t end = std::min(start + c, L);
                states.select(0, 0).copy_(checkpoints.select(0, j));
                for (int64_t t = start; t < end; ++t) {
                    at::Tensor next = states.select(0, t - start + 1);  // [HV, K, V]
                    next.copy_(states.select(0, t - start));
                    step_inplace(next, s, t, w);
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const at::Tensor S_t = states.select(0, t - start + 1);      // [HV, K, V]
                    const at::Tensor do_t = dO.select(0, t);                     // [HV, V]
                    const at::Tensor k_t = s.k.select(0, t).unsqueeze(2);        // [HV, K, 1]
                    const at::Tensor beta_t = s.beta.select(0, t).unsqueeze(1);  // [HV, 1]
                    const at::Tensor decay_t = s.decay.select(0, t).view({HV, 1, 1});
                    // dS_t = dS + scale·q_t d_o_tᵀ
                    dS.addcmul_(s.q.select(0, t).unsqueeze(2), do_t.unsqueeze(1));
                    // dq̂_t = scale·S_t d_o_t
                    at::Tensor dq_t = dq_seq.select(0, t);  // [HV, K]
                    contract_out(dq_t, w.scratch, S_t, do_t.unsqueeze(1), 2);
                    // S̄ = exp(g_t) S_{t-1}, r = v_t − S̄ᵀ k_t and u = β_t r
                    at::mul_out(decayed, states.select(0, t - start), decay_t);
                    contract_out(w.p, w.scratch, decayed, k_t, 1);
                    at::sub_out(r, s.v.select(0, t), w.p);
                    at::mul_out(w.u, r, beta_t);
                    // S_t = S̄ + k_t u_tᵀ: du = dS_tᵀ k_t, dk̂_t = dS_t u_t
                    contract_out(du, w.scratch, dS, k_t, 1);
                    at::Tensor dk_t = dk_seq.select(0, t);  // [HV, K]
                    contract_out(dk_t, w.scratch, dS, w.u.unsqueeze(1), 2);
                    // u_t = β_t (v_t − p_t): dv_t = β_t du, dβ_t = du·r, dp = −β_t du
                    at::Tensor dv_t = dv_seq.select(0, t);  // [HV, V]
                    at::mul_out(dv_t, du, beta_t);
                    at::Tensor dbeta_t = dbeta_seq.select(0, t);  // [HV]
                    at::mul_out(dp, du, r);
                    at::sum_out(dbeta_t, dp, 1);
                    at::mul_out(dp, du, beta_t).neg_();
                    // p_t = S̄ᵀ k_t: dk̂_t += S̄ dp, and dS̄ = dS_t + k_t dpᵀ
                    contract_out(dk_extra, w.scratch, decayed, dp.unsqueeze(1), 2);
                    dk_t.add_(dk_extra);
                    dS.addcmul_(k_t, dp.unsqueeze(1));
                    // S̄ = exp(g_t) S_{t-1}: dg_t = ⟨S̄, dS̄⟩ and dS_{t-1} = exp(g_t) dS̄
                    at::Tensor dg_t = dg_seq.select(0, t);  // [HV]
                    contract_out(dg_t, w.scratch, decayed, dS, {1, 2});
                    dS.mul_(decay_t);
                }
            }
        }
        if (grads.dh0.defined()) grads.dh0.select(0, seq.index).copy_(dS);
    }

    // back through GVA (sum over each key head's value heads) and the in-kernel transforms
    if (d.group > 1) {
        dq = dq.view({d.B, d.T, d.H, d.group, d.K}).sum(3);
        dk = dk.view({d.B, d.T, d.H, d.group, d.K}).sum(3);
    }
    grads.dq = in.use_qk_l2norm_in_kernel ? l2norm_backward(in.q, dq) : dq;
    grads.dk = in.use_qk_l2norm_in_kernel ? l2norm_backward(in.k, dk) : dk;
    if (in.use_beta_sigmoid_in_kernel) {
        const at::Tensor sig = at::sigmoid(in.beta);
        grads.dbeta = dbeta * sig * (1.0 - sig) * beta_scale(in);
    } else {
        grads.dbeta = dbeta;
    }
    if (in.use_gate_in_kernel) {
        // g = −exp(A_log)·softplus(x), x = g_raw + dt_bias: ∂g/∂A_log = g, ∂g/∂x = −exp(A_log)σ(x)
        const at::Tensor bias = in.dt_bias.defined() ? in.dt_bias : at::zeros_like(in.A_log);
        grads.dA_log = (dg * p.g).sum(at::IntArrayRef{0, 1});
        grads.dg = dg * -in.A_log.exp() * at::sigmoid(in.g + bias);
        if (in.dt_bias.defined()) grads.ddt_bias = grads.dg.sum(at::IntArrayRef{0, 1});
    } else {
        grads.dg = dg;
    }
    return grads;
}

GatedDeltaRuleOutputs gated_delta_rule_fwd_wy(const GatedDeltaRuleInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const int64_t HV = d.HV;
    const Prepared p = prepare(in, d);
    at::Tensor o = at::zeros_like(in.v);                   // [B, T, HV, V]
    at::Tensor ht = at::empty({d.N, HV, d.K, d.V}, opts);  // [N, HV, K, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor h0 = in.h0.defined() ? in.h0.select(0, seq.index)
                                              : at::zeros({HV, d.K, d.V}, opts);  // [HV, K, V]
        if (L == 0) {
            ht.select(0, seq.index).copy_(h0);
            continue;
        }
        const at::Tensor q = rows(p.q, seq).permute({1, 0, 2});   // [HV, L, K]
        const at::Tensor k = rows(p.k, seq).permute({1, 0, 2});   // [HV, L, K]
        const at::Tensor v = rows(in.v, seq).permute({1, 0, 2});  // [HV, L, V]
        const at::Tensor beta = rows(p.beta, seq).t();            // [HV, L]
        // G_t = Σ_{r≤t} g_r: the inclusive cumsum along the whole sequence
        const at::Tensor G = rows(p.g, seq).t().cumsum(1);  // [HV, L]

        const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));    // [L]
        const at::Tensor future = idx.unsqueeze(0) > idx.unsqueeze(1);  // [L, L] s > t
        // D[t, s] = exp(G_t − G_s) for s ≤ t; −inf before exp makes the rest exactly 0
        // rather than exp of a large positive number times a 0 mask
        const at::Tensor D = (G.unsqueeze(2) - G.unsqueeze(1))
                                 .masked_fill_(future, -std::numeric_limits<double>::infinity())
                                 .exp_();  // [HV, L, L]
        // u_t = β_t (v_t − e^{G_t} k_tᵀ h0 − Σ_{s<t} e^{G_t − G_s} (k_t·k_s) u_s)
        const at::Tensor A =
            (at::bmm(k, k.transpose(1, 2)) * D * beta.unsqueeze(2)).tril_(-1);  // [HV, L, L]
        const at::Tensor I_plus_A = A + at::eye(L, opts);
        const at::Tensor decay = G.exp().unsqueeze(2);                            // [HV, L, 1]
        const at::Tensor rhs = (v - decay * at::bmm(k, h0)) * beta.unsqueeze(2);  // [HV, L, V]
        const at::Tensor U = at::linalg_solve_triangular(I_plus_A, rhs, /*upper=*/false,
                                                         /*left=*/true, /*unitriangular=*/true);
        const at::Tensor scores = at::bmm(q, k.transpose(1, 2)) * D;  // [HV, L, L]
        const at::Tensor O = (decay * at::bmm(q, h0) + at::bmm(scores, U)) * d.scale;
        rows(o, seq).copy_(O.permute({1, 0, 2}));
        const at::Tensor G_last = G.select(1, L - 1);               // [HV]
        const at::Tensor to_end = (G_last.unsqueeze(1) - G).exp();  // [HV, L]
        ht.select(0, seq.index)
            .copy_(G_last.exp().view({HV, 1, 1}) * h0 +
                   at::bmm(k.transpose(1, 2), U * to_end.unsqueeze(2)));
    }
    return {o, ht, {}};
}

}  // namespace lav::ref
