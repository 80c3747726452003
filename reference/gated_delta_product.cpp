// reference/gated_delta_product.cpp — float64 gated DeltaProduct: the recurrence, its
// checkpointed reverse, and the WY form that checks it. Plain at:: ops on CPU tensors; no
// kernel code here.
#include "gated_delta_product.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "gated_delta_product";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::contract_out;
using common::StateSamples;

// The sizes of one call, read from the inputs once they are checked.
struct Dims {
    int64_t B, T, H, K, V, N;
    int64_t n;     // sub-steps per token
    double scale;  // resolved: never 0
};

Dims check_inputs(const GatedDeltaProductInputs& in) {
    LAV_ASSERT(in.q.defined() && in.k.defined() && in.v.defined() && in.beta.defined(),
               "gated_delta_product reference called without q, k, v or beta");
    assert_fp64(kFamily, in.q, "q");
    assert_fp64(kFamily, in.k, "k");
    assert_fp64(kFamily, in.v, "v");
    assert_fp64(kFamily, in.g, "g");
    assert_fp64(kFamily, in.beta, "beta");
    assert_fp64(kFamily, in.h0, "h0");
    LAV_CHECK(in.num_householder >= 1, "gated_delta_product: num_householder must be >= 1, got ",
              in.num_householder);
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4,
              "gated_delta_product: q and v must be [B, T, H, D], got q ", in.q.sizes(), " and v ",
              in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.V = in.v.size(3);
    d.n = in.num_householder;
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.K > 0 && d.V > 0 && d.H > 0, "gated_delta_product: H, K and V must be positive");
    check_shape(kFamily, in.k, "k", {d.B, d.T * d.n, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T * d.n, d.H, d.V});
    check_shape(kFamily, in.beta, "beta", {d.B, d.T * d.n, d.H});
    if (in.g.defined()) check_shape(kFamily, in.g, "g", {d.B, d.T, d.H});
    if (in.h0.defined()) check_shape(kFamily, in.h0, "h0", {d.N, d.H, d.K, d.V});
    d.scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(d.K)) : in.scale;
    return d;
}

// √(Σ x² + eps) over the last dim, kept as a size-1 dim.
at::Tensor l2_norm_of(const at::Tensor& x) {
    return (x.square().sum(-1, /*keepdim=*/true) + kGatedDeltaProductL2NormEps).sqrt();
}

// dx from dy through y = x / √(Σ x² + eps): ∂y/∂x = (I − y yᵀ) / √(Σ x² + eps).
at::Tensor l2norm_backward(const at::Tensor& x, const at::Tensor& dy) {
    const at::Tensor norm = l2_norm_of(x);  // [.., 1]
    const at::Tensor y = x / norm;
    return (dy - (dy * y).sum(-1, /*keepdim=*/true) * y) / norm;
}

// One sequence's inputs: per token [L, H, ·] and per sub-step [L, n, H, ·] views.
struct SequenceInputs {
    at::Tensor q;      // [L, H, K] normalised when asked
    at::Tensor k;      // [L, n, H, K] normalised when asked
    at::Tensor v;      // [L, n, H, V]
    at::Tensor beta;   // [L, n, H]
    at::Tensor decay;  // [L, H] exp(g_t); undefined without g
};

// The rows of tokens [seq.begin, seq.end) of a [B, T·m, ...] tensor with m rows per token,
// as an [L, m, ...] view (m = 1 for per-token tensors gives [L, 1, ...]).
at::Tensor token_rows(const at::Tensor& t, const Sequence& seq, int64_t m) {
    const at::Tensor r = t.select(0, seq.batch).narrow(0, seq.begin * m, seq.length() * m);
    std::vector<int64_t> sizes = {seq.length(), m};
    for (int64_t i = 1; i < r.dim(); ++i) sizes.push_back(r.size(i));
    return r.view(sizes);
}

