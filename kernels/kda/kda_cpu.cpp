// kernels/kda/kda_cpu.cpp — KDA on the CPU through LibTorch: chunk (WY) and recurrent variants,
// forward and backward, rounding exactly where the precision contract says. Not a reference:
// it computes in fp32 like the GPU kernels it stands in for (see README.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/cpu/cpu_args.h"
#include "common/cpu/cpu_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/varlen.h"
#include "kda/kda.h"

namespace lav::kernels {
namespace {

constexpr const char* kFamily = "kda";

using cpu::poisoned;
using cpu::round_to;
using cpu::widen;

// FLA's l2norm puts its epsilon inside the square root: x / sqrt(Σ x² + eps)
constexpr float kL2NormEps = 1e-6f;
// FLA's softplus returns x itself above this (fla/ops/utils/softplus.py)
constexpr float kSoftplusThreshold = 20.0f;

// ---- arguments ----

/// The validated arguments: head_last views of the inputs, the options and the dtypes.
struct Problem {
    at::Tensor q, k;     // [B, T, H, K] head_last views of the caller's tensors
    at::Tensor v;        // [B, T, HV, V]
    at::Tensor g;        // [B, T, HV, K]
    at::Tensor beta;     // [B, T, HV]
    at::Tensor A_log;    // [HV] fp32; undefined without the in-kernel gate
    at::Tensor dt_bias;  // [HV, K] fp32; undefined: none
    at::Tensor h0;       // [N, HV, K, V] in its own dtype; undefined: zeros
    std::vector<Sequence> seqs;
    int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, V = 0, N = 0;
    int64_t group = 1;  // HV / H
    int64_t chunk = 0;
    float scale = 0.0f;
    bool l2norm = false;
    bool gate_in_kernel = false;
    std::optional<float> lower_bound;
    bool beta_sigmoid = false;
    float beta_factor = 1.0f;  // 2 with allow_neg_eigval
    c10::ScalarType in = c10::ScalarType::Float;
    c10::ScalarType state = c10::ScalarType::Float;
    c10::ScalarType out = c10::ScalarType::Float;
};

void check_state_shape(const at::Tensor& x, const char* name, const Problem& p) {
    cpu::check_shape(kFamily, x, name, "[N, HV, K, V]", {p.N, p.HV, p.K, p.V});
}

/// A time-major tensor as a head_last view, checked against its expected head_last shape.
at::Tensor time_major(const at::Tensor& x, const char* name, Layout layout,
                      at::IntArrayRef expected) {
    cpu::check_float_cpu(kFamily, x, name);
    LAV_CHECK(x.dim() == static_cast<int64_t>(expected.size()), "kda cpu: ", name, " must be ",
              expected.size(), "-d, got ", x.sizes());
    at::Tensor hl = to_head_last(x, layout);
    LAV_CHECK(hl.sizes() == expected, "kda cpu: ", name, " must be ", expected,
              " in head_last order, got ", hl.sizes());
    return hl;
}

Problem make_problem(const KdaArgs& a, bool chunked) {
    // Preconditions
    LAV_CHECK(a.q.defined() && a.k.defined() && a.v.defined() && a.g.defined() && a.beta.defined(),
              "kda cpu needs q, k, v, g and beta");
    cpu::check_float_cpu(kFamily, a.q, "q");
    cpu::check_float_cpu(kFamily, a.k, "k");
    cpu::check_float_cpu(kFamily, a.v, "v");
    LAV_CHECK(a.q.dim() == 4 && a.v.dim() == 4, "kda cpu: q and v must be 4-d, got ", a.q.sizes(),
              " and ", a.v.sizes());
    Problem p;
    p.in = a.q.scalar_type();
    LAV_CHECK(a.k.scalar_type() == p.in && a.v.scalar_type() == p.in,
              "kda cpu: q, k and v must share one dtype, got ", scalar_type_name(a.q.scalar_type()),
              ", ", scalar_type_name(a.k.scalar_type()), ", ", scalar_type_name(a.v.scalar_type()));
    p.q = to_head_last(a.q, a.layout);
    p.B = p.q.size(0);
    p.T = p.q.size(1);
    p.H = p.q.size(2);
    p.K = p.q.size(3);
    const at::Tensor v_hl = to_head_last(a.v, a.layout);
    p.HV = v_hl.size(2);
    p.V = v_hl.size(3);
    LAV_CHECK(p.H > 0 && p.K > 0 && p.V > 0, "kda cpu: H, K and V must be positive");
    LAV_CHECK(p.HV > 0 && p.HV % p.H == 0, "kda cpu: value heads HV = ", p.HV,
              " must be a positive multiple of H = ", p.H);
    p.group = p.HV / p.H;
    p.k = time_major(a.k, "k", a.layout, {p.B, p.T, p.H, p.K});
    p.v = time_major(a.v, "v", a.layout, {p.B, p.T, p.HV, p.V});
    p.g = time_major(a.g, "g", a.layout, {p.B, p.T, p.HV, p.K});
    p.beta = time_major(a.beta, "beta", a.layout, {p.B, p.T, p.HV});

    p.l2norm = a.use_qk_l2norm_in_kernel;
    p.gate_in_kernel = a.use_gate_in_kernel;
    if (p.gate_in_kernel) {
        LAV_CHECK(a.A_log.defined(), "kda cpu: use_gate_in_kernel needs A_log");
        cpu::check_shape(kFamily, a.A_log, "A_log", "[HV]", {p.HV});
        p.A_log = a.A_log.to(at::kFloat).contiguous();
        if (a.dt_bias.defined()) {
            cpu::check_shape(kFamily, a.dt_bias, "dt_bias", "[HV * K]", {p.HV * p.K});
            p.dt_bias = a.dt_bias.to(at::kFloat).reshape({p.HV, p.K}).contiguous();
        }
    }
    if (a.lower_bound) {
        LAV_CHECK(p.gate_in_kernel && *a.lower_bound < 0.0 && std::isfinite(*a.lower_bound),
                  "kda cpu: lower_bound needs use_gate_in_kernel and must be negative, got ",
                  *a.lower_bound);
        p.lower_bound = static_cast<float>(*a.lower_bound);
    }
    p.beta_sigmoid = a.use_beta_sigmoid_in_kernel;
    LAV_CHECK(!a.allow_neg_eigval || p.beta_sigmoid,
              "kda cpu: allow_neg_eigval needs use_beta_sigmoid_in_kernel");
    p.beta_factor = a.allow_neg_eigval ? 2.0f : 1.0f;

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
at::Tensor check_cotangents(const Problem& p, const KdaArgs& a, const at::Tensor& d_o,
                            const at::Tensor& dht) {
    cpu::check_d_o(kFamily, d_o, a.v.sizes());
    if (dht.defined()) check_state_shape(dht, "dht", p);
    return to_head_last(d_o, a.layout);
}

// ---- tensor helpers ----

// Everything inside a lane works on one head and at most kPieceRows rows at a time: ATen ops
// on such [1, ≤64, D] slices stay under its parallel grain (32768 elements), so none of them
// forks the OpenMP pool, whose fork, join and spin-wait per call cost more than these ops.
constexpr int64_t kPieceRows = 64;

/// [begin, end) cut into ranges of `step` rows, the last one possibly shorter.
std::vector<std::pair<int64_t, int64_t>> row_ranges(int64_t begin, int64_t end, int64_t step) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t r = begin; r < end; r += step) out.emplace_back(r, std::min(r + step, end));
    return out;
}

/// Rows [c0, c1) of one head of batch row b of a head_last tensor, in a fresh fp32 buffer:
/// [1, L, D] from [B, T, heads, D], [1, L] from [B, T, heads].
at::Tensor load_head_rows(const at::Tensor& x_hl, int64_t b, int64_t head, int64_t c0, int64_t c1) {
    return widen(x_hl[b].slice(0, c0, c1).select(1, head)).unsqueeze(0);
}

/// Writes [1, L, ...] fp32 rows of one head into a head_last view, rounding once to its dtype.
void store_head_rows(const at::Tensor& dst_hl, int64_t b, int64_t head, int64_t c0, int64_t c1,
                     const at::Tensor& x) {
    dst_hl[b].slice(0, c0, c1).select(1, head).copy_(x[0]);
}

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

/// Σ x_j·y_j·z_j in fp32, in the same fixed order as dot().
float dot3(const float* x, const float* y, const float* z, int64_t n) {
    float acc[8] = {};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; ++l) acc[l] += x[j + l] * y[j + l] * z[j + l];
    float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; j < n; ++j) sum += x[j] * y[j] * z[j];
    return sum;
}

