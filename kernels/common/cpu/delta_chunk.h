// kernels/common/cpu/delta_chunk.h — the CPU algorithms shared by delta_rule and
// gated_delta_rule: the chunked WY form and the fused recurrence, forward and backward, in LibTorch
// fp32 ops with the contracts' rounding points. Header-only (inline) so each family's library
// compiles it. Not a reference and not a public API: the families' headers are (see their
// README.md).
//
// One engine serves both families: the delta rule is the gated delta rule without a gate and
// with as many value heads as key heads (HV = H). Per value head hv (key head hv / (HV / H)):
//   S̄ = exp(g_t) S_{t-1},  u_t = β_t (v_t − S̄ᵀ k_t),  S_t = S̄ + k_t u_tᵀ,  o_t = scale S_tᵀ q_t
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/cpu/cpu_args.h"
#include "common/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/layout.h"
#include "core/precision_contract.h"
#include "core/varlen.h"

namespace lav::kernels::delta {

/// The eps inside the square root of FLA's l2norm (fla/modules/l2norm.py); its recurrent
/// kernels inline the same x / sqrt(Σ x² + 1e-6).
constexpr float kL2NormEps = 1e-6f;
/// FLA's softplus returns x itself above this (fla/ops/utils/softplus.py).
constexpr float kSoftplusCut = 20.0f;

/// Everything either family passes in; delta_rule leaves the gate fields undefined.
struct Args {
    const char* family = "";  // "delta_rule" or "gated_delta_rule", for messages
    at::Tensor q, k;          // [B, T, H, K] head_last or [B, H, T, K] head_first
    at::Tensor v;             // [B, T, HV, V] / [B, HV, T, V]
    at::Tensor g;             // [B, T, HV] / [B, HV, T]: log decay, or raw with gate_in_kernel
    at::Tensor beta;          // [B, T, HV] / [B, HV, T]: β, or raw logits with beta_sigmoid
    at::Tensor A_log;         // [HV]; with gate_in_kernel
    at::Tensor dt_bias;       // [HV]; with gate_in_kernel, undefined: 0
    at::Tensor h0;            // [N, HV, K, V]; undefined: zeros
    at::Tensor cu_seqlens;    // [N + 1] int64 on CPU; undefined: dense
    Layout layout = Layout::head_last;
    double scale = 0.0;  // 0: K^-0.5
    bool l2norm = false;
    bool gate_in_kernel = false;
    bool beta_sigmoid = false;
    bool allow_neg_eigval = false;
    c10::ScalarType state_dtype = c10::ScalarType::Float;
    c10::ScalarType output_dtype = c10::ScalarType::Undefined;  // Undefined: q's dtype
    int64_t chunk_size = 64;
    bool keep_chunk_states = false;  // the chunk forward also returns h (for comparison)
};

struct Fwd {
    at::Tensor o;   // v's layout and sizes; output dtype
    at::Tensor ht;  // [N, HV, K, V]; state dtype
    at::Tensor h;   // [NT, HV, K, V] state dtype: each chunk's stored state; keep_chunk_states
};

/// Gradients w.r.t. the tensors as passed (raw q, k, g, β when the kernel transforms them).
struct Grads {
    at::Tensor dq, dk, dv;        // like q, k, v
    at::Tensor dg, dbeta;         // like g (undefined without g) and beta
    at::Tensor dA_log, ddt_bias;  // [HV]; with gate_in_kernel (ddt_bias: with dt_bias)
    at::Tensor dh0;               // [N, HV, K, V] state dtype; undefined without h0
};

namespace detail {

using cpu::check_d_o;
using cpu::check_float_cpu;
using cpu::check_shape;
using cpu::checked_chunk_size;
using cpu::checked_output_dtype;
using cpu::checked_scale;
using cpu::checked_state_dtype;
using cpu::cu_seqlens_offsets;
using cpu::poisoned;
using cpu::round_to;
using cpu::widen;

// ---- arguments ----

/// The validated arguments: head_last views of the inputs and the dtypes of the contract.
struct Problem {
    std::string name;    // the family, for messages
    at::Tensor q, k;     // [B, T, H, K] head_last views
    at::Tensor v;        // [B, T, HV, V]
    at::Tensor g;        // [B, T, HV]; undefined: no decay
    at::Tensor beta;     // [B, T, HV]
    at::Tensor A_log;    // [HV] fp32; with gate_in_kernel
    at::Tensor dt_bias;  // [HV] fp32 (zeros when not given); with gate_in_kernel
    at::Tensor h0;       // [N, HV, K, V] in its own dtype; undefined: zeros
    std::vector<Sequence> seqs;
    int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0, N = 0;
    int64_t group = 1;  // HV / H value heads per key head
    int64_t chunk = 0;
    float scale = 0.0f;
    float beta_scale = 1.0f;  // 2 with allow_neg_eigval
    bool l2norm = false, gate_in_kernel = false, beta_sigmoid = false;
    Layout layout = Layout::head_last;
    c10::ScalarType in = c10::ScalarType::Float;
    c10::ScalarType state = c10::ScalarType::Float;
    c10::ScalarType out = c10::ScalarType::Float;
};

inline void check_state_shape(const Problem& p, const at::Tensor& x, const char* name) {
    check_shape(p.name, x, name, "[N, HV, K, V]", {p.N, p.HV, p.K, p.V});
}

/// A [B, T, HV] per-step tensor (g or beta) as a head_last view, checked.
inline at::Tensor per_step(const Problem& p, const at::Tensor& x, const char* name) {
    check_float_cpu(p.name, x, name);
    LAV_CHECK(x.dim() == 3, p.name, " cpu: ", name, " must be 3-d, got ", x.sizes());
    const at::Tensor hl = to_head_last(x, p.layout);
    LAV_CHECK(hl.sizes() == at::IntArrayRef({p.B, p.T, p.HV}), p.name, " cpu: ", name,
              " must match v's B, T and heads in the same layout, got ", x.sizes());
    return hl;
}

/// A [HV] per-head parameter as a contiguous fp32 copy, checked.
inline at::Tensor per_head(const Problem& p, const at::Tensor& x, const char* name) {
    check_shape(p.name, x, name, "[HV]", {p.HV});
    return at::empty({p.HV}, at::kFloat).copy_(x);
}

inline Problem make_problem(const Args& a, bool chunked) {
    Problem p;
    p.name = a.family;
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined() && a.beta.defined(), p.name,
              " cpu needs q, k, v and beta");
    check_float_cpu(p.name, a.q, "q");
    check_float_cpu(p.name, a.k, "k");
    check_float_cpu(p.name, a.v, "v");
    LAV_CHECK(a.q.dim() == 4 && a.k.dim() == 4 && a.v.dim() == 4, p.name,
              " cpu: q, k, v must be 4-d, got ", a.q.dim(), ", ", a.k.dim(), ", ", a.v.dim());
    p.in = a.q.scalar_type();
    LAV_CHECK(a.k.scalar_type() == p.in && a.v.scalar_type() == p.in, p.name,
              " cpu: q, k and v must share one dtype, got ", scalar_type_name(a.q.scalar_type()),
              ", ", scalar_type_name(a.k.scalar_type()), ", ", scalar_type_name(a.v.scalar_type()));
    p.layout = a.layout;
    p.q = to_head_last(a.q, a.layout);
    p.k = to_head_last(a.k, a.layout);
    p.v = to_head_last(a.v, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    p.HV = p.v.size(2);
    p.V = p.v.size(3);
    LAV_CHECK(p.K > 0 && p.V > 0 && p.H > 0 && p.HV > 0, p.name,
              " cpu: heads, K and V must be positive");
    LAV_CHECK(p.k.sizes() == p.q.sizes(), p.name, " cpu: k must have q's shape ", a.q.sizes(),
              ", got ", a.k.sizes());
    LAV_CHECK(p.v.size(0) == p.B && p.v.size(1) == p.T, p.name,
              " cpu: v must agree with q in B and T, got ", a.v.sizes(), " and ", a.q.sizes());
    LAV_CHECK(p.HV % p.H == 0, p.name, " cpu: v's heads (HV = ", p.HV,
              ") must be a multiple of q's heads (H = ", p.H, ")");
    p.group = p.HV / p.H;

    p.beta = per_step(p, a.beta, "beta");
    if (a.g.defined()) p.g = per_step(p, a.g, "g");
    p.gate_in_kernel = a.gate_in_kernel;
    if (a.gate_in_kernel) {
        LAV_CHECK(a.g.defined() && a.A_log.defined(), p.name,
                  " cpu: use_gate_in_kernel needs g (the raw gate) and A_log");
        p.A_log = per_head(p, a.A_log, "A_log");
        p.dt_bias =
            a.dt_bias.defined() ? per_head(p, a.dt_bias, "dt_bias") : at::zeros({p.HV}, at::kFloat);
    } else {
        LAV_CHECK(!a.A_log.defined() && !a.dt_bias.defined(), p.name,
                  " cpu: A_log and dt_bias are read only with use_gate_in_kernel");
    }
    LAV_CHECK(!a.allow_neg_eigval || a.beta_sigmoid, p.name,
              " cpu: allow_neg_eigval needs use_beta_sigmoid_in_kernel");
    p.beta_sigmoid = a.beta_sigmoid;
    p.beta_scale = a.allow_neg_eigval ? 2.0f : 1.0f;
    p.l2norm = a.l2norm;

    const std::vector<int64_t> cu = cu_seqlens_offsets(p.name, a.cu_seqlens);
    p.seqs = sequences(p.B, p.T, cu);
    p.N = num_sequences(p.B, cu);

    if (a.h0.defined()) {
        check_state_shape(p, a.h0, "h0");
        p.h0 = a.h0;
    }
    p.state = checked_state_dtype(p.name, a.state_dtype);
    p.out = checked_output_dtype(p.name, a.output_dtype, p.in);
    if (chunked) p.chunk = checked_chunk_size(p.name, a.chunk_size);
    p.scale = checked_scale(p.name, a.scale, p.K);
    return p;
}

/// d_o as a head_last view, checked against o's shape; dht checked against the state shape.
inline at::Tensor check_cotangents(const Problem& p, const Args& a, const at::Tensor& d_o,
                                   const at::Tensor& dht) {
    check_d_o(p.name, d_o, a.v.sizes());
    if (dht.defined()) check_state_shape(p, dht, "dht");
    return to_head_last(d_o, a.layout);
}

// ---- tensor helpers ----

/// Rows [c0, c1) of batch row b of a [B, T, heads, D] head_last tensor: [heads, L, D] fp32.
inline at::Tensor load_rows(const at::Tensor& x_hl, int64_t b, int64_t c0, int64_t c1) {
    return widen(x_hl[b].slice(0, c0, c1).transpose(0, 1));
}

/// Rows [c0, c1) of a [B, T, heads] head_last tensor: [heads, L] fp32.
inline at::Tensor load_step_rows(const at::Tensor& x_hl, int64_t b, int64_t c0, int64_t c1) {
    return widen(x_hl[b].slice(0, c0, c1).t());
}

/// Writes [heads, L, D] (or [heads, L]) fp32 rows into a head_last view, rounding once.
inline void store_rows(const at::Tensor& dst_hl, int64_t b, int64_t c0, int64_t c1,
                       const at::Tensor& x) {
    dst_hl[b].slice(0, c0, c1).copy_(x.transpose(0, 1));
}

/// A NaN-filled tensor of head_last sizes `hl`, allocated in `layout`, viewed head_last.
inline at::Tensor poisoned_hl(std::vector<int64_t> hl, Layout layout, c10::ScalarType dtype,
                              at::Tensor& in_layout) {
    if (layout == Layout::head_first) std::swap(hl[1], hl[2]);
    in_layout = poisoned(hl, dtype);
    return to_head_last(in_layout, layout);
}

/// The state a sequence starts from, in fp32: h0 widened from whatever dtype it has, or zeros.
inline at::Tensor start_state(const Problem& p, int64_t n) {
    return p.h0.defined() ? widen(p.h0[n]) : at::zeros({p.HV, p.K, p.V}, at::kFloat);
}

/// [H, L, D] rows of key heads repeated for their value heads: [HV, L, D].
inline at::Tensor by_value_head(const Problem& p, const at::Tensor& x) {
    if (p.group == 1) return x;
    return x.unsqueeze(1)
        .expand({p.H, p.group, x.size(1), x.size(2)})
        .reshape({p.HV, x.size(1), x.size(2)});
}

/// [HV, L, D] gradients summed over each key head's value heads: [H, L, D].
inline at::Tensor by_key_head(const Problem& p, const at::Tensor& x) {
    if (p.group == 1) return x;
    return x.view({p.H, p.group, x.size(1), x.size(2)}).sum(1);
}

// ---- the in-kernel transforms (FLA §3.10) ----

/// q or k rows as the recurrence reads them: x̂ = x · rstd with rstd = 1/√(Σ x² + eps) when
/// normalising (rounded to `store`, as FLA's l2norm_fwd writes x's dtype), else x itself.
struct Normalised {
    at::Tensor x;     // [.., L, K] fp32
    at::Tensor rstd;  // [.., L, 1] fp32; undefined without the norm
};

inline Normalised normalise(const at::Tensor& x, bool l2norm, c10::ScalarType store) {
    if (!l2norm) return {x, at::Tensor()};
    const at::Tensor rstd = (x.square().sum(-1, /*keepdim=*/true) + kL2NormEps).rsqrt();
    return {round_to(x * rstd, store), rstd};
}

/// dx from dx̂ through the norm: (dx̂ − (dx̂·x̂) x̂) · rstd (FLA's l2norm_bwd); dx̂ without it.
inline at::Tensor normalise_backward(const Normalised& n, const at::Tensor& dy) {
    if (!n.rstd.defined()) return dy;
    return (dy - (dy * n.x).sum(-1, /*keepdim=*/true) * n.x) * n.rstd;
}

/// β as the recurrence uses it: the input, or beta_scale·σ(raw) in fp32.
inline at::Tensor activate_beta(const Problem& p, const at::Tensor& raw) {
    return p.beta_sigmoid ? at::sigmoid(raw) * p.beta_scale : raw;
}

/// ∂L/∂raw from ∂L/∂β: dβ · beta_scale·σ(1 − σ) with the sigmoid, else dβ.
inline at::Tensor beta_backward(const Problem& p, const at::Tensor& raw, const at::Tensor& dbeta) {
    if (!p.beta_sigmoid) return dbeta;
    const at::Tensor s = at::sigmoid(raw);
    return dbeta * s * (1.0f - s) * p.beta_scale;
}

/// FLA's softplus: x above the cut-off, log(1 + eˣ) below it.
inline at::Tensor fla_softplus(const at::Tensor& x) {
    return at::where(x > kSoftplusCut, x, at::log1p(at::exp(x)));
}

/// The log decay as the recurrence uses it: g, or −exp(A_log)·softplus(raw + dt_bias) in fp32
/// (FLA's GDN gate). a_log and dt_bias broadcast against raw ([HV, 1] or a scalar).
inline at::Tensor activate_gate(const Problem& p, const at::Tensor& raw, const at::Tensor& a_log,
                                const at::Tensor& dt_bias) {
    if (!p.gate_in_kernel) return raw;
    return -a_log.exp() * fla_softplus(raw + dt_bias);
}

/// ∂L/∂raw from ∂L/∂g through the gate: −exp(A_log)·σ(raw + dt_bias)·dg; dg without it.
inline at::Tensor gate_backward(const Problem& p, const at::Tensor& raw, const at::Tensor& a_log,
                                const at::Tensor& dt_bias, const at::Tensor& dg) {
    if (!p.gate_in_kernel) return dg;
    return -a_log.exp() * at::sigmoid(raw + dt_bias) * dg;
}

// ---- chunk variant ----

/// One chunk's inputs for every value head, widened and transformed.
struct ChunkInputs {
    Normalised q, k;      // [H, L, K] per key head (normalised rows rounded to the input dtype)
    at::Tensor qv, kv;    // [HV, L, K] the same rows per value head
    at::Tensor v;         // [HV, L, V]
    at::Tensor beta_raw;  // [HV, L] as passed
    at::Tensor beta;      // [HV, L] as used
    at::Tensor g_raw;     // [HV, L] as passed; undefined: no gate
    at::Tensor g;         // [HV, L] log decay as used; undefined: no gate
};

inline ChunkInputs load_chunk(const Problem& p, int64_t b, int64_t c0, int64_t c1) {
    ChunkInputs c;
    c.q = normalise(load_rows(p.q, b, c0, c1), p.l2norm, p.in);
    c.k = normalise(load_rows(p.k, b, c0, c1), p.l2norm, p.in);
    c.qv = by_value_head(p, c.q.x);
    c.kv = by_value_head(p, c.k.x);
    c.v = load_rows(p.v, b, c0, c1);
    c.beta_raw = load_step_rows(p.beta, b, c0, c1);
    c.beta = activate_beta(p, c.beta_raw);
    if (p.g.defined()) {
        c.g_raw = load_step_rows(p.g, b, c0, c1);
        c.g = p.gate_in_kernel
                  ? activate_gate(p, c.g_raw, p.A_log.unsqueeze(1), p.dt_bias.unsqueeze(1))
                  : c.g_raw;
    }
    return c;
}

/// The decay factors of one chunk, all from the fp32 chunk-local cumsum G (all ones without a
/// gate).
struct ChunkGates {
    at::Tensor decay;   // [HV, L] exp(G_i)
    at::Tensor to_end;  // [HV, L] exp(G_last − G_i)
    at::Tensor last;    // [HV, 1, 1] exp(G_last)
    at::Tensor intra;   // [HV, L, L] exp(G_i − G_j) for j ≤ i, else 0
    at::Tensor strict;  // [HV, L, L] exp(G_i − G_j) for j < i, else 0
};

inline ChunkGates chunk_gates(const Problem& p, const at::Tensor& g, int64_t L) {
    at::Tensor G = at::zeros({p.HV, L}, at::kFloat);  // [HV, L]
    if (g.defined()) {
        const float* gp = g.data_ptr<float>();
        float* Gp = G.data_ptr<float>();
        // a running fp32 sum: at::cumsum accumulates fp32 in double on the CPU
        for (int64_t h = 0; h < p.HV; ++h) {
            float acc = 0.0f;
            for (int64_t i = 0; i < L; ++i) Gp[h * L + i] = acc += gp[h * L + i];
        }
    }
    ChunkGates gates;
    const at::Tensor G_last = G.narrow(1, L - 1, 1);  // [HV, 1]
    gates.decay = G.exp();
    gates.to_end = (G_last - G).exp();
    gates.last = G_last.exp().view({p.HV, 1, 1});
    // mask before exp: above the diagonal G_i − G_j > 0 can overflow, and inf·0 is NaN
    const at::Tensor above = at::ones({L, L}, at::kBool).triu(1);
    gates.intra = (G.unsqueeze(2) - G.unsqueeze(1))
                      .masked_fill_(above, -std::numeric_limits<float>::infinity())
                      .exp_();
    gates.strict = gates.intra.tril(-1);
    return gates;
}

/// The WY (UT) representation of one chunk, rounded where the contract stores it.
struct Wy {
    at::Tensor A;   // [HV, L, L] β_i (k_i·k_j) exp(G_i − G_j) for j < i, fp32
    at::Tensor Ti;  // [HV, L, L] (I + A)⁻¹, solved in fp32, stored in the input dtype
    at::Tensor kb;  // [HV, L, K] k ⊙ β exp(G), rounded to the input dtype
    at::Tensor vb;  // [HV, L, V] v ⊙ β, rounded to the input dtype
    at::Tensor w;   // [HV, L, K] Ti kb, stored in the input dtype
    at::Tensor u;   // [HV, L, V] Ti vb, stored in the input dtype
};

inline Wy wy_transform(const Problem& p, const ChunkInputs& c, const ChunkGates& gates) {
    const int64_t L = c.v.size(1);
    Wy wy;
    // FLA's chunk_scaled_dot_kkt keeps A in fp32 (output_dtype=torch.float)
    wy.A = at::bmm(c.kv, c.kv.transpose(1, 2)).mul_(gates.strict).mul_(c.beta.unsqueeze(2));
    const at::Tensor eye = at::eye(L, at::kFloat).expand({p.HV, L, L}).contiguous();
    // forward substitution in fp32; FLA's solve_tril then rounds the inverse to k's dtype
    wy.Ti = round_to(at::linalg_solve_triangular(wy.A + eye, eye, /*upper=*/false, /*left=*/true,
                                                 /*unitriangular=*/true),
                     p.in);
    // FLA's recompute_w_u rounds the β-scaled operands to the input dtype before the matmuls
    wy.kb = round_to(c.kv * (c.beta * gates.decay).unsqueeze(2), p.in);
    wy.vb = round_to(c.v * c.beta.unsqueeze(2), p.in);
    wy.w = round_to(at::bmm(wy.Ti, wy.kb), p.in);
    wy.u = round_to(at::bmm(wy.Ti, wy.vb), p.in);
    return wy;
}

/// v_new = u − w h, stored in the input dtype: the values the chunk adds to the state.
inline at::Tensor new_values(const Problem& p, const Wy& wy, const at::Tensor& h) {
    return round_to(wy.u - at::bmm(wy.w, h), p.in);  // [HV, L, V]
}

/// S ← exp(G_last)·S + kᵀ·round_in(v_new ⊙ exp(G_last − G)) (FLA's
/// chunk_gated_delta_rule_fwd_h rounds the decayed v_new before the matmul).
inline at::Tensor advance(const Problem& p, const at::Tensor& S, const ChunkInputs& c,
                          const ChunkGates& gates, const at::Tensor& v_new) {
    const at::Tensor v_decayed = round_to(v_new * gates.to_end.unsqueeze(2), p.in);  // [HV, L, V]
    return at::baddbmm(S * gates.last, c.kv.transpose(1, 2), v_decayed);             // [HV, K, V]
}

/// Every chunk of a sequence as [begin, end) row ranges.
inline std::vector<std::pair<int64_t, int64_t>> chunks_of(const Sequence& s, int64_t C) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c0 = s.begin; c0 < s.end; c0 += C) out.emplace_back(c0, std::min(c0 + C, s.end));
    return out;
}

