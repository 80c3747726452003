// kernels/common/cuda/delta_chunk_bwd.cu — the delta rule's chunk (WY / UT) backward on CUDA for
// delta_rule and gated_delta_rule, in fp32 FMA arithmetic; where the forward runs on tensor cores
// and d_o is in the input dtype, passes 2 to 4 do too (delta_chunk_tc.cu, delta_chunk_bwd_tc.cu,
// delta_chunk_keys_tc.cu).
//
// The CPU chunk backward (common/cpu/delta_chunk.h chunk_bwd) in five passes, each value
// rounded where that contract rounds it:
//  1. the chunk forward again (delta_chunk.cu), keeping what the later passes read: q̂, k̂, w,
//     the rows of (I + A)⁻¹, v_new, G, β and the stored chunk states h;
//  2. a block per (chunk, value head) makes the scores P = (q̂ k̂ᵀ) ⊙ e^{G_i − G_j} in fp32, then a
//     block per (sequence, value head, 32 value columns) walks the chunks backwards carrying dS
//     in fp32: it keeps each chunk's dH = round(dS) and dv_new = (k dH) e^{G_last − G} +
//     scale Pᵀ dO, then dS ← e^{G_last} dS + scale (q e^G)ᵀ dO − wᵀ dv_new, holding one of k̂,
//     q̂, w at a time so that keys 256 wide fit;
//  3. a block per (chunk, value head) adds the sums over the value columns: dw = −dv_new hᵀ,
//     dO hᵀ, v_new dHᵀ (128 keys at a time), dO v_newᵀ, dv_new vbᵀ and ⟨h, dH⟩, and writes
//     dv = β Tiᵀ dv_new;
//  4. a block per (chunk, value head) goes back through w = Ti kb, Ti = (I + A)⁻¹, A and the
//     gate: dq and dk per value head, dβ and dg (reverse-summed within the chunk);
//  5. a warp per (row, key head) adds dq and dk over the key head's value heads in order and
//     takes them back through the l2norm.
// No atomics: every sum has one order, so two runs give the same bits.
#include <cuda_runtime.h>

#include <stdexcept>
#include <type_traits>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_chunk.cuh"

