// src/report/writer.cpp — a Report's HDF5 layout (reports/SCHEMA.md) and the one-shot
// write_report; no reading here.
#include <cmath>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <utility>

#include "report/layout.h"

namespace lav::report {
namespace {

std::string case_group_name(size_t index) {
    // zero-padded so that viewers list the groups in case order
    char name[32];
    std::snprintf(name, sizeof name, "%04zu", index);
    return name;
}

/// The column made of `get(row)` for every row.
template <typename Row, typename Get>
h5::ColumnValues column_of(const std::vector<Row>& rows, Get get) {
    std::vector<std::decay_t<std::invoke_result_t<Get, const Row&>>> values;
    values.reserve(rows.size());
    for (const auto& row : rows) values.push_back(get(row));
    return values;
}

}  // namespace

namespace layout {

void write_run(const h5::File& file, const Report& report) {
    const RunInfo& run = report.run;
    h5::write_attribute(file, "schema_version", int32_t{kSchemaVersion});
    h5::write_attribute(file, "complete", int32_t{report.complete ? 1 : 0});
    h5::write_attribute(file, "lav_version", run.lav_version);
    h5::write_attribute(file, "git_commit", run.git_commit);
    h5::write_attribute(file, "torch_version", run.torch_version);
    h5::write_attribute(file, "hdf5_version", run.hdf5_version);
    h5::write_attribute(file, "device", run.device);
    h5::write_attribute(file, "providers", run.providers);
    h5::write_attribute(file, "command_line", run.command_line);
    h5::write_attribute(file, "started_at", run.started_at);
    h5::write_attribute(file, "seed", run.seed);
    h5::write_attribute(file, "shard", run.shard);
    h5::write_attribute(file, "selection", run.selection);
    h5::write_attribute(file, "case_count", static_cast<int32_t>(report.cases.size()));
    h5::write_table(file, "scenarios",
                    {{"path", run.scenario_paths}, {"text", run.scenario_texts}});
}

h5::Table summary_rows(const std::vector<CaseRecord>& all, size_t begin, size_t end) {
    // a case without metrics (one that could not run) has no worst tensor
    constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    using C = CaseRecord;
    const std::vector<CaseRecord> cases(all.begin() + static_cast<ptrdiff_t>(begin),
                                        all.begin() + static_cast<ptrdiff_t>(end));
    return {
        {"id", column_of(cases, [](const C& c) { return c.id; })},
        {"scenario", column_of(cases, [](const C& c) { return c.scenario; })},
        {"family", column_of(cases, [](const C& c) { return c.family; })},
        {"variant", column_of(cases, [](const C& c) { return c.variant; })},
        {"backend", column_of(cases, [](const C& c) { return c.backend; })},
        {"pass", column_of(cases, [](const C& c) { return c.pass; })},
        {"input_dtype", column_of(cases, [](const C& c) { return c.input_dtype; })},
        {"state_dtype", column_of(cases, [](const C& c) { return c.state_dtype; })},
        {"layout", column_of(cases, [](const C& c) { return c.layout; })},
        {"shape", column_of(cases, [](const C& c) { return c.shape; })},
        {"verdict", column_of(cases, [](const C& c) { return c.verdict; })},
        {"findings", column_of(cases, [](const C& c) { return finding_summary(c); })},
        {"worst_tensor", column_of(cases,
                                   [](const C& c) {
                                       const MetricRow* w = c.worst();
                                       return w != nullptr ? w->tensor : std::string();
                                   })},
        {"worst_rel_rmse", column_of(cases,
                                     [](const C& c) {
                                         const MetricRow* w = c.worst();
                                         return w != nullptr ? w->rel_rmse : kNone;
                                     })},
        {"worst_bound", column_of(cases,
                                  [](const C& c) {
                                      const MetricRow* w = c.worst();
                                      return w != nullptr ? w->bound : kNone;
                                  })},
        {"seconds", column_of(cases, [](const C& c) { return c.seconds; })},
    };
}

void write_case(const h5::Group& cases, size_t index, const CaseRecord& c) {
    h5::Group group = cases.create_group(case_group_name(index));
    h5::write_attribute(group, "id", c.id);
    h5::write_attribute(group, "scenario_file", c.scenario_file);
    h5::write_attribute(group, "scenario", c.scenario);
    h5::write_attribute(group, "family", c.family);
    h5::write_attribute(group, "variant", c.variant);
    h5::write_attribute(group, "backend", c.backend);
    h5::write_attribute(group, "pass", c.pass);
    h5::write_attribute(group, "input_dtype", c.input_dtype);
    h5::write_attribute(group, "gate_dtype", c.gate_dtype);
    h5::write_attribute(group, "state_dtype", c.state_dtype);
    h5::write_attribute(group, "output_dtype", c.output_dtype);
    h5::write_attribute(group, "layout", c.layout);
    h5::write_attribute(group, "shape", c.shape);
    h5::write_attribute(group, "cu_seqlens", c.cu_seqlens);
    h5::write_attribute(group, "verdict", c.verdict);
    h5::write_attribute(group, "message", c.message);
    h5::write_attribute(group, "kernel", c.contract.kernel);
    h5::write_attribute(group, "seed", c.seed);
    h5::write_attribute(group, "seconds", c.seconds);

    using M = MetricRow;
    h5::write_table(
        group, "metrics",
        {
            {"tensor", column_of(c.metrics, [](const M& m) { return m.tensor; })},
            {"dtype", column_of(c.metrics, [](const M& m) { return m.dtype; })},
            {"expected_dtype", column_of(c.metrics, [](const M& m) { return m.expected_dtype; })},
            {"rel_rmse", column_of(c.metrics, [](const M& m) { return m.rel_rmse; })},
            {"max_abs", column_of(c.metrics, [](const M& m) { return m.max_abs; })},
            {"max_abs_index", column_of(c.metrics, [](const M& m) { return m.max_abs_index; })},
            {"max_rel", column_of(c.metrics, [](const M& m) { return m.max_rel; })},
            {"nonfinite", column_of(c.metrics, [](const M& m) { return m.nonfinite; })},
            {"bound", column_of(c.metrics, [](const M& m) { return m.bound; })},
            {"pass", column_of(c.metrics, [](const M& m) { return static_cast<uint8_t>(m.pass); })},
        });

    using I = ContractItem;
    const std::vector<ContractItem>& items = c.contract.items;
    h5::write_table(
        group, "contract",
        {
            {"item", column_of(items, [](const I& i) { return i.item; })},
            {"dtype",
             column_of(items, [](const I& i) { return std::string(dtype_name(i.dtype)); })},
            {"note", column_of(items, [](const I& i) { return i.note; })},
        });

    using F = Finding;
    h5::write_table(group, "findings",
                    {
                        {"kind", column_of(c.findings, [](const F& f) { return f.kind; })},
                        {"tensor", column_of(c.findings, [](const F& f) { return f.tensor; })},
                        {"message", column_of(c.findings, [](const F& f) { return f.message; })},
                        {"history", column_of(c.findings, [](const F& f) { return f.history; })},
                    });

    using R = TraceRow;
    h5::write_table(
        group, "trace",
        {
            {"seq", column_of(c.trace, [](const R& r) { return r.seq; })},
            {"op", column_of(c.trace, [](const R& r) { return r.op; })},
            {"depth", column_of(c.trace, [](const R& r) { return r.depth; })},
            {"autocast",
             column_of(c.trace, [](const R& r) { return static_cast<uint8_t>(r.autocast); })},
            {"inputs", column_of(c.trace, [](const R& r) { return r.inputs; })},
            {"outputs", column_of(c.trace, [](const R& r) { return r.outputs; })},
            {"source", column_of(c.trace, [](const R& r) { return r.source; })},
            {"kernel", column_of(c.trace, [](const R& r) { return r.kernel; })},
        });

    // creation order keeps the curves in the order the case measured them
    h5::Group drift = group.create_group("drift", h5::Order::kCreation);
    for (const DriftCurve& curve : c.drift) {
        h5::Dataset dataset = h5::write_doubles(drift, curve.tensor, curve.rel_rmse);
        h5::write_attribute(dataset, "block", curve.block);
    }
}

}  // namespace layout

namespace {

/// Writes the whole report into a new file at `path`.
void write_file(const std::string& path, const Report& report) {
    h5::File file = h5::File::create(path);
    layout::write_run(file, report);
    h5::write_table(file, "summary", layout::summary_rows(report.cases, 0, report.cases.size()));
    {
        h5::Group cases = file.create_group("cases");
        for (size_t i = 0; i < report.cases.size(); ++i)
            layout::write_case(cases, i, report.cases[i]);
    }
    file.close();
}

}  // namespace

const MetricRow* CaseRecord::worst() const {
    // rows with a bound rank by rel_rmse / bound, ahead of rows without one (ranked by rel_rmse);
    // a NaN error is the worst there is
    const auto rank = [](const MetricRow& m) {
        const double ratio = m.bound > 0 ? m.rel_rmse / m.bound : m.rel_rmse;
        return std::make_pair(m.bound > 0,
                              std::isnan(ratio) ? std::numeric_limits<double>::infinity() : ratio);
    };
    const MetricRow* worst = nullptr;
    for (const MetricRow& m : metrics)
        if (worst == nullptr || rank(*worst) < rank(m)) worst = &m;
    return worst;
}

void write_report(const std::string& path, const Report& report) {
    h5::write_file_atomically(path, "report",
                              [&](const std::string& temporary) { write_file(temporary, report); });
}

}  // namespace lav::report
