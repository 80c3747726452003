// kernels/rwkv6/rwkv6_cpu.cpp — rwkv6 on the CPU through LibTorch: chunk and recurrent variants,
// forward and backward, rounding exactly where the precision contract says. Not a reference: it
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
#include "rwkv6/rwkv6.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "rwkv6";

using cpu::poisoned;
using cpu::round_to;
using cpu::widen;

// ---- arguments ----

/// The validated arguments: head_last views of the inputs and the dtypes of the contract.
struct Problem {
    at::Tensor q, k;  // [B, T, H, K] head_last views of the caller's tensors
    at::Tensor v;     // [B, T, H, V]
    at::Tensor w;     // [B, T, H, K] in the gate dtype
    at::Tensor u;     // [H, K] widened to fp32
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

Problem make_problem(const Rwkv6Args& a, bool chunked) {
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined() && a.w.defined() && a.u.defined(),
              "rwkv6 cpu needs q, k, v, w and u");
    for (const auto& [x, name] : {std::pair{&a.q, "q"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"},
                                  std::pair{&a.w, "w"}, std::pair{&a.u, "u"}})
        cpu::check_float_cpu(kFamily, *x, name);
    LAV_CHECK(a.q.dim() == 4 && a.k.dim() == 4 && a.v.dim() == 4 && a.w.dim() == 4,
              "rwkv6 cpu: q, k, v and w must be 4-d");
    Problem p;
    p.in = a.q.scalar_type();
    LAV_CHECK(a.k.scalar_type() == p.in && a.v.scalar_type() == p.in,
              "rwkv6 cpu: q, k and v must share one dtype, got ", scalar_type_name(p.in), ", ",
              scalar_type_name(a.k.scalar_type()), ", ", scalar_type_name(a.v.scalar_type()));
    p.q = to_head_last(a.q, a.layout);
    p.k = to_head_last(a.k, a.layout);
    p.v = to_head_last(a.v, a.layout);
    p.w = to_head_last(a.w, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    p.V = p.v.size(3);
    LAV_CHECK(p.K > 0 && p.V > 0 && p.H > 0, "rwkv6 cpu: H, K and V must be positive");
    LAV_CHECK(p.k.sizes() == p.q.sizes() && p.w.sizes() == p.q.sizes(),
              "rwkv6 cpu: k and w must have q's shape ", a.q.sizes(), ", got ", a.k.sizes(),
              " and ", a.w.sizes());
    LAV_CHECK(p.v.size(0) == p.B && p.v.size(1) == p.T && p.v.size(2) == p.H,
              "rwkv6 cpu: v must agree with q in B, T and H, got ", a.v.sizes(), " and ",
              a.q.sizes());
    LAV_CHECK(a.u.sizes() == at::IntArrayRef({p.H, p.K}), "rwkv6 cpu: u must be [H, K] = [", p.H,
              ", ", p.K, "], got ", a.u.sizes());
    p.u = widen(a.u);

    const std::vector<int64_t> cu = cpu::cu_seqlens_offsets(kFamily, a.cu_seqlens);
    p.seqs = sequences(p.B, p.T, cu);
    p.N = num_sequences(p.B, cu);
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

at::Tensor check_cotangents(const Problem& p, const Rwkv6Args& a, const at::Tensor& d_o,
                            const at::Tensor& dht) {
    cpu::check_d_o(kFamily, d_o, a.v.sizes());
    if (dht.defined()) check_state_shape(dht, "dht", p);
    return to_head_last(d_o, a.layout);
}

// ---- tensor helpers ----

/// Rows [c0, c1) of one head in batch row b of a head_last tensor, as a [1, L, D] fp32 copy.
at::Tensor load_rows(const at::Tensor& x_hl, int64_t b, int64_t head, int64_t c0, int64_t c1) {
    return widen(x_hl[b].slice(0, c0, c1).select(1, head).unsqueeze(0));
}

/// Writes [1, L, D] fp32 rows into one head of a head_last view, rounding once to its dtype.
void store_rows(const at::Tensor& dst_hl, int64_t b, int64_t head, int64_t c0, int64_t c1,
                const at::Tensor& x) {
    dst_hl[b].slice(0, c0, c1).select(1, head).copy_(x[0]);
}

at::Tensor start_state(const Problem& p, int64_t n, int64_t head) {
    return p.h0.defined() ? widen(p.h0[n][head].unsqueeze(0))
                          : at::zeros({1, p.K, p.V}, at::kFloat);  // [1, K, V]
}

/// Runs `lane_fn(sequence, head, lane)` over every (sequence, head) pair in parallel; `lane`
/// numbers the pair for per-lane buffers.
template <typename F>
void for_each_lane(const Problem& p, const F& lane_fn) {
    cpu::for_each_lane(p.seqs, p.H, [&](const Sequence& s, int64_t head) {
        lane_fn(s, head, s.index * p.H + head);
    });
}

/// du summed over the sequences of each head from per-lane partial sums ([N·H, K], fp32),
/// rounded once to u's dtype: lanes of one head run on different threads.
at::Tensor reduce_du(const Problem& p, const at::Tensor& partial, c10::ScalarType dtype) {
    return partial.view({p.N, p.H, p.K}).sum(0).to(dtype);
}

// ---- chunk variant ----

/// The decay factors of one chunk, from the fp32 chunk-local cumsums of w.
struct ChunkGates {
    at::Tensor Gi;      // [1, L, K] inclusive cumsum within the chunk
    at::Tensor Ge;      // [1, L, K] exclusive cumsum: Ge_i = Gi_{i-1}, Ge_0 = 0
    at::Tensor to_end;  // [1, L, K] exp(Gi_last − Gi)
    at::Tensor last;    // [1, K, 1] exp(Gi_last)
    at::Tensor intra;   // [1, L, L, K] exp(Ge_i − Gi_j) for j < i, else 0
};

ChunkGates chunk_gates(const Problem& p, int64_t b, int64_t head, int64_t c0, int64_t c1) {
    const int64_t L = c1 - c0, K = p.K;
    ChunkGates g;
    g.Gi = load_rows(p.w, b, head, c0, c1);  // [1, L, K]
    float* G = g.Gi.data_ptr<float>();
    // a running fp32 sum in place: at::cumsum accumulates fp32 in double on the CPU
    for (int64_t i = 1; i < L; ++i)
        for (int64_t d = 0; d < K; ++d) G[i * K + d] += G[(i - 1) * K + d];
    g.Ge = at::zeros_like(g.Gi);
    g.Ge.narrow(1, 1, L - 1).copy_(g.Gi.narrow(1, 0, L - 1));
    const at::Tensor G_last = g.Gi.narrow(1, L - 1, 1);  // [1, 1, K]
    g.to_end = (G_last - g.Gi).exp();
    g.last = G_last.exp().transpose(1, 2);
    // masked before the exp: for j ≥ i the difference can be positive and large, and inf·0 is NaN
    const at::Tensor not_before = at::ones({L, L}, at::kBool).triu().view({1, L, L, 1});
    g.intra = (g.Ge.unsqueeze(2) - g.Gi.unsqueeze(1))
                  .masked_fill_(not_before, -std::numeric_limits<float>::infinity())
                  .exp_();
    return g;
}

/// A[i, j] = Σ_d q_id k_jd exp(Ge_id − Gi_jd) for j < i, else 0, in fp32 without the scale.
at::Tensor intra_scores(const at::Tensor& q, const at::Tensor& k, const ChunkGates& g) {
    return (g.intra * q.unsqueeze(2) * k.unsqueeze(1)).sum(3);  // [1, L, L]
}

/// Σ_d q_td u_d k_td per row: [1, L, 1].
at::Tensor bonus_of(const Problem& p, const at::Tensor& q, const at::Tensor& k, int64_t head) {
    return (q * p.u[head] * k).sum(2, /*keepdim=*/true);
}

/// One chunk of the state recurrence: S ← diag(exp(Gi_last))·S + round_in(K ⊙ exp(Gi_last − Gi))ᵀ
/// V.
at::Tensor advance(const at::Tensor& S, const at::Tensor& k, const at::Tensor& v,
                   const ChunkGates& g, c10::ScalarType in) {
    // FLA's chunk_fwd_h rounds the decayed k to the input dtype before the matmul
    const at::Tensor k_decayed = round_to(k * g.to_end, in);       // [1, L, K]
    return at::baddbmm(S * g.last, k_decayed.transpose(1, 2), v);  // [1, K, V]
}

std::vector<std::pair<int64_t, int64_t>> chunks_of(const Sequence& s, int64_t C) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c0 = s.begin; c0 < s.end; c0 += C) out.emplace_back(c0, std::min(c0 + C, s.end));
    return out;
}

}  // namespace

