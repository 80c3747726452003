// src/harness/based_family.cpp — Based's options, reference and CPU backend; the rest is shared
// with rebased in feature_map_family.h.
#include <ATen/ATen.h>

#include "harness/feature_map_family.h"
#include "kernels/based/based.h"
#include "reference/based.h"

namespace lav::harness {
namespace {

using scenario::Case;

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    auto r = feature_map::ref_inputs<ref::BasedInputs>(c, in);
    r.scale = scale_of(c);
    r.use_norm = flag(c, "use_norm");
    TensorMap out = {{"o", ref::based_fwd(r)}};
    if (backward) add_defined(out, feature_map::grads(ref::based_bwd(r, cot.at("d_o"))));
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    auto a = feature_map::kernel_args<kernels::BasedArgs>(c, in);
    a.scale = scale_of(c);
    a.use_norm = flag(c, "use_norm");
    KernelResult result;
    result.contract = kernels::based_contract(variant, backward, a);
    const TensorMap raw =
        backward ? feature_map::grads(kernels::based_bwd_cpu(variant, a, cot.at("d_o")))
                 : TensorMap{{"o", kernels::based_fwd_cpu(variant, a)}};
    result.results = head_last_results(c, feature_map::measured(c, backward), raw);
    return result;
}

}  // namespace

Family based_family() {
    Family f;
    feature_map::fill(f);
    f.info.name = "based";
    f.info.summary =
        "Based: causal linear attention with the 2nd-order Taylor feature map "
        "and its normaliser (no recurrent state)";
    f.info.options = {{"use_norm", {"true", "false"}}};
    f.reference = reference;
    f.run_cpu = run_cpu;
    return f;
}

}  // namespace lav::harness