// ---- the in-kernel activations: l2norm, gate, beta ----

/// One key head's rows of q or k, l2-normalised in fp32 when the option is on.
struct UnitRows {
    at::Tensor unit;  // [1, L, K] x·rstd (x itself without l2norm)
    at::Tensor rstd;  // [1, L, 1] 1/sqrt(Σ x² + eps); undefined without l2norm
};

UnitRows load_unit_rows(const Problem& p, const at::Tensor& x_hl, int64_t b, int64_t kh, int64_t c0,
                        int64_t c1) {
    UnitRows r;
    r.unit = load_head_rows(x_hl, b, kh, c0, c1);
    if (p.l2norm) {
        r.rstd = (r.unit * r.unit).sum(2, /*keepdim=*/true).add_(kL2NormEps).rsqrt_();
        r.unit.mul_(r.rstd);
    }
    return r;
}

/// FLA's softplus: x above the threshold, log(1 + e^x) below it.
at::Tensor softplus_fla(const at::Tensor& x) {
    return at::where(x > kSoftplusThreshold, x, at::log1p(at::exp(x)));
}

/// exp(A_log[hv]) as [1, 1, 1].
at::Tensor gate_rate(const Problem& p, int64_t hv) {
    return p.A_log.narrow(0, hv, 1).exp().view({1, 1, 1});
}

/// The in-kernel gate's argument g_raw + dt_bias[hv, :] for rows of value head hv.
at::Tensor gate_arg(const Problem& p, const at::Tensor& g_raw, int64_t hv) {
    return p.dt_bias.defined() ? g_raw + p.dt_bias.narrow(0, hv, 1).unsqueeze(1) : g_raw;
}

/// Rows [c0, c1) of one value head and its key head, fp32, with the in-kernel activations
/// applied: what the recurrence reads.
struct Block {
    at::Tensor q, k;  // [1, L, K]
    at::Tensor v;     // [1, L, V]
    at::Tensor g;     // [1, L, K] the log decay
    at::Tensor beta;  // [1, L]
};

/// `round_unit`: the chunk path reads the normalised q, k rounded to the input dtype, as FLA's
/// l2norm_fwd returns them in x's dtype; the recurrent path normalises inline in fp32.
Block load_block(const Problem& p, int64_t b, int64_t hv, int64_t c0, int64_t c1, bool round_unit) {
    const int64_t kh = hv / p.group;
    Block blk;
    blk.q = load_unit_rows(p, p.q, b, kh, c0, c1).unit;
    blk.k = load_unit_rows(p, p.k, b, kh, c0, c1).unit;
    if (round_unit && p.l2norm) {
        blk.q = round_to(blk.q, p.in);
        blk.k = round_to(blk.k, p.in);
    }
    blk.v = load_head_rows(p.v, b, hv, c0, c1);
    blk.g = load_head_rows(p.g, b, hv, c0, c1);
    if (p.gate_in_kernel) {
        const at::Tensor x = gate_arg(p, blk.g, hv);
        const at::Tensor rate = gate_rate(p, hv);
        blk.g = p.lower_bound ? at::sigmoid(rate * x).mul_(*p.lower_bound)
                              : softplus_fla(x).mul_(rate).neg_();
    }
    blk.beta = load_head_rows(p.beta, b, hv, c0, c1);
    if (p.beta_sigmoid) blk.beta = at::sigmoid(blk.beta).mul_(p.beta_factor);
    return blk;
}

// ---- lanes: one value head of one sequence ----

/// Runs `lane_fn(sequence, value head)` over every pair, in parallel where ATen's parallel_for
/// is: value heads never share a state, so each lane is independent and writes disjoint
/// elements of the results.
template <typename F>
void for_each_lane(const Problem& p, const F& lane_fn) {
    cpu::for_each_lane(p.seqs, p.HV, lane_fn);
}

/// The lane's starting state in fp32: h0[n, hv] widened, or zeros.
at::Tensor lane_start(const Problem& p, int64_t n, int64_t hv) {
    return p.h0.defined() ? widen(p.h0[n][hv]) : at::zeros({p.K, p.V}, at::kFloat);  // [K, V]
}

