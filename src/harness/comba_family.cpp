// src/harness/comba_family.cpp — Comba's tensors, reference and CPU backend.
#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "core/layout.h"
#include "core/varlen.h"
#include "harness/registry.h"
#include "kernels/comba/comba.h"
#include "reference/comba.h"

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
    // randn q, k, p as FLA's comba tests draw them (stable once the kernel normalises them),
    // the log decay as logsigmoid, β as U[0, 1)
    std::vector<TensorSpec> specs = {
        {"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"k", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"v", {c.B, c.T, c.H, c.V}, c.input_dtype, true, Generator{}},
        {"p", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"g", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"logsigmoid"}},
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
    std::vector<MeasuredSpec> out = {
        {"dq", TensorKind::gradient, 1},  {"dk", TensorKind::gradient, 1},
        {"dv", TensorKind::gradient, 1},  {"dp", TensorKind::gradient, 1},
        {"dg", TensorKind::gate_grad, 1}, {"dbeta", TensorKind::gate_grad, 1}};
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    if (c.HV > 0 && c.HV != c.H)
        issues.push_back({"shape.HV", "comba has no grouped value heads (HV must equal H)",
                          "leave shape.HV unset"});
    // without the in-kernel norm the keys are used as drawn, and the step e^g I − β k pᵀ
    // grows the state once |k||p| is well above 1 (randn: |k|² ≈ scale²·K)
    if (!l2norm_of(c)) {
        for (const char* name : {"k", "p"}) {
            const auto it = c.generators.find(name);
            const Generator gen = it != c.generators.end() ? it->second : Generator{};
            double norm2 = gen.scale * gen.scale * static_cast<double>(c.K);
            if (gen.dist == "rand") norm2 /= 3.0;
            if (gen.dist != "zeros" && norm2 > 2.0)
                issues.push_back({"options.use_qk_l2norm_in_kernel",
                                  std::string(name) + " drawn as '" + gen.dist +
                                      "' has |x|^2 of about " +
                                      std::to_string(static_cast<int64_t>(std::lround(norm2))) +
                                      " without the in-kernel norm, and the recurrence diverges",
                                  "keep use_qk_l2norm_in_kernel = true, or draw k and p with "
                                  "scale K^-0.5"});
        }
    }
    return issues;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    ref::CombaInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.p = in.at("p");
    r.g = in.at("g");
    r.beta = in.at("beta");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    r.use_qk_l2norm_in_kernel = l2norm_of(c);
    const ref::CombaOutputs fwd = ref::comba_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::CombaGrads g = ref::comba_bwd(r, cot.at("d_o"), cot.at("dht"));
        out["dq"] = g.dq;
        out["dk"] = g.dk;
        out["dv"] = g.dv;
        out["dp"] = g.dp;
        out["dg"] = g.dg;
        out["dbeta"] = g.dbeta;
        if (g.dh0.defined()) out["dh0"] = g.dh0;
    }
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::CombaArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.p = in.at("p");
    a.g = in.at("g");
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
    LAV_ASSERT(chunk || variant == "recurrent", "unknown comba variant ", variant);
    KernelResult result;
    result.contract = kernels::comba_contract(variant, backward, a);
    if (!backward) {
        const kernels::CombaFwd f =
            chunk ? kernels::comba_chunk_fwd_cpu(a) : kernels::comba_recurrent_fwd_cpu(a);
        result.results = {{"o", to_head_last(f.o, c.layout)}, {"ht", f.ht}};
        return result;
    }
    const at::Tensor d_o = cot.at("d_o");
    const at::Tensor dht = cot.at("dht");
    const kernels::CombaGrads g = chunk ? kernels::comba_chunk_bwd_cpu(a, d_o, dht)
                                        : kernels::comba_recurrent_bwd_cpu(a, d_o, dht);
    result.results = {
        {"dq", to_head_last(g.dq, c.layout)}, {"dk", to_head_last(g.dk, c.layout)},
        {"dv", to_head_last(g.dv, c.layout)}, {"dp", to_head_last(g.dp, c.layout)},
        {"dg", to_head_last(g.dg, c.layout)}, {"dbeta", to_head_last(g.dbeta, c.layout)}};
    if (g.dh0.defined()) result.results["dh0"] = g.dh0;
    return result;
}

}  // namespace

Family comba_family() {
    Family f;
    f.info.name = "comba";
    f.info.summary =
        "Comba: a gated delta rule whose correction reads the pre-decay state "
        "through an auxiliary key p";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "p", "g", "beta", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dq", "dk", "dv", "dp", "dg", "dbeta", "dh0"};
    // FLA's default is false, but its tests normalise q, k, p and the default randn keys need it
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
