// kernels/simple_gla/simple_gla_cpu.cpp — simple_gla on the CPU through LibTorch: chunk and
// recurrent variants, forward and backward, rounding exactly where the precision contract says.
// Not a reference: it computes in fp32 like the GPU kernels it stands in for (see README.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/cpu/cpu_args.h"
#include "common/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/varlen.h"
#include "simple_gla/simple_gla.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "simple_gla";

using cpu::poisoned;
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

// ---- chunk variant ----

// Chunks are handled a run at a time: consecutive chunks of one sequence that have the same
// length, batched over chunks and heads as [n·H, L, D]. Only the chunk-to-chunk state
// recurrence loops over chunks; every other op takes the whole run. That keeps the number of
// ATen calls per chunk (and a tracer's work) small without changing any result: each product
// is still one [L, D] matrix per (chunk, head), and every elementwise op the same op on the
// same values.

/// Consecutive chunks of one sequence, all of L rows, from row `begin`.
struct ChunkRun {
    int64_t begin = 0;
    int64_t n = 0;  // chunks
    int64_t L = 0;  // rows each
    int64_t end() const { return begin + n * L; }
};

// A run holds about ten tensors of [n·H, L, max(K, V, L)] fp32 at once. Runs are cut so that
// one of these stays near kRunBytes: that saves most of the per-chunk ATen calls while the
// run's working set stays small enough for the allocator to serve run after run from the
// same memory. Larger runs have glibc hand their memory back to the system between runs and
// page-fault it in again: at 1 MiB, B=2 T=1024 H=4 K=V=64 took up to 4000 page faults a
// forward and backward, against a few hundred at 256 KiB.
constexpr int64_t kRunBytes = 256 << 10;

/// The chunks of a sequence as runs: its full chunks in runs of equal length, then the
/// shorter last chunk, if any, alone.
std::vector<ChunkRun> chunk_runs(const Problem& p, const Sequence& s) {
    const int64_t C = p.chunk, full = s.length() / C;
    const int64_t chunk_bytes = p.H * C * std::max({p.K, p.V, C}) * sizeof(float);
    const int64_t per_run = std::max<int64_t>(1, kRunBytes / chunk_bytes);
    std::vector<ChunkRun> runs;
    for (int64_t c = 0; c < full; c += per_run)
        runs.push_back({s.begin + c * C, std::min(per_run, full - c), C});
    if (s.length() % C != 0) runs.push_back({s.begin + full * C, 1, s.length() % C});
    return runs;
}

/// The rows of `run` in batch row b of a head_last tensor [B, T, H, ...] as a view
/// [n, H, L, ...], chunks then heads first. One as_strided call, where indexing, slicing,
/// splitting and transposing would take four views.
at::Tensor run_view(const at::Tensor& x_hl, int64_t b, const ChunkRun& run) {
    std::vector<int64_t> sizes = {run.n, x_hl.size(2), run.L};
    std::vector<int64_t> strides = {run.L * x_hl.stride(1), x_hl.stride(2), x_hl.stride(1)};
    for (int64_t d = 3; d < x_hl.dim(); ++d) {
        sizes.push_back(x_hl.size(d));
        strides.push_back(x_hl.stride(d));
    }
    return x_hl.as_strided(sizes, strides,
                           x_hl.storage_offset() + b * x_hl.stride(0) + run.begin * x_hl.stride(1));
}

/// The rows of `run` in a head_last tensor [B, T, H, D], widened to fp32: [n·H, L, D].
at::Tensor load_run(const at::Tensor& x_hl, int64_t b, const ChunkRun& run) {
    return widen(run_view(x_hl, b, run)).view({run.n * x_hl.size(2), run.L, x_hl.size(3)});
}

/// Writes x [n·H, L, ...] into the rows of `run` in a head_last tensor, rounding once to its
/// dtype.
void store_run(const at::Tensor& dst_hl, int64_t b, const ChunkRun& run, const at::Tensor& x) {
    const at::Tensor dst = run_view(dst_hl, b, run);
    dst.copy_(x.view(dst.sizes()));
}