// The inputs as the recurrence reads them, contiguous so that token_rows can view them.
struct Prepared {
    at::Tensor q;     // [B, T, H, K] normalised when asked
    at::Tensor k;     // [B, T·n, H, K] normalised when asked
    at::Tensor v;     // [B, T·n, H, V]
    at::Tensor beta;  // [B, T·n, H]
    at::Tensor g;     // [B, T, H]; undefined without g
};

Prepared prepare(const GatedDeltaProductInputs& in) {
    Prepared p;
    p.q = in.use_qk_l2norm_in_kernel ? in.q / l2_norm_of(in.q) : in.q.contiguous();
    p.k = in.use_qk_l2norm_in_kernel ? in.k / l2_norm_of(in.k) : in.k.contiguous();
    p.v = in.v.contiguous();
    p.beta = in.beta.contiguous();
    if (in.g.defined()) p.g = in.g.contiguous();
    return p;
}

SequenceInputs sequence_inputs(const Prepared& p, const Sequence& seq, const Dims& d) {
    SequenceInputs s;
    s.q = token_rows(p.q, seq, 1).select(1, 0);
    s.k = token_rows(p.k, seq, d.n);
    s.v = token_rows(p.v, seq, d.n);
    s.beta = token_rows(p.beta, seq, d.n);
    if (p.g.defined()) s.decay = token_rows(p.g, seq, 1).select(1, 0).exp();
    return s;
}

// The state before the first token of sequence `index`: h0's row, or zeros.
at::Tensor initial_state(const at::Tensor& h0, int64_t index, const Dims& d,
                         const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros({d.H, d.K, d.V}, opts);
}

// Per-step products are elementwise ops plus a reduction rather than a bmm: at [H, K, V] sizes
// ATen runs these on the calling thread (reference/README.md has the measurement).

// Per-step buffers, allocated once per sequence.
struct Workspace {
    at::Tensor scratch;  // [H, K, V]
    at::Tensor p;        // [H, V] Sᵀ k
    at::Tensor r;        // [H, V] v − Sᵀ k
    at::Tensor u;        // [H, V] β (v − Sᵀ k)
    Workspace(const Dims& d, const at::TensorOptions& opts)
        : scratch(at::empty({d.H, d.K, d.V}, opts)),
          p(at::empty({d.H, d.V}, opts)),
          r(at::empty({d.H, d.V}, opts)),
          u(at::empty({d.H, d.V}, opts)) {}
};

// Sub-step j of token t, in place: S ← S + k uᵀ with u = β (v − Sᵀ k); leaves r and u in `w`.
void substep_inplace(at::Tensor& state, const SequenceInputs& s, int64_t t, int64_t j,
                     Workspace& w) {
    const at::Tensor k = s.k.select(0, t).select(0, j).unsqueeze(2);  // [H, K, 1]
    contract_out(w.p, w.scratch, state, k, 1);
    at::sub_out(w.r, s.v.select(0, t).select(0, j), w.p);
    at::mul_out(w.u, w.r, s.beta.select(0, t).select(0, j).unsqueeze(1));
    state.addcmul_(k, w.u.unsqueeze(1));
}

// Token t, in place: the decay, then every sub-step. `samples`, when given, sees the state
// before each sub-step t·n + j, for j = 0 the state before the decay.
void token_inplace(at::Tensor& state, const SequenceInputs& s, int64_t t, int64_t n, Workspace& w,
                   StateSamples* samples = nullptr) {
    if (samples) samples->keep(t * n, state);
    if (s.decay.defined()) state.mul_(s.decay.select(0, t).view({-1, 1, 1}));
    for (int64_t j = 0; j < n; ++j) {
        if (samples && j > 0) samples->keep(t * n + j, state);
        substep_inplace(state, s, t, j, w);
    }
}

}  // namespace

