// src/harness/rwkv6_family.cpp — rwkv6's tensors, reference and CPU backend behind Family.
#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/layout.h"
#include "core/varlen.h"
#include "harness/registry.h"
#include "kernels/rwkv6/rwkv6.h"
#include "reference/rwkv6.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

double scale_of(const Case& c) {
    return c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.K));
}

std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    std::vector<TensorSpec> specs = {
        {"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"k", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"v", {c.B, c.T, c.H, c.V}, c.input_dtype, true, Generator{}},
        {"w", {c.B, c.T, c.H, c.K}, c.gate_dtype, true, Generator{"logsigmoid"}},
        // the bonus is a parameter: per head and key dimension, no time axis
        {"u", {c.H, c.K}, c.gate_dtype, false, Generator{}},
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
                                     {"dw", TensorKind::gate_grad, 1},
                                     {"du", TensorKind::gate_grad, -1}};
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    if (c.HV == 0 || c.HV == c.H) return {};
    return {{"shape.HV",
             "rwkv6 has one value head per query head: HV must equal H = " + std::to_string(c.H) +
                 ", got " + std::to_string(c.HV),
             "leave shape.HV out"}};
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    ref::Rwkv6Inputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.w = in.at("w");
    r.u = in.at("u");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    const ref::Rwkv6Outputs fwd = ref::rwkv6_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::Rwkv6Grads g = ref::rwkv6_bwd(r, cot.at("d_o"), cot.at("dht"));
        out["dq"] = g.dq;
        out["dk"] = g.dk;
        out["dv"] = g.dv;
        out["dw"] = g.dw;
        out["du"] = g.du;
        if (g.dh0.defined()) out["dh0"] = g.dh0;
    }
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::Rwkv6Args a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.w = in.at("w");
    a.u = in.at("u");
    a.h0 = get_or_undefined(in, "h0");
    if (!c.cu_seqlens.empty())
        a.cu_seqlens = at::tensor(at::ArrayRef<int64_t>(c.cu_seqlens), at::kLong);
    a.layout = c.layout;
    a.scale = scale_of(c);
    a.state_dtype = to_scalar_type(c.state_dtype);
    a.output_dtype = to_scalar_type(c.output_dtype);
    a.chunk_size = c.chunk_size;

    const bool chunk = variant == "chunk";
    LAV_ASSERT(chunk || variant == "recurrent", "unknown rwkv6 variant ", variant);
    KernelResult result;
    result.contract = kernels::rwkv6_contract(variant, backward, a);
    if (!backward) {
        const kernels::Rwkv6Fwd f =
            chunk ? kernels::rwkv6_chunk_fwd_cpu(a) : kernels::rwkv6_recurrent_fwd_cpu(a);
        result.results = {{"o", to_head_last(f.o, c.layout)}, {"ht", f.ht}};
        return result;
    }
    const at::Tensor d_o = cot.at("d_o");
    const at::Tensor dht = cot.at("dht");
    const kernels::Rwkv6Grads g = chunk ? kernels::rwkv6_chunk_bwd_cpu(a, d_o, dht)
                                        : kernels::rwkv6_recurrent_bwd_cpu(a, d_o, dht);
    result.results = {{"dq", to_head_last(g.dq, c.layout)},
                      {"dk", to_head_last(g.dk, c.layout)},
                      {"dv", to_head_last(g.dv, c.layout)},
                      {"dw", to_head_last(g.dw, c.layout)},
                      {"du", g.du}};
    if (g.dh0.defined()) result.results["dh0"] = g.dh0;
    return result;
}

}  // namespace

Family rwkv6_family() {
    Family f;
    f.info.name = "rwkv6";
    f.info.summary =
        "RWKV-6: per-key-dimension decay w, bonus u on the current token; o reads the state "
        "before the step";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "w", "u", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dq", "dk", "dv", "dw", "du", "dh0"};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
    f.reference = reference;
    f.run_cpu = run_cpu;
    return f;
}

}  // namespace lav::harness