/// Block c of H rows (the heads of chunk c) of x [n·H, ...]. One as_strided call, where a
/// slice is two.
at::Tensor chunk_block(const at::Tensor& x, int64_t c, int64_t H) {
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes[0] = H;
    return x.as_strided(sizes, x.strides(), x.storage_offset() + c * H * x.stride(0));
}

/// x rounded to `dtype` in place and kept in fp32: cpu::round_to's values through one copy
/// each way, three ATen calls where to() takes eight (each adds _to_copy and empty_strided).
/// x must be a temporary of the caller's own.
at::Tensor round_inplace(at::Tensor x, c10::ScalarType dtype) {
    if (dtype != at::kFloat) x.copy_(at::empty(x.sizes(), dtype).copy_(x));
    return x;
}

/// The score scale as a 0-dim fp32 tensor: multiplying by it is one ATen call, by a Scalar
/// four more (its conversion to a tensor), and the products are the same.
at::Tensor scale_tensor(const Problem& p) { return at::scalar_tensor(p.scale, at::kFloat); }

/// The state a sequence starts from, in fp32: h0 widened from whatever dtype it has, or zeros.
at::Tensor start_state(const Problem& p, int64_t n) {
    return p.h0.defined() ? widen(p.h0[n]) : at::zeros({p.H, p.K, p.V}, at::kFloat);  // [H, K, V]
}

/// The decay factors of each chunk of a run, all from the fp32 chunk-local cumsum G.
struct ChunkGates {
    at::Tensor G;       // [n·H, L, 1] inclusive cumsum of g within the chunk
    at::Tensor decay;   // [n·H, L, 1] exp(G_i)
    at::Tensor to_end;  // [n·H, L, 1] exp(G_last − G_i)
    at::Tensor last;    // [n·H, 1, 1] exp(G_last)
};

ChunkGates chunk_gates(const Problem& p, int64_t b, const ChunkRun& run) {
    const int64_t rows = run.n * p.H, L = run.L;
    const bool gated = p.g.defined() || p.g_gamma.defined();
    ChunkGates gates;
    gates.G = gated ? at::empty({rows, L, 1}, at::kFloat) : at::zeros({rows, L, 1}, at::kFloat);
    float* G = gates.G.data_ptr<float>();
    if (p.g.defined()) {
        // g read in place through its strides and widened as copy_ would, rather than copied
        // to fp32 first (three ATen calls a run)
        AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, p.g.scalar_type(), "gates", [&] {
            const int64_t st = p.g.stride(1), sh = p.g.stride(2);
            const scalar_t* g = p.g.data_ptr<scalar_t>() + b * p.g.stride(0) + run.begin * st;
            // a running fp32 sum: at::cumsum accumulates fp32 in double on the CPU
            for (int64_t r = 0; r < rows; ++r) {
                const scalar_t* gr = g + (r / p.H) * L * st + (r % p.H) * sh;  // chunk, head
                float acc = 0.0f;
                for (int64_t i = 0; i < L; ++i)
                    G[r * L + i] = acc += static_cast<float>(gr[i * st]);
            }
        });
    } else if (p.g_gamma.defined()) {
        const float* gamma = p.g_gamma.data_ptr<float>();
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < L; ++i)
                G[r * L + i] = gamma[r % p.H] * static_cast<float>(i + 1);
    }
    // one as_strided call, where slice is two
    const at::Tensor G_last =
        gates.G.as_strided({rows, 1, 1}, gates.G.strides(), L - 1);  // [n·H, 1, 1]
    gates.decay = gates.G.exp();
    gates.to_end = (G_last - gates.G).exp_();
    gates.last = G_last.exp();
    return gates;
}

/// exp(G_i − G_j) for j ≤ i, else 0: [n·H, L, L].
at::Tensor intra_decay(const ChunkGates& gates) {
    // zeroed after the exp, not multiplied by a mask: above the diagonal G_i − G_j > 0 can
    // overflow to inf, and inf·0 is NaN
    return (gates.G - gates.G.transpose(1, 2)).exp_().tril_();
}

