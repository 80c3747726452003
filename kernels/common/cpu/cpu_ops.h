// kernels/common/cpu/cpu_ops.h — tensor helpers the CPU backends share: NaN-poisoned outputs, the
// fp32 working copies, the contract's rounding points, the (sequence, head) lane loop and the
// chunk states a chunk forward hands out on request. Host code on LibTorch; no family's math
// lives here.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/varlen.h"

namespace lav::kernels::cpu {

/// What every output starts as, so that an element a backend never writes shows up as NaN.
constexpr double kPoison = std::numeric_limits<double>::quiet_NaN();

/// A tensor of `sizes` and `dtype` filled with kPoison.
inline at::Tensor poisoned(at::IntArrayRef sizes, c10::ScalarType dtype) {
    return at::full(sizes, kPoison, at::TensorOptions().dtype(dtype));
}

/// A fresh contiguous fp32 copy, also of fp32 input: a fixed allocation keeps results
/// independent of the caller's layout and strides (head_first and head_last agree bitwise).
inline at::Tensor widen(const at::Tensor& x) { return at::empty(x.sizes(), at::kFloat).copy_(x); }

/// x rounded to `dtype` and read back in fp32: a storage point of the contract.
inline at::Tensor round_to(const at::Tensor& x, c10::ScalarType dtype) {
    return dtype == at::kFloat ? x : x.to(dtype).to(at::kFloat);
}

/// Runs `lane_fn(sequence, head)` over every (sequence, head) pair of `heads` heads, in
/// parallel; each pair must write disjoint elements of the results. The ATen ops inside a
/// task run on its thread.
template <typename F>
void for_each_lane(const std::vector<Sequence>& seqs, int64_t heads, const F& lane_fn) {
    const int64_t lanes = static_cast<int64_t>(seqs.size()) * heads;
    at::parallel_for(0, lanes, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; ++j) lane_fn(seqs[j / heads], j % heads);
    });
}

/// The chunk states a chunk forward hands out when asked (keep_chunk_states, for comparison
/// rather than speed): [NT, heads, K, V] in the state dtype, NaN-poisoned, the stored state
/// entering each chunk of `chunk` rows, chunks numbered by chunk_index(). Unasked, it stores
/// nothing and h() stays undefined. Lanes store disjoint elements, from any thread.
class ChunkStateStore {
  public:
    ChunkStateStore(bool keep, const std::vector<Sequence>& seqs, int64_t chunk,
                    at::IntArrayRef state_sizes, c10::ScalarType dtype)
        : chunk_(chunk) {
        if (!keep) return;
        index_ = chunk_index(seqs, chunk);
        std::vector<int64_t> sizes = {index_.total};
        sizes.insert(sizes.end(), state_sizes.begin(), state_sizes.end());
        h_ = poisoned(sizes, dtype);
    }

    /// Stores h, the state entering the chunk of `s` that starts at row c0: every head's
    /// ([heads, K, V]) or, with head ≥ 0, that head's ([K, V]).
    void store(const Sequence& s, int64_t c0, const at::Tensor& h, int64_t head = -1) const {
        if (!h_.defined()) return;
        const at::Tensor row = h_[index_.first[s.index] + (c0 - s.begin) / chunk_];
        (head < 0 ? row : row[head]).copy_(h);
    }

    /// Stores h [n·heads, K, V], the states entering n consecutive chunks of `s`, chunk after
    /// chunk, from the one that starts at row c0.
    void store_chunks(const Sequence& s, int64_t c0, const at::Tensor& h) const {
        if (!h_.defined()) return;
        const int64_t n = h.size(0) / h_.size(1);
        const at::Tensor rows = h_.narrow(0, index_.first[s.index] + (c0 - s.begin) / chunk_, n);
        rows.copy_(h.view(rows.sizes()));
    }

    const at::Tensor& h() const { return h_; }

  private:
    int64_t chunk_;
    ChunkIndex index_;
    at::Tensor h_;
};

}  // namespace lav::kernels::cpu
