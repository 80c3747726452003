// reference/common.h — the helpers every float64 reference repeats: its input checks, a
// sequence's rows, the per-step contraction, the checkpoint interval and the states sampled at
// chunk boundaries. Internal to reference/; shares no code with kernels/.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/varlen.h"

namespace lav::ref::common {

/// reference/README.md, rule 1: a non-fp64 tensor here is a harness bug, not a user error.
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

/// ⌈√n⌉: the checkpoint interval that keeps a reverse sweep at O(√L) states
/// (reference/README.md, rule 5).
inline int64_t ceil_sqrt(int64_t n) {
    int64_t c = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
    while (c * c < n) ++c;
    while (c > 1 && (c - 1) * (c - 1) >= n) --c;
    return c;
}

/// The states a forward samples when asked (state_stride > 0): the state before steps 0,
/// stride, 2·stride, ... of each sequence, rows sequence after sequence as core/varlen.h's
/// chunk_index numbers chunks. `steps` is the number of recurrence steps per position (more
/// than one where a token takes several sub-steps). With stride 0 it keeps nothing and
/// states() is undefined. Sequences must be walked in order, as every reference walks them.
class StateSamples {
  public:
    StateSamples(const std::vector<Sequence>& seqs, int64_t stride, at::IntArrayRef state_sizes,
                 const at::TensorOptions& opts, int64_t steps = 1)
        : stride_(stride) {
        if (stride <= 0) return;
        int64_t rows = 0;
        for (const Sequence& seq : seqs) rows += (seq.length() * steps + stride - 1) / stride;
        std::vector<int64_t> sizes = {rows};
        sizes.insert(sizes.end(), state_sizes.begin(), state_sizes.end());
        states_ = at::empty(sizes, opts);
    }

    /// Keeps `state` when step `t` of the current sequence, about to be taken, starts a chunk.
    void keep(int64_t t, const at::Tensor& state) {
        if (stride_ > 0 && t % stride_ == 0) states_.select(0, next_++).copy_(state);
    }

    /// [NT, ...state_sizes]; undefined without a stride.
    const at::Tensor& states() const { return states_; }

  private:
    int64_t stride_;
    int64_t next_ = 0;
    at::Tensor states_;
};

}  // namespace lav::ref::common
