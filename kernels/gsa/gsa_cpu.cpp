// kernels/gsa/gsa_cpu.cpp — gsa on the CPU through LibTorch: chunk and recurrent variants, forward
// and backward, rounding exactly where the precision contract says. Not a reference: it
// computes in fp32 like the GPU kernels it stands in for (see README.md).
#include <ATen/ATen.h>

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
#include "gsa/gsa.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "gsa";

using cpu::poisoned;
using cpu::round_to;
using cpu::widen;

// ---- arguments ----

/// The validated arguments: head_last views of the inputs and the dtypes of the contract.
struct Problem {
    at::Tensor q, k;  // [B, T, H, K] head_last views of the caller's tensors
    at::Tensor v;     // [B, T, H, V]
    at::Tensor s;     // [B, T, H, M]
    at::Tensor g;     // [B, T, H, M] in the gate dtype
    at::Tensor hk0;   // [N, H, K, M] in its own dtype; undefined: zeros
    at::Tensor hv0;   // [N, H, M, V] in its own dtype; undefined: zeros
    std::vector<Sequence> seqs;
    int64_t B = 0, T = 0, H = 0, K = 0, V = 0, M = 0, N = 0;
    int64_t chunk = 0;
    float scale = 0.0f;
    c10::ScalarType in = c10::ScalarType::Float;
    c10::ScalarType state_k = c10::ScalarType::Float;  // Hk: chunk, final, gradient
    c10::ScalarType state_v = c10::ScalarType::Float;  // Hv: chunk, final, gradient
    c10::ScalarType out = c10::ScalarType::Float;
};

void check_sizes(const at::Tensor& x, const char* name, at::IntArrayRef expected) {
    cpu::check_float_cpu(kFamily, x, name);
    LAV_CHECK(x.sizes() == expected, "gsa cpu: ", name, " must be ", expected, ", got ", x.sizes());
}

Problem make_problem(const GsaArgs& a, bool chunked) {
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined() && a.s.defined() && a.g.defined(),
              "gsa cpu needs q, k, v, s and g");
    for (const auto& [x, name] :
         {std::make_pair(&a.q, "q"), std::make_pair(&a.k, "k"), std::make_pair(&a.v, "v"),
          std::make_pair(&a.s, "s"), std::make_pair(&a.g, "g")}) {
        cpu::check_float_cpu(kFamily, *x, name);
        LAV_CHECK(x->dim() == 4, "gsa cpu: ", name, " must be 4-d, got ", x->sizes());
    }
    Problem p;
    p.in = a.q.scalar_type();
    LAV_CHECK(a.k.scalar_type() == p.in && a.v.scalar_type() == p.in && a.s.scalar_type() == p.in,
              "gsa cpu: q, k, v and s must share one dtype, got ", scalar_type_name(p.in), ", ",
              scalar_type_name(a.k.scalar_type()), ", ", scalar_type_name(a.v.scalar_type()), ", ",
              scalar_type_name(a.s.scalar_type()));
    p.q = to_head_last(a.q, a.layout);
    p.k = to_head_last(a.k, a.layout);
    p.v = to_head_last(a.v, a.layout);
    p.s = to_head_last(a.s, a.layout);
    p.g = to_head_last(a.g, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    p.V = p.v.size(3);
    p.M = p.s.size(3);
    LAV_CHECK(p.K > 0 && p.V > 0 && p.M > 0 && p.H > 0, "gsa cpu: H, K, V and M must be positive");
    LAV_CHECK(p.k.sizes() == p.q.sizes(), "gsa cpu: k must have q's shape ", a.q.sizes(), ", got ",
              a.k.sizes());
    const auto same_rows = [&](const at::Tensor& x) {
        return x.size(0) == p.B && x.size(1) == p.T && x.size(2) == p.H;
    };
    LAV_CHECK(same_rows(p.v) && same_rows(p.s),
              "gsa cpu: v and s must agree with q in B, T and H, got ", a.v.sizes(), ", ",
              a.s.sizes(), " and ", a.q.sizes());
    LAV_CHECK(p.g.sizes() == p.s.sizes(), "gsa cpu: g must have s's shape ", a.s.sizes(), ", got ",
              a.g.sizes());

    const std::vector<int64_t> cu = cpu::cu_seqlens_offsets(kFamily, a.cu_seqlens);
    p.seqs = sequences(p.B, p.T, cu);
    p.N = num_sequences(p.B, cu);

    // FLA takes fp32 initial states; here each may have any kernel dtype, widened on load
    if (a.hk0.defined()) check_sizes(a.hk0, "hk0", {p.N, p.H, p.K, p.M});
    if (a.hv0.defined()) check_sizes(a.hv0, "hv0", {p.N, p.H, p.M, p.V});
    p.hk0 = a.hk0;
    p.hv0 = a.hv0;
    p.state_k = cpu::checked_state_dtype(kFamily, a.hk_state());
    p.state_v = cpu::checked_state_dtype(kFamily, a.hv_state());
    p.out = cpu::checked_output_dtype(kFamily, a.output_dtype, p.in);
    if (chunked) p.chunk = cpu::checked_chunk_size(kFamily, a.chunk_size);
    p.scale = cpu::checked_scale(kFamily, a.scale, p.K);
    return p;
}

