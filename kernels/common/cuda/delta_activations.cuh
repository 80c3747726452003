// kernels/common/cuda/delta_activations.cuh — the in-kernel transforms of the delta rule kernels
// (recurrent and chunk) and their gradients: FLA's l2norm eps, softplus, the β sigmoid and the
// in-kernel gate.
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

/// ∂L/∂raw from ∂L/∂β: through the sigmoid where β takes it.
__device__ __forceinline__ float beta_backward(const DeltaProblem& p, float raw, float dbeta) {
    if (!p.beta_sigmoid) return dbeta;
    const float sg = sigmoid(raw);
    return dbeta * sg * (1.f - sg) * p.beta_scale;
}

/// The in-kernel gate's gradients from ∂L/∂g (g the log decay as used): w.r.t. its argument
/// x = g_raw + dt_bias, and its term of ∂L/∂A_log.
struct GateGrads {
    float d_arg, d_A_log;
};

__device__ __forceinline__ GateGrads gate_backward(const DeltaProblem& p, float rate, float arg,
                                                   float dg) {
    if (p.lower_bound_form) {
        // g = lb·σ(z), z = e^A·x: dz = dg·lb·σ(1 − σ); dx = dz·e^A, dA = dz·z
        const float z = rate * arg, sg = sigmoid(z);
        const float dz = dg * sg * (1.f - sg) * p.lower_bound;
        return {dz * rate, dz * z};
    }
    // g = −e^A·softplus(x): dx = −dg·e^A·σ(x), dA = dg·g
    return {-(dg * rate * sigmoid(arg)), dg * activated_gate(p, rate, arg)};
}

}  // namespace lav::cuda
