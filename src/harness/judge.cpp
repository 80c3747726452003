// src/harness/judge.cpp — measures, findings and verdicts of one record.
#include "harness/judge.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/dtype.h"
#include "core/layout.h"
#include "core/text.h"
#include "core/varlen.h"
#include "metrics/bounds.h"
#include "metrics/drift.h"
#include "metrics/measures.h"

namespace lav::harness {
namespace {

using report::CaseRecord;
using report::MetricRow;
using scenario::Case;

// a flushed share above this is an UNDERFLOW finding: below it, zeros are the odd tiny value
constexpr double kFlushedShare = 0.01;

const char* kind_name(metrics::TensorKind kind) {
    switch (kind) {
        case metrics::TensorKind::output:
            return "an output";
        case metrics::TensorKind::state:
            return "a final state";
        case metrics::TensorKind::gradient:
            return "a gradient";
        case metrics::TensorKind::gate_grad:
            return "a gate gradient";
    }
    return "a tensor";
}

struct Bound {
    double value;
    std::string source;  ///< where it comes from, for the TOLERANCE message
};

Bound bound_for(const Case& c, const MeasuredSpec& m) {
    const auto it = c.tolerances.find(m.name);
    if (it != c.tolerances.end()) return {it->second, "[tolerances] " + m.name + " of " + c.file};
    return {metrics::default_bound(m.kind, c.input_dtype, c.state_dtype),
            std::string("default for ") + kind_name(m.kind) + " from " +
                std::string(dtype_name(c.input_dtype)) + " inputs, " + state_dtype_text(c) +
                " states"};
}

// final states and the gradients of initial states (dh0, and gsa's dhk0, dhv0, mesa_net's
// dh_kk0, dh_kv0, ...: "dh...0") are states: a wrong dtype there breaks the requested storage
bool is_state(const MeasuredSpec& m) {
    const std::string& n = m.name;
    const bool initial_state_grad = n.size() >= 3 && n.compare(0, 2, "dh") == 0 && n.back() == '0';
    return m.kind == metrics::TensorKind::state || initial_state_grad;
}

std::string percent(int64_t part, int64_t whole) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", whole ? 100.0 * part / whole : 0.0);
    return buf;
}

std::string tolerance_message(const metrics::Measures& ms, const Bound& bound, int64_t beyond,
                              int64_t numel, const std::string& bad_inputs) {
    std::string text = "rel_rmse " + sci(ms.rel_rmse) + " > bound " + sci(bound.value) + " (" +
                       bound.source + "); ";
    if (ms.ref_nonfinite > 0)
        text += "the reference holds " + std::to_string(ms.ref_nonfinite) + " NaN/Inf too" +
                (bad_inputs.empty() ? "" : ": the kernel's inputs did (" + bad_inputs + ")") + "; ";
    if (ms.all_nonfinite) return text + "all " + std::to_string(numel) + " values are NaN/Inf";
    return text + std::to_string(beyond) + " of " + std::to_string(numel) + " elements (" +
           percent(beyond, numel) + ") out of bound; worst |Δ| " + sci(ms.max_abs) + " at " +
           bracketed(ms.max_abs_index) + ": " + sci(ms.worst_value, 4) + ", reference " +
           sci(ms.worst_reference, 4);
}

// each position's place in its chunk; chunks restart at every sequence of a varlen batch. A
// tensor over sub-steps (gated_delta_product's k, v and beta: T·n rows, its chunks cut in
// sub-steps) has sequences n times as long.
void chunk_positions(const Case& c, int64_t T, std::vector<int64_t>& offset,
                     std::vector<int64_t>& length) {
    offset.assign(T, 0);
    length.assign(T, 0);
    std::vector<int64_t> cu = c.cu_seqlens;
    if (!cu.empty() && T != c.T) {
        if (c.T <= 0 || T % c.T != 0) cu.clear();
        for (int64_t& at : cu) at *= T / c.T;
    }
    for (const Sequence& s : sequences(1, T, cu))
        for (int64_t p = s.begin; p < s.end; ++p) {
            const int64_t start = s.begin + (p - s.begin) / c.chunk_size * c.chunk_size;
            offset[p] = p - start;
            length[p] = std::min(c.chunk_size, s.end - start);
        }
}

void add_drift_findings(const Case& c, const MeasuredSpec& m, const metrics::Measures& ms,
                        double bound, CaseRecord& r) {
    const metrics::Growth growth = metrics::fit_growth(ms.drift, c.chunk_size);
    size_t above = 0;
    while (above < ms.drift.size() && !(ms.drift[above] > bound)) ++above;
    if (growth.real && above < ms.drift.size())
        r.findings.push_back(
            {"DRIFT", m.name,
             "rel_rmse grows " + sci(growth.per_1000) + " ± " + sci(growth.stderr_per_1000) +
                 " per 1,000 positions (" + sci(ms.drift.front()) + " in the first block, " +
                 sci(ms.drift.back()) + " in the last) and crosses bound " + sci(bound) +
                 " at position " + std::to_string(above * c.chunk_size),
             ""});
    // the B rows of a batch share the chunk grid, so their positions add up along dim 1
    if (r.variant != "chunk" || ms.err2.empty()) return;
    std::vector<int64_t> offset, length;
    chunk_positions(c, static_cast<int64_t>(ms.err2.size()), offset, length);
    const metrics::EdgeContrast edges = metrics::edge_contrast(ms.err2, ms.ref2, offset, length);
    if (edges.spike) {
        char ratio[32];
        std::snprintf(ratio, sizeof ratio, "%.1f", edges.ratio);
        r.findings.push_back(
            {"CHUNK_BOUNDARY", m.name,
             std::string("rel_rmse at the first and last position of a chunk is ") + ratio +
                 "× that inside chunks (z = " + sci(edges.z, 1) + " over the chunks of " +
                 std::to_string(c.chunk_size) + ")",
             ""});
    }
}

}  // namespace