/// The state recurrence across the chunks of a run, X ← exp(G_last)·X + aᵀb with chunk c's
/// rows of a [n·H, L, K] and b [n·H, L, V], from X0 [H, K, V]. Returns the n + 1 states as
/// [(n + 1)·H, K, V]: in chunk order block c enters chunk c and block n leaves the last;
/// `reverse` walks from the last chunk, block n being X0 and block c the result of chunk c.
at::Tensor scan_chunks(const at::Tensor& X0, const at::Tensor& a, const at::Tensor& b,
                       const ChunkGates& gates, int64_t n, bool reverse) {
    const int64_t H = X0.size(0);
    at::Tensor X = at::empty({(n + 1) * H, X0.size(1), X0.size(2)}, at::kFloat);
    at::Tensor from = chunk_block(X, reverse ? n : 0, H);
    from.copy_(X0);
    const at::Tensor a_t = a.transpose(1, 2);  // [n·H, K, L]
    for (int64_t i = 0; i < n; ++i) {
        const int64_t c = reverse ? n - 1 - i : i;
        at::Tensor to = chunk_block(X, reverse ? c : c + 1, H);
        at::baddbmm_out(to, from * chunk_block(gates.last, c, H), chunk_block(a_t, c, H),
                        chunk_block(b, c, H));
        from = to;
    }
    return X;
}

