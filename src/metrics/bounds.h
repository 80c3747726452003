// src/metrics/bounds.h — the default rel_rmse bounds: one table, by tensor kind and dtype.
#pragma once

#include "core/dtype.h"

namespace lav::metrics {

/// What a measured tensor is, which decides how much error its dtype allows.
enum class TensorKind {
    output,     ///< o
    state,      ///< final state ht
    gradient,   ///< dq, dk, dv, dh0
    gate_grad,  ///< dg, dbeta and other gate gradients
};

/// The default rel_rmse bound for a tensor of `kind` computed from inputs in `input` with
/// states stored in `state`: the narrower of the two decides.
double default_bound(TensorKind kind, DType input, DType state);

}  // namespace lav::metrics