/// In place, dG_t ← Σ_{i ≥ t} dG_i along each row of [HV, L]: a reverse running fp32 sum.
inline void reverse_cumsum_inplace(at::Tensor& x) {
    const int64_t rows = x.size(0), L = x.size(1);
    float* d = x.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (int64_t i = L; i-- > 0;) d[r * L + i] = acc += d[r * L + i];
    }
}

/// The backward's result views and per-head sums.
struct GradViews {
    at::Tensor dq, dk, dv, dg, dbeta;  // head_last views of the results
    // [N, HV] fp32 sums per sequence, added in sequence order at the end so the result does not
    // depend on how sequences were scheduled; with gate_in_kernel
    at::Tensor dA_log_parts, ddt_bias_parts;
};

/// Allocates every result NaN-poisoned in the caller's layout; returns their head_last views.
inline GradViews allocate_grads(const Problem& p, const Args& a, Grads& grads) {
    GradViews views;
    views.dq = poisoned_hl({p.B, p.T, p.H, p.K}, p.layout, p.in, grads.dq);
    views.dk = poisoned_hl({p.B, p.T, p.H, p.K}, p.layout, p.in, grads.dk);
    views.dv = poisoned_hl({p.B, p.T, p.HV, p.V}, p.layout, p.in, grads.dv);
    views.dbeta = poisoned_hl({p.B, p.T, p.HV}, p.layout, a.beta.scalar_type(), grads.dbeta);
    if (p.g.defined())
        views.dg = poisoned_hl({p.B, p.T, p.HV}, p.layout, a.g.scalar_type(), grads.dg);
    if (p.gate_in_kernel) {
        grads.dA_log = poisoned({p.HV}, a.A_log.scalar_type());
        views.dA_log_parts = at::zeros({p.N, p.HV}, at::kFloat);
        if (a.dt_bias.defined()) {
            grads.ddt_bias = poisoned({p.HV}, a.dt_bias.scalar_type());
            views.ddt_bias_parts = at::zeros({p.N, p.HV}, at::kFloat);
        }
    }
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.HV, p.K, p.V}, p.state);
    return views;
}

