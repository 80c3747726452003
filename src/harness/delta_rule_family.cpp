// src/harness/delta_rule_family.cpp — the delta rule's tensors, reference and CPU backend.
#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "core/layout.h"
#include "core/varlen.h"
#include "harness/registry.h"
#include "kernels/delta_rule/delta_rule.h"
#include "reference/delta_rule.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

bool l2norm_of(const Case& c) { return c.options.at("use_qk_l2norm_in_kernel") == "true"; }

double scale_of(const Case& c) {
    return c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.K));
}

std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    // randn keys are only stable once normalised, which use_qk_l2norm_in_kernel does (the
    // family's default); β ~ U[0, 1) is a valid β as drawn
    std::vector<TensorSpec> specs = {
        {"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"k", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"v", {c.B, c.T, c.H, c.V}, c.input_dtype, true, Generator{}},
        {"beta", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"rand"}},
    };
    if (c.initial_state)
        specs.push_back({"h0", {N, c.H, c.K, c.V}, c.state_dtype, false, Generator{}});
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    return {
        {"d_o", {c.B, c.T, c.H, c.V}, c.output_dtype, true, Generator{}},
        {"dht", {N, c.H, c.K, c.V}, c.state_dtype, false, Generator{}},
    };
}

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward) return {{"o", TensorKind::output, 1}, {"ht", TensorKind::state, -1}};
    std::vector<MeasuredSpec> out = {{"dq", TensorKind::gradient, 1},
                                     {"dk", TensorKind::gradient, 1},
                                     {"dv", TensorKind::gradient, 1},
                                     {"dbeta", TensorKind::gate_grad, 1}};
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

// Without the in-kernel norm the keys are used as drawn, and the step I − β k kᵀ has the
// eigenvalue 1 − β‖k‖², which must stay within (−1, 1) for β < 1: ‖k‖² < 2. The generators'
// expected ‖k‖² is scale²·K for randn and ones, scale²·K/3 for rand.
std::vector<FamilyIssue> check(const Case& c) {
    if (l2norm_of(c)) return {};
    const auto it = c.generators.find("k");
    const Generator gen = it != c.generators.end() ? it->second : Generator{};
    double norm2 = gen.scale * gen.scale * static_cast<double>(c.K);
    if (gen.dist == "rand") norm2 /= 3.0;
    if (gen.dist == "zeros" || norm2 <= 2.0) return {};
    return {{"options.use_qk_l2norm_in_kernel",
             "keys drawn as '" + gen.dist + "' have |k|^2 of about " +
                 std::to_string(static_cast<int64_t>(std::lround(norm2))) +
                 " without the in-kernel norm, and the delta rule diverges for beta |k|^2 > 2",
             "keep use_qk_l2norm_in_kernel = true, or draw k with scale K^-0.5 "
             "([inputs] k = { dist = \"randn\", scale = ... })"}};
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    ref::DeltaRuleInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.beta = in.at("beta");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    r.use_qk_l2norm_in_kernel = l2norm_of(c);
    const ref::DeltaRuleOutputs fwd = ref::delta_rule_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::DeltaRuleGrads grads = ref::delta_rule_bwd(r, cot.at("d_o"), cot.at("dht"));
        out["dq"] = grads.dq;
        out["dk"] = grads.dk;
        out["dv"] = grads.dv;
        out["dbeta"] = grads.dbeta;
        if (grads.dh0.defined()) out["dh0"] = grads.dh0;
    }
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::DeltaRuleArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.beta = in.at("beta");
    a.h0 = get_or_undefined(in, "h0");
    if (!c.cu_seqlens.empty())
        a.cu_seqlens = at::tensor(at::ArrayRef<int64_t>(c.cu_seqlens), at::kLong);
    a.layout = c.layout;
    a.scale = scale_of(c);
    a.use_qk_l2norm_in_kernel = l2norm_of(c);
    a.state_dtype = to_scalar_type(c.state_dtype);
    a.output_dtype = to_scalar_type(c.output_dtype);
    a.chunk_size = c.chunk_size;

    const bool chunk = variant == "chunk";
    LAV_ASSERT(chunk || variant == "recurrent", "unknown delta_rule variant ", variant);
    KernelResult result;
    result.contract = kernels::delta_rule_contract(variant, backward, a);
    if (!backward) {
        const kernels::DeltaRuleFwd f =
            chunk ? kernels::delta_rule_chunk_fwd_cpu(a) : kernels::delta_rule_recurrent_fwd_cpu(a);
        result.results = {{"o", to_head_last(f.o, c.layout)}, {"ht", f.ht}};
        return result;
    }
    const at::Tensor d_o = cot.at("d_o");
    const at::Tensor dht = cot.at("dht");
    const kernels::DeltaRuleGrads g = chunk ? kernels::delta_rule_chunk_bwd_cpu(a, d_o, dht)
                                            : kernels::delta_rule_recurrent_bwd_cpu(a, d_o, dht);
    result.results = {{"dq", to_head_last(g.dq, c.layout)},
                      {"dk", to_head_last(g.dk, c.layout)},
                      {"dv", to_head_last(g.dv, c.layout)},
                      {"dbeta", to_head_last(g.dbeta, c.layout)}};
    if (g.dh0.defined()) result.results["dh0"] = g.dh0;
    return result;
}

}  // namespace

Family delta_rule_family() {
    Family f;
    f.info.name = "delta_rule";
    f.info.summary = "DeltaNet: linear attention with the delta-rule state correction";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "beta", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dq", "dk", "dv", "dbeta", "dh0"};
    // FLA's default is false, but its tests always normalise q and k, and the family's default
    // randn keys need it to stay stable
    f.info.options = {{"use_qk_l2norm_in_kernel", {"true", "false"}}};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
    f.reference = reference;
    f.run_cpu = run_cpu;
    return f;
}

}  // namespace lav::harness
