// kernels/common/cuda/delta_chunk.cu — the delta rule's chunk (WY / UT) forward on CUDA for
// delta_rule and gated_delta_rule, in fp32 FMA arithmetic (correctness first; no tensor cores).
//
// A block is one (sequence, value head, kTile value columns) and walks the sequence's chunks
// in order with the fp32 state tile [K, kTile] in shared memory. Per chunk it mirrors the CPU
// chunk forward (common/cpu/delta_chunk.h chunk_fwd) step by step, rounding where its contract
// stores: the normalised q, k (input dtype), A = β_i (k_i·k_j) exp(G_i − G_j) (strictly lower,
// fp32), Ti = (I + A)⁻¹ by forward substitution in fp32 then stored, w = Ti round(k β e^G) and
// u = Ti round(v β) stored, h = the state stored in the state dtype, v_new = round(u − w h),
// o = scale [(q h) e^G + round(q kᵀ ⊙ e^{G_i − G_j}) v_new], and the fp32 carry
// S ← e^{G_last} S + kᵀ round(v_new e^{G_last − G}). Every block of a value head recomputes the
// chunk's A, Ti and w for its own columns. Run for the backward (delta_chunk_bwd.cu), it writes
// no o and keeps what the backward reads (DeltaChunkSaved): what all blocks of a value head or
// key head share from one block of them, the columns' values (h, v_new) from each.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_chunk_cuda.h"

namespace lav::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;  // value columns per block

/// Shared memory in floats for keys K and chunks C.
int64_t smem_floats(int K, int C) {
    return 3 * int64_t(C) * K + 2 * C * C + 3 * C * kTile + int64_t(K) * kTile + 4 * C;
}

