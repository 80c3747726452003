// src/harness/hgrn_family.cpp — hgrn's tensors, reference and CPU backend behind Family.
//
// HGRN's width D is expressed as H heads of K channels, so a scenario's [shape] gives H and K,
// and V (which hgrn has no use for) must equal K.
#include <ATen/ATen.h>

#include <string>

#include "core/varlen.h"
#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/hgrn/hgrn.h"
#include "reference/hgrn.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    std::vector<TensorSpec> specs = {
        {"x", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"g", {c.B, c.T, c.H, c.K}, c.gate_dtype, true, Generator{"logsigmoid"}},
    };
    if (c.initial_state) specs.push_back({"h0", {N, c.H, c.K}, c.state_dtype, false, Generator{}});
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    return {
        {"d_o", {c.B, c.T, c.H, c.K}, c.output_dtype, true, Generator{}},
        {"dht", {N, c.H, c.K}, c.state_dtype, false, Generator{}},
    };
}

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward) return output_state_measured();
    std::vector<MeasuredSpec> out = {{"dx", TensorKind::gradient, 1},
                                     {"dg", TensorKind::gate_grad, 1}};
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    if (c.V != c.K)
        issues.push_back({"shape.V",
                          "hgrn has one state per channel, so V must equal K = " +
                              std::to_string(c.K) + ", got " + std::to_string(c.V),
                          "set V = K; HGRN's width D is H·K"});
    check_one_value_head(issues, c);
    if (c.scale) issues.push_back({"scale", "hgrn has no scale: o_t = h_t", "leave 'scale' out"});
    return issues;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    ref::HgrnInputs r;
    r.x = in.at("x");
    r.g = in.at("g");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    const ref::HgrnOutputs fwd = ref::hgrn_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::HgrnGrads g = ref::hgrn_bwd(r, cot.at("d_o"), cot.at("dht"));
        add_defined(out, {{"dx", g.dx}, {"dg", g.dg}, {"dh0", g.dh0}});
    }
    return out;
}

// the runner hands CUDA tensors to the variants in cuda_variants: lav's CUDA kernels run them
kernels::HgrnFwd fwd(bool chunk, const kernels::HgrnArgs& a) {
#ifdef LAV_HAS_CUDA
    if (a.x.is_cuda())
        return chunk ? kernels::hgrn_chunk_fwd_cuda(a) : kernels::hgrn_recurrent_fwd_cuda(a);
#endif
    return chunk ? kernels::hgrn_chunk_fwd_cpu(a) : kernels::hgrn_recurrent_fwd_cpu(a);
}

kernels::HgrnGrads bwd(bool chunk, const kernels::HgrnArgs& a, const at::Tensor& d_o,
                       const at::Tensor& dht) {
#ifdef LAV_HAS_CUDA
    if (a.x.is_cuda())
        return chunk ? kernels::hgrn_chunk_bwd_cuda(a, d_o, dht)
                     : kernels::hgrn_recurrent_bwd_cuda(a, d_o, dht);
#endif
    return chunk ? kernels::hgrn_chunk_bwd_cpu(a, d_o, dht)
                 : kernels::hgrn_recurrent_bwd_cpu(a, d_o, dht);
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::HgrnArgs a;
    a.x = in.at("x");
    a.g = in.at("g");
    a.h0 = get_or_undefined(in, "h0");
    set_common_args(a, c);

    const bool chunk = is_chunk("hgrn", variant);
    KernelResult result;
    result.contract = kernels::hgrn_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::HgrnFwd f = fwd(chunk, a);
        raw = {{"o", f.o}, {"ht", f.ht}};
    } else {
        const kernels::HgrnGrads g = bwd(chunk, a, cot.at("d_o"), cot.at("dht"));
        raw = {{"dx", g.dx}, {"dg", g.dg}, {"dh0", g.dh0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

}  // namespace

Family hgrn_family() {
    Family f;
    f.info.name = "hgrn";
    f.info.summary = "HGRN's elementwise gated recurrence h = exp(g)*h + x, width D = H*K (V = K)";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"x", "g", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dx", "dg", "dh0"};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
    f.reference = reference;
    f.run_cpu = run_cpu;
#ifdef LAV_HAS_CUDA
    f.cuda_variants = {"chunk", "recurrent"};
#endif
    return f;
}

}  // namespace lav::harness
