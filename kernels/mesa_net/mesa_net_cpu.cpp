// kernels/mesa_net/mesa_net_cpu.cpp — MesaNet on the CPU through LibTorch: chunk and recurrent
// variants, forward and backward, with FLA's conjugate-gradient solve. Not a reference.
//
// One per-sequence algorithm serves both variants: within a block of L steps starting from
// states (Hkk, Hkv), with G the block-local inclusive cumsum of g, D_ij = exp(G_i − G_j) (j ≤ i)
// and M = D diag(β),
//   Hkk_i p = e^{G_i} Hkk p + Σ_j M_ij k_j (k_j·p),   Hkv_iᵀ x = e^{G_i} Hkvᵀ x + Σ_j M_ij v_j
//   (k_j·x)
// The chunk variant runs blocks of chunk_size steps reading stored (rounded) block states; the
// recurrent variant runs blocks of one step on fp32 states, which is the step-by-step
// recurrence. README.md derives the backward.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "common/cpu/cpu_args.h"
#include "common/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/varlen.h"
#include "mesa_net/mesa_net.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "mesa_net";

using cpu::poisoned;
using cpu::round_to;
using cpu::widen;

/// The eps inside the square root of FLA's l2norm (fla/modules/l2norm.py).
constexpr float kL2NormEps = 1e-6f;
/// The guard FLA adds to both divisions of its conjugate gradient.
constexpr float kCgGuard = 1e-5f;

/// The validated arguments: head_last views and the dtypes of the contract.
struct Problem {
    at::Tensor q, k, v;  // [B, T, H, ·] head_last views
    at::Tensor g, beta;  // [B, T, H]
    at::Tensor lamb;     // [H, K] fp32
    at::Tensor h_kk0, h_kv0;
    std::vector<Sequence> seqs;
    int64_t B = 0, T = 0, H = 0, K = 0, V = 0, N = 0, block = 1, iters = 0;
    bool l2norm = false, chunked = false;
    Layout layout = Layout::head_last;
    c10::ScalarType in = at::kFloat, out = at::kFloat;
    c10::ScalarType state_kk = at::kFloat, state_kv = at::kFloat;  // Hkk's and Hkv's
};

Problem make_problem(const MesaNetArgs& a, bool chunked) {
    Problem p;
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined() && a.g.defined() &&
                  a.beta.defined() && a.lamb.defined(),
              "mesa_net cpu needs q, k, v, g, beta and lamb");
    for (const auto& [x, name] : {std::make_pair(&a.q, "q"), std::make_pair(&a.k, "k"),
                                  std::make_pair(&a.v, "v"), std::make_pair(&a.g, "g"),
                                  std::make_pair(&a.beta, "beta"), std::make_pair(&a.lamb, "lamb")})
        cpu::check_float_cpu(kFamily, *x, name);
    LAV_CHECK(a.q.dim() == 4 && a.k.dim() == 4 && a.v.dim() == 4,
              "mesa_net cpu: q, k, v must be 4-d");
    p.in = a.q.scalar_type();
    LAV_CHECK(a.k.scalar_type() == p.in && a.v.scalar_type() == p.in,
              "mesa_net cpu: q, k and v must share one dtype");
    p.layout = a.layout;
    p.q = to_head_last(a.q, a.layout);
    p.k = to_head_last(a.k, a.layout);
    p.v = to_head_last(a.v, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    p.V = p.v.size(3);
    LAV_CHECK(p.H > 0 && p.K > 0 && p.V > 0, "mesa_net cpu: H, K and V must be positive");
    LAV_CHECK(p.k.sizes() == p.q.sizes(), "mesa_net cpu: k must have q's shape, got ", a.k.sizes());
    LAV_CHECK(p.v.size(0) == p.B && p.v.size(1) == p.T && p.v.size(2) == p.H,
              "mesa_net cpu: v must agree with q in B, T and H, got ", a.v.sizes());
    p.g = to_head_last(a.g, a.layout);
    p.beta = to_head_last(a.beta, a.layout);
    LAV_CHECK(p.g.sizes() == at::IntArrayRef({p.B, p.T, p.H}) && p.beta.sizes() == p.g.sizes(),
              "mesa_net cpu: g and beta must be [B, T, H] in q's layout, got ", a.g.sizes(),
              " and ", a.beta.sizes());
    LAV_CHECK(a.lamb.sizes() == at::IntArrayRef({p.H, p.K}),
              "mesa_net cpu: lamb must be [H, K],"
              " got ",
              a.lamb.sizes());
    p.lamb = widen(a.lamb);
    const std::vector<int64_t> cu = cpu::cu_seqlens_offsets(kFamily, a.cu_seqlens);
    p.seqs = sequences(p.B, p.T, cu);
    p.N = num_sequences(p.B, cu);
    if (a.h_kk0.defined()) {
        cpu::check_shape(kFamily, a.h_kk0, "h_kk0", "[N, H, K, K]", {p.N, p.H, p.K, p.K});
        p.h_kk0 = a.h_kk0;
    }
    if (a.h_kv0.defined()) {
        cpu::check_shape(kFamily, a.h_kv0, "h_kv0", "[N, H, K, V]", {p.N, p.H, p.K, p.V});
        p.h_kv0 = a.h_kv0;
    }
    p.state_kk = cpu::checked_state_dtype(kFamily, a.kk_state());
    p.state_kv = cpu::checked_state_dtype(kFamily, a.kv_state());
    p.out = cpu::checked_output_dtype(kFamily, a.output_dtype, p.in);
    LAV_CHECK(a.max_cg_iterations >= 0, "mesa_net cpu: max_cg_iterations must be >= 0");
    p.iters = a.max_cg_iterations == 0 ? p.K : a.max_cg_iterations;
    p.l2norm = a.use_qk_l2norm_in_kernel;
    p.chunked = chunked;
    if (chunked) p.block = cpu::checked_chunk_size(kFamily, a.chunk_size);
    return p;
}

