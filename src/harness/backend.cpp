// src/harness/backend.cpp — which row runs a variant, and moving tensors to its device.
#include "harness/backend.h"

#include <ATen/ATen.h>

#include "core/build_info.h"
#include "core/error.h"

namespace lav::harness {
namespace {

bool device_present(const std::string& device) {
    return device == "cpu" || (device == "cuda" && cuda_available());
}

}  // namespace

bool cuda_available() { return kCudaBuild && at::hasCUDA(); }

std::string cuda_context_error() {
    try {
        // a copy back to the host waits for the device, so a sticky error surfaces here
        at::ones({1}, at::kCUDA).cpu();
        return "";
    } catch (const std::exception& e) {
        return e.what();
    }
}

Choice choose_row(const Registry& registry, const std::string& family, const std::string& variant,
                  const Call& call, const std::string& requested) {
    if (requested != "auto") return {requested, registry.rows().find(family, variant, requested)};
    Choice best;
    for (const Row& r : registry.rows().rows()) {
        if (r.family != family || r.variant != variant || !r.automatic) continue;
        if (!device_present(r.device) || (r.fits && !r.fits(call))) continue;
        if (!best.row || (r.device == "cuda" && best.row->device != "cuda")) best = {r.backend, &r};
    }
    LAV_ASSERT(best.row, "no row runs ", family, " ", variant, " here");
    return best;
}

TensorMap to_device(const TensorMap& m, const std::string& device) {
    const at::Device d(device == "cuda" ? at::kCUDA : at::kCPU);
    TensorMap out;
    for (const auto& [name, t] : m) out[name] = t.defined() ? t.to(d) : t;
    return out;
}

}  // namespace lav::harness
