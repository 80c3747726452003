// src/harness/kda_family.cpp — KDA's tensors, options, reference and CPU backend behind Family.
#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/layout.h"
#include "core/varlen.h"
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

bool flag(const Case& c, const char* option) { return c.options.at(option) == "true"; }

/// HV: the case's value heads, H when the scenario leaves them out.
int64_t value_heads(const Case& c) { return c.HV > 0 ? c.HV : c.H; }

std::optional<double> lower_bound(const Case& c) {
    const std::string& value = c.options.at(kLowerBound);
    if (value == "none") return std::nullopt;
    return std::stod(value);
}

double scale_of(const Case& c) {
    return c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.K));
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    const int64_t HV = value_heads(c);
    if (HV % c.H != 0)
        issues.push_back({"shape.HV",
                          "value heads HV = " + std::to_string(HV) +
                              " are not a multiple of H = " + std::to_string(c.H),
                          "set shape.HV to a multiple of shape.H, or leave it out (HV = H)"});
    if (flag(c, kNegEigval) && !flag(c, kBetaSigmoid))
        issues.push_back({std::string("options.") + kNegEigval,
                          "allow_neg_eigval needs use_beta_sigmoid_in_kernel = true",
                          "set options.use_beta_sigmoid_in_kernel = true, or leave "
                          "allow_neg_eigval out"});
    if (lower_bound(c) && !flag(c, kGateInKernel))
        issues.push_back({std::string("options.") + kLowerBound,
                          "lower_bound is a form of the in-kernel gate",
                          "set options.use_gate_in_kernel = true, or leave lower_bound out"});
    return issues;
}

std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    const int64_t HV = value_heads(c);
    // unnormalised randn keys make the delta rule's transition I − β k kᵀ expand (‖k‖² ≈ K);
    // without the in-kernel l2norm, q and k are drawn with ‖k‖ ≈ 1
    const Generator qk = flag(c, kL2Norm)
                             ? Generator{}
                             : Generator{"randn", 1.0 / std::sqrt(static_cast<double>(c.K))};
    const bool gate_in_kernel = flag(c, kGateInKernel);
    std::vector<TensorSpec> specs = {
        {"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, qk},
        {"k", {c.B, c.T, c.H, c.K}, c.input_dtype, true, qk},
        {"v", {c.B, c.T, HV, c.V}, c.input_dtype, true, Generator{}},
        // a log decay, or the raw gate the kernel activates
        {"g",
         {c.B, c.T, HV, c.K},
         c.gate_dtype,
         true,
         gate_in_kernel ? Generator{} : Generator{"logsigmoid"}},
        // β in [0, 1), or a logit the kernel passes through its sigmoid
        {"beta",
         {c.B, c.T, HV},
         c.gate_dtype,
         true,
         flag(c, kBetaSigmoid) ? Generator{} : Generator{"rand"}},
    };
    if (gate_in_kernel) {
        specs.push_back({"A_log", {HV}, c.gate_dtype, false, Generator{"randn", 0.5}});
        specs.push_back({"dt_bias", {HV * c.K}, c.gate_dtype, false, Generator{}});
    }
    if (c.initial_state)
        specs.push_back({"h0", {N, HV, c.K, c.V}, c.state_dtype, false, Generator{}});
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    const int64_t HV = value_heads(c);
    return {
        {"d_o", {c.B, c.T, HV, c.V}, c.output_dtype, true, Generator{}},
        {"dht", {N, HV, c.K, c.V}, c.state_dtype, false, Generator{}},
    };
}

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward) return {{"o", TensorKind::output, 1}, {"ht", TensorKind::state, -1}};
    std::vector<MeasuredSpec> out = {{"dq", TensorKind::gradient, 1},
                                     {"dk", TensorKind::gradient, 1},
                                     {"dv", TensorKind::gradient, 1},
                                     {"dg", TensorKind::gate_grad, 1},
                                     {"dbeta", TensorKind::gate_grad, 1}};
    if (flag(c, kGateInKernel)) {
        out.push_back({"dA_log", TensorKind::gate_grad, -1});
        out.push_back({"ddt_bias", TensorKind::gate_grad, -1});
    }
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
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
    const ref::KdaOutputs fwd = ref::kda_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::KdaGrads grads = ref::kda_bwd(r, cot.at("d_o"), cot.at("dht"));
        out["dq"] = grads.dq;
        out["dk"] = grads.dk;
        out["dv"] = grads.dv;
        out["dg"] = grads.dg;
        out["dbeta"] = grads.dbeta;
        if (grads.dA_log.defined()) out["dA_log"] = grads.dA_log;
        if (grads.ddt_bias.defined()) out["ddt_bias"] = grads.ddt_bias;
        if (grads.dh0.defined()) out["dh0"] = grads.dh0;
    }
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::KdaArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.g = in.at("g");
    a.beta = in.at("beta");
    a.A_log = get_or_undefined(in, "A_log");
    a.dt_bias = get_or_undefined(in, "dt_bias");
    a.h0 = get_or_undefined(in, "h0");
    if (!c.cu_seqlens.empty())
        a.cu_seqlens = at::tensor(at::ArrayRef<int64_t>(c.cu_seqlens), at::kLong);
    a.layout = c.layout;
    a.scale = scale_of(c);
    a.use_qk_l2norm_in_kernel = flag(c, kL2Norm);
    a.use_gate_in_kernel = flag(c, kGateInKernel);
    a.lower_bound = lower_bound(c);
    a.use_beta_sigmoid_in_kernel = flag(c, kBetaSigmoid);
    a.allow_neg_eigval = flag(c, kNegEigval);
    a.state_dtype = to_scalar_type(c.state_dtype);
    a.output_dtype = to_scalar_type(c.output_dtype);
    a.chunk_size = c.chunk_size;

    const bool chunk = variant == "chunk";
    LAV_ASSERT(chunk || variant == "recurrent", "unknown kda variant ", variant);
    KernelResult result;
    result.contract = kernels::kda_contract(variant, backward, a);
    if (!backward) {
        const kernels::KdaFwd f =
            chunk ? kernels::kda_chunk_fwd_cpu(a) : kernels::kda_recurrent_fwd_cpu(a);
        result.results = {{"o", to_head_last(f.o, c.layout)}, {"ht", f.ht}};
        return result;
    }
    const at::Tensor d_o = cot.at("d_o");
    const at::Tensor dht = cot.at("dht");
    const kernels::KdaGrads g = chunk ? kernels::kda_chunk_bwd_cpu(a, d_o, dht)
                                      : kernels::kda_recurrent_bwd_cpu(a, d_o, dht);
    result.results = {{"dq", to_head_last(g.dq, c.layout)},
                      {"dk", to_head_last(g.dk, c.layout)},
                      {"dv", to_head_last(g.dv, c.layout)},
                      {"dg", to_head_last(g.dg, c.layout)},
                      {"dbeta", to_head_last(g.dbeta, c.layout)}};
    if (g.dA_log.defined()) result.results["dA_log"] = g.dA_log;
    if (g.ddt_bias.defined()) result.results["ddt_bias"] = g.ddt_bias;
    if (g.dh0.defined()) result.results["dh0"] = g.dh0;
    return result;
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
    return f;
}

}  // namespace lav::harness