/// One block's inputs for every head, widened: [H, L, ·] and [H, L].
struct Block {
    at::Tensor q, k;    // [H, L, K] as the recurrence reads them (normalised when asked)
    at::Tensor q_rstd;  // [H, L, 1]; with the norm
    at::Tensor k_rstd;  // [H, L, 1]; with the norm
    at::Tensor v;       // [H, L, V]
    at::Tensor beta;    // [H, L]
    at::Tensor decay;   // [H, L] exp(G_i)
    at::Tensor to_end;  // [H, L] exp(G_last − G_i)
    at::Tensor last;    // [H, 1, 1] exp(G_last)
    at::Tensor D;       // [H, L, L] exp(G_i − G_j) for j ≤ i, else 0
    at::Tensor M;       // [H, L, L] D diag(β)
    at::Tensor kb;      // [H, L, K] β ⊙ k
};

at::Tensor load(const at::Tensor& x_hl, int64_t b, int64_t c0, int64_t c1) {
    return widen(x_hl[b].slice(0, c0, c1).transpose(0, 1));
}

/// x · rstd with rstd = 1/√(Σ x² + eps); the chunk variant stores the normalised rows in the
/// input dtype (FLA's l2norm_fwd writes a half-precision copy), the recurrent one keeps fp32.
std::pair<at::Tensor, at::Tensor> normalise(const Problem& p, const at::Tensor& x) {
    if (!p.l2norm) return {x, at::Tensor()};
    const at::Tensor rstd = (x.square().sum(-1, /*keepdim=*/true) + kL2NormEps).rsqrt();
    return {p.chunked ? round_to(x * rstd, p.in) : x * rstd, rstd};
}

