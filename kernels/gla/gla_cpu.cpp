// kernels/gla/gla_cpu.cpp — gla on the CPU through LibTorch: chunk and recurrent variants, forward
// and backward, rounding exactly where the precision contract says. Not a reference: it
// computes in fp32 like the GPU kernels it stands in for (see README.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "common/cpu/cpu_args.h"
#include "common/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/varlen.h"
#include "gla/gla.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "gla";

using cpu::poisoned;
using cpu::round_to;
using cpu::widen;

// the intra-chunk scores are formed in sub-chunks of 16 rows, as FLA's chunk_gla does
constexpr int64_t kSubChunk = 16;

// ---- arguments ----

/// The validated arguments: head_last views of the inputs and the dtypes of the contract.
struct Problem {
    at::Tensor q, k;  // [B, T, H, K] head_last views of the caller's tensors
    at::Tensor v;     // [B, T, H, V]
    at::Tensor g;     // [B, T, H, K] in the gate dtype
    at::Tensor h0;    // [N, H, K, V] in its own dtype; undefined: zeros
    std::vector<Sequence> seqs;
    int64_t B = 0, T = 0, H = 0, K = 0, V = 0, N = 0;
    int64_t chunk = 0;
    float scale = 0.0f;
    c10::ScalarType in = c10::ScalarType::Float;
    c10::ScalarType state = c10::ScalarType::Float;
    c10::ScalarType out = c10::ScalarType::Float;
};

void check_state_shape(const at::Tensor& x, const char* name, const Problem& p) {
    cpu::check_shape(kFamily, x, name, "[N, H, K, V]", {p.N, p.H, p.K, p.V});
}

Problem make_problem(const GlaArgs& a, bool chunked) {
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined() && a.g.defined(),
              "gla cpu needs q, k, v and g");
    cpu::check_float_cpu(kFamily, a.q, "q");
    cpu::check_float_cpu(kFamily, a.k, "k");
    cpu::check_float_cpu(kFamily, a.v, "v");
    cpu::check_float_cpu(kFamily, a.g, "g");
    LAV_CHECK(a.q.dim() == 4 && a.k.dim() == 4 && a.v.dim() == 4 && a.g.dim() == 4,
              "gla cpu: q, k, v and g must be 4-d, got ", a.q.dim(), ", ", a.k.dim(), ", ",
              a.v.dim(), ", ", a.g.dim());
    Problem p;
    p.in = a.q.scalar_type();
    LAV_CHECK(a.k.scalar_type() == p.in && a.v.scalar_type() == p.in,
              "gla cpu: q, k and v must share one dtype, got ", scalar_type_name(p.in), ", ",
              scalar_type_name(a.k.scalar_type()), ", ", scalar_type_name(a.v.scalar_type()));
    p.q = to_head_last(a.q, a.layout);
    p.k = to_head_last(a.k, a.layout);
    p.v = to_head_last(a.v, a.layout);
    p.g = to_head_last(a.g, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    p.V = p.v.size(3);
    LAV_CHECK(p.K > 0 && p.V > 0 && p.H > 0, "gla cpu: H, K and V must be positive");
    LAV_CHECK(p.k.sizes() == p.q.sizes(), "gla cpu: k must have q's shape ", a.q.sizes(), ", got ",
              a.k.sizes());
    LAV_CHECK(p.g.sizes() == p.q.sizes(), "gla cpu: g must have q's shape ", a.q.sizes(), ", got ",
              a.g.sizes());
    LAV_CHECK(p.v.size(0) == p.B && p.v.size(1) == p.T && p.v.size(2) == p.H,
              "gla cpu: v must agree with q in B, T and H, got ", a.v.sizes(), " and ",
              a.q.sizes());

    const std::vector<int64_t> cu = cpu::cu_seqlens_offsets(kFamily, a.cu_seqlens);
    p.seqs = sequences(p.B, p.T, cu);
    p.N = num_sequences(p.B, cu);

    // FLA's chunk_gla asserts an fp32 h0; here h0 may have any kernel dtype, widened on load
    if (a.h0.defined()) {
        check_state_shape(a.h0, "h0", p);
        p.h0 = a.h0;
    }
    p.state = cpu::checked_state_dtype(kFamily, a.state_dtype);
    p.out = cpu::checked_output_dtype(kFamily, a.output_dtype, p.in);
    if (chunked) p.chunk = cpu::checked_chunk_size(kFamily, a.chunk_size);
    p.scale = cpu::checked_scale(kFamily, a.scale, p.K);
    return p;
}

