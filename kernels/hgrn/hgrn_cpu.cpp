// kernels/hgrn/hgrn_cpu.cpp — hgrn on the CPU through LibTorch: chunk and recurrent variants,
// forward and backward, rounding exactly where the precision contract says. Not a reference: it
// computes in fp32 like the GPU kernels it stands in for (see README.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/cpu/cpu_args.h"
#include "common/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/varlen.h"
#include "hgrn/hgrn.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "hgrn";

using cpu::poisoned;
using cpu::widen;

// ---- arguments ----

/// The validated arguments: head_last views of the inputs and the dtypes of the contract.
struct Problem {
    at::Tensor x;   // [B, T, H, K] head_last view of the caller's tensor
    at::Tensor g;   // [B, T, H, K] in the gate dtype
    at::Tensor h0;  // [N, H, K] in its own dtype; undefined: zeros
    std::vector<Sequence> seqs;
    int64_t B = 0, T = 0, H = 0, K = 0, N = 0;
    int64_t chunk = 0;
    c10::ScalarType in = c10::ScalarType::Float;
    c10::ScalarType state = c10::ScalarType::Float;
    c10::ScalarType out = c10::ScalarType::Float;
};

void check_state_shape(const at::Tensor& x, const char* name, const Problem& p) {
    cpu::check_shape(kFamily, x, name, "[N, H, K]", {p.N, p.H, p.K});
}

Problem make_problem(const HgrnArgs& a, bool chunked) {
    // Preconditions
    LAV_CHECK(a.x.defined() && a.g.defined(), "hgrn cpu needs x and g");
    cpu::check_float_cpu(kFamily, a.x, "x");
    cpu::check_float_cpu(kFamily, a.g, "g");
    LAV_CHECK(a.x.dim() == 4, "hgrn cpu: x must be 4-d, got ", a.x.sizes());
    Problem p;
    p.in = a.x.scalar_type();
    p.x = to_head_last(a.x, a.layout);
    p.g = to_head_last(a.g, a.layout);
    p.B = p.x.size(0);
    p.T = p.x.size(1);
    p.H = p.x.size(2);
    p.K = p.x.size(3);
    LAV_CHECK(p.H > 0 && p.K > 0, "hgrn cpu: H and K must be positive");
    LAV_CHECK(a.g.sizes() == a.x.sizes(), "hgrn cpu: g must have x's shape ", a.x.sizes(), ", got ",
              a.g.sizes());

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
    return p;
}

/// d_o as a head_last view, checked against o's shape; dht checked against the state shape.
at::Tensor check_cotangents(const Problem& p, const HgrnArgs& a, const at::Tensor& d_o,
                            const at::Tensor& dht) {
    cpu::check_d_o(kFamily, d_o, a.x.sizes());
    if (dht.defined()) check_state_shape(dht, "dht", p);
    return to_head_last(d_o, a.layout);
}

// ---- tensor helpers ----

/// x rounded to `dtype` and read back in fp32: a storage point of the contract.
at::Tensor round_to(const at::Tensor& x, c10::ScalarType dtype) {
    return dtype == at::kFloat ? x.clone() : x.to(dtype).to(at::kFloat);
}

/// One head of one sequence, widened to fp32 and contiguous.
struct Lane {
    int64_t L = 0;
    at::Tensor x;  // [L, K]
    at::Tensor g;  // [L, K] log decay in fp32
};

Lane load_lane(const Problem& p, const Sequence& s, int64_t h) {
    Lane lane;
    lane.L = s.length();
    lane.x = widen(p.x[s.batch].slice(0, s.begin, s.end).select(1, h));
    lane.g = widen(p.g[s.batch].slice(0, s.begin, s.end).select(1, h));
    return lane;
}

/// Rows [begin, end) of one head of a head_last tensor, as a [L, K] view.
at::Tensor lane_view(const at::Tensor& x_hl, const Sequence& s, int64_t h) {
    return x_hl[s.batch].slice(0, s.begin, s.end).select(1, h);
}

/// The lane's starting state in fp32: h0[n, h] widened, or zeros.
at::Tensor lane_start(const Problem& p, int64_t n, int64_t h) {
    return p.h0.defined() ? widen(p.h0[n][h]) : at::zeros({p.K}, at::kFloat);  // [K]
}