namespace lav::cuda {
namespace {

constexpr int kThreads = kDeltaChunkThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;  // value columns per block of the dS pass
constexpr int kCols = kChunkCols, kStepCols = kChunkStepCols, kColRow = kChunkColRow;
// keys per round of the column sums: their [C, keys] accumulators are most of the block's tiles
constexpr int kKeyPart = 128;

/// The scratch: the forward's kept values, then the backward's (fp32 unless marked).
struct Scratch {
    DeltaChunkSaved f;
    void* dH;         // [slots, HV, K, V] round(dS) entering each chunk's reverse step, in `st`
    float* dvn;       // [rows, HV, V] dv_new
    float* dw;        // [rows, HV, K] dw, then dkb = Tiᵀ dw
    float *dq, *dk;   // [rows, HV, K] the state terms Σ dO hᵀ, Σ v_new dHᵀ; then dq̂, dk̂
    float *dov, *dT;  // [slots, HV, C, C] the scores P, then scale (dO v_newᵀ ⊙ D); dv_new vbᵀ
    float* dbv;       // [rows, HV] Σ dvb ⊙ v, dβ's value term
    float* hdH;       // [slots, HV] ⟨h, dH⟩
    float *dA_log, *ddt;  // [rows, HV] the in-kernel gate's terms
};

/// The scratch at `base` (nullptr: only its size, in `floats`).
Scratch scratch_of(const DeltaChunkProblem& p, float* base, int64_t& floats) {
    const int64_t rows = packed_rows(p.seqs), slots = chunk_slots(p.seqs, p.chunk);
    const int64_t HV = p.value_heads, K = p.dk, V = p.dv, C = p.chunk;
    Scratch x;
    x.f = delta_chunk_saved(p, base, floats);
    ChunkWorkspace ws(base, floats);
    const auto take = [&](int64_t n) { return ws.take(n); };
    x.dH = ws.take(slots * HV * K * V, p.state);
    x.dvn = take(rows * HV * V);
    x.dw = take(rows * HV * K);
    x.dq = take(rows * HV * K);
    x.dk = take(rows * HV * K);
    x.dov = take(slots * HV * C * C);
    x.dT = take(slots * HV * C * C);
    x.dbv = take(rows * HV);
    x.hdH = take(slots * HV);
    x.dA_log = take(rows * HV);  // last, as delta_chunk_terms() finds them
    x.ddt = take(rows * HV);
    floats = ws.floats();
    return x;
}

/// Pass 2a, a block per (chunk slot, value head): the scores P = (q̂_i·k̂_j) exp(G_i − G_j) for
/// j ≤ i in fp32, into dov's place (pass 3 writes dov once pass 2b has read P).
__global__ void __launch_bounds__(kThreads) scores_bwd(DeltaChunkProblem p, DeltaGrads, Scratch x) {
    extern __shared__ float sm[];
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    const DType in = p.q.dtype;
    float* q = sm;          // [C, K] q̂
    float* k = q + C * K;   // [C, KP] k̂
    float* G = k + C * KP;  // [C]
    load_tile(q, K, L, K, x.f.qn, in, (r0 * p.heads + h) * K, p.heads * K);
    load_tile(k, KP, L, K, x.f.kn, in, (r0 * p.heads + h) * K, p.heads * K);
    for (int i = tid; i < L; i += kThreads) G[i] = x.f.G[(r0 + i) * HV + hv];
    __syncthreads();
    for (int e = tid; e < L * L; e += kThreads) {
        const int i = e / L, j = e % L;
        float a = 0.f;
        if (j <= i) {
            for (int dd = 0; dd < K; ++dd) a += q[i * K + dd] * k[j * KP + dd];
            a *= expf(G[i] - G[j]);
        }
        x.dov[((slot * HV + hv) * C + i) * C + j] = a;
    }
}

/// Pass 2b, a block per (sequence, value head, kTile value columns). One key tile at a time
/// (k̂ for dv_new, then q̂ and w for dS), so that the block fits keys 256 wide.
__global__ void __launch_bounds__(kThreads)
    state_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads, V = p.dv;
    const int n = blockIdx.x / HV, hv = blockIdx.x % HV, h = hv / (HV / p.heads);
    const int col0 = blockIdx.y * kTile;
    const Span s = span(p.seqs, n);
    const int tid = threadIdx.x;
    float* X = sm;                // [C, KP] k̂, then q̂, then w
    float* P = X + C * KP;        // [C, C] the scores
    float* dO = P + C * C;        // [C, kTile]
    float* dvn = dO + C * kTile;  // [C, kTile]
    float* dS = dvn + C * kTile;  // [K, kTile] the carried fp32 dS
    float* dH = dS + K * kTile;   // [K, kTile] dS as stored, then the dO term of the new dS
    float* G = dH + K * kTile;    // [C]
    float* q_scale = G + C;       // [C] exp(G) scale
    const int64_t state = (int64_t(n) * HV + hv) * K * V;
    load_tile(dS, kTile, K, kTile, d.dht, p.state, state, V, col0, d.dht != nullptr ? V : 0);
    // a [C, K] tile of per-row values in the padded rows of X
    const auto load_rows = [&](const void* src, int64_t r0, int L, int heads, int head) {
        load_tile(X, KP, L, K, src, p.q.dtype, (r0 * heads + head) * K, int64_t(heads) * K);
    };
    const int64_t first = first_slot(p.seqs, C, n, s);
    for (int64_t ch = (s.len + C - 1) / C; ch-- > 0;) {
        const int64_t t0 = ch * C;
        const int L = int(s.len - t0 < C ? s.len - t0 : C);
        const int64_t r0 = row(p.seqs, s, t0), slot = (first + ch) * HV + hv;
        __syncthreads();  // the later chunk is done with every tile
        load_rows(x.f.kn, r0, L, p.heads, h);
        for (int e = tid; e < L * L; e += kThreads) {
            const int i = e / L, j = e % L;
            P[i * C + j] = x.dov[(slot * C + i) * C + j];
        }
        load_tile(dO, kTile, L, kTile, d.d_o.data, d.d_o.dtype, at(d.d_o, s, t0, hv), d.d_o.st,
                  col0, V);
        for (int i = tid; i < L; i += kThreads) {
            G[i] = x.f.G[(r0 + i) * HV + hv];
            q_scale[i] = expf(G[i]) * p.scale;
        }
        // the stored copy of dS, which this chunk's passes read
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = col0 + e % kTile;
            dH[e] = rounded(dS[e], p.state);
            if (c < V) store(x.dH, p.state, (slot * K + dd) * V + c, dH[e]);
        }
        __syncthreads();
        // dv_new = (k dH) ⊙ exp(G_last − G) + scale Pᵀ dO
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            float a = 0.f;
            for (int dd = 0; dd < K; ++dd) a += X[i * KP + dd] * dH[dd * kTile + c];
            float b = 0.f;
            for (int j = i; j < L; ++j) b += P[j * C + i] * dO[j * kTile + c];
            dvn[e] = a * expf(G[L - 1] - G[i]) + b * p.scale;
            if (col0 + c < V) x.dvn[((r0 + i) * HV + hv) * V + col0 + c] = dvn[e];
        }
        __syncthreads();
        // dS ← exp(G_last) dS + (q ⊙ exp(G) scale)ᵀ dO − wᵀ dv_new: the first term into dH's
        // place, which dv_new has read
        load_rows(x.f.qn, r0, L, p.heads, h);
        __syncthreads();
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = e % kTile;
            float a = 0.f;
            for (int i = 0; i < L; ++i) a += X[i * KP + dd] * q_scale[i] * dO[i * kTile + c];
            dH[e] = a;
        }
        __syncthreads();
        load_rows(x.f.w, r0, L, HV, hv);
        __syncthreads();
        const float last = expf(G[L - 1]);
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = e % kTile;
            float b = 0.f;
            for (int i = 0; i < L; ++i) b += X[i * KP + dd] * dvn[i * kTile + c];
            dS[e] = dS[e] * last + dH[e] - b;
        }
    }
    __syncthreads();
    if (d.dh0 == nullptr) return;
    store_state_tile(d.dh0, p.state, state, V, col0, dS, K, kTile);
}

