// kernels/common/cuda/kda_chunk_bwd.cu — kda's chunk (WY / UT) backward on CUDA, in fp32 FMA
// arithmetic; where the forward's state pass runs on tensor cores, pass 3 does too
// (delta_chunk_bwd_tc.cu).
//
// kda's CPU chunk backward (kda/kda_cpu.cpp chunk_backward, derived in kda/README.md) in five
// passes, each value rounded where that contract rounds it:
//  1. the chunk forward again (kda_chunk.cu), keeping what the later passes read: q̂, k̂, G, β,
//     w, kg, v_new and the stored chunk states h, and for the gradients the fp32 inverse
//     Tf = (I + A)⁻¹ and W = Tf (β k̂ e^G);
//  2. a block per (chunk, value head) makes A_qk = scale Σ_d q̂_id k̂_jd E_ijd in fp32, with
//     E_ijd = exp(G_id − G_jd) per key; then a block per (sequence, value head, 32 value columns)
//     walks the chunks backwards carrying dS in fp32: it keeps each chunk's dH = round(dS) and
//     dv_new = (k̂ e^{G_last − G}) dH + A_qkᵀ dO, then
//     dS ← diag(e^{G_last}) dS + scale (q̂ e^G)ᵀ dO − Wᵀ dv_new;
//  3. a block per (chunk, value head) adds the sums over the value columns: dW = −dv_new hᵀ,
//     dO hᵀ, d_kg = v_new dHᵀ, dA_qk = dO v_newᵀ, dv_new (β v)ᵀ and Σ h ⊙ dH per key, and writes
//     dv = β Tfᵀ dv_new;
//  4. a block per (chunk, value head) goes back through W = Tf kb, Tf = (I + A)⁻¹, A and A_qk,
//     whose factors E it takes per key inside the sums: dq̂, dk̂ per value head, dβ and ∂L/∂G;
//     then the reverse running sum of ∂L/∂G within the chunk and the gate's backward, with the
//     in-kernel gate's dA_log and ddt_bias terms per row for the glue to sum;
//  5. a warp per (row, key head) adds dq̂ and dk̂ over the key head's value heads in order and
//     takes them back through the l2norm with the fp32 unit vectors.
// No atomics: every sum has one order, so two runs give the same bits.
#include <cuda_runtime.h>

#include <stdexcept>
#include <type_traits>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_chunk_tc.cuh"
#include "common/cuda/kda_chunk_cuda.h"

