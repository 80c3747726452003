// src/harness/kda_family.cpp — KDA's tensors, options, reference and CPU backend behind Family.
#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <string>

#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/kda/kda.h"
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

std::optional<double> lower_bound(const Case& c) {
    const std::string& value = c.options.at(kLowerBound);
    if (value == "none") return std::nullopt;
    return std::stod(value);
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_grouped_value_heads(issues, c);
    check_neg_eigval(issues, c);
    if (lower_bound(c) && !flag(c, kGateInKernel))
        issues.push_back({std::string("options.") + kLowerBound,
                          "lower_bound is a form of the in-kernel gate",
                          "set options.use_gate_in_kernel = true, or leave lower_bound out"});
    return issues;
}

std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t HV = value_heads(c);
    // unnormalised randn keys make the delta rule's transition I − β k kᵀ expand (‖k‖² ≈ K);
    // without the in-kernel l2norm, q and k are drawn with ‖k‖ ≈ 1
    const Generator qk = flag(c, kL2Norm)
                             ? Generator{}
                             : Generator{"randn", 1.0 / std::sqrt(static_cast<double>(c.K))};
    const bool gate_in_kernel = flag(c, kGateInKernel);
    std::vector<TensorSpec> specs = qkv_specs(c, HV, qk);
    // a log decay, or the raw gate the kernel activates
    specs.push_back({"g",
                     {c.B, c.T, HV, c.K},
                     c.gate_dtype,
                     true,
                     gate_in_kernel ? Generator{} : Generator{"logsigmoid"}});
    // β in [0, 1), or a logit the kernel passes through its sigmoid
    specs.push_back({"beta",
                     {c.B, c.T, HV},
                     c.gate_dtype,
                     true,
                     flag(c, kBetaSigmoid) ? Generator{} : Generator{"rand"}});
    if (gate_in_kernel) {
        specs.push_back({"A_log", {HV}, c.gate_dtype, false, Generator{"randn", 0.5}});
        specs.push_back({"dt_bias", {HV * c.K}, c.gate_dtype, false, Generator{}});
    }
    if (c.initial_state) specs.push_back(kv_state_spec(c, "h0", HV));
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) {
    return output_state_cotangents(c, value_heads(c));
}

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward) return output_state_measured();
    std::vector<MeasuredSpec> out = qkv_grads_measured({"dg", "dbeta"});
    if (flag(c, kGateInKernel)) {
        out.push_back({"dA_log", TensorKind::gate_grad, -1});
        out.push_back({"ddt_bias", TensorKind::gate_grad, -1});
    }
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

ref::KdaInputs reference_inputs(const Case& c, const TensorMap& in) {
    ref::KdaInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.g = in.at("g");
    r.beta = in.at("beta");
    r.A_log = get_or_undefined(in, "A_log");
    r.dt_bias = get_or_undefined(in, "dt_bias");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    r.use_qk_l2norm_in_kernel = flag(c, kL2Norm);
    r.use_gate_in_kernel = flag(c, kGateInKernel);
    r.lower_bound = lower_bound(c);
    r.use_beta_sigmoid_in_kernel = flag(c, kBetaSigmoid);
    r.allow_neg_eigval = flag(c, kNegEigval);
    return r;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    const ref::KdaInputs r = reference_inputs(c, in);
    const ref::KdaOutputs fwd = ref::kda_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::KdaGrads g = ref::kda_bwd(r, cot.at("d_o"), cot.at("dht"));
        add_defined(out, {{"dq", g.dq},
                          {"dk", g.dk},
                          {"dv", g.dv},
                          {"dg", g.dg},
                          {"dbeta", g.dbeta},
                          {"dA_log", g.dA_log},
                          {"ddt_bias", g.ddt_bias},
                          {"dh0", g.dh0}});
    }
    return out;
}

kernels::KdaArgs kernel_args(const Case& c, const TensorMap& in) {
    kernels::KdaArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.g = in.at("g");
    a.beta = in.at("beta");
    a.A_log = get_or_undefined(in, "A_log");
    a.dt_bias = get_or_undefined(in, "dt_bias");
    a.h0 = get_or_undefined(in, "h0");
    a.scale = scale_of(c);
    a.use_qk_l2norm_in_kernel = flag(c, kL2Norm);
    a.use_gate_in_kernel = flag(c, kGateInKernel);
    a.lower_bound = lower_bound(c);
    a.use_beta_sigmoid_in_kernel = flag(c, kBetaSigmoid);
    a.allow_neg_eigval = flag(c, kNegEigval);
    set_common_args(a, c);
    return a;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    const kernels::KdaArgs a = kernel_args(c, in);
    const bool chunk = is_chunk("kda", variant);
    KernelResult result;
    result.contract = kernels::kda_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::KdaFwd f =
            chunk ? kernels::kda_chunk_fwd_cpu(a) : kernels::kda_recurrent_fwd_cpu(a);
        raw = {{"o", f.o}, {"ht", f.ht}};
    } else {
        const at::Tensor d_o = cot.at("d_o");
        const at::Tensor dht = cot.at("dht");
        const kernels::KdaGrads g = chunk ? kernels::kda_chunk_bwd_cpu(a, d_o, dht)
                                          : kernels::kda_recurrent_bwd_cpu(a, d_o, dht);
        raw = {{"dq", g.dq},
               {"dk", g.dk},
               {"dv", g.dv},
               {"dg", g.dg},
               {"dbeta", g.dbeta},
               {"dA_log", g.dA_log},
               {"ddt_bias", g.ddt_bias},
               {"dh0", g.dh0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

ChunkStates chunk_states(const Case& c, const TensorMap& in, const TensorMap& reference_in) {
    return stored_chunk_states(c, kernel_args(c, in), kernels::kda_chunk_fwd_cpu,
                               reference_inputs(c, reference_in), ref::kda_fwd);
}

}  // namespace

Family kda_family() {
    Family f;
    f.info.name = "kda";
    f.info.summary =
        "Kimi Delta Attention: the gated delta rule with a per-key-dimension decay, grouped "
        "value heads";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"};
    // l2norm defaults on, unlike FLA's flag: randn keys need it (see inputs()), and FLA's own
    // KDA tests and benchmark normalise q and k
    f.info.options = {{kL2Norm, {"true", "false"}},
                      {kGateInKernel, {"false", "true"}},
                      {kLowerBound, {"none", "-5", "-1"}},
                      {kBetaSigmoid, {"false", "true"}},
                      {kNegEigval, {"false", "true"}}};
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