Rwkv6Fwd rwkv6_chunk_fwd_cpu(const Rwkv6Args& args) {
    const Problem p = make_problem(args, /*chunked=*/true);
    Rwkv6Fwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    const cpu::ChunkStateStore kept(args.keep_chunk_states, p.seqs, p.chunk, {p.H, p.K, p.V},
                                    p.state);
    for_each_lane(p, [&](const Sequence& s, int64_t head, int64_t) {
        // the carried state stays fp32; only its stored copies are rounded
        at::Tensor S = start_state(p, s.index, head);  // [1, K, V]
        for (const auto& [c0, c1] : chunks_of(s, p.chunk)) {
            const at::Tensor q = load_rows(p.q, s.batch, head, c0, c1);  // [1, L, K]
            const at::Tensor k = load_rows(p.k, s.batch, head, c0, c1);  // [1, L, K]
            const at::Tensor v = load_rows(p.v, s.batch, head, c0, c1);  // [1, L, V]
            const ChunkGates g = chunk_gates(p, s.batch, head, c0, c1);
            const at::Tensor h = round_to(S, p.state);  // [1, K, V]
            kept.store(s, c0, h[0], head);
            const at::Tensor q_decayed = round_to(q * g.Ge.exp(), p.in);  // [1, L, K]
            const at::Tensor A = round_to(intra_scores(q, k, g), p.in);   // [1, L, L]
            at::Tensor o = at::bmm(q_decayed, h);                         // [1, L, V]
            o.baddbmm_(A, v).addcmul_(bonus_of(p, q, k, head), v).mul_(p.scale);
            store_rows(o_hl, s.batch, head, c0, c1, o);
            S = advance(S, k, v, g, p.in);
        }
        out.ht[s.index][head].copy_(S[0]);
    });
    out.h = kept.h();
    return out;
}

