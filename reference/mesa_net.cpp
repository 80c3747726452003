// reference/mesa_net.cpp — float64 MesaNet: the recurrence with an exact solve per step, its
// checkpointed reverse, and the materialised form that checks it. Plain at:: ops on CPU
// tensors; no kernel code here.
#include "mesa_net.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref {
namespace {

constexpr const char* kFamily = "mesa_net";
using common::assert_fp64;
using common::ceil_sqrt;
using common::check_shape;
using common::rows;

struct Dims {
    int64_t B, T, H, K, V, N;
};

Dims check_inputs(const MesaNetInputs& in) {
    LAV_ASSERT(in.q.defined() && in.k.defined() && in.v.defined() && in.g.defined() &&
                   in.beta.defined() && in.lamb.defined(),
               "mesa_net reference called without q, k, v, g, beta or lamb");
    for (const auto& [t, name] :
         {std::make_pair(&in.q, "q"), std::make_pair(&in.k, "k"), std::make_pair(&in.v, "v"),
          std::make_pair(&in.g, "g"), std::make_pair(&in.beta, "beta"),
          std::make_pair(&in.lamb, "lamb"), std::make_pair(&in.h_kk0, "h_kk0"),
          std::make_pair(&in.h_kv0, "h_kv0")})
        assert_fp64(kFamily, *t, name);
    LAV_CHECK(in.q.dim() == 4 && in.v.dim() == 4, "mesa_net: q and v must be [B, T, H, D], got q ",
              in.q.sizes(), " and v ", in.v.sizes());
    Dims d{};
    d.B = in.q.size(0);
    d.T = in.q.size(1);
    d.H = in.q.size(2);
    d.K = in.q.size(3);
    d.V = in.v.size(3);
    d.N = num_sequences(d.B, in.cu_seqlens);
    LAV_CHECK(d.H > 0 && d.K > 0 && d.V > 0, "mesa_net: H, K and V must be positive");
    check_shape(kFamily, in.k, "k", {d.B, d.T, d.H, d.K});
    check_shape(kFamily, in.v, "v", {d.B, d.T, d.H, d.V});
    check_shape(kFamily, in.g, "g", {d.B, d.T, d.H});
    check_shape(kFamily, in.beta, "beta", {d.B, d.T, d.H});
    check_shape(kFamily, in.lamb, "lamb", {d.H, d.K});
    if (in.h_kk0.defined()) check_shape(kFamily, in.h_kk0, "h_kk0", {d.N, d.H, d.K, d.K});
    if (in.h_kv0.defined()) check_shape(kFamily, in.h_kv0, "h_kv0", {d.N, d.H, d.K, d.V});
    return d;
}

// √(Σ x² + eps) over the last dim, kept as a size-1 dim.
at::Tensor l2_norm_of(const at::Tensor& x) {
    return (x.square().sum(-1, /*keepdim=*/true) + kMesaNetL2NormEps).sqrt();
}

// dx from dy through y = x / √(Σ x² + eps): ∂y/∂x = (I − y yᵀ) / √(Σ x² + eps).
at::Tensor l2norm_backward(const at::Tensor& x, const at::Tensor& dy) {
    const at::Tensor norm = l2_norm_of(x);
    const at::Tensor y = x / norm;
    return (dy - (dy * y).sum(-1, /*keepdim=*/true) * y) / norm;
}

// A state's row for sequence `index`, or zeros of `sizes`.
at::Tensor initial(const at::Tensor& h0, int64_t index, at::IntArrayRef sizes,
                   const at::TensorOptions& opts) {
    return h0.defined() ? h0.select(0, index).clone() : at::zeros(sizes, opts);
}

// q and k as the recurrence reads them.
struct Prepared {
    at::Tensor q, k;  // [B, T, H, K]
};

Prepared prepare(const MesaNetInputs& in) {
    if (!in.use_qk_l2norm_in_kernel) return {in.q, in.k};
    return {in.q / l2_norm_of(in.q), in.k / l2_norm_of(in.k)};
}

// Both states of one sequence, [H, K, K] and [H, K, V].
struct States {
    at::Tensor kk, kv;
};

// Step t in place: Hkk ← a Hkk + β k kᵀ, Hkv ← a Hkv + β k vᵀ.
void step_inplace(States& s, const at::Tensor& k, const at::Tensor& v, const at::Tensor& g,
                  const at::Tensor& beta, int64_t t) {
    const at::Tensor a = g.select(0, t).exp().view({-1, 1, 1});  // [H, 1, 1]
    const at::Tensor kb =
        (k.select(0, t) * beta.select(0, t).unsqueeze(1)).unsqueeze(2);  // [H, K, 1]
    s.kk.mul_(a).addcmul_(kb, k.select(0, t).unsqueeze(1));
    s.kv.mul_(a).addcmul_(kb, v.select(0, t).unsqueeze(1));
}

// (Hkk + diag λ) as a [H, K, K] matrix.
at::Tensor system_matrix(const at::Tensor& kk, const at::Tensor& lamb) {
    return kk + at::diag_embed(lamb);
}

// Solves A x = b for every head: A [H, K, K], b [H, K] -> [H, K].
at::Tensor solve(const at::Tensor& A, const at::Tensor& b) {
    return at::linalg_solve(A, b.unsqueeze(2)).squeeze(2);
}

}  // namespace

