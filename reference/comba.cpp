// reference/comba.cpp — float64 Comba: the recurrence, its checkpointed reverse, and the WY form
// that checks it. Plain at:: ops on CPU tensors; no kernel code here.
#include "comba.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "comba";
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

Dims check_inputs(const CombaInputs& in) {
    LAV_ASSERT(in.q.defined() && in.k.defined() && in.v.defined() && in.p.defined() &&
                   in.g.defined() && in.beta.defined(),
               "comba reference called without q, k, v, p, g or beta");
    for (const auto& [t, name] :
         {std::pair{&in.q, "q"}, std::pair{&in.k, "k"}, std::pair{&in.v, "v"},
          std::pair{&in.p, "p"}, std::pair{&in.g, "g"}, std::pair{&in.beta, "beta"},
          std::pair{&in.h0, "h0"}})
        assert_fp64(kFamily, *t, name);
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4, "comba: q and v must be [B, T, H, D], got q ",
              in.q.sizes(), " and v ", in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.V = in.v.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0 && d.H > 0, "comba: H, K and V must be positive");
    check_shape(kFamily, in.k, "k", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.p, "p", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.H, d.V});
    check_shape(kFamily, in.g, "g", {d.B, d.T, d.H});
    check_shape(kFamily, in.beta, "beta", {d.B, d.T, d.H});
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.H, d.K, d.V});
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.H, d.K, d.V}, opts);
}

// √(Σ x² + eps) over the last dim, kept as a size-1 dim.
at::Tensor l2_norm_of(const at::Tensor& x) {
    return (x.square().sum(-1, /*keepdim=*/true) + kCombaL2NormEps).sqrt();
}

at::Tensor maybe_normalise(const at::Tensor& x, bool l2norm) {
    return l2norm ? x / l2_norm_of(x) : x;
}

// dx from dy through y = x / √(Σ x² + eps): ∂y/∂x = (I − y yᵀ) / √(Σ x² + eps).
at::Tensor l2norm_backward(const at::Tensor& x, const at::Tensor& dy) {
    const at::Tensor norm = l2_norm_of(x);  // [.., 1]
    const at::Tensor y = x / norm;
    return (dy - (dy * y).sum(-1, /*keepdim=*/true) * y) / norm;
}

// One sequence's inputs as [L, H, D] views, q, k, p as the recurrence reads them.
struct SequenceInputs {
    at::Tensor q;      // [L, H, K]
    at::Tensor k;      // [L, H, K]
    at::Tensor v;      // [L, H, V]
    at::Tensor p;      // [L, H, K]
    at::Tensor beta;   // [L, H]
    at::Tensor decay;  // [L, H] exp(g)
};

// Every per-step product below is an elementwise op plus a reduction rather than a bmm: at
// [H, K, V] sizes ATen runs these on the calling thread (reference/README.md says why).

struct Workspace {
    at::Tensor scratch;  // [H, K, V]
    at::Tensor r;        // [H, V] v_t − S_{t-1}ᵀ p_t
    at::Tensor u;        // [H, V] β_t r
    Workspace(const Dims& d, const at::TensorOptions& opts)
        : scratch(at::empty({d.H, d.K, d.V}, opts)),
          r(at::empty({d.H, d.V}, opts)),
          u(at::empty({d.H, d.V}, opts)) {}
};

// u_t = β_t (v_t − Sᵀ p_t), then S ← exp(g_t) S + k_t u_tᵀ; leaves r and u in the workspace.
void step_inplace(at::Tensor& state, const SequenceInputs& s, int64_t t, Workspace& w) {
    const int64_t H = state.size(0);
    contract_out(w.r, w.scratch, state, s.p.select(0, t).unsqueeze(2), 1);
    at::sub_out(w.r, s.v.select(0, t), w.r);
    at::mul_out(w.u, w.r, s.beta.select(0, t).unsqueeze(1));
    state.mul_(s.decay.select(0, t).view({H, 1, 1}));
    state.addcmul_(s.k.select(0, t).unsqueeze(2), w.u.unsqueeze(1));
}

}  // namespace

