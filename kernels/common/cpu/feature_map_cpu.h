// kernels/common/cpu/feature_map_cpu.h — the CPU algorithms shared by based and rebased: causal
// attention with a polynomial score f(scale·q·k) and a normaliser, in three forms (parallel,
// chunk, recurrent), forward and backward, in LibTorch fp32 ops with the contracts' rounding
// points. Header-only (inline) so each family's library compiles it. Not a reference and not a
// public API: the families' headers are (see kernels/based/README.md).
//
// Per sequence and head, with q̃ = scale·q, x_ts = q̃_t·k_s over s ≤ t:
//   num_t = Σ_s f(x_ts) v_s,  z_t = Σ_s f(x_ts),  o_t = num_t / (z_t + eps)  (or num_t)
// based f(x) = 1 + x + x²/2 = φ(q̃)·φ(k) with φ(x) = [1, x, vec(x xᵀ)/√2]; rebased f(x) = x² with
// φ(x) = vec(x xᵀ). The normaliser is an extra value column of ones: v' = [v, 1] gives
// o' = [num, z] from one pass, and the backward is linear attention's with d_o' = [dnum, dz].
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "common/cpu/cpu_args.h"
#include "common/cpu/delta_chunk.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/varlen.h"

namespace lav::kernels::feature_map {

enum class Score { based, rebased };

struct Args {
    const char* family = "";
    Score score = Score::based;
    at::Tensor q, k;        // [B, T, H, K] head_last or [B, H, T, K] head_first
    at::Tensor v;           // [B, T, H, V] / [B, H, T, V]
    at::Tensor cu_seqlens;  // [N + 1] int64 on CPU; undefined: dense
    Layout layout = Layout::head_last;
    double scale = 1.0;  // resolved by the family
    bool normalise = true;
    double eps = 1e-6;
    c10::ScalarType state_dtype = c10::ScalarType::Float;       // stored chunk states
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // Undefined: q's dtype
    int64_t chunk_size = 64;
};

struct Grads {
    at::Tensor dq, dk, dv;  // like q, k, v
};

namespace detail {

using delta::detail::load_rows;
using delta::detail::poisoned_hl;
using delta::detail::round_to;
using delta::detail::store_rows;

struct Problem {
    Args a;
    at::Tensor q, k, v;  // head_last views
    std::vector<Sequence> seqs;
    int64_t B = 0, T = 0, H = 0, K = 0, V = 0, N = 0;
    c10::ScalarType in = c10::ScalarType::Float, out = c10::ScalarType::Float;
};

inline Problem make_problem(const Args& a) {
    Problem p;
    p.a = a;
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined(), a.family, " cpu needs q, k, v");
    cpu::check_float_cpu(a.family, a.q, "q");
    cpu::check_float_cpu(a.family, a.k, "k");
    cpu::check_float_cpu(a.family, a.v, "v");
    LAV_CHECK(a.q.dim() == 4 && a.v.dim() == 4, a.family, " cpu: q, k, v must be 4-d");
    p.in = a.q.scalar_type();
    LAV_CHECK(a.k.scalar_type() == p.in && a.v.scalar_type() == p.in, a.family,
              " cpu: q, k and v must share one dtype");
    p.q = to_head_last(a.q, a.layout);
    p.k = to_head_last(a.k, a.layout);
    p.v = to_head_last(a.v, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    p.V = p.v.size(3);
    LAV_CHECK(p.H > 0 && p.K > 0 && p.V > 0, a.family, " cpu: H, K and V must be positive");
    LAV_CHECK(p.k.sizes() == p.q.sizes(), a.family, " cpu: k must have q's shape ", a.q.sizes(),
              ", got ", a.k.sizes());
    LAV_CHECK(p.v.size(0) == p.B && p.v.size(1) == p.T && p.v.size(2) == p.H, a.family,
              " cpu: v must agree with q in B, T and H, got ", a.v.sizes());
    const std::vector<int64_t> cu = cpu::cu_seqlens_offsets(a.family, a.cu_seqlens);
    p.seqs = sequences(p.B, p.T, cu);
    p.N = num_sequences(p.B, cu);
    cpu::checked_state_dtype(a.family, a.state_dtype);
    p.out = cpu::checked_output_dtype(a.family, a.output_dtype, p.in);
    cpu::checked_chunk_size(a.family, a.chunk_size);
    LAV_CHECK(std::isfinite(a.scale) && a.scale > 0.0, a.family, " cpu: scale must be positive");
    return p;
}

inline at::Tensor score(Score s, const at::Tensor& x) {
    return s == Score::based ? 1.0f + x + 0.5f * x * x : x * x;
}

inline at::Tensor score_derivative(Score s, const at::Tensor& x) {
    return s == Score::based ? 1.0f + x : 2.0f * x;
}

/// φ(x) over the last dim: [.., 1 + K + K²] (based) or [.., K²] (rebased), fp32.
inline at::Tensor features(Score s, const at::Tensor& x) {
    const at::Tensor outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2);
    if (s == Score::rebased) return outer;
    return at::cat({at::ones_like(x.narrow(-1, 0, 1)), x, outer * static_cast<float>(M_SQRT1_2)},
                   -1);
}

/// dx from dφ through φ: the linear part, plus (M + Mᵀ) x (÷√2 for based) for the outer one.
inline at::Tensor features_backward(Score s, const at::Tensor& x, const at::Tensor& dphi) {
    const int64_t K = x.size(-1);
    const at::Tensor outer = dphi.narrow(-1, s == Score::based ? 1 + K : 0, K * K);
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes.push_back(K);
    const at::Tensor M = outer.reshape(sizes);  // [.., K, K]
    at::Tensor dx = at::matmul(M + M.transpose(-1, -2), x.unsqueeze(-1)).squeeze(-1);
    if (s == Score::rebased) return dx;
    return dx.mul_(static_cast<float>(M_SQRT1_2)).add_(dphi.narrow(-1, 1, K));
}

/// [H, L, V + 1]: v with a column of ones, so that the last column of o' is the normaliser.
inline at::Tensor augmented(const at::Tensor& v) {
    return at::cat({v, at::ones_like(v.narrow(2, 0, 1))}, 2);
}

/// Zero above the diagonal of [.., L, L].
inline at::Tensor causal(const at::Tensor& x) { return x.tril(); }

/// One chunk's loaded inputs.
struct ChunkRows {
    at::Tensor qs;  // [H, L, K] scale·q, rounded to the input dtype (as FLA's kernels do)
    at::Tensor k;   // [H, L, K]
    at::Tensor va;  // [H, L, V + 1] [v, 1]
    at::Tensor x;   // [H, L, L] q̃ kᵀ in fp32
    at::Tensor f;   // [H, L, L] causal f(x), fp32
    at::Tensor fq;  // [H, L, D] φ(q̃) rounded to the input dtype
    at::Tensor fk;  // [H, L, D] φ(k) rounded to the input dtype
};

inline ChunkRows load_chunk(const Problem& p, int64_t b, int64_t c0, int64_t c1, bool inter) {
    ChunkRows c;
    c.qs = round_to(load_rows(p.q, b, c0, c1) * static_cast<float>(p.a.scale), p.in);
    c.k = load_rows(p.k, b, c0, c1);
    c.va = augmented(load_rows(p.v, b, c0, c1));
    c.x = at::bmm(c.qs, c.k.transpose(1, 2));
    c.f = causal(score(p.a.score, c.x));
    if (inter) {
        c.fq = round_to(features(p.a.score, c.qs), p.in);
        c.fk = round_to(features(p.a.score, c.k), p.in);
    }
    return c;
}

/// o' = [num, z] of one chunk from its rows and the stored state h entering it (undefined: no
/// earlier chunk): the scores are rounded to the input dtype before the matmul with v, the
/// normaliser sums them in fp32 (FLA's parallel_based and parallel_rebased).
inline at::Tensor chunk_out(const Problem& p, const ChunkRows& c, const at::Tensor& h) {
    const int64_t V = p.V;
    at::Tensor o = at::cat(
        {at::bmm(round_to(c.f, p.in), c.va.narrow(2, 0, V)), c.f.sum(2, /*keepdim=*/true)}, 2);
    if (h.defined()) o.baddbmm_(c.fq, h);
    return o;  // [H, L, V + 1]
}

/// o from o' = [num, z]: with the normaliser, num and z rounded to the input dtype, z + eps
/// rounded again and the quotient rounded to the output dtype, as FLA's torch epilogue in
/// q's dtype; without it, num rounded once.
struct Normalised {
    at::Tensor o;    // [H, L, V] fp32, already rounded to the output dtype
    at::Tensor num;  // [H, L, V] as divided
    at::Tensor den;  // [H, L, 1] z + eps as divided
};

inline Normalised normalise(const Problem& p, const at::Tensor& o_aug, bool fla_rounding) {
    const int64_t V = p.V;
    Normalised n;
    if (!p.a.normalise) {
        n.o = round_to(o_aug.narrow(2, 0, V), p.out);
        return n;
    }
    const c10::ScalarType mid = fla_rounding ? p.in : at::kFloat;
    n.num = round_to(o_aug.narrow(2, 0, V), mid);
    n.den = round_to(round_to(o_aug.narrow(2, V, 1), mid) + static_cast<float>(p.a.eps), mid);
    n.o = round_to(n.num / n.den, p.out);
    return n;
}

/// d_o' = [dnum, dz] from d_o: dnum = d_o / den and dz = −(d_o·num) / den², in fp32.
inline at::Tensor d_out_aug(const Problem& p, const Normalised& n, const at::Tensor& d_o) {
    if (!p.a.normalise) return at::cat({d_o, at::zeros_like(d_o.narrow(2, 0, 1))}, 2);
    const at::Tensor dnum = d_o / n.den;
    return at::cat({dnum, -(dnum * n.num).sum(2, /*keepdim=*/true) / n.den}, 2);
}

template <typename F>
void for_each_sequence(const Problem& p, const F& fn) {
    at::parallel_for(0, p.N, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t n = lo; n < hi; ++n) fn(p.seqs[n]);
    });
}

