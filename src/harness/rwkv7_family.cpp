// src/harness/rwkv7_family.cpp — rwkv7's tensors, options (DPLR or IPLR form, tied or drawn b),
// reference and CPU backend behind Family.
#include <ATen/ATen.h>

#include <cmath>

#include "harness/family_support.h"
#include "harness/registry.h"
#include "kernels/rwkv7/rwkv7.h"
#include "reference/rwkv7.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::Generator;

constexpr const char* kForm = "form";
constexpr const char* kB = "b";

bool dplr(const Case& c) { return c.options.at(kForm) == "dplr"; }
bool b_is_neg_a(const Case& c) { return c.options.at(kB) == "neg_a"; }

// chunk_rwkv7's default scale is 1.0, not K^-0.5 (fla/ops/rwkv7/chunk.py)
double rwkv7_scale(const Case& c) { return c.scale ? *c.scale : 1.0; }

std::vector<TensorSpec> inputs(const Case& c) {
    const std::vector<int64_t> key = {c.B, c.T, c.H, c.K};
    // ‖a‖ ≈ 1: with b = −a the transition D − a aᵀ then has no eigenvalue above 1 in magnitude
    const Generator unit{"randn", 1.0 / std::sqrt(static_cast<double>(c.K))};
    std::vector<TensorSpec> specs = {{"q", key, c.input_dtype, true, Generator{}}};
    if (dplr(c)) specs.push_back({"w", key, c.gate_dtype, true, Generator{"logsigmoid"}});
    specs.push_back({"k", key, c.input_dtype, true, Generator{}});
    specs.push_back({"v", {c.B, c.T, c.H, c.V}, c.input_dtype, true, Generator{}});
    specs.push_back({"a", key, c.input_dtype, true, unit});
    if (!b_is_neg_a(c)) specs.push_back({"b", key, c.input_dtype, true, unit});
    if (c.initial_state) specs.push_back(kv_state_spec(c, "h0", c.H));
    return specs;
}

std::vector<TensorSpec> cotangents(const Case& c) { return output_state_cotangents(c, c.H); }

std::vector<MeasuredSpec> measured(const Case& c, bool backward) {
    using metrics::TensorKind;
    if (!backward) return output_state_measured();
    std::vector<MeasuredSpec> out = qkv_grads_measured();
    out.push_back({"da", TensorKind::gradient, 1});
    out.push_back({"db", TensorKind::gradient, 1});
    if (dplr(c)) out.push_back({"dw", TensorKind::gate_grad, 1});
    if (c.initial_state) out.push_back({"dh0", TensorKind::gradient, -1});
    return out;
}

std::vector<scenario::FamilyIssue> check(const Case& c) {
    std::vector<scenario::FamilyIssue> issues;
    check_one_value_head(issues, c);
    return issues;
}

/// b as the kernel and the reference see it: the drawn input, or exactly −a.
at::Tensor b_of(const Case& c, const TensorMap& in) {
    return b_is_neg_a(c) ? -in.at("a") : in.at("b");
}

ref::Rwkv7Inputs reference_inputs(const Case& c, const TensorMap& in) {
    ref::Rwkv7Inputs r;
    r.q = in.at("q");
    r.w = get_or_undefined(in, "w");
    r.k = in.at("k");
    r.v = in.at("v");
    r.a = in.at("a");
    r.b = b_of(c, in);
    r.h0 = get_or_undefined(in, "h0");
    r.cu_seqlens = c.cu_seqlens;
    r.scale = rwkv7_scale(c);
    return r;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    const ref::Rwkv7Inputs r = reference_inputs(c, in);
    const ref::Rwkv7Outputs fwd = ref::rwkv7_fwd(r);
    TensorMap out = {{"o", fwd.o}, {"ht", fwd.ht}};
    if (backward) {
        const ref::Rwkv7Grads g = ref::rwkv7_bwd(r, cot.at("d_o"), cot.at("dht"));
        add_defined(out, {{"dq", g.dq},
                          {"dk", g.dk},
                          {"dv", g.dv},
                          {"da", g.da},
                          {"db", g.db},
                          {"dw", g.dw},
                          {"dh0", g.dh0}});
    }
    return out;
}

kernels::Rwkv7Args kernel_args(const Case& c, const TensorMap& in) {
    kernels::Rwkv7Args a;
    a.q = in.at("q");
    a.w = get_or_undefined(in, "w");
    a.k = in.at("k");
    a.v = in.at("v");
    a.a = in.at("a");
    // negation is exact in every dtype, so a tied b costs no rounding
    a.b = b_of(c, in);
    a.h0 = get_or_undefined(in, "h0");
    a.scale = rwkv7_scale(c);
    set_common_args(a, c);
    return a;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    const kernels::Rwkv7Args a = kernel_args(c, in);
    const bool chunk = is_chunk("rwkv7", variant);
    KernelResult result;
    result.contract = kernels::rwkv7_contract(variant, backward, a);
    TensorMap raw;
    if (!backward) {
        const kernels::Rwkv7Fwd f =
            chunk ? kernels::rwkv7_chunk_fwd_cpu(a) : kernels::rwkv7_recurrent_fwd_cpu(a);
        raw = {{"o", f.o}, {"ht", f.ht}};
    } else {
        const at::Tensor d_o = cot.at("d_o");
        const at::Tensor dht = cot.at("dht");
        const kernels::Rwkv7Grads g = chunk ? kernels::rwkv7_chunk_bwd_cpu(a, d_o, dht)
                                            : kernels::rwkv7_recurrent_bwd_cpu(a, d_o, dht);
        raw = {{"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv},  {"da", g.da},
               {"db", g.db}, {"dw", g.dw}, {"dh0", g.dh0}};
    }
    result.results = head_last_results(c, measured(c, backward), raw);
    return result;
}

ChunkStates chunk_states(const Case& c, const TensorMap& in, const TensorMap& reference_in) {
    return stored_chunk_states(c, kernel_args(c, in), kernels::rwkv7_chunk_fwd_cpu,
                               reference_inputs(c, reference_in), ref::rwkv7_fwd);
}

}  // namespace

Family rwkv7_family() {
    Family f;
    f.info.name = "rwkv7";
    f.info.summary =
        "RWKV-7 / generalized delta rule: S = (diag(exp w) + b a^T) S + k v^T (dplr), or "
        "without the decay (iplr)";
    f.info.variants = {"chunk", "recurrent"};
    f.info.inputs = {"q", "w", "k", "v", "a", "b", "h0", "d_o", "dht"};
    f.info.measured = {"o", "ht", "dq", "dk", "dv", "da", "db", "dw", "dh0"};
    // b = −a (FLA's DPLR test convention) keeps every case stable by default; "input" draws b
    // or takes it from a prologue (RWKV-7's a = −k̂, b = k̂ ⊙ η)
    f.info.options = {{kForm, {"dplr", "iplr"}}, {kB, {"neg_a", "input"}}};
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