/// One sequence's gradients w.r.t. what the recurrence read, filled lane by lane.
struct SequenceGrads {
    at::Tensor dq, dk, dg;  // [HV, L, K]
    at::Tensor dv;          // [HV, L, V]
    at::Tensor dbeta;       // [HV, L]
};

std::vector<SequenceGrads> sequence_grads(const Problem& p) {
    std::vector<SequenceGrads> out;
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    for (const Sequence& s : p.seqs) {
        const int64_t L = s.length();
        out.push_back({at::empty({p.HV, L, p.K}, f32), at::empty({p.HV, L, p.K}, f32),
                       at::empty({p.HV, L, p.K}, f32), at::empty({p.HV, L, p.V}, f32),
                       at::empty({p.HV, L}, f32)});
    }
    return out;
}

/// The head_last views of the backward's results and the fp32 sums of the gate parameters'
/// gradients.
struct GradOutputs {
    at::Tensor dq, dk;        // [B, T, H, K]
    at::Tensor dv;            // [B, T, HV, V]
    at::Tensor dg;            // [B, T, HV, K]
    at::Tensor dbeta;         // [B, T, HV]
    at::Tensor dA_log_sum;    // [HV] fp32; undefined without the in-kernel gate
    at::Tensor ddt_bias_sum;  // [HV, K] fp32; undefined without dt_bias
};

GradOutputs grad_outputs(const Problem& p, const KdaArgs& args, KdaGrads& grads) {
    grads.dq = poisoned(args.q.sizes(), p.in);
    grads.dk = poisoned(args.k.sizes(), p.in);
    grads.dv = poisoned(args.v.sizes(), p.in);
    grads.dg = poisoned(args.g.sizes(), args.g.scalar_type());
    grads.dbeta = poisoned(args.beta.sizes(), args.beta.scalar_type());
    if (p.h0.defined()) grads.dh0 = poisoned({p.N, p.HV, p.K, p.V}, p.state);
    GradOutputs out;
    out.dq = to_head_last(grads.dq, args.layout);
    out.dk = to_head_last(grads.dk, args.layout);
    out.dv = to_head_last(grads.dv, args.layout);
    out.dg = to_head_last(grads.dg, args.layout);
    out.dbeta = to_head_last(grads.dbeta, args.layout);
    if (p.gate_in_kernel) {
        grads.dA_log = poisoned(args.A_log.sizes(), args.A_log.scalar_type());
        out.dA_log_sum = at::zeros({p.HV}, at::kFloat);
        if (p.dt_bias.defined()) {
            grads.ddt_bias = poisoned(args.dt_bias.sizes(), args.dt_bias.scalar_type());
            out.ddt_bias_sum = at::zeros({p.HV, p.K}, at::kFloat);
        }
    }
    return out;
}

/// Back through one key head's l2norm (y = x·rstd: dx = rstd·(dy − (dy·y) y), with the fp32
/// y), into the result's rows.
void store_unit_grad(const Problem& p, const at::Tensor& x_hl, const at::Tensor& dst_hl,
                     const at::Tensor& dy, int64_t b, int64_t kh, int64_t c0, int64_t c1) {
    if (!p.l2norm) return store_head_rows(dst_hl, b, kh, c0, c1, dy);
    const UnitRows y = load_unit_rows(p, x_hl, b, kh, c0, c1);
    store_head_rows(dst_hl, b, kh, c0, c1,
                    (dy - (dy * y.unit).sum(2, /*keepdim=*/true) * y.unit) * y.rstd);
}

/// Back through one value head's β sigmoid and gate, into the results' rows; adds the rows'
/// share of dA_log and ddt_bias to the fp32 sums.
void store_value_grads(const Problem& p, const at::Tensor& dv, const at::Tensor& dg,
                       const at::Tensor& dbeta, int64_t b, int64_t hv, int64_t c0, int64_t c1,
                       GradOutputs& out) {
    store_head_rows(out.dv, b, hv, c0, c1, dv);
    if (p.beta_sigmoid) {
        // β = c·σ(x): dx = dβ·c·σ(1 − σ)
        const at::Tensor sig = at::sigmoid(load_head_rows(p.beta, b, hv, c0, c1));
        store_head_rows(out.dbeta, b, hv, c0, c1, dbeta * sig * (1.0f - sig) * p.beta_factor);
    } else {
        store_head_rows(out.dbeta, b, hv, c0, c1, dbeta);
    }
    if (!p.gate_in_kernel) return store_head_rows(out.dg, b, hv, c0, c1, dg);
    const at::Tensor x = gate_arg(p, load_head_rows(p.g, b, hv, c0, c1), hv);  // [1, L, K]
    const at::Tensor rate = gate_rate(p, hv);                                  // [1, 1, 1]
    at::Tensor d_arg, d_log_rate;                                              // [1, L, K]
    if (p.lower_bound) {
        // g = lb·σ(z), z = e^A·x: dz = dg·lb·σ(1 − σ); dx = dz·e^A, dA = dz·z
        const at::Tensor z = rate * x;
        const at::Tensor sig = at::sigmoid(z);
        const at::Tensor dz = dg * sig * (1.0f - sig) * (*p.lower_bound);
        d_arg = dz * rate;
        d_log_rate = dz * z;
    } else {
        // g = −e^A·softplus(x): dx = −dg·e^A·σ(x), dA = dg·g
        d_arg = (dg * rate * at::sigmoid(x)).neg_();
        d_log_rate = dg * softplus_fla(x).mul_(rate).neg_();
    }
    store_head_rows(out.dg, b, hv, c0, c1, d_arg);
    out.dA_log_sum.narrow(0, hv, 1).add_(d_log_rate.sum());
    if (out.ddt_bias_sum.defined()) out.ddt_bias_sum.narrow(0, hv, 1).add_(d_arg.sum(1));
}