/// The row ranges of `s` for the variant: one block for "parallel", chunks for "chunk".
inline std::vector<std::pair<int64_t, int64_t>> blocks_of(const Problem& p, const Sequence& s,
                                                          bool parallel) {
    if (parallel) {
        if (s.length() == 0) return {};
        return {{s.begin, s.end}};
    }
    return delta::detail::chunks_of(s, p.a.chunk_size);
}

}  // namespace detail

/// The parallel (one block per sequence) or chunk form, forward.
inline at::Tensor blocked_fwd(const Args& args, bool parallel) {
    using namespace detail;
    const Problem p = make_problem(args);
    at::Tensor o;
    const at::Tensor o_hl = poisoned_hl({p.B, p.T, p.H, p.V}, p.a.layout, p.out, o);
    for_each_sequence(p, [&](const Sequence& s) {
        at::Tensor S;  // [H, D, V + 1] fp32 feature state, carried between chunks
        for (const auto& [c0, c1] : blocks_of(p, s, parallel)) {
            const bool inter = !parallel;
            const ChunkRows c = load_chunk(p, s.batch, c0, c1, inter);
            const at::Tensor h = S.defined() ? round_to(S, p.a.state_dtype) : at::Tensor();
            store_rows(o_hl, s.batch, c0, c1, normalise(p, chunk_out(p, c, h), true).o);
            if (inter) {
                const at::Tensor add = at::bmm(c.fk.transpose(1, 2), c.va);
                S = S.defined() ? S.add_(add) : add;
            }
        }
    });
    return o;
}

