// src/harness/audit.cpp — prologue under the tracer, promotion/demotion findings, boundary check.
#include "harness/audit.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/layout.h"
#include "harness/prologue.h"
#include "trace/analysis.h"
#include "trace/tracer.h"

namespace lav::harness {
namespace {

// the prologue's own tensors get a seed stream apart from the kernel inputs'
constexpr uint64_t kPrologueSalt = 0x70726f6c6f677565ULL;

report::Finding to_report(const trace::Finding& f) {
    return {f.kind, f.tensor, f.message, f.history};
}

std::string shape_string(at::IntArrayRef sizes) {
    std::string out = "[";
    for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
    return out + "]";
}

}  // namespace

CaseTensors run_prologue_audited(const scenario::Case& c, const std::vector<TensorSpec>& specs,
                                 const CaseTensors& generated, Audit& audit) {
    const scenario::Prologue& prologue = *c.prologue;
    // the prologue works in head_last order, on the values the kernel would have received
    TensorMap env = make_prologue_tensors(prologue, c.seed ^ kPrologueSalt);
    for (const auto& spec : specs)
        env[spec.name] = generated.reference.at(spec.name).to(to_scalar_type(spec.dtype));

    trace::TraceScope scope;
    PrologueHooks hooks;
    hooks.on_input = [&](const std::string& name, const at::Tensor& t) {
        const scenario::PrologueTensor* declared = prologue.find_tensor(name);
        scope.trace().label(
            t, name, declared && declared->parameter ? trace::Role::parameter : trace::Role::input);
    };
    hooks.on_assign = [&](const std::string& name, const at::Tensor& t) {
        scope.trace().label(t, name);
    };
    const TensorMap produced = run_prologue(prologue, std::move(env), hooks);
    const trace::Trace trace = scope.stop();

    for (const auto& f : trace::find_promotions(trace, to_scalar_type(c.input_dtype)))
        audit.findings.push_back(to_report(f));
    for (const auto& f : trace::find_demotions(trace)) audit.findings.push_back(to_report(f));
    for (const auto& row : trace::trace_table(trace))
        audit.trace.push_back(
            {row.seq, row.op, row.depth, row.autocast != 0, row.inputs, row.outputs});

    CaseTensors out;
    for (const auto& spec : specs) {
        const at::Tensor& t = produced.at(spec.name);
        LAV_CHECK(t.sizes() == at::IntArrayRef(spec.shape), "the prologue made ", spec.name,
                  " of shape ", shape_string(t.sizes()), "; the kernel takes ",
                  shape_string(spec.shape), " (head_last order)");
        const c10::ScalarType declared = to_scalar_type(spec.dtype);
        if (t.scalar_type() != declared) {
            audit.boundary_mismatch = true;
            audit.findings.push_back(
                {"BOUNDARY_MISMATCH", spec.name,
                 spec.name + " reaches " + c.family + " as " + scalar_type_name(t.scalar_type()) +
                     ", the kernel's contract takes " + std::string(dtype_name(spec.dtype)) +
                     "; measured after casting it to " + std::string(dtype_name(spec.dtype)),
                 trace::history(trace, t)});
        }
        const at::Tensor cast = t.to(declared);
        out.reference[spec.name] = cast.to(at::kDouble);
        out.kernel[spec.name] =
            spec.time_major ? from_head_last(cast, c.layout).contiguous() : cast.contiguous();
    }
    return out;
}

}  // namespace lav::harness
