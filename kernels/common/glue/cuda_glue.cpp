// kernels/common/glue/cuda_glue.cpp — from at::Tensor to the raw views lav's CUDA kernels take.
#include "common/glue/cuda_glue.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <limits>

#include "core/error.h"

namespace lav::kernels {

cuda::DType cuda_dtype(c10::ScalarType type) {
    switch (type) {
        case at::kFloat:
            return cuda::DType::f32;
        case at::kHalf:
            return cuda::DType::f16;
        case at::kBFloat16:
            return cuda::DType::bf16;
        default:
            throw UsageError(std::string("lav's CUDA kernels take float32, float16 or bfloat16, "
                                         "got ") +
                             c10::toString(type));
    }
}

cuda::Strided strided(const at::Tensor& x, Layout layout) {
    LAV_CHECK(x.dim() == 4, "expected a 4-D tensor, got ", x.dim(), " dimensions");
    LAV_CHECK(x.stride(3) == 1 || x.size(3) == 1,
              "the last axis must be contiguous (stride 1), got stride ", x.stride(3));
    const bool first = layout == Layout::head_first;
    return {x.data_ptr(), cuda_dtype(x.scalar_type()), x.stride(0), x.stride(first ? 2 : 1),
            x.stride(first ? 1 : 2)};
}

cuda::Strided strided_per_head(const at::Tensor& x, Layout layout) {
    LAV_CHECK(x.dim() == 3, "expected a 3-D per-head tensor, got ", x.dim(), " dimensions");
    const bool first = layout == Layout::head_first;
    return {x.data_ptr(), cuda_dtype(x.scalar_type()), x.stride(0), x.stride(first ? 2 : 1),
            x.stride(first ? 1 : 2)};
}

cuda::Sequences sequences(const at::Tensor& x, Layout layout, const at::Tensor& cu_seqlens,
                          at::Tensor& holder) {
    cuda::Sequences s;
    s.t = x.size(layout == Layout::head_first ? 2 : 1);
    if (!cu_seqlens.defined()) {
        s.n = x.size(0);
        return s;
    }
    LAV_CHECK(x.size(0) == 1, "cu_seqlens needs a batch of 1, got ", x.size(0));
    LAV_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.numel() >= 1,
              "cu_seqlens must be 1-D with N + 1 offsets");
    const auto type = cu_seqlens.scalar_type();
    LAV_CHECK(type == at::kInt || type == at::kLong, "cu_seqlens must be int32 or int64, got ",
              c10::toString(type));
    holder = cu_seqlens.to(x.device()).contiguous();
    s.cu_seqlens = holder.data_ptr();
    s.cu_int64 = type == at::kLong;
    s.n = cu_seqlens.numel() - 1;
    return s;
}

namespace {
std::atomic<bool> poison_outputs{false};
}  // namespace

void set_poison_outputs(bool on) { poison_outputs = on; }

at::Tensor output(at::IntArrayRef sizes, const at::TensorOptions& options) {
    return poison_outputs ? at::full(sizes, std::numeric_limits<float>::quiet_NaN(), options)
                          : at::empty(sizes, options);
}

at::Tensor empty_like_layout(const at::Tensor& like, int64_t d, c10::ScalarType dtype) {
    return output({like.size(0), like.size(1), like.size(2), d}, like.options().dtype(dtype));
}

const void* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

int chunk_size_of(int64_t c) {
    LAV_CHECK(c >= 1 && c <= 64 && (c & (c - 1)) == 0,
              "chunk_size must be a power of two no larger than 64, got ", c);
    return int(c);
}

void check_cuda_inputs(const char* op, std::initializer_list<at::Tensor> ts) {
    const at::Tensor* first = nullptr;
    for (const auto& t : ts) {
        if (!t.defined()) continue;
        LAV_CHECK(t.is_cuda(), op, ": every tensor must be on a CUDA device, got one on ",
                  t.device().str());
        if (first == nullptr) first = &t;
        LAV_CHECK(t.device() == first->device(), op, ": tensors on ", first->device().str(),
                  " and ", t.device().str());
    }
}

}  // namespace lav::kernels
