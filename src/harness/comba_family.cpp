// src/harness/comba_family.cpp — Comba declared: its tensors, options and reference.
#include <cmath>
#include <string>

#include "harness/family_support.h"
#include "reference/comba.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

ref::CombaInputs reference_inputs(const Call& c) {
    ref::CombaInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, p, g, beta, h0);
    set_common_inputs(r, c);
    r.use_qk_l2norm_in_kernel = c.flag("use_qk_l2norm_in_kernel");
    return r;
}

TensorMap outputs(const ref::CombaOutputs& f) { return LAV_NAMED(f, o, ht, states); }

TensorMap reference(const Call& c, bool backward) {
    const ref::CombaInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::comba_fwd(r));
    if (backward) {
        const ref::CombaGrads g = ref::comba_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, dp, dg, dbeta, dh0));
    }
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    check_one_value_head(issues, c);
    // without the in-kernel norm the keys are used as drawn, and the step e^g I − β k pᵀ
    // grows the state once |k||p| is well above 1 (randn: |k|² ≈ scale²·K)
    if (!flag(c, "use_qk_l2norm_in_kernel") && draws_inputs(c)) {
        for (const char* name : {"k", "p"}) {
            const Generator gen = generator_of(c, name);
            const double norm2 = expected_norm2(gen, c.K);
            if (norm2 > 2.0)
                issues.push_back({"options.use_qk_l2norm_in_kernel",
                                  std::string(name) + " drawn as '" + gen.dist +
                                      "' has |x|^2 of about " +
                                      std::to_string(static_cast<int64_t>(std::lround(norm2))) +
                                      " without the in-kernel norm, and the recurrence diverges",
                                  "keep use_qk_l2norm_in_kernel = true, or draw k and p with "
                                  "scale K^-0.5"});
        }
    }
    return issues;
}

}  // namespace

Family comba_family() {
    Family f;
    f.name = "comba";
    f.summary =
        "Comba: a gated delta rule whose correction reads the pre-decay state "
        "through an auxiliary key p";
    // FLA's default is false, but its tests normalise q, k, p and the default randn keys need it
    f.options = {{"use_qk_l2norm_in_kernel", {"true", "false"}}};
    f.tensors = {
        // randn q, k, p as FLA's comba tests draw them (stable once the kernel normalises them),
        // the log decay as logsigmoid, β as U[0, 1)
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        {"p", Role::input, "B T H K", DTypeSetting::inputs},
        {"g", Role::gate, "B T H", DTypeSetting::gate, {"logsigmoid"}},
        {"beta", Role::gate, "B T H", DTypeSetting::gate, {"rand"}},
        {"h0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"ht", Role::output, "N H K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dht", Role::cotangent, "N H K V", DTypeSetting::state},
    };
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::comba_fwd_wy(reference_inputs(c)));
    };
    f.stores_chunk_states = true;
    return f;
}

}  // namespace lav::harness
