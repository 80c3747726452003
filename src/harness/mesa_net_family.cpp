// src/harness/mesa_net_family.cpp — MesaNet declared: its tensors, options and reference.
#include "harness/family_support.h"
#include "reference/mesa_net.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

// λ = 0.5, inside FLA's [0.25, 1)
Generator lamb_draw() { return {"ones", 0.5}; }

// h_kk0 = 11ᵀ / K: symmetric PSD with eigenvalue 1, like FLA's u uᵀ of a unit u
Generator h_kk0_draw(const Case& c) { return {"ones", 1.0 / static_cast<double>(c.K)}; }

ref::MesaNetInputs reference_inputs(const Call& c) {
    ref::MesaNetInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v, g, beta, lamb, h_kk0, h_kv0);
    r.cu_seqlens = c.cu_seqlens;
    r.use_qk_l2norm_in_kernel = c.flag("use_qk_l2norm_in_kernel");
    return r;
}

TensorMap outputs(const ref::MesaNetOutputs& f) { return LAV_NAMED(f, o, ht_kk, ht_kv); }

TensorMap reference(const Call& c, bool backward) {
    const ref::MesaNetInputs r = reference_inputs(c);
    TensorMap out = outputs(ref::mesa_net_fwd(r));
    if (backward) {
        const ref::MesaNetGrads g =
            ref::mesa_net_bwd(r, c.need("d_o"), c.need("dht_kk"), c.need("dht_kv"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, dg, dbeta, dlamb, dh_kk0, dh_kv0));
    }
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    check_one_value_head(issues, c);
    // the solve needs Hkk + diag(λ) symmetric positive definite: λ > 0 and h_kk0 symmetric PSD
    const Generator lamb = generator_of(c, "lamb", lamb_draw());
    if (!((lamb.dist == "ones" || lamb.dist == "rand") && lamb.scale > 0.0))
        issues.push_back({"inputs.lamb",
                          "lamb drawn as '" + lamb.dist +
                              "' is not positive, and MesaNet's solve needs "
                              "Hkk + diag(lamb) positive definite",
                          "draw lamb as \"ones\" or \"rand\" with a positive scale"});
    const Generator kk = generator_of(c, "h_kk0", h_kk0_draw(c));
    if (c.initial_state && !(kk.dist == "zeros" || (kk.dist == "ones" && kk.scale >= 0.0)))
        issues.push_back(
            {"inputs.h_kk0",
             "h_kk0 drawn as '" + kk.dist + "' is not symmetric positive semi-definite",
             "draw h_kk0 as \"zeros\" or \"ones\" with a scale >= 0 (a rank-one "
             "scale 11^T)"});
    return issues;
}

// the generators that depend on the case: h_kk0's scale is 1/K
std::optional<Generator> draw(const Case& c, const std::string& name) {
    if (name == "h_kk0") return h_kk0_draw(c);
    return std::nullopt;
}

}  // namespace

Family mesa_net_family() {
    Family f;
    f.name = "mesa_net";
    f.summary = "MesaNet: two decayed states and a per-step ridge solve (conjugate gradient)";
    // q, v randn; k randn (unit after the in-kernel norm, the family's default); g =
    // logsigmoid(x)/10, about FLA's log U[0.8, 0.99]; β ~ U[0, 1); h_kv0 randn
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        {"g", Role::gate, "B T H", DTypeSetting::gate, {"logsigmoid", 1.0, 10.0}},
        {"beta", Role::gate, "B T H", DTypeSetting::gate, {"rand"}},
        {"lamb", Role::gate, "H K", DTypeSetting::gate, lamb_draw()},
        // 11ᵀ here; draw() scales it by 1/K
        {"h_kk0", Role::state, "N H K K", DTypeSetting::state, {"ones"}, "initial_state"},
        {"h_kv0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"ht_kk", Role::output, "N H K K", DTypeSetting::state},
        {"ht_kv", Role::output, "N H K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dht_kk", Role::cotangent, "N H K K", DTypeSetting::state},
        {"dht_kv", Role::cotangent, "N H K V", DTypeSetting::state},
    };
    f.state_components = {{"kk", {"h_kk0", "ht_kk", "dht_kk"}},
                          {"kv", {"h_kv0", "ht_kv", "dht_kv"}}};
    // the norm is on by default (randn keys need it); K CG steps as FLA's tests run them, or
    // FLA's default of 30, or 8 to see an unconverged solve
    f.options = {{"use_qk_l2norm_in_kernel", {"true", "false"}},
                 {"max_cg_iterations", {"K", "30", "8"}}};
    f.draw = draw;
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::mesa_net_fwd_materialised(reference_inputs(c)));
    };
    return f;
}

}  // namespace lav::harness