/// Sums the per-sequence parts of the per-head parameters' gradients into their results,
/// rounding once.
inline void finish_grads(const GradViews& views, Grads& grads) {
    if (grads.dA_log.defined()) grads.dA_log.copy_(views.dA_log_parts.sum(0));
    if (grads.ddt_bias.defined()) grads.ddt_bias.copy_(views.ddt_bias_parts.sum(0));
}

/// Runs `seq_fn(sequence)` for every sequence, in parallel; each writes disjoint elements of
/// the results. Inside a task ATen runs every op (the many small batched matmuls of a chunk
/// included) on that task's thread, so the parallelism is one coarse split, not a fork and join
/// per matmul.
template <typename F>
void for_each_sequence(const Problem& p, const F& seq_fn) {
    at::parallel_for(0, p.N, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t n = lo; n < hi; ++n) seq_fn(p.seqs[n]);
    });
}

// ---- recurrent variant ----

/// Σ x_j·y_j in fp32 over eight interleaved partial sums: a fixed order the compiler can
/// vectorise without reassociating.
inline float dot(const float* x, const float* y, int64_t n) {
    float acc[8] = {};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; ++l) acc[l] += x[j + l] * y[j + l];
    float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; j < n; ++j) sum += x[j] * y[j];
    return sum;
}

