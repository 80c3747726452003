// kernels/rwkv7/rwkv7_cpu.cpp — rwkv7 (DPLR / IPLR) on the CPU through LibTorch: chunk and
// recurrent variants, forward and backward, rounding where the precision contract says. Not a
// reference: it computes in fp32 like the GPU kernels it stands in for (see README.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

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
#include "rwkv7/rwkv7.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "rwkv7";

using cpu::poisoned;
using cpu::widen;

// ---- arguments ----

/// The validated arguments: head_last views of the inputs and the dtypes of the contract.
struct Problem {
    at::Tensor q, w, k, a, b;  // [B, T, H, K] head_last views; w undefined for IPLR
    at::Tensor v;              // [B, T, H, V]
    at::Tensor h0;             // [N, H, K, V] in its own dtype; undefined: zeros
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

Problem make_problem(const Rwkv7Args& a, bool chunked) {
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined() && a.a.defined() && a.b.defined(),
              "rwkv7 cpu needs q, k, v, a and b");
    Problem p;
    p.in = a.q.scalar_type();
    for (const auto& [x, name] : {std::pair{&a.q, "q"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"},
                                  std::pair{&a.a, "a"}, std::pair{&a.b, "b"}}) {
        cpu::check_float_cpu(kFamily, *x, name);
        LAV_CHECK(x->dim() == 4, "rwkv7 cpu: ", name, " must be 4-d, got ", x->sizes());
        // FLA's kernels load q, k, v, a and b with one element type
        LAV_CHECK(x->scalar_type() == p.in, "rwkv7 cpu: q, k, v, a and b must share one dtype, ",
                  "got q ", scalar_type_name(p.in), " and ", name, " ",
                  scalar_type_name(x->scalar_type()));
    }
    p.q = to_head_last(a.q, a.layout);
    p.k = to_head_last(a.k, a.layout);
    p.v = to_head_last(a.v, a.layout);
    p.a = to_head_last(a.a, a.layout);
    p.b = to_head_last(a.b, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    p.V = p.v.size(3);
    LAV_CHECK(p.K > 0 && p.V > 0 && p.H > 0, "rwkv7 cpu: H, K and V must be positive");
    LAV_CHECK(
        p.k.sizes() == p.q.sizes() && p.a.sizes() == p.q.sizes() && p.b.sizes() == p.q.sizes(),
        "rwkv7 cpu: k, a and b must have q's shape ", a.q.sizes());
    if (a.w.defined()) {
        cpu::check_float_cpu(kFamily, a.w, "w");
        LAV_CHECK(a.w.sizes() == a.q.sizes(), "rwkv7 cpu: w must have q's shape ", a.q.sizes(),
                  ", got ", a.w.sizes());
        p.w = to_head_last(a.w, a.layout);
    }
    LAV_CHECK(p.v.dim() == 4 && p.v.size(0) == p.B && p.v.size(1) == p.T && p.v.size(2) == p.H,
              "rwkv7 cpu: v must agree with q in B, T and H, got ", a.v.sizes(), " and ",
              a.q.sizes());
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

at::Tensor check_cotangents(const Problem& p, const Rwkv7Args& a, const at::Tensor& d_o,
                            const at::Tensor& dht) {
    cpu::check_d_o(kFamily, d_o, a.v.sizes());
    if (dht.defined()) check_state_shape(dht, "dht", p);
    return to_head_last(d_o, a.layout);
}

// ---- tensor helpers ----

/// x rounded to `dtype` and read back in fp32: a storage point of the contract. Under reverse
/// mode the rounding passes the gradient unchanged (x + (round(x) − x) with the difference
/// detached), so the chunk backward's gradients stay fp32 as the contract says.
at::Tensor round_to(const at::Tensor& x, c10::ScalarType dtype) {
    if (!x.requires_grad()) return cpu::round_to(x, dtype);
    return dtype == at::kFloat ? x : x + (cpu::round_to(x, dtype) - x).detach();
}

/// The [L, D] fp32 rows of one lane (sequence s, head h) of a head_last tensor.
at::Tensor lane_rows(const at::Tensor& x_hl, const Sequence& s, int64_t h, int64_t c0, int64_t c1) {
    return widen(x_hl[s.batch].slice(0, c0, c1).select(1, h));
}

at::Tensor lane_start(const Problem& p, int64_t n, int64_t h) {
    return p.h0.defined() ? widen(p.h0[n][h]) : at::zeros({p.K, p.V}, at::kFloat);  // [K, V]
}

template <typename F>
void for_each_lane(const Problem& p, const F& lane_fn) {
    cpu::for_each_lane(p.seqs, p.H, lane_fn);
}

// ---- chunk variant ----

/// One chunk's inputs, fp32 [L, D]; w is [L, K] zeros for IPLR.
struct ChunkIn {
    at::Tensor q, w, k, v, a, b;
};

ChunkIn load_chunk(const Problem& p, const Sequence& s, int64_t h, int64_t c0, int64_t c1) {
    ChunkIn c{lane_rows(p.q, s, h, c0, c1),
              p.w.defined() ? lane_rows(p.w, s, h, c0, c1) : at::zeros({c1 - c0, p.K}, at::kFloat),
              lane_rows(p.k, s, h, c0, c1),
              lane_rows(p.v, s, h, c0, c1),
              lane_rows(p.a, s, h, c0, c1),
              lane_rows(p.b, s, h, c0, c1)};
    return c;
}

/// [L, L, K] exp(X_i − Y_j) where `keep` ([L, L]) holds, else 0: masked to −∞ before the exp,
/// since outside the mask the difference can be large and positive, and inf·0 is NaN.
at::Tensor pair_decay(const at::Tensor& X, const at::Tensor& Y, const at::Tensor& keep) {
    const int64_t L = X.size(0);
    return (X.unsqueeze(1) - Y.unsqueeze(0))
        .masked_fill(keep.logical_not().view({L, L, 1}), -std::numeric_limits<float>::infinity())
        .exp();
}

/// One chunk of the DPLR chunk form (README.md derives it) from the state S entering it
/// ([K, V], fp32): returns o ([L, V], fp32) and the state leaving it. Every op is a LibTorch op
/// on fp32 tensors, so the same function serves the backward under reverse mode.
std::pair<at::Tensor, at::Tensor> chunk_step(const Problem& p, const ChunkIn& c,
                                             const at::Tensor& S) {
    const int64_t L = c.q.size(0);
    const at::Tensor Gi = c.w.cumsum(0);                                              // [L, K]
    const at::Tensor Ge = at::constant_pad_nd(Gi.narrow(0, 0, L - 1), {0, 0, 1, 0});  // [L, K]
    const at::Tensor upto = at::ones({L, L}, at::kBool).tril();
    const at::Tensor before = at::ones({L, L}, at::kBool).tril(-1);
    const at::Tensor Dq = pair_decay(Gi, Gi, upto);    // [L, L, K] exp(Gi_i − Gi_j), j ≤ i
    const at::Tensor Da = pair_decay(Ge, Gi, before);  // [L, L, K] exp(Ge_i − Gi_j), j < i
    const auto scores = [](const at::Tensor& D, const at::Tensor& x, const at::Tensor& y) {
        return (D * x.unsqueeze(1) * y.unsqueeze(0)).sum(2);  // [L, L]
    };
    const at::Tensor A_ab = scores(Da, c.a, c.b);
    const at::Tensor A_ak = scores(Da, c.a, c.k);
    // the stored chunk state (FLA's h) is what v_new and o read
    const at::Tensor h = round_to(S, p.state);  // [K, V]
    // T = (I − A_ab)^{-1} by one unit lower triangular solve in fp32
    const at::Tensor eye = at::eye(L, at::kFloat);
    const at::Tensor Tm = at::linalg_solve_triangular(eye - A_ab, eye, /*upper=*/false,
                                                      /*left=*/true, /*unitriangular=*/true);
    const at::Tensor W = round_to(at::mm(Tm, c.a * Ge.exp()), p.in);     // [L, K]
    const at::Tensor U = round_to(at::mm(Tm, at::mm(A_ak, c.v)), p.in);  // [L, V]
    // v_new: the values each row's a reads from the state before it
    const at::Tensor v_new = round_to(U + at::mm(W, h), p.in);  // [L, V]
    const at::Tensor A_qk = round_to(scores(Dq, c.q, c.k), p.in);
    const at::Tensor A_qb = round_to(scores(Dq, c.q, c.b), p.in);
    const at::Tensor q_decayed = round_to(c.q * Gi.exp(), p.in);  // [L, K]
    const at::Tensor o =
        (at::mm(A_qk, c.v) + at::mm(A_qb, v_new) + at::mm(q_decayed, h)) * p.scale;  // [L, V]
    const at::Tensor G_last = Gi.narrow(0, L - 1, 1);                                // [1, K]
    const at::Tensor to_end = (G_last - Gi).exp();                                   // [L, K]
    const at::Tensor k_decayed = round_to(c.k * to_end, p.in);                       // [L, K]
    const at::Tensor b_decayed = round_to(c.b * to_end, p.in);                       // [L, K]
    const at::Tensor S_next =
        S * G_last.exp().t() + at::mm(k_decayed.t(), c.v) + at::mm(b_decayed.t(), v_new);  // [K, V]
    return {o, S_next};
}

std::vector<std::pair<int64_t, int64_t>> chunks_of(const Sequence& s, int64_t C) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c0 = s.begin; c0 < s.end; c0 += C) out.emplace_back(c0, std::min(c0 + C, s.end));
    return out;
}

/// The result tensors of a backward, poisoned, and their head_last views.
struct GradBuffers {
    Rwkv7Grads grads;
    at::Tensor dq, dw, dk, dv, da, db;  // head_last views
};

GradBuffers grad_buffers(const Problem& p, const Rwkv7Args& args) {
    GradBuffers g;
    g.grads.dq = poisoned(args.q.sizes(), p.in);
    g.grads.dk = poisoned(args.k.sizes(), p.in);
    g.grads.dv = poisoned(args.v.sizes(), p.in);
    g.grads.da = poisoned(args.a.sizes(), p.in);
    g.grads.db = poisoned(args.b.sizes(), p.in);
    if (p.w.defined()) g.grads.dw = poisoned(args.w.sizes(), args.w.scalar_type());
    if (p.h0.defined()) g.grads.dh0 = poisoned({p.N, p.H, p.K, p.V}, p.state);
    g.dq = to_head_last(g.grads.dq, args.layout);
    g.dk = to_head_last(g.grads.dk, args.layout);
    g.dv = to_head_last(g.grads.dv, args.layout);
    g.da = to_head_last(g.grads.da, args.layout);
    g.db = to_head_last(g.grads.db, args.layout);
    if (p.w.defined()) g.dw = to_head_last(g.grads.dw, args.layout);
    return g;
}

/// Writes [L, D] fp32 rows into one lane of a head_last view, rounding once to its dtype.
void store(const at::Tensor& dst_hl, const Sequence& s, int64_t h, int64_t c0, int64_t c1,
           const at::Tensor& x) {
    dst_hl[s.batch].slice(0, c0, c1).select(1, h).copy_(x);
}

}  // namespace