/// d_o as a head_last view, checked against o's shape; dht checked against the state shape.
at::Tensor check_cotangents(const Problem& p, const GlaArgs& a, const at::Tensor& d_o,
                            const at::Tensor& dht) {
    cpu::check_d_o(kFamily, d_o, a.v.sizes());
    if (dht.defined()) check_state_shape(dht, "dht", p);
    return to_head_last(d_o, a.layout);
}

// ---- tensor helpers ----

/// Rows [c0, c1) of one head in batch row b of a head_last tensor, as a [1, L, D] fp32 copy:
/// one head per task, kept 3-d so that every product below is a batched one.
at::Tensor load_rows(const at::Tensor& x_hl, int64_t b, int64_t head, int64_t c0, int64_t c1) {
    return widen(x_hl[b].slice(0, c0, c1).select(1, head).unsqueeze(0));
}

/// Writes [1, L, D] fp32 rows into one head of a head_last view, rounding once to its dtype.
void store_rows(const at::Tensor& dst_hl, int64_t b, int64_t head, int64_t c0, int64_t c1,
                const at::Tensor& x) {
    dst_hl[b].slice(0, c0, c1).select(1, head).copy_(x[0]);
}

/// The state a (sequence, head) starts from, in fp32: h0 widened from whatever dtype it has,
/// or zeros.
at::Tensor start_state(const Problem& p, int64_t n, int64_t head) {
    return p.h0.defined() ? widen(p.h0[n][head].unsqueeze(0))
                          : at::zeros({1, p.K, p.V}, at::kFloat);  // [1, K, V]
}

/// Runs `lane_fn(sequence, head)` over every (sequence, head) pair, in parallel; each pair
/// writes disjoint elements of the results. The ATen ops inside a task run on its thread.
template <typename F>
void for_each_lane(const Problem& p, const F& lane_fn) {
    cpu::for_each_lane(p.seqs, p.H, lane_fn);
}

// ---- chunk variant ----

/// The decay factors of one chunk, all from the fp32 chunk-local cumsum G.
struct ChunkGates {
    at::Tensor G;       // [1, L, K] inclusive cumsum of g within the chunk, per key dimension
    at::Tensor decay;   // [1, L, K] exp(G_i)
    at::Tensor to_end;  // [1, L, K] exp(Λ − G_i), Λ = G_{L-1}
    at::Tensor last;    // [1, K, 1] exp(Λ)
};

ChunkGates chunk_gates(const Problem& p, int64_t b, int64_t head, int64_t c0, int64_t c1) {
    const int64_t L = c1 - c0, K = p.K;
    ChunkGates gates;
    gates.G = load_rows(p.g, b, head, c0, c1);  // [1, L, K]
    float* G = gates.G.data_ptr<float>();
    // a running fp32 sum in place: at::cumsum accumulates fp32 in double on the CPU
    for (int64_t i = 1; i < L; ++i)
        for (int64_t d = 0; d < K; ++d) G[i * K + d] += G[(i - 1) * K + d];
    const at::Tensor G_last = gates.G.narrow(1, L - 1, 1);  // [1, 1, K]
    gates.decay = gates.G.exp();
    gates.to_end = (G_last - gates.G).exp();
    gates.last = G_last.exp().transpose(1, 2);
    return gates;
}

/// [1, n, n, K] exp(G_i − G_j) for j ≤ i inside one sub-chunk, else 0. Masked before the exp:
/// above the diagonal G_i − G_j > 0 can overflow, and inf·0 is NaN.
at::Tensor sub_chunk_decay(const at::Tensor& Gs) {
    const int64_t n = Gs.size(1);
    const at::Tensor above = at::ones({n, n}, at::kBool).triu(1).view({1, n, n, 1});
    return (Gs.unsqueeze(2) - Gs.unsqueeze(1))
        .masked_fill_(above, -std::numeric_limits<float>::infinity())
        .exp_();
}