/// One step on a [K, V] fp32 state, in place, in FLA's fused_recurrent order:
///   S ← a·S;  u = β (v − Sᵀ k);  S ← S + k uᵀ;  with q given, o = Sᵀ (scale·q).
/// `u` is [V] scratch and holds u_t on return.
inline void step(float* S, const float* k, const float* v, float a, float beta, int64_t K,
                 int64_t V, float* u, const float* q = nullptr, float scale = 0.0f,
                 float* o = nullptr) {
    std::fill(u, u + V, 0.0f);
    for (int64_t i = 0; i < K; ++i) {
        float* Si = S + i * V;
        const float ki = k[i];
        for (int64_t j = 0; j < V; ++j) {
            Si[j] *= a;
            u[j] += ki * Si[j];
        }
    }
    for (int64_t j = 0; j < V; ++j) u[j] = beta * (v[j] - u[j]);
    if (o) std::fill(o, o + V, 0.0f);
    for (int64_t i = 0; i < K; ++i) {
        float* Si = S + i * V;
        const float ki = k[i];
        for (int64_t j = 0; j < V; ++j) Si[j] += ki * u[j];
        if (o) {
            // FLA's fused_recurrent scales q before the product
            const float qi = scale * q[i];
            for (int64_t j = 0; j < V; ++j) o[j] += qi * Si[j];
        }
    }
}

/// One key head of one sequence: its q and k rows, widened and (when asked) normalised in
/// fp32 without rounding, as FLA's recurrent kernels inline the norm.
struct KeyLane {
    int64_t L = 0;
    Normalised q, k;  // [L, K]
};