Rwkv7Fwd rwkv7_chunk_fwd_cpu(const Rwkv7Args& args) {
    const Problem p = make_problem(args, /*chunked=*/true);
    Rwkv7Fwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    const cpu::ChunkStateStore kept(args.keep_chunk_states, p.seqs, p.chunk, {p.H, p.K, p.V},
                                    p.state);
    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        at::Tensor S = lane_start(p, s.index, h);  // [K, V] carried in fp32
        for (const auto& [c0, c1] : chunks_of(s, p.chunk)) {
            // the same rounding of S that chunk_step reads as the stored h
            kept.store(s, c0, round_to(S, p.state), h);
            const auto [o, next] = chunk_step(p, load_chunk(p, s, h, c0, c1), S);
            store(o_hl, s, h, c0, c1, o);
            S = next;
        }
        out.ht[s.index][h].copy_(S);
    });
    out.h = kept.h();
    return out;
}

Rwkv7Grads rwkv7_chunk_bwd_cpu(const Rwkv7Args& args, const at::Tensor& d_o,
                               const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/true);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, V]
    GradBuffers g = grad_buffers(p, args);
    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        // reverse mode is per thread state; the lane turns it on whatever its caller chose
        const c10::AutoGradMode grad_mode(true);
        const auto chunks = chunks_of(s, p.chunk);
        // forward: the fp32 state entering every chunk
        std::vector<at::Tensor> entering(chunks.size());
        at::Tensor S = lane_start(p, s.index, h);  // [K, V]
        for (size_t c = 0; c < chunks.size(); ++c) {
            entering[c] = S;
            S = chunk_step(p, load_chunk(p, s, h, chunks[c].first, chunks[c].second), S).second;
        }
        // reverse: each chunk's forward again under reverse mode, seeded with d_o and dS
        at::Tensor dS = dht.defined() ? widen(dht[s.index][h]) : at::zeros({p.K, p.V}, at::kFloat);
        for (size_t c = chunks.size(); c-- > 0;) {
            const auto [c0, c1] = chunks[c];
            ChunkIn in = load_chunk(p, s, h, c0, c1);
            std::vector<at::Tensor*> leaves = {&in.q, &in.k, &in.v, &in.a, &in.b};
            if (p.w.defined()) leaves.push_back(&in.w);
            std::vector<at::Tensor> wrt;
            for (at::Tensor* x : leaves) {
                x->requires_grad_(true);
                wrt.push_back(*x);
            }
            const at::Tensor S_in = entering[c].clone().requires_grad_(true);
            wrt.push_back(S_in);
            const auto [o, next] = chunk_step(p, in, S_in);
            const at::Tensor seed_o = lane_rows(do_hl, s, h, c0, c1);  // [L, V]
            const at::Tensor loss = (o * seed_o).sum() + (next * dS).sum();
            const std::vector<at::Tensor> d = torch::autograd::grad({loss}, wrt);
            store(g.dq, s, h, c0, c1, d[0]);
            store(g.dk, s, h, c0, c1, d[1]);
            store(g.dv, s, h, c0, c1, d[2]);
            store(g.da, s, h, c0, c1, d[3]);
            store(g.db, s, h, c0, c1, d[4]);
            if (p.w.defined()) store(g.dw, s, h, c0, c1, d[5]);
            dS = d.back();
        }
        if (p.h0.defined()) g.grads.dh0[s.index][h].copy_(dS);
    });
    return g.grads;
}