/// Runs `lane_fn(sequence, head)` over every (sequence, head) pair, in parallel; each pair
/// writes disjoint elements of the results.
template <typename F>
void for_each_lane(const Problem& p, const F& lane_fn) {
    cpu::for_each_lane(p.seqs, p.H, lane_fn);
}

/// Every chunk of a lane of length L as [begin, end) rows of the lane.
std::vector<std::pair<int64_t, int64_t>> chunks_of(int64_t L, int64_t C) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c0 = 0; c0 < L; c0 += C) out.emplace_back(c0, std::min(c0 + C, L));
    return out;
}

/// G[i] = Σ_{r ≤ i} g[r] over the rows [c0, c1) of a lane, a running fp32 sum per channel.
void chunk_cumsum(const float* g, int64_t c0, int64_t c1, int64_t K, float* G) {
    for (int64_t i = c0; i < c1; ++i)
        for (int64_t d = 0; d < K; ++d)
            G[(i - c0) * K + d] = (i == c0 ? 0.0f : G[(i - c0 - 1) * K + d]) + g[i * K + d];
}

}  // namespace

// ---- chunk variant ----

HgrnFwd hgrn_chunk_fwd_cpu(const HgrnArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/true);
    HgrnFwd out;
    out.o = poisoned(args.x.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, K]
    const int64_t K = p.K;
    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(p, s, h);
        const float* x = lane.x.data_ptr<float>();
        const float* g = lane.g.data_ptr<float>();
        at::Tensor o = at::empty({lane.L, K}, at::kFloat);                     // [L, K]
        at::Tensor G = at::empty({std::min(p.chunk, lane.L), K}, at::kFloat);  // [C, K]
        std::vector<float> y(K);
        float* op = o.data_ptr<float>();
        float* Gp = G.data_ptr<float>();
        // the carried state stays fp32; only its stored copies are rounded
        at::Tensor S = lane_start(p, s.index, h);  // [K]
        float* Sp = S.data_ptr<float>();
        for (const auto& [c0, c1] : chunks_of(lane.L, p.chunk)) {
            // the stored chunk state is what the output pass reads
            const at::Tensor hc = round_to(S, p.state);  // [K]
            const float* hp = hc.data_ptr<float>();
            chunk_cumsum(g, c0, c1, K, Gp);
            // the local scan from a zero state, then the entering state decayed by exp(G_i)
            std::fill(y.begin(), y.end(), 0.0f);
            for (int64_t i = c0; i < c1; ++i)
                for (int64_t d = 0; d < K; ++d) {
                    y[d] = std::exp(g[i * K + d]) * y[d] + x[i * K + d];
                    op[i * K + d] = y[d] + std::exp(Gp[(i - c0) * K + d]) * hp[d];
                }
            const float* last = Gp + (c1 - c0 - 1) * K;
            for (int64_t d = 0; d < K; ++d) Sp[d] = y[d] + std::exp(last[d]) * Sp[d];
        }
        lane_view(o_hl, s, h).copy_(o);
        out.ht[s.index][h].copy_(S);
    });
    return out;
}

