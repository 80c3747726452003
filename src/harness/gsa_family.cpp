// src/harness/gsa_family.cpp — gsa's tensors, slot option, reference and CPU backend behind Family.
#include <ATen/ATen.h>

#include "core/varlen.h"
#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/gsa/gsa.h"
#include "reference/gsa.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

// M, the number of memory slots: FLA's GSA tests use 32, 64 and 128; 64 is the layer default
constexpr const char* kSlots = "slots";

int64_t slots_of(const Case& c) { return int_option(c, kSlots); }

std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    const int64_t M = slots_of(c);
    std::vector<TensorSpec> specs = qkv_specs(c, c.H);
    specs.push_back({"s", {c.B, c.T, c.H, M}, c.input_dtype, true, Generator{}});
    specs.push_back({"g", {c.B, c.T, c.H, M}, c.gate_dtype, true, Generator{"logsigmoid"}});
    if (c.initial_state) {
        specs.push_back({"hk0", {N, c.H, c.K, M}, c.state_dtype, false, Generator{}});
        specs.push_back({"hv0", {N, c.H, M, c.V}, c.state_dtype, false, Generator{}});
    }
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    const int64_t M = slots_of(c);
    return {
        {"d_o", {c.B, c.T, c.H, c.V}, c.output_dtype, true, Generator{}},
        {"dhkt", {N, c.H, c.K, M}, c.state_dtype, false, Generator{}},
        {"dhvt", {N, c.H, M, c.V}, c.state_dtype, false, Generator{}},
    };
}

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward)
        return {{"o", TensorKind::output, 1},
                {"hkt", TensorKind::state, -1},
                {"hvt", TensorKind::state, -1}};
    std::vector<MeasuredSpec> out = qkv_grads_measured();
    out.push_back({"ds", TensorKind::gradient, 1});
    out.push_back({"dg", TensorKind::gate_grad, 1});
    if (c.initial_state) {
        out.push_back({"dhk0", TensorKind::gradient, -1});
        out.push_back({"dhv0", TensorKind::gradient, -1});
    }
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    return issues;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    ref::GsaInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.s = in.at("s");
    r.g = in.at("g");
    r.hk0 = get_or_undefined(in, "hk0");
    r.hv0 = get_or_undefined(in, "hv0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    const ref::GsaOutputs fwd = ref::gsa_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"hkt", fwd.hkt}, {"hvt", fwd.hvt}};
    if (backward) {
        const ref::GsaGrads g = ref::gsa_bwd(r, cot.at("d_o"), cot.at("dhkt"), cot.at("dhvt"));
        add_defined(out, {{"dq", g.dq},
                          {"dk", g.dk},
                          {"dv", g.dv},
                          {"ds", g.ds},
                          {"dg", g.dg},
                          {"dhk0", g.dhk0},
                          {"dhv0", g.dhv0}});
    }
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::GsaArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.s = in.at("s");
    a.g = in.at("g");
    a.hk0 = get_or_undefined(in, "hk0");
    a.hv0 = get_or_undefined(in, "hv0");
    a.scale = scale_of(c);
    set_common_args(a, c);

    const bool chunk = is_chunk("gsa", variant);
    KernelResult result;
    result.contract = kernels::gsa_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::GsaFwd f =
            chunk ? kernels::gsa_chunk_fwd_cpu(a) : kernels::gsa_recurrent_fwd_cpu(a);
        raw = {{"o", f.o}, {"hkt", f.hkt}, {"hvt", f.hvt}};
    } else {
        const at::Tensor d_o = cot.at("d_o");
        const at::Tensor dhkt = cot.at("dhkt");
        const at::Tensor dhvt = cot.at("dhvt");
        const kernels::GsaGrads g = chunk ? kernels::gsa_chunk_bwd_cpu(a, d_o, dhkt, dhvt)
                                          : kernels::gsa_recurrent_bwd_cpu(a, d_o, dhkt, dhvt);
        raw = {{"dq", g.dq}, {"dk", g.dk},     {"dv", g.dv},    {"ds", g.ds},
               {"dg", g.dg}, {"dhk0", g.dhk0}, {"dhv0", g.dhv0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

}  // namespace

Family gsa_family() {
    Family f;
    f.info.name = "gsa";
    f.info.summary =
        "Gated Slot Attention: two gated passes over M memory slots with a softmax between";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "s", "g", "hk0", "hv0", "d_o", "dhkt", "dhvt"};
    f.info.measured = {"o", "hkt", "hvt", "dq", "dk", "dv", "ds", "dg", "dhk0", "dhv0"};
    f.info.options = {{kSlots, {"64", "16", "32", "128", "256"}}};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
    f.reference = reference;
    f.run_cpu = run_cpu;
    return f;
}

}  // namespace lav::harness