namespace {

// ---- recurrent variant ----

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
    at::Tensor q, k, a, b;  // [L, K]
    at::Tensor v;           // [L, V]
    at::Tensor decay;       // [L, K] exp(w_t); ones for IPLR
};

Lane load_lane(const Problem& p, const Sequence& s, int64_t h) {
    Lane lane;
    lane.L = s.length();
    lane.q = lane_rows(p.q, s, h, s.begin, s.end);
    lane.k = lane_rows(p.k, s, h, s.begin, s.end);
    lane.v = lane_rows(p.v, s, h, s.begin, s.end);
    lane.a = lane_rows(p.a, s, h, s.begin, s.end);
    lane.b = lane_rows(p.b, s, h, s.begin, s.end);
    lane.decay = p.w.defined() ? lane_rows(p.w, s, h, s.begin, s.end).exp_()
                               : at::ones({lane.L, p.K}, at::kFloat);
    return lane;
}

/// Step t in place: ha = Sᵀ a_t (into `ha`, [V]), then S ← diag(d_t) S + b_t haᵀ + k_t v_tᵀ.
void step(float* S, float* ha, const Lane& lane, int64_t t, int64_t K, int64_t V) {
    const float* a = lane.a.data_ptr<float>() + t * K;
    const float* b = lane.b.data_ptr<float>() + t * K;
    const float* k = lane.k.data_ptr<float>() + t * K;
    const float* d = lane.decay.data_ptr<float>() + t * K;
    const float* v = lane.v.data_ptr<float>() + t * V;
    std::fill(ha, ha + V, 0.0f);
    for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) ha[j] += a[i] * S[i * V + j];
    for (int64_t i = 0; i < K; ++i) {
        float* Si = S + i * V;
        for (int64_t j = 0; j < V; ++j) Si[j] = d[i] * Si[j] + b[i] * ha[j] + k[i] * v[j];
    }
}

}  // namespace