inline Grads blocked_bwd(const Args& args, bool parallel, const at::Tensor& d_o) {
    using namespace detail;
    const Problem p = make_problem(args);
    LAV_CHECK(d_o.defined() && d_o.sizes() == args.v.sizes(), p.a.family,
              " cpu: d_o must have o's shape ", args.v.sizes());
    const at::Tensor do_hl = to_head_last(d_o, p.a.layout);
    Grads g;
    const at::Tensor dq_hl = poisoned_hl({p.B, p.T, p.H, p.K}, p.a.layout, p.in, g.dq);
    const at::Tensor dk_hl = poisoned_hl({p.B, p.T, p.H, p.K}, p.a.layout, p.in, g.dk);
    const at::Tensor dv_hl = poisoned_hl({p.B, p.T, p.H, p.V}, p.a.layout, p.in, g.dv);
    const Score sc = p.a.score;
    const float scale = static_cast<float>(p.a.scale);
    for_each_sequence(p, [&](const Sequence& s) {
        const auto blocks = blocks_of(p, s, parallel);
        const bool inter = !parallel;
        // forward: the stored state entering each chunk (state dtype) and each chunk's d_o'
        std::vector<at::Tensor> h(blocks.size()), d_aug(blocks.size());
        at::Tensor S;
        for (size_t i = 0; i < blocks.size(); ++i) {
            const auto [c0, c1] = blocks[i];
            const ChunkRows c = load_chunk(p, s.batch, c0, c1, inter);
            // a copy: S is added to in place below, and .to() of an fp32 S would alias it
            if (S.defined()) h[i] = S.to(p.a.state_dtype, /*non_blocking=*/false, /*copy=*/true);
            const at::Tensor hf = h[i].defined() ? h[i].to(at::kFloat) : at::Tensor();
            const Normalised n = normalise(p, chunk_out(p, c, hf), true);
            d_aug[i] = d_out_aug(p, n, load_rows(do_hl, s.batch, c0, c1));
            if (inter) {
                const at::Tensor add = at::bmm(c.fk.transpose(1, 2), c.va);
                S = S.defined() ? S.add_(add) : add;
            }
        }
        // reverse: dS = ∂L/∂(state after chunk i), carried in fp32, read as stored (state dtype)
        at::Tensor dS;
        for (size_t i = blocks.size(); i-- > 0;) {
            const auto [c0, c1] = blocks[i];
            const ChunkRows c = load_chunk(p, s.batch, c0, c1, inter);
            const at::Tensor& dA = d_aug[i];  // [H, L, V + 1]
            // intra: dF = d_o' v'ᵀ (causal), dX = dF ⊙ f'(x)
            const at::Tensor dX = causal(at::bmm(dA, c.va.transpose(1, 2)))
                                      .mul_(score_derivative(sc, c.x));  // [H, L, L]
            at::Tensor dqs = at::bmm(dX, c.k);                           // [H, L, K]
            at::Tensor dk = at::bmm(dX.transpose(1, 2), c.qs);           // [H, L, K]
            at::Tensor dva = at::bmm(c.f.transpose(1, 2), dA);           // [H, L, V + 1]
            if (inter) {
                if (h[i].defined())
                    dqs.add_(features_backward(sc, c.qs,
                                               at::bmm(dA, h[i].to(at::kFloat).transpose(1, 2))));
                if (dS.defined()) {
                    const at::Tensor dH = round_to(dS, p.a.state_dtype);  // [H, D, V + 1]
                    dk.add_(features_backward(sc, c.k, at::bmm(c.va, dH.transpose(1, 2))));
                    dva.baddbmm_(c.fk, dH);
                }
                const at::Tensor add = at::bmm(c.fq.transpose(1, 2), dA);
                dS = dS.defined() ? dS.add_(add) : add;
            }
            store_rows(dq_hl, s.batch, c0, c1, dqs.mul_(scale));
            store_rows(dk_hl, s.batch, c0, c1, dk);
            store_rows(dv_hl, s.batch, c0, c1, dva.narrow(2, 0, p.V));
        }
    });
    return g;
}

