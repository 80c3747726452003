// src/harness/kda_family.cpp — KDA declared: its tensors, options and reference.
#include <cmath>
#include <optional>
#include <string>

#include "harness/family_support.h"
#include "reference/kda.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

constexpr const char* kL2Norm = "use_qk_l2norm_in_kernel";
constexpr const char* kGateInKernel = "use_gate_in_kernel";
constexpr const char* kLowerBound = "lower_bound";
constexpr const char* kBetaSigmoid = "use_beta_sigmoid_in_kernel";
constexpr const char* kNegEigval = "allow_neg_eigval";

std::optional<double> lower_bound(const std::string& value) {
    if (value == "none") return std::nullopt;
    return std::stod(value);
}

ref::KdaInputs reference_inputs(const Call& c) {
    ref::KdaInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, g, beta, A_log, dt_bias, h0);
    set_common_inputs(r, c);
    r.use_qk_l2norm_in_kernel = c.flag(kL2Norm);
    r.use_gate_in_kernel = c.flag(kGateInKernel);
    r.lower_bound = lower_bound(c.option(kLowerBound));
    r.use_beta_sigmoid_in_kernel = c.flag(kBetaSigmoid);
    r.allow_neg_eigval = c.flag(kNegEigval);
    return r;
}

TensorMap outputs(const ref::KdaOutputs& f) { return LAV_NAMED(f, o, ht, states); }

TensorMap reference(const Call& c, bool backward) {
    const ref::KdaInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::kda_fwd(r));
    if (backward) {
        const ref::KdaGrads g = ref::kda_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0));
    }
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_grouped_value_heads(issues, c);
    check_neg_eigval(issues, c);
    if (lower_bound(c.options.at(kLowerBound)) && !flag(c, kGateInKernel))
        issues.push_back({std::string("options.") + kLowerBound,
                          "lower_bound is a form of the in-kernel gate",
                          "set options.use_gate_in_kernel = true, or leave lower_bound out"});
    return issues;
}

std::optional<Generator> draw(const Case& c, const std::string& name) {
    // unnormalised randn keys make the delta rule's transition I − β k kᵀ expand (‖k‖² ≈ K);
    // without the in-kernel l2norm, q and k are drawn with ‖k‖ ≈ 1
    if ((name == "q" || name == "k") && !flag(c, kL2Norm))
        return Generator{"randn", 1.0 / std::sqrt(static_cast<double>(c.K))};
    // the raw gate the kernel activates, or a logit the kernel passes through its sigmoid
    if (name == "g" && flag(c, kGateInKernel)) return Generator{};
    if (name == "beta" && flag(c, kBetaSigmoid)) return Generator{};
    return std::nullopt;
}

}  // namespace

Family kda_family() {
    Family f;
    f.name = "kda";
    f.summary =
        "Kimi Delta Attention: the gated delta rule with a per-key-dimension decay, grouped "
        "value heads";
    // l2norm defaults on, unlike FLA's flag: randn keys need it (see draw()), and FLA's own
    // KDA tests and benchmark normalise q and k
    f.options = {{kL2Norm, {"true", "false"}},
                 {kGateInKernel, {"false", "true"}},
                 {kLowerBound, {"none", "-5", "-1"}},
                 {kBetaSigmoid, {"false", "true"}},
                 {kNegEigval, {"false", "true"}}};
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T HV V", DTypeSetting::inputs},
        // a log decay, unless the kernel activates a raw gate
        {"g", Role::gate, "B T HV K", DTypeSetting::gate, {"logsigmoid"}},
        // β in [0, 1), unless the kernel passes a logit through its sigmoid
        {"beta", Role::gate, "B T HV", DTypeSetting::gate, {"rand"}},
        {"A_log", Role::gate, "HV", DTypeSetting::gate, {"randn", 0.5}, "use_gate_in_kernel=true"},
        {"dt_bias", Role::gate, "HV*K", DTypeSetting::gate, {}, "use_gate_in_kernel=true"},
        {"h0", Role::state, "N HV K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T HV V", DTypeSetting::output},
        {"ht", Role::output, "N HV K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T HV V", DTypeSetting::output},
        {"dht", Role::cotangent, "N HV K V", DTypeSetting::state},
    };
    f.draw = draw;
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::kda_fwd_chunked(reference_inputs(c), c.chunk_size));
    };
    f.stores_chunk_states = true;
    return f;
}

}  // namespace lav::harness