HgrnGrads hgrn_chunk_bwd_cpu(const HgrnArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/true);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, K]
    HgrnGrads grads;
    grads.dx = poisoned(args.x.sizes(), p.in);
    grads.dg = poisoned(args.g.sizes(), args.g.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.H, p.K}, p.state);
    const at::Tensor dx_hl = to_head_last(grads.dx, args.layout);  // [B, T, H, K]
    const at::Tensor dg_hl = to_head_last(grads.dg, args.layout);  // [B, T, H, K]
    const int64_t K = p.K;

    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(p, s, h);
        const int64_t L = lane.L;
        const auto chunks = chunks_of(L, p.chunk);
        const at::Tensor d_out = widen(lane_view(do_hl, s, h));  // [L, K]
        const float* x = lane.x.data_ptr<float>();
        const float* g = lane.g.data_ptr<float>();
        const float* dop = d_out.data_ptr<float>();
        at::Tensor G = at::empty({std::min(p.chunk, L), K}, at::kFloat);  // [C, K]
        // z_i = do_i + exp(g_{i+1}) z_{i+1}: the reverse scan inside each chunk from a zero
        // gradient at its end
        at::Tensor z = at::empty({L, K}, at::kFloat);  // [L, K]
        float* Gp = G.data_ptr<float>();
        float* zp = z.data_ptr<float>();
        std::vector<float> carry(K);

        // reverse pass: dA = ∂L/∂(state at the end of chunk c), carried in fp32 and stored
        // per chunk in the state dtype
        std::vector<at::Tensor> dh(chunks.size());
        at::Tensor dA = dht.defined() ? widen(dht[s.index][h]) : at::zeros({K}, at::kFloat);
        float* dAp = dA.data_ptr<float>();
        for (size_t c = chunks.size(); c-- > 0;) {
            const auto [c0, c1] = chunks[c];
            dh[c] = round_to(dA, p.state);
            chunk_cumsum(g, c0, c1, K, Gp);
            std::fill(carry.begin(), carry.end(), 0.0f);
            for (int64_t i = c1; i-- > c0;)
                for (int64_t d = 0; d < K; ++d) {
                    zp[i * K + d] = dop[i * K + d] + carry[d];
                    carry[d] = std::exp(g[i * K + d]) * zp[i * K + d];
                }
            // the state entering the chunk reaches L through the chunk's rows (exp(G_0) z_0)
            // and through the end state (exp(Λ) dA)
            const float* last = Gp + (c1 - c0 - 1) * K;
            for (int64_t d = 0; d < K; ++d) dAp[d] = carry[d] + std::exp(last[d]) * dAp[d];
        }
        if (p.h0.defined()) grads.dh0[s.index][h].copy_(dA);

        // forward pass: recompute the stored chunk states and take each chunk's gradients
        at::Tensor dx = at::empty({L, K}, at::kFloat);  // [L, K]
        at::Tensor dg = at::empty({L, K}, at::kFloat);  // [L, K]
        float* dxp = dx.data_ptr<float>();
        float* dgp = dg.data_ptr<float>();
        std::vector<float> y(K);
        at::Tensor S = lane_start(p, s.index, h);  // [K]
        float* Sp = S.data_ptr<float>();
        for (size_t c = 0; c < chunks.size(); ++c) {
            const auto [c0, c1] = chunks[c];
            const at::Tensor hc = round_to(S, p.state);  // [K]
            const float* hp = hc.data_ptr<float>();
            const float* dhp = dh[c].data_ptr<float>();
            chunk_cumsum(g, c0, c1, K, Gp);
            const float* last = Gp + (c1 - c0 - 1) * K;
            std::fill(y.begin(), y.end(), 0.0f);
            for (int64_t i = c0; i < c1; ++i) {
                const float* Gi = Gp + (i - c0) * K;
                for (int64_t d = 0; d < K; ++d) {
                    // h_{i-1}: the stored chunk state, or the recomputed output of row i − 1
                    const float h_prev =
                        i == c0 ? hp[d] : y[d] + std::exp(Gp[(i - c0 - 1) * K + d]) * hp[d];
                    // dh_i = z_i + exp(Λ − G_i) dA: the chunk's own rows plus the later chunks
                    const float dh_i = zp[i * K + d] + std::exp(last[d] - Gi[d]) * dhp[d];
                    const float a = std::exp(g[i * K + d]);
                    dxp[i * K + d] = dh_i;
                    // dg_i = exp(g_i) h_{i-1} dh_i
                    dgp[i * K + d] = a * h_prev * dh_i;
                    y[d] = a * y[d] + x[i * K + d];
                }
            }
            for (int64_t d = 0; d < K; ++d) Sp[d] = y[d] + std::exp(last[d]) * Sp[d];
        }
        lane_view(dx_hl, s, h).copy_(dx);
        lane_view(dg_hl, s, h).copy_(dg);
    });
    return grads;
}

// ---- recurrent variant ----

HgrnFwd hgrn_recurrent_fwd_cpu(const HgrnArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/false);
    HgrnFwd out;
    out.o = poisoned(args.x.sizes(), p.out);
    out.ht = poisoned({p.N, p.H, p.K}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, K]
    const int64_t K = p.K;
    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(p, s, h);
        const float* x = lane.x.data_ptr<float>();
        const float* g = lane.g.data_ptr<float>();
        // the state lives in fp32 for the whole sequence
        at::Tensor S = lane_start(p, s.index, h);           // [K]
        at::Tensor o = at::empty({lane.L, K}, at::kFloat);  // [L, K]
        float* Sp = S.data_ptr<float>();
        float* op = o.data_ptr<float>();
        for (int64_t t = 0; t < lane.L; ++t)
            for (int64_t d = 0; d < K; ++d)
                op[t * K + d] = Sp[d] = std::exp(g[t * K + d]) * Sp[d] + x[t * K + d];
        lane_view(o_hl, s, h).copy_(o);
        out.ht[s.index][h].copy_(S);
    });
    return out;
}

