// kernels/common/cuda/delta_chunk_cuda.h — CUDA launchers of the delta rule's chunk (WY) forward
// and backward for delta_rule and gated_delta_rule (no gate or one per head; kda's per-key gate
// is not taken).
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda/delta_recurrent_cuda.h"

namespace lav::cuda {

/// Largest key width and chunk the chunk kernels take: their tiles live in shared memory, which
/// at K = 256 and C = 64 they fill up to 205 KB of the 227 KB a Hopper block may have.
constexpr int kMaxDeltaChunkKeys = 256;
constexpr int kMaxDeltaChunk = 64;

/// The row stride of key tiles in shared memory that products over pairs of rows read across a
/// warp (row j in lane j): a stride of K, a multiple of 32, would put every lane on one bank.
constexpr int padded_keys(int K) { return K + 1; }

/// What the chunk forward's passes hand each other in its workspace, and the backward reads,
/// each value in the dtype the contract rounds it to (the input dtype `in`, the state dtype
/// `st`; exact there), G and β in fp32: rows as row() numbers them, chunks by chunk_slots().
struct DeltaChunkSaved {
    void *qn = nullptr, *kn = nullptr;    ///< [rows, H, K] q̂, k̂ in `in`
    void* w = nullptr;                    ///< [rows, HV, K] in `in`
    void* Ti = nullptr;                   ///< [rows, HV, chunk] the rows of (I + A)⁻¹ in `in`
    void* u = nullptr;                    ///< [rows, HV, V] in `in`
    void* v_new = nullptr;                ///< [rows, HV, V] in `in`
    float *G = nullptr, *beta = nullptr;  ///< [rows, HV] chunk-local log-decay cumsum, β as used
    void* h = nullptr;                    ///< [slots, HV, K, V] the state entering each chunk, `st`
};

struct DeltaChunkProblem : DeltaProblem {
    int chunk = 64;  ///< steps per chunk, 1..kMaxDeltaChunk
    /// [NT, HV, K, V] in the state dtype: the state entering each chunk as the passes read it,
    /// chunk c of sequence n at first_chunk[n] + c (device memory, N entries); nullptr: not kept
    void* h = nullptr;
    const int64_t* first_chunk = nullptr;
};

/// The forward's workspace at `base` (nullptr: only its size, in `floats` fp32 elements, whole
/// 16-byte units).
DeltaChunkSaved delta_chunk_saved(const DeltaChunkProblem& p, float* base, int64_t& floats);

/// Scratch of the chunk forward in fp32 elements.
int64_t delta_chunk_fwd_workspace_floats(const DeltaChunkProblem& p);

/// The chunk forward: o (not written where o.data is nullptr), ht and (when asked) h, keeping the
/// chunk contract of common/cpu/delta_chunk.h item by item; on return the workspace holds
/// delta_chunk_saved().
void delta_chunk_fwd(const DeltaChunkProblem& p, float* workspace, cudaStream_t stream);

/// Whether the passes with a tensor-core form (delta_chunk_tc.cu) take it: bf16 inputs, or fp16
/// ones with an fp16 state (the parts of a wider state in fp16 could overflow).
inline bool delta_chunk_tensor_cores(const DeltaChunkProblem& p) {
    return p.q.dtype == DType::bf16 || (p.q.dtype == DType::f16 && p.state == DType::f16);
}

/// The forward's first pass on tensor cores (delta_chunk_tensor_cores): over `slots` chunk slots,
/// into the workspace x.
void delta_chunk_prep_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& x, int64_t slots,
                         cudaStream_t stream);

/// The forward's state pass on tensor cores: from the workspace x the first pass filled.
void delta_chunk_state_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& x,
                          cudaStream_t stream);

/// The forward's output pass on tensor cores, as delta_chunk_state_tc: over `slots` chunk slots,
/// from the workspace x the forward's first two passes filled.
void delta_chunk_out_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& x, int64_t slots,
                        cudaStream_t stream);

/// The backward's dS pass on tensor cores, where d_o is in the input dtype too: from the
/// forward's values f and the scores P ([slots, HV, C, C] fp32), into dH and dvn (the backward's
/// scratch regions of delta_chunk_bwd.cu).
void delta_chunk_state_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                              const DeltaChunkSaved& f, const float* P, void* dH, float* dvn,
                              cudaStream_t stream);

/// The backward's scores P = (q̂ k̂ᵀ) ⊙ e^{G_i − G_j} on tensor cores (delta_chunk_tensor_cores):
/// into P ([slots, HV, C, C] fp32) over `slots` chunk slots, from the forward's values f.
void delta_chunk_scores_bwd_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& f, float* P,
                               int64_t slots, cudaStream_t stream);

/// The backward's regions that its sums over value columns read and write (delta_chunk_bwd.cu's
/// pass 3): rows as row() numbers them, chunks by chunk_slots().
struct DeltaValueSums {
    const void* dH = nullptr;    ///< [slots, HV, K, V] dS as stored entering each reverse step
    const float* dvn = nullptr;  ///< [rows, HV, V] dv_new
    float *dw = nullptr, *dq = nullptr,
          *dk = nullptr;                  ///< [rows, HV, K] −dv_new hᵀ, dO hᵀ, v_new dHᵀ
    float *dov = nullptr, *dT = nullptr;  ///< [slots, HV, C, C] scale (dO v_newᵀ ⊙ D), dv_new vbᵀ
    float* dbv = nullptr;                 ///< [rows, HV] Σ dvb ⊙ v
    float* hdH = nullptr;                 ///< [slots, HV] ⟨h, dH⟩
};

/// The backward's sums over value columns on tensor cores, where its dS pass takes them too
/// (delta_chunk_tensor_cores, d_o in the input dtype): over `slots` chunk slots, from the
/// forward's values f; dv stored.
void delta_chunk_values_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                               const DeltaChunkSaved& f, const DeltaValueSums& x, int64_t slots,
                               cudaStream_t stream);

/// The backward's keys pass on tensor cores, where its sums over value columns take them too:
/// over `slots` chunk slots, through w = Ti kb, Ti = (I + A)⁻¹ and A, from the forward's values f
/// and the sums x (its dq, dk, the state terms, become dq̂ and dk̂ per value head); dβ and dg
/// stored, the in-kernel gate's per-row terms into dA_log and ddt ([rows, HV]).
void delta_chunk_keys_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                             const DeltaChunkSaved& f, const DeltaValueSums& x, float* dA_log,
                             float* ddt, int64_t slots, cudaStream_t stream);

/// Scratch of the chunk backward in fp32 elements.
int64_t delta_chunk_workspace_floats(const DeltaChunkProblem& p);

/// Where the chunk backward leaves the in-kernel gate's per-row terms (as the recurrent one).
DeltaGateTerms delta_chunk_terms(const DeltaChunkProblem& p);

/// The chunk backward (common/cpu/delta_chunk.h chunk_bwd's contract): recomputes the forward,
/// walks the chunks backwards carrying dS, then takes every chunk's gradients side by side.
void delta_chunk_bwd(const DeltaChunkProblem& p, const DeltaGrads& d, cudaStream_t stream);

}  // namespace lav::cuda
