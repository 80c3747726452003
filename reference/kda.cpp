// reference/kda.cpp — float64 KDA: the recurrence, its checkpointed reverse, and the chunked WY
// form that checks it. Plain at:: ops on CPU tensors; no kernel code here.
#include "kda.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "kda";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::contract_out;
using common::rows;
using common::StateSamples;

// FLA's l2norm puts its epsilon inside the square root: x / sqrt(Σ x² + eps).
constexpr double kL2NormEps = 1e-6;

// The sizes of one call, read from the inputs once they are checked.
struct Dims {
    int64_t B, T, H, HV, K, V, N;
    int64_t group;  // HV / H: value heads per key head
    double scale;   // resolved: never 0
};

Dims check_inputs(const KdaInputs& in) {
    LAV_ASSERT(
        in.q.defined() && in.k.defined() && in.v.defined() && in.g.defined() && in.beta.defined(),
        "kda reference called without q, k, v, g or beta");
    assert_fp64(kFamily, in.q, "q");
    assert_fp64(kFamily, in.k, "k");
    assert_fp64(kFamily, in.v, "v");
    assert_fp64(kFamily, in.g, "g");
    assert_fp64(kFamily, in.beta, "beta");
    assert_fp64(kFamily, in.A_log, "A_log");
    assert_fp64(kFamily, in.dt_bias, "dt_bias");
    assert_fp64(kFamily, in.h0, "h0");
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4, "kda: q and v must be [B, T, H, D], got q ",
              in.q.sizes(), " and v ", in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.HV = in.v.size(2);
    d.V = in.v.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0 && d.H > 0, "kda: H, K and V must be positive, got H = ", d.H,
              ", K = ", d.K, ", V = ", d.V);
    LAV_CHECK(d.HV > 0 && d.HV % d.H == 0, "kda: value heads HV = ", d.HV,
              " must be a positive multiple of H = ", d.H);
    d.group = d.HV / d.H;
    check_shape(kFamily, in.k, "k", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.HV, d.V});
    check_shape(kFamily, in.g, "g", {d.B, d.T, d.HV, d.K});
    check_shape(kFamily, in.beta, "beta", {d.B, d.T, d.HV});
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.HV, d.K, d.V});
    if (in.use_gate_in_kernel) {
        LAV_CHECK(in.A_log.defined(), "kda: use_gate_in_kernel needs A_log");
        check_shape(kFamily, in.A_log, "A_log", {d.HV});
        if (in.dt_bias.defined()) check_shape(kFamily, in.dt_bias, "dt_bias", {d.HV * d.K});
    }
    LAV_CHECK(!in.lower_bound || (in.use_gate_in_kernel && *in.lower_bound < 0.0),
              "kda: lower_bound needs use_gate_in_kernel and must be negative");
    LAV_CHECK(!in.allow_neg_eigval || in.use_beta_sigmoid_in_kernel,
              "kda: allow_neg_eigval needs use_beta_sigmoid_in_kernel");
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

// ---- the in-kernel activations: l2norm, gate, beta ----

/// One sequence's inputs after the options are applied, as [L, heads, D] tensors, with what
/// the activations' backward needs. Formed per sequence, so that no elementwise op sees a
/// neighbour's rows: a varlen batch then gives bitwise its sequences' results.
struct SequenceInputs {
    at::Tensor q_hat, k_hat;    // [L, H, K] normalised (or as given)
    at::Tensor q_rstd, k_rstd;  // [L, H, 1] 1/sqrt(Σ x² + eps); undefined without l2norm
    at::Tensor q, k;            // [L, HV, K] q_hat, k_hat repeated over each group
    at::Tensor v;               // [L, HV, V]
    at::Tensor g;               // [L, HV, K] the log decay
    at::Tensor decay;           // [L, HV, K] exp(g)
    at::Tensor beta;            // [L, HV]
    at::Tensor gate_arg;        // [L, HV, K] g_raw + dt_bias (gate in kernel only)
};