/// Pass 3, a block per (chunk slot, value head): the sums over the value columns, kCols at a
/// time, each thread adding to the elements it owns; the [C, K] sums kKeyPart keys at a time
/// (the first round also takes the sums without a key axis).
// shared memory, not registers, bounds its blocks per multiprocessor: without the 1, ptxas kept
// it to 64 registers and spilled
__global__ void __launch_bounds__(kThreads, 1)
    values_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int KH = K < kKeyPart ? K : kKeyPart;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y;
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0), state = (slot * HV + hv) * K * V;
    const DType in = p.q.dtype;
    float* Ti = sm;                        // [C, C]
    float* h = Ti + whole_float4s(C * C);  // [KH, kColRow] the stored state
    float* dH = h + KH * kColRow;          // [KH, kColRow]
    float* dO = dH + KH * kColRow;         // [C, kColRow]
    float* vn = dO + C * kColRow;          // [C, kColRow] v_new
    float* dvn = vn + C * kColRow;         // [C, kColRow] dv_new
    float* vb = dvn + C * kColRow;         // [C, kColRow] round(v β)
    float* dw = vb + C * kColRow;          // [C, KH] Σ dv_new hᵀ
    float* dqh = dw + C * KH;              // [C, KH] Σ dO hᵀ
    float* dkh = dqh + C * KH;             // [C, KH] Σ v_new dHᵀ
    float* dov = dkh + C * KH;             // [C, C] Σ dO v_newᵀ
    float* dTv = dov + C * C;              // [C, C] Σ dv_new vbᵀ
    float* beta = dTv + C * C;             // [C]
    float* G = beta + C;                   // [C]
    float* dbv = G + C;                    // [C] Σ dvb ⊙ v
    float* part = dbv + C;                 // [kWarps]
    load_tile(Ti, C, L, L, x.f.Ti, in, (r0 * HV + hv) * C, int64_t(HV) * C);
    for (int e = tid; e < L * L; e += kThreads) dov[e] = dTv[e] = 0.f;
    for (int i = tid; i < L; i += kThreads) {
        beta[i] = x.f.beta[(r0 + i) * HV + hv];
        G[i] = x.f.G[(r0 + i) * HV + hv];
        dbv[i] = 0.f;
    }
    float hd = 0.f;
    for (int k0 = 0; k0 < K; k0 += KH) {
        const int nk = K - k0 < KH ? K - k0 : KH;
        const bool first = k0 == 0;
        __syncthreads();  // the previous keys' sums are stored
        for (int e = tid; e < L * KH; e += kThreads) dw[e] = dqh[e] = dkh[e] = 0.f;
        for (int c0 = 0; c0 < V; c0 += kStepCols) {
            __syncthreads();  // the previous columns are done with every tile
            const int64_t hk = state + int64_t(k0) * V, vo = (r0 * HV + hv) * V;
            load_tile(h, kColRow, nk, kStepCols, x.f.h, p.state, hk, V, c0, V);
            load_tile(dH, kColRow, nk, kStepCols, x.dH, p.state, hk, V, c0, V);
            load_tile(dO, kColRow, L, kStepCols, d.d_o.data, d.d_o.dtype,
                      at(d.d_o, ck.s, ck.c0, hv), d.d_o.st, c0, V);
            load_tile(vn, kColRow, L, kStepCols, x.f.v_new, in, vo, int64_t(HV) * V, c0, V);
            load_tile(dvn, kColRow, L, kStepCols, x.dvn, DType::f32, vo, int64_t(HV) * V, c0, V);
            if (first)
                gather_tile(
                    L, kStepCols, p.v.data, p.v.dtype, at(p.v, ck.s, ck.c0, hv), p.v.st, c0, V,
                    [&](int i, int c, float v) { vb[i * kColRow + c] = rounded(v * beta[i], in); });
            __syncthreads();
            // the step's columns kCols at a time, as every sum adds them
            for (int sub = 0; sub < kStepCols && c0 + sub < V; sub += kCols) {
                const int nc = V - c0 - sub < kCols ? V - c0 - sub : kCols;
                for (int e = tid; e < nk * kCols; e += kThreads) {
                    const int o = e / kCols * kColRow + sub + e % kCols;
                    hd += h[o] * dH[o];
                }
                key_column_sums(L, nk, h + sub, dH + sub, dO + sub, vn + sub, dvn + sub, dw, dqh,
                                dkh);
                if (first)
                    value_column_sums(p, d, ck, hv, c0 + sub, nc, Ti, dO + sub, vn + sub, dvn + sub,
                                      vb + sub, beta, dov, dTv, dbv);
            }
        }
        __syncthreads();
        for (int e = tid; e < L * nk; e += kThreads) {
            const int64_t i = e / nk, dd = e % nk, o = ((r0 + i) * HV + hv) * K + k0 + dd;
            x.dw[o] = -dw[e];
            x.dq[o] = dqh[e];
            x.dk[o] = dkh[e];
        }
    }
    hd = warp_sum(hd);
    if (lane == 0) part[warp] = hd;
    __syncthreads();
    if (tid == 0) {
        float sum = 0.f;
        for (int i = 0; i < kWarps; ++i) sum += part[i];
        x.hdH[slot * HV + hv] = sum;
    }
    for (int e = tid; e < L * L; e += kThreads) {
        const int i = e / L, j = e % L;
        const int64_t o = ((slot * HV + hv) * C + i) * C + j;
        x.dov[o] = j <= i ? dov[e] * expf(G[i] - G[j]) * p.scale : 0.f;
        x.dT[o] = dTv[e];
    }
    for (int i = tid; i < L; i += kThreads) x.dbv[(r0 + i) * HV + hv] = dbv[i];
}

