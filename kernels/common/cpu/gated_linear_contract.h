// kernels/common/cpu/gated_linear_contract.h — the contract item simple_gla and gla declare where
// their chunk variant runs on lav's tensor-core kernels (kernels/common/README.md).
#pragma once

#include <ATen/ATen.h>

#include "core/dtype.h"
#include "core/precision_contract.h"

namespace lav::kernels {

/// The widest keys the tensor-core kernels take; kMaxTensorCoreKeys in gated_linear_tc.h.
constexpr int64_t kTensorCoreKeys = 128;

/// Adds the tensor cores' operand item to a chunk contract when q, k and v are CUDA tensors,
/// all fp16 or all bf16, with at most kTensorCoreKeys keys.
inline void add_tensor_core_item(PrecisionContract& c, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v) {
    const auto type = q.scalar_type();
    if (!q.is_cuda() || (type != at::kHalf && type != at::kBFloat16) || k.scalar_type() != type ||
        v.scalar_type() != type || q.size(-1) > kTensorCoreKeys)
        return;
    c.items.push_back({"tensor-core operands", *from_scalar_type(type),
                       "products take 16-bit operands exactly and accumulate in fp32; an fp32 "
                       "operand (a state stored in another dtype, backward scores, decayed q and "
                       "k of a per-key gate) enters as two 16-bit halves, ~16 significant bits"});
}

}  // namespace lav::kernels
