// src/harness/audit.cpp — prologue under the tracer, promotion/demotion findings, boundary check.
#include "harness/audit.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "core/layout.h"
#include "harness/prologue.h"
#include "scenario/capture.h"
#include "trace/analysis.h"
#include "trace/tracer.h"

namespace lav::harness {
namespace {

// the prologue's own tensors get a seed stream apart from the kernel inputs'
constexpr uint64_t kPrologueSalt = 0x70726f6c6f677565ULL;

// One promotion of a tensor that entered at several ops (rotary's cos and sin) is one finding:
// the first, with where else it entered.
std::vector<trace::Finding> merged(const std::vector<trace::Finding>& findings) {
    std::vector<trace::Finding> out;
    for (const trace::Finding& f : findings) {
        const size_t at = f.message.find(" at ");
        const auto same = std::find_if(out.begin(), out.end(), [&](const trace::Finding& o) {
            return o.tensor == f.tensor && at != std::string::npos &&
                   o.message.compare(0, at, f.message, 0, at) == 0;
        });
        if (same == out.end() || at == std::string::npos)
            out.push_back(f);
        else
            same->message += "; also" + f.message.substr(at);
    }
    return out;
}

report::Finding to_report(const trace::Finding& f) {
    return {f.kind, f.tensor, f.message, f.history};
}

std::string shape_string(at::IntArrayRef sizes) {
    std::string out = "[";
    for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
    return out + "]";
}

std::string index_string(const at::Tensor& offsets) {
    const at::Tensor values = offsets.to(at::kLong).cpu().contiguous();
    return shape_string(at::IntArrayRef(values.data_ptr<int64_t>(), values.numel()));
}

// [B, H, T, ...] for a head_last [B, T, H, ...] shape
std::vector<int64_t> head_first_shape(std::vector<int64_t> shape) {
    std::swap(shape[1], shape[2]);
    return shape;
}

/// The boundary check of one kernel input: every way `t` differs from `spec` becomes a
/// BOUNDARY_MISMATCH, and the result is `t` in the declared shape and dtype, contiguous; an
/// undefined tensor when no declared form can be made of it.
at::Tensor check_input(const scenario::Case& c, const TensorSpec& spec, const at::Tensor& t,
                       const trace::Trace& trace, Audit& audit) {
    const std::string history = trace::history(trace, t);
    const auto mismatch = [&](const std::string& message) {
        audit.boundary_mismatch = true;
        audit.findings.push_back({"BOUNDARY_MISMATCH", spec.name, message, history});
    };
    const std::string reaches = spec.name + " reaches " + c.family;
    // a row the kernel reads is the last dim, at unit stride, in every layout it takes
    if (t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1)
        mismatch(reaches + " with its last dim at stride " + std::to_string(t.stride(-1)) +
                 ", the kernel reads it at stride 1; measured on a contiguous copy");

    at::Tensor shaped = t;
    if (t.sizes() != at::IntArrayRef(spec.shape)) {
        const bool transposed = spec.time_major && spec.shape[1] != spec.shape[2] &&
                                t.sizes() == at::IntArrayRef(head_first_shape(spec.shape));
        if (!transposed) {
            audit.refusal = reaches + " as " + shape_string(t.sizes()) + ", a shape it cannot take";
            mismatch(reaches + " as " + shape_string(t.sizes()) + ", the kernel takes " +
                     shape_string(spec.shape) + " (head_last order); not run");
            return {};
        }
        mismatch(reaches + " as " + shape_string(t.sizes()) +
                 ", [B, H, T, ...] (head_first order), where head_last " +
                 shape_string(spec.shape) +
                 " is declared; measured after transposing dims 1 and 2");
        shaped = t.transpose(1, 2);
    }

    const c10::ScalarType declared = to_scalar_type(spec.dtype);
    if (t.scalar_type() != declared)
        mismatch(reaches + " as " + scalar_type_name(t.scalar_type()) +
                 ", the kernel's contract takes " + std::string(dtype_name(spec.dtype)) +
                 "; measured after casting it to " + std::string(dtype_name(spec.dtype)));
    return shaped.to(declared).contiguous();
}

// varlen kernels index with integer offsets; they run on the case's own cu_seqlens
void check_cu_seqlens(const scenario::Case& c, const at::Tensor& declared, const at::Tensor& t,
                      const trace::Trace& trace, Audit& audit) {
    const auto mismatch = [&](const std::string& message) {
        audit.boundary_mismatch = true;
        audit.findings.push_back(
            {"BOUNDARY_MISMATCH", "cu_seqlens", message, trace::history(trace, t)});
    };
    const std::string reaches = "cu_seqlens reaches " + c.family;
    if (t.scalar_type() != at::kInt && t.scalar_type() != at::kLong)
        mismatch(reaches + " as " + scalar_type_name(t.scalar_type()) +
                 ", the kernel takes int32 or int64 offsets; measured with the case's int64 "
                 "cu_seqlens");
    if (t.sizes() != declared.sizes() ||
        !at::equal(t.to(at::kDouble).cpu(), declared.to(at::kDouble)))
        mismatch(reaches + " with other offsets than the case declares, " + index_string(declared) +
                 "; measured with the case's");
}

// The capture's tensor for `spec`, in head_last order, as captured (dtype and values).
at::Tensor captured(const scenario::Case& c, const TensorSpec& spec) {
    const auto& tensors = c.capture->tensors;
    const auto found = tensors.find(spec.name);
    if (found == tensors.end()) {
        std::vector<std::string> held;
        for (const auto& [name, t] : tensors) held.push_back(name);
        throw ShapeError(c.capture->path + " holds no " + spec.name + ", which this " + c.family +
                         " case needs; it holds: " + scenario::join(held));
    }
    return spec.time_major ? to_head_last(found->second, c.layout) : found->second;
}

}  // namespace

CaseTensors captured_inputs(const scenario::Case& c, const std::vector<TensorSpec>& specs,
                            Audit& audit) {
    // a trace of no ops: each tensor's history is its name and captured dtype
    trace::TraceScope scope;
    TensorMap given;
    for (const auto& spec : specs) {
        given[spec.name] = captured(c, spec);
        scope.trace().label(given[spec.name], spec.name, trace::Role::input);
    }
    const trace::Trace trace = scope.stop();
    CaseTensors out;
    for (const auto& spec : specs) {
        const at::Tensor t = check_input(c, spec, given.at(spec.name), trace, audit);
        if (!t.defined()) continue;
        out.reference[spec.name] = t.to(at::kDouble);
        out.kernel[spec.name] = spec.time_major ? from_head_last(t, c.layout).contiguous() : t;
    }
    return out;
}

void take_captured(const scenario::Case& c, const std::vector<TensorSpec>& specs,
                   CaseTensors& tensors) {
    for (const auto& spec : specs) {
        if (!c.capture->tensors.count(spec.name)) continue;
        const at::Tensor t = captured(c, spec).to(to_scalar_type(spec.dtype));
        tensors.reference[spec.name] = t.to(at::kDouble);
        tensors.kernel[spec.name] = spec.time_major ? from_head_last(t, c.layout).contiguous() : t;
    }
}

CaseTensors run_prologue_audited(const scenario::Case& c, const std::vector<TensorSpec>& specs,
                                 const CaseTensors& generated, Audit& audit,
                                 const PythonRunner& python, at::DeviceType device) {
    const scenario::Prologue& prologue = *c.prologue;
    // the prologue works in head_last order, on the values the kernel would have received
    TensorMap env = make_prologue_tensors(prologue, c.seed ^ kPrologueSalt);
    for (const auto& spec : specs)
        env[spec.name] = c.capture
                             ? captured(c, spec)
                             : generated.reference.at(spec.name).to(to_scalar_type(spec.dtype));
    at::Tensor declared_offsets;
    if (!c.cu_seqlens.empty()) {
        declared_offsets = at::tensor(at::ArrayRef<int64_t>(c.cu_seqlens), at::kLong);
        env["cu_seqlens"] = declared_offsets;
    }
    // the prologue runs where the case does, as the user's model would; CUDA autocast needs
    // the tensors on the GPU
    if (device == at::kCUDA || (prologue.autocast == scenario::AutocastMode::fp16 && at::hasCUDA()))
        for (auto& [name, t] : env) t = t.to(at::kCUDA);

    // the op that first made a NaN is the answer to "why is the kernel's output NaN": where a
    // kernel input the ops made holds NaN or Inf, the prologue runs again with every op's
    // values checked (which costs about an op per tensor)
    const auto traced_run = [&](bool check_values, TensorMap& produced) {
        trace::TraceScope scope(check_values);
        PrologueHooks hooks;
        hooks.on_input = [&](const std::string& name, const at::Tensor& t) {
            const scenario::PrologueTensor* declared = prologue.find_tensor(name);
            scope.trace().label(
                t, name,
                declared && declared->parameter ? trace::Role::parameter : trace::Role::input);
        };
        hooks.on_parameter = [&](const std::string& name, const at::Tensor& t, bool buffer) {
            scope.trace().label(t, name, buffer ? trace::Role::buffer : trace::Role::parameter);
        };
        hooks.on_site_source = [&](trace::Trace::SiteSource source) {
            scope.trace().set_site_source(source);
        };
        hooks.on_assign = [&](const std::string& name, const at::Tensor& t) {
            scope.trace().label(t, name);
        };
        // an unnamed operand is shown by the expression that made it, never by an op number; a
        // name it already has (a view or no-op cast of a named tensor) stays
        hooks.on_value = [&](const std::string& text, const at::Tensor& t) {
            if (scope.trace().label_of(t).empty()) scope.trace().label(t, text);
        };
        produced = run_prologue(prologue, env, hooks, python);
        return scope.stop();
    };
    TensorMap produced;
    trace::Trace trace = traced_run(false, produced);
    const bool nonfinite = std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& spec) {
        const at::Tensor& t = produced.at(spec.name);
        return trace.producer_of(t) >= 0 && at::isFloatingType(t.scalar_type()) &&
               !at::isfinite(at::sum(t, at::promote_types(t.scalar_type(), at::kFloat)))
                    .item<bool>();
    });
    if (nonfinite) trace = traced_run(true, produced);

    for (const auto& f : merged(trace::find_promotions(trace, to_scalar_type(c.input_dtype))))
        audit.findings.push_back(to_report(f));
    for (const auto& f : trace::find_demotions(trace)) audit.findings.push_back(to_report(f));
    for (const auto& f : trace::find_nonfinite_origin(trace))
        audit.findings.push_back(to_report(f));
    for (const auto& row : trace::trace_table(trace))
        audit.trace.push_back(
            // a Python prologue's op says where the user's code called it
            {row.seq, row.site.empty() ? row.op : row.op + " at " + row.site, row.depth,
             row.autocast != 0, row.inputs, row.outputs, "traced", ""});

    if (declared_offsets.defined())
        check_cu_seqlens(c, declared_offsets, produced.at("cu_seqlens").cpu(), trace, audit);
    CaseTensors out;
    for (const auto& spec : specs) {
        at::Tensor t = check_input(c, spec, produced.at(spec.name), trace, audit);
        if (!t.defined()) continue;
        t = t.cpu();
        out.reference[spec.name] = t.to(at::kDouble);
        out.kernel[spec.name] = spec.time_major ? from_head_last(t, c.layout).contiguous() : t;
    }
    return out;
}

}  // namespace lav::harness