Rwkv7Fwd rwkv7_recurrent_fwd_cpu(const Rwkv7Args& args) {
    const Problem p = make_problem(args, /*chunked=*/false);
    Rwkv7Fwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    const int64_t K = p.K, V = p.V;
    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(p, s, h);
        at::Tensor S = lane_start(p, s.index, h);           // [K, V]
        at::Tensor o = at::empty({lane.L, V}, at::kFloat);  // [L, V]
        std::vector<float> ha(V);
        float* Sp = S.data_ptr<float>();
        const float* q = lane.q.data_ptr<float>();
        float* op = o.data_ptr<float>();
        for (int64_t t = 0; t < lane.L; ++t) {
            step(Sp, ha.data(), lane, t, K, V);
            float* ot = op + t * V;
            std::fill(ot, ot + V, 0.0f);
            for (int64_t i = 0; i < K; ++i) {
                // FLA's fused_recurrent scales q before the product
                const float qi = p.scale * q[t * K + i];
                for (int64_t j = 0; j < V; ++j) ot[j] += qi * Sp[i * V + j];
            }
        }
        store(o_hl, s, h, s.begin, s.end, o);
        out.ht[s.index][h].copy_(S);
    });
    return out;
}

Rwkv7Grads rwkv7_recurrent_bwd_cpu(const Rwkv7Args& args, const at::Tensor& d_o,
                                   const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/false);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, V]
    GradBuffers g = grad_buffers(p, args);
    const int64_t K = p.K, V = p.V;
    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(p, s, h);
        const int64_t L = lane.L;
        const at::Tensor d_out = lane_rows(do_hl, s, h, s.begin, s.end);  // [L, V]
        const float* q = lane.q.data_ptr<float>();
        const float* k = lane.k.data_ptr<float>();
        const float* v = lane.v.data_ptr<float>();
        const float* a = lane.a.data_ptr<float>();
        const float* b = lane.b.data_ptr<float>();
        const float* dec = lane.decay.data_ptr<float>();
        const float* dop = d_out.data_ptr<float>();
        std::vector<float> ha(V), gb(V);

        // forward: dq_t = scale·S_t d_o_t, keeping the state before every P-th step so the
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
            step(Sp, ha.data(), lane, t, K, V);
            for (int64_t i = 0; i < K; ++i)
                dqp[t * K + i] = p.scale * dot(Sp + i * V, dop + t * V, V);
        }

        at::Tensor dS = dht.defined() ? widen(dht[s.index][h]) : at::zeros({K, V}, at::kFloat);
        at::Tensor dk = at::empty({L, K}, at::kFloat);                      // [L, K]
        at::Tensor dv = at::empty({L, V}, at::kFloat);                      // [L, V]
        at::Tensor da = at::empty({L, K}, at::kFloat);                      // [L, K]
        at::Tensor db = at::empty({L, K}, at::kFloat);                      // [L, K]
        at::Tensor dw = at::empty({L, K}, at::kFloat);                      // [L, K]
        at::Tensor before = at::empty({std::min(P, L), K, V}, at::kFloat);  // [P, K, V]
        float* dSp = dS.data_ptr<float>();
        float* dkp = dk.data_ptr<float>();
        float* dvp = dv.data_ptr<float>();
        float* dap = da.data_ptr<float>();
        float* dbp = db.data_ptr<float>();
        float* dwp = dw.data_ptr<float>();
        float* bp = before.data_ptr<float>();
        for (int64_t seg = segments; seg-- > 0;) {
            const int64_t t0 = seg * P, t1 = std::min(t0 + P, L);
            std::copy(ckp + seg * K * V, ckp + (seg + 1) * K * V, bp);
            for (int64_t t = t0; t + 1 < t1; ++t) {
                float* next = bp + (t - t0 + 1) * K * V;
                std::copy(bp + (t - t0) * K * V, next, next);
                step(next, ha.data(), lane, t, K, V);
            }
            for (int64_t t = t1; t-- > t0;) {
                const float* prev = bp + (t - t0) * K * V;
                const float* do_t = dop + t * V;
                const float* vt = v + t * V;
                // ha = S_{t-1}ᵀ a_t, recomputed
                std::fill(ha.begin(), ha.end(), 0.0f);
                for (int64_t i = 0; i < K; ++i)
                    for (int64_t j = 0; j < V; ++j) ha[j] += a[t * K + i] * prev[i * V + j];
                // dS becomes ∂L/∂S_t; gb = dS_tᵀ b_t gathers over the rows first
                float* dvt = dvp + t * V;
                std::fill(dvt, dvt + V, 0.0f);
                std::fill(gb.begin(), gb.end(), 0.0f);
                for (int64_t i = 0; i < K; ++i) {
                    float* dSi = dSp + i * V;
                    const float sq = p.scale * q[t * K + i];
                    const float ki = k[t * K + i], bi = b[t * K + i];
                    for (int64_t j = 0; j < V; ++j) dSi[j] += sq * do_t[j];
                    dkp[t * K + i] = dot(dSi, vt, V);
                    dbp[t * K + i] = dot(dSi, ha.data(), V);
                    dwp[t * K + i] = dec[t * K + i] * dot(prev + i * V, dSi, V);
                    for (int64_t j = 0; j < V; ++j) {
                        dvt[j] += ki * dSi[j];
                        gb[j] += bi * dSi[j];
                    }
                }
                // da_t = S_{t-1} gb; ∂L/∂S_{t-1} = diag(d_t) dS_t + a_t gbᵀ
                for (int64_t i = 0; i < K; ++i) {
                    float* dSi = dSp + i * V;
                    const float ai = a[t * K + i], di = dec[t * K + i];
                    dap[t * K + i] = dot(prev + i * V, gb.data(), V);
                    for (int64_t j = 0; j < V; ++j) dSi[j] = di * dSi[j] + ai * gb[j];
                }
            }
        }
        store(g.dq, s, h, s.begin, s.end, dq);
        store(g.dk, s, h, s.begin, s.end, dk);
        store(g.dv, s, h, s.begin, s.end, dv);
        store(g.da, s, h, s.begin, s.end, da);
        store(g.db, s, h, s.begin, s.end, db);
        if (p.w.defined()) store(g.dw, s, h, s.begin, s.end, dw);
        if (p.h0.defined()) g.grads.dh0[s.index][h].copy_(dS);
    });
    return g.grads;
}

}  // namespace lav::kernels
