// src/harness/gated_delta_product_family.cpp — gated DeltaProduct's tensors, reference, CPU
// backend.
#include <ATen/ATen.h>

#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/gated_delta_product/gated_delta_product.h"
#include "reference/gated_delta_product.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

int64_t householder_of(const Case& c) { return int_option(c, "num_householder"); }
bool gated(const Case& c) { return c.options.at("gate") == "g"; }
bool l2norm_of(const Case& c) { return flag(c, "use_qk_l2norm_in_kernel"); }

// k, v and β have num_householder rows per token (FLA's interleaved layout); q, g and o one.
std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t Tn = c.T * householder_of(c);
    std::vector<TensorSpec> specs = {
        {"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"k", {c.B, Tn, c.H, c.K}, c.input_dtype, true, Generator{}},
        {"v", {c.B, Tn, c.H, c.V}, c.input_dtype, true, Generator{}},
        {"beta", {c.B, Tn, c.H}, c.gate_dtype, true, Generator{"rand"}},
    };
    if (gated(c))
        specs.push_back({"g", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"logsigmoid"}});
    if (c.initial_state) specs.push_back(kv_state_spec(c, "h0", c.H));
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) { return output_state_cotangents(c, c.H); }

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward) return output_state_measured();
    std::vector<MeasuredSpec> out = qkv_grads_measured({"dbeta"});
    if (gated(c)) out.push_back({"dg", TensorKind::gate_grad, 1});
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    // FLA's chunk_gated_delta_product takes one H
    check_one_value_head(issues, c);
    check_unnormalised_keys(issues, c);
    return issues;
}

ref::GatedDeltaProductInputs reference_inputs(const Case& c, const TensorMap& in) {
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
    return r;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    const ref::GatedDeltaProductInputs r = reference_inputs(c, in);
    const ref::GatedDeltaProductOutputs fwd = ref::gated_delta_product_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::GatedDeltaProductGrads g =
            ref::gated_delta_product_bwd(r, cot.at("d_o"), cot.at("dht"));
        add_defined(out, {{"dq", g.dq},
                          {"dk", g.dk},
                          {"dv", g.dv},
                          {"dbeta", g.dbeta},
                          {"dg", g.dg},
                          {"dh0", g.dh0}});
    }
    return out;
}

kernels::GatedDeltaProductArgs kernel_args(const Case& c, const TensorMap& in) {
    kernels::GatedDeltaProductArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.g = get_or_undefined(in, "g");
    a.beta = in.at("beta");
    a.h0 = get_or_undefined(in, "h0");
    a.num_householder = householder_of(c);
    a.scale = scale_of(c);
    a.use_qk_l2norm_in_kernel = l2norm_of(c);
    set_common_args(a, c);
    return a;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    const kernels::GatedDeltaProductArgs a = kernel_args(c, in);
    const bool chunk = is_chunk("gated_delta_product", variant);
    KernelResult result;
    result.contract = kernels::gated_delta_product_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::GatedDeltaProductFwd f =
            chunk ? kernels::gated_delta_product_chunk_fwd_cpu(a)
                  : kernels::gated_delta_product_recurrent_fwd_cpu(a);
        raw = {{"o", f.o}, {"ht", f.ht}};
    } else {
        const at::Tensor d_o = cot.at("d_o");
        const at::Tensor dht = cot.at("dht");
        const kernels::GatedDeltaProductGrads g =
            chunk ? kernels::gated_delta_product_chunk_bwd_cpu(a, d_o, dht)
                  : kernels::gated_delta_product_recurrent_bwd_cpu(a, d_o, dht);
        raw = {{"dq", g.dq},       {"dk", g.dk}, {"dv", g.dv},
               {"dbeta", g.dbeta}, {"dg", g.dg}, {"dh0", g.dh0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

ChunkStates chunk_states(const Case& c, const TensorMap& in, const TensorMap& reference_in) {
    return stored_chunk_states(c, kernel_args(c, in), kernels::gated_delta_product_chunk_fwd_cpu,
                               reference_inputs(c, reference_in), ref::gated_delta_product_fwd,
                               householder_of(c));
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
    f.chunk_states = chunk_states;
    return f;
}

}  // namespace lav::harness
