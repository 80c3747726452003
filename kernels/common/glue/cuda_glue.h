// kernels/common/glue/cuda_glue.h — from at::Tensor to the raw views lav's CUDA kernels take.
#pragma once

#include <ATen/core/Tensor.h>
#include <cuda_runtime_api.h>

#include "common/cuda/cuda_tensor.h"
#include "core/layout.h"

namespace lav::kernels {

cuda::DType cuda_dtype(c10::ScalarType type);

/// A [B, T, H, D] / [B, H, T, D] CUDA tensor whose last axis is contiguous, read in place.
cuda::Strided strided(const at::Tensor& x, Layout layout);
/// A [B, T, H] / [B, H, T] CUDA tensor (one value per step and head), read in place.
cuda::Strided strided_per_head(const at::Tensor& x, Layout layout);

/// The sequences of x (4-D in `layout`); cu_seqlens (int32 or int64, any device) is copied to
/// x's device into `holder`, which must outlive the launch.
cuda::Sequences sequences(const at::Tensor& x, Layout layout, const at::Tensor& cu_seqlens,
                          at::Tensor& holder);

/// Whether outputs start as NaN (lav's runner and tests) so that an element a kernel fails to
/// write cannot pass a comparison; off by default (the ops library), where it would cost a pass.
void set_poison_outputs(bool on);

/// A contiguous output tensor: uninitialised, or NaN when poisoning is on.
at::Tensor output(at::IntArrayRef sizes, const at::TensorOptions& options);

/// An output tensor shaped like `like` (4-D in its layout) with last axis `d`.
at::Tensor empty_like_layout(const at::Tensor& like, int64_t d, c10::ScalarType dtype);

/// data pointer of t, or nullptr when t is undefined.
const void* data_or_null(const at::Tensor& t);

cudaStream_t current_stream();

/// chunk_size checked as the CPU chunk backends check it: a power of two no larger than 64.
int chunk_size_of(int64_t chunk_size);

/// Checks that every defined tensor of `ts` is on the same CUDA device as the first.
void check_cuda_inputs(const char* op, std::initializer_list<at::Tensor> ts);

}  // namespace lav::kernels
