// kernels/common/cuda/kda_chunk_cuda.h — CUDA launchers of kda's chunk (WY) forward and backward:
// the delta rule chunk form with a log decay per key (DeltaGate::per_key).
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda/delta_chunk_cuda.h"

namespace lav::cuda {

/// Largest key width the kda chunk kernels take (chunks up to kMaxDeltaChunk): their tiles live
/// in shared memory, and the backward's key pass, the largest, takes 209 KB at K = 128 and
/// C = 64 of the 227 KB a Hopper block may have.
constexpr int kMaxKdaChunkKeys = 128;

/// What the forward's passes hand each other in its workspace, and the backward reads, each value
/// in the dtype the contract rounds it to (the input dtype `in`, the state dtype `st`; exact
/// there), G, β and the backward's own values in fp32: rows as row() numbers them, chunks by
/// chunk_slots().
struct KdaChunkSaved {
    void *qn = nullptr, *kn = nullptr;  ///< [rows, H, K] q̂, k̂ in `in`
    float* G = nullptr;                 ///< [rows, HV, K] the chunk-local cumsum of the log decay
    float* beta = nullptr;              ///< [rows, HV] β as used
    void* w = nullptr;                  ///< [rows, HV, K] round(Ti round(β k̂ e^G)) in `in`
    void* kg = nullptr;                 ///< [rows, HV, K] round(k̂ e^{G_last − G}) in `in`
    void* u = nullptr;                  ///< [rows, HV, V] in `in`
    void* v_new = nullptr;              ///< [rows, HV, V] in `in`
    void* h = nullptr;                  ///< [slots, HV, K, V] the state entering each chunk, `st`
    /// the backward's only (nullptr in the forward): the rows of the fp32 inverse (I + A)⁻¹ and
    /// the fp32 W = (I + A)⁻¹ (β k̂ e^G), which the gradients read unrounded
    float* Tf = nullptr;  ///< [rows, HV, chunk]
    float* Wf = nullptr;  ///< [rows, HV, K]
};

/// The forward's workspace at `base` (nullptr: only its size, in `floats` fp32 elements); with
/// `backward` it also holds Tf and Wf.
KdaChunkSaved kda_chunk_saved(const DeltaChunkProblem& p, float* base, int64_t& floats,
                              bool backward);

/// Scratch of the chunk forward in fp32 elements.
int64_t kda_chunk_fwd_workspace_floats(const DeltaChunkProblem& p);

/// The chunk forward: o (not written where o.data is nullptr), ht and (when asked) h, keeping
/// kda's chunk forward contract (kda/kda_contract.cpp) item by item. `saved` is the layout of
/// `workspace` (kda_chunk_saved()); on return it holds those values.
void kda_chunk_fwd(const DeltaChunkProblem& p, const KdaChunkSaved& saved, cudaStream_t stream);

/// The forward's state pass on tensor cores (delta_chunk_tensor_cores), from the workspace x
/// the first pass filled: the same values as chunk_state's but for the order of fp32 sums.
void kda_chunk_state_tc(const DeltaChunkProblem& p, const KdaChunkSaved& x, cudaStream_t stream);

/// The forward's output pass with its products on tensor cores (as kda_chunk_state_tc), over
/// `slots` chunk slots: A_qk as chunk_out forms it, the products' fp32 sums in another order.
void kda_chunk_out_tc(const DeltaChunkProblem& p, const KdaChunkSaved& x, int64_t slots,
                      cudaStream_t stream);

/// The same, laying the workspace out itself (kda_chunk_fwd_workspace_floats() elements).
void kda_chunk_fwd(const DeltaChunkProblem& p, float* workspace, cudaStream_t stream);

/// The backward's dS pass on tensor cores (delta_chunk_tc.cu), where its sums over value columns
/// take them: from the forward's values f and A_qk in P ([slots, HV, C, C] fp32, scaled), into
/// dH and dvn (kda_chunk_bwd.cu's scratch regions).
void kda_chunk_state_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d, const KdaChunkSaved& f,
                            const float* P, void* dH, float* dvn, cudaStream_t stream);

/// The backward's sums over value columns on tensor cores (delta_chunk_bwd_tc.cu): where
/// delta_chunk_tensor_cores takes the inputs and d_o and v are in their dtype, over `slots` chunk
/// slots, from the forward's values f (Tf among them); x.dk is d_kg = v_new dHᵀ here, x.dov
/// dO v_newᵀ whole and unscaled, x.hdH ⟨h, dH⟩ per key ([slots, HV, K]).
void kda_chunk_values_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                             const KdaChunkSaved& f, const DeltaValueSums& x, int64_t slots,
                             cudaStream_t stream);

/// Scratch of the chunk backward in fp32 elements.
int64_t kda_chunk_workspace_floats(const DeltaChunkProblem& p);

/// Where the chunk backward leaves the in-kernel gate's per-row terms (width K).
DeltaGateTerms kda_chunk_terms(const DeltaChunkProblem& p);

/// The chunk backward (kda's chunk backward contract): recomputes the forward, walks the chunks
/// backwards carrying dS, then takes every chunk's gradients side by side.
void kda_chunk_bwd(const DeltaChunkProblem& p, const DeltaGrads& d, cudaStream_t stream);

}  // namespace lav::cuda