/// Pass 4, a block per (chunk slot, value head): through w = Ti kb, Ti = (I + A)⁻¹ and A.
__global__ void __launch_bounds__(kThreads) keys_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0), cc = (slot * HV + hv) * C * C;
    const DType in = p.q.dtype;
    float* k = sm;            // [C, KP] k̂
    float* Y = k + C * KP;    // [C, K] dw, then q̂
    const int CP = C + 1;     // the row stride of Ti and X, which row_products reads 16 rows of
    float* Ti = Y + C * K;    // [C, CP]
    float* dT = Ti + C * CP;  // [C, C] dT, then M = dA ⊙ D
    float* X = dT + C * C;    // [C, CP] Tiᵀ dT, then k̂ k̂ᵀ
    float* dov = X + C * CP;  // [C, C]
    float* G = dov + C * C;   // [C]
    float* beta = G + C;      // [C]
    float* dG = beta + C;     // [C]
    float* db = dG + C;       // [C] dβ as used
    float* kdk = db + C;      // [C] k̂·dk_inter of each row
    const float* dw = Y;
    load_tile(k, KP, L, K, x.f.kn, in, (r0 * p.heads + h) * K, int64_t(p.heads) * K);
    load_tile(Y, K, L, K, x.dw, DType::f32, (r0 * HV + hv) * K, int64_t(HV) * K);
    load_tile(Ti, CP, L, L, x.f.Ti, in, (r0 * HV + hv) * C, int64_t(HV) * C);
    load_tile(dT, C, L, L, x.dT, DType::f32, cc, C);
    load_tile(dov, C, L, L, x.dov, DType::f32, cc, C);
    for (int i = tid; i < L; i += kThreads) {
        G[i] = x.f.G[(r0 + i) * HV + hv];
        beta[i] = x.f.beta[(r0 + i) * HV + hv];
    }
    __syncthreads();
    // dT = dw kbᵀ + dv_new vbᵀ, kb = round(k β exp(G)): a thread takes rows tid / 16 + 16 u and
    // columns tid % 16 + 16 v (u, v < 4), 8 values read and 4 rounded per 16 FMAs
    {
        const int i0 = tid / 16, j0 = tid % 16;
        float bd[4], a[4][4] = {};
        int ri[4], rj[4];  // the rows read, clamped to the chunk
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            ri[v] = i0 + 16 * v < L ? i0 + 16 * v : L - 1;
            rj[v] = j0 + 16 * v < L ? j0 + 16 * v : L - 1;
            bd[v] = beta[rj[v]] * expf(G[rj[v]]);
        }
        with_rounding(in, [&](auto round) {
            for (int dd = 0; dd < K; ++dd) {
                float w[4], kb[4];
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    w[v] = dw[ri[v] * K + dd];
                    kb[v] = round(k[rj[v] * KP + dd] * bd[v]);
                }
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int v = 0; v < 4; ++v) a[u][v] += w[u] * kb[v];
            }
        });
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int v = 0; v < 4; ++v)
                if (i0 + 16 * u < L && j0 + 16 * v < L)
                    dT[(i0 + 16 * u) * C + j0 + 16 * v] += a[u][v];
    }
    __syncthreads();
    // X = Tiᵀ dT and dkb = Tiᵀ dw (Ti is lower triangular), dkb in dw's place in the scratch: the
    // block keeps k̂ and one more key tile, so that keys 256 wide fit
    lower_transposed_all(Ti, CP, dT, C, L, L, [&](int i, int j, float a) { X[i * CP + j] = a; });
    lower_transposed_all(Ti, CP, dw, K, L, K,
                         [&](int i, int dd, float a) { x.dw[((r0 + i) * HV + hv) * K + dd] = a; });
    __syncthreads();
    float* q = Y;  // [C, K] q̂, in dw's place
    load_tile(q, K, L, K, x.f.qn, in, (r0 * p.heads + h) * K, int64_t(p.heads) * K);
    // dA = −X Tiᵀ below the diagonal (Ti is lower triangular: m ≤ j), and M = dA ⊙
    // exp(G_i − G_j) over dT; the rows below read M and k̂ k̂ᵀ below the diagonal only
    row_products<true>(
        X, CP, Ti, CP, L, L - 1, [](int j) { return j + 1; },
        [&](int i, int j, float a) { dT[i * C + j] = -a * expf(G[i] - G[j]); });
    __syncthreads();
    row_products<true>(
        k, KP, k, KP, L, K, [&](int) { return K; },
        [&](int i, int j, float a) { X[i * CP + j] = a; });
    __syncthreads();
    const float* M = dT;
    const float* kk = X;
    // dq, dk per value head, dβ and ∂L/∂G_i before the reverse sum, by blocks of R rows: a warp
    // takes pairs of blocks b and last − b (so that the warps sum as many terms), a lane the keys
    // dd = lane + 32 m, m < nm ≤ P, so that each j's values are read once for R rows and all of
    // a lane's keys; every sum in ascending j, as a row at a time took them. R · P = 16 keeps the
    // sums in registers.
    const int nm = (K - lane + 31) / 32;
    const auto row_blocks = [&](auto rows, auto per) {
        constexpr int R = decltype(rows)::value, P = decltype(per)::value;
        constexpr int blocks = kMaxDeltaChunk / R;
        static_assert(blocks % (2 * kWarps) == 0, "pairs of blocks for every warp");
        for (int b = 0; b < blocks / kWarps; ++b) {
            const int pair = b / 2 * kWarps + warp;
            const int i0 = R * (b % 2 == 0 ? pair : blocks - 1 - pair);
            if (i0 >= L) continue;
            const int nu = L - i0 < R ? L - i0 : R;  // rows of the block in the chunk
            float dq[R][P], intra[R][P] = {}, ak[R][P] = {}, bk[R][P] = {};
#pragma unroll
            for (int u = 0; u < R; ++u) {
                const int i = i0 + u < L ? i0 + u : L - 1;
                const float f = expf(G[i]) * p.scale;
                const int64_t o0 = ((r0 + i) * HV + hv) * K + lane;
#pragma unroll
                for (int m = 0; m < P; ++m) dq[u][m] = m < nm ? x.dq[o0 + 32 * m] * f : 0.f;
            }
            for (int j = 0; j < i0 + nu; ++j) {
                float dv[R], mij[R], kv[P];
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    const int i = i0 + u < L ? i0 + u : L - 1;
                    dv[u] = dov[i * C + j];
                    mij[u] = j < i ? M[i * C + j] : 0.f;
                }
#pragma unroll
                for (int m = 0; m < P; ++m) kv[m] = m < nm ? k[j * KP + lane + 32 * m] : 0.f;
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    if (j > i0 + u) continue;
#pragma unroll
                    for (int m = 0; m < P; ++m) {
                        dq[u][m] += dv[u] * kv[m];
                        if (j < i0 + u) ak[u][m] += mij[u] * kv[m];
                    }
                }
            }
            for (int j = i0; j < L; ++j) {
                float dv[R], mji[R], qv[P], kb[P];
                const float bj = beta[j];
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    const int i = i0 + u < L ? i0 + u : L - 1;
                    dv[u] = dov[j * C + i];
                    mji[u] = M[j * C + i];
                }