/// Back through the activations into the results, piece by piece: the GVA sum and the l2norm
/// per key head, the sigmoid and the gate per value head; then the gate parameters' fp32 sums,
/// rounded once.
void store_grads(const Problem& p, const std::vector<SequenceGrads>& seq_grads, GradOutputs& out,
                 KdaGrads& grads) {
    for (const Sequence& s : p.seqs) {
        const SequenceGrads& sg = seq_grads[s.index];
        for (const auto& [r0, r1] : row_ranges(0, s.length(), kPieceRows)) {
            const int64_t c0 = s.begin + r0, c1 = s.begin + r1;
            for (int64_t kh = 0; kh < p.H; ++kh) {
                // GVA: a key head's gradient sums its value heads'
                const auto group_sum = [&](const at::Tensor& x) {  // [HV, L, K] -> [1, n, K]
                    return x.narrow(0, kh * p.group, p.group).narrow(1, r0, r1 - r0).sum(0, true);
                };
                store_unit_grad(p, p.q, out.dq, group_sum(sg.dq), s.batch, kh, c0, c1);
                store_unit_grad(p, p.k, out.dk, group_sum(sg.dk), s.batch, kh, c0, c1);
            }
            for (int64_t hv = 0; hv < p.HV; ++hv) {
                const auto rows = [&](const at::Tensor& x) {
                    return x.narrow(0, hv, 1).narrow(1, r0, r1 - r0);
                };
                store_value_grads(p, rows(sg.dv), rows(sg.dg), rows(sg.dbeta), s.batch, hv, c0, c1,
                                  out);
            }
        }
    }
    if (out.dA_log_sum.defined()) grads.dA_log.copy_(out.dA_log_sum);
    if (out.ddt_bias_sum.defined()) grads.ddt_bias.copy_(out.ddt_bias_sum.view(-1));
}

// ---- chunk variant ----

/// The chunk-local quantities of the WY form, all fp32 (README.md derives them), for the n
/// heads of a block (one per lane).
struct ChunkForm {
    at::Tensor decay;   // [n, L, K] exp(G) with G the inclusive chunk-local cumsum of g
    at::Tensor to_end;  // [n, L, K] exp(G_last − G)
    at::Tensor last;    // [n, K, 1] exp(G_last)
    at::Tensor E;       // [n, L, L, K] exp(G_i − G_j) for j ≤ i; never read above
    at::Tensor kk;      // [n, L, L] Σ_d k_id k_jd E_ijd for j < i, else 0
    at::Tensor A_qk;    // [n, L, L] scale Σ_d q_id k_jd E_ijd for j ≤ i, else 0
    at::Tensor Tinv;    // [n, L, L] (I + diag(β) kk)^-1
};

/// a·b for batches of small fp32 matrices, [n, M, P] × [n, P, N] -> [n, M, N], in plain loops:
/// each element sums over P in ascending order. ATen's bmm hands these 64-wide products to a
/// threaded BLAS whose fork and join per call costs more than the product (and spins on a busy
/// host); a lane's products stay on its own thread here.
at::Tensor small_mm(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor ac = a.contiguous(), bc = b.contiguous();
    const int64_t n = ac.size(0), M = ac.size(1), P = ac.size(2), N = bc.size(2);
    LAV_ASSERT(bc.size(0) == n && bc.size(1) == P, "kda cpu: mm of ", a.sizes(), " and ",
               b.sizes());
    at::Tensor out = at::zeros({n, M, N}, at::kFloat);  // [n, M, N]
    const float* ap = ac.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t h = 0; h < n; ++h)
        for (int64_t i = 0; i < M; ++i) {
            float* row = op + (h * M + i) * N;
            for (int64_t r = 0; r < P; ++r) {
                const float air = ap[(h * M + i) * P + r];
                const float* brow = bp + (h * P + r) * N;
                for (int64_t j = 0; j < N; ++j) row[j] += air * brow[j];
            }
        }
    return out;
}

/// (I + A)^-1 for strictly lower-triangular A [n, L, L] by forward substitution in fp32: row i
/// of the inverse is e_i − Σ_{m<i} A[i, m]·(row m), summed in ascending m.
at::Tensor unit_lower_inverse(const at::Tensor& A) {
    const int64_t n = A.size(0), L = A.size(1);
    const at::Tensor a = A.contiguous();
    at::Tensor inv = at::zeros({n, L, L}, at::kFloat);  // [n, L, L]
    const float* ap = a.data_ptr<float>();
    float* tp = inv.data_ptr<float>();
    for (int64_t h = 0; h < n; ++h) {
        const float* ah = ap + h * L * L;
        float* th = tp + h * L * L;
        for (int64_t i = 0; i < L; ++i) {
            float* row = th + i * L;
            row[i] = 1.0f;
            for (int64_t m = 0; m < i; ++m) {
                const float aim = ah[i * L + m];
                const float* prev = th + m * L;
                for (int64_t j = 0; j <= m; ++j) row[j] -= aim * prev[j];
            }
        }
    }
    return inv;
}

ChunkForm chunk_form(const Problem& p, const Block& blk) {
    const int64_t L = blk.v.size(1);
    const int64_t n = blk.v.size(0);
    const int64_t K = p.K;
    // every loop over a chunk below is plain C++: ATen runs even these [L, K] exps through its
    // thread pool, whose fork, join and spin per call outweigh the work
    // G: a running fp32 sum per (head, key dim); at::cumsum accumulates fp32 in double on the CPU
    at::Tensor G = blk.g.clone();  // [n, L, K]
    float* Gp = G.data_ptr<float>();
    for (int64_t h = 0; h < n; ++h)
        for (int64_t i = 1; i < L; ++i) {
            float* row = Gp + (h * L + i) * K;
            const float* prev = row - K;
            for (int64_t d = 0; d < K; ++d) row[d] += prev[d];
        }
    ChunkForm f;
    f.decay = at::empty({n, L, K}, at::kFloat);
    f.to_end = at::empty({n, L, K}, at::kFloat);
    f.last = at::empty({n, K, 1}, at::kFloat);
    float* decay = f.decay.data_ptr<float>();
    float* to_end = f.to_end.data_ptr<float>();
    float* last = f.last.data_ptr<float>();
    for (int64_t h = 0; h < n; ++h) {
        const float* G_last = Gp + (h * L + L - 1) * K;
        for (int64_t i = 0; i < L; ++i)
            for (int64_t d = 0; d < K; ++d) {
                const int64_t e = (h * L + i) * K + d;
                decay[e] = std::exp(Gp[e]);
                to_end[e] = std::exp(G_last[d] - Gp[e]);
            }
        for (int64_t d = 0; d < K; ++d) last[h * K + d] = std::exp(G_last[d]);
    }
    // the pairwise terms: exp(G_i − G_j) only for j ≤ i (above the diagonal it can overflow),
    // each formed once and kept for the backward
    f.E = at::empty({n, L, L, K}, at::kFloat);
    f.kk = at::zeros({n, L, L}, at::kFloat);
    f.A_qk = at::zeros({n, L, L}, at::kFloat);
    const float* q = blk.q.data_ptr<float>();
    const float* k = blk.k.data_ptr<float>();
    float* E = f.E.data_ptr<float>();
    float* kk = f.kk.data_ptr<float>();
    float* A_qk = f.A_qk.data_ptr<float>();
    for (int64_t h = 0; h < n; ++h)
        for (int64_t i = 0; i < L; ++i) {
            const float* Gi = Gp + (h * L + i) * K;
            const float* qi = q + (h * L + i) * K;
            const float* ki = k + (h * L + i) * K;
            for (int64_t j = 0; j <= i; ++j) {
                const float* Gj = Gp + (h * L + j) * K;
                const float* kj = k + (h * L + j) * K;
                float* e = E + ((h * L + i) * L + j) * K;
                for (int64_t d = 0; d < K; ++d) e[d] = j == i ? 1.0f : std::exp(Gi[d] - Gj[d]);
                if (j < i) kk[(h * L + i) * L + j] = dot3(ki, kj, e, K);
                A_qk[(h * L + i) * L + j] = p.scale * dot3(qi, kj, e, K);
            }
        }
    f.Tinv = unit_lower_inverse(f.kk * blk.beta.unsqueeze(2));
    return f;
}

