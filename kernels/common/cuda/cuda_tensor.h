// kernels/common/cuda/cuda_tensor.h — how lav's CUDA kernels see tensors: raw pointers and strides.
//
// Kernels take plain structs so that their .cu files include no LibTorch header; the torch
// glue (kernels/<family>/<family>_op.cpp) fills them from at::Tensor.
#pragma once

#include <cstdint>

namespace lav::cuda {

enum class DType : int { f32, f16, bf16 };

/// A [B, T, H, D] (head_last) or [B, H, T, D] (head_first) tensor: strides in elements of the
/// batch, time and head axes; the last axis is contiguous.
struct Strided {
    void* data = nullptr;
    DType dtype = DType::f32;
    int64_t sb = 0, st = 0, sh = 0;
};

/// The sequences of a batch: B dense sequences of length t, or, with cu_seqlens (B == 1), n
/// sequences packed along time (t is then the packed length).
struct Sequences {
    const void* cu_seqlens = nullptr;  ///< device memory, int32 or int64, n + 1 offsets
    bool cu_int64 = true;
    int64_t n = 0;
    int64_t t = 0;
};

/// Rows of a packed [B·T, ...] workspace: one per time step of every sequence.
inline int64_t packed_rows(const Sequences& s) { return s.cu_seqlens != nullptr ? s.t : s.n * s.t; }

/// Slots for the chunks of a batch cut into chunks of `size` steps. Chunk c of sequence n sits
/// at slot first + c, first = n·⌈t/size⌉ dense, or ⌊bos_n/size⌋ + n with cu_seqlens: a
/// sequence that starts inside a chunk takes at most one slot more than its steps fill, so
/// ⌊t/size⌋ + n slots hold every chunk without a host copy of cu_seqlens.
inline int64_t chunk_slots(const Sequences& s, int size) {
    return s.cu_seqlens == nullptr ? s.n * ((s.t + size - 1) / size) : s.t / size + s.n;
}

}  // namespace lav::cuda
