// src/report/gate.cpp — matching runs to baselines and deciding regressions.
#include "report/gate.h"

#include <cmath>
#include <cstdio>

#include "core/text.h"
#include "report/diff.h"

namespace lav::report {
namespace {

double measure_of(const MetricRow& row, const std::string& measure) {
    if (measure == "rel_rmse") return row.rel_rmse;
    if (measure == "max_abs") return row.max_abs;
    if (measure == "max_rel") return row.max_rel;
    return static_cast<double>(row.nonfinite);
}

std::map<std::string, const CaseRecord*> by_id(const Report& r) {
    std::map<std::string, const CaseRecord*> out;
    for (const auto& c : r.cases) out[c.id] = &c;
    return out;
}

/// NaN or Inf in a tensor the baseline has no row for: nothing to compare it with, and never
/// good. `why` says which kind of new.
void check_new_tensor(const std::string& case_id, const MetricRow& row, const GateOptions& options,
                      const char* why, GateResult& result) {
    for (const auto& [measure, tol] : options.tolerances) {
        const double now = measure_of(row, measure);
        const bool bad = measure == "nonfinite" ? now > 0 : !std::isfinite(now);
        if (bad)
            result.regressions.push_back(
                {case_id, row.tensor, measure, 0, now, std::string(why) + ": " + sci(now, 3)});
    }
}

void compare_case(const CaseRecord& run, const CaseRecord& base, const GateOptions& options,
                  GateResult& result) {
    // a warning is a verdict with a dtype finding: the findings below tell what is new
    const auto good = [](const std::string& v) { return v == "pass" || v == "warn"; };
    if (good(base.verdict) && !good(run.verdict))
        result.regressions.push_back({run.id, "", "verdict", 0, 0,
                                      base.verdict + " -> " + run.verdict + ": " + run.message});
    else if (!good(base.verdict) && good(run.verdict))
        result.improvements.push_back(
            {run.id, "", "verdict", 0, 0, base.verdict + " -> " + run.verdict});
    for (const Finding& f : run.findings) {
        if (!is_dtype_finding(f.kind)) continue;
        bool known = false;
        for (const Finding& b : base.findings)
            known = known || (b.kind == f.kind && b.tensor == f.tensor);
        if (!known)
            result.regressions.push_back(
                {run.id, f.tensor, f.kind, 0, 0,
                 "a dtype finding the baseline did not have: " + f.message});
    }
    for (const auto& b : base.metrics) {
        const MetricRow* r = nullptr;
        for (const auto& row : run.metrics)
            if (row.tensor == b.tensor) r = &row;
        if (!r) {
            result.regressions.push_back({run.id, b.tensor, "tensor", 0, 0, "no longer measured"});
            continue;
        }
        for (const auto& [measure, tol] : options.tolerances) {
            const double was = measure_of(b, measure);
            const double now = measure_of(*r, measure);
            // NaN never compares greater, so a measure that became NaN is caught explicitly
            const bool became_nan = std::isnan(now) && !std::isnan(was);
            if (!std::isfinite(was)) {
                // only with --allow-nonfinite-baseline: no bound to exceed, but a finite value
                // is a kernel fixed
                if (became_nan)
                    result.regressions.push_back({run.id, b.tensor, measure, was, now, ""});
                else if (std::isfinite(now))
                    result.improvements.push_back({run.id, b.tensor, measure, was, now, ""});
                continue;
            }
            if (became_nan || (now > tol.floor && now > was * (1.0 + tol.slack)))
                result.regressions.push_back({run.id, b.tensor, measure, was, now, ""});
            else if (was > tol.floor && now < was / (1.0 + tol.slack))
                result.improvements.push_back({run.id, b.tensor, measure, was, now, ""});
        }
    }
    for (const auto& r : run.metrics) {
        bool known = false;
        for (const auto& b : base.metrics) known = known || b.tensor == r.tensor;
        if (!known)
            check_new_tensor(run.id, r, options, "a new tensor, not in the baseline", result);
    }
}

void print_changes(std::ostream& out, const char* title, const std::vector<GateChange>& changes) {
    if (changes.empty()) return;
    out << title << " (" << changes.size() << "):\n";
    for (const auto& c : changes) {
        out << "  " << c.case_id;
        if (!c.tensor.empty()) out << "  tensor " << c.tensor;
        out << "  " << c.measure;
        if (c.note.empty())
            out << "  " << sci(c.baseline, 3) << " -> " << sci(c.run, 3) << "  (x"
                << (c.baseline > 0 ? sci(c.run / c.baseline, 3) : std::string("inf")) << ")";
        else
            out << "  " << c.note;
        out << "\n";
    }
}

}  // namespace

std::map<std::string, Tolerance> default_tolerances() {
    // rel_rmse is the headline measure and is stable run to run on one machine; the max
    // measures follow single elements and move more; any new NaN or Inf is a regression
    return {{"rel_rmse", {0.10, 1e-6}},
            {"max_rel", {0.50, 1e-4}},
            {"max_abs", {0.50, 1e-6}},
            {"nonfinite", {0.0, 0.0}}};
}

bool GateResult::passed(const GateOptions& options) const {
    const bool missing = !missing_in_run.empty() || !missing_in_baseline.empty();
    return regressions.empty() && (options.allow_missing || !missing);
}

GateResult gate(const Report& run, const Report& baseline, const GateOptions& options) {
    GateResult result;
    result.environment = environment_changes(baseline.run, run.run, /*with_lav=*/false);
    const auto runs = by_id(run);
    const auto bases = by_id(baseline);
    for (const auto& [id, base] : bases) {
        const auto it = runs.find(id);
        if (it == runs.end()) {
            result.missing_in_run.push_back(id);
            continue;
        }
        ++result.compared;
        compare_case(*it->second, *base, options, result);
    }
    for (const auto& [id, r] : runs) {
        if (bases.count(id)) continue;
        result.missing_in_baseline.push_back(id);
        for (const auto& row : r->metrics)
            check_new_tensor(id, row, options, "a new case, not in the baseline", result);
    }
    return result;
}

void print_gate(std::ostream& out, const GateResult& result, const GateOptions& options) {
    if (!result.environment.empty()) {
        out << "the run's machine or software differs from the baseline's (baseline -> run):\n";
        for (const auto& line : result.environment) out << "  " << line << "\n";
    }
    print_changes(out, "regressions", result.regressions);
    print_changes(out, "improvements", result.improvements);
    if (!result.missing_in_run.empty()) {
        out << "missing from the run (" << result.missing_in_run.size() << "):\n";
        for (const auto& id : result.missing_in_run) out << "  " << id << "\n";
    }
    if (!result.missing_in_baseline.empty()) {
        out << "not in the baseline (" << result.missing_in_baseline.size() << "):\n";
        for (const auto& id : result.missing_in_baseline) out << "  " << id << "\n";
    }
    out << (result.passed(options) ? "GATE PASS" : "GATE FAIL") << ": " << result.compared
        << " cases compared, " << result.regressions.size() << " regressions, "
        << result.improvements.size() << " improvements, "
        << result.missing_in_run.size() + result.missing_in_baseline.size() << " missing"
        << (options.allow_missing ? " (allowed)" : "") << "\n";
}

Report make_baseline(const Report& run) {
    Report base = run;
    for (auto& c : base.cases) {
        c.drift.clear();
        c.contract = {};
        // the dtype findings stay: the gate fails on one the baseline did not have
        std::vector<Finding> kept;
        for (const Finding& f : c.findings)
            if (is_dtype_finding(f.kind)) kept.push_back(f);
        c.findings = kept;
        c.trace.clear();
        // where the worst element sat is the run's story, not the gate's: it compares measures
        for (auto& m : c.metrics) m.max_abs_index.clear();
    }
    return base;
}

}  // namespace lav::report