MesaNetOutputs mesa_net_fwd(const MesaNetInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const Prepared p = prepare(in);
    MesaNetOutputs out;
    out.o = at::zeros({d.B, d.T, d.H, d.V}, opts);
    out.ht_kk = at::empty({d.N, d.H, d.K, d.K}, opts);
    out.ht_kv = at::empty({d.N, d.H, d.K, d.V}, opts);
    // sequences run one after another on the calling thread (the dtype tracer is thread-local)
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const at::Tensor q = rows(p.q, seq), k = rows(p.k, seq), v = rows(in.v, seq);
        const at::Tensor g = rows(in.g, seq), beta = rows(in.beta, seq);
        States s{initial(in.h_kk0, seq.index, {d.H, d.K, d.K}, opts),
                 initial(in.h_kv0, seq.index, {d.H, d.K, d.V}, opts)};
        const at::Tensor o = rows(out.o, seq);  // [L, H, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            step_inplace(s, k, v, g, beta, t);
            const at::Tensor x = solve(system_matrix(s.kk, in.lamb), q.select(0, t));  // [H, K]
            o.select(0, t).copy_((s.kv * x.unsqueeze(2)).sum(1));
        }
        out.ht_kk.select(0, seq.index).copy_(s.kk);
        out.ht_kv.select(0, seq.index).copy_(s.kv);
    }
    return out;
}

