// src/harness/rwkv6_family.cpp — rwkv6's tensors, reference and CPU backend behind Family.
#include <ATen/ATen.h>

#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/rwkv6/rwkv6.h"
#include "reference/rwkv6.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

std::vector<TensorSpec> inputs(const Case& c) {
    std::vector<TensorSpec> specs = qkv_specs(c, c.H);
    specs.push_back({"w", {c.B, c.T, c.H, c.K}, c.gate_dtype, true, Generator{"logsigmoid"}});
    // the bonus is a parameter: per head and key dimension, no time axis
    specs.push_back({"u", {c.H, c.K}, c.gate_dtype, false, Generator{}});
    if (c.initial_state) specs.push_back(kv_state_spec(c, "h0", c.H));
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) { return output_state_cotangents(c, c.H); }

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward) return output_state_measured();
    std::vector<MeasuredSpec> out = qkv_grads_measured({"dw"});
    out.push_back({"du", TensorKind::gate_grad, -1});
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    return issues;
}

ref::Rwkv6Inputs reference_inputs(const Case& c, const TensorMap& in) {
    ref::Rwkv6Inputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.w = in.at("w");
    r.u = in.at("u");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    return r;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    const ref::Rwkv6Inputs r = reference_inputs(c, in);
    const ref::Rwkv6Outputs fwd = ref::rwkv6_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::Rwkv6Grads g = ref::rwkv6_bwd(r, cot.at("d_o"), cot.at("dht"));
        add_defined(
            out,
            {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}, {"dw", g.dw}, {"du", g.du}, {"dh0", g.dh0}});
    }
    return out;
}

kernels::Rwkv6Args kernel_args(const Case& c, const TensorMap& in) {
    kernels::Rwkv6Args a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.w = in.at("w");
    a.u = in.at("u");
    a.h0 = get_or_undefined(in, "h0");
    a.scale = scale_of(c);
    set_common_args(a, c);
    return a;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    const kernels::Rwkv6Args a = kernel_args(c, in);
    const bool chunk = is_chunk("rwkv6", variant);
    KernelResult result;
    result.contract = kernels::rwkv6_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::Rwkv6Fwd f =
            chunk ? kernels::rwkv6_chunk_fwd_cpu(a) : kernels::rwkv6_recurrent_fwd_cpu(a);
        raw = {{"o", f.o}, {"ht", f.ht}};
    } else {
        const at::Tensor d_o = cot.at("d_o");
        const at::Tensor dht = cot.at("dht");
        const kernels::Rwkv6Grads g = chunk ? kernels::rwkv6_chunk_bwd_cpu(a, d_o, dht)
                                            : kernels::rwkv6_recurrent_bwd_cpu(a, d_o, dht);
        raw = {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv},
               {"dw", g.dw}, {"du", g.du}, {"dh0", g.dh0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

ChunkStates chunk_states(const Case& c, const TensorMap& in, const TensorMap& reference_in) {
    return stored_chunk_states(c, kernel_args(c, in), kernels::rwkv6_chunk_fwd_cpu,
                               reference_inputs(c, reference_in), ref::rwkv6_fwd);
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
    f.chunk_states = chunk_states;
    return f;
}

}  // namespace lav::harness