__global__ void __launch_bounds__(kThreads) chunk_fwd(DeltaChunkProblem p) {
    extern __shared__ float sm[];
    const int K = p.dk, C = p.chunk, HV = p.value_heads;
    const int n = blockIdx.x / HV, hv = blockIdx.x % HV, h = hv / (HV / p.heads);
    const int col0 = blockIdx.y * kTile;
    const Span s = span(p.seqs, n);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const DType in = p.q.dtype;
    float* q = sm;                // [C, K] normalised q̂ as stored
    float* k = q + C * K;         // [C, K] k̂ likewise
    float* w = k + C * K;         // [C, K] w
    float* A = w + C * K;         // [C, C] A, then the rounded scores
    float* Ti = A + C * C;        // [C, C] (I + A)⁻¹, stored
    float* v = Ti + C * C;        // [C, kTile] v widened
    float* u = v + C * kTile;     // [C, kTile] u
    float* vn = u + C * kTile;    // [C, kTile] v_new
    float* S = vn + C * kTile;    // [K, kTile] the carried fp32 state
    float* beta = S + K * kTile;  // [C] β as used
    float* G = beta + C;          // [C] chunk-local cumsum of the log decay
    float* decay = G + C;         // [C] exp(G)
    float* to_end = decay + C;    // [C] exp(G_last − G)
    const int64_t state = (int64_t(n) * HV + hv) * K * p.dv;
    const DeltaChunkSaved& kept = p.saved;
    // what is the same for every block of a value head, or of a key head, one block keeps
    const bool keeps_head = kept.w != nullptr && blockIdx.y == 0;
    const bool keeps_keys = keeps_head && hv % (HV / p.heads) == 0;
    for (int e = tid; e < K * kTile; e += kThreads) {
        const int d = e / kTile, c = col0 + e % kTile;
        S[e] =
            p.h0 != nullptr && c < p.dv ? load(p.h0, p.state, state + int64_t(d) * p.dv + c) : 0.f;
    }
    const int64_t chunks = (s.len + C - 1) / C;
    for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t t0 = ch * C;
        const int L = int(s.len - t0 < C ? s.len - t0 : C);
        __syncthreads();  // the previous chunk is done with every tile
        // q̂ and k̂ rows, a warp per row: x · 1/√(Σ x² + eps) rounded to the input dtype
        for (int i = warp; i < L; i += kWarps) {
            const auto normalised = [&](const Strided& x, float* dst) {
                const int64_t off = at(x, s, t0 + i, h);
                float ss = 0.f;
                for (int d = lane; d < K; d += 32) {
                    const float xd = load(x.data, x.dtype, off + d);
                    dst[i * K + d] = xd;
                    ss += xd * xd;
                }
                if (!p.l2norm) return;
                const float rstd = 1.f / sqrtf(warp_sum(ss) + kL2NormEps);
                for (int d = lane; d < K; d += 32)
                    dst[i * K + d] = rounded(dst[i * K + d] * rstd, in);
            };
            normalised(p.q, q);
            normalised(p.k, k);
            if (!keeps_keys) continue;
            const int64_t r = (row(p.seqs, s, t0 + i) * p.heads + h) * K;
            for (int d = lane; d < K; d += 32) {
                kept.qn[r + d] = q[i * K + d];
                kept.kn[r + d] = k[i * K + d];
            }
        }
        if (tid == 0) {
            // a running fp32 sum, as the CPU forms G
            float acc = 0.f;
            for (int i = 0; i < L; ++i) {
                beta[i] =
                    activated_beta(p, load(p.beta.data, p.beta.dtype, at(p.beta, s, t0 + i, hv)));
                if (p.gate == DeltaGate::per_head) {
                    float g = load(p.g.data, p.g.dtype, at(p.g, s, t0 + i, hv));
                    if (p.gate_in_kernel)
                        g = activated_gate(p, expf(p.A_log[hv]),
                                           g + (p.dt_bias != nullptr ? p.dt_bias[hv] : 0.f));
                    acc += g;
                }
                G[i] = acc;
            }
            for (int i = 0; i < L; ++i) {
                decay[i] = expf(G[i]);
                to_end[i] = expf(G[L - 1] - G[i]);
                if (!keeps_head) continue;
                kept.G[row(p.seqs, s, t0 + i) * HV + hv] = G[i];
                kept.beta[row(p.seqs, s, t0 + i) * HV + hv] = beta[i];
            }
        }
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = col0 + e % kTile;
            v[e] = c < p.dv ? load(p.v.data, p.v.dtype, at(p.v, s, t0 + i, hv) + c) : 0.f;
        }
        __syncthreads();
        // A_ij = ((k_i·k_j) exp(G_i − G_j)) β_i below the diagonal, in fp32
        for (int e = tid; e < L * L; e += kThreads) {
            const int i = e / L, j = e % L;
            float a = 0.f;
            if (j < i) {
                for (int d = 0; d < K; ++d) a += k[i * K + d] * k[j * K + d];
                a = a * expf(G[i] - G[j]) * beta[i];
            }
            A[i * C + j] = a;
        }
        __syncthreads();
        // (I + A) Ti = I by forward substitution, row by row, in fp32; then stored
        for (int i = 0; i < L; ++i) {
            for (int j = tid; j <= i; j += kThreads) {
                float x = i == j ? 1.f : 0.f;
                for (int m = j; m < i; ++m) x -= A[i * C + m] * Ti[m * C + j];
                Ti[i * C + j] = x;
            }
            __syncthreads();
        }
        for (int e = tid; e < L * L; e += kThreads) {
            const int i = e / L, j = e % L;
            if (j <= i) Ti[i * C + j] = rounded(Ti[i * C + j], in);
            if (keeps_head)
                kept.Ti[(row(p.seqs, s, t0 + i) * HV + hv) * C + j] = j <= i ? Ti[i * C + j] : 0.f;
        }
        __syncthreads();
        // w = Ti round(k β e^G), u = Ti round(v β), each stored
        for (int e = tid; e < L * K; e += kThreads) {
            const int i = e / K, d = e % K;
            float x = 0.f;
            for (int j = 0; j <= i; ++j)
                x += Ti[i * C + j] * rounded(k[j * K + d] * (beta[j] * decay[j]), in);
            w[i * K + d] = rounded(x, in);
            if (keeps_head) kept.w[(row(p.seqs, s, t0 + i) * HV + hv) * K + d] = w[i * K + d];
        }
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            float x = 0.f;
            for (int j = 0; j <= i; ++j)
                x += Ti[i * C + j] * rounded(v[j * kTile + c] * beta[j], in);
            u[e] = rounded(x, in);
        }
        // the state as stored (FLA's h) is what the v_new and output passes read
        if (p.h != nullptr) {
            const int64_t slot = (p.first_chunk[n] + ch) * HV + hv;
            for (int e = tid; e < K * kTile; e += kThreads) {
                const int d = e / kTile, c = col0 + e % kTile;
                if (c < p.dv) store(p.h, p.state, slot * K * p.dv + int64_t(d) * p.dv + c, S[e]);
            }
        }
        if (kept.h != nullptr) {
            const int64_t slot = (first_slot(p.seqs, C, n, s) + ch) * HV + hv;
            for (int e = tid; e < K * kTile; e += kThreads) {
                const int d = e / kTile, c = col0 + e % kTile;
                if (c < p.dv) kept.h[(slot * K + d) * p.dv + c] = rounded(S[e], p.state);
            }
        }
        __syncthreads();
        // v_new = round(u − w h)
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            float x = 0.f;
            for (int d = 0; d < K; ++d) x += w[i * K + d] * rounded(S[d * kTile + c], p.state);
            vn[e] = rounded(u[e] - x, in);
            if (kept.v_new != nullptr && col0 + c < p.dv)
                kept.v_new[(row(p.seqs, s, t0 + i) * HV + hv) * p.dv + col0 + c] = vn[e];
        }
        // the scores round((q_i·k_j) exp(G_i − G_j)) for j ≤ i, over A
        for (int e = tid; e < L * L; e += kThreads) {
            const int i = e / L, j = e % L;
            float x = 0.f;
            if (j <= i) {
                for (int d = 0; d < K; ++d) x += q[i * K + d] * k[j * K + d];
                x = rounded(x * expf(G[i] - G[j]), in);
            }
            A[i * C + j] = x;
        }
        __syncthreads();
        // o = ((q h) e^G + scores v_new) scale
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            if (col0 + c >= p.dv || p.o.data == nullptr) continue;
            float x = 0.f;
            for (int d = 0; d < K; ++d) x += q[i * K + d] * rounded(S[d * kTile + c], p.state);
            x *= decay[i];
            float y = 0.f;
            for (int j = 0; j <= i; ++j) y += A[i * C + j] * vn[j * kTile + c];
            store(p.o.data, p.o.dtype, at(p.o, s, t0 + i, hv) + col0 + c, (x + y) * p.scale);
        }
        __syncthreads();
        // S ← e^{G_last} S + kᵀ round(v_new e^{G_last − G})
        const float last = decay[L - 1];
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int d = e / kTile, c = e % kTile;
            float x = S[e] * last;
            for (int j = 0; j < L; ++j)
                x += k[j * K + d] * rounded(vn[j * kTile + c] * to_end[j], in);
            S[e] = x;
        }
    }
    __syncthreads();
    if (p.ht == nullptr) return;
    for (int e = tid; e < K * kTile; e += kThreads) {
        const int d = e / kTile, c = col0 + e % kTile;
        if (c < p.dv) store(p.ht, p.state, state + int64_t(d) * p.dv + c, S[e]);
    }
}

}  // namespace