GatedDeltaProductOutputs gated_delta_product_fwd(const GatedDeltaProductInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const Prepared p = prepare(in);
    at::Tensor o = at::zeros({d.B, d.T, d.H, d.V}, opts);   // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, d.H, d.K, d.V}, opts);  // [N, H, K, V]
    // sequences run one after another on the calling thread: the dtype tracer's
    // RecordFunction callback is thread-local and must see every op
    const std::vector<Sequence> seqs = sequences(d.B, d.T, in.cu_seqlens);
    StateSamples samples(seqs, in.state_stride, {d.H, d.K, d.V}, opts, d.n);  // [NT, H, K, V]
    for (const Sequence& seq : seqs) {
        const SequenceInputs s = sequence_inputs(p, seq, d);
        at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
        Workspace w(d, opts);
        const at::Tensor o_seq = token_rows(o, seq, 1).select(1, 0);  // [L, H, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            token_inplace(state, s, t, d.n, w, &samples);
            // o_t = scale·S_tᵀ q_t, written straight into o's row
            at::Tensor o_t = o_seq.select(0, t);  // [H, V]
            contract_out(o_t, w.scratch, state, s.q.select(0, t).unsqueeze(2), 1);
            o_t.mul_(d.scale);
        }
        ht.select(0, seq.index).copy_(state);
    }
    return {o, ht, samples.states()};
}

