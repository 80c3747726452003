// src/harness/rwkv7_family.cpp — rwkv7 declared: its tensors, options (form, tied b), reference.
#include <cmath>

#include "harness/family_support.h"
#include "reference/rwkv7.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

ref::Rwkv7Inputs reference_inputs(const Call& c) {
    ref::Rwkv7Inputs r;
    LAV_TENSORS_FROM(r, c, q, w, k, v, a);
    r.b = c.option("b") == "neg_a" ? -r.a : c.need("b");
    r.h0 = c.get("h0");
    set_common_inputs(r, c);
    return r;
}

TensorMap outputs(const ref::Rwkv7Outputs& f) { return LAV_NAMED(f, o, ht, states); }

TensorMap reference(const Call& c, bool backward) {
    const ref::Rwkv7Inputs r = reference_inputs(c);
    TensorMap out = outputs(ref::rwkv7_fwd(r));
    if (backward) {
        const ref::Rwkv7Grads g = ref::rwkv7_bwd(r, c.need("d_o"), c.need("dht"));
        add_defined(out, LAV_NAMED(g, dq, dk, dv, da, db, dw, dh0));
    }
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    return issues;
}

// ‖a‖ ≈ 1: with b = −a the transition D − a aᵀ then has no eigenvalue above 1 in magnitude
std::optional<Generator> draw(const Case& c, const std::string& name) {
    if (name == "a" || name == "b")
        return Generator{"randn", 1.0 / std::sqrt(static_cast<double>(c.K))};
    return std::nullopt;
}

}  // namespace

Family rwkv7_family() {
    Family f;
    f.name = "rwkv7";
    f.summary =
        "RWKV-7 / generalized delta rule: S = (diag(exp w) + b a^T) S + k v^T (dplr), or "
        "without the decay (iplr)";
    // b = −a (FLA's DPLR test convention) keeps every case stable by default; "input" draws b
    // or takes it from a prologue (RWKV-7's a = −k̂, b = k̂ ⊙ η)
    f.options = {{"form", {"dplr", "iplr"}}, {"b", {"neg_a", "input"}}};
    // chunk_rwkv7's default scale is 1.0, not K^-0.5 (fla/ops/rwkv7/chunk.py)
    f.default_scale = 1.0;
    // w after b keeps the measured order of the gradients: dq, dk, dv, da, db, dw, dh0
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        {"a", Role::input, "B T H K", DTypeSetting::inputs},
        // drawn in every case so that db is measured: with b = neg_a, exactly −a takes its place
        {"b", Role::input, "B T H K", DTypeSetting::inputs},
        {"w", Role::gate, "B T H K", DTypeSetting::gate, {"logsigmoid"}, "form=dplr"},
        {"h0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        {"ht", Role::output, "N H K V", DTypeSetting::state},
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
        {"dht", Role::cotangent, "N H K V", DTypeSetting::state},
    };
    f.draw = draw;
    f.check = check;
    f.reference = reference;
    f.reference_check = [](const Call& c) {
        return outputs(ref::rwkv7_fwd_chunkwise(reference_inputs(c), c.chunk_size));
    };
    f.stores_chunk_states = true;
    return f;
}

}  // namespace lav::harness
