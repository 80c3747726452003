// reference/common.h — the helpers every float64 reference repeats: its input checks, a
// sequence's rows, the per-step contraction and the checkpoint interval. Internal to reference/;
// shares no code with kernels/.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref::common {

/// NUMERICS.md rule 1: a non-fp64 tensor here is a harness bug, not a user error.
inline void assert_fp64(const char* family, const at::Tensor& t, const char* name) {
    LAV_ASSERT(!t.defined() || t.scalar_type() == at::kDouble, "the ", family,
               " reference takes fp64 tensors only, got ", name, " of dtype ", t.scalar_type());
}

/// A ShapeError naming the family and the tensor unless `t` has the shape `expected`.
inline void check_shape(const char* family, const at::Tensor& t, const char* name,
                        const std::vector<int64_t>& expected) {
    LAV_CHECK(t.sizes() == at::IntArrayRef(expected), family, ": ", name, " must have shape ",
              at::IntArrayRef(expected), ", got ", t.sizes());
}

/// The rows of `seq` in a [B, T, ...] tensor: a [L, ...] view.
inline at::Tensor rows(const at::Tensor& t, const Sequence& seq) {
    return t.select(0, seq.batch).narrow(0, seq.begin, seq.length());
}

/// out = Σ_dims a ⊙ b, with `scratch` holding the product. The references' per-step products
/// are an elementwise op plus a reduction rather than a bmm: at [H, K, V] sizes ATen runs these
/// on the calling thread, while MKL would fork and join threads for each small product.
inline void contract_out(at::Tensor& out, at::Tensor& scratch, const at::Tensor& a,
                         const at::Tensor& b, at::IntArrayRef dims) {
    at::mul_out(scratch, a, b);
    at::sum_out(out, scratch, dims);
}

/// ⌈√n⌉: the checkpoint interval that keeps a reverse sweep at O(√L) states (NUMERICS.md rule 5).
inline int64_t ceil_sqrt(int64_t n) {
    int64_t c = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
    while (c * c < n) ++c;
    while (c > 1 && (c - 1) * (c - 1) >= n) --c;
    return c;
}

}  // namespace lav::ref::common