#pragma unroll
                for (int m = 0; m < P; ++m) {
                    qv[m] = m < nm ? q[j * K + lane + 32 * m] : 0.f;
                    kb[m] = m < nm ? k[j * KP + lane + 32 * m] * bj : 0.f;
                }
#pragma unroll
                for (int u = 0; u < R; ++u) {
                    if (j < i0 + u) continue;
#pragma unroll
                    for (int m = 0; m < P; ++m) {
                        intra[u][m] += dv[u] * qv[m];
                        if (j > i0 + u) bk[u][m] += mji[u] * kb[m];
                    }
                }
            }
            // the block's state terms and dkb, fetched together
            float inter[R][P], dkb[R][P];
#pragma unroll
            for (int u = 0; u < R; ++u) {
                const int i = i0 + u < L ? i0 + u : L - 1;
                const float to_end = expf(G[L - 1] - G[i]);
                const int64_t o0 = ((r0 + i) * HV + hv) * K + lane;
#pragma unroll
                for (int m = 0; m < P; ++m) {
                    inter[u][m] = m < nm ? x.dk[o0 + 32 * m] * to_end : 0.f;
                    dkb[u][m] = m < nm ? x.dw[o0 + 32 * m] : 0.f;
                }
            }
#pragma unroll
            for (int u = 0; u < R; ++u) {
                if (u >= nu) break;
                const int i = i0 + u;
                const float decay = expf(G[i]);
                const int64_t o0 = ((r0 + i) * HV + hv) * K + lane;
                float sq = 0.f, sk = 0.f, skb = 0.f, skin = 0.f;
#pragma unroll
                for (int m = 0; m < P; ++m) {
                    if (m >= nm) break;
                    const int dd = lane + 32 * m;
                    const int64_t o = o0 + 32 * m;
                    const float dk = intra[u][m] + inter[u][m] + dkb[u][m] * (beta[i] * decay) +
                                     (ak[u][m] * beta[i] + bk[u][m]);
                    x.dq[o] = dq[u][m];
                    x.dk[o] = dk;
                    sq += q[i * K + dd] * dq[u][m];
                    sk += k[i * KP + dd] * (intra[u][m] + inter[u][m]);
                    skb += dkb[u][m] * k[i * KP + dd];
                    skin += k[i * KP + dd] * inter[u][m];
                }
                sq = warp_sum(sq), sk = warp_sum(sk), skb = warp_sum(skb), skin = warp_sum(skin);
                if (lane != 0) continue;
                float mk = 0.f, f = 0.f;
                for (int j = 0; j < i; ++j) {
                    mk += M[i * C + j] * kk[i * CP + j];
                    f += M[i * C + j] * kk[i * CP + j] * beta[i];
                }
                for (int j = i + 1; j < L; ++j) f -= M[j * C + i] * kk[j * CP + i] * beta[j];
                db[i] = skb * decay + x.dbv[(r0 + i) * HV + hv] + mk;
                dG[i] = sq - sk + skb * (beta[i] * decay) + f;
                kdk[i] = skin;
            }
        }
    };
    using std::integral_constant;
    if (K <= 128)
        row_blocks(integral_constant<int, 4>{}, integral_constant<int, 4>{});
    else
        row_blocks(integral_constant<int, 2>{}, integral_constant<int, 8>{});
    __syncthreads();
    store_key_grads(p, d, ck, hv, r0, G, dG, db, kdk, x.hdH + slot * HV + hv, x.dA_log, x.ddt);
}

