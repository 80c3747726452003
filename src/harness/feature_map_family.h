// src/harness/feature_map_family.h — what the based and rebased adapters share: stateless
// causal attention through a feature map, q, k, v in and o out, three variants, K ≤ 128.
#pragma once

#include <string>
#include <vector>

#include "harness/family_support.h"
#include "harness/registry.h"

namespace lav::harness::feature_map {

/// q, k [B, T, H, K] and v [B, T, H, V], all randn.
inline std::vector<TensorSpec> inputs(const scenario::Case& c) { return qkv_specs(c, c.H); }

/// d_o [B, T, H, V]: there is no final state to take a cotangent.
inline std::vector<TensorSpec> cotangents(const scenario::Case& c) {
    return {{"d_o", {c.B, c.T, c.H, c.V}, c.output_dtype, true, scenario::Generator{}}};
}

inline std::vector<MeasuredSpec> measured(const scenario::Case&, bool backward) {
    if (!backward) return {{"o", metrics::TensorKind::output, 1}};
    return qkv_grads_measured();
}

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
RefInputs ref_inputs(const scenario::Case& c, const TensorMap& in) {
    RefInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.cu_seqlens = c.cu_seqlens;
    return r;
}

/// The kernel arguments with q, k, v and the common settings set; the caller sets the options.
template <class Args>
Args kernel_args(const scenario::Case& c, const TensorMap& in) {
    Args a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    set_common_args(a, c);
    return a;
}

/// dq, dk, dv of a reference's or a kernel's gradients.
template <class Grads>
TensorMap grads(const Grads& g) {
    return {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}};
}

/// Fills the parts of a Family that based and rebased share.
inline void fill(Family& f) {
    f.info.variants = {"parallel", "chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "d_o"};
    f.info.measured = {"o", "dq", "dk", "dv"};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
}

}  // namespace lav::harness::feature_map
