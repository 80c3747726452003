// kernels/simple_gla/simple_gla_cpu.cpp — simple_gla on the CPU through LibTorch: chunk and
// recurrent variants, forward and backward, rounding exactly where the precision contract says.
// Not a reference: it computes in fp32 like the GPU kernels it stands in for (see README.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/cpu_args.h"
#include "common/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/varlen.h"
#include "simple_gla/simple_gla.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "simple_gla";

using cpu::poisoned;
using cpu::round_to;
using cpu::widen;

// ---- arguments ----

/// The validated arguments: head_last views of the inputs and the dtypes of the contract.
struct Problem {
    at::Tensor q, k;     // [B, T, H, K] head_last views of the caller's tensors
    at::Tensor v;        // [B, T, H, V]
    at::Tensor g;        // [B, T, H] in the gate dtype; undefined: none
    at::Tensor g_gamma;  // [H] fp32; undefined: none
    at::Tensor h0;       // [N, H, K, V] in its own dtype; undefined: zeros
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

Problem make_problem(const SimpleGlaArgs& a, bool chunked) {
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined(), "simple_gla cpu needs q, k and v");
    cpu::check_float_cpu(kFamily, a.q, "q");
    cpu::check_float_cpu(kFamily, a.k, "k");
    cpu::check_float_cpu(kFamily, a.v, "v");
    LAV_CHECK(a.q.dim() == 4 && a.k.dim() == 4 && a.v.dim() == 4,
              "simple_gla cpu: q, k, v must be 4-d, got ", a.q.dim(), ", ", a.k.dim(), ", ",
              a.v.dim());
    Problem p;
    p.in = a.q.scalar_type();
    LAV_CHECK(a.k.scalar_type() == p.in && a.v.scalar_type() == p.in,
              "simple_gla cpu: q, k and v must share one dtype, got ",
              scalar_type_name(a.q.scalar_type()), ", ", scalar_type_name(a.k.scalar_type()), ", ",
              scalar_type_name(a.v.scalar_type()));
    p.q = to_head_last(a.q, a.layout);
    p.k = to_head_last(a.k, a.layout);
    p.v = to_head_last(a.v, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    p.V = p.v.size(3);
    LAV_CHECK(p.K > 0 && p.V > 0 && p.H > 0, "simple_gla cpu: H, K and V must be positive");
    LAV_CHECK(p.k.sizes() == p.q.sizes(), "simple_gla cpu: k must have q's shape ", a.q.sizes(),
              ", got ", a.k.sizes());
    LAV_CHECK(p.v.size(0) == p.B && p.v.size(1) == p.T && p.v.size(2) == p.H,
              "simple_gla cpu: v must agree with q in B, T and H, got ", a.v.sizes(), " and ",
              a.q.sizes());

    LAV_CHECK(!(a.g.defined() && a.g_gamma.defined()),
              "simple_gla cpu: g and g_gamma cannot be given together");
    if (a.g.defined()) {
        cpu::check_float_cpu(kFamily, a.g, "g");
        LAV_CHECK(a.g.dim() == 3, "simple_gla cpu: g must be 3-d, got ", a.g.sizes());
        p.g = to_head_last(a.g, a.layout);
        LAV_CHECK(p.g.sizes() == at::IntArrayRef({p.B, p.T, p.H}),
                  "simple_gla cpu: g must match q's B, T, H in the same layout, got ", a.g.sizes());
    }
    if (a.g_gamma.defined()) {
        cpu::check_shape(kFamily, a.g_gamma, "g_gamma", "[H]", {p.H});
        p.g_gamma = a.g_gamma.to(at::kFloat).contiguous();
    }

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

/// d_o as a head_last view, checked against o's shape; dht checked against the state shape.
at::Tensor check_cotangents(const Problem& p, const SimpleGlaArgs& a, const at::Tensor& d_o,
                            const at::Tensor& dht) {
    cpu::check_d_o(kFamily, d_o, a.v.sizes());
    if (dht.defined()) check_state_shape(dht, "dht", p);
    return to_head_last(d_o, a.layout);
}

// ---- tensor helpers ----

/// Rows [c0, c1) of batch row b of a head_last tensor, heads first, in fp32.
at::Tensor load_rows(const at::Tensor& x_hl, int64_t b, int64_t c0, int64_t c1) {
    // [L, H, D] -> [H, L, D]
    return widen(x_hl[b].slice(0, c0, c1).transpose(0, 1));
}

/// Writes heads-first fp32 rows into a head_last view, rounding once to its dtype.
void store_rows(const at::Tensor& dst_hl, int64_t b, int64_t c0, int64_t c1, const at::Tensor& x) {
    dst_hl[b].slice(0, c0, c1).copy_(x.transpose(0, 1));
}

/// The state a sequence starts from, in fp32: h0 widened from whatever dtype it has, or zeros.
at::Tensor start_state(const Problem& p, int64_t n) {
    return p.h0.defined() ? widen(p.h0[n]) : at::zeros({p.H, p.K, p.V}, at::kFloat);  // [H, K, V]
}

// ---- chunk variant ----

/// The decay factors of one chunk, all from the fp32 chunk-local cumsum G.
struct ChunkGates {
    at::Tensor G;       // [H, L] inclusive cumsum of g within the chunk
    at::Tensor decay;   // [H, L] exp(G_i)
    at::Tensor to_end;  // [H, L] exp(G_last − G_i)
    at::Tensor last;    // [H, 1, 1] exp(G_last)
    at::Tensor intra;   // [H, L, L] exp(G_i − G_j) for j ≤ i, else 0
};

ChunkGates chunk_gates(const Problem& p, int64_t b, int64_t c0, int64_t c1) {
    const int64_t L = c1 - c0;
    ChunkGates gates;
    gates.G = at::zeros({p.H, L}, at::kFloat);
    float* G = gates.G.data_ptr<float>();
    if (p.g.defined()) {
        const at::Tensor g = widen(p.g[b].slice(0, c0, c1).t());  // [H, L]
        const float* gp = g.data_ptr<float>();
        // a running fp32 sum: at::cumsum accumulates fp32 in double on the CPU
        for (int64_t h = 0; h < p.H; ++h) {
            float acc = 0.0f;
            for (int64_t i = 0; i < L; ++i) G[h * L + i] = acc += gp[h * L + i];
        }
    } else if (p.g_gamma.defined()) {
        const float* gamma = p.g_gamma.data_ptr<float>();
        for (int64_t h = 0; h < p.H; ++h)
            for (int64_t i = 0; i < L; ++i) G[h * L + i] = gamma[h] * static_cast<float>(i + 1);
    }
    const at::Tensor G_last = gates.G.narrow(1, L - 1, 1);  // [H, 1]
    gates.decay = gates.G.exp();
    gates.to_end = (G_last - gates.G).exp();
    gates.last = G_last.exp().view({p.H, 1, 1});
    // mask before exp: above the diagonal G_i − G_j > 0 can overflow, and inf·0 is NaN
    const at::Tensor above = at::ones({L, L}, at::kBool).triu(1);
    gates.intra = (gates.G.unsqueeze(2) - gates.G.unsqueeze(1))
                      .masked_fill_(above, -std::numeric_limits<float>::infinity())
                      .exp_();
    return gates;
}

/// One chunk of the state recurrence: S ← exp(G_last)·S + kᵀ·round_in(v ⊙ exp(G_last − G)).
at::Tensor advance(const at::Tensor& S, const at::Tensor& k, const at::Tensor& v,
                   const ChunkGates& gates, c10::ScalarType in) {
    // FLA's chunk_fwd_h rounds the decayed v to the input dtype before the matmul
    const at::Tensor v_decayed = round_to(v * gates.to_end.unsqueeze(2), in);  // [H, L, V]
    return at::baddbmm(S * gates.last, k.transpose(1, 2), v_decayed);          // [H, K, V]
}

/// Every chunk of a sequence as [begin, end) row ranges.
std::vector<std::pair<int64_t, int64_t>> chunks_of(const Sequence& s, int64_t C) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c0 = s.begin; c0 < s.end; c0 += C) out.emplace_back(c0, std::min(c0 + C, s.end));
    return out;
}

}  // namespace

