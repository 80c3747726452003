// src/harness/delta_rule_family.cpp — the delta rule's tensors, reference and CPU backend.
#include <ATen/ATen.h>

#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/delta_rule/delta_rule.h"
#include "reference/delta_rule.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

bool l2norm_of(const Case& c) { return flag(c, "use_qk_l2norm_in_kernel"); }

std::vector<TensorSpec> inputs(const Case& c) {
    // randn keys are only stable once normalised, which use_qk_l2norm_in_kernel does (the
    // family's default); β ~ U[0, 1) is a valid β as drawn
    std::vector<TensorSpec> specs = qkv_specs(c, c.H);
    specs.push_back({"beta", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"rand"}});
    if (c.initial_state) specs.push_back(kv_state_spec(c, "h0", c.H));
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) { return output_state_cotangents(c, c.H); }

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    if (!backward) return output_state_measured();
    std::vector<MeasuredSpec> out = qkv_grads_measured({"dbeta"});
    if (c.initial_state) out.push_back({"dh0", metrics::TensorKind::gradient, -1});
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    check_unnormalised_keys(issues, c);
    return issues;
}

ref::DeltaRuleInputs reference_inputs(const Case& c, const TensorMap& in) {
    ref::DeltaRuleInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.beta = in.at("beta");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    r.use_qk_l2norm_in_kernel = l2norm_of(c);
    return r;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    const ref::DeltaRuleInputs r = reference_inputs(c, in);
    const ref::DeltaRuleOutputs fwd = ref::delta_rule_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::DeltaRuleGrads g = ref::delta_rule_bwd(r, cot.at("d_o"), cot.at("dht"));
        add_defined(out,
                    {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}, {"dbeta", g.dbeta}, {"dh0", g.dh0}});
    }
    return out;
}

kernels::DeltaRuleArgs kernel_args(const Case& c, const TensorMap& in) {
    kernels::DeltaRuleArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.beta = in.at("beta");
    a.h0 = get_or_undefined(in, "h0");
    a.scale = scale_of(c);
    a.use_qk_l2norm_in_kernel = l2norm_of(c);
    set_common_args(a, c);
    return a;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    const kernels::DeltaRuleArgs a = kernel_args(c, in);
    const bool chunk = is_chunk("delta_rule", variant);
    KernelResult result;
    result.contract = kernels::delta_rule_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::DeltaRuleFwd f =
            chunk ? kernels::delta_rule_chunk_fwd_cpu(a) : kernels::delta_rule_recurrent_fwd_cpu(a);
        raw = {{"o", f.o}, {"ht", f.ht}};
    } else {
        const at::Tensor d_o = cot.at("d_o");
        const at::Tensor dht = cot.at("dht");
        const kernels::DeltaRuleGrads g = chunk
                                              ? kernels::delta_rule_chunk_bwd_cpu(a, d_o, dht)
                                              : kernels::delta_rule_recurrent_bwd_cpu(a, d_o, dht);
        raw = {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}, {"dbeta", g.dbeta}, {"dh0", g.dh0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

ChunkStates chunk_states(const Case& c, const TensorMap& in, const TensorMap& reference_in) {
    return stored_chunk_states(c, kernel_args(c, in), kernels::delta_rule_chunk_fwd_cpu,
                               reference_inputs(c, reference_in), ref::delta_rule_fwd);
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
    f.chunk_states = chunk_states;
    return f;
}

}  // namespace lav::harness
