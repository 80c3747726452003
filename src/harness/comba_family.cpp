// src/harness/comba_family.cpp — Comba's tensors, reference and CPU backend.
#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/comba/comba.h"
#include "reference/comba.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

bool l2norm_of(const Case& c) { return flag(c, "use_qk_l2norm_in_kernel"); }

std::vector<TensorSpec> inputs(const Case& c) {
    // randn q, k, p as FLA's comba tests draw them (stable once the kernel normalises them),
    // the log decay as logsigmoid, β as U[0, 1)
    std::vector<TensorSpec> specs = qkv_specs(c, c.H);
    specs.push_back({"p", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}});
    specs.push_back({"g", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"logsigmoid"}});
    specs.push_back({"beta", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"rand"}});
    if (c.initial_state) specs.push_back(kv_state_spec(c, "h0", c.H));
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) { return output_state_cotangents(c, c.H); }

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward) return output_state_measured();
    std::vector<MeasuredSpec> out = qkv_grads_measured();
    out.push_back({"dp", TensorKind::gradient, 1});
    out.push_back({"dg", TensorKind::gate_grad, 1});
    out.push_back({"dbeta", TensorKind::gate_grad, 1});
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    check_one_value_head(issues, c);
    // without the in-kernel norm the keys are used as drawn, and the step e^g I − β k pᵀ
    // grows the state once |k||p| is well above 1 (randn: |k|² ≈ scale²·K)
    if (!l2norm_of(c)) {
        for (const char* name : {"k", "p"}) {
            const Generator gen = generator_of(c, name);
            const double norm2 = expected_norm2(gen, c.K);
            if (norm2 > 2.0)
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

ref::CombaInputs reference_inputs(const Case& c, const TensorMap& in) {
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
    return r;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    const ref::CombaInputs r = reference_inputs(c, in);
    const ref::CombaOutputs fwd = ref::comba_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::CombaGrads g = ref::comba_bwd(r, cot.at("d_o"), cot.at("dht"));
        add_defined(out, {{"dq", g.dq},
                          {"dk", g.dk},
                          {"dv", g.dv},
                          {"dp", g.dp},
                          {"dg", g.dg},
                          {"dbeta", g.dbeta},
                          {"dh0", g.dh0}});
    }
    return out;
}

kernels::CombaArgs kernel_args(const Case& c, const TensorMap& in) {
    kernels::CombaArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.p = in.at("p");
    a.g = in.at("g");
    a.beta = in.at("beta");
    a.h0 = get_or_undefined(in, "h0");
    a.scale = scale_of(c);
    a.use_qk_l2norm_in_kernel = l2norm_of(c);
    set_common_args(a, c);
    return a;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    const kernels::CombaArgs a = kernel_args(c, in);
    const bool chunk = is_chunk("comba", variant);
    KernelResult result;
    result.contract = kernels::comba_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::CombaFwd f =
            chunk ? kernels::comba_chunk_fwd_cpu(a) : kernels::comba_recurrent_fwd_cpu(a);
        raw = {{"o", f.o}, {"ht", f.ht}};
    } else {
        const at::Tensor d_o = cot.at("d_o");
        const at::Tensor dht = cot.at("dht");
        const kernels::CombaGrads g = chunk ? kernels::comba_chunk_bwd_cpu(a, d_o, dht)
                                            : kernels::comba_recurrent_bwd_cpu(a, d_o, dht);
        raw = {{"dq", g.dq}, {"dk", g.dk},       {"dv", g.dv},  {"dp", g.dp},
               {"dg", g.dg}, {"dbeta", g.dbeta}, {"dh0", g.dh0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

ChunkStates chunk_states(const Case& c, const TensorMap& in, const TensorMap& reference_in) {
    return stored_chunk_states(c, kernel_args(c, in), kernels::comba_chunk_fwd_cpu,
                               reference_inputs(c, reference_in), ref::comba_fwd);
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
    f.chunk_states = chunk_states;
    return f;
}

}  // namespace lav::harness