CombaOutputs comba_fwd(const CombaInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const bool n = in.use_qk_l2norm_in_kernel;
    const at::Tensor q = maybe_normalise(in.q, n) * d.scale;  // [B, T, H, K]
    const at::Tensor k = maybe_normalise(in.k, n);            // [B, T, H, K]
    const at::Tensor p = maybe_normalise(in.p, n);            // [B, T, H, K]
    at::Tensor o = at::zeros_like(in.v);                      // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, d.H, d.K, d.V}, opts);    // [N, H, K, V]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    const std::vector<Sequence> seqs = sequences(d.B, d.T, in.cu_seqlens);
    StateSamples samples(seqs, in.state_stride, {d.H, d.K, d.V}, opts);  // [NT, H, K, V]
    for (const Sequence& seq : seqs) {
        const SequenceInputs s{rows(q, seq), rows(k, seq),       rows(in.v, seq),
                               rows(p, seq), rows(in.beta, seq), rows(in.g, seq).exp()};
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
        Workspace w(d, opts);
        const at::Tensor o_seq = rows(o, seq);  // [L, H, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            samples.keep(t, state);
            step_inplace(state, s, t, w);
            at::Tensor o_t = o_seq.select(0, t);  // [H, V]
            contract_out(o_t, w.scratch, state, s.q.select(0, t).unsqueeze(2), 1);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht, samples.states()};
}