Block load_block(const Problem& p, int64_t b, int64_t c0, int64_t c1) {
    Block blk;
    const int64_t L = c1 - c0;
    std::tie(blk.q, blk.q_rstd) = normalise(p, load(p.q, b, c0, c1));
    std::tie(blk.k, blk.k_rstd) = normalise(p, load(p.k, b, c0, c1));
    blk.v = load(p.v, b, c0, c1);
    blk.beta = widen(p.beta[b].slice(0, c0, c1).t());
    const at::Tensor g = widen(p.g[b].slice(0, c0, c1).t());  // [H, L]
    // a running fp32 sum: at::cumsum accumulates fp32 in double on the CPU
    at::Tensor G = at::empty({p.H, L}, at::kFloat);
    const float* gp = g.data_ptr<float>();
    float* Gp = G.data_ptr<float>();
    for (int64_t h = 0; h < p.H; ++h) {
        float acc = 0.0f;
        for (int64_t i = 0; i < L; ++i) Gp[h * L + i] = acc += gp[h * L + i];
    }
    const at::Tensor G_last = G.narrow(1, L - 1, 1);  // [H, 1]
    blk.decay = G.exp();
    blk.to_end = (G_last - G).exp();
    blk.last = G_last.exp().view({p.H, 1, 1});
    // mask before exp: above the diagonal G_i − G_j > 0 can overflow, and inf·0 is NaN
    const at::Tensor above = at::ones({L, L}, at::kBool).triu(1);
    blk.D = (G.unsqueeze(2) - G.unsqueeze(1))
                .masked_fill_(above, -std::numeric_limits<float>::infinity())
                .exp_();
    blk.M = blk.D * blk.beta.unsqueeze(1);
    blk.kb = blk.k * blk.beta.unsqueeze(2);
    return blk;
}

/// Rows of A_i p_i (or A_iᵀ p_i) for every step i of the block: A_i = Hkk_i + diag(λ).
at::Tensor apply_system(const Problem& p, const Block& blk, const at::Tensor& hkk,
                        const at::Tensor& P, bool transposed) {
    const at::Tensor inter = at::bmm(P, transposed ? hkk : hkk.transpose(1, 2));
    const at::Tensor intra = at::bmm(at::bmm(P, blk.k.transpose(1, 2)).mul_(blk.M), blk.k);
    return inter.mul_(blk.decay.unsqueeze(2)).add_(intra).add_(P * p.lamb.unsqueeze(1));
}

/// FLA's conjugate gradient for every row at once: x₀ = 0, r = b, then `iters` steps with
/// α = δ / (pᵀAp + 1e-5) and the direction update δ' / (δ + 1e-5).
at::Tensor conjugate_gradient(const Problem& p, const Block& blk, const at::Tensor& hkk,
                              const at::Tensor& b, bool transposed) {
    at::Tensor x = at::zeros_like(b);
    at::Tensor r = b.clone();
    at::Tensor dir = b.clone();
    at::Tensor delta = r.square().sum(2, /*keepdim=*/true);  // [H, L, 1]
    for (int64_t it = 0; it < p.iters; ++it) {
        const at::Tensor Ap = apply_system(p, blk, hkk, dir, transposed);
        const at::Tensor alpha = delta / ((dir * Ap).sum(2, /*keepdim=*/true) + kCgGuard);
        x.add_(alpha * dir);
        r.sub_(alpha * Ap);
        const at::Tensor delta_new = r.square().sum(2, /*keepdim=*/true);
        dir = r + (delta_new / (delta + kCgGuard)) * dir;
        delta = delta_new;
    }
    return x;
}

/// Both states advanced over the block: H' = e^{G_last} H + (β e^{G_last − G} ⊙ K)ᵀ (K or V).
void advance(const Block& blk, at::Tensor& kk, at::Tensor& kv) {
    const at::Tensor kd = (blk.kb * blk.to_end.unsqueeze(2)).transpose(1, 2);  // [H, K, L]
    kk = at::baddbmm(kk * blk.last, kd, blk.k);
    kv = at::baddbmm(kv * blk.last, kd, blk.v);
}

/// A block state as the solve and output passes read it: rounded to its state dtype `dtype` by
/// the chunk variant (its stored chunk states), fp32 as it is in the recurrent one.
at::Tensor stored(const Problem& p, const at::Tensor& S, c10::ScalarType dtype) {
    return p.chunked ? round_to(S, dtype) : S;
}

std::vector<std::pair<int64_t, int64_t>> blocks_of(const Problem& p, const Sequence& s) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c0 = s.begin; c0 < s.end; c0 += p.block)
        out.emplace_back(c0, std::min(c0 + p.block, s.end));
    return out;
}

at::Tensor start_state(const at::Tensor& h0, int64_t n, at::IntArrayRef sizes) {
    return h0.defined() ? widen(h0[n]) : at::zeros(sizes, at::kFloat);
}

at::Tensor poisoned_hl(std::vector<int64_t> hl, Layout layout, c10::ScalarType dtype,
                       at::Tensor& in_layout) {
    if (layout == Layout::head_first) std::swap(hl[1], hl[2]);
    in_layout = poisoned(hl, dtype);
    return to_head_last(in_layout, layout);
}