inline KeyLane load_key_lane(const Problem& p, const Sequence& s, int64_t h) {
    KeyLane lane;
    lane.L = s.length();
    lane.q =
        normalise(widen(p.q[s.batch].slice(0, s.begin, s.end).select(1, h)), p.l2norm, at::kFloat);
    lane.k =
        normalise(widen(p.k[s.batch].slice(0, s.begin, s.end).select(1, h)), p.l2norm, at::kFloat);
    return lane;
}

/// One value head of one sequence: v, β and the decay, widened and transformed.
struct ValueLane {
    at::Tensor v;         // [L, V]
    at::Tensor beta_raw;  // [L] as passed
    at::Tensor beta;      // [L] as used
    at::Tensor g_raw;     // [L] as passed; undefined: no gate
    at::Tensor g;         // [L] log decay as used; undefined: no gate
    at::Tensor decay;     // [L] exp(g_t), ones without a gate
};

inline ValueLane load_value_lane(const Problem& p, const Sequence& s, int64_t hv) {
    ValueLane lane;
    const auto rows = [&](const at::Tensor& x) {
        return widen(x[s.batch].slice(0, s.begin, s.end).select(1, hv));
    };
    lane.v = rows(p.v);
    lane.beta_raw = rows(p.beta);
    lane.beta = activate_beta(p, lane.beta_raw).contiguous();
    if (p.g.defined()) {
        lane.g_raw = rows(p.g);
        lane.g = p.gate_in_kernel ? activate_gate(p, lane.g_raw, p.A_log[hv], p.dt_bias[hv])
                                  : lane.g_raw;
        lane.decay = lane.g.exp().contiguous();
    } else {
        lane.decay = at::ones({s.length()}, at::kFloat);
    }
    return lane;
}

/// The lane's starting state in fp32: h0[n, hv] widened, or zeros.
inline at::Tensor lane_start(const Problem& p, int64_t n, int64_t hv) {
    return p.h0.defined() ? widen(p.h0[n][hv]) : at::zeros({p.K, p.V}, at::kFloat);  // [K, V]
}

/// Runs `lane_fn(sequence, key head)` over every pair, in parallel; each pair writes disjoint
/// elements of the results (the value heads of a key head run inside its task).
template <typename F>
void for_each_key_lane(const Problem& p, const F& lane_fn) {
    at::parallel_for(0, p.N * p.H, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; ++j) lane_fn(p.seqs[j / p.H], j % p.H);
    });
}

}  // namespace detail

// ---- entry points ----

inline Fwd chunk_fwd(const Args& args) {
    using namespace detail;
    const Problem p = make_problem(args, /*chunked=*/true);
    Fwd out;
    const at::Tensor o_hl = poisoned_hl({p.B, p.T, p.HV, p.V}, p.layout, p.out, out.o);
    out.ht = poisoned({p.N, p.HV, p.K, p.V}, p.state);
    const cpu::ChunkStateStore kept(args.keep_chunk_states, p.seqs, p.chunk, {p.HV, p.K, p.V},
                                    p.state);
    for_each_sequence(p, [&](const Sequence& s) {
        // the carried state stays fp32; only its stored copies are rounded
        at::Tensor S = start_state(p, s.index);  // [HV, K, V]
        for (const auto& [c0, c1] : chunks_of(s, p.chunk)) {
            const ChunkInputs c = load_chunk(p, s.batch, c0, c1);
            const ChunkGates gates = chunk_gates(p, c.g, c1 - c0);
            const Wy wy = wy_transform(p, c, gates);
            // the stored chunk state (FLA's h) is what the v_new and output passes read
            const at::Tensor h = round_to(S, p.state);  // [HV, K, V]
            kept.store(s, c0, h);
            const at::Tensor v_new = new_values(p, wy, h);                   // [HV, L, V]
            at::Tensor o = at::bmm(c.qv, h).mul_(gates.decay.unsqueeze(2));  // [HV, L, V]
            // FLA's chunk_fwd_o casts the masked, decayed scores to v's dtype before A·v_new
            const at::Tensor scores =
                round_to(at::bmm(c.qv, c.kv.transpose(1, 2)).mul_(gates.intra), p.in);
            o.baddbmm_(scores, v_new).mul_(p.scale);
            store_rows(o_hl, s.batch, c0, c1, o);
            S = advance(p, S, c, gates, v_new);
        }
        out.ht[s.index].copy_(S);
    });
    out.h = kept.h();
    return out;
}

