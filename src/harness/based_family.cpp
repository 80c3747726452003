// src/harness/based_family.cpp — Based declared: its options and reference inputs; the rest is
// shared with rebased in feature_map_family.h.
#include "harness/feature_map_family.h"
#include "reference/based.h"

namespace lav::harness {
namespace {

ref::BasedInputs reference_inputs(const Call& c) {
    auto r = feature_map::reference_inputs<ref::BasedInputs>(c);
    r.scale = c.scale;
    r.use_norm = c.flag("use_norm");
    return r;
}

}  // namespace

Family based_family() {
    return feature_map::family(
        "based",
        "Based: causal linear attention with the 2nd-order Taylor feature map "
        "and its normaliser (no recurrent state)",
        {{"use_norm", {"true", "false"}}}, reference_inputs, ref::based_fwd, ref::based_bwd,
        ref::based_fwd_recurrent);
}

}  // namespace lav::harness