CombaGrads comba_bwd(const CombaInputs& in, const at::Tensor& d_o, const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "comba reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.V});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.H, d.K, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;
    const bool n = in.use_qk_l2norm_in_kernel;
    const at::Tensor q = maybe_normalise(in.q, n);  // [B, T, H, K]
    const at::Tensor k = maybe_normalise(in.k, n);  // [B, T, H, K]
    const at::Tensor p = maybe_normalise(in.p, n);  // [B, T, H, K]

    // w.r.t. the normalised q̂, k̂, p̂
    at::Tensor dq = at::zeros_like(q);  // [B, T, H, K]
    at::Tensor dk = at::zeros_like(k);  // [B, T, H, K]
    at::Tensor dp = at::zeros_like(p);  // [B, T, H, K]
    CombaGrads grads;
    grads.dv = at::zeros_like(in.v);        // [B, T, H, V]
    grads.dg = at::zeros_like(in.g);        // [B, T, H]
    grads.dbeta = at::zeros_like(in.beta);  // [B, T, H]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, H, d.K, d.V}, opts);

    // q is not pre-scaled here; the scale rides on d_o, which enters dS and dq alike
    const at::Tensor do_scaled = d_o * d.scale;  // [B, T, H, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const SequenceInputs s{rows(q, seq), rows(k, seq),       rows(in.v, seq),
                               rows(p, seq), rows(in.beta, seq), rows(in.g, seq).exp()};
        const at::Tensor dO = rows(do_scaled, seq);  // [L, H, V]
        const at::Tensor dq_seq = rows(dq, seq);     // [L, H, K]
        const at::Tensor dk_seq = rows(dk, seq);     // [L, H, K]
        const at::Tensor dp_seq = rows(dp, seq);     // [L, H, K]
        const at::Tensor dv_seq = rows(grads.dv, seq);
        const at::Tensor dbeta_seq = rows(grads.dbeta, seq);
        const at::Tensor dg_seq = rows(grads.dg, seq);
        // [H, K, V] the gradient w.r.t. the current state, from the future
        at::Tensor dS =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({H, d.K, d.V}, opts);
        if (L > 0) {
            Workspace w(d, opts);
            // memory O(√L) states (reference/README.md, rule 5): keep the state entering
            // every c-th step
            const int64_t c = ceil_sqrt(L);
            const int64_t num_segments = (L + c - 1) / c;
            at::Tensor checkpoints = at::empty({num_segments, H, d.K, d.V}, opts);
            at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
            for (int64_t t = 0; t < L; ++t) {
                if (t % c == 0) checkpoints.select(0, t / c).copy_(state);
                step_inplace(state, s, t, w);
            }
            // states[i] is S_{start+i-1}: the segment's entering state, then its c states
            at::Tensor states = at::empty({c + 1, H, d.K, d.V}, opts);  // [c + 1, H, K, V]
            at::Tensor du = at::empty({H, d.V}, opts);                  // [H, V] ∂L/∂u_t
            at::Tensor dpr = at::empty({H, d.V}, opts);   // [H, V] ∂L/∂(S_{t-1}ᵀ p_t)
            at::Tensor prod = at::empty({H, d.V}, opts);  // [H, V]
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
                    const at::Tensor prev = states.select(0, t - start);         // S_{t-1}
                    const at::Tensor S_t = states.select(0, t - start + 1);      // S_t
                    const at::Tensor do_t = dO.select(0, t);                     // [H, V]
                    const at::Tensor k_t = s.k.select(0, t).unsqueeze(2);        // [H, K, 1]
                    const at::Tensor p_t = s.p.select(0, t).unsqueeze(2);        // [H, K, 1]
                    const at::Tensor beta_t = s.beta.select(0, t).unsqueeze(1);  // [H, 1]
                    const at::Tensor decay_t = s.decay.select(0, t).view({H, 1, 1});
                    // dS_t = dS + scale·q_t d_o_tᵀ;  dq̂_t = scale·S_t d_o_t
                    dS.addcmul_(s.q.select(0, t).unsqueeze(2), do_t.unsqueeze(1));
                    at::Tensor dq_t = dq_seq.select(0, t);  // [H, K]
                    contract_out(dq_t, w.scratch, S_t, do_t.unsqueeze(1), 2);
                    // r = v_t − S_{t-1}ᵀ p_t and u = β_t r, recomputed
                    contract_out(w.r, w.scratch, prev, p_t, 1);
                    at::sub_out(w.r, s.v.select(0, t), w.r);
                    at::mul_out(w.u, w.r, beta_t);
                    // S_t = e^{g_t} S_{t-1} + k_t u_tᵀ: du = dS_tᵀ k_t, dk̂_t = dS_t u_t
                    contract_out(du, w.scratch, dS, k_t, 1);
                    at::Tensor dk_t = dk_seq.select(0, t);  // [H, K]
                    contract_out(dk_t, w.scratch, dS, w.u.unsqueeze(1), 2);
                    // u = β_t r: dv_t = β_t du, dβ_t = du·r, dpr = −β_t du
                    at::Tensor dv_t = dv_seq.select(0, t);  // [H, V]
                    at::mul_out(dv_t, du, beta_t);
                    at::mul_out(prod, du, w.r);
                    at::Tensor dbeta_t = dbeta_seq.select(0, t);  // [H]
                    at::sum_out(dbeta_t, prod, 1);
                    at::mul_out(dpr, du, beta_t).neg_();
                    // S_{t-1}ᵀ p_t: dp̂_t = S_{t-1} dpr
                    at::Tensor dp_t = dp_seq.select(0, t);  // [H, K]
                    contract_out(dp_t, w.scratch, prev, dpr.unsqueeze(1), 2);
                    // dg_t = e^{g_t} ⟨S_{t-1}, dS_t⟩; dS_{t-1} = e^{g_t} dS_t + p_t dprᵀ
                    at::Tensor dg_t = dg_seq.select(0, t);  // [H]
                    contract_out(dg_t, w.scratch, prev, dS, {1, 2});
                    dg_t.mul_(s.decay.select(0, t));
                    dS.mul_(decay_t).addcmul_(p_t, dpr.unsqueeze(1));
                }
            }
        }
        if (grads.dh0.defined()) grads.dh0.select(0, seq.index).copy_(dS);
    }
    grads.dq = n ? l2norm_backward(in.q, dq) : dq;
    grads.dk = n ? l2norm_backward(in.k, dk) : dk;
    grads.dp = n ? l2norm_backward(in.p, dp) : dp;
    return grads;
}