/// The decayed v of the state update, rounded to the input dtype: FLA's chunk_fwd_h rounds
/// v ⊙ exp(G_last − G) before the matmul.
at::Tensor decayed_v(const at::Tensor& v, const ChunkGates& gates, c10::ScalarType in) {
    return round_inplace(v * gates.to_end, in);  // [n·H, L, V]
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
    const at::Tensor scale = scale_tensor(p);
    for (const Sequence& s : p.seqs) {
        // the carried state stays fp32; only its stored copies are rounded
        at::Tensor S = start_state(p, s.index);  // [H, K, V]
        for (const ChunkRun& run : chunk_runs(p, s)) {
            const int64_t rows = run.n * p.H;
            const at::Tensor q = load_run(p.q, s.batch, run);  // [n·H, L, K]
            const at::Tensor k = load_run(p.k, s.batch, run);  // [n·H, L, K]
            const at::Tensor v = load_run(p.v, s.batch, run);  // [n·H, L, V]
            const ChunkGates gates = chunk_gates(p, s.batch, run);
            const at::Tensor states =
                scan_chunks(S, k, decayed_v(v, gates, p.in), gates, run.n, false);
            S = states.slice(0, rows);  // [H, K, V]
            // the stored chunk states (FLA's h) are what the output pass reads
            // rounded in place: the blocks past the first n (S) are not touched
            const at::Tensor h = round_inplace(states.slice(0, 0, rows), p.state);  // [n·H, K, V]
            kept.store_chunks(s, run.begin, h);
            at::Tensor o = at::bmm(q, h).mul_(gates.decay);  // [n·H, L, V]
            // FLA's chunk_fwd_o casts the masked, decayed scores to v's dtype before A·v
            const at::Tensor A =
                round_inplace(at::bmm(q, k.transpose(1, 2)).mul_(intra_decay(gates)), p.in);
            o.baddbmm_(A, v).mul_(scale);
            store_run(o_hl, s.batch, run, o);
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
    const at::Tensor scale = scale_tensor(p);

    for (const Sequence& s : p.seqs) {
        const std::vector<ChunkRun> runs = chunk_runs(p, s);
        // reverse pass: dS = ∂L/∂(state at the end of chunk c), carried in fp32 and stored
        // per chunk in the state dtype; it needs only q, d_o and the gates
        std::vector<at::Tensor> dh(runs.size());  // per run [n·H, K, V], rounded, in fp32
        // each run's gates, kept for the forward pass (a few [n·H, L] tensors)
        std::vector<ChunkGates> run_gates(runs.size());
        at::Tensor dS = dht.defined() ? widen(dht[s.index])
                                      : at::zeros({p.H, p.K, p.V}, at::kFloat);  // [H, K, V]
        for (size_t r = runs.size(); r-- > 0;) {
            const at::Tensor q = load_run(p.q, s.batch, runs[r]);        // [n·H, L, K]
            const at::Tensor d_out = load_run(do_hl, s.batch, runs[r]);  // [n·H, L, V]
            const ChunkGates& gates = run_gates[r] = chunk_gates(p, s.batch, runs[r]);
            const at::Tensor q_decayed = q * (gates.decay * scale);  // [n·H, L, K]
            const at::Tensor dstates = scan_chunks(dS, q_decayed, d_out, gates, runs[r].n, true);
            // rounded in place: block 0 (dS) is not touched
            dh[r] = round_inplace(dstates.slice(0, p.H), p.state);
            dS = dstates.slice(0, 0, p.H);
        }
        if (p.h0.defined()) grads.dh0[s.index].copy_(dS);

        // forward pass: recompute the stored chunk states and take each run's gradients
        at::Tensor S = start_state(p, s.index);  // [H, K, V]
        for (size_t r = 0; r < runs.size(); ++r) {
            const ChunkRun& run = runs[r];
            const int64_t rows = run.n * p.H, L = run.L;
            const at::Tensor q = load_run(p.q, s.batch, run);        // [n·H, L, K]
            const at::Tensor k = load_run(p.k, s.batch, run);        // [n·H, L, K]
            const at::Tensor v = load_run(p.v, s.batch, run);        // [n·H, L, V]
            const at::Tensor d_out = load_run(do_hl, s.batch, run);  // [n·H, L, V]
            const ChunkGates& gates = run_gates[r];
            const at::Tensor states =
                scan_chunks(S, k, decayed_v(v, gates, p.in), gates, run.n, false);
            S = states.slice(0, rows);
            const at::Tensor h = round_inplace(states.slice(0, 0, rows), p.state);  // [n·H, K, V]
            const at::Tensor& dhc = dh[r];                                          // [n·H, K, V]

            // intra-chunk scores with decay and scale, kept in fp32; [i, j] with j ≤ i
            at::Tensor ds, A;  // [n·H, L, L]
            {
                const at::Tensor intra = intra_decay(gates);
                ds = at::bmm(d_out, v.transpose(1, 2)).mul_(intra).mul_(scale);
                A = at::bmm(q, k.transpose(1, 2)).mul_(intra).mul_(scale);
            }

            // each gradient is its inter-chunk part (through h or dh), to which the intra-chunk
            // part (through the scores) is added in place; ∂L/∂G_i = q_i·dq_i − k_i·dk_i, plus
            // on the last row the carry exp(G_last)⟨h, dh⟩ + Σ_j k_j·dk_inter_j (README.md
            // derives it), is gathered as they go
            const bool with_dg = p.g.defined();
            at::Tensor dG;  // [n·H, L]
            {
                const at::Tensor q_scale = gates.decay * scale;                   // [n·H, L, 1]
                at::Tensor dq = at::bmm(d_out, h.transpose(1, 2)).mul_(q_scale);  // [n·H, L, K]
                dq.baddbmm_(ds, k);
                store_run(dq_hl, s.batch, run, dq);
                if (with_dg) dG = (q * dq).sum(2);
            }
            at::Tensor carry;  // [n·H]
            {
                at::Tensor dk = at::bmm(v, dhc.transpose(1, 2)).mul_(gates.to_end);  // [n·H, L, K]
                // the carry takes dk's inter-chunk part, before the intra-chunk part is added
                if (with_dg) {
                    const at::Tensor k_carry = (k * dk).sum({1, 2});
                    const at::Tensor state_carry = gates.last.view({rows}) * (h * dhc).sum({1, 2});
                    carry = state_carry + k_carry;
                }
                dk.baddbmm_(ds.transpose(1, 2), q);
                store_run(dk_hl, s.batch, run, dk);
                if (with_dg) dG.sub_((k * dk).sum(2));
            }
            {
                at::Tensor dv = at::bmm(k, dhc).mul_(gates.to_end);  // [n·H, L, V]
                dv.baddbmm_(A.transpose(1, 2), d_out);
                store_run(dv_hl, s.batch, run, dv);
            }

            if (with_dg) {
                dG.select(1, L - 1).add_(carry);
                // dg_t = Σ_{i ≥ t in the chunk} dG_i, a reverse running sum in fp32
                float* d = dG.data_ptr<float>();
                for (int64_t row = 0; row < rows; ++row) {
                    float acc = 0.0f;
                    for (int64_t i = L; i-- > 0;) d[row * L + i] = acc += d[row * L + i];
                }
                store_run(dg_hl, s.batch, run, dG);
            }
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
