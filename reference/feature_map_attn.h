// reference/feature_map_attn.h — the float64 math shared by the based and rebased references:
// causal attention with a polynomial score f(scale·q·k) and an optional normaliser, in its
// quadratic form (the reference) and its feature-map recurrence (the check). Internal to
// reference/; the families' headers are based.h and rebased.h. Shares no code with kernels/.
//
// Per sequence and head, with x_ts = scale·q_t·k_s and s ≤ t:
//   num_t = Σ_s f(x_ts) v_s,   z_t = Σ_s f(x_ts),   o_t = num_t / (z_t + eps)  (or num_t)
// based:   f(x) = 1 + x + x²/2,  φ(x) = [1, x, vec(x xᵀ)/√2]   (1 + K + K² features)
// rebased: f(x) = x²,            φ(x) = vec(x xᵀ)               (K² features)
// with f(q̃·k) = φ(q̃)·φ(k), q̃ = scale·q.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref::feature_map_attn {

enum class Score { based, rebased };

struct Problem {
    const char* family;
    Score score;
    at::Tensor q, k, v;  // [B, T, H, K], [B, T, H, K], [B, T, H, V] fp64
    std::vector<int64_t> cu_seqlens;
    double scale;  // resolved
    bool normalise;
    double eps;
};

/// Query rows per block of the quadratic form: its memory is O(H · block · L), not O(H · L²).
constexpr int64_t kRowBlock = 256;

inline void check(const Problem& p) {
    for (const auto* t : {&p.q, &p.k, &p.v}) {
        LAV_ASSERT(t->defined(), p.family, " reference called without q, k or v");
        // reference/README.md, rule 1: a non-fp64 tensor here is a harness bug, not a user error
        LAV_ASSERT(t->scalar_type() == at::kDouble, "the ", p.family,
                   " reference takes fp64 tensors only, got ", t->scalar_type());
    }
    LAV_CHECK(p.q.dim() == 4 && p.v.dim() == 4, p.family, ": q and v must be [B, T, H, D], got ",
              p.q.sizes(), " and ", p.v.sizes());
    LAV_CHECK(p.q.size(2) > 0 && p.q.size(3) > 0 && p.v.size(3) > 0, p.family,
              ": H, K and V must be positive");
    LAV_CHECK(p.k.sizes() == p.q.sizes(), p.family, ": k must have q's shape ", p.q.sizes(),
              ", got ", p.k.sizes());
    LAV_CHECK(
        p.v.size(0) == p.q.size(0) && p.v.size(1) == p.q.size(1) && p.v.size(2) == p.q.size(2),
        p.family, ": v must be [B, T, H, V] with q's B, T, H, got ", p.v.sizes());
    num_sequences(p.q.size(0), p.cu_seqlens);
}

inline at::Tensor score(Score s, const at::Tensor& x) {
    return s == Score::based ? 1.0 + x + 0.5 * x * x : x * x;
}

inline at::Tensor score_derivative(Score s, const at::Tensor& x) {
    return s == Score::based ? 1.0 + x : 2.0 * x;
}

// The rows of `seq` in a [B, T, H, D] tensor, as [H, L, D].
inline at::Tensor rows(const at::Tensor& t, const Sequence& seq) {
    return t.select(0, seq.batch).narrow(0, seq.begin, seq.length()).transpose(0, 1);
}

/// The causal scores f(x) of query rows [r0, r1) against keys [0, r1), masked: [H, r1-r0, r1].
struct Block {
    at::Tensor x;  // [H, R, r1] q̃ kᵀ
    at::Tensor f;  // [H, R, r1] f(x), zero where s > t
};

inline Block block(const Problem& p, const at::Tensor& qs, const at::Tensor& k, int64_t r0,
                   int64_t r1) {
    Block b;
    b.x = at::bmm(qs.narrow(1, r0, r1 - r0), k.narrow(1, 0, r1).transpose(1, 2));
    const at::Tensor t = at::arange(r0, r1, qs.options().dtype(at::kLong)).unsqueeze(1);
    const at::Tensor s = at::arange(r1, qs.options().dtype(at::kLong)).unsqueeze(0);
    b.f = score(p.score, b.x).masked_fill_(s > t, 0.0);
    return b;
}