CombaOutputs comba_fwd_wy(const CombaInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;
    const bool n = in.use_qk_l2norm_in_kernel;
    const at::Tensor qn = maybe_normalise(in.q, n);
    const at::Tensor kn = maybe_normalise(in.k, n);
    const at::Tensor pn = maybe_normalise(in.p, n);
    at::Tensor o = at::zeros_like(in.v);                  // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]
    const double neg_inf = -std::numeric_limits<double>::infinity();
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor h0 = in.h0.defined() ? in.h0.select(0, seq.index)
                                              : at::zeros({H, d.K, d.V}, opts);  // [H, K, V]
        if (L == 0) {
            ht.select(0, seq.index).copy_(h0);
            continue;
        }
        const at::Tensor q = rows(qn, seq).permute({1, 0, 2});    // [H, L, K]
        const at::Tensor k = rows(kn, seq).permute({1, 0, 2});    // [H, L, K]
        const at::Tensor p = rows(pn, seq).permute({1, 0, 2});    // [H, L, K]
        const at::Tensor v = rows(in.v, seq).permute({1, 0, 2});  // [H, L, V]
        const at::Tensor beta = rows(in.beta, seq).t();           // [H, L]
        const at::Tensor g = rows(in.g, seq).t();                 // [H, L]
        const at::Tensor G = g.cumsum(1);                         // [H, L] inclusive
        const at::Tensor Gx = G - g;                              // [H, L] exclusive

        const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));   // [L]
        const at::Tensor above = idx.unsqueeze(0) > idx.unsqueeze(1);  // [L, L] s > t
        const at::Tensor not_below = idx.unsqueeze(0) >= idx.unsqueeze(1);
        // masked with −inf before exp: the entries that would be exp of a positive number
        const at::Tensor D =
            (G.unsqueeze(2) - G.unsqueeze(1)).masked_fill_(above, neg_inf).exp_();  // [H, L, L]
        const at::Tensor Dx = (Gx.unsqueeze(2) - G.unsqueeze(1))
                                  .masked_fill_(not_below, neg_inf)
                                  .exp_();  // [H, L, L]
        // u_t = β_t (v_t − e^{Gx_t} p_tᵀ h0 − Σ_{s<t} e^{Gx_t − G_s} (p_t·k_s) u_s)
        const at::Tensor A = at::bmm(p, k.transpose(1, 2)) * Dx * beta.unsqueeze(2);
        const at::Tensor rhs =
            (v - Gx.exp().unsqueeze(2) * at::bmm(p, h0)) * beta.unsqueeze(2);  // [H, L, V]
        const at::Tensor U = at::linalg_solve_triangular(A + at::eye(L, opts), rhs, /*upper=*/false,
                                                         /*left=*/true, /*unitriangular=*/true);
        const at::Tensor scores = at::bmm(q, k.transpose(1, 2)) * D;  // [H, L, L]
        const at::Tensor O = (G.exp().unsqueeze(2) * at::bmm(q, h0) + at::bmm(scores, U)) * d.scale;
        rows(o, seq).copy_(O.permute({1, 0, 2}));
        const at::Tensor G_last = G.select(1, L - 1);               // [H]
        const at::Tensor to_end = (G_last.unsqueeze(1) - G).exp();  // [H, L]
        ht.select(0, seq.index)
            .copy_(G_last.exp().view({H, 1, 1}) * h0 +
                   at::bmm(k.transpose(1, 2), U * to_end.unsqueeze(2)));
    }
    return {o, ht, {}};
}

}  // namespace lav::ref