/// The recurrent form: the [H, D, V + 1] feature state in fp32 for the whole sequence,
/// features never rounded; only o (and the gradients) are rounded, once.
inline at::Tensor recurrent_fwd(const Args& args) {
    using namespace detail;
    const Problem p = make_problem(args);
    at::Tensor o;
    const at::Tensor o_hl = poisoned_hl({p.B, p.T, p.H, p.V}, p.a.layout, p.out, o);
    for_each_sequence(p, [&](const Sequence& s) {
        if (s.length() == 0) return;
        const at::Tensor fq = features(
            p.a.score, load_rows(p.q, s.batch, s.begin, s.end) * static_cast<float>(p.a.scale));
        const at::Tensor fk = features(p.a.score, load_rows(p.k, s.batch, s.begin, s.end));
        const at::Tensor va = augmented(load_rows(p.v, s.batch, s.begin, s.end));
        at::Tensor S = at::zeros({p.H, fq.size(2), p.V + 1}, at::kFloat);  // [H, D, V + 1]
        at::Tensor o_aug = at::empty({p.H, s.length(), p.V + 1}, at::kFloat);
        for (int64_t t = 0; t < s.length(); ++t) {
            S.baddbmm_(fk.narrow(1, t, 1).transpose(1, 2), va.narrow(1, t, 1));
            o_aug.narrow(1, t, 1).copy_(at::bmm(fq.narrow(1, t, 1), S));
        }
        store_rows(o_hl, s.batch, s.begin, s.end, normalise(p, o_aug, false).o);
    });
    return o;
}