/// d_o as a head_last view, checked against o's shape; dhkt and dhvt against the states'.
at::Tensor check_cotangents(const Problem& p, const GsaArgs& a, const at::Tensor& d_o,
                            const at::Tensor& dhkt, const at::Tensor& dhvt) {
    cpu::check_d_o(kFamily, d_o, a.v.sizes());
    if (dhkt.defined()) check_sizes(dhkt, "dhkt", {p.N, p.H, p.K, p.M});
    if (dhvt.defined()) check_sizes(dhvt, "dhvt", {p.N, p.H, p.M, p.V});
    return to_head_last(d_o, a.layout);
}

// ---- tensor helpers ----

/// One head's rows [c0, c1) of batch row b of a head_last tensor: an [L, D] view.
at::Tensor rows_of(const at::Tensor& x_hl, int64_t b, int64_t head, int64_t c0, int64_t c1) {
    return x_hl[b].slice(0, c0, c1).select(1, head);
}

/// A state of (sequence n, head) in fp32: row of `h0` widened, or zeros of [a, b].
at::Tensor start_state(const at::Tensor& h0, int64_t n, int64_t head, int64_t a, int64_t b) {
    return h0.defined() ? widen(h0[n][head]) : at::zeros({a, b}, at::kFloat);
}

/// The gradient a (sequence n, head) receives at its end: dht's row widened, or zeros.
at::Tensor end_grad(const at::Tensor& dht, int64_t n, int64_t head, int64_t a, int64_t b) {
    return start_state(dht, n, head, a, b);
}

/// Poisoned results of the backward, with head_last views to write through.
struct GradBuffers {
    GsaGrads grads;
    at::Tensor dq, dk, dv, ds, dg;  // head_last views of grads
};

GradBuffers grad_buffers(const Problem& p, const GsaArgs& a) {
    GradBuffers b;
    b.grads.dq = poisoned(a.q.sizes(), p.in);
    b.grads.dk = poisoned(a.k.sizes(), p.in);
    b.grads.dv = poisoned(a.v.sizes(), p.in);
    b.grads.ds = poisoned(a.s.sizes(), p.in);
    b.grads.dg = poisoned(a.g.sizes(), a.g.scalar_type());
    if (p.hk0.defined()) b.grads.dhk0 = poisoned({p.N, p.H, p.K, p.M}, p.state_k);
    if (p.hv0.defined()) b.grads.dhv0 = poisoned({p.N, p.H, p.M, p.V}, p.state_v);
    b.dq = to_head_last(b.grads.dq, a.layout);  // [B, T, H, K]
    b.dk = to_head_last(b.grads.dk, a.layout);  // [B, T, H, K]
    b.dv = to_head_last(b.grads.dv, a.layout);  // [B, T, H, V]
    b.ds = to_head_last(b.grads.ds, a.layout);  // [B, T, H, M]
    b.dg = to_head_last(b.grads.dg, a.layout);  // [B, T, H, M]
    return b;
}

// ---- chunk variant ----

/// One chunk of one head, in fp32, with its decay factors from the fp32 chunk-local cumsum G.
struct Chunk {
    at::Tensor q, k;    // [L, K]
    at::Tensor v;       // [L, V]
    at::Tensor s;       // [L, M]
    at::Tensor G;       // [L, M] inclusive cumsum of g within the chunk
    at::Tensor decay;   // [L, M] exp(G_i)
    at::Tensor to_end;  // [L, M] exp(Λ − G_i), Λ = G_{L-1}
    at::Tensor last;    // [M] exp(Λ)
    at::Tensor D;       // [L, L, M] exp(G_i − G_j) for j ≤ i, else 0
};

