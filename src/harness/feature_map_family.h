// src/harness/feature_map_family.h — what based and rebased share: stateless causal attention
// through a feature map, q, k, v in and o out, three variants, K ≤ 128.
//
//   Family based_family() {
//       return feature_map::family("based", summary, {{"use_norm", {"true", "false"}}},
//                                  reference_inputs, ref::based_fwd, ref::based_bwd,
//                                  ref::based_fwd_recurrent);
//   }
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/family_support.h"

namespace lav::harness::feature_map {

/// One value head per query head, and K ≤ 128: the feature map has O(K²) dimensions and FLA's
/// parallel_based and parallel_rebased assert it.
inline std::vector<scenario::FamilyIssue> check(const scenario::Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    if (c.K > 128)
        issues.push_back({"shape.K",
                          c.family + " takes K <= 128 (FLA's parallel_" + c.family + " asserts it)",
                          "use a feature dimension of at most 128 (FLA's layers use 16)"});
    return issues;
}

/// The reference inputs with q, k, v and cu_seqlens set; the caller sets the options.
template <class RefInputs>
RefInputs reference_inputs(const Call& c) {
    RefInputs r;
    LAV_TENSORS_FROM(r, c, q, k, v);
    r.cu_seqlens = c.cu_seqlens;
    return r;
}

/// The family `name`: `inputs` builds its reference's inputs from a call, `fwd` and `bwd` are
/// the reference's quadratic form, `fwd_check` its feature-map recurrence.
template <class RefInputs, class RefGrads>
Family family(std::string name, std::string summary,
              std::map<std::string, std::vector<std::string>> options,
              RefInputs (*inputs)(const Call&), at::Tensor (*fwd)(const RefInputs&),
              RefGrads (*bwd)(const RefInputs&, const at::Tensor&),
              at::Tensor (*fwd_check)(const RefInputs&)) {
    Family f;
    f.name = std::move(name);
    f.summary = std::move(summary);
    f.variants = {"parallel", "chunk", "recurrent"};
    f.tensors = {
        {"q", Role::input, "B T H K", DTypeSetting::inputs},
        {"k", Role::input, "B T H K", DTypeSetting::inputs},
        {"v", Role::input, "B T H V", DTypeSetting::inputs},
        {"o", Role::output, "B T H V", DTypeSetting::output},
        // there is no final state to take a cotangent
        {"d_o", Role::cotangent, "B T H V", DTypeSetting::output},
    };
    f.options = std::move(options);
    f.check = check;
    f.reference = [=](const Call& c, bool backward) {
        const RefInputs r = inputs(c);
        TensorMap out = {{"o", fwd(r)}};
        if (backward) {
            const RefGrads g = bwd(r, c.need("d_o"));
            add_defined(out, LAV_NAMED(g, dq, dk, dv));
        }
        return out;
    };
    f.reference_check = [=](const Call& c) { return TensorMap{{"o", fwd_check(inputs(c))}}; };
    return f;
}

}  // namespace lav::harness::feature_map