namespace lav::cuda {
namespace {

constexpr int kThreads = kDeltaChunkThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;   // value columns per block of the dS pass
constexpr int kRound = 32;  // keys a round of the keys pass's intra-chunk sums
constexpr int kCols = kChunkCols, kStepCols = kChunkStepCols, kColRow = kChunkColRow;

/// The scratch: the forward's kept values, then the backward's, in fp32 elements.
struct Scratch {
    KdaChunkSaved f;
    float* P;       // [slots, HV, C, C] A_qk in fp32, then dA_qk = dO v_newᵀ
    void* dH;       // [slots, HV, K, V] round(dS) entering each chunk's reverse step, in `st`
    float* dvn;     // [rows, HV, V] dv_new
    float* dw;      // [rows, HV, K] dW = −dv_new hᵀ, then dkb = Tfᵀ dW, then dk̂
    float* dq;      // [rows, HV, K] Σ dO hᵀ, then dq̂
    float* dkg;     // [rows, HV, K] d_kg = Σ v_new dHᵀ
    float* dT;      // [slots, HV, C, C] Σ dv_new vbᵀ
    float* dbv;     // [rows, HV] Σ dvb ⊙ v, dβ's value term
    float* hdH;     // [slots, HV, K] Σ h ⊙ dH per key
    float* dA_log;  // [rows, HV] the in-kernel gate's terms
    float* ddt;     // [rows, HV, K]
};

/// The scratch at `base` (nullptr: only its size, in `floats`).
Scratch scratch_of(const DeltaChunkProblem& p, float* base, int64_t& floats) {
    const int64_t rows = packed_rows(p.seqs), slots = chunk_slots(p.seqs, p.chunk);
    const int64_t HV = p.value_heads, K = p.dk, V = p.dv, C = p.chunk;
    Scratch x;
    x.f = kda_chunk_saved(p, base, floats, true);
    ChunkWorkspace ws(base, floats);
    const auto take = [&](int64_t n) { return ws.take(n); };
    x.P = take(slots * HV * C * C);
    x.dH = ws.take(slots * HV * K * V, p.state);
    x.dvn = take(rows * HV * V);
    x.dw = take(rows * HV * K);
    x.dq = take(rows * HV * K);
    x.dkg = take(rows * HV * K);
    x.dT = take(slots * HV * C * C);
    x.dbv = take(rows * HV);
    x.hdH = take(slots * HV * K);
    x.dA_log = take(rows * HV);  // last, as kda_chunk_terms() finds them
    x.ddt = take(rows * HV * K);
    floats = ws.floats();
    return x;
}

/// Pass 2a, a block per (chunk slot, value head): A_qk = scale Σ_d (q̂_id k̂_jd) exp(G_id − G_jd)
/// for j ≤ i in fp32, into P (pass 3 writes dA_qk there once pass 2b has read A_qk).
// two blocks a multiprocessor by shared memory: without the 2, ptxas kept it to 64 registers
// and spilled
__global__ void __launch_bounds__(kThreads, 2)
    scores_bwd(DeltaChunkProblem p, DeltaGrads, Scratch x) {
    extern __shared__ float sm[];
    const DType in = p.q.dtype;
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    float* q = sm;          // [C, KP] q̂
    float* k = q + C * KP;  // [C, KP] k̂
    float* G = k + C * KP;  // [C, KP]
    load_tile(q, KP, L, K, x.f.qn, in, (r0 * p.heads + h) * K, p.heads * K);
    load_tile(k, KP, L, K, x.f.kn, in, (r0 * p.heads + h) * K, p.heads * K);
    load_tile(G, KP, L, K, x.f.G, DType::f32, (r0 * HV + hv) * K, HV * K);
    __syncthreads();
    float* P = x.P + (slot * HV + hv) * C * C;
    decayed_products(
        L, K, [&](int i, int dd) { return q[i * KP + dd]; },
        [&](int j, int dd) { return k[j * KP + dd]; },
        [&](int i, int dd) { return G[i * KP + dd]; },
        [&](int i, int j, float a) { P[i * C + j] = a * p.scale; });
    for (int e = tid; e < L * L; e += kThreads)
        if (e % L > e / L) P[e / L * C + e % L] = 0.f;  // above the diagonal
}

/// Pass 2b, a block per (sequence, value head, kTile value columns). One key tile at a time
/// (k̂ e^{G_last − G} for dv_new, then q̂ e^G and W for dS).
// shared memory, not registers, bounds its blocks per multiprocessor: without the 1, ptxas kept
// it to 64 registers and spilled
__global__ void __launch_bounds__(kThreads, 1)
    state_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const DType in = p.q.dtype;
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads, V = p.dv;
    const int n = blockIdx.x / HV, hv = blockIdx.x % HV, h = hv / (HV / p.heads);
    const int col0 = blockIdx.y * kTile;
    const Span s = span(p.seqs, n);
    const int tid = threadIdx.x;
    float* X = sm;                 // [C, KP] kg, then q̂ e^G, then W
    float* P = X + C * KP;         // [C, C] A_qk
    float* dO = P + C * C;         // [C, kTile]
    float* dvn = dO + C * kTile;   // [C, kTile]
    float* dS = dvn + C * kTile;   // [K, kTile] the carried fp32 dS
    float* dH = dS + K * kTile;    // [K, kTile] dS as stored, then the dO term of the new dS
    float* last = dH + K * kTile;  // [K] exp(G_last)
    const int64_t state = (int64_t(n) * HV + hv) * K * V, gs = int64_t(HV) * K;
    load_tile(dS, kTile, K, kTile, d.dht, p.state, state, V, col0, d.dht != nullptr ? V : 0);
    const int64_t first = first_slot(p.seqs, C, n, s);
    for (int64_t ch = (s.len + C - 1) / C; ch-- > 0;) {
        const int64_t t0 = ch * C;
        const int L = int(s.len - t0 < C ? s.len - t0 : C);
        const int64_t r0 = row(p.seqs, s, t0), slot = (first + ch) * HV + hv;
        const float* G = x.f.G + (r0 * HV + hv) * K;  // row i at G[i * gs]
        __syncthreads();                              // the later chunk is done with every tile
        load_tile(X, KP, L, K, x.f.kn, in, (r0 * p.heads + h) * K, p.heads * K);
        for (int dd = tid; dd < K; dd += kThreads) last[dd] = expf(G[(L - 1) * gs + dd]);
        for (int e = tid; e < L * L; e += kThreads) {
            const int i = e / L, j = e % L;
            P[i * C + j] = x.P[(slot * C + i) * C + j];
        }
        load_tile(dO, kTile, L, kTile, d.d_o.data, d.d_o.dtype, at(d.d_o, s, t0, hv), d.d_o.st,
                  col0, V);
        // the stored copy of dS, which this chunk's passes read
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = col0 + e % kTile;
            dH[e] = rounded(dS[e], p.state);
            if (c < V) store(x.dH, p.state, (slot * K + dd) * V + c, dH[e]);
        }
        __syncthreads();  // the loop takes other elements of X than load_tile gave a thread
        // kg in fp32 (the backward's), k̂ exp(G_last − G)
        for (int e = tid; e < L * K; e += kThreads) {
            const int64_t i = e / K, dd = e % K;
            X[i * KP + dd] *= expf(G[(L - 1) * gs + dd] - G[i * gs + dd]);
        }
        __syncthreads();
        // dv_new = kg dH + A_qkᵀ dO
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            float a = 0.f;
            for (int dd = 0; dd < K; ++dd) a += X[i * KP + dd] * dH[dd * kTile + c];
            float b = 0.f;
            for (int j = i; j < L; ++j) b += P[j * C + i] * dO[j * kTile + c];
            dvn[e] = a + b;
            if (col0 + c < V) x.dvn[((r0 + i) * HV + hv) * V + col0 + c] = dvn[e];
        }
        __syncthreads();
        // dS ← exp(G_last) ⊙ dS + scale (q̂ ⊙ exp(G))ᵀ dO − Wᵀ dv_new: the middle term into dH's
        // place, which dv_new has read
        load_tile(X, KP, L, K, x.f.qn, in, (r0 * p.heads + h) * K, p.heads * K);
        __syncthreads();
        for (int e = tid; e < L * K; e += kThreads)
            X[e / K * KP + e % K] *= expf(G[e / K * gs + e % K]);
        __syncthreads();
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = e % kTile;
            float a = 0.f;
            for (int i = 0; i < L; ++i) a += X[i * KP + dd] * dO[i * kTile + c];
            dH[e] = a;
        }
        __syncthreads();
        for (int e = tid; e < L * K; e += kThreads) {
            const int64_t i = e / K, dd = e % K;
            X[i * KP + dd] = x.f.Wf[((r0 + i) * HV + hv) * K + dd];
        }
        __syncthreads();
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = e % kTile;
            float b = 0.f;
            for (int i = 0; i < L; ++i) b += X[i * KP + dd] * dvn[i * kTile + c];
            dS[e] = dS[e] * last[dd] + dH[e] * p.scale - b;
        }
    }
    __syncthreads();
    if (d.dh0 == nullptr) return;
    store_state_tile(d.dh0, p.state, state, V, col0, dS, K, kTile);
}

