// src/harness/gla_family.cpp — gla's tensors, reference and CPU backend behind Family.
#include <ATen/ATen.h>

#include "harness/family_support.h"
#include "harness/registry.h"
#ifdef LAV_HAS_CUDA
#include "kernels/common/gated_linear_cuda.h"
#endif
#include "kernels/gla/gla.h"
#include "reference/gla.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

std::vector<TensorSpec> inputs(const Case& c) {
    std::vector<TensorSpec> specs = qkv_specs(c, c.H);
    specs.push_back({"g", {c.B, c.T, c.H, c.K}, c.gate_dtype, true, Generator{"logsigmoid"}});
    if (c.initial_state) specs.push_back(kv_state_spec(c, "h0", c.H));
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) { return output_state_cotangents(c, c.H); }

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    if (!backward) return output_state_measured();
    std::vector<MeasuredSpec> out = qkv_grads_measured({"dg"});
    if (c.initial_state) out.push_back({"dh0", metrics::TensorKind::gradient, -1});
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    return issues;
}

ref::GlaInputs reference_inputs(const Case& c, const TensorMap& in) {
    ref::GlaInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.g = in.at("g");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    return r;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    const ref::GlaInputs r = reference_inputs(c, in);
    const ref::GlaOutputs fwd = ref::gla_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::GlaGrads g = ref::gla_bwd(r, cot.at("d_o"), cot.at("dht"));
        add_defined(out, {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}, {"dg", g.dg}, {"dh0", g.dh0}});
    }
    return out;
}

// the runner hands CUDA tensors to the variants in cuda_variants: lav's CUDA kernels run them
kernels::GlaFwd fwd(bool chunk, const kernels::GlaArgs& a) {
#ifdef LAV_HAS_CUDA
    if (a.q.is_cuda())
        return chunk ? kernels::gla_chunk_fwd_cuda(a) : kernels::gla_recurrent_fwd_cuda(a);
#endif
    return chunk ? kernels::gla_chunk_fwd_cpu(a) : kernels::gla_recurrent_fwd_cpu(a);
}

kernels::GlaGrads bwd(bool chunk, const kernels::GlaArgs& a, const at::Tensor& d_o,
                      const at::Tensor& dht) {
#ifdef LAV_HAS_CUDA
    if (a.q.is_cuda())
        return chunk ? kernels::gla_chunk_bwd_cuda(a, d_o, dht)
                     : kernels::gla_recurrent_bwd_cuda(a, d_o, dht);
#endif
    return chunk ? kernels::gla_chunk_bwd_cpu(a, d_o, dht)
                 : kernels::gla_recurrent_bwd_cpu(a, d_o, dht);
}

kernels::GlaArgs kernel_args(const Case& c, const TensorMap& in) {
    kernels::GlaArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.g = in.at("g");
    a.h0 = get_or_undefined(in, "h0");
    a.scale = scale_of(c);
    set_common_args(a, c);
    return a;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    const kernels::GlaArgs a = kernel_args(c, in);
    const bool chunk = is_chunk("gla", variant);
    KernelResult result;
    result.contract = kernels::gla_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::GlaFwd f = fwd(chunk, a);
        raw = {{"o", f.o}, {"ht", f.ht}};
    } else {
        const kernels::GlaGrads g = bwd(chunk, a, cot.at("d_o"), cot.at("dht"));
        raw = {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}, {"dg", g.dg}, {"dh0", g.dh0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

ChunkStates chunk_states(const Case& c, const TensorMap& in, const TensorMap& reference_in) {
    return stored_chunk_states(c, kernel_args(c, in), kernels::gla_chunk_fwd_cpu,
                               reference_inputs(c, reference_in), ref::gla_fwd);
}

}  // namespace

Family gla_family() {
    Family f;
    f.info.name = "gla";
    f.info.summary = "gated linear attention with a per-key-dimension decay: GLA, HGRN2";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "g", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dh0"};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
    f.reference = reference;
    f.run_cpu = run_cpu;
    f.chunk_states = chunk_states;
#ifdef LAV_HAS_CUDA
    f.cuda_variants = {"chunk", "recurrent"};
    f.cuda_fits = [](const Case& c) { return c.K <= cuda::kMaxGatedLinearKeys; };
#endif
    return f;
}

}  // namespace lav::harness