Chunk load_chunk(const Problem& p, int64_t b, int64_t head, int64_t c0, int64_t c1) {
    const int64_t L = c1 - c0, M = p.M;
    Chunk c;
    c.q = widen(rows_of(p.q, b, head, c0, c1));
    c.k = widen(rows_of(p.k, b, head, c0, c1));
    c.v = widen(rows_of(p.v, b, head, c0, c1));
    c.s = widen(rows_of(p.s, b, head, c0, c1));
    c.G = widen(rows_of(p.g, b, head, c0, c1));
    float* G = c.G.data_ptr<float>();
    // a running fp32 sum in place: at::cumsum accumulates fp32 in double on the CPU
    for (int64_t i = 1; i < L; ++i)
        for (int64_t m = 0; m < M; ++m) G[i * M + m] += G[(i - 1) * M + m];
    const at::Tensor G_last = c.G[L - 1];  // [M]
    c.decay = c.G.exp();
    c.to_end = (G_last - c.G).exp();
    c.last = G_last.exp();
    // masked before the exp: above the diagonal G_i − G_j > 0 can overflow, and inf·0 is NaN
    const at::Tensor above = at::ones({L, L}, at::kBool).triu(1).unsqueeze(2);  // [L, L, 1]
    c.D = (c.G.unsqueeze(1) - c.G.unsqueeze(0))
              .masked_fill_(above, -std::numeric_limits<float>::infinity())
              .exp_();
    return c;
}

/// The key pass of one chunk and the softmax after it, from the stored chunk state hk.
struct KeyPass {
    at::Tensor q_scaled;  // [L, K] scale·q rounded to the input dtype (as FLA's kernels)
    at::Tensor A;         // [L, L] q_scaled kᵀ, lower triangle, rounded to the input dtype
    at::Tensor ok;        // [L, M] slot scores, rounded to the input dtype (FLA stores them in s's)
    at::Tensor p;         // [L, M] softmax(ok) in fp32
    at::Tensor qv;        // [L, M] p rounded to the input dtype: the value pass's query
};

KeyPass key_pass(const Problem& p, const Chunk& c, const at::Tensor& hk) {
    KeyPass r;
    r.q_scaled = round_to(c.q * p.scale, p.in);
    r.A = round_to(at::mm(r.q_scaled, c.k.t()).tril_(), p.in);
    // ok_i = (q_i hk) ⊙ exp(G_i) + Σ_{j≤i} A_ij s_j ⊙ exp(G_i − G_j)
    const at::Tensor intra = (c.D * r.A.unsqueeze(2) * c.s.unsqueeze(0)).sum(1);  // [L, M]
    r.ok = round_to(at::mm(r.q_scaled, hk).mul_(c.decay).add_(intra), p.in);
    r.p = r.ok.softmax(1);
    r.qv = round_to(r.p, p.in);
    return r;
}

/// Av_ij = Σ_m qv_im s_jm exp(G_im − G_jm) for j ≤ i, in fp32: the value pass's scores.
at::Tensor value_scores(const Chunk& c, const at::Tensor& qv) {
    return (c.D * qv.unsqueeze(1) * c.s.unsqueeze(0)).sum(2);  // [L, L]
}

/// Both states across one chunk, carried in fp32: Hk ← Hk·diag(exp(Λ)) + kᵀ ŝ and
/// Hv ← diag(exp(Λ))·Hv + ŝᵀ v, with ŝ = s ⊙ exp(Λ − G) rounded to the input dtype (as FLA's
/// chunk_fwd_h rounds the decayed operand before its product).
void advance(at::Tensor& Hk, at::Tensor& Hv, const Chunk& c, c10::ScalarType in) {
    const at::Tensor s_decayed = round_to(c.s * c.to_end, in);  // [L, M]
    Hk = at::addmm(Hk * c.last.unsqueeze(0), c.k.t(), s_decayed);
    Hv = at::addmm(Hv * c.last.unsqueeze(1), s_decayed.t(), c.v);
}