inline Grads recurrent_bwd(const Args& args, const at::Tensor& d_o) {
    using namespace detail;
    const Problem p = make_problem(args);
    LAV_CHECK(d_o.defined() && d_o.sizes() == args.v.sizes(), p.a.family,
              " cpu: d_o must have o's shape ", args.v.sizes());
    const at::Tensor do_hl = to_head_last(d_o, p.a.layout);
    Grads g;
    const at::Tensor dq_hl = poisoned_hl({p.B, p.T, p.H, p.K}, p.a.layout, p.in, g.dq);
    const at::Tensor dk_hl = poisoned_hl({p.B, p.T, p.H, p.K}, p.a.layout, p.in, g.dk);
    const at::Tensor dv_hl = poisoned_hl({p.B, p.T, p.H, p.V}, p.a.layout, p.in, g.dv);
    const Score sc = p.a.score;
    const float scale = static_cast<float>(p.a.scale);
    for_each_sequence(p, [&](const Sequence& s) {
        const int64_t L = s.length();
        if (L == 0) return;
        const at::Tensor qs = load_rows(p.q, s.batch, s.begin, s.end) * scale;  // [H, L, K]
        const at::Tensor k = load_rows(p.k, s.batch, s.begin, s.end);           // [H, L, K]
        const at::Tensor fq = features(sc, qs), fk = features(sc, k);           // [H, L, D]
        const at::Tensor va = augmented(load_rows(p.v, s.batch, s.begin, s.end));
        const at::Tensor d_out = load_rows(do_hl, s.batch, s.begin, s.end);  // [H, L, V]
        const int64_t D = fq.size(2);
        // forward: o'_t = S_tᵀ φ(q̃_t), then d_o'_t and dφq_t = S_t d_o'_t in the same sweep
        at::Tensor S = at::zeros({p.H, D, p.V + 1}, at::kFloat);
        at::Tensor o_aug = at::empty({p.H, L, p.V + 1}, at::kFloat);
        at::Tensor dfq = at::empty({p.H, L, D}, at::kFloat);
        at::Tensor dA = at::empty({p.H, L, p.V + 1}, at::kFloat);
        for (int64_t t = 0; t < L; ++t) {
            S.baddbmm_(fk.narrow(1, t, 1).transpose(1, 2), va.narrow(1, t, 1));
            o_aug.narrow(1, t, 1).copy_(at::bmm(fq.narrow(1, t, 1), S));
            const Normalised n = normalise(p, o_aug.narrow(1, t, 1), false);
            dA.narrow(1, t, 1).copy_(d_out_aug(p, n, d_out.narrow(1, t, 1)));
            dfq.narrow(1, t, 1).copy_(at::bmm(dA.narrow(1, t, 1), S.transpose(1, 2)));
        }
        // reverse: dS_t = Σ_{s ≥ t} φ(q̃_s) d_o'_sᵀ; dφk_t = dS_t v'_t, dv'_t = dS_tᵀ φ(k_t)
        at::Tensor dS = at::zeros({p.H, D, p.V + 1}, at::kFloat);
        at::Tensor dfk = at::empty({p.H, L, D}, at::kFloat);
        at::Tensor dva = at::empty({p.H, L, p.V + 1}, at::kFloat);
        for (int64_t t = L; t-- > 0;) {
            dS.baddbmm_(fq.narrow(1, t, 1).transpose(1, 2), dA.narrow(1, t, 1));
            dfk.narrow(1, t, 1).copy_(at::bmm(va.narrow(1, t, 1), dS.transpose(1, 2)));
            dva.narrow(1, t, 1).copy_(at::bmm(fk.narrow(1, t, 1), dS));
        }
        store_rows(dq_hl, s.batch, s.begin, s.end, features_backward(sc, qs, dfq).mul_(scale));
        store_rows(dk_hl, s.batch, s.begin, s.end, features_backward(sc, k, dfk));
        store_rows(dv_hl, s.batch, s.begin, s.end, dva.narrow(2, 0, p.V));
    });
    return g;
}