void store(const at::Tensor& dst_hl, int64_t b, int64_t c0, int64_t c1, const at::Tensor& x) {
    dst_hl[b].slice(0, c0, c1).copy_(x.transpose(0, 1));
}

/// dx from dx̂ through the norm: (dx̂ − (dx̂·x̂) x̂) · rstd; dx̂ without it.
at::Tensor normalise_backward(const at::Tensor& xn, const at::Tensor& rstd, const at::Tensor& dy) {
    if (!rstd.defined()) return dy;
    return (dy - (dy * xn).sum(-1, /*keepdim=*/true) * xn) * rstd;
}

/// dG_t ← Σ_{i ≥ t} dG_i along each row of [H, L], in place: a reverse running fp32 sum.
void reverse_cumsum_inplace(at::Tensor& x) {
    const int64_t rows = x.size(0), L = x.size(1);
    float* d = x.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (int64_t i = L; i-- > 0;) d[r * L + i] = acc += d[r * L + i];
    }
}

MesaNetFwd forward(const MesaNetArgs& args, bool chunked) {
    const Problem p = make_problem(args, chunked);
    MesaNetFwd out;
    const at::Tensor o_hl = poisoned_hl({p.B, p.T, p.H, p.V}, p.layout, p.out, out.o);
    out.ht_kk = poisoned({p.N, p.H, p.K, p.K}, p.state_kk);
    out.ht_kv = poisoned({p.N, p.H, p.K, p.V}, p.state_kv);
    cpu::for_each_lane(p.seqs, 1, [&](const Sequence& s, int64_t) {
        // the carried states stay fp32; only their stored copies are rounded
        at::Tensor kk = start_state(p.h_kk0, s.index, {p.H, p.K, p.K});  // [H, K, K]
        at::Tensor kv = start_state(p.h_kv0, s.index, {p.H, p.K, p.V});  // [H, K, V]
        for (const auto& [c0, c1] : blocks_of(p, s)) {
            const Block blk = load_block(p, s.batch, c0, c1);
            const at::Tensor hkk = stored(p, kk, p.state_kk), hkv = stored(p, kv, p.state_kv);
            // advance first: the output at step i reads the states after it
            const at::Tensor x = conjugate_gradient(p, blk, hkk, blk.q, false);  // [H, L, K]
            at::Tensor o = at::bmm(x, hkv).mul_(blk.decay.unsqueeze(2));         // [H, L, V]
            o.baddbmm_(at::bmm(x, blk.k.transpose(1, 2)).mul_(blk.M), blk.v);
            store(o_hl, s.batch, c0, c1, o);
            advance(blk, kk, kv);
        }
        out.ht_kk[s.index].copy_(kk);
        out.ht_kv[s.index].copy_(kv);
    });
    return out;
}