/// Every chunk of a sequence as [begin, end) row ranges.
std::vector<std::pair<int64_t, int64_t>> chunks_of(const Sequence& s, int64_t C) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c0 = s.begin; c0 < s.end; c0 += C) out.emplace_back(c0, std::min(c0 + C, s.end));
    return out;
}

/// dg_t = Σ_{i ≥ t in the chunk} dG_i: a reverse running sum over the rows, in place, in fp32.
void reverse_cumsum_rows(at::Tensor& dG) {
    const int64_t L = dG.size(0), M = dG.size(1);
    float* d = dG.data_ptr<float>();
    for (int64_t i = L - 1; i-- > 0;)
        for (int64_t m = 0; m < M; ++m) d[i * M + m] += d[(i + 1) * M + m];
}

}  // namespace

GsaFwd gsa_chunk_fwd_cpu(const GsaArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/true);
    GsaFwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.hkt = poisoned({p.N, p.H, p.K, p.M}, p.state_k);
    out.hvt = poisoned({p.N, p.H, p.M, p.V}, p.state_v);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    cpu::for_each_lane(p.seqs, p.H, [&](const Sequence& seq, int64_t head) {
        // the carried states stay fp32; only their stored copies are rounded
        at::Tensor Hk = start_state(p.hk0, seq.index, head, p.K, p.M);  // [K, M]
        at::Tensor Hv = start_state(p.hv0, seq.index, head, p.M, p.V);  // [M, V]
        for (const auto& [c0, c1] : chunks_of(seq, p.chunk)) {
            const Chunk c = load_chunk(p, seq.batch, head, c0, c1);
            // the stored chunk states (FLA's h of each pass) are what the outputs read
            const at::Tensor hk = round_to(Hk, p.state_k);  // [K, M]
            const at::Tensor hv = round_to(Hv, p.state_v);  // [M, V]
            const KeyPass kp = key_pass(p, c, hk);
            // value pass, as a gla chunk with key dimension M and scale 1: the decayed query and
            // the scores are rounded to the input dtype before their products (FLA's chunk_gla)
            const at::Tensor qv_decayed = round_to(kp.qv * c.decay, p.in);  // [L, M]
            const at::Tensor Av = round_to(value_scores(c, kp.qv), p.in);   // [L, L]
            const at::Tensor o = at::mm(qv_decayed, hv).addmm_(Av, c.v);    // [L, V]
            rows_of(o_hl, seq.batch, head, c0, c1).copy_(o);
            advance(Hk, Hv, c, p.in);
        }
        out.hkt[seq.index][head].copy_(Hk);
        out.hvt[seq.index][head].copy_(Hv);
    });
    return out;
}