/// Pass 3, a block per (chunk slot, value head): the sums over the value columns, kCols at a
/// time, each thread adding to the elements it owns.
// one block a multiprocessor by its shared memory (as state_bwd)
__global__ void __launch_bounds__(kThreads, 1)
    values_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const DType in = p.q.dtype;
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y;
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0), state = (slot * HV + hv) * K * V;
    float* Ti = sm;                        // [C, C] the fp32 inverse
    float* h = Ti + whole_float4s(C * C);  // [K, kColRow] the stored state
    float* dH = h + K * kColRow;           // [K, kColRow]
    float* dO = dH + K * kColRow;          // [C, kColRow]
    float* vn = dO + C * kColRow;          // [C, kColRow] v_new
    float* dvn = vn + C * kColRow;         // [C, kColRow] dv_new
    float* vb = dvn + C * kColRow;         // [C, kColRow] β v in fp32
    float* dw = vb + C * kColRow;          // [C, K] Σ dv_new hᵀ
    float* dqh = dw + C * K;               // [C, K] Σ dO hᵀ
    float* dkh = dqh + C * K;              // [C, K] Σ v_new dHᵀ
    float* dov = dkh + C * K;              // [C, C] Σ dO v_newᵀ
    float* dTv = dov + C * C;              // [C, C] Σ dv_new vbᵀ
    float* beta = dTv + C * C;             // [C]
    float* dbv = beta + C;                 // [C] Σ dvb ⊙ v
    float* hd = dbv + C;                   // [K] Σ h ⊙ dH
    for (int e = tid; e < L * L; e += kThreads) {
        const int i = e / L, j = e % L;
        Ti[i * C + j] = x.f.Tf[((r0 + i) * HV + hv) * C + j];
        dov[e] = dTv[e] = 0.f;
    }
    for (int i = tid; i < L; i += kThreads) {
        beta[i] = x.f.beta[(r0 + i) * HV + hv];
        dbv[i] = 0.f;
    }
    for (int e = tid; e < L * K; e += kThreads) dw[e] = dqh[e] = dkh[e] = 0.f;
    for (int dd = tid; dd < K; dd += kThreads) hd[dd] = 0.f;
    for (int c0 = 0; c0 < V; c0 += kStepCols) {
        __syncthreads();  // the previous columns are done with every tile
        const int64_t vo = (r0 * HV + hv) * V;
        load_tile(h, kColRow, K, kStepCols, x.f.h, p.state, state, V, c0, V);
        load_tile(dH, kColRow, K, kStepCols, x.dH, p.state, state, V, c0, V);
        load_tile(dO, kColRow, L, kStepCols, d.d_o.data, d.d_o.dtype, at(d.d_o, ck.s, ck.c0, hv),
                  d.d_o.st, c0, V);
        load_tile(vn, kColRow, L, kStepCols, x.f.v_new, in, vo, int64_t(HV) * V, c0, V);
        load_tile(dvn, kColRow, L, kStepCols, x.dvn, DType::f32, vo, int64_t(HV) * V, c0, V);
        gather_tile(L, kStepCols, p.v.data, p.v.dtype, at(p.v, ck.s, ck.c0, hv), p.v.st, c0, V,
                    [&](int i, int c, float v) { vb[i * kColRow + c] = beta[i] * v; });
        __syncthreads();
        // the step's columns kCols at a time, as every sum adds them
        for (int sub = 0; sub < kStepCols && c0 + sub < V; sub += kCols) {
            const int nc = V - c0 - sub < kCols ? V - c0 - sub : kCols;
            for (int dd = tid; dd < K; dd += kThreads) {
                float r[kCols];
                tile_row(r, dH + dd * kColRow + sub);
                hd[dd] += row_dot(0.f, h + dd * kColRow + sub, r);
            }
            key_column_sums(L, K, h + sub, dH + sub, dO + sub, vn + sub, dvn + sub, dw, dqh, dkh);
            value_column_sums(p, d, ck, hv, c0 + sub, nc, Ti, dO + sub, vn + sub, dvn + sub,
                              vb + sub, beta, dov, dTv, dbv);
        }
    }
    __syncthreads();
    for (int e = tid; e < L * K; e += kThreads) {
        const int64_t i = e / K, dd = e % K, o = ((r0 + i) * HV + hv) * K + dd;
        x.dw[o] = -dw[e];
        x.dq[o] = dqh[e];
        x.dkg[o] = dkh[e];
    }
    for (int dd = tid; dd < K; dd += kThreads) x.hdH[(slot * HV + hv) * K + dd] = hd[dd];
    for (int e = tid; e < L * L; e += kThreads) {
        const int i = e / L, j = e % L;
        const int64_t o = ((slot * HV + hv) * C + i) * C + j;
        x.P[o] = dov[e];
        x.dT[o] = dTv[e];
    }
    for (int i = tid; i < L; i += kThreads) x.dbv[(r0 + i) * HV + hv] = dbv[i];
}