/// What the forward stores per chunk, rounded as the contract says.
struct ChunkStored {
    at::Tensor h;      // [n, K, V] the state entering the chunk, in the state dtype
    at::Tensor v_new;  // [n, L, V] u − w h, in the input dtype
};

/// The WY forward of one chunk: stores h and v_new and advances the fp32 state S.
ChunkStored chunk_advance(const Problem& p, const Block& blk, const ChunkForm& f, at::Tensor& S) {
    const at::Tensor beta = blk.beta.unsqueeze(2);  // [n, L, 1]
    // FLA keeps the solved inverse, w, u in the input dtype, and rounds the β-scaled operands
    // before the tensor-core products with the inverse (kda/wy_fast.py)
    const at::Tensor T_in = round_to(f.Tinv, p.in);                // [n, L, L]
    const at::Tensor kb = round_to(beta * blk.k * f.decay, p.in);  // [n, L, K]
    const at::Tensor vb = round_to(beta * blk.v, p.in);            // [n, L, V]
    const at::Tensor w = round_to(small_mm(T_in, kb), p.in);       // [n, L, K]
    const at::Tensor u = round_to(small_mm(T_in, vb), p.in);       // [n, L, V]
    const at::Tensor kg = round_to(blk.k * f.to_end, p.in);        // [n, L, K]
    ChunkStored st;
    st.h = round_to(S, p.state);
    st.v_new = round_to(u - small_mm(w, st.h), p.in);
    S = S * f.last + small_mm(kg.transpose(1, 2), st.v_new);
    return st;
}

/// One chunk's gradients w.r.t. what the recurrence read (per value head, fp32).
struct ChunkGrads {
    at::Tensor dq, dk;  // [n, L, K]
    at::Tensor dv;      // [n, L, V]
    at::Tensor dg;      // [n, L, K] w.r.t. the log decay g
    at::Tensor dbeta;   // [n, L] w.r.t. the activated β
};