TensorMap measured_results(const Case& c, const std::vector<MeasuredSpec>& measured,
                           const TensorMap& results) {
    TensorMap out;
    for (const MeasuredSpec& m : measured) {
        const auto it = results.find(m.name);
        if (it == results.end() || !it->second.defined()) continue;
        const at::Tensor t = it->second.cpu();
        out[m.name] = m.time_dim >= 0 ? to_head_last(t, c.layout) : t;
    }
    return out;
}

std::string nonfinite_inputs(const TensorMap& inputs) {
    std::string out;
    for (const auto& [name, t] : inputs) {
        if (!t.defined() || !at::isFloatingType(t.scalar_type())) continue;
        const int64_t n = at::logical_not(at::isfinite(t)).sum().item<int64_t>();
        if (n > 0) out += (out.empty() ? "" : ", ") + name + ": " + std::to_string(n) + " NaN/Inf";
    }
    return out;
}

void judge(const Case& c, const MeasuredSpec& m, const at::Tensor& x, const at::Tensor& ref,
           const PrecisionContract& contract, const std::string& bad_inputs, CaseRecord& r) {
    const metrics::Measures ms = metrics::measure(x, ref, m.time_dim, c.chunk_size);
    const Bound bound = bound_for(c, m);
    MetricRow row;
    row.tensor = m.name;
    row.dtype = scalar_type_name(x.scalar_type());
    row.expected_dtype = dtype_name(contract.dtype_of(m.name));
    row.rel_rmse = ms.rel_rmse;
    row.max_abs = ms.max_abs;
    row.max_abs_index = bracketed(ms.max_abs_index);
    row.max_rel = ms.max_rel;
    row.nonfinite = ms.nonfinite;
    row.bound = bound.value;
    // written as a negation so that a NaN rel_rmse fails
    row.pass = !(ms.rel_rmse > row.bound) && !std::isnan(ms.rel_rmse) && ms.nonfinite == 0;

    if (ms.nonfinite > 0)
        r.findings.push_back(
            {"NONFINITE", m.name,
             std::to_string(ms.nonfinite) + " of " + std::to_string(x.numel()) +
                 " values NaN/Inf where the reference is finite; " +
                 (bad_inputs.empty()
                      ? "the kernel's inputs were finite: the kernel made them"
                      : "the kernel received non-finite inputs (" + bad_inputs + ")"),
             ""});
    if (!(ms.rel_rmse <= row.bound))
        r.findings.push_back(
            {"TOLERANCE", m.name,
             tolerance_message(ms, bound, metrics::count_beyond(x, ref, bound.value), x.numel(),
                               bad_inputs),
             ""});
    if (ms.ref_nonzero > 0 && ms.flushed > kFlushedShare * static_cast<double>(ms.ref_nonzero))
        r.findings.push_back({"UNDERFLOW", m.name,
                              std::to_string(ms.flushed) + " of " + std::to_string(ms.ref_nonzero) +
                                  " values the reference keeps non-zero (" +
                                  percent(ms.flushed, ms.ref_nonzero) + ", above 1%) are below " +
                                  row.dtype +
                                  "'s normal range and flushed to 0 (the "
                                  "largest of them " +
                                  sci(ms.largest_flushed) + ")",
                              ""});
    if (row.dtype != row.expected_dtype) {
        row.pass = false;
        r.findings.push_back(
            {is_state(m) ? "STATE_DTYPE_CONTRACT" : "OUTPUT_DTYPE_CONTRACT", m.name,
             "returned " + row.dtype + ", contract declares " + row.expected_dtype, ""});
    }
    add_drift_findings(c, m, ms, row.bound, r);
    if (!ms.drift.empty()) r.drift.push_back({m.name, c.chunk_size, ms.drift});
    r.metrics.push_back(std::move(row));
}

void decide(CaseRecord& r, bool refused_boundary, const std::set<std::string>& fail_on) {
    bool measures_pass = true;
    for (const MetricRow& m : r.metrics) measures_pass = measures_pass && m.pass;
    const report::Finding* failing = nullptr;
    const report::Finding* dtype = nullptr;
    for (const report::Finding& f : r.findings) {
        if (!failing && fail_on.count(f.kind)) failing = &f;
        if (!dtype && report::is_dtype_finding(f.kind)) dtype = &f;
    }
    r.verdict = "fail";
    if (!measures_pass)
        r.message = "a measure is outside its bound or contract";
    else if (refused_boundary)
        r.message =
            "a kernel input reached the kernel in a dtype, shape or layout its contract refuses";
    else if (failing)
        r.message = "--fail-on " + failing->kind + ": " + failing->tensor + ": " + failing->message;
    else if (dtype) {
        r.verdict = "warn";
        r.message = "the measures pass, with dtype findings (" + dtype->kind + " " + dtype->tensor +
                    (r.findings.size() > 1 ? ", ..." : "") + ")";
    } else {
        r.verdict = "pass";
        r.message.clear();
    }
}

}  // namespace lav::harness
