// src/harness/inputs.cpp — input generators (randn, rand, logsigmoid, zeros, ones, retention).
#include "harness/inputs.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"
#include "core/layout.h"
#include "core/text.h"

namespace lav::harness {
namespace {

at::Tensor draw(const TensorSpec& spec, const scenario::Generator& gen, at::Generator& rng) {
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    const std::string& d = gen.dist;
    if (d == "randn") return at::randn(spec.shape, rng, opts) * gen.scale;
    if (d == "rand") return at::rand(spec.shape, rng, opts) * gen.scale;
    if (d == "logsigmoid")
        return at::log_sigmoid(at::randn(spec.shape, rng, opts)) / gen.normalizer;
    if (d == "zeros") return at::zeros(spec.shape, opts);
    if (d == "ones") return at::ones(spec.shape, opts) * gen.scale;
    if (d == "retention") {
        // retention's per-head decay γ_h = 1 − 2^(−5−h), as a log decay over the last axis
        const int64_t n = spec.shape.back();
        at::Tensor h = at::arange(n, opts);
        return at::log1p(-at::pow(2.0, -5.0 - h)).expand(spec.shape).contiguous();
    }
    LAV_ASSERT(false, "unknown generator '", d, "' passed validation");
    return {};
}

}  // namespace

CaseTensors make_tensors(const std::vector<TensorSpec>& specs, const scenario::Case& c,
                         uint64_t salt) {
    CaseTensors out;
    for (const auto& spec : specs) {
        const uint64_t seed = fnv1a(spec.name, (c.seed + 1) * 0x9e3779b97f4a7c15ULL ^ salt);
        at::Generator rng = at::detail::createCPUGenerator(seed);
        const auto it = c.generators.find(spec.name);
        const scenario::Generator& gen = it != c.generators.end() ? it->second : spec.generator;
        const at::Tensor quantised = draw(spec, gen, rng).to(to_scalar_type(spec.dtype));
        out.reference[spec.name] = quantised.to(at::kDouble);
        out.kernel[spec.name] =
            spec.time_major ? from_head_last(quantised, c.layout).contiguous() : quantised;
    }
    return out;
}

}  // namespace lav::harness