/// Pass 4, a block per (chunk slot, value head): through W = Tf kb, Tf = (I + A)⁻¹, A and A_qk,
/// then G's cumsum and the gate.
// one block a multiprocessor by shared memory: without the 1, ptxas kept it to 80 registers and
// spilled
__global__ void __launch_bounds__(kThreads, 1)
    keys_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const DType in = p.q.dtype;
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0), cc = (slot * HV + hv) * C * C;
    float* k = sm;              // [C, KP] k̂
    float* G = k + C * KP;      // [C, KP]
    float* Y = G + C * KP;      // [C, KP] dW, then q̂
    float* Z = Y + C * KP;      // [C, KP] kb = β k̂ e^G, then ∂L/∂G
    const int CP = C + 1;       // the row stride of Ti and X, which row_products reads 16 rows of
    float* Ti = Z + C * KP;     // [C, CP] the fp32 inverse
    float* dT = Ti + C * CP;    // [C, C] dT, then dA
    float* X = dT + C * C;      // [C, CP] Tfᵀ dT
    float* dov = X + C * CP;    // [C, C] scale dA_qk
    float* beta = dov + C * C;  // [C]
    load_tile(k, KP, L, K, x.f.kn, in, (r0 * p.heads + h) * K, int64_t(p.heads) * K);
    load_tile(G, KP, L, K, x.f.G, DType::f32, (r0 * HV + hv) * K, int64_t(HV) * K);
    load_tile(Y, KP, L, K, x.dw, DType::f32, (r0 * HV + hv) * K, int64_t(HV) * K);
    load_tile(Ti, CP, L, L, x.f.Tf, DType::f32, (r0 * HV + hv) * C, int64_t(HV) * C);
    load_tile(dT, C, L, L, x.dT, DType::f32, cc, C);
    gather_tile(L, L, x.P, DType::f32, cc, C, 0, L,
                [&](int i, int j, float a) { dov[i * C + j] = p.scale * a; });
    for (int i = tid; i < L; i += kThreads) beta[i] = x.f.beta[(r0 + i) * HV + hv];
    __syncthreads();
    for (int e = tid; e < L * K; e += kThreads) {
        const int j = e / K, dd = e % K;
        Z[j * KP + dd] = beta[j] * (k[j * KP + dd] * expf(G[j * KP + dd]));
    }
    __syncthreads();
    // dT = dv_new vbᵀ + dW kbᵀ
    row_products<false>(
        Y, KP, Z, KP, L, K, [&](int) { return K; },
        [&](int i, int j, float a) { dT[i * C + j] += a; });
    __syncthreads();
    // X = Tfᵀ dT and dkb = Tfᵀ dW (Tf is lower triangular), dkb in dW's place in the scratch
    lower_transposed_all(Ti, CP, dT, C, L, L, [&](int i, int j, float a) { X[i * CP + j] = a; });
    lower_transposed_all(Ti, CP, Y, KP, L, K,
                         [&](int i, int dd, float a) { x.dw[((r0 + i) * HV + hv) * K + dd] = a; });
    __syncthreads();
    load_tile(Y, KP, L, K, x.f.qn, in, (r0 * p.heads + h) * K, int64_t(p.heads) * K);
    // dA = −X Tfᵀ (Tf is lower triangular: m ≤ j), read below the diagonal only (A lives there)
    row_products<true>(
        X, CP, Ti, CP, L, L - 1, [](int j) { return j + 1; },
        [&](int i, int j, float a) { dT[i * C + j] = -a; });
    __syncthreads();
    const float* q = Y;
    const float* dA = dT;
    // The intra-chunk sums per row i and key d, with E_ijd = e^{G_id − G_jd}: rowA_id = Σ_{j<i}
    // dA_ij E_ij k̂_jd, qrow_id = Σ_{j≤i} dov_ij E_ij k̂_jd and colq_id = Σ_{m>i} β_m dA_mi E_mi
    // k̂_md + Σ_{m≥i} dov_mi E_mi q̂_md, kRound keys a round. The pairs in different 16-row blocks
    // run on tensor cores, warp w taking row block I = w / 2 and 16 of the round's keys, their
    // factors split at a block edge as decayed_products splits its own (r = 16 I, s = r + 16):
    // rowA_id = e^{G_id − G_rd} Σ_{j<r} dA_ij (k̂_jd e^{G_rd − G_jd}), colq_id = e^{G_sd − G_id}
    // Σ_{m≥s} (β_m dA_mi k̂_md + dov_mi q̂_md) e^{G_md − G_sd}, coefficients and values in three
    // bf16 parts, into S1, S2 and Z's columns of the round. The pairs within a block then join
    // them in the round's finish, a warp per row and a lane per key, each factor formed per pair.
    float* S1 = beta + C;         // [C, kRound] rowA's share from the other blocks
    float* S2 = S1 + C * kRound;  // [C, kRound] qrow's
    using T16 = __nv_bfloat16;
    const int gq = lane / 4, tq = lane % 4;
    float sb[kMaxDeltaChunk / kWarps] = {};  // per row of the warp: dβ's key terms
    for (int k0 = 0; k0 < K; k0 += kRound) {
        const int I = warp / 2, r = 16 * I, s = r + 16, n0 = k0 + 16 * (warp % 2);
        float accR[2][4] = {}, accQ[2][4] = {}, accC[2][4] = {};
        for (int J = 0; J < I && r < L; ++J) {
            uint32_t ad[kParts][4], aq[kParts][4], b[2][kParts][2];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = r + gq + (u & 1) * 8, j = 16 * J + 2 * tq + (u & 2) * 4;
                const bool on = i < L;
                split_pair_regs<T16>(&ad[0][u], 4, on ? dA[i * C + j] : 0.f,
                                     on ? dA[i * C + j + 1] : 0.f);
                split_pair_regs<T16>(&aq[0][u], 4, on ? dov[i * C + j] : 0.f,
                                     on ? dov[i * C + j + 1] : 0.f);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const int dd = n0 + 8 * nt + gq;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int j = 16 * J + 2 * tq + 8 * hh;
                    float z[2] = {};
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (dd < K)
                            z[e] = k[(j + e) * KP + dd] *
                                   fast_exp(G[r * KP + dd] - G[(j + e) * KP + dd]);
                    split_pair_regs<T16>(&b[nt][0][hh], 2, z[0], z[1]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                mma_parts_regs<T16>(accR[nt], ad, b[nt]);
                mma_parts_regs<T16>(accQ[nt], aq, b[nt]);
            }
        }
        for (int M = I + 1; M < 4 && 16 * M < L && r < L; ++M) {
            uint32_t ad[kParts][4], aq[kParts][4], bk[2][kParts][2], bq[2][kParts][2];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = r + gq + (u & 1) * 8, m = 16 * M + 2 * tq + (u & 2) * 4;
                float c[2][2] = {};  // β_m dA_mi and dov_mi for m, m + 1
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    if (i < L && m + e < L) {
                        c[0][e] = beta[m + e] * dA[(m + e) * C + i];
                        c[1][e] = dov[(m + e) * C + i];
                    }
                split_pair_regs<T16>(&ad[0][u], 4, c[0][0], c[0][1]);
                split_pair_regs<T16>(&aq[0][u], 4, c[1][0], c[1][1]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                const int dd = n0 + 8 * nt + gq;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int m = 16 * M + 2 * tq + 8 * hh;
                    float zk[2] = {}, zq[2] = {};
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (m + e < L && dd < K) {
                            const float f = fast_exp(G[(m + e) * KP + dd] - G[s * KP + dd]);
                            zk[e] = k[(m + e) * KP + dd] * f;
                            zq[e] = q[(m + e) * KP + dd] * f;
                        }
                    split_pair_regs<T16>(&bk[nt][0][hh], 2, zk[0], zk[1]);
                    split_pair_regs<T16>(&bq[nt][0][hh], 2, zq[0], zq[1]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                mma_parts_regs<T16>(accC[nt], ad, bk[nt]);
                mma_parts_regs<T16>(accC[nt], aq, bq[nt]);
            }
        }
        each_accumulator<2>(r, n0, [&](int nt, int u, int i, int dd) {
            if (i >= L || dd >= K) return;
            const float gi = G[i * KP + dd], to_r = I > 0 ? fast_exp(gi - G[r * KP + dd]) : 0.f;
            S1[i * kRound + dd - k0] = accR[nt][u] * to_r;
            S2[i * kRound + dd - k0] = accQ[nt][u] * to_r;
            Z[i * KP + dd] = s < L ? accC[nt][u] * fast_exp(G[s * KP + dd] - gi) : 0.f;
        });
        __syncthreads();
        // the round's finish: the pairs within each row's block, then dq̂, dk̂ (in dW's place),
        // ∂L/∂G's intra-chunk share (in Z) and dβ's key terms
        const int dd = k0 + lane;
#pragma unroll
        for (int t = 0; t < kMaxDeltaChunk / kWarps; ++t) {
            const int i = warp + kWarps * t;
            if (i >= L || dd >= K) continue;
            const int64_t o = ((r0 + i) * HV + hv) * K + dd;
            const float dkb = x.dw[o], dq0 = x.dq[o], dkg = x.dkg[o];
            const float gi = G[i * KP + dd];
            float rowA = S1[i * kRound + lane], qrow = S2[i * kRound + lane], colq = Z[i * KP + dd];
            const int first = i / 16 * 16, end = min(first + 16, L);
            for (int j = first; j <= i; ++j) {
                const float e = j == i ? 1.f : fast_exp(gi - G[j * KP + dd]);
                const float kj = k[j * KP + dd];
                if (j < i) rowA += dA[i * C + j] * e * kj;
                qrow += dov[i * C + j] * e * kj;
            }
            for (int m = i; m < end; ++m) {
                const float e = m == i ? 1.f : fast_exp(G[m * KP + dd] - gi);
                if (m > i) colq += beta[m] * dA[m * C + i] * e * k[m * KP + dd];
                colq += dov[m * C + i] * e * q[m * KP + dd];
            }
            const float ki = k[i * KP + dd], qi = q[i * KP + dd];
            const float decay = expf(gi), to_end = expf(G[(L - 1) * KP + dd] - gi);
            const float dq = dq0 * decay * p.scale + qrow;
            const float dk_kd = dkb * beta[i] * decay;
            const float dk_kg = dkg * to_end;
            const float dk_row = beta[i] * rowA;
            x.dq[o] = dq;
            x.dw[o] = dk_kd + dk_kg + dk_row + colq;
            Z[i * KP + dd] = qi * dq + ki * (dk_kd + dk_row - colq - dk_kg);
            sb[t] += dkb * (ki * decay) + ki * rowA;
        }
        __syncthreads();  // the round's S1 and S2 are read
    }
#pragma unroll
    for (int t = 0; t < kMaxDeltaChunk / kWarps; ++t) {
        const int i = warp + kWarps * t;
        const float sum = warp_sum(sb[t]);
        if (i >= L || lane != 0) continue;
        const int64_t tt = ck.c0 + i;
        const float raw = load(p.beta.data, p.beta.dtype, at(p.beta, ck.s, tt, hv));
        store(d.dbeta.data, d.dbeta.dtype, at(d.dbeta, ck.s, tt, hv),
              beta_backward(p, raw, x.dbv[(r0 + i) * HV + hv] + sum));
    }
    __syncthreads();
    // G_last's share (exp(G_last) Σ h ⊙ dH + Σ_j kg_j ⊙ d_kg_j), then the reverse running sum
    // G's cumsum takes back, a thread per key
    for (int dd = tid; dd < K; dd += kThreads) {
        const float G_last = G[(L - 1) * KP + dd];
        float carry = 0.f;
        // unrolled: d_kg's loads go out eight at a time, not each after the last one's sum
#pragma unroll 8
        for (int j = 0; j < L; ++j)
            carry += k[j * KP + dd] * expf(G_last - G[j * KP + dd]) *
                     x.dkg[((r0 + j) * HV + hv) * K + dd];
        Z[(L - 1) * KP + dd] += expf(G_last) * x.hdH[(slot * HV + hv) * K + dd] + carry;
        float acc = 0.f;
        for (int i = L; i-- > 0;) Z[i * KP + dd] = acc += Z[i * KP + dd];
    }
    __syncthreads();
    // back through the gate, a warp per row
    const float rate = p.gate_in_kernel ? expf(p.A_log[hv]) : 0.f;
    for (int i = warp; i < L; i += kWarps) {
        const int64_t t = ck.c0 + i, item = (r0 + i) * HV + hv;
        const int64_t go = at(p.g, ck.s, t, hv), dgo = at(d.dg, ck.s, t, hv);
        float dA_log = 0.f;
        for (int dd = lane; dd < K; dd += 32) {
            const float dg = Z[i * KP + dd];
            if (!p.gate_in_kernel) {
                store(d.dg.data, d.dg.dtype, dgo + dd, dg);
                continue;
            }
            const float bias = p.dt_bias != nullptr ? p.dt_bias[int64_t(hv) * K + dd] : 0.f;
            const GateGrads gg =
                gate_backward(p, rate, load(p.g.data, p.g.dtype, go + dd) + bias, dg);
            store(d.dg.data, d.dg.dtype, dgo + dd, gg.d_arg);
            x.ddt[item * K + dd] = gg.d_arg;
            dA_log += gg.d_A_log;
        }
        if (!p.gate_in_kernel) continue;
        dA_log = warp_sum(dA_log);
        if (lane == 0) x.dA_log[item] = dA_log;
    }
}

}  // namespace