/// softplus(x) = log(1 + e^x), without overflow for large x.
at::Tensor softplus_stable(const at::Tensor& x) {
    return x.clamp_min(0.0) + at::log1p(at::exp(-x.abs()));
}

/// exp(A_log[hv]) broadcast over [L, HV, K].
at::Tensor gate_rate(const KdaInputs& in, const Dims& d) {
    return in.A_log.exp().view({1, d.HV, 1});
}

/// Repeats each key head over its group of value heads: [L, H, K] -> [L, HV, K].
at::Tensor to_value_heads(const at::Tensor& x, const Dims& d) {
    return d.group == 1 ? x : x.repeat_interleave(d.group, 1);
}

/// The gradient of a [L, HV, K] tensor w.r.t. its key heads: summed over each group.
at::Tensor sum_groups(const at::Tensor& x, const Dims& d) {
    return d.group == 1 ? x : x.reshape({x.size(0), d.H, d.group, d.K}).sum(2);
}

SequenceInputs prepare(const KdaInputs& in, const Dims& d, const Sequence& seq) {
    SequenceInputs s;
    s.q_hat = rows(in.q, seq);
    s.k_hat = rows(in.k, seq);
    if (in.use_qk_l2norm_in_kernel) {
        s.q_rstd = at::rsqrt((s.q_hat * s.q_hat).sum(2, /*keepdim=*/true) + kL2NormEps);
        s.k_rstd = at::rsqrt((s.k_hat * s.k_hat).sum(2, /*keepdim=*/true) + kL2NormEps);
        s.q_hat = s.q_hat * s.q_rstd;
        s.k_hat = s.k_hat * s.k_rstd;
    }
    s.q = to_value_heads(s.q_hat, d);
    s.k = to_value_heads(s.k_hat, d);
    s.v = rows(in.v, seq);
    s.g = rows(in.g, seq);
    if (in.use_gate_in_kernel) {
        s.gate_arg = in.dt_bias.defined() ? s.g + in.dt_bias.view({1, d.HV, d.K}) : s.g;
        const at::Tensor rate = gate_rate(in, d);
        s.g = in.lower_bound ? *in.lower_bound * at::sigmoid(rate * s.gate_arg)
                             : -rate * softplus_stable(s.gate_arg);
    }
    s.decay = s.g.exp();
    s.beta = rows(in.beta, seq);
    if (in.use_beta_sigmoid_in_kernel)
        s.beta = at::sigmoid(s.beta) * (in.allow_neg_eigval ? 2.0 : 1.0);
    return s;
}

/// d(l2norm)ᵀ dy: rstd · (dy − (dy·y) y), with y the normalised vector.
at::Tensor l2norm_bwd(const at::Tensor& dy, const at::Tensor& y, const at::Tensor& rstd) {
    return rstd * (dy - (dy * y).sum(2, /*keepdim=*/true) * y);
}

// ---- the recurrence ----

// The state before the first step of sequence `index`: h0's row, or zeros.
at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.HV, d.K, d.V}, opts);
}

// Every per-step product below is an elementwise op plus a reduction rather than a bmm: at
// [HV, K, V] sizes ATen runs these on the calling thread, while MKL forks and joins threads for
// each small product (reference/README.md, simple_gla).

/// Scratch for one step: the decayed state's readout and the delta-rule value.
struct StepBuffers {
    at::Tensor scratch;  // [HV, K, V]
    at::Tensor p;        // [HV, V] S̄ᵀ k
    at::Tensor u;        // [HV, V] β (v − p)
};

StepBuffers step_buffers(const Dims& d, const at::TensorOptions& opts) {
    return {at::empty({d.HV, d.K, d.V}, opts), at::empty({d.HV, d.V}, opts),
            at::empty({d.HV, d.V}, opts)};
}

