// src/report/views.cpp — one case in full, the findings by kind and the backends side by side,
// as console tables.
#include "report/views.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/dtype.h"
#include "core/text.h"

namespace lav::report {
namespace {

size_t kind_rank(const std::string& kind) {
    const auto& kinds = finding_kinds();
    return static_cast<size_t>(std::find(kinds.begin(), kinds.end(), kind) - kinds.begin());
}

// "case: chunk/cpu/fwd, chunk/cpu/bwd; other: ...": record ids grouped by case, in order
std::string by_case(const std::vector<std::string>& ids) {
    std::string out, current;
    for (const auto& id : ids) {
        const std::string stem = case_of(id);
        const std::string rest = id.size() > stem.size() ? id.substr(stem.size() + 1) : id;
        if (stem != current) {
            out += (out.empty() ? "" : "; ") + stem + ": " + rest;
            current = stem;
        } else {
            out += ", " + rest;
        }
    }
    return out;
}

}  // namespace

std::vector<const CaseRecord*> records_named(const Report& report, const std::string& id) {
    std::vector<const CaseRecord*> out;
    for (const auto& r : report.cases)
        if (r.id == id) return {&r};
    // a case id, or "<case>/<variant>": whole parts of the record id, not a prefix of its case's
    for (const auto& r : report.cases) {
        const std::string stem = case_of(r.id);
        if (r.id.rfind(id + "/", 0) == 0 && (id == stem || id.rfind(stem + "/", 0) == 0))
            out.push_back(&r);
    }
    return out;
}

std::vector<FindingGroup> group_findings(const Report& report) {
    std::vector<FindingGroup> groups;
    std::map<std::array<std::string, 4>, size_t> index;
    for (const auto& r : report.cases)
        for (const auto& f : r.findings) {
            const auto [it, fresh] =
                index.emplace(std::array{f.kind, f.tensor, f.message, f.history}, groups.size());
            if (fresh) groups.push_back({f, {}});
            auto& records = groups[it->second].records;
            if (records.empty() || records.back() != r.id) records.push_back(r.id);
        }
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return kind_rank(a.finding.kind) < kind_rank(b.finding.kind);
    });
    return groups;
}

void print_record(std::ostream& out, const CaseRecord& record, const View& view) {
    print_case_failure(out, record, view);
    if (!record.metrics.empty()) {
        std::vector<std::vector<std::string>> rows = {{"  tensor", "dtype", "expected", "rel_rmse",
                                                       "bound", "max_abs", "at", "max_rel",
                                                       "nonfinite", "pass"}};
        for (const auto& m : record.metrics)
            rows.push_back({"  " + m.tensor, m.dtype, m.expected_dtype, sci(m.rel_rmse, 3),
                            sci(m.bound, 3), sci(m.max_abs, 3), m.max_abs_index, sci(m.max_rel, 3),
                            std::to_string(m.nonfinite), m.pass ? "yes" : "no"});
        out << '\n';
        print_columns(out, rows);
    }
    if (record.contract.items.empty()) return;
    out << "\n  precision contract of " << record.contract.kernel << ": "
        << record.contract.summary() << '\n';
    std::vector<std::vector<std::string>> rows = {{"    item", "dtype", "note"}};
    for (const auto& item : record.contract.items)
        rows.push_back({"    " + item.item, std::string(dtype_name(item.dtype)), item.note});
    print_columns(out, rows);
}

void print_trace(std::ostream& out, const std::vector<TraceRow>& trace) {
    if (trace.empty()) {
        out << "trace: none (no prologue, no kernel that declares its items)\n";
        return;
    }
    std::vector<std::vector<std::string>> rows = {
        {"seq", "op", "inputs", "outputs", "autocast", "source", "kernel"}};
    for (const auto& t : trace)
        rows.push_back(
            {t.seq < 0 ? "-" : std::to_string(t.seq),
             std::string(2 * static_cast<size_t>(std::max<int64_t>(t.depth, 0)), ' ') + t.op,
             t.inputs.empty() ? "-" : t.inputs, t.outputs, t.autocast ? "yes" : "no", t.source,
             t.kernel.empty() ? "-" : t.kernel});
    out << "trace:\n";
    print_columns(out, rows);
}

void print_findings_by_kind(std::ostream& out, const Report& report) {
    const std::vector<FindingGroup> groups = group_findings(report);
    if (groups.empty()) out << "no findings in " << plural(report.cases.size(), "record") << '\n';
    for (size_t i = 0; i < groups.size();) {
        const std::string& kind = groups[i].finding.kind;
        size_t end = i;
        size_t records = 0;
        for (; end < groups.size() && groups[end].finding.kind == kind; ++end)
            records += groups[end].records.size();
        out << (i == 0 ? "" : "\n") << kind << ": " << plural(end - i, "finding") << " in "
            << plural(records, "record") << '\n';
        for (; i < end; ++i) {
            const Finding& f = groups[i].finding;
            out << "  " << (f.tensor.empty() ? "" : f.tensor + ": ") << f.message << '\n';
            if (!f.history.empty()) out << "      " << f.history << '\n';
            out << "    in " << by_case(groups[i].records) << '\n';
        }
    }
}

std::vector<BackendSide> backends_side_by_side(const Report& report) {
    std::map<std::pair<std::string, std::string>, BackendSide> sides;
    for (const auto& r : report.cases) {
        BackendSide& side = sides[{r.family, r.backend}];
        side.family = r.family;
        side.backend = r.backend;
        side.verdicts.add(r.verdict);
        BackendSide::Worst& worst = r.pass == "bwd" ? side.bwd : side.fwd;
        for (const auto& m : r.metrics) {
            const double held = worst.metric ? worst.metric->rel_rmse : 0;
            const bool worse =
                !worst.metric || (std::isnan(m.rel_rmse) && !std::isnan(held)) || m.rel_rmse > held;
            if (worse) worst = {&r, &m};
        }
    }
    std::vector<BackendSide> out;
    for (auto& [key, side] : sides) out.push_back(std::move(side));
    return out;
}

void print_backends(std::ostream& out, const Report& report) {
    const auto worst = [](const BackendSide::Worst& w) {
        return w.metric ? sci(w.metric->rel_rmse) + " " + w.record->variant + " " + w.metric->tensor
                        : std::string("-");
    };
    std::vector<std::vector<std::string>> rows = {{"family", "backend", "records", "pass", "warn",
                                                   "fail", "error", "worst fwd", "worst bwd"}};
    std::string family;
    for (const auto& side : backends_side_by_side(report)) {
        rows.push_back({side.family == family ? "" : side.family, side.backend,
                        std::to_string(side.verdicts.records), std::to_string(side.verdicts.pass),
                        std::to_string(side.verdicts.warn), std::to_string(side.verdicts.fail),
                        std::to_string(side.verdicts.error), worst(side.fwd), worst(side.bwd)});
        family = side.family;
    }
    print_columns(out, rows);
    out << "worst: the largest rel_rmse against the fp64 reference, with its variant and tensor\n";
}

}  // namespace lav::report