MesaNetGrads backward(const MesaNetArgs& args, const at::Tensor& d_o, const at::Tensor& dht_kk,
                      const at::Tensor& dht_kv, bool chunked) {
    const Problem p = make_problem(args, chunked);
    cpu::check_d_o(kFamily, d_o, args.v.sizes());
    if (dht_kk.defined())
        LAV_CHECK(dht_kk.sizes() == at::IntArrayRef({p.N, p.H, p.K, p.K}),
                  "mesa_net cpu: dht_kk must be [N, H, K, K]");
    if (dht_kv.defined())
        LAV_CHECK(dht_kv.sizes() == at::IntArrayRef({p.N, p.H, p.K, p.V}),
                  "mesa_net cpu: dht_kv must be [N, H, K, V]");
    const at::Tensor do_hl = to_head_last(d_o, p.layout);
    MesaNetGrads grads;
    const at::Tensor dq_hl = poisoned_hl({p.B, p.T, p.H, p.K}, p.layout, p.in, grads.dq);
    const at::Tensor dk_hl = poisoned_hl({p.B, p.T, p.H, p.K}, p.layout, p.in, grads.dk);
    const at::Tensor dv_hl = poisoned_hl({p.B, p.T, p.H, p.V}, p.layout, p.in, grads.dv);
    const at::Tensor dg_hl = poisoned_hl({p.B, p.T, p.H}, p.layout, args.g.scalar_type(), grads.dg);
    const at::Tensor db_hl =
        poisoned_hl({p.B, p.T, p.H}, p.layout, args.beta.scalar_type(), grads.dbeta);
    if (p.h_kk0.defined()) grads.dh_kk0 = poisoned({p.N, p.H, p.K, p.K}, p.state_kk);
    if (p.h_kv0.defined()) grads.dh_kv0 = poisoned({p.N, p.H, p.K, p.V}, p.state_kv);
    // per-sequence parts of dλ, summed in sequence order at the end (schedule-independent)
    at::Tensor dlamb_parts = at::zeros({p.N, p.H, p.K}, at::kFloat);

    cpu::for_each_lane(p.seqs, 1, [&](const Sequence& s, int64_t) {
        const auto blocks = blocks_of(p, s);
        const int64_t nb = static_cast<int64_t>(blocks.size());
        // the chunk variant keeps every chunk's entering state, as FLA does (O(T / chunk));
        // the recurrent one keeps one every ⌈√T⌉ steps and recomputes the rest per segment
        int64_t P = 1;
        if (!p.chunked)
            while (P * P < nb) ++P;
        std::vector<at::Tensor> ck_kk, ck_kv;  // fp32 states entering blocks 0, P, 2P, ...
        at::Tensor kk = start_state(p.h_kk0, s.index, {p.H, p.K, p.K});
        at::Tensor kv = start_state(p.h_kv0, s.index, {p.H, p.K, p.V});
        for (int64_t c = 0; c < nb; ++c) {
            if (c % P == 0) {
                ck_kk.push_back(kk);
                ck_kv.push_back(kv);
            }
            advance(load_block(p, s.batch, blocks[c].first, blocks[c].second), kk, kv);
        }
        // reverse: dP = ∂L/∂Hkk and dQ = ∂L/∂Hkv at the end of the block, carried in fp32
        at::Tensor dP = start_state(dht_kk, s.index, {p.H, p.K, p.K});  // [H, K, K]
        at::Tensor dQ = start_state(dht_kv, s.index, {p.H, p.K, p.V});  // [H, K, V]
        for (int64_t seg = (nb + P - 1) / P; seg-- > 0;) {
            const int64_t b0 = seg * P, b1 = std::min(b0 + P, nb);
            // the segment's stored block states, and the fp32 states after each block (the
            // gate gradient's carry reads them)
            std::vector<at::Tensor> h_kk, h_kv, end_kk, end_kv;
            kk = ck_kk[seg];
            kv = ck_kv[seg];
            for (int64_t c = b0; c < b1; ++c) {
                h_kk.push_back(stored(p, kk, p.state_kk));
                h_kv.push_back(stored(p, kv, p.state_kv));
                advance(load_block(p, s.batch, blocks[c].first, blocks[c].second), kk, kv);
                end_kk.push_back(kk);
                end_kv.push_back(kv);
            }
            for (int64_t c = b1; c-- > b0;) {
                const auto [c0, c1] = blocks[c];
                const int64_t L = c1 - c0;
                const Block blk = load_block(p, s.batch, c0, c1);
                const at::Tensor& hkk = h_kk[c - b0];
                const at::Tensor& hkv = h_kv[c - b0];
                const at::Tensor dO = load(do_hl, s.batch, c0, c1);                  // [H, L, V]
                const at::Tensor decay = blk.decay.unsqueeze(2);                     // [H, L, 1]
                const at::Tensor to_end = blk.to_end.unsqueeze(2);                   // [H, L, 1]
                const at::Tensor x = conjugate_gradient(p, blk, hkk, blk.q, false);  // [H, L, K]
                // ξ_i = Hkv_i d_o_i, and y_i = A_i⁻ᵀ ξ_i: dq̂ = y, ∂L/∂Hkk_i = −y xᵀ
                const at::Tensor dov = at::bmm(dO, blk.v.transpose(1, 2));  // [H, L, L] d_o_i·v_j
                const at::Tensor xi =
                    at::bmm(dO, hkv.transpose(1, 2)).mul_(decay).baddbmm_(dov * blk.M, blk.k);
                const at::Tensor y = conjugate_gradient(p, blk, hkk, xi, true);  // [H, L, K]
                dlamb_parts[s.index].sub_((y * x).sum(1));
                const at::Tensor ny = -y;

                // Hkv: a linear state with query x, key βk, value v and output gradient d_o
                const at::Tensor xkb = at::bmm(x, blk.kb.transpose(1, 2)).mul_(blk.D);  // x_i·kb_j
                const at::Tensor dkb_kv =
                    at::bmm((dov * blk.D).transpose(1, 2), x)
                        .add_(at::bmm(blk.v, dQ.transpose(1, 2)).mul_(to_end));
                const at::Tensor dv = at::bmm(xkb.transpose(1, 2), dO)
                                          .add_(at::bmm(blk.kb, dQ).mul_(to_end));  // [H, L, V]
                at::Tensor dG = (x * xi).sum(2) - (blk.kb * dkb_kv).sum(2);         // [H, L]
                // Hkk: query −y, key βk, value k and output gradient x (∂L/∂Hkk_i = −y_i x_iᵀ)
                const at::Tensor xk = at::bmm(x, blk.k.transpose(1, 2)).mul_(blk.D);  // x_i·k_j
                const at::Tensor hx =
                    at::bmm(x, hkk.transpose(1, 2)).mul_(decay).baddbmm_(xk, blk.kb);  // Hkk_i x_i
                const at::Tensor dkb_kk =
                    at::bmm(xk.transpose(1, 2), ny)
                        .add_(at::bmm(blk.k, dP.transpose(1, 2)).mul_(to_end));
                const at::Tensor ykb = at::bmm(ny, blk.kb.transpose(1, 2)).mul_(blk.D);
                const at::Tensor dk_value =
                    at::bmm(ykb.transpose(1, 2), x).add_(at::bmm(blk.kb, dP).mul_(to_end));
                dG.add_((ny * hx).sum(2)).sub_((blk.kb * dkb_kk).sum(2));
                // the states after the block carry the earlier steps' decay
                dG.select(1, L - 1)
                    .add_((end_kk[c - b0] * dP).sum({1, 2}))
                    .add_((end_kv[c - b0] * dQ).sum({1, 2}));
                reverse_cumsum_inplace(dG);

                const at::Tensor dkb = dkb_kv + dkb_kk;  // [H, L, K]
                const at::Tensor dk = dkb * blk.beta.unsqueeze(2) + dk_value;
                const at::Tensor dbeta = (dkb * blk.k).sum(2);
                // to the block's start
                const at::Tensor xd = (x * decay).transpose(1, 2);  // [H, K, L]
                dQ = at::baddbmm(dQ * blk.last, xd, dO);
                dP = at::baddbmm(dP * blk.last, (ny * decay).transpose(1, 2), x);

                store(dq_hl, s.batch, c0, c1, normalise_backward(blk.q, blk.q_rstd, y));
                store(dk_hl, s.batch, c0, c1, normalise_backward(blk.k, blk.k_rstd, dk));
                store(dv_hl, s.batch, c0, c1, dv);
                store(dg_hl, s.batch, c0, c1, dG);
                store(db_hl, s.batch, c0, c1, dbeta);
            }
        }
        if (grads.dh_kk0.defined()) grads.dh_kk0[s.index].copy_(dP);
        if (grads.dh_kv0.defined()) grads.dh_kv0[s.index].copy_(dQ);
    });
    grads.dlamb = at::empty(args.lamb.sizes(), args.lamb.options()).copy_(dlamb_parts.sum(0));
    return grads;
}

}  // namespace

MesaNetFwd mesa_net_chunk_fwd_cpu(const MesaNetArgs& args) { return forward(args, true); }

MesaNetGrads mesa_net_chunk_bwd_cpu(const MesaNetArgs& args, const at::Tensor& d_o,
                                    const at::Tensor& dht_kk, const at::Tensor& dht_kv) {
    return backward(args, d_o, dht_kk, dht_kv, true);
}

MesaNetFwd mesa_net_recurrent_fwd_cpu(const MesaNetArgs& args) { return forward(args, false); }

MesaNetGrads mesa_net_recurrent_bwd_cpu(const MesaNetArgs& args, const at::Tensor& d_o,
                                        const at::Tensor& dht_kk, const at::Tensor& dht_kv) {
    return backward(args, d_o, dht_kk, dht_kv, false);
}

}  // namespace lav::kernels