HgrnGrads hgrn_recurrent_bwd_cpu(const HgrnArgs& args, const at::Tensor& d_o,
                                 const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/false);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, H, K]
    HgrnGrads grads;
    grads.dx = poisoned(args.x.sizes(), p.in);
    grads.dg = poisoned(args.g.sizes(), args.g.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.H, p.K}, p.state);
    const at::Tensor dx_hl = to_head_last(grads.dx, args.layout);  // [B, T, H, K]
    const at::Tensor dg_hl = to_head_last(grads.dg, args.layout);  // [B, T, H, K]
    const int64_t K = p.K;

    for_each_lane(p, [&](const Sequence& s, int64_t h) {
        const Lane lane = load_lane(p, s, h);
        const int64_t L = lane.L;
        const at::Tensor d_out = widen(lane_view(do_hl, s, h));  // [L, K]
        const float* x = lane.x.data_ptr<float>();
        const float* g = lane.g.data_ptr<float>();
        const float* dop = d_out.data_ptr<float>();

        // forward: keep the state before every P-th step, so that the reverse pass holds
        // O(√L) states instead of L
        const int64_t P = std::max<int64_t>(
            1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(L)))));
        const int64_t segments = (L + P - 1) / P;
        at::Tensor checkpoints = at::empty({segments, K}, at::kFloat);  // [segments, K]
        at::Tensor S = lane_start(p, s.index, h);                       // [K]
        float* Sp = S.data_ptr<float>();
        float* ckp = checkpoints.data_ptr<float>();
        for (int64_t t = 0; t < L; ++t) {
            if (t % P == 0) std::copy(Sp, Sp + K, ckp + (t / P) * K);
            for (int64_t d = 0; d < K; ++d) Sp[d] = std::exp(g[t * K + d]) * Sp[d] + x[t * K + d];
        }

        // reverse: dS = ∂L/∂h_t from the future; per segment, recompute the states before
        // each step from its checkpoint, then walk it backwards
        at::Tensor dS = dht.defined() ? widen(dht[s.index][h]) : at::zeros({K}, at::kFloat);
        at::Tensor dx = at::empty({L, K}, at::kFloat);  // [L, K]
        at::Tensor dg = at::empty({L, K}, at::kFloat);  // [L, K]
        // row i is the state before step t0 + i of the segment being walked
        at::Tensor before = at::empty({std::min(P, L), K}, at::kFloat);  // [P, K]
        float* dSp = dS.data_ptr<float>();
        float* dxp = dx.data_ptr<float>();
        float* dgp = dg.data_ptr<float>();
        float* bp = before.data_ptr<float>();
        for (int64_t seg = segments; seg-- > 0;) {
            const int64_t t0 = seg * P, t1 = std::min(t0 + P, L);
            std::copy(ckp + seg * K, ckp + (seg + 1) * K, bp);
            for (int64_t t = t0; t + 1 < t1; ++t)
                for (int64_t d = 0; d < K; ++d)
                    bp[(t - t0 + 1) * K + d] =
                        std::exp(g[t * K + d]) * bp[(t - t0) * K + d] + x[t * K + d];
            for (int64_t t = t1; t-- > t0;) {
                const float* prev = bp + (t - t0) * K;
                for (int64_t d = 0; d < K; ++d) {
                    const float a = std::exp(g[t * K + d]);
                    // dh_t = do_t + exp(g_{t+1}) dh_{t+1}; dx_t = dh_t; dg_t = exp(g_t) h_{t-1}
                    // dh_t
                    dSp[d] += dop[t * K + d];
                    dxp[t * K + d] = dSp[d];
                    dgp[t * K + d] = a * prev[d] * dSp[d];
                    dSp[d] *= a;
                }
            }
        }
        lane_view(dx_hl, s, h).copy_(dx);
        lane_view(dg_hl, s, h).copy_(dg);
        if (p.h0.defined()) grads.dh0[s.index][h].copy_(dS);
    });
    return grads;
}

}  // namespace lav::kernels
