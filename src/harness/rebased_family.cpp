// src/harness/rebased_family.cpp — ReBased's options, reference and CPU backend; the rest is
// shared with based in feature_map_family.h.
#include <ATen/ATen.h>

#include "harness/feature_map_family.h"
#include "kernels/rebased/rebased.h"
#include "reference/rebased.h"

namespace lav::harness {
namespace {

using scenario::Case;

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    auto r = feature_map::ref_inputs<ref::RebasedInputs>(c, in);
    r.use_scale = flag(c, "use_scale");
    r.use_normalize = flag(c, "use_normalize");
    TensorMap out = {{"o", ref::rebased_fwd(r)}};
    if (backward) add_defined(out, feature_map::grads(ref::rebased_bwd(r, cot.at("d_o"))));
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    auto a = feature_map::kernel_args<kernels::RebasedArgs>(c, in);
    a.use_scale = flag(c, "use_scale");
    a.use_normalize = flag(c, "use_normalize");
    KernelResult result;
    result.contract = kernels::rebased_contract(variant, backward, a);
    const TensorMap raw =
        backward ? feature_map::grads(kernels::rebased_bwd_cpu(variant, a, cot.at("d_o")))
                 : TensorMap{{"o", kernels::rebased_fwd_cpu(variant, a)}};
    result.results = head_last_results(c, feature_map::measured(c, backward), raw);
    return result;
}

}  // namespace

Family rebased_family() {
    Family f;
    feature_map::fill(f);
    f.info.name = "rebased";
    f.info.summary =
        "ReBased: causal linear attention with the squared-score kernel and its "
        "normaliser (no recurrent state)";
    // FLA's parallel_rebased fixes eps = 1e-5; use_scale picks K^-0.5 or 1 (the scenario's
    // `scale` is not read)
    f.info.options = {{"use_scale", {"true", "false"}}, {"use_normalize", {"true", "false"}}};
    f.reference = reference;
    f.run_cpu = run_cpu;
    return f;
}

}  // namespace lav::harness