/// The backward of one chunk (README.md, "Chunk form, backward"). dS holds ∂L/∂(state at the
/// chunk's end) on entry and ∂L/∂(state entering it) on return, carried in fp32.
ChunkGrads chunk_backward(const Problem& p, const Block& blk, const ChunkForm& f,
                          const ChunkStored& st, const at::Tensor& d_out, at::Tensor& dS) {
    const int64_t L = blk.v.size(1);
    const at::Tensor beta = blk.beta.unsqueeze(2);  // [n, L, 1]
    // the chunk-end state gradient as stored (FLA's dh); the carry below stays fp32
    const at::Tensor dh = round_to(dS, p.state);      // [n, K, V]
    const at::Tensor kd = blk.k * f.decay;            // [n, L, K]
    const at::Tensor kg = blk.k * f.to_end;           // [n, L, K]
    const at::Tensor kb = beta * kd;                  // [n, L, K]
    const at::Tensor vb = beta * blk.v;               // [n, L, V]
    const at::Tensor W = small_mm(f.Tinv, kb);        // [n, L, K]
    const at::Tensor hT = st.h.transpose(1, 2);       // [n, V, K]
    const at::Tensor TinvT = f.Tinv.transpose(1, 2);  // [n, L, L]

    // O = scale·(Q ⊙ e^G) h + A_qk V_new
    const at::Tensor dq_inter = small_mm(d_out, hT).mul_(f.decay).mul_(p.scale);  // [n, L, K]
    // only j ≤ i matter: E (and so every use of dA_qk below) is zero above the diagonal
    const at::Tensor dA_qk = small_mm(d_out, st.v_new.transpose(1, 2));  // [n, L, L]
    // V_new feeds O and the next state S' = diag(e^{G_last}) h + kgᵀ V_new
    const at::Tensor dv_new =
        small_mm(kg, dh) + small_mm(f.A_qk.transpose(1, 2), d_out);  // [n, L, V]
    const at::Tensor d_kg = small_mm(st.v_new, dh.transpose(1, 2));  // [n, L, K]
    // the entering state reaches L through its decay, the output and V_new = U − W h
    const at::Tensor dS_in = dS * f.last +
                             small_mm((blk.q * f.decay).transpose(1, 2), d_out) * p.scale -
                             small_mm(W.transpose(1, 2), dv_new);  // [n, K, V]
    // G_last appears in exp(G_last) on h and in every exp(G_last − G_j) of kg
    const at::Tensor dG_last = f.last.squeeze(2) * (st.h * dh).sum(2) + (kg * d_kg).sum(1);

    // U = T (β V), W = T (β K ⊙ e^G), with dU = dV_new and dW = −dV_new hᵀ
    const at::Tensor dW = small_mm(dv_new, hT).neg_();  // [n, L, K]
    const at::Tensor dT =
        small_mm(dv_new, vb.transpose(1, 2)) + small_mm(dW, kb.transpose(1, 2));  // [n, L, L]
    const at::Tensor dvb = small_mm(TinvT, dv_new);                               // [n, L, V]
    const at::Tensor dkb = small_mm(TinvT, dW);                                   // [n, L, K]
    // T = (I + A)^-1: dA = −Tᵀ dT Tᵀ, read only on the strictly lower part where A = diag(β) kk
    // lives (kk is zero elsewhere, and the intra-chunk loop below skips j = i)
    const at::Tensor dA = small_mm(small_mm(TinvT, dT), TinvT).neg_();  // [n, L, L]

    ChunkGrads g;
    g.dv = dvb * beta;
    g.dbeta = (dvb * blk.v).sum(2) + (dkb * kd).sum(2) + (dA * f.kk).sum(2);
    const at::Tensor dk_kd = dkb * beta * f.decay;  // [n, L, K] through K ⊙ e^G in W
    const at::Tensor dk_kg = d_kg * f.to_end;       // [n, L, K] through kg
    // intra-chunk: A_kk[i, j] = β_i Σ_d k_id k_jd E_ijd, A_qk[i, j] = scale Σ_d q_id k_jd E_ijd;
    // with X = β_i dA_kk[i, j] and Y = scale·dA_qk[i, j], each (i, j ≤ i) passes E_ij ⊙ k_j to
    // row i and E_ij ⊙ k_i (or q_i) to column j
    const int64_t n = blk.v.size(0), K = p.K;
    at::Tensor dk_row = at::zeros({n, L, K}, at::kFloat);    // [n, L, K] Σ_j X_ij E_ij k_j
    at::Tensor dk_col = at::zeros({n, L, K}, at::kFloat);    // [n, L, K] Σ_i X_ij E_ij k_i
    at::Tensor dq_intra = at::zeros({n, L, K}, at::kFloat);  // [n, L, K] Σ_j Y_ij E_ij k_j
    at::Tensor dk_qk = at::zeros({n, L, K}, at::kFloat);     // [n, L, K] Σ_i Y_ij E_ij q_i
    {
        const at::Tensor dA_c = dA.contiguous(), dA_qk_c = dA_qk.contiguous();
        const float* X = dA_c.data_ptr<float>();
        const float* Y = dA_qk_c.data_ptr<float>();
        const float* bp = blk.beta.data_ptr<float>();
        const float* q = blk.q.data_ptr<float>();
        const float* k = blk.k.data_ptr<float>();
        const float* E = f.E.data_ptr<float>();
        float* row = dk_row.data_ptr<float>();
        float* col = dk_col.data_ptr<float>();
        float* qrow = dq_intra.data_ptr<float>();
        float* qcol = dk_qk.data_ptr<float>();
        for (int64_t h = 0; h < n; ++h)
            for (int64_t i = 0; i < L; ++i) {
                const int64_t hi = h * L + i;
                for (int64_t j = 0; j <= i; ++j) {
                    const int64_t hj = h * L + j;
                    const float x = j < i ? bp[hi] * X[hi * L + j] : 0.0f;
                    const float y = p.scale * Y[hi * L + j];
                    const float* e = E + (hi * L + j) * K;
                    for (int64_t d = 0; d < K; ++d) {
                        const float xe = x * e[d], ye = y * e[d];
                        row[hi * K + d] += xe * k[hj * K + d];
                        col[hj * K + d] += xe * k[hi * K + d];
                        qrow[hi * K + d] += ye * k[hj * K + d];
                        qcol[hj * K + d] += ye * q[hi * K + d];
                    }
                }
            }
    }
    g.dq = dq_inter + dq_intra;
    g.dk = dk_kd + dk_kg + dk_row + dk_col + dk_qk;
    // ∂L/∂G_i: every exp(±G_i) passes its own input times its gradient, with the sign of G_i
    at::Tensor dG = blk.q * g.dq + blk.k * (dk_kd + dk_row - dk_col - dk_qk - dk_kg);
    dG.select(1, L - 1).add_(dG_last);
    // dg_t = Σ_{i ≥ t in the chunk} dG_i, a reverse running sum in fp32
    float* d = dG.data_ptr<float>();
    for (int64_t h = 0; h < n; ++h)
        for (int64_t i = L - 1; i-- > 0;) {
            float* row = d + (h * L + i) * p.K;
            const float* next = row + p.K;
            for (int64_t e = 0; e < p.K; ++e) row[e] += next[e];
        }
    g.dg = dG;
    dS = dS_in;
    return g;
}

}  // namespace

KdaFwd kda_chunk_fwd_cpu(const KdaArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/true);
    KdaFwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.HV, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, HV, V]
    const cpu::ChunkStateStore kept(args.keep_chunk_states, p.seqs, p.chunk, {p.HV, p.K, p.V},
                                    p.state);
    for_each_lane(p, [&](const Sequence& s, int64_t hv) {
        // the carried state stays fp32; only its stored copies are rounded
        at::Tensor S = lane_start(p, s.index, hv).unsqueeze(0);  // [1, K, V]
        for (const auto& [c0, c1] : row_ranges(s.begin, s.end, p.chunk)) {
            const Block blk = load_block(p, s.batch, hv, c0, c1, /*round_unit=*/true);
            const ChunkForm f = chunk_form(p, blk);
            // FLA's chunk_gla_fwd_o_gk rounds q ⊙ e^G and A_qk to the input dtype before its
            // products with h and v_new
            const at::Tensor qg = round_to(blk.q * f.decay, p.in);  // [1, L, K]
            const at::Tensor A_qk = round_to(f.A_qk, p.in);         // [1, L, L]
            const ChunkStored st = chunk_advance(p, blk, f, S);
            kept.store(s, c0, st.h[0], hv);
            const at::Tensor o = small_mm(A_qk, st.v_new) + small_mm(qg, st.h) * p.scale;
            store_head_rows(o_hl, s.batch, hv, c0, c1, o);
        }
        out.ht[s.index][hv].copy_(S[0]);
    });
    out.h = kept.h();
    return out;
}