// S ← diag(exp(g_t)) S (the decayed state S̄_t), then p = S̄ᵀ k_t and u = β_t (v_t − p).
void decay_and_delta(at::Tensor& state, StepBuffers& buf, const SequenceInputs& s, int64_t t) {
    const at::Tensor k_t = s.k.select(0, t);  // [HV, K]
    state.mul_(s.decay.select(0, t).unsqueeze(2));
    contract_out(buf.p, buf.scratch, state, k_t.unsqueeze(2), 1);
    at::sub_out(buf.u, s.v.select(0, t), buf.p).mul_(s.beta.select(0, t).unsqueeze(1));
}

// S_t = S̄_t + k_t u_tᵀ, overwriting `state` ([HV, K, V]).
void step_inplace(at::Tensor& state, StepBuffers& buf, const SequenceInputs& s, int64_t t) {
    decay_and_delta(state, buf, s, t);
    state.addcmul_(s.k.select(0, t).unsqueeze(2), buf.u.unsqueeze(1));
}

/// One sequence's gradients w.r.t. what the recurrence consumed: q, k per value head, the log
/// decay and the activated β; dS holds dht on entry and ∂L/∂h0 on return.
struct CoreGrads {
    at::Tensor dq, dk;  // [L, HV, K]
    at::Tensor dv;      // [L, HV, V]
    at::Tensor dg;      // [L, HV, K]
    at::Tensor dbeta;   // [L, HV]
};