GsaGrads gsa_chunk_bwd_cpu(const GsaArgs& args, const at::Tensor& d_o, const at::Tensor& dhkt,
                           const at::Tensor& dhvt) {
    const Problem p = make_problem(args, /*chunked=*/true);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dhkt, dhvt);  // [B, T, H, V]
    GradBuffers buf = grad_buffers(p, args);

    cpu::for_each_lane(p.seqs, p.H, [&](const Sequence& seq, int64_t head) {
        const auto chunks = chunks_of(seq, p.chunk);
        const int64_t b = seq.batch;
        // forward sweep: the stored chunk-start states, exactly as the forward stores them
        std::vector<at::Tensor> hk_stored(chunks.size()), hv_stored(chunks.size());
        {
            at::Tensor Hk = start_state(p.hk0, seq.index, head, p.K, p.M);  // [K, M]
            at::Tensor Hv = start_state(p.hv0, seq.index, head, p.M, p.V);  // [M, V]
            for (size_t i = 0; i < chunks.size(); ++i) {
                hk_stored[i] = Hk.to(p.state_k);
                hv_stored[i] = Hv.to(p.state_v);
                advance(Hk, Hv, load_chunk(p, b, head, chunks[i].first, chunks[i].second), p.in);
            }
        }

        // reverse sweep: dHk, dHv = ∂L/∂(states at the end of chunk i), carried in fp32; each
        // chunk reads them rounded to the state dtype (FLA's stored dh)
        at::Tensor dHk = end_grad(dhkt, seq.index, head, p.K, p.M);  // [K, M]
        at::Tensor dHv = end_grad(dhvt, seq.index, head, p.M, p.V);  // [M, V]
        for (size_t i = chunks.size(); i-- > 0;) {
            const auto [c0, c1] = chunks[i];
            const Chunk c = load_chunk(p, b, head, c0, c1);
            const at::Tensor d_out = widen(rows_of(do_hl, b, head, c0, c1));  // [L, V]
            const at::Tensor hk = hk_stored[i].to(at::kFloat);                // [K, M]
            const at::Tensor hv = hv_stored[i].to(at::kFloat);                // [M, V]
            const at::Tensor dhk = round_to(dHk, p.state_k);                  // [K, M]
            const at::Tensor dhv = round_to(dHv, p.state_v);                  // [M, V]
            const KeyPass kp = key_pass(p, c, hk);
            const at::Tensor s_decayed = c.s * c.to_end;  // [L, M]

            // value pass: o = (qv ⊙ e^G) hv + Av v, Hv_end = e^Λ ⊙ hv + (s ⊙ e^{Λ−G})ᵀ v
            const at::Tensor dAv = at::mm(d_out, c.v.t()).tril_();  // [L, L]
            const at::Tensor dqv = at::mm(d_out, hv.t())
                                       .mul_(c.decay)
                                       .add_((c.D * dAv.unsqueeze(2) * c.s.unsqueeze(0)).sum(1));
            const at::Tensor ds_v_inter = at::mm(c.v, dhv.t()).mul_(c.to_end);  // [L, M]
            const at::Tensor ds_v =
                ds_v_inter + (c.D * dAv.unsqueeze(2) * kp.qv.unsqueeze(1)).sum(0);  // [L, M]
            const at::Tensor dv =
                at::mm(value_scores(c, kp.qv).t(), d_out).addmm_(s_decayed, dhv);  // [L, V]
            // ∂L/∂G_i = qv_i ⊙ dqv_i − s_i ⊙ ds_i per slot, plus on the last row the carry
            // e^Λ ⊙ rowsum(hv ⊙ dhv) + Σ_j s_j ⊙ ds_inter_j (README.md derives it)
            at::Tensor dG = kp.qv * dqv - c.s * ds_v;  // [L, M]
            dG[-1].add_((hv * dhv).sum(1).mul_(c.last)).add_((c.s * ds_v_inter).sum(0));

            // softmax: dok = p ⊙ (dqv − ⟨p, dqv⟩), rounded to ok's dtype (FLA's softmax_bwd)
            const at::Tensor dok =
                round_to(kp.p * (dqv - (kp.p * dqv).sum(1, true)), p.in);  // [L, M]

            // key pass: ok = (q̂ hk) ⊙ e^G + Σ_j A_ij s_j ⊙ D_ij with q̂ = scale·q, A = q̂ kᵀ
            const at::Tensor dA = (c.D * dok.unsqueeze(1) * c.s.unsqueeze(0)).sum(2);  // [L, L]
            const at::Tensor dok_decayed = dok * c.decay;                              // [L, M]
            const at::Tensor dq =
                at::mm(dok_decayed, hk.t()).addmm_(dA, c.k).mul_(p.scale);                 // [L, K]
            const at::Tensor dk = at::mm(dA.t(), kp.q_scaled).addmm_(s_decayed, dhk.t());  // [L, K]
            const at::Tensor ds_k_inter = at::mm(c.k, dhk).mul_(c.to_end);                 // [L, M]
            const at::Tensor ds_k =
                ds_k_inter + (c.D * dok.unsqueeze(1) * kp.A.unsqueeze(2)).sum(0);  // [L, M]
            dG.add_(dok * kp.ok).sub_(c.s * ds_k);
            dG[-1].add_((hk * dhk).sum(0).mul_(c.last)).add_((c.s * ds_k_inter).sum(0));
            reverse_cumsum_rows(dG);

            rows_of(buf.dq, b, head, c0, c1).copy_(dq);
            rows_of(buf.dk, b, head, c0, c1).copy_(dk);
            rows_of(buf.dv, b, head, c0, c1).copy_(dv);
            rows_of(buf.ds, b, head, c0, c1).copy_(ds_v + ds_k);
            rows_of(buf.dg, b, head, c0, c1).copy_(dG);

            // to the chunk start: dHk ← dHk·diag(e^Λ) + q̂ᵀ (dok ⊙ e^G), dHv likewise
            dHk = at::addmm(dHk * c.last.unsqueeze(0), kp.q_scaled.t(), dok_decayed);
            dHv = at::addmm(dHv * c.last.unsqueeze(1), (kp.qv * c.decay).t(), d_out);
        }
        if (p.hk0.defined()) buf.grads.dhk0[seq.index][head].copy_(dHk);
        if (p.hv0.defined()) buf.grads.dhv0[seq.index][head].copy_(dHv);
    });
    return buf.grads;
}