KdaGrads kda_chunk_bwd_cpu(const KdaArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/true);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, HV, V]
    KdaGrads grads;
    GradOutputs out = grad_outputs(p, args, grads);
    std::vector<SequenceGrads> seq_grads = sequence_grads(p);
    for_each_lane(p, [&](const Sequence& s, int64_t hv) {
        const auto chunks = row_ranges(s.begin, s.end, p.chunk);
        // forward: recompute and keep what the forward stores (h and v_new per chunk)
        std::vector<ChunkStored> stored;
        at::Tensor S = lane_start(p, s.index, hv).unsqueeze(0);  // [1, K, V]
        for (const auto& [c0, c1] : chunks) {
            const Block blk = load_block(p, s.batch, hv, c0, c1, /*round_unit=*/true);
            stored.push_back(chunk_advance(p, blk, chunk_form(p, blk), S));
        }
        // reverse: dS = ∂L/∂(state at the end of the chunk), carried in fp32
        at::Tensor dS =
            (dht.defined() ? widen(dht[s.index][hv]) : at::zeros({p.K, p.V}, at::kFloat))
                .unsqueeze(0);  // [1, K, V]
        const SequenceGrads& sg = seq_grads[s.index];
        for (size_t c = chunks.size(); c-- > 0;) {
            const auto [c0, c1] = chunks[c];
            const Block blk = load_block(p, s.batch, hv, c0, c1, /*round_unit=*/true);
            const ChunkForm f = chunk_form(p, blk);
            const at::Tensor d_out = load_head_rows(do_hl, s.batch, hv, c0, c1);  // [1, L, V]
            const ChunkGrads g = chunk_backward(p, blk, f, stored[c], d_out, dS);
            const auto rows = [&](const at::Tensor& x) {
                return x[hv].narrow(0, c0 - s.begin, c1 - c0);
            };
            rows(sg.dq).copy_(g.dq[0]);
            rows(sg.dk).copy_(g.dk[0]);
            rows(sg.dv).copy_(g.dv[0]);
            rows(sg.dg).copy_(g.dg[0]);
            rows(sg.dbeta).copy_(g.dbeta[0]);
        }
        if (p.h0.defined()) grads.dh0[s.index][hv].copy_(dS[0]);
    });
    store_grads(p, seq_grads, out, grads);
    return grads;
}

