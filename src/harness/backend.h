// src/harness/backend.h — where a variant runs: lav's CPU backend or its CUDA kernels.
//
// With --backend auto (the default) a variant runs on CUDA when this build has CUDA, a device
// is present and the family has a CUDA kernel for the variant; otherwise on the CPU.
#pragma once

#include <string>

#include "harness/registry.h"

namespace lav::harness {

/// True when this build has CUDA kernels and a CUDA device is present.
bool cuda_available();

/// "cpu" or "cuda" for `variant` of `family` on case `c` under the requested backend ("auto",
/// "cpu", "cuda"); "cuda" when requested even if the family lacks the kernel (the run records
/// that).
std::string backend_for(const Family& family, const scenario::Case& c, const std::string& variant,
                        const std::string& requested);

/// The tensors of m on the CUDA device, in the same dtypes and strides. Also makes the CUDA
/// glue poison its outputs with NaN, so an element a kernel never writes cannot pass.
TensorMap to_cuda(const TensorMap& m);

/// The tensors of m on the CPU.
TensorMap to_cpu(const TensorMap& m);

}  // namespace lav::harness
