// kernels/common/cuda/gated_linear_tc.h — the tensor-core chunk kernels of the gated linear
// recurrence.
//
// Internal to kernels/common/cuda: gated_linear_chunk.cu takes it for 16-bit inputs and keys up to
// kMaxTensorCoreKeys wide, and keeps its fp32 FMA kernels for the rest.
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda/gated_linear_cuda.h"

namespace lav::cuda {

/// kTensorCoreKeys in gated_linear_contract.h, which declares what these kernels do.
constexpr int kMaxTensorCoreKeys = 128;

/// Whether p's inputs are fp16 or bf16 (q, k and v alike) and its keys fit the tensor-core
/// kernel.
bool gated_linear_tc_fits(const GatedLinearProblem& p);

/// One pass over the chunks of every sequence and head, carrying the state on chip: writes o
/// and ht when p.o.data / p.ht are set, and the state entering each chunk (state dtype, the
/// chunk variant's slot layout) when `states` is set. Needs gated_linear_tc_fits(p); the
/// forward of a gate per row is gated_linear_tc_row_fwd.
void gated_linear_tc_fwd(const GatedLinearProblem& p, void* states, cudaStream_t stream);

/// fp32 scratch gated_linear_tc_row_fwd needs for p: 0 unless it cuts the sequences into
/// segments.
int64_t gated_linear_tc_row_workspace_floats(const GatedLinearProblem& p);

/// The forward of a gate per row (Gate::none, per_head or constant), o and ht only: the
/// state kept in registers as an mma operand (gated_linear_tc_row.cu). Needs
/// gated_linear_tc_fits(p) and gated_linear_tc_row_workspace_floats(p) floats of `workspace`.
void gated_linear_tc_row_fwd(const GatedLinearProblem& p, float* workspace, cudaStream_t stream);

/// Whether the backward's state gradient pass fits: gated_linear_tc_fits(p), and d_o in the
/// input dtype.
bool gated_linear_tc_state_grads_fit(const GatedLinearProblem& p, const GatedLinearGrads& d);

/// The backward's reverse pass over the chunks: dS ← exp(Λ)·dS + (scale · q ⊙ exp(G))ᵀ d_o
/// from dht, storing the gradient of the state leaving each chunk in `dhs` (state dtype) and
/// the last dS in d.dh0 when set; the fp32 key operand goes in as two 16-bit halves.
void gated_linear_tc_state_grads(const GatedLinearProblem& p, const GatedLinearGrads& d, void* dhs,
                                 cudaStream_t stream);

/// Whether the backward's per-chunk gradients fit: gated_linear_tc_state_grads_fit(p, d) and
/// the device's shared memory holds the kernel's tiles.
bool gated_linear_tc_grads_fit(const GatedLinearProblem& p, const GatedLinearGrads& d);

/// dq, dk, dv and dg of every chunk from the stored states `hs` entering the chunks and the
/// gradients `dhs` of the states leaving them (the chunk variant's slot layout, state dtype).
void gated_linear_tc_grads(const GatedLinearProblem& p, const GatedLinearGrads& d, const void* hs,
                           const void* dhs, cudaStream_t stream);

}  // namespace lav::cuda