void delta_chunk_fwd(const DeltaChunkProblem& p, cudaStream_t stream) {
    if (p.gate == DeltaGate::per_key)
        throw std::invalid_argument("the delta rule chunk forward takes no per-key gate");
    if (p.dk < 1 || p.dk > kMaxDeltaChunkKeys || p.chunk < 1 || p.chunk > kMaxDeltaChunk)
        throw std::invalid_argument("the delta rule chunk forward takes keys up to " +
                                    std::to_string(kMaxDeltaChunkKeys) + " and chunks up to " +
                                    std::to_string(kMaxDeltaChunk) + ", got " +
                                    std::to_string(p.dk) + " and " + std::to_string(p.chunk));
    if (p.seqs.n == 0 || p.value_heads == 0 || p.dv == 0) return;
    const size_t bytes = smem_floats(p.dk, p.chunk) * sizeof(float);
    LAV_CUDA_CHECK(
        cudaFuncSetAttribute(chunk_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
        "delta_chunk_fwd");
    const dim3 grid(unsigned(p.seqs.n * p.value_heads), unsigned((p.dv + kTile - 1) / kTile));
    chunk_fwd<<<grid, kThreads, bytes, stream>>>(p);
    LAV_CUDA_CHECK(cudaGetLastError(), "delta_chunk_fwd");
}

}  // namespace lav::cuda