/// Pass 5, a warp per (row, key head): finish_chunk_keys().
__global__ void __launch_bounds__(kThreads)
    finish_keys(DeltaChunkProblem p, DeltaGrads d, const float* dq, const float* dk, const void* qn,
                const void* kn, int64_t rows) {
    const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (item >= rows * p.heads) return;
    const int lane = threadIdx.x % 32, K = p.dk, group = p.value_heads / p.heads;
    const int64_t r = item / p.heads;
    const int h = int(item % p.heads);
    const Span s = {r / p.seqs.t, 0, p.seqs.t};
    const int64_t t = r % p.seqs.t;
    // a lane's keys lane + 32 m in registers, each array's loads issued together: a warp waits
    // out a few load latencies, not one a key and pass
    constexpr int M = kMaxDeltaChunkKeys / 32;
    const auto finish = [&](const Strided& src, const Strided& out, const float* grad,
                            const void* xhat) {
        const int64_t io = at(src, s, t, h), oo = at(out, s, t, h);
        float dy[M] = {}, x[M] = {}, y[M] = {};
        uint32_t xb[M] = {}, yb[M] = {};
#pragma unroll
        for (int m = 0; m < M; ++m) {
            if (!p.l2norm || lane + 32 * m >= K) continue;
            xb[m] = raw(src.data, src.dtype, io + lane + 32 * m);
            if (xhat != nullptr) yb[m] = raw(xhat, p.q.dtype, item * K + lane + 32 * m);
        }
        const float* g = grad + (r * p.value_heads + h * group) * K + lane;
        for (int j = 0; j < group; ++j, g += K)
#pragma unroll
            for (int m = 0; m < M; ++m)
                if (lane + 32 * m < K) dy[m] += g[32 * m];
        float ss = 0.f, dot = 0.f;
        if (p.l2norm) {
#pragma unroll
            for (int m = 0; m < M; ++m) {
                x[m] = widen(xb[m], src.dtype);
                y[m] = widen(yb[m], p.q.dtype);
                ss += x[m] * x[m];
            }
            const float rstd = 1.f / sqrtf(warp_sum(ss) + kL2NormEps);
#pragma unroll
            for (int m = 0; m < M; ++m) {
                if (xhat == nullptr) y[m] = x[m] * rstd;
                dot += dy[m] * y[m];
            }
            dot = warp_sum(dot);
#pragma unroll
            for (int m = 0; m < M; ++m) dy[m] = (dy[m] - dot * y[m]) * rstd;
        }
#pragma unroll
        for (int m = 0; m < M; ++m)
            if (lane + 32 * m < K) store(out.data, out.dtype, oo + lane + 32 * m, dy[m]);
    };
    finish(p.q, d.dq, dq, qn);
    finish(p.k, d.dk, dk, kn);
}

}  // namespace