/// The factors of the sub-chunk starting at row s0 against every earlier row of the chunk,
/// taken at the sub-chunk's first row n = s0: exp(G_i − G_j) = exp(G_i − G_n)·exp(G_n − G_j)
/// with i ≥ n > j, so with g ≤ 0 both factors are at most 1 and neither overflows.
struct OffDiagonal {
    at::Tensor rows;     // [1, n, K] exp(G_i − G_n), i in the sub-chunk
    at::Tensor earlier;  // [1, s0, K] exp(G_n − G_j), j before the sub-chunk
};

OffDiagonal off_diagonal(const at::Tensor& G, int64_t s0, int64_t n) {
    const at::Tensor Gn = G.narrow(1, s0, 1);  // [1, 1, K]
    return {(G.narrow(1, s0, n) - Gn).exp(), (Gn - G.narrow(1, 0, s0)).exp()};
}

/// A[i, j] = Σ_d q_id k_jd exp(G_id − G_jd) for j ≤ i, else 0, in fp32 and without the scale:
/// elementwise inside each 16-row sub-chunk, one matmul per sub-chunk against the rows before.
at::Tensor intra_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& G) {
    const int64_t L = q.size(1);
    at::Tensor A = at::zeros({1, L, L}, at::kFloat);  // [1, L, L]
    for (int64_t s0 = 0; s0 < L; s0 += kSubChunk) {
        const int64_t n = std::min(kSubChunk, L - s0);
        const at::Tensor qs = q.narrow(1, s0, n);  // [1, n, K]
        const at::Tensor ks = k.narrow(1, s0, n);  // [1, n, K]
        const at::Tensor D = sub_chunk_decay(G.narrow(1, s0, n));
        A.narrow(1, s0, n).narrow(2, s0, n).copy_(
            (D.mul_(qs.unsqueeze(2)).mul_(ks.unsqueeze(1))).sum(3));
        if (s0 == 0) continue;
        const OffDiagonal f = off_diagonal(G, s0, n);
        const at::Tensor k_before = k.narrow(1, 0, s0) * f.earlier;  // [1, s0, K]
        A.narrow(1, s0, n).narrow(2, 0, s0).copy_(at::bmm(qs * f.rows, k_before.transpose(1, 2)));
    }
    return A;
}

/// The gradients through the scores: given dA ([1, L, L], zero above the diagonal), adds
/// dq_i += Σ_{j≤i} dA_ij k_j ⊙ exp(G_i − G_j) and dk_j += Σ_{i≥j} dA_ij q_i ⊙ exp(G_i − G_j),
/// by the same sub-chunks as intra_scores.
void add_intra_grads(const at::Tensor& dA, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& G, at::Tensor& dq, at::Tensor& dk) {
    const int64_t L = q.size(1);
    for (int64_t s0 = 0; s0 < L; s0 += kSubChunk) {
        const int64_t n = std::min(kSubChunk, L - s0);
        const at::Tensor qs = q.narrow(1, s0, n);  // [1, n, K]
        const at::Tensor ks = k.narrow(1, s0, n);  // [1, n, K]
        const at::Tensor D =
            sub_chunk_decay(G.narrow(1, s0, n))
                .mul_(dA.narrow(1, s0, n).narrow(2, s0, n).unsqueeze(3));  // [1, n, n, K]
        dq.narrow(1, s0, n).add_((D * ks.unsqueeze(1)).sum(2));
        dk.narrow(1, s0, n).add_((D.mul_(qs.unsqueeze(2))).sum(1));
        if (s0 == 0) continue;
        const OffDiagonal f = off_diagonal(G, s0, n);
        const at::Tensor dA_before = dA.narrow(1, s0, n).narrow(2, 0, s0);  // [1, n, s0]
        const at::Tensor k_before = k.narrow(1, 0, s0) * f.earlier;         // [1, s0, K]
        dq.narrow(1, s0, n).add_(at::bmm(dA_before, k_before).mul_(f.rows));
        dk.narrow(1, 0, s0).add_(at::bmm(dA_before.transpose(1, 2), qs * f.rows).mul_(f.earlier));
    }
}