SimpleGlaFwd simple_gla_chunk_fwd_cpu(const SimpleGlaArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/true);
    SimpleGlaFwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    const cpu::ChunkStateStore kept(args.keep_chunk_states, p.seqs, p.chunk, {p.H, p.K, p.V},
                                    p.state);
    for (const Sequence& s : p.seqs) {
        // the carried state stays fp32; only its stored copies are rounded
        at::Tensor S = start_state(p, s.index);  // [H, K, V]
        for (const auto& [c0, c1] : chunks_of(s, p.chunk)) {
            const at::Tensor q = load_rows(p.q, s.batch, c0, c1);  // [H, L, K]
            const at::Tensor k = load_rows(p.k, s.batch, c0, c1);  // [H, L, K]
            const at::Tensor v = load_rows(p.v, s.batch, c0, c1);  // [H, L, V]
            const ChunkGates gates = chunk_gates(p, s.batch, c0, c1);
            // the stored chunk state (FLA's h) is what the output pass reads
            const at::Tensor h = round_to(S, p.state);  // [H, K, V]
            kept.store(s, c0, h);
            at::Tensor o = at::bmm(q, h) * gates.decay.unsqueeze(2);  // [H, L, V]
            // FLA's chunk_fwd_o casts the masked, decayed scores to v's dtype before A·v
            const at::Tensor A =
                round_to(at::bmm(q, k.transpose(1, 2)) * gates.intra, p.in);  // [H, L, L]
            o.baddbmm_(A, v).mul_(p.scale);
            store_rows(o_hl, s.batch, c0, c1, o);
            S = advance(S, k, v, gates, p.in);
        }
        out.ht[s.index].copy_(S);
    }
    out.h = kept.h();
    return out;
}