int64_t delta_chunk_workspace_floats(const DeltaChunkProblem& p) {
    int64_t floats = 0;
    scratch_of(p, nullptr, floats);
    return floats;
}

DeltaGateTerms delta_chunk_terms(const DeltaChunkProblem& p) {
    // the scratch ends with the two [rows, HV] terms
    DeltaGateTerms t;
    t.rows = packed_rows(p.seqs);
    t.ddt_bias = delta_chunk_workspace_floats(p) - t.rows * p.value_heads;
    t.dA_log = t.ddt_bias - t.rows * p.value_heads;
    return t;
}

void delta_chunk_bwd(const DeltaChunkProblem& p, const DeltaGrads& d, cudaStream_t stream) {
    if (p.seqs.n == 0 || p.value_heads == 0 || p.dv == 0) return;
    int64_t floats = 0;
    const Scratch x = scratch_of(p, d.workspace, floats);
    DeltaChunkProblem f = p;  // pass 1: the forward, keeping what the backward reads
    f.o.data = nullptr;
    f.ht = nullptr;
    f.h = nullptr;
    delta_chunk_fwd(f, d.workspace, stream);
    const int64_t K = p.dk, C = p.chunk, HV = p.value_heads;
    const int64_t slots = chunk_slots(p.seqs, p.chunk);
    const int64_t KP = padded_keys(p.dk), KH = K < kKeyPart ? K : kKeyPart;
    const bool tensor_cores = delta_chunk_tensor_cores(p) && d.d_o.dtype == p.q.dtype;
    if (slots > 0 && tensor_cores)
        delta_chunk_scores_bwd_tc(p, x.f, x.dov, slots, stream);
    else if (slots > 0)
        launch_chunk_kernel(scores_bwd, dim3(unsigned(slots), unsigned(HV)), C * K + C * KP + C,
                            stream, p, d, x);
    if (tensor_cores)
        delta_chunk_state_bwd_tc(p, d, x.f, x.dov, x.dH, x.dvn, stream);
    else
        launch_chunk_kernel(
            state_bwd, dim3(unsigned(p.seqs.n * HV), unsigned((p.dv + kTile - 1) / kTile)),
            C * KP + C * C + 2 * C * kTile + 2 * K * kTile + 2 * C, stream, p, d, x);
    const DeltaValueSums sums{x.dH, x.dvn, x.dw, x.dq, x.dk, x.dov, x.dT, x.dbv, x.hdH};
    if (slots > 0 && tensor_cores)
        delta_chunk_values_bwd_tc(p, d, x.f, sums, slots, stream);
    else if (slots > 0)
        launch_chunk_kernel(values_bwd, dim3(unsigned(slots), unsigned(HV)),
                            whole_float4s(C * C) + 2 * C * C + 2 * KH * kColRow + 4 * C * kColRow +
                                3 * C * KH + 3 * C + kWarps,
                            stream, p, d, x);
    if (slots > 0 && tensor_cores)
        delta_chunk_keys_bwd_tc(p, d, x.f, sums, x.dA_log, x.ddt, slots, stream);
    else if (slots > 0)
        launch_chunk_kernel(keys_bwd, dim3(unsigned(slots), unsigned(HV)),
                            C * KP + C * K + 2 * C * C + 2 * C * (C + 1) + 5 * C, stream, p, d, x);
    finish_chunk_keys(p, d, x.dq, x.dk, x.f.qn, x.f.kn, stream);
    LAV_CUDA_CHECK(cudaGetLastError(), "delta_chunk_bwd");
}

void finish_chunk_keys(const DeltaChunkProblem& p, const DeltaGrads& d, const float* dq,
                       const float* dk, const void* qn, const void* kn, cudaStream_t stream) {
    const int64_t rows = packed_rows(p.seqs);
    if (rows > 0)
        finish_keys<<<unsigned((rows * p.heads + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
            p, d, dq, dk, qn, kn, rows);
}

}  // namespace lav::cuda
