// src/harness/gated_delta_product_family.cpp — gated DeltaProduct's tensors, reference, CPU
// backend.
#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/layout.h"
#include "core/varlen.h"
#include "harness/registry.h"
#include "kernels/gated_delta_product/gated_delta_product.h"
#include "reference/gated_delta_product.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

int64_t householder_of(const Case& c) { return std::stoll(c.options.at("num_householder")); }
bool gated(const Case& c) { return c.options.at("gate") == "g"; }
bool l2norm_of(const Case& c) { return c.options.at("use_qk_l2norm_in_kernel") == "true"; }

double scale_of(const Case& c) {
    return c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.K));
}

// k, v and β have num_householder rows per token (FLA's interleaved layout); q, g and o one.
std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    const int64_t Tn = c.T * householder_of(c);
    std::vector<TensorSpec> specs = {
        {"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"k", {c.B, Tn, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"v", {c.B, Tn, c.H, c.V}, c.input_dtype, true, Generator{}},
        {"beta", {c.B, Tn, c.H}, c.gate_dtype, true, Generator{"rand"}},
    };
    if (gated(c))
        specs.push_back({"g", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"logsigmoid"}});
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
                                     {"dbeta", TensorKind::gate_grad, 1}};
    if (gated(c)) out.push_back({"dg", TensorKind::gate_grad, 1});
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    if (c.HV > 0 && c.HV != c.H)
        issues.push_back({"shape.HV", "gated_delta_product has no grouped value heads",
                          "leave shape.HV unset (FLA's chunk_gated_delta_product takes one H)"});
    // without the in-kernel norm the keys are used as drawn, and a sub-step's eigenvalue
    // 1 − β‖k‖² leaves (−1, 1) once ‖k‖² > 2 for β < 1 (randn, ones: ‖k‖² ≈ scale²·K; rand: /3)
    if (!l2norm_of(c)) {
        const auto it = c.generators.find("k");
        const Generator gen = it != c.generators.end() ? it->second : Generator{};
        double norm2 = gen.scale * gen.scale * static_cast<double>(c.K);
        if (gen.dist == "rand") norm2 /= 3.0;
        if (gen.dist != "zeros" && norm2 > 2.0)
            issues.push_back({"options.use_qk_l2norm_in_kernel",
                              "keys drawn as '" + gen.dist + "' have |k|^2 of about " +
                                  std::to_string(static_cast<int64_t>(std::lround(norm2))) +
                                  " without the in-kernel norm, and the delta rule diverges for "
                                  "beta |k|^2 > 2",
                              "keep use_qk_l2norm_in_kernel = true, or draw k with scale K^-0.5 "
                              "([inputs] k = { dist = \"randn\", scale = ... })"});
    }
    return issues;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    ref::GatedDeltaProductInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.g = get_or_undefined(in, "g");
    r.beta = in.at("beta");
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.num_householder = householder_of(c);
    r.scale = scale_of(c);
    r.use_qk_l2norm_in_kernel = l2norm_of(c);
    const ref::GatedDeltaProductOutputs fwd = ref::gated_delta_product_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::GatedDeltaProductGrads grads =
            ref::gated_delta_product_bwd(r, cot.at("d_o"), cot.at("dht"));
        out["dq"] = grads.dq;
        out["dk"] = grads.dk;
        out["dv"] = grads.dv;
        out["dbeta"] = grads.dbeta;
        if (grads.dg.defined()) out["dg"] = grads.dg;
        if (grads.dh0.defined()) out["dh0"] = grads.dh0;
    }
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::GatedDeltaProductArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.g = get_or_undefined(in, "g");
    a.beta = in.at("beta");
    a.h0 = get_or_undefined(in, "h0");
    if (!c.cu_seqlens.empty())
        a.cu_seqlens = at::tensor(at::ArrayRef<int64_t>(c.cu_seqlens), at::kLong);
    a.layout = c.layout;
    a.num_householder = householder_of(c);
    a.scale = scale_of(c);
    a.use_qk_l2norm_in_kernel = l2norm_of(c);
    a.state_dtype = to_scalar_type(c.state_dtype);
    a.output_dtype = to_scalar_type(c.output_dtype);
    a.chunk_size = c.chunk_size;

    const bool chunk = variant == "chunk";
    LAV_ASSERT(chunk || variant == "recurrent", "unknown gated_delta_product variant ", variant);
    KernelResult result;
    result.contract = kernels::gated_delta_product_contract(variant, backward, a);
    if (!backward) {
        const kernels::GatedDeltaProductFwd f =
            chunk ? kernels::gated_delta_product_chunk_fwd_cpu(a)
                  : kernels::gated_delta_product_recurrent_fwd_cpu(a);
        result.results = {{"o", to_head_last(f.o, c.layout)}, {"ht", f.ht}};
        return result;
    }
    const at::Tensor d_o = cot.at("d_o");
    const at::Tensor dht = cot.at("dht");
    const kernels::GatedDeltaProductGrads g =
        chunk ? kernels::gated_delta_product_chunk_bwd_cpu(a, d_o, dht)
              : kernels::gated_delta_product_recurrent_bwd_cpu(a, d_o, dht);
    result.results = {{"dq", to_head_last(g.dq, c.layout)},
                      {"dk", to_head_last(g.dk, c.layout)},
                      {"dv", to_head_last(g.dv, c.layout)},
                      {"dbeta", to_head_last(g.dbeta, c.layout)}};
    if (g.dg.defined()) result.results["dg"] = to_head_last(g.dg, c.layout);
    if (g.dh0.defined()) result.results["dh0"] = g.dh0;
    return result;
}

}  // namespace

Family gated_delta_product_family() {
    Family f;
    f.info.name = "gated_delta_product";
    f.info.summary =
        "Gated DeltaProduct: num_householder delta-rule sub-steps per token, one decay per token";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "g", "beta", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    // two sub-steps by default: FLA's default of one is the gated delta rule itself; the norm
    // is on by default as in the gated delta rule family (randn keys need it to stay stable)
    f.info.options = {{"num_householder", {"2", "1", "3"}},
                      {"gate", {"g", "none"}},
                      {"use_qk_l2norm_in_kernel", {"true", "false"}}};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
    f.reference = reference;
    f.run_cpu = run_cpu;
    return f;
}

}  // namespace lav::harness