SimpleGlaGrads simple_gla_chunk_bwd_cpu(const SimpleGlaArgs& args, const at::Tensor& d_o,
                                        const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/true);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, V]
    SimpleGlaGrads grads;
    grads.dq = poisoned(args.q.sizes(), p.in);
    grads.dk = poisoned(args.k.sizes(), p.in);
    grads.dv = poisoned(args.v.sizes(), p.in);
    if (p.g.defined()) grads.dg = poisoned(args.g.sizes(), args.g.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor dq_hl = to_head_last(grads.dq, args.layout);  // [B, T, H, K]
    const at::Tensor dk_hl = to_head_last(grads.dk, args.layout);  // [B, T, H, K]
    const at::Tensor dv_hl = to_head_last(grads.dv, args.layout);  // [B, T, H, V]
    const at::Tensor dg_hl =
        p.g.defined() ? to_head_last(grads.dg, args.layout) : at::Tensor();  // [B, T, H]

    for (const Sequence& s : p.seqs) {
        const auto chunks = chunks_of(s, p.chunk);
        // reverse pass: dS = ∂L/∂(state at the end of chunk c), carried in fp32 and stored
        // per chunk in the state dtype; it needs only q, d_o and the gates
        std::vector<at::Tensor> dh(chunks.size());
        at::Tensor dS = at::zeros({p.H, p.K, p.V}, at::kFloat);  // [H, K, V]
        if (dht.defined()) dS = widen(dht[s.index]);
        for (size_t c = chunks.size(); c-- > 0;) {
            const auto [c0, c1] = chunks[c];
            dh[c] = dS.to(p.state);
            const at::Tensor q = load_rows(p.q, s.batch, c0, c1);        // [H, L, K]
            const at::Tensor d_out = load_rows(do_hl, s.batch, c0, c1);  // [H, L, V]
            const ChunkGates gates = chunk_gates(p, s.batch, c0, c1);
            const at::Tensor q_decayed = q * (gates.decay * p.scale).unsqueeze(2);  // [H, L, K]
            dS = at::baddbmm(dS * gates.last, q_decayed.transpose(1, 2), d_out);
        }
        if (p.h0.defined()) grads.dh0[s.index].copy_(dS);

        // forward pass: recompute the stored chunk states and take each chunk's gradients
        at::Tensor S = start_state(p, s.index);  // [H, K, V]
        for (size_t c = 0; c < chunks.size(); ++c) {
            const auto [c0, c1] = chunks[c];
            const int64_t L = c1 - c0;
            const at::Tensor q = load_rows(p.q, s.batch, c0, c1);        // [H, L, K]
            const at::Tensor k = load_rows(p.k, s.batch, c0, c1);        // [H, L, K]
            const at::Tensor v = load_rows(p.v, s.batch, c0, c1);        // [H, L, V]
            const at::Tensor d_out = load_rows(do_hl, s.batch, c0, c1);  // [H, L, V]
            const ChunkGates gates = chunk_gates(p, s.batch, c0, c1);
            const at::Tensor h = round_to(S, p.state);    // [H, K, V]
            const at::Tensor dhc = dh[c].to(at::kFloat);  // [H, K, V]

            // intra-chunk scores with decay and scale, kept in fp32; [i, j] with j ≤ i
            const at::Tensor ds =
                at::bmm(d_out, v.transpose(1, 2)).mul_(gates.intra).mul_(p.scale);  // [H, L, L]
            const at::Tensor A =
                at::bmm(q, k.transpose(1, 2)).mul_(gates.intra).mul_(p.scale);  // [H, L, L]

            // inter-chunk part (through h and dh) plus intra-chunk part (through the scores)
            const at::Tensor q_scale = (gates.decay * p.scale).unsqueeze(2);          // [H, L, 1]
            const at::Tensor to_end = gates.to_end.unsqueeze(2);                      // [H, L, 1]
            const at::Tensor dq_inter = at::bmm(d_out, h.transpose(1, 2)) * q_scale;  // [H, L, K]
            const at::Tensor dk_inter = at::bmm(v, dhc.transpose(1, 2)) * to_end;     // [H, L, K]
            const at::Tensor dv_inter = at::bmm(k, dhc) * to_end;                     // [H, L, V]
            const at::Tensor dq = at::baddbmm(dq_inter, ds, k);                       // [H, L, K]
            const at::Tensor dk = at::baddbmm(dk_inter, ds.transpose(1, 2), q);       // [H, L, K]
            const at::Tensor dv = at::baddbmm(dv_inter, A.transpose(1, 2), d_out);    // [H, L, V]
            store_rows(dq_hl, s.batch, c0, c1, dq);
            store_rows(dk_hl, s.batch, c0, c1, dk);
            store_rows(dv_hl, s.batch, c0, c1, dv);

            if (p.g.defined()) {
                // ∂L/∂G_i = q_i·dq_i − k_i·dk_i, plus on the last row the carry
                // exp(G_last)⟨h, dh⟩ + Σ_j k_j·dk_inter_j (README.md derives it)
                at::Tensor dG = (q * dq).sum(2) - (k * dk).sum(2);  // [H, L]
                const at::Tensor state_carry =
                    gates.last.view({p.H}) * (h * dhc).sum({1, 2});     // [H]
                const at::Tensor k_carry = (k * dk_inter).sum({1, 2});  // [H]
                dG.select(1, L - 1).add_(state_carry + k_carry);
                // dg_t = Σ_{i ≥ t in the chunk} dG_i, a reverse running sum in fp32
                float* d = dG.data_ptr<float>();
                for (int64_t hh = 0; hh < p.H; ++hh) {
                    float acc = 0.0f;
                    for (int64_t i = L; i-- > 0;) d[hh * L + i] = acc += d[hh * L + i];
                }
                dg_hl[s.batch].slice(0, c0, c1).copy_(dG.t());  // [L, H]
            }
            S = advance(S, k, v, gates, p.in);
        }
    }
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
    at::Tensor decay;  // [L] exp(g_t) in fp32
};