Rwkv6Grads rwkv6_chunk_bwd_cpu(const Rwkv6Args& args, const at::Tensor& d_o,
                               const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/true);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, V]
    Rwkv6Grads grads;
    grads.dq = poisoned(args.q.sizes(), p.in);
    grads.dk = poisoned(args.k.sizes(), p.in);
    grads.dv = poisoned(args.v.sizes(), p.in);
    grads.dw = poisoned(args.w.sizes(), args.w.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.H, p.K, p.V}, p.state);
    at::Tensor du_lanes = at::zeros({p.N * p.H, p.K}, at::kFloat);  // [N·H, K]
    const at::Tensor dq_hl = to_head_last(grads.dq, args.layout);   // [B, T, H, K]
    const at::Tensor dk_hl = to_head_last(grads.dk, args.layout);   // [B, T, H, K]
    const at::Tensor dv_hl = to_head_last(grads.dv, args.layout);   // [B, T, H, V]
    const at::Tensor dw_hl = to_head_last(grads.dw, args.layout);   // [B, T, H, K]
    const int64_t K = p.K;

    for_each_lane(p, [&](const Sequence& s, int64_t head, int64_t lane) {
        const auto chunks = chunks_of(s, p.chunk);
        // reverse pass: dS = ∂L/∂(state at the end of chunk c), carried in fp32 and stored per
        // chunk in the state dtype; the state entering a chunk is read by o through exp(Ge)
        std::vector<at::Tensor> dh(chunks.size());
        at::Tensor dS = at::zeros({1, p.K, p.V}, at::kFloat);  // [1, K, V]
        if (dht.defined()) dS = widen(dht[s.index][head].unsqueeze(0));
        for (size_t c = chunks.size(); c-- > 0;) {
            const auto [c0, c1] = chunks[c];
            dh[c] = dS.to(p.state);
            const at::Tensor q = load_rows(p.q, s.batch, head, c0, c1);        // [1, L, K]
            const at::Tensor d_out = load_rows(do_hl, s.batch, head, c0, c1);  // [1, L, V]
            const ChunkGates g = chunk_gates(p, s.batch, head, c0, c1);
            const at::Tensor q_decayed = q * g.Ge.exp() * p.scale;  // [1, L, K]
            dS = at::baddbmm(dS * g.last, q_decayed.transpose(1, 2), d_out);
        }
        if (p.h0.defined()) grads.dh0[s.index][head].copy_(dS[0]);

        at::Tensor du = du_lanes[lane];                // [K]
        at::Tensor S = start_state(p, s.index, head);  // [1, K, V]
        for (size_t c = 0; c < chunks.size(); ++c) {
            const auto [c0, c1] = chunks[c];
            const int64_t L = c1 - c0;
            const at::Tensor q = load_rows(p.q, s.batch, head, c0, c1);        // [1, L, K]
            const at::Tensor k = load_rows(p.k, s.batch, head, c0, c1);        // [1, L, K]
            const at::Tensor v = load_rows(p.v, s.batch, head, c0, c1);        // [1, L, V]
            const at::Tensor d_out = load_rows(do_hl, s.batch, head, c0, c1);  // [1, L, V]
            const ChunkGates g = chunk_gates(p, s.batch, head, c0, c1);
            const at::Tensor h = round_to(S, p.state);    // [1, K, V]
            const at::Tensor dhc = dh[c].to(at::kFloat);  // [1, K, V]

            // strictly lower scores and their gradient in fp32
            const at::Tensor A = intra_scores(q, k, g).mul_(p.scale);  // [1, L, L]
            const at::Tensor dA = at::bmm(d_out, v.transpose(1, 2))
                                      .mul_(p.scale)
                                      .mul_(at::ones({L, L}, at::kBool).tril(-1));  // [1, L, L]
            const at::Tensor D = g.intra * dA.unsqueeze(3);                         // [1, L, L, K]
            const at::Tensor dq_w =
                at::bmm(d_out, h.transpose(1, 2)).mul_(g.Ge.exp()).mul_(p.scale) +
                (D * k.unsqueeze(1)).sum(2);  // [1, L, K] the parts that see w
            const at::Tensor dk_inter = at::bmm(v, dhc.transpose(1, 2)).mul_(g.to_end);
            const at::Tensor dk_w = dk_inter + (D * q.unsqueeze(2)).sum(1);  // [1, L, K]
            // the bonus path: c_t = scale·(d_o_t·v_t)
            const at::Tensor ct = (d_out * v).sum(2, true).mul_(p.scale);  // [1, L, 1]
            const at::Tensor uk = p.u[head] * k;                           // [1, L, K]
            const at::Tensor dq = dq_w + ct * uk;
            const at::Tensor dk = dk_w + ct * p.u[head] * q;
            const at::Tensor dv = at::bmm(k * g.to_end, dhc)
                                      .baddbmm_(A.transpose(1, 2), d_out)
                                      .addcmul_(bonus_of(p, q, k, head) * p.scale, d_out);
            du.add_((ct * q * k).sum(1)[0]);
            store_rows(dq_hl, s.batch, head, c0, c1, dq);
            store_rows(dk_hl, s.batch, head, c0, c1, dk);
            store_rows(dv_hl, s.batch, head, c0, c1, dv);

            // ∂L/∂Gi_j = −k_j ⊙ dk_w_j, plus on the last row the carry exp(Gi_last) ⊙ rowsum(S ⊙
            // dh)
            // + Σ_j k_j ⊙ dk_inter_j; ∂L/∂Ge_i = q_i ⊙ dq_w_i (README.md derives both)
            at::Tensor dGi = -k * dk_w;                                     // [1, L, K]
            const at::Tensor dGe = q * dq_w;                                // [1, L, K]
            const at::Tensor carry = g.last.squeeze(2) * (S * dhc).sum(2);  // [1, K]
            dGi.select(1, L - 1).add_(carry + (k * dk_inter).sum(1));
            // dw_t = Σ_{i ≥ t} dGi_i + Σ_{i > t} dGe_i, a reverse running sum in fp32
            at::Tensor dw = at::empty({1, L, K}, at::kFloat);  // [1, L, K]
            float* out = dw.data_ptr<float>();
            const float* gi = dGi.data_ptr<float>();
            const float* ge = dGe.data_ptr<float>();
            std::vector<float> acc(K, 0.0f);
            for (int64_t i = L; i-- > 0;) {
                for (int64_t e = 0; e < K; ++e) {
                    acc[e] += gi[i * K + e];
                    out[i * K + e] = acc[e];
                    acc[e] += ge[i * K + e];
                }
            }
            store_rows(dw_hl, s.batch, head, c0, c1, dw);
            S = advance(S, k, v, g, p.in);
        }
    });
    grads.du = reduce_du(p, du_lanes, args.u.scalar_type());
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
    at::Tensor decay;  // [L, K] exp(w_t)
    at::Tensor bonus;  // [L] Σ_d q_td u_d k_td
};

