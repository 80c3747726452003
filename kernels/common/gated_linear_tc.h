// kernels/common/gated_linear_tc.h — the tensor-core chunk forward of the gated linear recurrence.
//
// Internal to kernels/common: gated_linear_chunk.cu takes it for 16-bit inputs and keys up to
// kMaxTensorCoreKeys wide, and keeps its fp32 FMA kernels for the rest.
#pragma once

#include <cuda_runtime_api.h>

#include "common/gated_linear_cuda.h"

namespace lav::cuda {

constexpr int kMaxTensorCoreKeys = 128;

/// Whether p's inputs are fp16 or bf16 (q, k and v alike) and its keys fit the tensor-core
/// kernel.
bool gated_linear_tc_fits(const GatedLinearProblem& p);

/// One pass over the chunks of every sequence and head, carrying the state on chip: writes o
/// and ht when p.o.data / p.ht are set, and the state entering each chunk (state dtype, the
/// chunk variant's slot layout) when `states` is set. Needs gated_linear_tc_fits(p).
void gated_linear_tc_fwd(const GatedLinearProblem& p, void* states, cudaStream_t stream);

}  // namespace lav::cuda