Lane load_lane(const Problem& p, const Sequence& s, int64_t h) {
    Lane lane;
    lane.L = s.length();
    lane.q = widen(p.q[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.k = widen(p.k[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.v = widen(p.v[s.batch].slice(0, s.begin, s.end).select(1, h));
    if (p.g.defined())
        lane.decay = widen(p.g[s.batch].slice(0, s.begin, s.end).select(1, h)).exp_();
    else if (p.g_gamma.defined())
        lane.decay = p.g_gamma[h].exp().expand({lane.L}).contiguous();
    else
        lane.decay = at::ones({lane.L}, at::kFloat);
    return lane;
}

/// The lane's starting state in fp32: h0[n, h] widened, or zeros.
at::Tensor lane_start(const Problem& p, int64_t n, int64_t h) {
    return p.h0.defined() ? widen(p.h0[n][h]) : at::zeros({p.K, p.V}, at::kFloat);  // [K, V]
}

/// S ← a·S + k vᵀ in place; with q given, also o = Sᵀ (scale·q) of the new S.
void step(float* S, const float* k, const float* v, float a, int64_t K, int64_t V,
          const float* q = nullptr, float scale = 0.0f, float* o = nullptr) {
    if (o) std::fill(o, o + V, 0.0f);
    for (int64_t i = 0; i < K; ++i) {
        float* Si = S + i * V;
        const float ki = k[i];
        for (int64_t j = 0; j < V; ++j) Si[j] = a * Si[j] + ki * v[j];
        if (o) {
            // FLA's fused_recurrent scales q before the product
            const float qi = scale * q[i];
            for (int64_t j = 0; j < V; ++j) o[j] += qi * Si[j];
        }
    }
}

/// Runs `lane_fn(sequence, head)` over every (sequence, head) pair, in parallel; each pair
/// writes disjoint elements of the results.
template <typename F>
void for_each_lane(const Problem& p, const F& lane_fn) {
    cpu::for_each_lane(p.seqs, p.H, lane_fn);
}

}  // namespace

SimpleGlaFwd simple_gla_recurrent_fwd_cpu(const SimpleGlaArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/false);
    SimpleGlaFwd out;
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
            step(Sp, k + t * p.K, v + t * p.V, a[t], p.K, p.V, q + t * p.K, p.scale, op + t * p.V);
        o_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(o);
        out.ht[s.index][h].copy_(S);
    });
    return out;
}

