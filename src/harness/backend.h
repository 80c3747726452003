// src/harness/backend.h — which row runs a variant, and moving tensors to its device.
//
// With --backend auto (the default) a variant runs on the first of lav's own rows that takes
// the case on a device that is present, CUDA before the CPU. A named backend runs that
// backend's row, or records that the build has none.
#pragma once

#include <string>

#include "harness/registry.h"

namespace lav::harness {

/// True when this build has CUDA kernels and a CUDA device is present.
bool cuda_available();

/// "" while the CUDA context still runs work; else the error it gives (a kernel's sticky error).
std::string cuda_context_error();

/// The backend a variant runs on and its row; row is nullptr when the requested backend has
/// no row for the variant (the run records that as the case's error).
struct Choice {
    std::string backend;
    const Row* row = nullptr;
};

/// The choice for `variant` of `call`'s family under the requested backend ("auto" or a
/// backend's name).
Choice choose_row(const Registry& registry, const std::string& family, const std::string& variant,
                  const Call& call, const std::string& requested);

/// The tensors of m on `device` ("cpu" or "cuda"), in the same dtypes and strides.
TensorMap to_device(const TensorMap& m, const std::string& device);

}  // namespace lav::harness
