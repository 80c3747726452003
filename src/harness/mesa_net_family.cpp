// src/harness/mesa_net_family.cpp — MesaNet's tensors, reference, CPU backend.
#include <ATen/ATen.h>

#include <string>

#include "core/varlen.h"
#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/mesa_net/mesa_net.h"
#include "reference/mesa_net.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

bool l2norm_of(const Case& c) { return flag(c, "use_qk_l2norm_in_kernel"); }

/// Conjugate-gradient steps: "K" (the head dim, as FLA's tests run it) or a number.
int64_t cg_iterations(const Case& c) {
    const std::string& it = c.options.at("max_cg_iterations");
    return it == "K" ? c.K : std::stoll(it);
}

// q, v randn; k randn (unit after the in-kernel norm, the family's default); g = logsigmoid(x)/10,
// about FLA's log U[0.8, 0.99]; β ~ U[0, 1); λ = 0.5, inside FLA's [0.25, 1); h_kk0 = 11ᵀ / K,
// symmetric PSD with eigenvalue 1 like FLA's u uᵀ of a unit u; h_kv0 randn.
std::vector<TensorSpec> inputs(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    std::vector<TensorSpec> specs = qkv_specs(c, c.H);
    specs.push_back({"g", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"logsigmoid", 1.0, 10.0}});
    specs.push_back({"beta", {c.B, c.T, c.H}, c.gate_dtype, true, Generator{"rand"}});
    specs.push_back({"lamb", {c.H, c.K}, c.gate_dtype, false, Generator{"ones", 0.5}});
    if (c.initial_state) {
        specs.push_back({"h_kk0",
                         {N, c.H, c.K, c.K},
                         c.state_dtype,
                         false,
                         Generator{"ones", 1.0 / static_cast<double>(c.K)}});
        specs.push_back(kv_state_spec(c, "h_kv0", c.H));
    }
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) {
    const int64_t N = num_sequences(c.B, c.cu_seqlens);
    return {
        {"d_o", {c.B, c.T, c.H, c.V}, c.output_dtype, true, Generator{}},
        {"dht_kk", {N, c.H, c.K, c.K}, c.state_dtype, false, Generator{}},
        kv_state_spec(c, "dht_kv", c.H),
    };
}

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward)
        return {{"o", TensorKind::output, 1},
                {"ht_kk", TensorKind::state, -1},
                {"ht_kv", TensorKind::state, -1}};
    std::vector<MeasuredSpec> out = qkv_grads_measured({"dg", "dbeta"});
    out.push_back({"dlamb", TensorKind::gate_grad, -1});
    if (c.initial_state) {
        out.push_back({"dh_kk0", TensorKind::gradient, -1});
        out.push_back({"dh_kv0", TensorKind::gradient, -1});
    }
    return out;
}

