// kernels/common/cuda/delta_activations.cuh — the in-kernel transforms of the delta rule kernels
// (recurrent and chunk): FLA's l2norm eps, softplus, the β sigmoid and the in-kernel gate.
#pragma once

#include <cuda_runtime.h>

#include "common/cuda/delta_recurrent_cuda.h"

namespace lav::cuda {

// FLA's l2norm puts its eps inside the root; its softplus returns x itself above the cut
constexpr float kL2NormEps = 1e-6f;
constexpr float kSoftplusCut = 20.f;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

__device__ __forceinline__ float softplus(float x) {
    return x > kSoftplusCut ? x : log1pf(expf(x));
}

/// The log decay of the in-kernel gate from its argument x = g + dt_bias and rate exp(A_log).
__device__ __forceinline__ float activated_gate(const DeltaProblem& p, float rate, float x) {
    return p.lower_bound_form ? sigmoid(rate * x) * p.lower_bound : -(softplus(x) * rate);
}

/// β as the recurrence uses it: the input, or beta_scale·σ(raw).
__device__ __forceinline__ float activated_beta(const DeltaProblem& p, float raw) {
    return p.beta_sigmoid ? sigmoid(raw) * p.beta_scale : raw;
}

}  // namespace lav::cuda