GatedDeltaProductGrads gated_delta_product_bwd(const GatedDeltaProductInputs& in,
                                               const at::Tensor& d_o, const at::Tensor& dht) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht, "dht");
    LAV_ASSERT(d_o.defined(), "gated_delta_product reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.V});
    if (dht.defined()) check_shape(kFamily, dht, "dht", {d.N, d.H, d.K, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H, n = d.n;
    const Prepared p = prepare(in);

    // w.r.t. the normalised q̂, k̂
    at::Tensor dq = at::zeros(in.q.sizes(), opts);  // [B, T, H, K]
    at::Tensor dk = at::zeros(in.k.sizes(), opts);  // [B, T·n, H, K]
    GatedDeltaProductGrads grads;
    grads.dv = at::zeros(in.v.sizes(), opts);                              // [B, T·n, H, V]
    grads.dbeta = at::zeros(in.beta.sizes(), opts);                        // [B, T·n, H]
    if (in.g.defined()) grads.dg = at::zeros(in.g.sizes(), opts);          // [B, T, H]
    if (in.h0.defined()) grads.dh0 = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]

    // the scale rides on d_o, which enters dS and dq alike
    const at::Tensor do_scaled = d_o * d.scale;  // [B, T, H, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const SequenceInputs s = sequence_inputs(p, seq, d);
        const at::Tensor dO = token_rows(do_scaled, seq, 1).select(1, 0);  // [L, H, V]
        const at::Tensor dq_seq = token_rows(dq, seq, 1).select(1, 0);     // [L, H, K]
        const at::Tensor dk_seq = token_rows(dk, seq, n);                  // [L, n, H, K]
        const at::Tensor dv_seq = token_rows(grads.dv, seq, n);            // [L, n, H, V]
        const at::Tensor dbeta_seq = token_rows(grads.dbeta, seq, n);      // [L, n, H]
        const at::Tensor dg_seq =
            in.g.defined() ? token_rows(grads.dg, seq, 1).select(1, 0) : at::Tensor();  // [L, H]
        // [H, K, V] the gradient w.r.t. the current state, from the future
        at::Tensor dS =
            dht.defined() ? dht.select(0, seq.index).clone() : at::zeros({H, d.K, d.V}, opts);
        if (L > 0) {
            Workspace w(d, opts);
            // memory O(√L) tokens' states (reference/README.md, rule 5): keep the state entering
            // every c-th token
            const int64_t c = ceil_sqrt(L);
            const int64_t num_segments = (L + c - 1) / c;
            at::Tensor checkpoints = at::empty({num_segments, H, d.K, d.V}, opts);
            at::Tensor state = initial_state(in.h0, seq.index, d, opts);  // [H, K, V]
            for (int64_t t = 0; t < L; ++t) {
                if (t % c == 0) checkpoints.select(0, t / c).copy_(state);
                token_inplace(state, s, t, n, w);
            }
            // before[i][j]: the state entering sub-step j of the segment's token i (after the
            // decay for j = 0); before[i][n]: the state after the token
            at::Tensor before = at::empty({c, n + 1, H, d.K, d.V}, opts);
            at::Tensor du = at::empty({H, d.V}, opts);        // [H, V] ∂L/∂u
            at::Tensor dp = at::empty({H, d.V}, opts);        // [H, V] ∂L/∂(Sᵀ k)
            at::Tensor dk_extra = at::empty({H, d.K}, opts);  // [H, K]
            for (int64_t seg = num_segments - 1; seg >= 0; --seg) {
                const int64_t start = seg * c;
                const int64_t end = std::min(start + c, L);
                state.copy_(checkpoints.select(0, seg));
                for (int64_t t = start; t < end; ++t) {
                    const at::Tensor row = before.select(0, t - start);  // [n + 1, H, K, V]
                    if (s.decay.defined()) state.mul_(s.decay.select(0, t).view({H, 1, 1}));
                    for (int64_t j = 0; j < n; ++j) {
                        row.select(0, j).copy_(state);
                        substep_inplace(state, s, t, j, w);
                    }
                    row.select(0, n).copy_(state);
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const at::Tensor row = before.select(0, t - start);  // [n + 1, H, K, V]
                    const at::Tensor do_t = dO.select(0, t);             // [H, V]
                    // dS_t = dS + scale·q_t d_o_tᵀ and dq̂_t = scale·S_t d_o_t
                    dS.addcmul_(s.q.select(0, t).unsqueeze(2), do_t.unsqueeze(1));
                    at::Tensor dq_t = dq_seq.select(0, t);  // [H, K]
                    contract_out(dq_t, w.scratch, row.select(0, n), do_t.unsqueeze(1), 2);
                    for (int64_t j = n - 1; j >= 0; --j) {
                        const at::Tensor S_in = row.select(0, j);  // [H, K, V]
                        const at::Tensor k = s.k.select(0, t).select(0, j).unsqueeze(2);
                        const at::Tensor beta = s.beta.select(0, t).select(0, j).unsqueeze(1);
                        // r = v − S_inᵀ k, u = β r
                        contract_out(w.p, w.scratch, S_in, k, 1);
                        at::sub_out(w.r, s.v.select(0, t).select(0, j), w.p);
                        at::mul_out(w.u, w.r, beta);
                        // S_out = S_in + k uᵀ: du = dSᵀ k, dk̂ = dS u
                        contract_out(du, w.scratch, dS, k, 1);
                        at::Tensor dk_j = dk_seq.select(0, t).select(0, j);  // [H, K]
                        contract_out(dk_j, w.scratch, dS, w.u.unsqueeze(1), 2);
                        // u = β (v − p): dv = β du, dβ = du·r, dp = −β du
                        at::Tensor dv_j = dv_seq.select(0, t).select(0, j);  // [H, V]
                        at::mul_out(dv_j, du, beta);
                        at::Tensor dbeta_j = dbeta_seq.select(0, t).select(0, j);  // [H]
                        at::mul_out(dp, du, w.r);
                        at::sum_out(dbeta_j, dp, 1);
                        at::mul_out(dp, du, beta).neg_();
                        // p = S_inᵀ k: dk̂ += S_in dp, and dS_in = dS_out + k dpᵀ
                        contract_out(dk_extra, w.scratch, S_in, dp.unsqueeze(1), 2);
                        dk_j.add_(dk_extra);
                        dS.addcmul_(k, dp.unsqueeze(1));
                    }
                    if (s.decay.defined()) {
                        // S̄ = exp(g_t) S_{t-1}: dg_t = ⟨S̄, dS̄⟩, dS_{t-1} = exp(g_t) dS̄
                        at::Tensor dg_t = dg_seq.select(0, t);  // [H]
                        contract_out(dg_t, w.scratch, row.select(0, 0), dS, {1, 2});
                        dS.mul_(s.decay.select(0, t).view({H, 1, 1}));
                    }
                }
            }
        }
        if (grads.dh0.defined()) grads.dh0.select(0, seq.index).copy_(dS);
    }
    grads.dq = in.use_qk_l2norm_in_kernel ? l2norm_backward(in.q, dq) : dq;
    grads.dk = in.use_qk_l2norm_in_kernel ? l2norm_backward(in.k, dk) : dk;
    return grads;
}

