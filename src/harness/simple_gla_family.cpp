// src/harness/simple_gla_family.cpp — simple_gla's tensors, reference and CPU backend behind
// Family.
#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "core/layout.h"
#include "core/varlen.h"
#include "harness/registry.h"
#ifdef LAV_HAS_CUDA
#include "kernels/common/gated_linear_cuda.h"
#endif
#include "kernels/simple_gla/simple_gla.h"
#include "reference/simple_gla.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

const std::string& gate_of(const Case& c) { return c.options.at("gate"); }

double scale_of(const Case& c) {
    return c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.K));
}

std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    std::vector<TensorSpec> specs = {
        {"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"k", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"v", {c.B, c.T, c.H, c.V}, c.input_dtype, true, Generator{}},
    };
    if (gate_of(c) == "g")
        specs.push_back({"g", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"logsigmoid"}});
    if (gate_of(c) == "g_gamma")
        specs.push_back({"g_gamma", {c.H}, c.gate_dtype, false, Generator{"retention"}});
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
                                     {"dv", TensorKind::gradient, 1}};
    if (gate_of(c) == "g") out.push_back({"dg", TensorKind::gate_grad, 1});
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

ref::SimpleGlaInputs reference_inputs(const Case& c, const TensorMap& in) {
    ref::SimpleGlaInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.g = get_or_undefined(in, "g");
    r.g_gamma = get_or_undefined(in, "g_gamma");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = scale_of(c);
    return r;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    const ref::SimpleGlaInputs r = reference_inputs(c, in);
    const ref::SimpleGlaOutputs fwd = ref::simple_gla_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::SimpleGlaGrads grads = ref::simple_gla_bwd(r, cot.at("d_o"), cot.at("dht"));
        out["dq"] = grads.dq;
        out["dk"] = grads.dk;
        out["dv"] = grads.dv;
        if (grads.dg.defined()) out["dg"] = grads.dg;
        if (grads.dh0.defined()) out["dh0"] = grads.dh0;
    }
    return out;
}

// the runner hands CUDA tensors to the variants in cuda_variants: lav's CUDA kernels run them
kernels::SimpleGlaFwd recurrent_fwd(const kernels::SimpleGlaArgs& a) {
#ifdef LAV_HAS_CUDA
    if (a.q.is_cuda()) return kernels::simple_gla_recurrent_fwd_cuda(a);
#endif
    return kernels::simple_gla_recurrent_fwd_cpu(a);
}

kernels::SimpleGlaGrads recurrent_bwd(const kernels::SimpleGlaArgs& a, const at::Tensor& d_o,
                                      const at::Tensor& dht) {
#ifdef LAV_HAS_CUDA
    if (a.q.is_cuda()) return kernels::simple_gla_recurrent_bwd_cuda(a, d_o, dht);
#endif
    return kernels::simple_gla_recurrent_bwd_cpu(a, d_o, dht);
}

kernels::SimpleGlaFwd chunk_fwd(const kernels::SimpleGlaArgs& a) {
#ifdef LAV_HAS_CUDA
    if (a.q.is_cuda()) return kernels::simple_gla_chunk_fwd_cuda(a);
#endif
    return kernels::simple_gla_chunk_fwd_cpu(a);
}

kernels::SimpleGlaGrads chunk_bwd(const kernels::SimpleGlaArgs& a, const at::Tensor& d_o,
                                  const at::Tensor& dht) {
#ifdef LAV_HAS_CUDA
    if (a.q.is_cuda()) return kernels::simple_gla_chunk_bwd_cuda(a, d_o, dht);
#endif
    return kernels::simple_gla_chunk_bwd_cpu(a, d_o, dht);
}

kernels::SimpleGlaArgs kernel_args(const Case& c, const TensorMap& in) {
    kernels::SimpleGlaArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.g = get_or_undefined(in, "g");
    a.g_gamma = get_or_undefined(in, "g_gamma");
    a.h0 = get_or_undefined(in, "h0");
    if (!c.cu_seqlens.empty())
        a.cu_seqlens = at::tensor(at::ArrayRef<int64_t>(c.cu_seqlens), at::kLong);
    a.layout = c.layout;
    a.scale = scale_of(c);
    a.state_dtype = to_scalar_type(c.state_dtype);
    a.output_dtype = to_scalar_type(c.output_dtype);
    a.chunk_size = c.chunk_size;
    return a;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    const kernels::SimpleGlaArgs a = kernel_args(c, in);
    const bool chunk = variant == "chunk";
    LAV_ASSERT(chunk || variant == "recurrent", "unknown simple_gla variant ", variant);
    KernelResult result;
    result.contract = kernels::simple_gla_contract(variant, backward, a);
    if (!backward) {
        const kernels::SimpleGlaFwd f = chunk ? chunk_fwd(a) : recurrent_fwd(a);
        result.results = {{"o", to_head_last(f.o, c.layout)}, {"ht", f.ht}};
        return result;
    }
    const at::Tensor d_o = cot.at("d_o");
    const at::Tensor dht = cot.at("dht");
    const kernels::SimpleGlaGrads g = chunk ? chunk_bwd(a, d_o, dht) : recurrent_bwd(a, d_o, dht);
    result.results = {{"dq", to_head_last(g.dq, c.layout)},
                      {"dk", to_head_last(g.dk, c.layout)},
                      {"dv", to_head_last(g.dv, c.layout)}};
    if (g.dg.defined()) result.results["dg"] = to_head_last(g.dg, c.layout);
    if (g.dh0.defined()) result.results["dh0"] = g.dh0;
    return result;
}

ChunkStates chunk_states(const Case& c, const TensorMap& in, const TensorMap& reference_in) {
    kernels::SimpleGlaArgs a = kernel_args(c, in);
    a.keep_chunk_states = true;
    ref::SimpleGlaInputs r = reference_inputs(c, reference_in);
    r.state_stride = c.chunk_size;
    return {kernels::simple_gla_chunk_fwd_cpu(a).h, ref::simple_gla_fwd(r).states};
}

}  // namespace

Family simple_gla_family() {
    Family f;
    f.info.name = "simple_gla";
    f.info.summary =
        "scalar-decay linear attention: linear attention, retention, lightning attention, "
        "Mamba-2 SSD";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "g", "g_gamma", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dh0"};
    f.info.options = {{"gate", {"g", "g_gamma", "none"}}};
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