/// One chunk of the state recurrence: S ← diag(exp(Λ))·S + round_in(K ⊙ exp(Λ − G))ᵀ V.
at::Tensor advance(const at::Tensor& S, const at::Tensor& k, const at::Tensor& v,
                   const ChunkGates& gates, c10::ScalarType in) {
    // FLA's chunk_fwd_h rounds the decayed k to the input dtype before the matmul
    const at::Tensor k_decayed = round_to(k * gates.to_end, in);       // [1, L, K]
    return at::baddbmm(S * gates.last, k_decayed.transpose(1, 2), v);  // [1, K, V]
}

/// Every chunk of a sequence as [begin, end) row ranges.
std::vector<std::pair<int64_t, int64_t>> chunks_of(const Sequence& s, int64_t C) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c0 = s.begin; c0 < s.end; c0 += C) out.emplace_back(c0, std::min(c0 + C, s.end));
    return out;
}

}  // namespace

GlaFwd gla_chunk_fwd_cpu(const GlaArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/true);
    GlaFwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    const cpu::ChunkStateStore kept(args.keep_chunk_states, p.seqs, p.chunk, {p.H, p.K, p.V},
                                    p.state);
    for_each_lane(p, [&](const Sequence& s, int64_t head) {
        // the carried state stays fp32; only its stored copies are rounded
        at::Tensor S = start_state(p, s.index, head);  // [1, K, V]
        for (const auto& [c0, c1] : chunks_of(s, p.chunk)) {
            const at::Tensor q = load_rows(p.q, s.batch, head, c0, c1);  // [1, L, K]
            const at::Tensor k = load_rows(p.k, s.batch, head, c0, c1);  // [1, L, K]
            const at::Tensor v = load_rows(p.v, s.batch, head, c0, c1);  // [1, L, V]
            const ChunkGates gates = chunk_gates(p, s.batch, head, c0, c1);
            // the stored chunk state (FLA's h) is what the output pass reads
            const at::Tensor h = round_to(S, p.state);  // [1, K, V]
            kept.store(s, c0, h[0], head);
            // FLA's chunk_gla_fwd_o rounds the decayed q to the input dtype before q·h, and the
            // fp32 scores to v's dtype before A·v
            const at::Tensor q_decayed = round_to(q * gates.decay, p.in);      // [1, L, K]
            const at::Tensor A = round_to(intra_scores(q, k, gates.G), p.in);  // [1, L, L]
            at::Tensor o = at::bmm(q_decayed, h);                              // [1, L, V]
            o.baddbmm_(A, v).mul_(p.scale);
            store_rows(o_hl, s.batch, head, c0, c1, o);
            S = advance(S, k, v, gates, p.in);
        }
        out.ht[s.index][head].copy_(S[0]);
    });
    out.h = kept.h();
    return out;
}

