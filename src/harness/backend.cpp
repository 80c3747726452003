// src/harness/backend.cpp — where a variant runs: lav's CPU backend or its CUDA kernels.
#include "harness/backend.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/build_info.h"
#include "core/error.h"
#ifdef LAV_HAS_CUDA
#include "kernels/common/cuda_glue.h"
#endif

namespace lav::harness {

bool cuda_available() { return kCudaBuild && at::hasCUDA(); }

std::string backend_for(const Family& family, const scenario::Case& c, const std::string& variant,
                        const std::string& requested) {
    if (requested == "cpu" || requested == "cuda") return requested;
    LAV_ASSERT(requested == "auto", "unknown backend ", requested);
    const auto& v = family.cuda_variants;
    const bool has_kernel = std::find(v.begin(), v.end(), variant) != v.end();
    const bool fits = !family.cuda_fits || family.cuda_fits(c);
    return has_kernel && fits && cuda_available() ? "cuda" : "cpu";
}

TensorMap to_cuda(const TensorMap& m) {
#ifdef LAV_HAS_CUDA
    kernels::set_poison_outputs(true);
#endif
    TensorMap out;
    for (const auto& [name, t] : m) out[name] = t.defined() ? t.to(at::kCUDA) : t;
    return out;
}

TensorMap to_cpu(const TensorMap& m) {
    TensorMap out;
    for (const auto& [name, t] : m) out[name] = t.defined() ? t.cpu() : t;
    return out;
}

}  // namespace lav::harness