int64_t kda_chunk_workspace_floats(const DeltaChunkProblem& p) {
    int64_t floats = 0;
    scratch_of(p, nullptr, floats);
    return floats;
}

DeltaGateTerms kda_chunk_terms(const DeltaChunkProblem& p) {
    // the scratch ends with the [rows, HV] terms of dA_log and the [rows, HV, K] of ddt_bias
    DeltaGateTerms t;
    t.rows = packed_rows(p.seqs);
    t.width = p.dk;
    t.ddt_bias = kda_chunk_workspace_floats(p) - t.rows * p.value_heads * p.dk;
    t.dA_log = t.ddt_bias - t.rows * p.value_heads;
    return t;
}

void kda_chunk_bwd(const DeltaChunkProblem& p, const DeltaGrads& d, cudaStream_t stream) {
    if (p.seqs.n == 0 || p.value_heads == 0 || p.dv == 0) return;
    int64_t floats = 0;
    const Scratch x = scratch_of(p, d.workspace, floats);
    DeltaChunkProblem f = p;  // pass 1: the forward, keeping what the backward reads
    f.o.data = nullptr;
    f.ht = nullptr;
    f.h = nullptr;
    kda_chunk_fwd(f, x.f, stream);
    const int64_t K = p.dk, C = p.chunk, HV = p.value_heads;
    const int64_t slots = chunk_slots(p.seqs, p.chunk);
    const int64_t KP = padded_keys(p.dk);
    // at K = 128, C = 64: 97 KB, 97 KB, 217 KB and 215 KB
    if (slots > 0)
        launch_chunk_kernel(scores_bwd, dim3(unsigned(slots), unsigned(HV)), 3 * C * KP, stream, p,
                            d, x);
    const bool tensor_cores =
        delta_chunk_tensor_cores(p) && d.d_o.dtype == p.q.dtype && p.v.dtype == p.q.dtype;
    if (tensor_cores)
        kda_chunk_state_bwd_tc(p, d, x.f, x.P, x.dH, x.dvn, stream);
    else
        launch_chunk_kernel(state_bwd,
                            dim3(unsigned(p.seqs.n * HV), unsigned((p.dv + kTile - 1) / kTile)),
                            C * KP + C * C + 2 * C * kTile + 2 * K * kTile + K, stream, p, d, x);
    if (slots > 0 && tensor_cores)
        kda_chunk_values_bwd_tc(
            p, d, x.f, {x.dH, x.dvn, x.dw, x.dq, x.dkg, x.P, x.dT, x.dbv, x.hdH}, slots, stream);
    else if (slots > 0)
        launch_chunk_kernel(values_bwd, dim3(unsigned(slots), unsigned(HV)),
                            whole_float4s(C * C) + 2 * C * C + 2 * K * kColRow + 4 * C * kColRow +
                                3 * C * K + 2 * C + K,
                            stream, p, d, x);
    if (slots > 0)
        launch_chunk_kernel(keys_bwd, dim3(unsigned(slots), unsigned(HV)),
                            4 * C * KP + 2 * C * C + 2 * C * (C + 1) + C + 2 * C * kRound, stream,
                            p, d, x);
    finish_chunk_keys(p, d, x.dq, x.dw, nullptr, nullptr, stream);
    LAV_CUDA_CHECK(cudaGetLastError(), "kda_chunk_bwd");
}

}  // namespace lav::cuda