inline Grads chunk_bwd(const Args& args, const at::Tensor& d_o, const at::Tensor& dht) {
    using namespace detail;
    const Problem p = make_problem(args, /*chunked=*/true);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, HV, V]
    Grads grads;
    const GradViews views = allocate_grads(p, args, grads);
    const float scale = p.scale;

    for_each_sequence(p, [&](const Sequence& s) {
        const auto chunks = chunks_of(s, p.chunk);
        // forward: recompute the stored chunk states h and the new values v_new, which the
        // reverse pass reads chunk by chunk in the contract's dtypes
        std::vector<at::Tensor> h_stored(chunks.size());      // [HV, K, V] state dtype
        std::vector<at::Tensor> v_new_stored(chunks.size());  // [HV, L, V] input dtype
        at::Tensor S = start_state(p, s.index);               // [HV, K, V]
        for (size_t c = 0; c < chunks.size(); ++c) {
            const auto [c0, c1] = chunks[c];
            const ChunkInputs in = load_chunk(p, s.batch, c0, c1);
            const ChunkGates gates = chunk_gates(p, in.g, c1 - c0);
            const Wy wy = wy_transform(p, in, gates);
            h_stored[c] = S.to(p.state);
            const at::Tensor v_new = new_values(p, wy, h_stored[c].to(at::kFloat));
            v_new_stored[c] = v_new.to(p.in);
            S = advance(p, S, in, gates, v_new);
        }

        // reverse: dS = ∂L/∂(state at the end of chunk c), carried in fp32; each chunk reads
        // its stored copy dH in the state dtype
        at::Tensor dS = dht.defined() ? widen(dht[s.index])
                                      : at::zeros({p.HV, p.K, p.V}, at::kFloat);  // [HV, K, V]
        for (size_t c = chunks.size(); c-- > 0;) {
            const auto [c0, c1] = chunks[c];
            const int64_t L = c1 - c0;
            const ChunkInputs in = load_chunk(p, s.batch, c0, c1);
            const ChunkGates gates = chunk_gates(p, in.g, L);
            const Wy wy = wy_transform(p, in, gates);
            const at::Tensor h = h_stored[c].to(at::kFloat);                // [HV, K, V]
            const at::Tensor v_new = v_new_stored[c].to(at::kFloat);        // [HV, L, V]
            const at::Tensor dH = round_to(dS, p.state);                    // [HV, K, V]
            const at::Tensor d_out = load_rows(do_hl, s.batch, c0, c1);     // [HV, L, V]
            const at::Tensor to_end = gates.to_end.unsqueeze(2);            // [HV, L, 1]
            const at::Tensor q_scale = (gates.decay * scale).unsqueeze(2);  // [HV, L, 1]

            // O = scale[diag(e^G) Q h + (Q Kᵀ ⊙ D) V_new] and S' = e^Λ S + Kᵀ(V_new ⊙ e^{Λ−G}):
            // scores kept in fp32 in the backward
            const at::Tensor qk = at::bmm(in.qv, in.kv.transpose(1, 2)).mul_(gates.intra);
            const at::Tensor dov =
                at::bmm(d_out, v_new.transpose(1, 2)).mul_(gates.intra).mul_(scale);  // [HV, L, L]
            const at::Tensor d_vnew =
                at::baddbmm(at::bmm(in.kv, dH).mul_(to_end), qk.transpose(1, 2), d_out, 1.0, scale);
            const at::Tensor dq_inter = at::bmm(d_out, h.transpose(1, 2)).mul_(q_scale);
            const at::Tensor dq = at::baddbmm(dq_inter, dov, in.kv);          // [HV, L, K]
            const at::Tensor dk_intra = at::bmm(dov.transpose(1, 2), in.qv);  // [HV, L, K]
            const at::Tensor dk_inter = at::bmm(v_new, dH.transpose(1, 2)).mul_(to_end);

            // the state entering the chunk: through the output, the decay and v_new = u − w h
            dS = at::baddbmm(dS * gates.last, (in.qv * q_scale).transpose(1, 2), d_out);
            dS.baddbmm_(wy.w.transpose(1, 2), d_vnew, 1.0, -1.0);

            // through w = Ti kb and u = Ti vb (dw = −dv_new hᵀ, du = dv_new)
            const at::Tensor dw = at::bmm(d_vnew, h.transpose(1, 2)).neg_();  // [HV, L, K]
            const at::Tensor dT = at::baddbmm(at::bmm(dw, wy.kb.transpose(1, 2)), d_vnew,
                                              wy.vb.transpose(1, 2));  // [HV, L, L]
            const at::Tensor Tt = wy.Ti.transpose(1, 2);
            const at::Tensor dkb = at::bmm(Tt, dw);               // [HV, L, K]
            const at::Tensor dvb = at::bmm(Tt, d_vnew);           // [HV, L, V]
            const at::Tensor beta_decay = in.beta * gates.decay;  // [HV, L]
            // through Ti = (I + A)⁻¹: dA = −Tiᵀ dT Tiᵀ on the strictly lower part
            const at::Tensor dA = at::bmm(at::bmm(Tt, dT), Tt).neg_().tril_(-1);  // [HV, L, L]
            // A_ij = β_i (k_i·k_j) D_ij: with M = dA ⊙ D, dk += diag(β) M k + Mᵀ diag(β) k
            const at::Tensor M = dA * gates.strict;  // [HV, L, L]
            const at::Tensor kk = at::bmm(in.kv, in.kv.transpose(1, 2));
            const at::Tensor dk_A = at::baddbmm(at::bmm(M, in.kv).mul_(in.beta.unsqueeze(2)),
                                                M.transpose(1, 2), in.kv * in.beta.unsqueeze(2));

            const at::Tensor dk = dk_intra + dk_inter + dkb * beta_decay.unsqueeze(2) + dk_A;
            const at::Tensor dv = dvb * in.beta.unsqueeze(2);  // [HV, L, V]
            const at::Tensor dbeta = (dkb * in.kv).sum(2).mul_(gates.decay) + (dvb * in.v).sum(2) +
                                     (M * kk).sum(2);  // [HV, L]

            if (p.g.defined()) {
                // ∂L/∂G_i: q·dq and −k·dk of the output and state passes (README.md derives
                // it), the exp(G) in kb, the decay inside A, and on the last row the carry
                // exp(Λ)⟨h, dH⟩ + Σ_j k_j·dk_inter_j
                const at::Tensor F = dA * wy.A;  // [HV, L, L]
                at::Tensor dG = (in.qv * dq).sum(2) - (in.kv * (dk_intra + dk_inter)).sum(2) +
                                (dkb * in.kv).sum(2).mul_(beta_decay) + F.sum(2) - F.sum(1);
                const at::Tensor carry = gates.last.view({p.HV}) * (h * dH).sum({1, 2}) +
                                         (in.kv * dk_inter).sum({1, 2});  // [HV]
                dG.select(1, L - 1).add_(carry);
                reverse_cumsum_inplace(dG);
                if (p.gate_in_kernel) {
                    views.dA_log_parts[s.index].add_((dG * in.g).sum(1));
                    const at::Tensor dg_raw = gate_backward(p, in.g_raw, p.A_log.unsqueeze(1),
                                                            p.dt_bias.unsqueeze(1), dG);
                    if (views.ddt_bias_parts.defined())
                        views.ddt_bias_parts[s.index].add_(dg_raw.sum(1));
                    store_rows(views.dg, s.batch, c0, c1, dg_raw);
                } else {
                    store_rows(views.dg, s.batch, c0, c1, dG);
                }
            }
            store_rows(views.dq, s.batch, c0, c1, normalise_backward(in.q, by_key_head(p, dq)));
            store_rows(views.dk, s.batch, c0, c1, normalise_backward(in.k, by_key_head(p, dk)));
            store_rows(views.dv, s.batch, c0, c1, dv);
            store_rows(views.dbeta, s.batch, c0, c1, beta_backward(p, in.beta_raw, dbeta));
        }
        if (p.h0.defined()) grads.dh0[s.index].copy_(dS);
    });
    finish_grads(views, grads);
    return grads;
}

inline Fwd recurrent_fwd(const Args& args) {
    using namespace detail;
    const Problem p = make_problem(args, /*chunked=*/false);
    Fwd out;
    const at::Tensor o_hl = poisoned_hl({p.B, p.T, p.HV, p.V}, p.layout, p.out, out.o);
    out.ht = poisoned({p.N, p.HV, p.K, p.V}, p.state);
    for_each_key_lane(p, [&](const Sequence& s, int64_t h) {
        const KeyLane keys = load_key_lane(p, s, h);
        const float* q = keys.q.x.data_ptr<float>();
        const float* k = keys.k.x.data_ptr<float>();
        std::vector<float> u(p.V);
        for (int64_t r = 0; r < p.group; ++r) {
            const int64_t hv = h * p.group + r;
            const ValueLane lane = load_value_lane(p, s, hv);
            // the state lives in fp32 for the whole sequence
            at::Tensor S = lane_start(p, s.index, hv);            // [K, V]
            at::Tensor o = at::empty({keys.L, p.V}, at::kFloat);  // [L, V]
            float* Sp = S.data_ptr<float>();
            const float* v = lane.v.data_ptr<float>();
            const float* beta = lane.beta.data_ptr<float>();
            const float* a = lane.decay.data_ptr<float>();
            float* op = o.data_ptr<float>();
            for (int64_t t = 0; t < keys.L; ++t)
                step(Sp, k + t * p.K, v + t * p.V, a[t], beta[t], p.K, p.V, u.data(), q + t * p.K,
                     p.scale, op + t * p.V);
            o_hl[s.batch].slice(0, s.begin, s.end).select(1, hv).copy_(o);
            out.ht[s.index][hv].copy_(S);
        }
    });
    return out;
}