GatedDeltaProductOutputs gated_delta_product_fwd_wy(const GatedDeltaProductInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H, n = d.n;
    const Prepared p = prepare(in);
    at::Tensor o = at::zeros({d.B, d.T, H, d.V}, opts);   // [B, T, H, V]
    at::Tensor ht = at::empty({d.N, H, d.K, d.V}, opts);  // [N, H, K, V]
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const int64_t M = L * n;  // sub-steps
        const at::Tensor h0 = in.h0.defined() ? in.h0.select(0, seq.index)
                                              : at::zeros({H, d.K, d.V}, opts);  // [H, K, V]
        if (L == 0) {
            ht.select(0, seq.index).copy_(h0);
            continue;
        }
        const auto sub_rows = [&](const at::Tensor& x) {
            return x.select(0, seq.batch).narrow(0, seq.begin * n, M);
        };
        const at::Tensor q = token_rows(p.q, seq, 1).select(1, 0).permute({1, 0, 2});  // [H, L, K]
        const at::Tensor k = sub_rows(p.k).permute({1, 0, 2});                         // [H, M, K]
        const at::Tensor v = sub_rows(p.v).permute({1, 0, 2});                         // [H, M, V]
        const at::Tensor beta = sub_rows(p.beta).t();                                  // [H, M]
        // γ_m: g_t on the first sub-step of token t, 0 on the others; G its inclusive cumsum
        at::Tensor gamma = at::zeros({H, L, n}, opts);  // [H, L, n]
        if (p.g.defined()) gamma.select(2, 0).copy_(token_rows(p.g, seq, 1).select(1, 0).t());
        const at::Tensor G = gamma.reshape({H, M}).cumsum(1);  // [H, M]

        const at::Tensor idx = at::arange(M, opts.dtype(at::kLong));    // [M]
        const at::Tensor future = idx.unsqueeze(0) > idx.unsqueeze(1);  // [M, M] m' > m
        // −inf before exp makes the upper part exactly 0 rather than exp(large)·0
        const at::Tensor D = (G.unsqueeze(2) - G.unsqueeze(1))
                                 .masked_fill_(future, -std::numeric_limits<double>::infinity())
                                 .exp_();  // [H, M, M]
        const at::Tensor A =
            (at::bmm(k, k.transpose(1, 2)) * D * beta.unsqueeze(2)).tril_(-1);    // [H, M, M]
        const at::Tensor decay = G.exp().unsqueeze(2);                            // [H, M, 1]
        const at::Tensor rhs = (v - decay * at::bmm(k, h0)) * beta.unsqueeze(2);  // [H, M, V]
        const at::Tensor U = at::linalg_solve_triangular(A + at::eye(M, opts), rhs,
                                                         /*upper=*/false, /*left=*/true,
                                                         /*unitriangular=*/true);
        // the rows every token reads: its last sub-step
        const at::Tensor last = at::arange(n - 1, M, n, opts.dtype(at::kLong));  // [L]
        const at::Tensor D_read = D.index_select(1, last);                       // [H, L, M]
        const at::Tensor scores = at::bmm(q, k.transpose(1, 2)) * D_read;        // [H, L, M]
        const at::Tensor O =
            (decay.index_select(1, last) * at::bmm(q, h0) + at::bmm(scores, U)) * d.scale;
        token_rows(o, seq, 1).select(1, 0).copy_(O.permute({1, 0, 2}));
        const at::Tensor G_last = G.select(1, M - 1);               // [H]
        const at::Tensor to_end = (G_last.unsqueeze(1) - G).exp();  // [H, M]
        ht.select(0, seq.index)
            .copy_(G_last.exp().view({H, 1, 1}) * h0 +
                   at::bmm(k.transpose(1, 2), U * to_end.unsqueeze(2)));
    }
    return {o, ht, {}};
}

}  // namespace lav::ref
