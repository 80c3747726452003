// src/harness/rebased_family.cpp — ReBased's tensors, reference and CPU backend.
#include <ATen/ATen.h>

#include "core/error.h"
#include "core/layout.h"
#include "harness/registry.h"
#include "kernels/rebased/rebased.h"
#include "reference/rebased.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::FamilyIssue;
using scenario::Generator;

bool use_scale(const Case& c) { return c.options.at("use_scale") == "true"; }
bool use_normalize(const Case& c) { return c.options.at("use_normalize") == "true"; }

std::vector<TensorSpec> inputs(const Case& c) {
    return {{"q", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
            {"k", {c.B, c.T, c.H, c.K}, c.input_dtype, true, Generator{}},
            {"v", {c.B, c.T, c.H, c.V}, c.input_dtype, true, Generator{}}};
}

std::vector<TensorSpec> cotangents(const Case& c) {
    return {{"d_o", {c.B, c.T, c.H, c.V}, c.output_dtype, true, Generator{}}};
}

std::vector<MeasuredSpec> measured(const Case&, bool backward) {
    using metrics::TensorKind;
    if (!backward) return {{"o", TensorKind::output, 1}};
    return {{"dq", TensorKind::gradient, 1},
            {"dk", TensorKind::gradient, 1},
            {"dv", TensorKind::gradient, 1}};
}

std::vector<FamilyIssue> check(const Case& c) {
    std::vector<FamilyIssue> issues;
    if (c.HV > 0 && c.HV != c.H)
        issues.push_back({"shape.HV", "rebased has no grouped value heads (HV must equal H)",
                          "leave shape.HV unset"});
    // the feature map has K² dims and FLA's kernels take K ≤ 128 (parallel_rebased)
    if (c.K > 128)
        issues.push_back({"shape.K", "rebased takes K <= 128 (FLA's parallel_rebased asserts it)",
                          "use a feature dimension of at most 128 (FLA's layers use 16)"});
    return issues;
}

TensorMap reference(const Case& c, const TensorMap& in, const TensorMap& cot, bool backward) {
    ref::RebasedInputs r;
    r.q = in.at("q");
    r.k = in.at("k");
    r.v = in.at("v");
    r.cu_seqlens = c.cu_seqlens;
    r.use_scale = use_scale(c);
    r.use_normalize = use_normalize(c);
    TensorMap out = {{"o", ref::rebased_fwd(r)}};
    if (backward) {
        const ref::RebasedGrads g = ref::rebased_bwd(r, cot.at("d_o"));
        out["dq"] = g.dq;
        out["dk"] = g.dk;
        out["dv"] = g.dv;
    }
    return out;
}

KernelResult run_cpu(const Case& c, const std::string& variant, const TensorMap& in,
                     const TensorMap& cot, bool backward) {
    kernels::RebasedArgs a;
    a.q = in.at("q");
    a.k = in.at("k");
    a.v = in.at("v");
    if (!c.cu_seqlens.empty())
        a.cu_seqlens = at::tensor(at::ArrayRef<int64_t>(c.cu_seqlens), at::kLong);
    a.layout = c.layout;
    a.use_scale = use_scale(c);
    a.use_normalize = use_normalize(c);
    a.state_dtype = to_scalar_type(c.state_dtype);
    a.output_dtype = to_scalar_type(c.output_dtype);
    a.chunk_size = c.chunk_size;
    KernelResult result;
    result.contract = kernels::rebased_contract(variant, backward, a);
    if (!backward) {
        result.results = {{"o", to_head_last(kernels::rebased_fwd_cpu(variant, a), c.layout)}};
        return result;
    }
    const kernels::RebasedGrads g = kernels::rebased_bwd_cpu(variant, a, cot.at("d_o"));
    result.results = {{"dq", to_head_last(g.dq, c.layout)},
                      {"dk", to_head_last(g.dk, c.layout)},
                      {"dv", to_head_last(g.dv, c.layout)}};
    return result;
}

}  // namespace

Family rebased_family() {
    Family f;
    f.info.name = "rebased";
    f.info.summary =
        "ReBased: causal linear attention with the squared-score kernel and its "
        "normaliser (no recurrent state)";
    f.info.variants = {"parallel", "chunk", "recurrent"};
    f.info.inputs = {"q", "k", "v", "d_o"};
    f.info.measured = {"o", "dq", "dk", "dv"};
    // FLA's parallel_rebased fixes eps = 1e-5; use_scale picks K^-0.5 or 1 (the scenario's
    // `scale` is not read)
    f.info.options = {{"use_scale", {"true", "false"}}, {"use_normalize", {"true", "false"}}};
    f.info.check = check;
    f.inputs = inputs;
    f.cotangents = cotangents;
    f.measured = measured;
    f.reference = reference;
    f.run_cpu = run_cpu;
    return f;
}

}  // namespace lav::harness