MesaNetGrads mesa_net_bwd(const MesaNetInputs& in, const at::Tensor& d_o, const at::Tensor& dht_kk,
                          const at::Tensor& dht_kv) {
    const Dims d = check_inputs(in);
    assert_fp64(kFamily, d_o, "d_o");
    assert_fp64(kFamily, dht_kk, "dht_kk");
    assert_fp64(kFamily, dht_kv, "dht_kv");
    LAV_ASSERT(d_o.defined(), "mesa_net reference backward called without d_o");
    check_shape(kFamily, d_o, "d_o", {d.B, d.T, d.H, d.V});
    if (dht_kk.defined()) check_shape(kFamily, dht_kk, "dht_kk", {d.N, d.H, d.K, d.K});
    if (dht_kv.defined()) check_shape(kFamily, dht_kv, "dht_kv", {d.N, d.H, d.K, d.V});
    const at::TensorOptions opts = in.q.options();
    const int64_t H = d.H;
    const Prepared p = prepare(in);

    at::Tensor dq = at::zeros({d.B, d.T, H, d.K}, opts);  // w.r.t. q̂
    at::Tensor dk = at::zeros({d.B, d.T, H, d.K}, opts);  // w.r.t. k̂
    MesaNetGrads grads;
    grads.dv = at::zeros({d.B, d.T, H, d.V}, opts);
    grads.dg = at::zeros({d.B, d.T, H}, opts);
    grads.dbeta = at::zeros({d.B, d.T, H}, opts);
    grads.dlamb = at::zeros({H, d.K}, opts);
    if (in.h_kk0.defined()) grads.dh_kk0 = at::empty({d.N, H, d.K, d.K}, opts);
    if (in.h_kv0.defined()) grads.dh_kv0 = at::empty({d.N, H, d.K, d.V}, opts);

    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor q = rows(p.q, seq), k = rows(p.k, seq), v = rows(in.v, seq);
        const at::Tensor g = rows(in.g, seq), beta = rows(in.beta, seq);
        const at::Tensor dO = rows(d_o, seq);
        // gradients w.r.t. the states after the current step, from the future
        at::Tensor dP = dht_kk.defined() ? dht_kk.select(0, seq.index).clone()
                                         : at::zeros({H, d.K, d.K}, opts);  // [H, K, K]
        at::Tensor dQ = dht_kv.defined() ? dht_kv.select(0, seq.index).clone()
                                         : at::zeros({H, d.K, d.V}, opts);  // [H, K, V]
        if (L > 0) {
            // memory O(√L) states (reference/README.md, rule 5): keep both states entering every
            // c-th step
            const int64_t c = ceil_sqrt(L);
            const int64_t num_segments = (L + c - 1) / c;
            at::Tensor ck_kk = at::empty({num_segments, H, d.K, d.K}, opts);
            at::Tensor ck_kv = at::empty({num_segments, H, d.K, d.V}, opts);
            States s{initial(in.h_kk0, seq.index, {H, d.K, d.K}, opts),
                     initial(in.h_kv0, seq.index, {H, d.K, d.V}, opts)};
            for (int64_t t = 0; t < L; ++t) {
                if (t % c == 0) {
                    ck_kk.select(0, t / c).copy_(s.kk);
                    ck_kv.select(0, t / c).copy_(s.kv);
                }
                step_inplace(s, k, v, g, beta, t);
            }
            // entry i: the states after step start + i − 1 (entry 0: entering the segment)
            at::Tensor seg_kk = at::empty({c + 1, H, d.K, d.K}, opts);
            at::Tensor seg_kv = at::empty({c + 1, H, d.K, d.V}, opts);
            for (int64_t j = num_segments - 1; j >= 0; --j) {
                const int64_t start = j * c, end = std::min(start + c, L);
                States w{ck_kk.select(0, j).clone(), ck_kv.select(0, j).clone()};
                seg_kk.select(0, 0).copy_(w.kk);
                seg_kv.select(0, 0).copy_(w.kv);
                for (int64_t t = start; t < end; ++t) {
                    step_inplace(w, k, v, g, beta, t);
                    seg_kk.select(0, t - start + 1).copy_(w.kk);
                    seg_kv.select(0, t - start + 1).copy_(w.kv);
                }
                for (int64_t t = end - 1; t >= start; --t) {
                    const at::Tensor kk = seg_kk.select(0, t - start + 1);  // Hkk_t
                    const at::Tensor kv = seg_kv.select(0, t - start + 1);  // Hkv_t
                    const at::Tensor A = system_matrix(kk, in.lamb);        // [H, K, K]
                    const at::Tensor x = solve(A, q.select(0, t));          // [H, K]
                    const at::Tensor do_t = dO.select(0, t);                // [H, V]
                    // o = Hkvᵀ x: ∂L/∂x = Hkv d_o, and through the solve y = A⁻ᵀ ∂L/∂x
                    const at::Tensor xi = (kv * do_t.unsqueeze(1)).sum(2);  // [H, K]
                    const at::Tensor y = solve(A.transpose(1, 2), xi);      // [H, K]
                    rows(dq, seq).select(0, t).copy_(y);
                    grads.dlamb.sub_(y * x);
                    dP.sub_(y.unsqueeze(2) * x.unsqueeze(1));
                    dQ.add_(x.unsqueeze(2) * do_t.unsqueeze(1));
                    // H_t = a H_{t-1} + β k (k or v)ᵀ
                    const at::Tensor k_t = k.select(0, t), v_t = v.select(0, t);  // [H, K], [H, V]
                    const at::Tensor b = beta.select(0, t).unsqueeze(1);          // [H, 1]
                    const at::Tensor Pk = (dP * k_t.unsqueeze(1)).sum(2);         // dP k
                    const at::Tensor PTk = (dP * k_t.unsqueeze(2)).sum(1);        // dPᵀ k
                    const at::Tensor Qv = (dQ * v_t.unsqueeze(1)).sum(2);         // dQ v
                    const at::Tensor QTk = (dQ * k_t.unsqueeze(2)).sum(1);        // dQᵀ k
                    rows(dk, seq).select(0, t).copy_(b * (Pk + PTk + Qv));
                    rows(grads.dv, seq).select(0, t).copy_(b * QTk);
                    rows(grads.dbeta, seq).select(0, t).copy_((k_t * (Pk + Qv)).sum(1));
                    const at::Tensor a = g.select(0, t).exp();  // [H]
                    const at::Tensor prev_kk = seg_kk.select(0, t - start);
                    const at::Tensor prev_kv = seg_kv.select(0, t - start);
                    rows(grads.dg, seq)
                        .select(0, t)
                        .copy_(a * ((prev_kk * dP).sum({1, 2}) + (prev_kv * dQ).sum({1, 2})));
                    dP.mul_(a.view({H, 1, 1}));
                    dQ.mul_(a.view({H, 1, 1}));
                }
            }
        }
        if (grads.dh_kk0.defined()) grads.dh_kk0.select(0, seq.index).copy_(dP);
        if (grads.dh_kv0.defined()) grads.dh_kv0.select(0, seq.index).copy_(dQ);
    }
    grads.dq = in.use_qk_l2norm_in_kernel ? l2norm_backward(in.q, dq) : dq;
    grads.dk = in.use_qk_l2norm_in_kernel ? l2norm_backward(in.k, dk) : dk;
    return grads;
}