CoreGrads core_bwd(const SequenceInputs& s, const at::Tensor& h0, const at::Tensor& dO,
                   at::Tensor& dS, const Dims& d) {
    const int64_t L = s.v.size(0);
    const at::TensorOptions opts = s.v.options();
    CoreGrads grads;
    grads.dq = at::zeros_like(s.q);        // [L, HV, K]
    grads.dk = at::zeros_like(s.k);        // [L, HV, K]
    grads.dv = at::zeros_like(s.v);        // [L, HV, V]
    grads.dg = at::zeros_like(s.g);        // [L, HV, K]
    grads.dbeta = at::zeros_like(s.beta);  // [L, HV]
    if (L == 0) return grads;
    StepBuffers buf = step_buffers(d, opts);
    at::Tensor sbar = at::empty({d.HV, d.K, d.V}, opts);  // [HV, K, V] S̄_t
    at::Tensor du = at::empty({d.HV, d.V}, opts);         // [HV, V]
    at::Tensor dp = at::empty({d.HV, d.V}, opts);         // [HV, V]
    at::Tensor k_part = at::empty({d.HV, d.K}, opts);     // [HV, K]

    // memory O(√L) states (reference/README.md, rule 5): keep the state entering every c-th step
    const int64_t c = ceil_sqrt(L);
    const int64_t num_segments = (L + c - 1) / c;
    at::Tensor checkpoints = at::empty({num_segments, d.HV, d.K, d.V}, opts);  // [NS, HV, K, V]
    at::Tensor state = h0.clone();                                             // [HV, K, V]
    for (int64_t t = 0; t < L; ++t) {
        if (t % c == 0) checkpoints.select(0, t / c).copy_(state);
        step_inplace(state, buf, s, t);
    }
    // states[i] is S_{start+i-1}: the segment's entering state, then its c states
    at::Tensor states = at::empty({c + 1, d.HV, d.K, d.V}, opts);  // [c + 1, HV, K, V]
    for (int64_t j = num_segments - 1; j >= 0; --j) {
        const int64_t start = j * c;
        const int64_t end = std::min(start + c, L);
        states.select(0, 0).copy_(checkpoints.select(0, j));
        for (int64_t t = start; t < end; ++t) {
            at::Tensor next = states.select(0, t - start + 1);  // [HV, K, V]
            next.copy_(states.select(0, t - start));
            step_inplace(next, buf, s, t);
        }
        for (int64_t t = end - 1; t >= start; --t) {
            const at::Tensor S_t = states.select(0, t - start + 1);  // [HV, K, V]
            const at::Tensor k_t = s.k.select(0, t).unsqueeze(2);    // [HV, K, 1]
            const at::Tensor beta_t = s.beta.select(0, t);           // [HV]
            const at::Tensor do_t = dO.select(0, t);                 // [HV, V]
            // S̄_t, p = S̄_tᵀ k_t and u_t again, from the state before the step
            sbar.copy_(states.select(0, t - start));
            decay_and_delta(sbar, buf, s, t);
            // dS_t = dS + scale·q_t d_o_tᵀ
            dS.addcmul_(s.q.select(0, t).unsqueeze(2), do_t.unsqueeze(1));
            // dq_t = scale·S_t d_o_t
            at::Tensor dq_t = grads.dq.select(0, t);  // [HV, K]
            contract_out(dq_t, buf.scratch, S_t, do_t.unsqueeze(1), 2);
            // S_t = S̄_t + k_t u_tᵀ: du = dS_tᵀ k_t, dk_t = dS_t u_t
            contract_out(du, buf.scratch, dS, k_t, 1);
            at::Tensor dk_t = grads.dk.select(0, t);  // [HV, K]
            contract_out(dk_t, buf.scratch, dS, buf.u.unsqueeze(1), 2);
            // u_t = β_t (v_t − p): dv_t = β du, dβ_t = du·(v_t − p), dp = −β du
            at::Tensor dv_t = grads.dv.select(0, t);  // [HV, V]
            at::mul_out(dv_t, du, beta_t.unsqueeze(1));
            at::Tensor dbeta_t = grads.dbeta.select(0, t);  // [HV]
            at::sum_out(dbeta_t, du * (s.v.select(0, t) - buf.p), 1);
            at::mul_out(dp, du, beta_t.unsqueeze(1)).neg_();
            // p = S̄_tᵀ k_t: dS̄ = dS_t + k_t dpᵀ, dk_t += S̄_t dp
            contract_out(k_part, buf.scratch, sbar, dp.unsqueeze(1), 2);
            dk_t.add_(k_part);
            dS.addcmul_(k_t, dp.unsqueeze(1));
            // S̄_t = diag(exp(g_t)) S_{t-1}: dg_t = rowsum(S̄_t ⊙ dS̄), dS_{t-1} = exp(g_t) dS̄
            at::Tensor dg_t = grads.dg.select(0, t);  // [HV, K]
            contract_out(dg_t, buf.scratch, sbar, dS, 2);
            dS.mul_(s.decay.select(0, t).unsqueeze(2));
        }
    }
    return grads;
}

}  // namespace

KdaOutputs kda_fwd(const KdaInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    at::Tensor o = at::zeros_like(in.v);                     // [B, T, HV, V]
    at::Tensor ht = at::empty({d.N, d.HV, d.K, d.V}, opts);  // [N, HV, K, V]
    StepBuffers buf = step_buffers(d, opts);
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    const std::vector<Sequence> seqs = sequences(d.B, d.T, in.cu_seqlens);
    StateSamples samples(seqs, in.state_stride, {d.HV, d.K, d.V}, opts);  // [NT, HV, K, V]
    for (const Sequence& seq : seqs) {
        SequenceInputs s = prepare(in, d, seq);
        s.q = s.q * d.scale;
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [HV, K, V]
        const at::Tensor o_seq = rows(o, seq);                        // [L, HV, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            samples.keep(t, state);
            step_inplace(state, buf, s, t);
            // o_t = S_tᵀ (scale·q_t), written straight into o's row
            at::Tensor o_t = o_seq.select(0, t);  // [HV, V]
            contract_out(o_t, buf.scratch, state, s.q.select(0, t).unsqueeze(2), 1);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht, samples.states()};
}