inline Grads recurrent_bwd(const Args& args, const at::Tensor& d_o, const at::Tensor& dht) {
    using namespace detail;
    const Problem p = make_problem(args, /*chunked=*/false);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, HV, V]
    Grads grads;
    const GradViews views = allocate_grads(p, args, grads);
    const int64_t K = p.K, V = p.V;

    for_each_key_lane(p, [&](const Sequence& s, int64_t h) {
        const KeyLane keys = load_key_lane(p, s, h);
        const int64_t L = keys.L;
        const float* q = keys.q.x.data_ptr<float>();
        const float* k = keys.k.x.data_ptr<float>();
        // gradients w.r.t. the normalised q̂, k̂, summed over the key head's value heads
        at::Tensor dq = at::zeros({L, K}, at::kFloat);  // [L, K]
        at::Tensor dk = at::zeros({L, K}, at::kFloat);  // [L, K]
        float* dqp = dq.data_ptr<float>();
        float* dkp = dk.data_ptr<float>();
        // the state before every P-th step is kept, so the reverse pass holds O(√L) states
        const int64_t P = std::max<int64_t>(
            1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(L)))));
        const int64_t segments = (L + P - 1) / P;
        at::Tensor checkpoints = at::empty({segments, K, V}, at::kFloat);  // [segments, K, V]
        // entry i is the state before step t0 + i of the segment being walked
        at::Tensor before = at::empty({std::min(P, L), K, V}, at::kFloat);  // [P, K, V]
        std::vector<float> u(V), r(V), du(V), dp(V);

        for (int64_t rep = 0; rep < p.group; ++rep) {
            const int64_t hv = h * p.group + rep;
            const ValueLane lane = load_value_lane(p, s, hv);
            const at::Tensor d_out =
                widen(do_hl[s.batch].slice(0, s.begin, s.end).select(1, hv));  // [L, V]
            const float* v = lane.v.data_ptr<float>();
            const float* beta = lane.beta.data_ptr<float>();
            const float* a = lane.decay.data_ptr<float>();
            const float* dop = d_out.data_ptr<float>();

            // forward: dq̂_t += scale·S_t do_t, keeping the checkpoints
            at::Tensor S = lane_start(p, s.index, hv);  // [K, V]
            float* Sp = S.data_ptr<float>();
            float* ckp = checkpoints.data_ptr<float>();
            for (int64_t t = 0; t < L; ++t) {
                if (t % P == 0) std::copy(Sp, Sp + K * V, ckp + (t / P) * K * V);
                step(Sp, k + t * K, v + t * V, a[t], beta[t], K, V, u.data());
                for (int64_t i = 0; i < K; ++i)
                    dqp[t * K + i] += p.scale * dot(Sp + i * V, dop + t * V, V);
            }

            // reverse: dS = ∂L/∂S_t; per segment, recompute the states before each step from
            // its checkpoint, then walk it backwards
            at::Tensor dS =
                dht.defined() ? widen(dht[s.index][hv]) : at::zeros({K, V}, at::kFloat);  // [K, V]
            at::Tensor dv = at::empty({L, V}, at::kFloat);                                // [L, V]
            at::Tensor dbeta = at::empty({L}, at::kFloat);                                // [L]
            at::Tensor dg = at::empty({L}, at::kFloat);                                   // [L]
            float* dSp = dS.data_ptr<float>();
            float* dvp = dv.data_ptr<float>();
            float* dbp = dbeta.data_ptr<float>();
            float* dgp = dg.data_ptr<float>();
            float* bp = before.data_ptr<float>();
            for (int64_t seg = segments; seg-- > 0;) {
                const int64_t t0 = seg * P, t1 = std::min(t0 + P, L);
                std::copy(ckp + seg * K * V, ckp + (seg + 1) * K * V, bp);
                for (int64_t t = t0; t + 1 < t1; ++t) {
                    float* next = bp + (t - t0 + 1) * K * V;
                    std::copy(bp + (t - t0) * K * V, bp + (t - t0 + 1) * K * V, next);
                    step(next, k + t * K, v + t * V, a[t], beta[t], K, V, u.data());
                }
                for (int64_t t = t1; t-- > t0;) {
                    const float* prev = bp + (t - t0) * K * V;  // S_{t-1}
                    const float* do_t = dop + t * V;
                    const float* kt = k + t * K;
                    const float* vt = v + t * V;
                    // dS_t = dS + scale·q_t do_tᵀ; with it du = dS_tᵀ k_t, and Sᵀ_{t-1} k_t
                    std::fill(u.begin(), u.end(), 0.0f);
                    std::fill(du.begin(), du.end(), 0.0f);
                    for (int64_t i = 0; i < K; ++i) {
                        float* dSi = dSp + i * V;
                        const float* prev_i = prev + i * V;
                        const float sq = p.scale * q[t * K + i];
                        const float ki = kt[i];
                        for (int64_t j = 0; j < V; ++j) {
                            dSi[j] += sq * do_t[j];
                            u[j] += ki * prev_i[j];
                            du[j] += ki * dSi[j];
                        }
                    }
                    // r = v_t − a S_{t-1}ᵀ k_t, u = β r: dv = β du, dβ = du·r, dp = −β du
                    float dbeta_t = 0.0f;
                    for (int64_t j = 0; j < V; ++j) {
                        r[j] = vt[j] - a[t] * u[j];
                        u[j] = beta[t] * r[j];
                        dvp[t * V + j] = beta[t] * du[j];
                        dbeta_t += du[j] * r[j];
                        dp[j] = -beta[t] * du[j];
                    }
                    dbp[t] = dbeta_t;
                    // dk̂_t += dS_t u + S̄ dp; dS̄ = dS_t + k dpᵀ; dg_t = ⟨S̄, dS̄⟩; dS_{t-1} = a dS̄
                    float state_dot = 0.0f;
                    for (int64_t i = 0; i < K; ++i) {
                        float* dSi = dSp + i * V;
                        const float* prev_i = prev + i * V;
                        const float ki = kt[i];
                        dkp[t * K + i] += dot(dSi, u.data(), V) + a[t] * dot(prev_i, dp.data(), V);
                        for (int64_t j = 0; j < V; ++j) dSi[j] += ki * dp[j];
                        state_dot += dot(prev_i, dSi, V);
                        for (int64_t j = 0; j < V; ++j) dSi[j] *= a[t];
                    }
                    dgp[t] = a[t] * state_dot;
                }
            }

            const auto rows = [&](const at::Tensor& x) {
                return x[s.batch].slice(0, s.begin, s.end).select(1, hv);
            };
            rows(views.dv).copy_(dv);
            rows(views.dbeta).copy_(beta_backward(p, lane.beta_raw, dbeta));
            if (p.g.defined()) {
                if (p.gate_in_kernel) {
                    views.dA_log_parts[s.index][hv].copy_((dg * lane.g).sum());
                    const at::Tensor dg_raw =
                        gate_backward(p, lane.g_raw, p.A_log[hv], p.dt_bias[hv], dg);
                    if (views.ddt_bias_parts.defined())
                        views.ddt_bias_parts[s.index][hv].copy_(dg_raw.sum());
                    rows(views.dg).copy_(dg_raw);
                } else {
                    rows(views.dg).copy_(dg);
                }
            }
            if (p.h0.defined()) grads.dh0[s.index][hv].copy_(dS);
        }
        const auto rows = [&](const at::Tensor& x) {
            return x[s.batch].slice(0, s.begin, s.end).select(1, h);
        };
        rows(views.dq).copy_(normalise_backward(keys.q, dq));
        rows(views.dk).copy_(normalise_backward(keys.k, dk));
    });
    finish_grads(views, grads);
    return grads;
}