MesaNetOutputs mesa_net_fwd_materialised(const MesaNetInputs& in) {
    const Dims d = check_inputs(in);
    const at::TensorOptions opts = in.q.options();
    const Prepared p = prepare(in);
    MesaNetOutputs out;
    out.o = at::zeros({d.B, d.T, d.H, d.V}, opts);
    out.ht_kk = at::empty({d.N, d.H, d.K, d.K}, opts);
    out.ht_kv = at::empty({d.N, d.H, d.K, d.V}, opts);
    for (const Sequence& seq : sequences(d.B, d.T, in.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor kk0 =
            in.h_kk0.defined() ? in.h_kk0.select(0, seq.index) : at::zeros({d.H, d.K, d.K}, opts);
        const at::Tensor kv0 =
            in.h_kv0.defined() ? in.h_kv0.select(0, seq.index) : at::zeros({d.H, d.K, d.V}, opts);
        if (L == 0) {
            out.ht_kk.select(0, seq.index).copy_(kk0);
            out.ht_kv.select(0, seq.index).copy_(kv0);
            continue;
        }
        const at::Tensor q = rows(p.q, seq).transpose(0, 1);   // [H, L, K]
        const at::Tensor k = rows(p.k, seq).transpose(0, 1);   // [H, L, K]
        const at::Tensor v = rows(in.v, seq).transpose(0, 1);  // [H, L, V]
        const at::Tensor beta = rows(in.beta, seq).t();        // [H, L]
        const at::Tensor G = rows(in.g, seq).t().cumsum(1);    // [H, L]
        const at::Tensor idx = at::arange(L, opts.dtype(at::kLong));
        const at::Tensor future = idx.unsqueeze(0) > idx.unsqueeze(1);  // [L, L] s > t
        // W[t, s] = β_s exp(G_t − G_s) for s ≤ t; −inf before exp makes the rest exactly 0
        const at::Tensor W = (G.unsqueeze(2) - G.unsqueeze(1))
                                 .masked_fill_(future, -std::numeric_limits<double>::infinity())
                                 .exp_() *
                             beta.unsqueeze(1);  // [H, L, L]
        const at::Tensor decay = G.exp();        // [H, L]
        // every state: [H, L, K, K] and [H, L, K, V]
        const at::Tensor kk = decay.view({d.H, L, 1, 1}) * kk0.unsqueeze(1) +
                              at::einsum("hts,hsi,hsj->htij", {W, k, k});
        const at::Tensor kv = decay.view({d.H, L, 1, 1}) * kv0.unsqueeze(1) +
                              at::einsum("hts,hsi,hsj->htij", {W, k, v});
        const at::Tensor A = kk + at::diag_embed(in.lamb).unsqueeze(1);       // [H, L, K, K]
        const at::Tensor x = at::linalg_solve(A, q.unsqueeze(3)).squeeze(3);  // [H, L, K]
        const at::Tensor o = at::einsum("hlk,hlkv->hlv", {x, kv});            // [H, L, V]
        rows(out.o, seq).copy_(o.transpose(0, 1));
        out.ht_kk.select(0, seq.index).copy_(kk.select(1, L - 1));
        out.ht_kv.select(0, seq.index).copy_(kv.select(1, L - 1));
    }
    return out;
}

}  // namespace lav::ref