namespace {

// ---- recurrent variant ----

/// One value head of one sequence: contiguous fp32 rows the step loops read.
struct Lane {
    int64_t L = 0;
    at::Tensor q, k;   // [L, K]
    at::Tensor v;      // [L, V]
    at::Tensor decay;  // [L, K] exp(g)
    at::Tensor beta;   // [L]
};

/// The lane's rows, activated piece by piece into whole-lane buffers.
Lane load_lane(const Problem& p, const Sequence& s, int64_t hv) {
    Lane lane;
    lane.L = s.length();
    lane.q = at::empty({lane.L, p.K}, at::kFloat);
    lane.k = at::empty({lane.L, p.K}, at::kFloat);
    lane.v = at::empty({lane.L, p.V}, at::kFloat);
    lane.decay = at::empty({lane.L, p.K}, at::kFloat);
    lane.beta = at::empty({lane.L}, at::kFloat);
    for (const auto& [c0, c1] : row_ranges(s.begin, s.end, kPieceRows)) {
        const Block blk = load_block(p, s.batch, hv, c0, c1, /*round_unit=*/false);
        const auto rows = [&](at::Tensor& x) { return x.narrow(0, c0 - s.begin, c1 - c0); };
        rows(lane.q).copy_(blk.q[0]);
        rows(lane.k).copy_(blk.k[0]);
        rows(lane.v).copy_(blk.v[0]);
        rows(lane.decay).copy_(blk.g[0].exp());
        rows(lane.beta).copy_(blk.beta[0]);
    }
    return lane;
}

/// Rows [begin, end) of one head of a head_last [B, T, heads, D] tensor as one [L, D] fp32
/// buffer, loaded piece by piece.
at::Tensor load_lane_rows(const at::Tensor& x_hl, const Sequence& s, int64_t head) {
    at::Tensor out = at::empty({s.length(), x_hl.size(3)}, at::kFloat);  // [L, D]
    for (const auto& [c0, c1] : row_ranges(s.begin, s.end, kPieceRows))
        out.narrow(0, c0 - s.begin, c1 - c0).copy_(load_head_rows(x_hl, s.batch, head, c0, c1)[0]);
    return out;
}

/// S ← diag(a) S in place (the decayed state S̄), then p = S̄ᵀ k and u = β (v − p).
void decay_and_delta(float* S, const float* a, const float* k, const float* v, float beta,
                     int64_t K, int64_t V, float* p, float* u) {
    std::fill(p, p + V, 0.0f);
    for (int64_t i = 0; i < K; ++i) {
        float* Si = S + i * V;
        const float ai = a[i], ki = k[i];
        for (int64_t j = 0; j < V; ++j) {
            Si[j] *= ai;
            p[j] += ki * Si[j];
        }
    }
    for (int64_t j = 0; j < V; ++j) u[j] = beta * (v[j] - p[j]);
}

/// S += k uᵀ in place; with q given, also o = Sᵀ (scale·q) of the new S.
void add_update(float* S, const float* k, const float* u, int64_t K, int64_t V,
                const float* q = nullptr, float scale = 0.0f, float* o = nullptr) {
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

}  // namespace

KdaFwd kda_recurrent_fwd_cpu(const KdaArgs& args) {
    const Problem p = make_problem(args, /*chunked=*/false);
    KdaFwd out;
    out.o = poisoned(args.v.sizes(), p.out);
    out.ht = poisoned({p.N, p.HV, p.K, p.V}, p.state);
    const at::Tensor o_hl = to_head_last(out.o, args.layout);  // [B, T, HV, V]
    for_each_lane(p, [&](const Sequence& s, int64_t hv) {
        // the state lives in fp32 for the whole sequence
        at::Tensor S = lane_start(p, s.index, hv);  // [K, V]
        if (s.length() > 0) {
            const Lane lane = load_lane(p, s, hv);
            at::Tensor o = at::empty({lane.L, p.V}, at::kFloat);  // [L, V]
            std::vector<float> pu(2 * p.V);                       // p and u
            float* Sp = S.data_ptr<float>();
            const float* q = lane.q.data_ptr<float>();
            const float* k = lane.k.data_ptr<float>();
            const float* v = lane.v.data_ptr<float>();
            const float* a = lane.decay.data_ptr<float>();
            const float* beta = lane.beta.data_ptr<float>();
            float* op = o.data_ptr<float>();
            for (int64_t t = 0; t < lane.L; ++t) {
                decay_and_delta(Sp, a + t * p.K, k + t * p.K, v + t * p.V, beta[t], p.K, p.V,
                                pu.data(), pu.data() + p.V);
                add_update(Sp, k + t * p.K, pu.data() + p.V, p.K, p.V, q + t * p.K, p.scale,
                           op + t * p.V);
            }
            for (const auto& [c0, c1] : row_ranges(s.begin, s.end, kPieceRows))
                store_head_rows(o_hl, s.batch, hv, c0, c1,
                                o.narrow(0, c0 - s.begin, c1 - c0).unsqueeze(0));
        }
        out.ht[s.index][hv].copy_(S);
    });
    return out;
}

KdaGrads kda_recurrent_bwd_cpu(const KdaArgs& args, const at::Tensor& d_o, const at::Tensor& dht) {
    const Problem p = make_problem(args, /*chunked=*/false);
    const at::Tensor do_hl = check_cotangents(p, args, d_o, dht);  // [B, T, HV, V]
    KdaGrads grads;
    GradOutputs out = grad_outputs(p, args, grads);
    const int64_t K = p.K, V = p.V;
    std::vector<SequenceGrads> seq_grads = sequence_grads(p);

    for_each_lane(p, [&](const Sequence& s, int64_t hv) {
        at::Tensor dS =
            dht.defined() ? widen(dht[s.index][hv]) : at::zeros({K, V}, at::kFloat);  // [K, V]
        const int64_t L = s.length();
        if (L > 0) {
            const Lane lane = load_lane(p, s, hv);
            const at::Tensor d_out = load_lane_rows(do_hl, s, hv);  // [L, V]
            const float* q = lane.q.data_ptr<float>();
            const float* k = lane.k.data_ptr<float>();
            const float* v = lane.v.data_ptr<float>();
            const float* a = lane.decay.data_ptr<float>();
            const float* beta = lane.beta.data_ptr<float>();
            const float* dop = d_out.data_ptr<float>();
            const SequenceGrads& sg = seq_grads[s.index];
            float* dq = sg.dq[hv].data_ptr<float>();        // [L, K]
            float* dk = sg.dk[hv].data_ptr<float>();        // [L, K]
            float* dg = sg.dg[hv].data_ptr<float>();        // [L, K]
            float* dv = sg.dv[hv].data_ptr<float>();        // [L, V]
            float* dbeta = sg.dbeta[hv].data_ptr<float>();  // [L]
            std::vector<float> buf(4 * V);                  // p, u, du, dp
            float* pv = buf.data();
            float* uv = pv + V;
            float* du = uv + V;
            float* dp = du + V;

            // forward: dq_t = scale·S_t do_t, keeping the state before every P-th step so the
            // reverse pass holds O(√L) states instead of L
            const int64_t P = std::max<int64_t>(
                1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(L)))));
            const int64_t segments = (L + P - 1) / P;
            at::Tensor checkpoints = at::empty({segments, K, V}, at::kFloat);  // [segments, K, V]
            at::Tensor S = lane_start(p, s.index, hv);                         // [K, V]
            float* Sp = S.data_ptr<float>();
            float* ckp = checkpoints.data_ptr<float>();
            for (int64_t t = 0; t < L; ++t) {
                if (t % P == 0) std::copy(Sp, Sp + K * V, ckp + (t / P) * K * V);
                decay_and_delta(Sp, a + t * K, k + t * K, v + t * V, beta[t], K, V, pv, uv);
                add_update(Sp, k + t * K, uv, K, V);
                for (int64_t i = 0; i < K; ++i)
                    dq[t * K + i] = p.scale * dot(Sp + i * V, dop + t * V, V);
            }

            // reverse: dS = ∂L/∂S_t; per segment, recompute the states before each step from
            // its checkpoint, then walk it backwards
            at::Tensor before = at::empty({std::min(P, L), K, V}, at::kFloat);  // [P, K, V]
            at::Tensor sbar = at::empty({K, V}, at::kFloat);                    // [K, V]
            float* bp = before.data_ptr<float>();
            float* sb = sbar.data_ptr<float>();
            float* dSp = dS.data_ptr<float>();
            for (int64_t seg = segments; seg-- > 0;) {
                const int64_t t0 = seg * P, t1 = std::min(t0 + P, L);
                std::copy(ckp + seg * K * V, ckp + (seg + 1) * K * V, bp);
                for (int64_t t = t0; t + 1 < t1; ++t) {
                    float* next = bp + (t - t0 + 1) * K * V;
                    std::copy(bp + (t - t0) * K * V, bp + (t - t0 + 1) * K * V, next);
                    decay_and_delta(next, a + t * K, k + t * K, v + t * V, beta[t], K, V, pv, uv);
                    add_update(next, k + t * K, uv, K, V);
                }
                for (int64_t t = t1; t-- > t0;) {
                    // S̄_t, p and u_t again, from the state before the step
                    std::copy(bp + (t - t0) * K * V, bp + (t - t0 + 1) * K * V, sb);
                    decay_and_delta(sb, a + t * K, k + t * K, v + t * V, beta[t], K, V, pv, uv);
                    const float* do_t = dop + t * V;
                    const float* kt = k + t * K;
                    // dS_t = dS + scale·q_t do_tᵀ; du = dS_tᵀ k_t; dk_t = dS_t u_t
                    std::fill(du, du + V, 0.0f);
                    for (int64_t i = 0; i < K; ++i) {
                        float* dSi = dSp + i * V;
                        const float sq = p.scale * q[t * K + i];
                        for (int64_t j = 0; j < V; ++j) {
                            dSi[j] += sq * do_t[j];
                            du[j] += kt[i] * dSi[j];
                        }
                        dk[t * K + i] = dot(dSi, uv, V);
                    }
                    // u_t = β (v_t − p): dv_t = β du, dβ_t = du·(v_t − p), dp = −β du
                    float dbeta_t = 0.0f;
                    for (int64_t j = 0; j < V; ++j) {
                        dv[t * V + j] = beta[t] * du[j];
                        dbeta_t += du[j] * (v[t * V + j] - pv[j]);
                        dp[j] = -beta[t] * du[j];
                    }
                    dbeta[t] = dbeta_t;
                    // p = S̄ᵀ k_t: dS̄ = dS_t + k_t dpᵀ, dk_t += S̄ dp; then through the decay:
                    // dg_t = rowsum(S̄ ⊙ dS̄), dS_{t-1} = diag(exp(g_t)) dS̄
                    for (int64_t i = 0; i < K; ++i) {
                        float* dSi = dSp + i * V;
                        const float* sbi = sb + i * V;
                        dk[t * K + i] += dot(sbi, dp, V);
                        for (int64_t j = 0; j < V; ++j) dSi[j] += kt[i] * dp[j];
                        dg[t * K + i] = dot(sbi, dSi, V);
                        const float ai = a[t * K + i];
                        for (int64_t j = 0; j < V; ++j) dSi[j] *= ai;
                    }
                }
            }
        }
        if (p.h0.defined()) grads.dh0[s.index][hv].copy_(dS);
    });

    store_grads(p, seq_grads, out, grads);
    return grads;
}

}  // namespace lav::kernels