namespace {

// ---- recurrent variant ----

/// One head of one sequence, widened to fp32 and contiguous.
struct Lane {
    int64_t L = 0;
    at::Tensor q, k;   // [L, K]
    at::Tensor v;      // [L, V]
    at::Tensor s;      // [L, M]
    at::Tensor decay;  // [L, M] exp(g_t) in fp32
};

Lane load_lane(const Problem& p, const Sequence& seq, int64_t head) {
    Lane lane;
    lane.L = seq.length();
    lane.q = widen(rows_of(p.q, seq.batch, head, seq.begin, seq.end));
    lane.k = widen(rows_of(p.k, seq.batch, head, seq.begin, seq.end));
    lane.v = widen(rows_of(p.v, seq.batch, head, seq.begin, seq.end));
    lane.s = widen(rows_of(p.s, seq.batch, head, seq.begin, seq.end));
    lane.decay = widen(rows_of(p.g, seq.batch, head, seq.begin, seq.end)).exp_();
    return lane;
}

/// Raw fp32 pointers to step t of a lane, and its sizes.
struct StepView {
    const float *q, *k, *v, *s, *a;
    int64_t K, V, M;
};

StepView at_step(const Lane& lane, const Problem& p, int64_t t) {
    return {lane.q.data_ptr<float>() + t * p.K,
            lane.k.data_ptr<float>() + t * p.K,
            lane.v.data_ptr<float>() + t * p.V,
            lane.s.data_ptr<float>() + t * p.M,
            lane.decay.data_ptr<float>() + t * p.M,
            p.K,
            p.V,
            p.M};
}

/// Hk ← Hk·diag(a) + k sᵀ and Hv ← diag(a)·Hv + s vᵀ, in place.
void step(float* Hk, float* Hv, const StepView& x) {
    for (int64_t i = 0; i < x.K; ++i) {
        float* row = Hk + i * x.M;
        for (int64_t m = 0; m < x.M; ++m) row[m] = x.a[m] * row[m] + x.k[i] * x.s[m];
    }
    for (int64_t m = 0; m < x.M; ++m) {
        float* row = Hv + m * x.V;
        for (int64_t j = 0; j < x.V; ++j) row[j] = x.a[m] * row[j] + x.s[m] * x.v[j];
    }
}

/// p = softmax(Hkᵀ (scale·q)) over the slots, in fp32 (FLA's fused_recurrent_gsa keeps ok
/// and the softmax in fp32).
void slot_probs(float* p, const float* Hk, const StepView& x, float scale) {
    std::fill(p, p + x.M, 0.0f);
    for (int64_t i = 0; i < x.K; ++i) {
        // FLA's fused_recurrent scales q before the product
        const float qi = scale * x.q[i];
        const float* row = Hk + i * x.M;
        for (int64_t m = 0; m < x.M; ++m) p[m] += qi * row[m];
    }
    const float top = *std::max_element(p, p + x.M);
    float sum = 0.0f;
    for (int64_t m = 0; m < x.M; ++m) sum += (p[m] = std::exp(p[m] - top));
    for (int64_t m = 0; m < x.M; ++m) p[m] /= sum;
}

}  // namespace

