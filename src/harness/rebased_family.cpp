// src/harness/rebased_family.cpp — ReBased declared: its options and reference inputs; the rest
// is shared with based in feature_map_family.h.
#include "harness/feature_map_family.h"
#include "reference/rebased.h"

namespace lav::harness {
namespace {

ref::RebasedInputs reference_inputs(const Call& c) {
    auto r = feature_map::reference_inputs<ref::RebasedInputs>(c);
    LAV_FLAGS_FROM(r, c, use_scale, use_normalize);
    return r;
}

}  // namespace

Family rebased_family() {
    // FLA's parallel_rebased fixes eps = 1e-5; use_scale picks K^-0.5 or 1 (the scenario's
    // `scale` is not read)
    return feature_map::family(
        "rebased",
        "ReBased: causal linear attention with the squared-score kernel and its "
        "normaliser (no recurrent state)",
        {{"use_scale", {"true", "false"}}, {"use_normalize", {"true", "false"}}}, reference_inputs,
        ref::rebased_fwd, ref::rebased_bwd, ref::rebased_fwd_recurrent);
}

}  // namespace lav::harness
