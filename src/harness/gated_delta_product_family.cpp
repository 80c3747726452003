// src/harness/gated_delta_product_family.cpp — gated DeltaProduct declared: its tensors, options
// and reference.
#include "harness/family_support.h"
#include "reference/gated_delta_product.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;

ref::GatedDeltaProductInputs reference_inputs(const Call& c) {
    ref::GatedDeltaProductInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, g, beta, h0);
    set_common_inputs(r, c);
    r.num_householder = c.int_option("num_householder");
    r.use_qk_l2norm_in_kernel = c.flag("use_qk_l2norm_in_kernel");
    return r;
}

TensorMap outputs(const ref::GatedDeltaProductOutputs& f) { return LAV_NAMED(f, o, ht, states); }

TensorMap reference(const Call& c, bool backward) {
    const ref::GatedDeltaProductInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::gated_delta_product_fwd(r));
    if (backward) {
        const ref::GatedDeltaProductGrads g =
            ref::gated_delta_product_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, dbeta, dg, dh0));
    }
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    // FLA's chunk_gated_delta_product takes one H
    check_one_value_head(issues, c);
    check_unnormalised_keys(issues, c);
    return issues;
}

}  // namespace

Family gated_delta_product_family() {
    Family f;
    f.name = "gated_delta_product";
    f.summary =
        "Gated DeltaProduct: num_householder delta-rule sub-steps per token, one decay per token";
    // k, v and β have num_householder rows per token (FLA's interleaved layout); q, g and o one
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T*NH H K", DTypeSetting::inputs},
        {"v", Role::input, "B T*NH H V", DTypeSetting::inputs},
        {"beta", Role::gate, "B T*NH H", DTypeSetting::gate, {"rand"}},
        {"g", Role::gate, "B T H", DTypeSetting::gate, {"logsigmoid"}, "gate=g"},
        {"h0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"ht", Role::output, "N H K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dht", Role::cotangent, "N H K V", DTypeSetting::state},
    };
    // two sub-steps by default: FLA's default of one is the gated delta rule itself; the norm
    // is on by default as in the gated delta rule family (randn keys need it to stay stable)
    f.options = {{"num_householder", {"2", "1", "3"}},
                 {"gate", {"g", "none"}},
                 {"use_qk_l2norm_in_kernel", {"true", "false"}}};
    f.dim_options = {{"NH", "num_householder"}};
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::gated_delta_product_fwd_wy(reference_inputs(c)));
    };
    f.stores_chunk_states = true;
    f.steps_option = "num_householder";
    return f;
}

}  // namespace lav::harness
