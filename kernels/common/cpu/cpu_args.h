// kernels/common/cpu/cpu_args.h — the argument checks all CPU backends share; shapes stay per
// family.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

// Each check throws ShapeError with a message that starts "<family> cpu: ".
namespace lav::kernels::cpu {

/// Whether the CPU backends take `type` for inputs, states and outputs: fp32, fp16 or bf16.
inline bool is_kernel_dtype(c10::ScalarType type) {
    return type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
}

/// Checks that `x` is a CPU tensor of a kernel dtype.
inline void check_float_cpu(std::string_view family, const at::Tensor& x, const char* name) {
    LAV_CHECK(x.device().is_cpu(), family, " cpu: ", name, " must be a CPU tensor, got ",
              x.device());
    LAV_CHECK(is_kernel_dtype(x.scalar_type()), family, " cpu: ", name,
              " must be fp32, fp16 or bf16, got ", scalar_type_name(x.scalar_type()));
}

/// check_float_cpu, then `x`'s sizes against `expected`, which messages spell `dims`
/// (for example "[N, H, K, V]").
inline void check_shape(std::string_view family, const at::Tensor& x, const char* name,
                        const char* dims, at::IntArrayRef expected) {
    check_float_cpu(family, x, name);
    LAV_CHECK(x.sizes() == expected, family, " cpu: ", name, " must be ", dims, " = ", expected,
              ", got ", x.sizes());
}

/// Checks the cotangent of the output: given, a CPU tensor of a kernel dtype, of o's sizes.
inline void check_d_o(std::string_view family, const at::Tensor& d_o, at::IntArrayRef o_sizes) {
    LAV_CHECK(d_o.defined(), family, " cpu backward needs d_o");
    check_float_cpu(family, d_o, "d_o");
    LAV_CHECK(d_o.sizes() == o_sizes, family, " cpu: d_o must have o's shape ", o_sizes, ", got ",
              d_o.sizes());
}

/// The offsets of `cu_seqlens`, a 1-d int64 CPU tensor of N + 1 >= 2 offsets; empty when it is
/// undefined (a dense batch). core/varlen.h turns them into sequences.
inline std::vector<int64_t> cu_seqlens_offsets(std::string_view family,
                                               const at::Tensor& cu_seqlens) {
    if (!cu_seqlens.defined()) return {};
    LAV_CHECK(cu_seqlens.device().is_cpu() && cu_seqlens.scalar_type() == at::kLong &&
                  cu_seqlens.dim() == 1 && cu_seqlens.numel() >= 2,
              family, " cpu: cu_seqlens must be a 1-d int64 CPU tensor of N + 1 >= 2 offsets");
    const at::Tensor c = cu_seqlens.contiguous();
    return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

/// The state dtype, checked to be a kernel dtype.
inline c10::ScalarType checked_state_dtype(std::string_view family, c10::ScalarType type) {
    LAV_CHECK(is_kernel_dtype(type), family, " cpu: state dtype must be fp32, fp16 or bf16, got ",
              scalar_type_name(type));
    return type;
}

/// The output dtype: `type`, or the inputs' dtype `in` where `type` is Undefined; checked to
/// be a kernel dtype.
inline c10::ScalarType checked_output_dtype(std::string_view family, c10::ScalarType type,
                                            c10::ScalarType in) {
    const c10::ScalarType out = type == c10::ScalarType::Undefined ? in : type;
    LAV_CHECK(is_kernel_dtype(out), family, " cpu: output dtype must be fp32, fp16 or bf16, got ",
              scalar_type_name(out));
    return out;
}

/// The chunk size, checked to be a power of two no larger than 64.
inline int64_t checked_chunk_size(std::string_view family, int64_t c) {
    LAV_CHECK(c >= 1 && c <= 64 && (c & (c - 1)) == 0, family,
              " cpu: chunk_size must be a power of two no larger than 64, got ", c);
    return c;
}

/// The score scale in fp32: `scale`, or K^-0.5 where it is 0 (FLA's default); checked to be
/// finite.
inline float checked_scale(std::string_view family, double scale, int64_t K) {
    LAV_CHECK(std::isfinite(scale), family, " cpu: scale must be finite, got ", scale);
    return static_cast<float>(scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(K)));
}

}  // namespace lav::kernels::cpu