GlaGrads gla_chunk_bwd_cpu(const GlaArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/true);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, V]
    GlaGrads grads;
    grads.dq = poisoned(args.q.sizes(), p.in);
    grads.dk = poisoned(args.k.sizes(), p.in);
    grads.dv = poisoned(args.v.sizes(), p.in);
    grads.dg = poisoned(args.g.sizes(), args.g.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor dq_hl = to_head_last(grads.dq, args.layout);  // [B, T, H, K]
    const at::Tensor dk_hl = to_head_last(grads.dk, args.layout);  // [B, T, H, K]
    const at::Tensor dv_hl = to_head_last(grads.dv, args.layout);  // [B, T, H, V]
    const at::Tensor dg_hl = to_head_last(grads.dg, args.layout);  // [B, T, H, K]
    const int64_t K = p.K;

    for_each_lane(p, [&](const Sequence& s, int64_t head) {
        const auto chunks = chunks_of(s, p.chunk);
        // reverse pass: dS = ∂L/∂(state at the end of chunk c), carried in fp32 and stored
        // per chunk in the state dtype; it needs only q, d_o and the gates
        std::vector<at::Tensor> dh(chunks.size());
        at::Tensor dS = at::zeros({1, p.K, p.V}, at::kFloat);  // [1, K, V]
        if (dht.defined()) dS = widen(dht[s.index][head].unsqueeze(0));
        for (size_t c = chunks.size(); c-- > 0;) {
            const auto [c0, c1] = chunks[c];
            dh[c] = dS.to(p.state);
            const at::Tensor q = load_rows(p.q, s.batch, head, c0, c1);        // [1, L, K]
            const at::Tensor d_out = load_rows(do_hl, s.batch, head, c0, c1);  // [1, L, V]
            const ChunkGates gates = chunk_gates(p, s.batch, head, c0, c1);
            const at::Tensor q_decayed = q * gates.decay * p.scale;  // [1, L, K]
            dS = at::baddbmm(dS * gates.last, q_decayed.transpose(1, 2), d_out);
        }
        if (p.h0.defined()) grads.dh0[s.index][head].copy_(dS[0]);

        // forward pass: recompute the stored chunk states and take each chunk's gradients
        at::Tensor S = start_state(p, s.index, head);  // [1, K, V]
        for (size_t c = 0; c < chunks.size(); ++c) {
            const auto [c0, c1] = chunks[c];
            const int64_t L = c1 - c0;
            const at::Tensor q = load_rows(p.q, s.batch, head, c0, c1);        // [1, L, K]
            const at::Tensor k = load_rows(p.k, s.batch, head, c0, c1);        // [1, L, K]
            const at::Tensor v = load_rows(p.v, s.batch, head, c0, c1);        // [1, L, V]
            const at::Tensor d_out = load_rows(do_hl, s.batch, head, c0, c1);  // [1, L, V]
            const ChunkGates gates = chunk_gates(p, s.batch, head, c0, c1);
            const at::Tensor h = round_to(S, p.state);    // [1, K, V]
            const at::Tensor dhc = dh[c].to(at::kFloat);  // [1, K, V]

            // scaled scores and their gradient, kept in fp32; [i, j] with j ≤ i
            const at::Tensor A = intra_scores(q, k, gates.G).mul_(p.scale);  // [1, L, L]
            const at::Tensor below = at::ones({L, L}, at::kBool).tril();
            const at::Tensor dA =
                at::bmm(d_out, v.transpose(1, 2)).mul_(p.scale).mul_(below);  // [1, L, L]

            // inter-chunk part (through h and dh) plus intra-chunk part (through the scores)
            const at::Tensor dq_inter =
                at::bmm(d_out, h.transpose(1, 2)).mul_(gates.decay).mul_(p.scale);  // [1, L, K]
            const at::Tensor dk_inter =
                at::bmm(v, dhc.transpose(1, 2)).mul_(gates.to_end);  // [1, L, K]
            at::Tensor dq = dq_inter.clone();                        // [1, L, K]
            at::Tensor dk = dk_inter.clone();                        // [1, L, K]
            add_intra_grads(dA, q, k, gates.G, dq, dk);
            const at::Tensor dv =
                at::baddbmm(at::bmm(k * gates.to_end, dhc), A.transpose(1, 2), d_out);  // [1, L, V]
            store_rows(dq_hl, s.batch, head, c0, c1, dq);
            store_rows(dk_hl, s.batch, head, c0, c1, dk);
            store_rows(dv_hl, s.batch, head, c0, c1, dv);

            // ∂L/∂G_i = q_i ⊙ dq_i − k_i ⊙ dk_i per key dimension, plus on the last row the
            // carry exp(Λ) ⊙ rowsum(h ⊙ dh) + Σ_j k_j ⊙ dk_inter_j (README.md derives it)
            at::Tensor dG = q * dq - k * dk;                                          // [1, L, K]
            const at::Tensor state_carry = gates.last.squeeze(2) * (h * dhc).sum(2);  // [1, K]
            const at::Tensor k_carry = (k * dk_inter).sum(1);                         // [1, K]
            dG.select(1, L - 1).add_(state_carry + k_carry);
            // dg_t = Σ_{i ≥ t in the chunk} dG_i, a reverse running sum in fp32
            float* d = dG.data_ptr<float>();
            for (int64_t i = L - 1; i-- > 0;)
                for (int64_t e = 0; e < K; ++e) d[i * K + e] += d[(i + 1) * K + e];
            store_rows(dg_hl, s.batch, head, c0, c1, dG);
            S = advance(S, k, v, gates, p.in);
        }
    });
    return grads;
}

