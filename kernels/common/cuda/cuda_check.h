// kernels/common/cuda/cuda_check.h — LAV_CUDA_CHECK: a failed CUDA API call or launch as lav's
// error, with the call and the file:line it was made at.
//
// Torch-free: core/error.h includes only the standard library, so the .cu files throw lav's
// own error types and the torch glue needs no translation. A failure the machine causes (out
// of memory, no device, a driver too old, no kernel image for this GPU) is an EnvironmentError
// (exit 3); any other (a bad launch configuration, an illegal address) is a bug in lav's
// kernels and an InternalError (exit 4), worded like LAV_ASSERT's.
//
//   kernel<<<grid, threads, bytes, stream>>>(args);
//   LAV_CUDA_CHECK(cudaGetLastError());
//   LAV_CUDA_CHECK(cudaFuncSetAttribute(kernel, attribute, bytes), "gla chunk forward");
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

namespace lav::cuda::detail {

inline bool caused_by_environment(cudaError_t e) {
    switch (e) {
        case cudaErrorMemoryAllocation:
        case cudaErrorInitializationError:
        case cudaErrorInsufficientDriver:
        case cudaErrorNoDevice:
        case cudaErrorDevicesUnavailable:
        case cudaErrorNoKernelImageForDevice:
        case cudaErrorUnsupportedPtxVersion:
        case cudaErrorSystemDriverMismatch:
            return true;
        default:
            return false;
    }
}

/// Throws unless `e` is cudaSuccess; `context` (optional) names what was launched.
template <typename... Context>
void check_call(const char* file, int line, const char* call, cudaError_t e,
                const Context&... context) {
    if (e == cudaSuccess) return;
    const std::string what =
        ::lav::detail::str_cat("CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
                               ") from ", call, sizeof...(context) > 0 ? " in " : "", context...);
    if (caused_by_environment(e))
        throw ::lav::EnvironmentError(::lav::detail::str_cat(what, " (at ", file, ":", line, ")"));
    throw ::lav::InternalError(
        ::lav::detail::str_cat(what, " (internal error at ", file, ":", line, " — please report)"));
}

}  // namespace lav::cuda::detail

#define LAV_CUDA_CHECK_CALL_TEXT_(call, ...) #call

/// Throws lav's error unless the cudaError_t `call` (first argument) is cudaSuccess; further
/// arguments are concatenated into the message (what was launched).
#define LAV_CUDA_CHECK(...)                             \
    ::lav::cuda::detail::check_call(__FILE__, __LINE__, \
                                    LAV_CUDA_CHECK_CALL_TEXT_(__VA_ARGS__, ""), __VA_ARGS__)