/// The generator a case uses for `name`: its [inputs] entry or the family's default.
Generator family_generator(const Case& c, const std::string& name) {
    for (const TensorSpec& spec : inputs(c))
        if (spec.name == name) return generator_of(c, name, spec.generator);
    return generator_of(c, name);
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    check_one_value_head(issues, c);
    // the solve needs Hkk + diag(λ) symmetric positive definite: λ > 0 and h_kk0 symmetric PSD
    const Generator lamb = family_generator(c, "lamb");
    if (!((lamb.dist == "ones" || lamb.dist == "rand") && lamb.scale > 0.0))
        issues.push_back({"inputs.lamb",
                          "lamb drawn as '" + lamb.dist +
                              "' is not positive, and MesaNet's solve needs "
                              "Hkk + diag(lamb) positive definite",
                          "draw lamb as \"ones\" or \"rand\" with a positive scale"});
    const Generator kk = family_generator(c, "h_kk0");
    if (c.initial_state && !(kk.dist == "zeros" || (kk.dist == "ones" && kk.scale >= 0.0)))
        issues.push_back(
            {"inputs.h_kk0",
             "h_kk0 drawn as '" + kk.dist + "' is not symmetric positive semi-definite",
             "draw h_kk0 as \"zeros\" or \"ones\" with a scale >= 0 (a rank-one "
             "scale 11^T)"});
    return issues;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    ref::MesaNetInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.g = in.at("g");
    r.beta = in.at("beta");
    r.lamb = in.at("lamb");
    r.h_kk0 = get_or_undefined(in, "h_kk0");
    r.h_kv0 = get_or_undefined(in, "h_kv0");
    r.cu_seqlens = c.cu_seqlens;
    r.use_qk_l2norm_in_kernel = l2norm_of(c);
    const ref::MesaNetOutputs fwd = ref::mesa_net_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht_kk", fwd.ht_kk}, {"ht_kv", fwd.ht_kv}};
    if (backward) {
        const ref::MesaNetGrads g =
            ref::mesa_net_bwd(r, cot.at("d_o"), cot.at("dht_kk"), cot.at("dht_kv"));
        add_defined(out, {{"dq", g.dq},
                          {"dk", g.dk},
                          {"dv", g.dv},
                          {"dg", g.dg},
                          {"dbeta", g.dbeta},
                          {"dlamb", g.dlamb},
                          {"dh_kk0", g.dh_kk0},
                          {"dh_kv0", g.dh_kv0}});
    }
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::MesaNetArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    a.g = in.at("g");
    a.beta = in.at("beta");
    a.lamb = in.at("lamb");
    a.h_kk0 = get_or_undefined(in, "h_kk0");
    a.h_kv0 = get_or_undefined(in, "h_kv0");
    a.use_qk_l2norm_in_kernel = l2norm_of(c);
    a.max_cg_iterations = cg_iterations(c);
    set_common_args(a, c);

    const bool chunk = is_chunk("mesa_net", variant);
    KernelResult result;
    result.contract = kernels::mesa_net_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::MesaNetFwd f =
            chunk ? kernels::mesa_net_chunk_fwd_cpu(a) : kernels::mesa_net_recurrent_fwd_cpu(a);
        raw = {{"o", f.o}, {"ht_kk", f.ht_kk}, {"ht_kv", f.ht_kv}};
    } else {
        const at::Tensor d_o = cot.at("d_o");
        const kernels::MesaNetGrads g =
            chunk ? kernels::mesa_net_chunk_bwd_cpu(a, d_o, cot.at("dht_kk"), cot.at("dht_kv"))
                  : kernels::mesa_net_recurrent_bwd_cpu(a, d_o, cot.at("dht_kk"), cot.at("dht_kv"));
        raw = {{"dq", g.dq},       {"dk", g.dk},       {"dv", g.dv},         {"dg", g.dg},
               {"dbeta", g.dbeta}, {"dlamb", g.dlamb}, {"dh_kk0", g.dh_kk0}, {"dh_kv0", g.dh_kv0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

}  // namespace

Family mesa_net_family() {
    Family f;
    f.info.name = "mesa_net";
    f.info.summary = "MesaNet: two decayed states and a per-step ridge solve (conjugate gradient)";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q",     "k",     "v",   "g",      "beta",  "lamb",
                     "h_kk0", "h_kv0", "d_o", "dht_kk", "dht_kv"};
    f.info.measured = {"o",  "ht_kk", "ht_kv", "dq",     "dk",    "dv",
                       "dg", "dbeta", "dlamb", "dh_kk0", "dh_kv0"};
    // the norm is on by default (randn keys need it); K CG steps as FLA's tests run them, or
    // FLA's default of 30, or 8 to see an unconverged solve
    f.info.options = {{"use_qk_l2norm_in_kernel", {"true", "false"}},
                      {"max_cg_iterations", {"K", "30", "8"}}};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
    f.reference = reference;
    f.run_cpu = run_cpu;
    return f;
}

}  // namespace lav::harness