Lane load_lane(const Problem& p, const Sequence& s, int64_t h) {
    Lane lane;
    lane.L = s.length();
    lane.q = widen(p.q[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.k = widen(p.k[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.v = widen(p.v[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.decay = widen(p.w[s.batch].slice(0, s.begin, s.end).select(1, h)).exp_();
    lane.bonus = (lane.q * p.u[h] * lane.k).sum(1);
    return lane;
}

at::Tensor lane_start(const Problem& p, int64_t n, int64_t h) {
    return p.h0.defined() ? widen(p.h0[n][h]) : at::zeros({p.K, p.V}, at::kFloat);  // [K, V]
}

/// S ← diag(a)·S + k vᵀ in place.
void step(float* S, const float* k, const float* v, const float* a, int64_t K, int64_t V) {
    for (int64_t i = 0; i < K; ++i) {
        float* Si = S + i * V;
        const float ai = a[i], ki = k[i];
        for (int64_t j = 0; j < V; ++j) Si[j] = ai * Si[j] + ki * v[j];
    }
}

}  // namespace

Rwkv6Fwd rwkv6_recurrent_fwd_cpu(const Rwkv6Args& args) {
    const Problem p = make_problem(args, /*chunked=*/false);
    Rwkv6Fwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    const int64_t K = p.K, V = p.V;
    for_each_lane(p, [&](const Sequence& s, int64_t h, int64_t) {
        const Lane lane = load_lane(p, s, h);
        at::Tensor S = lane_start(p, s.index, h);           // [K, V]
        at::Tensor o = at::empty({lane.L, V}, at::kFloat);  // [L, V]
        float* Sp = S.data_ptr<float>();
        const float* q = lane.q.data_ptr<float>();
        const float* k = lane.k.data_ptr<float>();
        const float* v = lane.v.data_ptr<float>();
        const float* a = lane.decay.data_ptr<float>();
        const float* bonus = lane.bonus.data_ptr<float>();
        float* op = o.data_ptr<float>();
        for (int64_t t = 0; t < lane.L; ++t) {
            // o_t = scale·[S_{t-1}ᵀ q_t + bonus_t v_t], read before the step
            float* ot = op + t * V;
            for (int64_t j = 0; j < V; ++j) ot[j] = bonus[t] * v[t * V + j];
            for (int64_t i = 0; i < K; ++i) {
                const float qi = q[t * K + i];
                const float* Si = Sp + i * V;
                for (int64_t j = 0; j < V; ++j) ot[j] += qi * Si[j];
            }
            for (int64_t j = 0; j < V; ++j) ot[j] *= p.scale;
            step(Sp, k + t * K, v + t * V, a + t * K, K, V);
        }
        o_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(o);
        out.ht[s.index][h].copy_(S);
    });
    return out;
}

Rwkv6Grads rwkv6_recurrent_bwd_cpu(const Rwkv6Args& args, const at::Tensor& d_o,
                                   const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/false);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, V]
    Rwkv6Grads grads;
    grads.dq = poisoned(args.q.sizes(), p.in);
    grads.dk = poisoned(args.k.sizes(), p.in);
    grads.dv = poisoned(args.v.sizes(), p.in);
    grads.dw = poisoned(args.w.sizes(), args.w.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.H, p.K, p.V}, p.state);
    at::Tensor du_lanes = at::zeros({p.N * p.H, p.K}, at::kFloat);  // [N·H, K]
    const at::Tensor dq_hl = to_head_last(grads.dq, args.layout);   // [B, T, H, K]
    const at::Tensor dk_hl = to_head_last(grads.dk, args.layout);   // [B, T, H, K]
    const at::Tensor dv_hl = to_head_last(grads.dv, args.layout);   // [B, T, H, V]
    const at::Tensor dw_hl = to_head_last(grads.dw, args.layout);   // [B, T, H, K]
    const int64_t K = p.K, V = p.V;

    for_each_lane(p, [&](const Sequence& s, int64_t h, int64_t lane_index) {
        const Lane lane = load_lane(p, s, h);
        const int64_t L = lane.L;
        const at::Tensor d_out =
            widen(do_hl[s.batch].slice(0, s.begin, s.end).select(1, h));  // [L, V]
        const float* q = lane.q.data_ptr<float>();
        const float* k = lane.k.data_ptr<float>();
        const float* v = lane.v.data_ptr<float>();
        const float* a = lane.decay.data_ptr<float>();
        const float* bonus = lane.bonus.data_ptr<float>();
        const float* u = p.u[h].data_ptr<float>();
        const float* dop = d_out.data_ptr<float>();

        // forward: keep the state before every P-th step so the reverse pass holds O(√L) states
        const int64_t P = std::max<int64_t>(
            1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(L)))));
        const int64_t segments = (L + P - 1) / P;
        at::Tensor checkpoints = at::empty({segments, K, V}, at::kFloat);  // [segments, K, V]
        at::Tensor S = lane_start(p, s.index, h);                          // [K, V]
        float* Sp = S.data_ptr<float>();
        float* ckp = checkpoints.data_ptr<float>();
        for (int64_t t = 0; t < L; ++t) {
            if (t % P == 0) std::copy(Sp, Sp + K * V, ckp + (t / P) * K * V);
            step(Sp, k + t * K, v + t * V, a + t * K, K, V);
        }

        // reverse: dS = ∂L/∂S_t; per segment, recompute the states before each step from its
        // checkpoint, then walk it backwards
        at::Tensor dS = at::zeros({K, V}, at::kFloat);  // [K, V]
        if (dht.defined()) dS = widen(dht[s.index][h]);
        at::Tensor dq = at::empty({L, K}, at::kFloat);                      // [L, K]
        at::Tensor dk = at::empty({L, K}, at::kFloat);                      // [L, K]
        at::Tensor dv = at::empty({L, V}, at::kFloat);                      // [L, V]
        at::Tensor dw = at::empty({L, K}, at::kFloat);                      // [L, K]
        at::Tensor before = at::empty({std::min(P, L), K, V}, at::kFloat);  // [P, K, V]
        float* dSp = dS.data_ptr<float>();
        float* dqp = dq.data_ptr<float>();
        float* dkp = dk.data_ptr<float>();
        float* dvp = dv.data_ptr<float>();
        float* dwp = dw.data_ptr<float>();
        float* bp = before.data_ptr<float>();
        float* du = du_lanes[lane_index].data_ptr<float>();
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
                // the bonus path: c_t = scale·(d_o_t·v_t)
                const float ct = p.scale * dot(do_t, vt, V);
                float* dvt = dvp + t * V;
                for (int64_t j = 0; j < V; ++j) dvt[j] = p.scale * bonus[t] * do_t[j];
                for (int64_t i = 0; i < K; ++i) {
                    float* dSi = dSp + i * V;
                    const float* prev_i = prev + i * V;
                    const float qi = q[t * K + i], ki = k[t * K + i], ai = a[t * K + i];
                    dkp[t * K + i] = dot(dSi, vt, V) + ct * u[i] * qi;
                    dqp[t * K + i] = p.scale * dot(prev_i, do_t, V) + ct * u[i] * ki;
                    // dw_t[i] = exp(w_t[i])·⟨S_{t-1}[i, :], dS_t[i, :]⟩
                    dwp[t * K + i] = ai * dot(prev_i, dSi, V);
                    du[i] += ct * qi * ki;
                    // ∂L/∂S_{t-1} = diag(exp(w_t))·dS_t + scale·q_t d_o_tᵀ
                    const float sq = p.scale * qi;
                    for (int64_t j = 0; j < V; ++j) {
                        dvt[j] += ki * dSi[j];
                        dSi[j] = ai * dSi[j] + sq * do_t[j];
                    }
                }
            }
        }
        dq_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dq);
        dk_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dk);
        dv_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dv);
        dw_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dw);
        if (p.h0.defined()) grads.dh0[s.index][h].copy_(dS);
    });
    grads.du = reduce_du(p, du_lanes, args.u.scalar_type());
    return grads;
}

}  // namespace lav::kernels