/// The quadratic form, o only.
inline at::Tensor forward(const Problem& p) {
    check(p);
    at::Tensor o = at::zeros_like(p.v);  // [B, T, H, V]
    for (const Sequence& seq : sequences(p.q.size(0), p.q.size(1), p.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor qs = rows(p.q, seq) * p.scale;  // [H, L, K]
        const at::Tensor k = rows(p.k, seq);             // [H, L, K]
        const at::Tensor v = rows(p.v, seq);             // [H, L, V]
        const at::Tensor o_seq = rows(o, seq);           // [H, L, V]
        for (int64_t r0 = 0; r0 < L; r0 += kRowBlock) {
            const int64_t r1 = std::min(L, r0 + kRowBlock);
            const Block b = block(p, qs, k, r0, r1);
            at::Tensor num = at::bmm(b.f, v.narrow(1, 0, r1));  // [H, R, V]
            if (p.normalise) num = num / (b.f.sum(2, /*keepdim=*/true) + p.eps);
            o_seq.narrow(1, r0, r1 - r0).copy_(num);
        }
    }
    return o;
}

struct Grads {
    at::Tensor dq, dk, dv;  // like q, k, v
};

/// Gradients of Σ o·d_o through the quadratic form, query rows in blocks:
///   dnum = d_o / (z + eps),  dz = −(d_o·num) / (z + eps)²   (dnum = d_o, dz = 0 unnormalised)
///   dF = dnum vᵀ + dz 1ᵀ,  dX = dF ⊙ f'(X) (causal),  dq = scale dX k,  dk = dXᵀ q̃,  dv = Fᵀ dnum
inline Grads backward(const Problem& p, const at::Tensor& d_o) {
    check(p);
    LAV_ASSERT(d_o.defined() && d_o.scalar_type() == at::kDouble && d_o.sizes() == p.v.sizes(),
               p.family, " reference backward needs an fp64 d_o shaped like o");
    Grads g{at::zeros_like(p.q), at::zeros_like(p.k), at::zeros_like(p.v)};
    for (const Sequence& seq : sequences(p.q.size(0), p.q.size(1), p.cu_seqlens)) {
        const int64_t L = seq.length();
        const at::Tensor qs = rows(p.q, seq) * p.scale;  // [H, L, K]
        const at::Tensor k = rows(p.k, seq);             // [H, L, K]
        const at::Tensor v = rows(p.v, seq);             // [H, L, V]
        const at::Tensor dO = rows(d_o, seq);            // [H, L, V]
        const at::Tensor dq = rows(g.dq, seq), dk = rows(g.dk, seq), dv = rows(g.dv, seq);
        for (int64_t r0 = 0; r0 < L; r0 += kRowBlock) {
            const int64_t r1 = std::min(L, r0 + kRowBlock), R = r1 - r0;
            const Block b = block(p, qs, k, r0, r1);
            const at::Tensor v_keys = v.narrow(1, 0, r1);   // [H, r1, V]
            const at::Tensor do_blk = dO.narrow(1, r0, R);  // [H, R, V]
            at::Tensor dF;                                  // [H, R, r1]
            at::Tensor dnum = do_blk;                       // [H, R, V]
            if (p.normalise) {
                const at::Tensor num = at::bmm(b.f, v_keys);                  // [H, R, V]
                const at::Tensor den = b.f.sum(2, /*keepdim=*/true) + p.eps;  // [H, R, 1]
                dnum = do_blk / den;
                // dnum·v_s + dz = d_o·(v_s − o_t) / (z + eps): one subtraction, not two terms
                // of the same size that cancel
                const at::Tensor do_o = (dnum * num).sum(2, /*keepdim=*/true) / den;  // [H, R, 1]
                dF = at::bmm(dnum, v_keys.transpose(1, 2)) - do_o;
            } else {
                dF = at::bmm(dnum, v_keys.transpose(1, 2));
            }
            const at::Tensor t = at::arange(r0, r1, p.q.options().dtype(at::kLong)).unsqueeze(1);
            const at::Tensor s = at::arange(r1, p.q.options().dtype(at::kLong)).unsqueeze(0);
            const at::Tensor dX = (dF * score_derivative(p.score, b.x)).masked_fill_(s > t, 0.0);
            dq.narrow(1, r0, R).add_(at::bmm(dX, k.narrow(1, 0, r1)) * p.scale);
            dk.narrow(1, 0, r1).add_(at::bmm(dX.transpose(1, 2), qs.narrow(1, r0, R)));
            dv.narrow(1, 0, r1).add_(at::bmm(b.f.transpose(1, 2), dnum));
        }
    }
    return g;
}

/// φ(x) over the last dim: [.., D] with D = 1 + K + K² (based) or K² (rebased).
inline at::Tensor features(Score s, const at::Tensor& x) {
    const at::Tensor outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2);  // [.., K²]
    if (s == Score::rebased) return outer;
    return at::cat({at::ones_like(x.narrow(-1, 0, 1)), x, outer / std::sqrt(2.0)}, -1);
}

/// The independent form: the feature-map recurrence on a state [H, D, V] and normaliser
/// [H, D], step by step: S_t = S_{t-1} + φ(k_t) v_tᵀ, z_t = z_{t-1} + φ(k_t),
/// o_t = S_tᵀ φ(q̃_t) / (z_t·φ(q̃_t) + eps).
inline at::Tensor forward_recurrent(const Problem& p) {
    check(p);
    const int64_t H = p.q.size(2), V = p.v.size(3);
    at::Tensor o = at::zeros_like(p.v);  // [B, T, H, V]
    for (const Sequence& seq : sequences(p.q.size(0), p.q.size(1), p.cu_seqlens)) {
        const at::Tensor fq = features(p.score, rows(p.q, seq) * p.scale);  // [H, L, D]
        const at::Tensor fk = features(p.score, rows(p.k, seq));            // [H, L, D]
        const at::Tensor v = rows(p.v, seq);                                // [H, L, V]
        const int64_t D = fq.size(2);
        at::Tensor S = at::zeros({H, D, V}, p.q.options());  // [H, D, V]
        at::Tensor z = at::zeros({H, D}, p.q.options());     // [H, D]
        const at::Tensor o_seq = rows(o, seq);               // [H, L, V]
        for (int64_t t = 0; t < seq.length(); ++t) {
            const at::Tensor fk_t = fk.select(1, t), fq_t = fq.select(1, t);  // [H, D]
            S.addcmul_(fk_t.unsqueeze(2), v.select(1, t).unsqueeze(1));
            z.add_(fk_t);
            at::Tensor num = (S * fq_t.unsqueeze(2)).sum(1);  // [H, V]
            if (p.normalise) num = num / ((z * fq_t).sum(1, /*keepdim=*/true) + p.eps);
            o_seq.select(1, t).copy_(num);
        }
    }
    return o;
}

}  // namespace lav::ref::feature_map_attn