namespace {

// ---- recurrent variant ----

/// Σ x_j·y_j in fp32 over eight interleaved partial sums: a fixed order the compiler can
/// vectorise without reassociating.
float dot(const float* x, const float* y, int64_t n) {
    float acc[8] = {};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; ++l) acc[l] += x[j + l] * y[j + l];
    float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; j < n; ++j) sum += x[j] * y[j];
    return sum;
}

/// One head of one sequence, widened to fp32 and contiguous.
struct Lane {
    int64_t L = 0;
    at::Tensor q, k;   // [L, K]
    at::Tensor v;      // [L, V]
    at::Tensor decay;  // [L, K] exp(g_t) in fp32
};

Lane load_lane(const Problem& p, const Sequence& s, int64_t h) {
    Lane lane;
    lane.L = s.length();
    lane.q = widen(p.q[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.k = widen(p.k[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.v = widen(p.v[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.decay = widen(p.g[s.batch].slice(0, s.begin, s.end).select(1, h)).exp_();
    return lane;
}

/// The lane's starting state in fp32: h0[n, h] widened, or zeros.
at::Tensor lane_start(const Problem& p, int64_t n, int64_t h) {
    return p.h0.defined() ? widen(p.h0[n][h]) : at::zeros({p.K, p.V}, at::kFloat);  // [K, V]
}

/// S ← diag(a)·S + k vᵀ in place; with q given, also o = Sᵀ (scale·q) of the new S.
void step(float* S, const float* k, const float* v, const float* a, int64_t K, int64_t V,
          const float* q = nullptr, float scale = 0.0f, float* o = nullptr) {
    if (o) std::fill(o, o + V, 0.0f);
    for (int64_t i = 0; i < K; ++i) {
        float* Si = S + i * V;
        const float ai = a[i], ki = k[i];
        for (int64_t j = 0; j < V; ++j) Si[j] = ai * Si[j] + ki * v[j];
        if (o) {
            // FLA's fused_recurrent scales q before the product
            const float qi = scale * q[i];
            for (int64_t j = 0; j < V; ++j) o[j] += qi * Si[j];
        }
    }
}

}  // namespace

GlaFwd gla_recurrent_fwd_cpu(const GlaArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/false);
    GlaFwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(p, s, h);
        // the state lives in fp32 for the whole sequence
        at::Tensor S = lane_start(p, s.index, h);             // [K, V]
        at::Tensor o = at::empty({lane.L, p.V}, at::kFloat);  // [L, V]
        float* Sp = S.data_ptr<float>();
        const float* q = lane.q.data_ptr<float>();
        const float* k = lane.k.data_ptr<float>();
        const float* v = lane.v.data_ptr<float>();
        const float* a = lane.decay.data_ptr<float>();
        float* op = o.data_ptr<float>();
        for (int64_t t = 0; t < lane.L; ++t)
            step(Sp, k + t * p.K, v + t * p.V, a + t * p.K, p.K, p.V, q + t * p.K, p.scale,
                 op + t * p.V);
        o_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(o);
        out.ht[s.index][h].copy_(S);
    });
    return out;
}

GlaGrads gla_recurrent_bwd_cpu(const GlaArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/false);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, V]
    GlaGrads grads;
    grads.dq = poisoned(args.q.sizes(), p.in);
    grads.dk = poisoned(args.k.sizes(), p.in);
    grads.dv = poisoned(args.v.sizes(), p.in);
    grads.dg = poisoned(args.g.sizes(), args.g.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor dq_hl = to_head_last(grads.dq, args.layout);  // [B, T, H, K]
    const at::Tensor dk_hl = to_head_last(grads.dk, args.layout);  // [B, T, H, K]
    const at::Tensor dv_hl = to_head_last(grads.dv, args.layout);  // [B, T, H, V]
    const at::Tensor dg_hl = to_head_last(grads.dg, args.layout);  // [B, T, H, K]
    const int64_t K = p.K, V = p.V;

    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(p, s, h);
        const int64_t L = lane.L;
        const at::Tensor d_out =
            widen(do_hl[s.batch].slice(0, s.begin, s.end).select(1, h));  // [L, V]
        const float* q = lane.q.data_ptr<float>();
        const float* k = lane.k.data_ptr<float>();
        const float* v = lane.v.data_ptr<float>();
        const float* a = lane.decay.data_ptr<float>();
        const float* dop = d_out.data_ptr<float>();

        // forward: dq_t = scale·S_t do_t, keeping the state before every P-th step so the
        // reverse pass holds O(√L) states instead of L
        const int64_t P = std::max<int64_t>(
            1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(L)))));
        const int64_t segments = (L + P - 1) / P;
        at::Tensor checkpoints = at::empty({segments, K, V}, at::kFloat);  // [segments, K, V]
        at::Tensor S = lane_start(p, s.index, h);                          // [K, V]
        at::Tensor dq = at::empty({L, K}, at::kFloat);                     // [L, K]
        float* Sp = S.data_ptr<float>();
        float* ckp = checkpoints.data_ptr<float>();
        float* dqp = dq.data_ptr<float>();
        for (int64_t t = 0; t < L; ++t) {
            if (t % P == 0) std::copy(Sp, Sp + K * V, ckp + (t / P) * K * V);
            step(Sp, k + t * K, v + t * V, a + t * K, K, V);
            for (int64_t i = 0; i < K; ++i)
                dqp[t * K + i] = p.scale * dot(Sp + i * V, dop + t * V, V);
        }

        // reverse: dS = ∂L/∂S_t; per segment, recompute the states before each step from
        // its checkpoint, then walk it backwards
        at::Tensor dS = at::zeros({K, V}, at::kFloat);  // [K, V]
        if (dht.defined()) dS = widen(dht[s.index][h]);
        at::Tensor dk = at::empty({L, K}, at::kFloat);  // [L, K]
        at::Tensor dv = at::zeros({L, V}, at::kFloat);  // [L, V]
        at::Tensor dg = at::empty({L, K}, at::kFloat);  // [L, K]
        // entry i is the state before step t0 + i of the segment being walked
        at::Tensor before = at::empty({std::min(P, L), K, V}, at::kFloat);  // [P, K, V]
        float* dSp = dS.data_ptr<float>();
        float* dkp = dk.data_ptr<float>();
        float* dvp = dv.data_ptr<float>();
        float* dgp = dg.data_ptr<float>();
        float* bp = before.data_ptr<float>();
        for (int64_t seg = segments; seg-- > 0;) {
            const int64_t t0 = seg * P, t1 = std::min(t0 + P, L);
            std::copy(ckp + seg * K * V, ckp + (seg + 1) * K * V, bp);
            for (int64_t t = t0; t + 1 < t1; ++t) {
                float* next = bp + (t - t0 + 1) * K * V;
                std::copy(bp + (t - t0) * K * V, bp + (t - t0 + 1) * K * V, next);
                step(next, k + t * K, v + t * V, a + t * K, K, V);
            }
            for (int64_t t = t1; t-- > t0;) {
                const float* prev = bp + (t - t0) * K * V;
                const float* do_t = dop + t * V;
                const float* vt = v + t * V;
                const float* at_ = a + t * K;
                float* dvt = dvp + t * V;
                for (int64_t i = 0; i < K; ++i) {
                    float* dSi = dSp + i * V;
                    const float sq = p.scale * q[t * K + i];
                    const float ki = k[t * K + i];
                    for (int64_t j = 0; j < V; ++j) dSi[j] += sq * do_t[j];
                    dkp[t * K + i] = dot(dSi, vt, V);
                    // dg_t[i] = exp(g_t[i])·⟨S_{t-1}[i, :], dS_t[i, :]⟩
                    dgp[t * K + i] = at_[i] * dot(prev + i * V, dSi, V);
                    for (int64_t j = 0; j < V; ++j) {
                        dvt[j] += ki * dSi[j];
                        dSi[j] *= at_[i];
                    }
                }
            }
        }

        dq_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dq);
        dk_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dk);
        dv_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dv);
        dg_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dg);
        if (p.h0.defined()) grads.dh0[s.index][h].copy_(dS);
    });
    return grads;
}

}  // namespace lav::kernels