/// The contract of `variant` ("parallel", "chunk" or "recurrent"), forward or backward.
inline PrecisionContract contract(const Args& a, std::string_view variant, bool backward) {
    const bool parallel = variant == "parallel", chunk = variant == "chunk";
    LAV_CHECK(parallel || chunk || variant == "recurrent", a.family, " has no variant '", variant,
              "'; expected parallel, chunk or recurrent");
    LAV_CHECK(a.q.defined(), a.family, "'s contract needs q to name the input dtype");
    const auto dt = [&](c10::ScalarType t) {
        const auto d = from_scalar_type(t);
        LAV_CHECK(d.has_value(), a.family, " takes floating dtypes, got ", scalar_type_name(t));
        return *d;
    };
    const DType in = dt(a.q.scalar_type());
    const DType out = a.output_dtype == c10::ScalarType::Undefined ? in : dt(a.output_dtype);
    PrecisionContract c;
    c.kernel = std::string(a.family) + "." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };
    add("q, k, v", in, "inputs, widened to fp32 on load");
    add("accumulator", DType::fp32, "every matmul, reduction and score");
    if (parallel || chunk) {
        add("scaled q", in, "scale q rounded to the input dtype before q k^T");
        add("intra scores", in, "causal f(q k^T) rounded before the matmul with v; z sums fp32");
    }
    if (chunk) {
        add("feature maps", in, "phi(scale q), phi(k) rounded before the state matmuls");
        add("chunk states h", dt(a.state_dtype),
            "feature state [D, V + 1] entering each chunk, stored; carried in fp32");
        if (backward)
            add("chunk state grads dh", dt(a.state_dtype),
                "gradient of each chunk's end state, stored; carried in fp32");
    } else if (!parallel) {
        add("state", DType::fp32, "feature state [D, V + 1], features and state never rounded");
    }
    if (a.normalise)
        add("num, z", parallel || chunk ? in : DType::fp32,
            parallel || chunk ? "rounded to q's dtype, then o = num / (z + eps) in it (FLA)"
                              : "kept in fp32 for the division");
    add("o", out, backward ? "d_o is read in this dtype" : "rounded once");
    if (!backward) return c;
    add("dq", in, "accumulated in fp32, rounded once");
    add("dk", in, "accumulated in fp32, rounded once");
    add("dv", in, "accumulated in fp32, rounded once");
    return c;
}

}  // namespace lav::kernels::feature_map
