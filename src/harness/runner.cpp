// src/harness/runner.cpp — the case pipeline: tensors → reference → kernels → measures → record.
#include "harness/runner.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/layout.h"
#include "core/text.h"
#include "core/varlen.h"
#include "harness/audit.h"
#include "harness/backend.h"
#include "harness/decompose.h"
#include "harness/dropped_cotangent.h"
#include "harness/equivalence.h"
#include "harness/inputs.h"
#include "harness/judge.h"
#include "metrics/measures.h"
#include "trace/analysis.h"
#include "trace/tracer.h"

namespace lav::harness {
namespace {

using report::CaseRecord;
using report::Finding;
using report::MetricRow;
using scenario::Case;

// salts keep the cotangents' random streams apart from the inputs'
constexpr uint64_t kInputSalt = 0;
constexpr uint64_t kCotangentSalt = 1;

std::vector<double> values_of(const at::Tensor& t) {
    const at::Tensor d = t.to(at::kDouble).cpu().contiguous();
    return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
}

// The chunk states the CPU chunk row stored beside the reference's, and rel_rmse per chunk.
report::Intermediates chunk_intermediates(const Case& c, const Family& family, const Row& row,
                                          Call kernel, Call reference) {
    kernel.keep_chunk_states = true;
    reference.keep_chunk_states = true;
    const at::Tensor h = row.forward(kernel).at("h");
    // measured on the CPU, wherever the reference ran
    const at::Tensor h_ref = family.reference(reference, false).at("states").cpu();
    LAV_ASSERT(h_ref.sizes() == h.sizes(), c.family, " reference states ", h_ref.sizes(),
               " beside kernel states ", h.sizes());
    const int64_t steps = family.steps_option.empty() ? 1 : kernel.int_option(family.steps_option);
    report::Intermediates d;
    d.case_id = c.id;
    d.family = c.family;
    d.variant = "chunk";
    d.input_dtype = dtype_name(c.input_dtype);
    d.state_dtype = scalar_type_name(h.scalar_type());
    d.layout = layout_name(c.layout);
    d.shape = shape_name(c);
    d.chunk_size = c.chunk_size;
    d.dims = h.sizes().vec();
    d.h = values_of(h);
    d.h_ref = values_of(h_ref);
    // blocks of one chunk along dim 0: the drift curve is the per-chunk rel_rmse
    const std::vector<double> per_chunk = metrics::measure(h, h_ref, 0, 1).drift;
    // chunks cut each sequence's steps: its positions, or gated_delta_product's sub-steps
    int64_t chunk = 0;
    for (const Sequence& s : sequences(c.B, c.T, c.cu_seqlens))
        for (int64_t step = 0; step < s.length() * steps; step += c.chunk_size, ++chunk)
            d.chunks.push_back({chunk, s.index, step, per_chunk.at(chunk)});
    LAV_ASSERT(chunk == h.size(0), c.family, " stored ", h.size(0), " chunk states for ", chunk,
               " chunks");
    return d;
}

// The call with both sets of tensors: the inputs, and the cotangents for a backward pass.
Call with_tensors(Call call, const TensorMap& inputs, const TensorMap& cotangents) {
    call.tensors = inputs;
    call.tensors.insert(cotangents.begin(), cotangents.end());
    return call;
}

// Whether a traced op mixes or changes floating dtypes: a cast, or an op whose operands
// promote (bf16 · fp32 → fp32). A 0-dim operand (a Python float arrives as fp64[]) takes no
// part in promotion beside a tensor, and is left out.
bool changes_dtype(const trace::OpRecord& op) {
    std::set<c10::ScalarType> dtypes;
    for (const auto* side : {&op.inputs, &op.outputs})
        for (const trace::TensorInfo& t : *side)
            if (at::isFloatingType(t.dtype) && !t.shape.empty()) dtypes.insert(t.dtype);
    return dtypes.size() > 1;
}

// Runs the row's kernel for record `r`; a traced row (one lav did not write) runs under the
// dtype tracer, and the ops its code called that mix or change floating dtypes join r's trace.
TensorMap run_row(const Row& row, const Call& call, bool backward, CaseRecord& r) {
    if (!row.traced) return backward ? row.backward(call) : row.forward(call);
    trace::TraceScope scope;
    for (const auto& [name, t] : call.tensors)
        if (t.defined()) scope.trace().label(t, name, trace::Role::input);
    const TensorMap raw = backward ? row.backward(call) : row.forward(call);
    const trace::Trace trace = scope.stop();
    const std::vector<trace::TraceRow> table = trace::trace_table(trace);
    const std::string kernel = r.family + "/" + r.variant + "/" + r.backend + "/" + r.pass;
    for (size_t i = 0; i < table.size(); ++i) {
        const trace::OpRecord& op = trace.ops()[i];
        if (op.depth != 0 || !changes_dtype(op)) continue;
        const trace::TraceRow& t = table[i];
        r.trace.push_back(
            {t.seq, t.op, t.depth, t.autocast != 0, t.inputs, t.outputs, "traced", kernel});
    }
    return raw;
}

// The cotangents a backward pass was given, as contract items: their dtype is the case's
// ([dtypes] cotangents, or each its tensor's), not the kernel's choice, so the harness adds them.
void add_cotangents(const TensorMap& cotangents, PrecisionContract& contract) {
    for (const auto& [name, t] : cotangents) {
        const auto dtype = from_scalar_type(t.scalar_type());
        LAV_ASSERT(dtype.has_value(), "cotangent ", name, " is not floating");
        contract.items.push_back({name, *dtype, "cotangent, as the case draws it"});
    }
}

// Seconds of wall time since `start` (timing a case's reference and kernels).
double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The rows of a case's trace that the kernel of record `r` declares: one per item of its
// precision contract (none when the kernel did not run), the stored dtype as its output.
std::vector<report::TraceRow> declared_rows(const CaseRecord& r) {
    const std::string kernel = r.family + "/" + r.variant + "/" + r.backend + "/" + r.pass;
    std::vector<report::TraceRow> rows;
    for (const ContractItem& item : r.contract.items) {
        report::TraceRow& row = rows.emplace_back();
        row.seq = -1;
        row.op = item.item;
        row.outputs = dtype_name(item.dtype);
        row.source = "declared";
        row.kernel = kernel;
    }
    return rows;
}

}  // namespace

CaseRecord blank_record(const Case& c, const std::string& variant, const std::string& backend,
                        const std::string& pass) {
    CaseRecord r;
    r.id = record_id(c, variant, backend, pass);
    r.scenario_file = c.file;
    r.scenario = c.name;
    r.family = c.family;
    r.variant = variant;
    r.backend = backend;
    r.pass = pass;
    r.input_dtype = dtype_name(c.input_dtype);
    r.gate_dtype = dtype_name(c.gate_dtype);
    r.state_dtype = state_dtype_text(c);
    r.output_dtype = dtype_name(c.output_dtype);
    r.layout = layout_name(c.layout);
    r.shape = shape_name(c);
    if (!c.cu_seqlens.empty()) r.cu_seqlens = bracketed(c.cu_seqlens);
    r.seed = c.seed;
    return r;
}

std::string case_device(const Registry& registry, const Case& c,
                        const std::vector<std::string>& backends) {
    const Call base = call_of(registry.get(c.family), c);
    for (const auto& variant : c.variants)
        for (const auto& backend : backends) {
            const Choice choice = choose_row(registry, c.family, variant, base, backend);
            if (choice.row && choice.row->device == "cuda") return "cuda";
        }
    return "cpu";
}

std::string record_id(const Case& c, const std::string& variant, const std::string& backend,
                      const std::string& pass) {
    return c.id + "/" + variant + "/" + backend + "/" + pass;
}

std::vector<std::string> passes_of(const Case& c) {
    std::vector<std::string> passes;
    if (c.forward) passes.push_back("fwd");
    if (c.backward) passes.push_back("bwd");
    return passes;
}

std::string shape_name(const Case& c) {
    return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_H" + std::to_string(c.H) +
           "_K" + std::to_string(c.K) + "_V" + std::to_string(c.V);
}

void run_case(const Registry& registry, const Case& c, const RunOptions& options,
              const std::function<void(CaseRecord)>& sink) {
    const Family& family = registry.get(c.family);
    const std::vector<TensorSpec> specs = specs_of(family, c, Role::input);
    const Call base = call_of(family, c);
    // a capture's tensors replace the drawn ones (audit.h)
    CaseTensors in = c.capture ? CaseTensors{} : make_tensors(specs, c, kInputSalt);
    const std::string device = case_device(registry, c, options.backends);
    Audit audit;
    // one record per variant and pass when no kernel can run: the case's result, not a crash
    const auto stop = [&](const std::string& verdict, const std::string& message) {
        for (const auto& variant : c.variants)
            for (const auto& backend : options.backends)
                for (const auto& pass : passes_of(c)) {
                    const Choice choice = choose_row(registry, c.family, variant, base, backend);
                    CaseRecord r = blank_record(c, variant, choice.backend, pass);
                    r.findings = audit.findings;
                    r.trace = audit.trace;
                    r.verdict = verdict;
                    r.message = message;
                    sink(std::move(r));
                }
    };
    if (c.prologue) {
        try {
            in = run_prologue_audited(c, specs, in, audit, options.python_prologue,
                                      device == "cuda" ? at::kCUDA : at::kCPU);
        } catch (const InternalError&) {
            throw;
        } catch (const EnvironmentError&) {
            throw;  // no Python: no case of the run can have its prologue
        } catch (const std::exception& e) {
            stop("error", e.what());
            return;
        }
        if (!audit.refusal.empty()) {
            stop("fail", audit.refusal);
            return;
        }
    }
    if (c.capture && !c.prologue) {
        try {
            in = captured_inputs(c, specs, audit);
        } catch (const ShapeError& e) {
            stop("error", e.what());
            return;
        }
        if (!audit.refusal.empty()) {
            stop("fail", audit.refusal);
            return;
        }
    }
    CaseTensors cot = c.backward
                          ? make_tensors(specs_of(family, c, Role::cotangent), c, kCotangentSalt)
                          : CaseTensors{};
    if (c.capture && c.backward) take_captured(c, specs_of(family, c, Role::cotangent), cot);
    // the reference's ops are device-generic: its tensors decide where it runs
    const std::string reference_device =
        options.reference_device == "auto" ? device : options.reference_device;
    const TensorMap reference_in = to_device(in.reference, reference_device);
    Call reference = with_tensors(base, reference_in, to_device(cot.reference, reference_device));
    reference.layout = Layout::head_last;
    if (options.on_stage) options.on_stage("reference");
    const auto reference_start = std::chrono::steady_clock::now();
    const auto reference_results = [&](const Call& call) {
        TensorMap out;
        for (const auto& [name, t] : family.reference(call, c.backward)) {
            if (!t.defined()) continue;  // an optional result the case does not have
            LAV_ASSERT(t.scalar_type() == at::kDouble, "reference result ", name, " is not fp64");
            out[name] = t.cpu();  // the measures run on the CPU, wherever the reference ran
        }
        return out;
    };
    const TensorMap gold = reference_results(reference);
    // every record of the case is measured against this one reference
    const double reference_seconds = seconds_since(reference_start);
    const auto& vs = c.variants;
    const Row* chunk_cpu = registry.rows().find(c.family, "chunk", "cpu");
    if (options.on_intermediates && family.stores_chunk_states && chunk_cpu &&
        std::find(vs.begin(), vs.end(), "chunk") != vs.end()) {
        std::vector<report::Intermediates> dumps;
        try {
            dumps.push_back(chunk_intermediates(c, family, *chunk_cpu,
                                                with_tensors(base, to_device(in.kernel, "cpu"), {}),
                                                with_tensors(reference, reference_in, {})));
        } catch (const InternalError&) {
            throw;
        } catch (const Error&) {
            // a kernel that refuses these inputs says so in the chunk variant's own record
        }
        if (!dumps.empty()) options.on_intermediates(dumps);
    }

    // a failed backward is measured again against the reference without one cotangent, made
    // once per case and cotangent, only when some record needs it
    std::vector<std::string> cotangents;
    for (const auto& [name, t] : cot.reference)
        if (t.defined()) cotangents.push_back(name);
    std::map<std::string, TensorMap> without;
    const auto reference_without = [&](const std::string& name) -> const TensorMap& {
        auto it = without.find(name);
        if (it == without.end()) {
            Call call = reference;
            call.tensors[name] = at::zeros_like(call.tensors.at(name));
            it = without.emplace(name, reference_results(call)).first;
        }
        return it->second;
    };

    const std::string bad_inputs = nonfinite_inputs(in.kernel);
    // the records wait for the case's last kernel: each carries what every kernel declares
    std::vector<CaseRecord> records;
    std::vector<Ran> ran;  // the records whose kernel ran, for the comparisons between them
    for (const auto& variant : c.variants)
        for (const auto& backend : options.backends) {
            const Choice choice = choose_row(registry, c.family, variant, base, backend);
            for (const auto& pass : passes_of(c)) {
                CaseRecord r = blank_record(c, variant, choice.backend, pass);
                r.findings = audit.findings;
                r.trace = audit.trace;
                if (options.on_stage) options.on_stage(r.id);
                const bool backward = pass == "bwd";
                const auto start = std::chrono::steady_clock::now();
                const double jit_before = jit_seconds();
                r.reference_seconds = reference_seconds;
                std::optional<std::chrono::steady_clock::time_point> kernel_start;
                try {
                    LAV_CHECK(choice.row,
                              registry.rows().absence(c.family, variant, choice.backend));
                    const Row& row = *choice.row;
                    kernel_start = std::chrono::steady_clock::now();
                    Call call =
                        with_tensors(base, to_device(in.kernel, row.device),
                                     backward ? to_device(cot.kernel, row.device) : TensorMap{});
                    const TensorMap raw = run_row(row, call, backward, r);
                    // kernels run asynchronously on a GPU: its time ends when the device is done
                    if (row.device == "cuda") at::detail::getCUDAHooks().deviceSynchronize(-1);
                    r.kernel_seconds = seconds_since(*kernel_start);
                    const std::vector<MeasuredSpec> measured = measured_of(family, c, backward);
                    const TensorMap results = measured_results(c, measured, raw);
                    r.contract = row.contract(call, backward);
                    if (backward) add_cotangents(cot.kernel, r.contract);
                    // lav's rows give every declared result; a kernel lav did not write may
                    // leave one out (FLA's chunk_hgrn has no dh0): the record is judged on the
                    // rest, so that what those show (a dropped dht) is not lost, and says so
                    std::string missing;
                    for (const auto& m : measured) {
                        LAV_ASSERT(results.count(m.name) || !row.automatic, variant,
                                   " returned no ", m.name);
                        if (results.count(m.name))
                            judge(c, m, results.at(m.name), gold.at(m.name), r.contract, bad_inputs,
                                  r);
                        else
                            missing += (missing.empty() ? "" : ", ") + m.name;
                    }
                    if (backward)
                        for (auto& f : dropped_cotangents(c, cotangents, results, r.metrics,
                                                          reference_without))
                            r.findings.push_back(std::move(f));
                    if (!missing.empty()) {
                        r.verdict = "error";
                        r.message = row.backend + " " + variant + " " + c.family + " gives no " +
                                    missing + "; judged on the " +
                                    (backward ? "gradients" : "outputs") +
                                    " it gives, the record cannot pass without every one " +
                                    c.family + " declares";
                    } else {
                        if (options.decompose)
                            for (auto& f :
                                 decompose(c, row, call, backward, measured, gold, r.metrics))
                                r.findings.push_back(std::move(f));
                        ran.push_back({records.size(), &row, call, backward, results});
                    }
                } catch (const InternalError&) {
                    throw;
                } catch (const std::exception& e) {
                    r.verdict = "error";
                    r.message = e.what();
                    // a kernel that raised ran until it did (FLA compiles, then refuses)
                    if (kernel_start && r.kernel_seconds == 0)
                        r.kernel_seconds = seconds_since(*kernel_start);
                }
                // the record's wall time: the case's reference, its kernel, measures and checks
                r.seconds = reference_seconds + seconds_since(start);
                // an outside kernel that refuses after compiling (FLA) spent it all the same
                r.jit_seconds = jit_seconds() - jit_before;
                records.push_back(std::move(r));
            }
        }
    add_equivalence(c, family, measured_of(family, c, false), measured_of(family, c, true), gold,
                    ran, options.equivalence, records);
    for (const Ran& r : ran)
        decide(records[r.record], options.strict_boundary && audit.boundary_mismatch,
               options.fail_on);
    std::vector<report::TraceRow> declared;
    for (const CaseRecord& r : records) {
        const std::vector<report::TraceRow> rows = declared_rows(r);
        declared.insert(declared.end(), rows.begin(), rows.end());
    }
    for (CaseRecord& r : records) {
        r.trace.insert(r.trace.end(), declared.begin(), declared.end());
        sink(std::move(r));
    }
}

}  // namespace lav::harness