SimpleGlaGrads simple_gla_recurrent_bwd_cpu(const SimpleGlaArgs& args, const at::Tensor& d_o,
                                            const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/false);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, V]
    SimpleGlaGrads grads;
    grads.dq = poisoned(args.q.sizes(), p.in);
    grads.dk = poisoned(args.k.sizes(), p.in);
    grads.dv = poisoned(args.v.sizes(), p.in);
    if (p.g.defined()) grads.dg = poisoned(args.g.sizes(), args.g.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor dq_hl = to_head_last(grads.dq, args.layout);  // [B, T, H, K]
    const at::Tensor dk_hl = to_head_last(grads.dk, args.layout);  // [B, T, H, K]
    const at::Tensor dv_hl = to_head_last(grads.dv, args.layout);  // [B, T, H, V]
    const at::Tensor dg_hl =
        p.g.defined() ? to_head_last(grads.dg, args.layout) : at::Tensor();  // [B, T, H]
    const int64_t K = p.K, V = p.V;
    const bool with_dg = p.g.defined();

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
            step(Sp, k + t * K, v + t * V, a[t], K, V);
            for (int64_t i = 0; i < K; ++i)
                dqp[t * K + i] = p.scale * dot(Sp + i * V, dop + t * V, V);
        }

        // reverse: dS = ∂L/∂S_t; per segment, recompute the states before each step from
        // its checkpoint, then walk it backwards
        at::Tensor dS = at::zeros({K, V}, at::kFloat);  // [K, V]
        if (dht.defined()) dS = widen(dht[s.index][h]);
        at::Tensor dk = at::empty({L, K}, at::kFloat);  // [L, K]
        at::Tensor dv = at::zeros({L, V}, at::kFloat);  // [L, V]
        at::Tensor dg = at::empty({L}, at::kFloat);     // [L]
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
                step(next, k + t * K, v + t * V, a[t], K, V);
            }
            for (int64_t t = t1; t-- > t0;) {
                const float* prev = bp + (t - t0) * K * V;
                const float* do_t = dop + t * V;
                const float* vt = v + t * V;
                float* dvt = dvp + t * V;
                float state_dot = 0.0f;
                for (int64_t i = 0; i < K; ++i) {
                    float* dSi = dSp + i * V;
                    const float sq = p.scale * q[t * K + i];
                    const float ki = k[t * K + i];
                    for (int64_t j = 0; j < V; ++j) dSi[j] += sq * do_t[j];
                    dkp[t * K + i] = dot(dSi, vt, V);
                    if (with_dg) state_dot += dot(prev + i * V, dSi, V);
                    for (int64_t j = 0; j < V; ++j) {
                        dvt[j] += ki * dSi[j];
                        dSi[j] *= a[t];
                    }
                }
                // dg_t = exp(g_t)·⟨S_{t-1}, dS_t⟩
                dgp[t] = a[t] * state_dot;
            }
        }

        dq_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dq);
        dk_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dk);
        dv_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dv);
        if (with_dg) dg_hl[s.batch].slice(0, s.begin, s.end).select(1, h).copy_(dg);
        if (p.h0.defined()) grads.dh0[s.index][h].copy_(dS);
    });
    return grads;
}

}  // namespace lav::kernels