GsaFwd gsa_recurrent_fwd_cpu(const GsaArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/false);
    GsaFwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.hkt = poisoned({p.N, p.H, p.K, p.M}, p.state_k);
    out.hvt = poisoned({p.N, p.H, p.M, p.V}, p.state_v);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, H, V]
    cpu::for_each_lane(p.seqs, p.H, [&](const Sequence& seq, int64_t head) {
        const Lane lane = load_lane(p, seq, head);
        // both states live in fp32 for the whole sequence
        at::Tensor Hk = start_state(p.hk0, seq.index, head, p.K, p.M);  // [K, M]
        at::Tensor Hv = start_state(p.hv0, seq.index, head, p.M, p.V);  // [M, V]
        at::Tensor o = at::zeros({lane.L, p.V}, at::kFloat);            // [L, V]
        std::vector<float> probs(p.M);
        float* hk = Hk.data_ptr<float>();
        float* hv = Hv.data_ptr<float>();
        for (int64_t t = 0; t < lane.L; ++t) {
            const StepView x = at_step(lane, p, t);
            step(hk, hv, x);
            slot_probs(probs.data(), hk, x, p.scale);
            float* o_t = o.data_ptr<float>() + t * p.V;
            for (int64_t m = 0; m < p.M; ++m)
                for (int64_t j = 0; j < p.V; ++j) o_t[j] += probs[m] * hv[m * p.V + j];
        }
        rows_of(o_hl, seq.batch, head, seq.begin, seq.end).copy_(o);
        out.hkt[seq.index][head].copy_(Hk);
        out.hvt[seq.index][head].copy_(Hv);
    });
    return out;
}