KdaGrads kda_bwd(const KdaInputs& in, const at::Tensor& d_o, const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "kda reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.HV, d.V});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.HV, d.K, d.V});
    const at::TensorOptions opts = in.q.options();

    KdaGrads grads;
    grads.dq = at::zeros_like(in.q);                                          // [B, T, H, K]
    grads.dk = at::zeros_like(in.k);                                          // [B, T, H, K]
    grads.dv = at::zeros_like(in.v);                                          // [B, T, HV, V]
    grads.dg = at::zeros_like(in.g);                                          // [B, T, HV, K]
    grads.dbeta = at::zeros_like(in.beta);                                    // [B, T, HV]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, d.HV, d.K, d.V}, opts);  // [N, HV, K, V]
    if (in.use_gate_in_kernel) {
        grads.dA_log = at::zeros({d.HV}, opts);                                   // [HV]
        if (in.dt_bias.defined()) grads.ddt_bias = at::zeros({d.HV, d.K}, opts);  // [HV, K]
    }
    // q is not pre-scaled here; the scale rides on d_o, which enters dS and dq alike
    const at::Tensor do_scaled = d_o * d.scale;  // [B, T, HV, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const SequenceInputs s = prepare(in, d, seq);
        // [HV, K, V] the gradient w.r.t. the current state, from the future
        at::Tensor dS =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({d.HV, d.K, d.V}, opts);
        const CoreGrads core =
            core_bwd(s, initial_state(in.h0, seq.index, d, opts), rows(do_scaled, seq), dS, d);
        if (in.h0.defined()) grads.dh0.select(0, seq.index).copy_(dS);
        rows(grads.dv, seq).copy_(core.dv);

        // GVA: a key head's gradient sums its value heads'; then back through the l2norm
        at::Tensor dq = sum_groups(core.dq, d);  // [L, H, K]
        at::Tensor dk = sum_groups(core.dk, d);  // [L, H, K]
        if (in.use_qk_l2norm_in_kernel) {
            dq = l2norm_bwd(dq, s.q_hat, s.q_rstd);
            dk = l2norm_bwd(dk, s.k_hat, s.k_rstd);
        }
        rows(grads.dq, seq).copy_(dq);
        rows(grads.dk, seq).copy_(dk);

        at::Tensor dbeta = core.dbeta;  // [L, HV]
        if (in.use_beta_sigmoid_in_kernel) {
            // β = c·σ(x): dx = dβ · c·σ(1 − σ)
            const at::Tensor sig = at::sigmoid(rows(in.beta, seq));
            dbeta = dbeta * sig * (1.0 - sig) * (in.allow_neg_eigval ? 2.0 : 1.0);
        }
        rows(grads.dbeta, seq).copy_(dbeta);

        if (!in.use_gate_in_kernel) {
            rows(grads.dg, seq).copy_(core.dg);
            continue;
        }
        const at::Tensor rate = gate_rate(in, d);  // [1, HV, 1]
        at::Tensor d_arg, d_log_rate;              // [L, HV, K] each
        if (in.lower_bound) {
            // g = lb·σ(z), z = e^A·x: dz = dg·lb·σ(1 − σ); dx = dz·e^A, dA = dz·z
            const at::Tensor z = rate * s.gate_arg;
            const at::Tensor sig = at::sigmoid(z);
            const at::Tensor dz = core.dg * (*in.lower_bound) * sig * (1.0 - sig);
            d_arg = dz * rate;
            d_log_rate = dz * z;
        } else {
            // g = −e^A·softplus(x): dx = −dg·e^A·σ(x), dA = dg·g
            d_arg = -core.dg * rate * at::sigmoid(s.gate_arg);
            d_log_rate = core.dg * s.g;
        }
        rows(grads.dg, seq).copy_(d_arg);
        grads.dA_log.add_(d_log_rate.sum(at::IntArrayRef{0, 2}));
        if (grads.ddt_bias.defined()) grads.ddt_bias.add_(d_arg.sum(0));
    }
    if (grads.ddt_bias.defined()) grads.ddt_bias = grads.ddt_bias.reshape({d.HV * d.K});
    return grads;
}