// ---- precision contract ----

/// The lav dtype of a LibTorch storage type; float32 reads as fp32, never tf32.
inline DType lav_dtype(const Args& a, c10::ScalarType type) {
    const auto d = from_scalar_type(type);
    LAV_CHECK(d.has_value(), a.family, " takes floating dtypes, got ", scalar_type_name(type));
    return *d;
}

/// The contract of `variant` ("chunk" or "recurrent"), `backward` or forward, for the dtypes
/// and options of `a`; the items name every tensor the variant stores, including the
/// observable results by their measured names ("o", "ht", "dq", ..., "dh0").
inline PrecisionContract contract(const Args& a, std::string_view variant, bool backward) {
    const bool chunk = variant == "chunk";
    LAV_CHECK(chunk || variant == "recurrent", a.family, " has no variant '", variant,
              "'; expected chunk or recurrent");
    LAV_CHECK(a.q.defined() && a.beta.defined(), a.family,
              "'s contract needs q and beta to name the input dtypes");
    const DType in = lav_dtype(a, a.q.scalar_type());
    const DType state = lav_dtype(a, a.state_dtype);
    const DType out =
        a.output_dtype == c10::ScalarType::Undefined ? in : lav_dtype(a, a.output_dtype);
    const DType beta = lav_dtype(a, a.beta.scalar_type());
    const DType fp32 = DType::fp32;
    const bool gated = a.g.defined();

    PrecisionContract c;
    c.kernel = std::string(a.family) + "." + std::string(variant) + (backward ? "_bwd" : "_fwd");
    const auto add = [&c](const char* item, DType dtype, const char* note) {
        c.items.push_back({item, dtype, note});
    };

    add("q, k, v", in, "inputs, widened to fp32 on load");
    add("beta", beta,
        a.beta_sigmoid ? (a.allow_neg_eigval ? "raw logits; beta = 2 sigmoid(x) taken in fp32"
                                             : "raw logits; beta = sigmoid(x) taken in fp32")
                       : "per-step beta, widened to fp32");
    if (gated) {
        const DType gate = lav_dtype(a, a.g.scalar_type());
        if (a.gate_in_kernel) {
            add("g", gate, "raw gate; g = -exp(A_log) softplus(x + dt_bias) taken in fp32");
            add("A_log", lav_dtype(a, a.A_log.scalar_type()), "per-head, widened to fp32");
            if (a.dt_bias.defined())
                add("dt_bias", lav_dtype(a, a.dt_bias.scalar_type()), "per-head, widened to fp32");
        } else {
            add("g", gate, "per-step log decay, widened to fp32");
        }
    }
    add("h0", state, "initial state (zeros when absent), widened to fp32 on load");
    add("accumulator", fp32, "every matmul, reduction, exp and the triangular solve");
    if (a.l2norm)
        add("normalised q, k", chunk ? in : fp32,
            chunk ? "x / sqrt(sum x^2 + 1e-6) in fp32, stored (as FLA's l2norm_fwd)"
                  : "x / sqrt(sum x^2 + 1e-6) inlined in fp32, never rounded");
    if (chunk) {
        if (gated) add("gate cumsum", fp32, "chunk-local inclusive cumsum G of the log decay");
        add("kkt A", fp32, "beta_i k_i.k_j (decayed), strictly lower, kept in fp32");
        add("WY inverse", in, "(I + A)^-1 by forward substitution in fp32, then stored");
        add("beta-scaled k, v", in,
            gated ? "k beta exp(G) and v beta, rounded before the WY matmuls"
                  : "k beta and v beta, rounded before the WY matmuls");
        add("w, u", in, "Ti (beta k) and Ti (beta v), stored");
        add("chunk states h", state,
            backward ? "recomputed exactly as the forward stores them; read by the gradients"
                     : "state entering each chunk, stored; the v_new and output passes read it");
        add("carried state", fp32, "state carried from chunk to chunk, rounded only when stored");
        add("v_new", in, "u - w h, stored; the output and state passes read it");
        if (gated) add("decayed v_new", in, "v_new exp(G_last - G) rounded before k^T v_new");
        if (backward)
            add("intra-chunk scores", fp32, "the backward keeps q k^T, d_o v_new^T and dA in fp32");
        else
            add("intra-chunk scores", in, "masked decayed q k^T rounded before A v_new");
    } else {
        add("state", fp32,
            backward ? "fp32 throughout; recomputed from checkpoints every ~sqrt(T) steps"
                     : "fp32 for the whole sequence");
    }
    add("o", out, backward ? "d_o is read in this dtype" : "rounded once from fp32");
    add("ht", state, backward ? "dht is read in this dtype" : "rounded once from the fp32 state");
    if (!backward) return c;

    if (chunk)
        add("chunk state grads dh", state,
            "gradient of each chunk's end state, stored; the carried dS stays fp32");
    add("dq", in, "accumulated in fp32, rounded once");
    add("dk", in, "accumulated in fp32, rounded once");
    add("dv", in, "accumulated in fp32, rounded once");
    add("dbeta", beta,
        a.beta_sigmoid ? "w.r.t. the raw logits, rounded once"
                       : "accumulated in fp32, rounded once");
    if (gated) {
        add("dg", lav_dtype(a, a.g.scalar_type()),
            a.gate_in_kernel ? "w.r.t. the raw gate, rounded once"
                             : (chunk ? "reverse chunk-local cumsum of dG in fp32, rounded once"
                                      : "<exp(g_t) S_{t-1}, dS> in fp32, rounded once"));
        if (a.gate_in_kernel) {
            add("dA_log", lav_dtype(a, a.A_log.scalar_type()), "summed over steps in fp32");
            if (a.dt_bias.defined())
                add("ddt_bias", lav_dtype(a, a.dt_bias.scalar_type()), "summed over steps in fp32");
        }
    }
    if (a.h0.defined()) add("dh0", state, "the fp32 dS at the sequence start, rounded once");
    return c;
}

}  // namespace lav::kernels::delta