GsaGrads gsa_recurrent_bwd_cpu(const GsaArgs& args, const at::Tensor& d_o, const at::Tensor& dhkt,
                               const at::Tensor& dhvt) {
    const Problem p = make_problem(args, /*chunked=*/false);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dhkt, dhvt);  // [B, T, H, V]
    GradBuffers buf = grad_buffers(p, args);
    const int64_t K = p.K, V = p.V, M = p.M, KM = K * M, MV = M * V;

    cpu::for_each_lane(p.seqs, p.H, [&](const Sequence& seq, int64_t head) {
        const Lane lane = load_lane(p, seq, head);
        const int64_t L = lane.L;
        const at::Tensor d_out = widen(rows_of(do_hl, seq.batch, head, seq.begin, seq.end));
        // forward: keep both states before every P-th step, so the reverse pass holds O(√L)
        // states instead of L
        const int64_t P = std::max<int64_t>(
            1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(L)))));
        const int64_t segments = (L + P - 1) / P;
        std::vector<float> ck_hk(segments * KM), ck_hv(segments * MV);
        at::Tensor Hk = start_state(p.hk0, seq.index, head, K, M);  // [K, M]
        at::Tensor Hv = start_state(p.hv0, seq.index, head, M, V);  // [M, V]
        for (int64_t t = 0; t < L; ++t) {
            if (t % P == 0) {
                std::copy_n(Hk.data_ptr<float>(), KM, ck_hk.begin() + (t / P) * KM);
                std::copy_n(Hv.data_ptr<float>(), MV, ck_hv.begin() + (t / P) * MV);
            }
            step(Hk.data_ptr<float>(), Hv.data_ptr<float>(), at_step(lane, p, t));
        }

        // reverse: dHk, dHv = ∂L/∂(states after step t); per segment, recompute the states
        // from its checkpoint, then walk it backwards through both passes
        at::Tensor dHk_t = end_grad(dhkt, seq.index, head, K, M);  // [K, M]
        at::Tensor dHv_t = end_grad(dhvt, seq.index, head, M, V);  // [M, V]
        float* dHk = dHk_t.data_ptr<float>();
        float* dHv = dHv_t.data_ptr<float>();
        at::Tensor dq = at::empty({L, K}, at::kFloat);  // [L, K]
        at::Tensor dk = at::empty({L, K}, at::kFloat);  // [L, K]
        at::Tensor dv = at::empty({L, V}, at::kFloat);  // [L, V]
        at::Tensor ds = at::empty({L, M}, at::kFloat);  // [L, M]
        at::Tensor dg = at::empty({L, M}, at::kFloat);  // [L, M]
        // entry i is the state after step t0 + i − 1 of the segment being walked
        std::vector<float> hk((std::min(P, L) + 1) * KM), hv((std::min(P, L) + 1) * MV);
        std::vector<float> probs(M), dp(M), dok(M), carry(M);
        for (int64_t seg = segments; seg-- > 0;) {
            const int64_t t0 = seg * P, t1 = std::min(t0 + P, L);
            std::copy_n(ck_hk.begin() + seg * KM, KM, hk.begin());
            std::copy_n(ck_hv.begin() + seg * MV, MV, hv.begin());
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t i = t - t0;
                std::copy_n(hk.begin() + i * KM, KM, hk.begin() + (i + 1) * KM);
                std::copy_n(hv.begin() + i * MV, MV, hv.begin() + (i + 1) * MV);
                step(hk.data() + (i + 1) * KM, hv.data() + (i + 1) * MV, at_step(lane, p, t));
            }
            for (int64_t t = t1; t-- > t0;) {
                const int64_t i = t - t0;
                const StepView x = at_step(lane, p, t);
                const float* Hk_t = hk.data() + (i + 1) * KM;
                const float* Hk_prev = hk.data() + i * KM;
                const float* Hv_t = hv.data() + (i + 1) * MV;
                const float* Hv_prev = hv.data() + i * MV;
                const float* do_t = d_out.data_ptr<float>() + t * V;
                float* ds_t = ds.data_ptr<float>() + t * M;
                float* dg_t = dg.data_ptr<float>() + t * M;
                float* dv_t = dv.data_ptr<float>() + t * V;
                float* dq_t = dq.data_ptr<float>() + t * K;
                float* dk_t = dk.data_ptr<float>() + t * K;
                slot_probs(probs.data(), Hk_t, x, p.scale);

                // value pass: o_t = Hv_tᵀ p_t
                std::fill(dv_t, dv_t + V, 0.0f);
                for (int64_t m = 0; m < M; ++m) {
                    float* dHv_m = dHv + m * V;
                    const float* Hv_m = Hv_t + m * V;
                    const float* Hv_prev_m = Hv_prev + m * V;
                    float dp_m = 0.0f, ds_m = 0.0f, decay_m = 0.0f;
                    for (int64_t j = 0; j < V; ++j) {
                        dHv_m[j] += probs[m] * do_t[j];
                        dp_m += Hv_m[j] * do_t[j];
                        ds_m += dHv_m[j] * x.v[j];
                        dv_t[j] += dHv_m[j] * x.s[m];
                        decay_m += Hv_prev_m[j] * dHv_m[j];
                        dHv_m[j] *= x.a[m];
                    }
                    dp[m] = dp_m;
                    ds_t[m] = ds_m;
                    // ∂/∂g_t of diag(exp(g_t))·Hv_{t-1}
                    dg_t[m] = x.a[m] * decay_m;
                }
                // softmax: dok = p ⊙ (dp − ⟨p, dp⟩)
                float pdp = 0.0f;
                for (int64_t m = 0; m < M; ++m) pdp += probs[m] * dp[m];
                for (int64_t m = 0; m < M; ++m) dok[m] = probs[m] * (dp[m] - pdp);

                // key pass: ok_t = Hk_tᵀ (scale·q_t)
                std::fill(carry.begin(), carry.end(), 0.0f);
                for (int64_t r = 0; r < K; ++r) {
                    float* dHk_r = dHk + r * M;
                    const float* Hk_r = Hk_t + r * M;
                    const float* Hk_prev_r = Hk_prev + r * M;
                    const float sq = p.scale * x.q[r];
                    float dq_r = 0.0f, dk_r = 0.0f;
                    for (int64_t m = 0; m < M; ++m) {
                        dHk_r[m] += sq * dok[m];
                        dq_r += Hk_r[m] * dok[m];
                        dk_r += dHk_r[m] * x.s[m];
                        ds_t[m] += dHk_r[m] * x.k[r];
                        carry[m] += Hk_prev_r[m] * dHk_r[m];
                        dHk_r[m] *= x.a[m];
                    }
                    dq_t[r] = p.scale * dq_r;
                    dk_t[r] = dk_r;
                }
                // ∂/∂g_t of Hk_{t-1}·diag(exp(g_t))
                for (int64_t m = 0; m < M; ++m) dg_t[m] += x.a[m] * carry[m];
            }
        }

        const auto store = [&](const at::Tensor& dst_hl, const at::Tensor& x) {
            rows_of(dst_hl, seq.batch, head, seq.begin, seq.end).copy_(x);
        };
        store(buf.dq, dq);
        store(buf.dk, dk);
        store(buf.dv, dv);
        store(buf.ds, ds);
        store(buf.dg, dg);
        if (p.hk0.defined()) buf.grads.dhk0[seq.index][head].copy_(dHk_t);
        if (p.hv0.defined()) buf.grads.dhv0[seq.index][head].copy_(dHv_t);
    });
    return buf.grads;
}

}  // namespace lav::kernels