KdaOutputs kda_fwd_chunked(const KdaInputs& in, int64_t chunk_size) {
    const Dims d = check_inputs(in);
    LAV_CHECK(chunk_size > 0, "kda: chunk_size must be positive, got ", chunk_size);
    const at::TensorOptions opts = in.q.options();
    const int64_t HV = d.HV;
    at::Tensor o = at::zeros_like(in.v);                   // [B, T, HV, V]
    at::Tensor ht = at::empty({d.N, HV, d.K, d.V}, opts);  // [N, HV, K, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const SequenceInputs s = prepare(in, d, seq);
        at::Tensor S = initial_state(in.h0, seq.index, d, opts);  // [HV, K, V]
        for (int64_t c0 = 0; c0 < seq.length(); c0 += chunk_size) {
            const int64_t L = std::min(chunk_size, seq.length() - c0);
            const auto chunk = [&](const at::Tensor& x) { return x.narrow(0, c0, L); };
            const at::Tensor q = chunk(s.q).permute({1, 0, 2});            // [HV, L, K]
            const at::Tensor k = chunk(s.k).permute({1, 0, 2});            // [HV, L, K]
            const at::Tensor v = chunk(s.v).permute({1, 0, 2});            // [HV, L, V]
            const at::Tensor beta = chunk(s.beta).t().unsqueeze(2);        // [HV, L, 1]
            const at::Tensor G = chunk(s.g).permute({1, 0, 2}).cumsum(1);  // [HV, L, K]

            // E[i, j, :] = exp(G_i − G_j) for j ≤ i, else 0: masked with −inf before the exp
            const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));    // [L]
            const at::Tensor future = idx.unsqueeze(0) > idx.unsqueeze(1);  // [L, L]
            const at::Tensor E = (G.unsqueeze(2) - G.unsqueeze(1))
                                     .masked_fill_(future.view({1, L, L, 1}),
                                                   -std::numeric_limits<double>::infinity())
                                     .exp_();  // [HV, L, L, K]
            // A_kk[i, j] = β_i Σ_d k_id k_jd E_ijd (j < i); A_qk[i, j] = Σ_d q_id k_jd E_ijd (j ≤
            // i)
            const at::Tensor kk = (k.unsqueeze(2) * E * k.unsqueeze(1)).sum(3);    // [HV, L, L]
            const at::Tensor A_kk = beta * kk.tril(-1);                            // [HV, L, L]
            const at::Tensor A_qk = (q.unsqueeze(2) * E * k.unsqueeze(1)).sum(3);  // [HV, L, L]
            // T = (I + A_kk)^-1, exact: a unit lower-triangular solve
            const at::Tensor I = at::eye(L, opts).expand({HV, L, L});
            const at::Tensor Tinv = at::linalg_solve_triangular(
                I + A_kk, I, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
            // W = T diag(β) (K ⊙ exp(G)), U = T diag(β) V; V_new = U − W S are the u_t
            const at::Tensor W = at::bmm(Tinv, beta * k * G.exp());  // [HV, L, K]
            const at::Tensor U = at::bmm(Tinv, beta * v);            // [HV, L, V]
            const at::Tensor V_new = U - at::bmm(W, S);              // [HV, L, V]
            const at::Tensor O =
                (at::bmm(q * G.exp(), S) + at::bmm(A_qk, V_new)) * d.scale;  // [HV, L, V]
            chunk(rows(o, seq)).copy_(O.permute({1, 0, 2}));
            const at::Tensor G_last = G.narrow(1, L - 1, 1);  // [HV, 1, K]
            const at::Tensor kg = k * (G_last - G).exp();     // [HV, L, K]
            S = G_last.exp().transpose(1, 2) * S + at::bmm(kg.transpose(1, 2), V_new);
        }
        ht.select(0, seq.index).copy_(S);
    }
    return {o, ht, {}};
}

}  // namespace lav::ref
