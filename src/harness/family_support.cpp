// src/harness/family_support.cpp — the pieces the family adapters share (see family_support.h).
#include "harness/family_support.h"

#include <cmath>

namespace lav::harness {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

bool flag(const Case& c, const std::string& name) { return c.options.at(name) == "true"; }

int64_t value_heads(const Case& c) { return c.HV > 0 ? c.HV : c.H; }

Generator generator_of(const Case& c, const std::string& name, const Generator& fallback) {
    const auto it = c.generators.find(name);
    return it != c.generators.end() ? it->second : fallback;
}

void add_defined(TensorMap& out, const TensorMap& named) {
    for (const auto& [name, t] : named)
        if (t.defined()) out[name] = t;
}

void check_one_value_head(std::vector<FamilyIssue>& issues, const Case& c) {
    if (c.HV == 0 || c.HV == c.H) return;
    issues.push_back({"shape.HV",
                      c.family + " has one value head per query head: HV must equal H = " +
                          std::to_string(c.H) + ", got " + std::to_string(c.HV),
                      "leave shape.HV out"});
}

void check_grouped_value_heads(std::vector<FamilyIssue>& issues, const Case& c) {
    const int64_t HV = value_heads(c);
    if (HV % c.H == 0) return;
    issues.push_back({"shape.HV",
                      "HV = " + std::to_string(HV) + " value heads is not a multiple of H = " +
                          std::to_string(c.H) + " key heads",
                      "grouped value attention shares each q, k head among HV / H value heads; "
                      "set HV to a multiple of H"});
}

void check_neg_eigval(std::vector<FamilyIssue>& issues, const Case& c) {
    if (!flag(c, "allow_neg_eigval") || flag(c, "use_beta_sigmoid_in_kernel")) return;
    issues.push_back({"options.allow_neg_eigval",
                      "allow_neg_eigval needs use_beta_sigmoid_in_kernel (FLA raises ValueError)",
                      "set use_beta_sigmoid_in_kernel = true, or drop allow_neg_eigval"});
}

double expected_norm2(const Generator& gen, int64_t K) {
    if (gen.dist == "zeros") return 0.0;
    const double norm2 = gen.scale * gen.scale * static_cast<double>(K);
    return gen.dist == "rand" ? norm2 / 3.0 : norm2;
}

bool draws_inputs(const Case& c) { return !c.capture && !c.inputs_given; }

void check_unnormalised_keys(std::vector<FamilyIssue>& issues, const Case& c) {
    if (flag(c, "use_qk_l2norm_in_kernel") || !draws_inputs(c)) return;
    const Generator gen = generator_of(c, "k");
    const double norm2 = expected_norm2(gen, c.K);
    if (norm2 <= 2.0) return;
    issues.push_back({"options.use_qk_l2norm_in_kernel",
                      "keys drawn as '" + gen.dist + "' have |k|^2 of about " +
                          std::to_string(static_cast<int64_t>(std::lround(norm2))) +
                          " without the in-kernel norm, and the delta rule diverges for "
                          "beta |k|^2 > 2",
                      "keep use_qk_l2norm_in_kernel = true, or draw k with scale K^-0.5 "
                      "([inputs] k = { dist = \"randn\", scale = ... })"});
}

}  // namespace lav::harness
