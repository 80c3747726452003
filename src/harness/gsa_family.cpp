// src/harness/gsa_family.cpp — gsa's tensors, slot option, reference and CPU backend behind Family.
#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/layout.h"
#include "core/varlen.h"
#include "harness/registry.h"
#include "kernels/gsa/gsa.h"
#include "reference/gsa.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

// M, the number of memory slots: FLA's GSA tests use 32, 64 and 128; 64 is the layer default
constexpr const char* kSlots = "slots";

int64_t slots_of(const Case& c) { return std::stoll(c.options.at(kSlots)); }

double scale_of(const Case& c) {
    return c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.K));
}

std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    const int64_t M = slots_of(c);
    std::vector<TensorSpec> specs = {
        {"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"k", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"v", {c.B, c.T, c.H, c.V}, c.input_dtype, true, Generator{}},
        {"s", {c.B, c.T, c.H, M}, c.input_dtype, true, Generator{}},
        {"g", {c.B, c.T, c.H, M}, c.gate_dtype, true, Generator{"logsigmoid"}},
    };
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
    std::vector<MeasuredSpec> out = {{"dq", TensorKind::gradient, 1},
                                     {"dk", TensorKind::gradient, 1},
                                     {"dv", TensorKind::gradient, 1},
                                     {"ds", TensorKind::gradient, 1},
                                     {"dg", TensorKind::gate_grad, 1}};
    if (c.initial_state) {
        out.push_back({"dhk0", TensorKind::gradient, -1});
        out.push_back({"dhv0", TensorKind::gradient, -1});
    }
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    if (c.HV == 0 || c.HV == c.H) return {};
    return {{"shape.HV",
             "gsa has one value head per query head: HV must equal H = " + std::to_string(c.H) +
                 ", got " + std::to_string(c.HV),
             "leave shape.HV out"}};
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
        const ref::GsaGrads grads = ref::gsa_bwd(r, cot.at("d_o"), cot.at("dhkt"), cot.at("dhvt"));
        out["dq"] = grads.dq;
        out["dk"] = grads.dk;
        out["dv"] = grads.dv;
        out["ds"] = grads.ds;
        out["dg"] = grads.dg;
        if (grads.dhk0.defined()) out["dhk0"] = grads.dhk0;
        if (grads.dhv0.defined()) out["dhv0"] = grads.dhv0;
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
    if (!c.cu_seqlens.empty())
        a.cu_seqlens = at::tensor(at::ArrayRef<int64_t>(c.cu_seqlens), at::kLong);
    a.layout = c.layout;
    a.scale = scale_of(c);
    a.state_dtype = to_scalar_type(c.state_dtype);
    a.output_dtype = to_scalar_type(c.output_dtype);
    a.chunk_size = c.chunk_size;

    const bool chunk = variant == "chunk";
    LAV_ASSERT(chunk || variant == "recurrent", "unknown gsa variant ", variant);
    KernelResult result;
    result.contract = kernels::gsa_contract(variant, backward, a);
    if (!backward) {
        const kernels::GsaFwd f =
            chunk ? kernels::gsa_chunk_fwd_cpu(a) : kernels::gsa_recurrent_fwd_cpu(a);
        result.results = {{"o", to_head_last(f.o, c.layout)}, {"hkt", f.hkt}, {"hvt", f.hvt}};
        return result;
    }
    const at::Tensor d_o = cot.at("d_o");
    const at::Tensor dhkt = cot.at("dhkt");
    const at::Tensor dhvt = cot.at("dhvt");
    const kernels::GsaGrads g = chunk ? kernels::gsa_chunk_bwd_cpu(a, d_o, dhkt, dhvt)
                                      : kernels::gsa_recurrent_bwd_cpu(a, d_o, dhkt, dhvt);
    result.results = {{"dq", to_head_last(g.dq, c.layout)},
                      {"dk", to_head_last(g.dk, c.layout)},
                      {"dv", to_head_last(g.dv, c.layout)},
                      {"ds", to_head_last(g.ds, c.layout)},
                      {"dg", to_head_last(g.dg, c.layout)}};
    if (g.dhk0.defined()) result.results["dhk0"] = g.dhk0;
    if (g.dhv0.defined()) result.results["dhv0"] = g.dhv0;
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
