// src/report/writer.cpp — a Report's HDF5 layout (reports/SCHEMA.md) and the one-shot
// write_report; no reading here.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <utility>

#include "report/layout.h"

namespace lav::report {
namespace {

// rows per chunk of every table: an append rewrites the table's last chunk, so a small chunk
// keeps a case's append cheap, and a large one keeps a big run's chunk index short
constexpr size_t kChunkRows = 256;

/// The column made of `get(row)` for every row.
template <typename Row, typename Get>
h5::ColumnValues column_of(const std::vector<Row>& rows, Get get) {
    std::vector<std::decay_t<std::invoke_result_t<Get, const Row&>>> values;
    values.reserve(rows.size());
    for (const auto& row : rows) values.push_back(get(row));
    return values;
}

/// A row of a per-case table and the index of the case it belongs to.
template <typename Row>
struct Keyed {
    int64_t index;
    const Row* row;
};

/// The rows `rows_of(i)` of cases [begin, end), each with its case's index; `rows_of` returns
/// nullptr for a case that writes none.
template <typename Row, typename RowsOf>
std::vector<Keyed<Row>> keyed_rows(size_t begin, size_t end, RowsOf rows_of) {
    std::vector<Keyed<Row>> keyed;
    for (size_t i = begin; i < end; ++i)
        if (const std::vector<Row>* rows = rows_of(i))
            for (const Row& row : *rows) keyed.push_back({static_cast<int64_t>(i), &row});
    return keyed;
}

template <typename Row>
h5::Column case_column(const std::vector<Keyed<Row>>& keyed) {
    return {"case", column_of(keyed, [](const Keyed<Row>& k) { return k.index; })};
}

/// The indices [begin, end).
std::vector<size_t> indices(size_t begin, size_t end) {
    std::vector<size_t> out(end - begin);
    std::iota(out.begin(), out.end(), begin);
    return out;
}

h5::Table summary_rows(const std::vector<CaseRecord>& all, size_t begin, size_t end) {
    // a case without metrics (one that could not run) has no worst tensor
    constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    const std::vector<size_t> rows = indices(begin, end);
    std::vector<const MetricRow*> worst;
    for (const size_t i : rows) worst.push_back(all[i].worst());
    const auto text = [&](std::string CaseRecord::*field) {
        return column_of(rows, [&](size_t i) { return all[i].*field; });
    };
    const auto of_worst = [&](auto get, auto none) {
        return column_of(rows, [&](size_t i) {
            const MetricRow* w = worst[i - begin];
            return w != nullptr ? get(*w) : none;
        });
    };
    return {
        {"id", text(&CaseRecord::id)},
        {"scenario", text(&CaseRecord::scenario)},
        {"family", text(&CaseRecord::family)},
        {"variant", text(&CaseRecord::variant)},
        {"backend", text(&CaseRecord::backend)},
        {"pass", text(&CaseRecord::pass)},
        {"input_dtype", text(&CaseRecord::input_dtype)},
        {"state_dtype", text(&CaseRecord::state_dtype)},
        {"layout", text(&CaseRecord::layout)},
        {"shape", text(&CaseRecord::shape)},
        {"verdict", text(&CaseRecord::verdict)},
        {"findings", column_of(rows, [&](size_t i) { return finding_summary(all[i]); })},
        {"worst_tensor", of_worst([](const MetricRow& m) { return m.tensor; }, std::string())},
        {"worst_rel_rmse", of_worst([](const MetricRow& m) { return m.rel_rmse; }, kNone)},
        {"worst_bound", of_worst([](const MetricRow& m) { return m.bound; }, kNone)},
        {"seconds", column_of(rows, [&](size_t i) { return all[i].seconds; })},
        {"reference_seconds", column_of(rows, [&](size_t i) { return all[i].reference_seconds; })},
        {"kernel_seconds", column_of(rows, [&](size_t i) { return all[i].kernel_seconds; })},
        {"jit_seconds", column_of(rows, [&](size_t i) { return all[i].jit_seconds; })},
    };
}

/// /cases: each case's attributes, and where its trace and contract rows are.
h5::Table case_rows(const std::vector<CaseRecord>& all, const layout::Sharing& sharing,
                    size_t begin, size_t end) {
    const std::vector<size_t> rows = indices(begin, end);
    const auto text = [&](std::string CaseRecord::*field) {
        return column_of(rows, [&](size_t i) { return all[i].*field; });
    };
    return {
        {"id", text(&CaseRecord::id)},
        {"scenario_file", text(&CaseRecord::scenario_file)},
        {"scenario", text(&CaseRecord::scenario)},
        {"family", text(&CaseRecord::family)},
        {"variant", text(&CaseRecord::variant)},
        {"backend", text(&CaseRecord::backend)},
        {"pass", text(&CaseRecord::pass)},
        {"input_dtype", text(&CaseRecord::input_dtype)},
        {"gate_dtype", text(&CaseRecord::gate_dtype)},
        {"state_dtype", text(&CaseRecord::state_dtype)},
        {"output_dtype", text(&CaseRecord::output_dtype)},
        {"layout", text(&CaseRecord::layout)},
        {"shape", text(&CaseRecord::shape)},
        {"cu_seqlens", text(&CaseRecord::cu_seqlens)},
        {"verdict", text(&CaseRecord::verdict)},
        {"message", text(&CaseRecord::message)},
        {"kernel", column_of(rows, [&](size_t i) { return all[i].contract.kernel; })},
        {"seed", column_of(rows, [&](size_t i) { return all[i].seed; })},
        {"seconds", column_of(rows, [&](size_t i) { return all[i].seconds; })},
        {"reference_seconds", column_of(rows, [&](size_t i) { return all[i].reference_seconds; })},
        {"kernel_seconds", column_of(rows, [&](size_t i) { return all[i].kernel_seconds; })},
        {"jit_seconds", column_of(rows, [&](size_t i) { return all[i].jit_seconds; })},
        {"trace_case", column_of(rows, [&](size_t i) { return sharing.trace_of(i); })},
        {"contract_case", column_of(rows, [&](size_t i) { return sharing.contract_of(i); })},
    };
}

h5::Table metric_rows(const std::vector<CaseRecord>& all, size_t begin, size_t end) {
    using K = Keyed<MetricRow>;
    const std::vector<K> rows =
        keyed_rows<MetricRow>(begin, end, [&](size_t i) { return &all[i].metrics; });
    return {
        case_column(rows),
        {"tensor", column_of(rows, [](const K& k) { return k.row->tensor; })},
        {"dtype", column_of(rows, [](const K& k) { return k.row->dtype; })},
        {"expected_dtype", column_of(rows, [](const K& k) { return k.row->expected_dtype; })},
        {"rel_rmse", column_of(rows, [](const K& k) { return k.row->rel_rmse; })},
        {"max_abs", column_of(rows, [](const K& k) { return k.row->max_abs; })},
        {"max_abs_index", column_of(rows, [](const K& k) { return k.row->max_abs_index; })},
        {"max_rel", column_of(rows, [](const K& k) { return k.row->max_rel; })},
        {"nonfinite", column_of(rows, [](const K& k) { return k.row->nonfinite; })},
        {"bound", column_of(rows, [](const K& k) { return k.row->bound; })},
        {"pass", column_of(rows, [](const K& k) { return static_cast<uint8_t>(k.row->pass); })},
    };
}

h5::Table contract_rows(const std::vector<CaseRecord>& all, const layout::Sharing& sharing,
                        size_t begin, size_t end) {
    using K = Keyed<ContractItem>;
    const std::vector<K> rows = keyed_rows<ContractItem>(begin, end, [&](size_t i) {
        return sharing.contract_of(i) == static_cast<int64_t>(i) ? &all[i].contract.items : nullptr;
    });
    return {
        case_column(rows),
        {"item", column_of(rows, [](const K& k) { return k.row->item; })},
        {"dtype",
         column_of(rows, [](const K& k) { return std::string(dtype_name(k.row->dtype)); })},
        {"note", column_of(rows, [](const K& k) { return k.row->note; })},
    };
}

h5::Table finding_rows(const std::vector<CaseRecord>& all, size_t begin, size_t end) {
    using K = Keyed<Finding>;
    const std::vector<K> rows =
        keyed_rows<Finding>(begin, end, [&](size_t i) { return &all[i].findings; });
    return {
        case_column(rows),
        {"kind", column_of(rows, [](const K& k) { return k.row->kind; })},
        {"tensor", column_of(rows, [](const K& k) { return k.row->tensor; })},
        {"message", column_of(rows, [](const K& k) { return k.row->message; })},
        {"history", column_of(rows, [](const K& k) { return k.row->history; })},
    };
}

h5::Table trace_rows(const std::vector<CaseRecord>& all, const layout::Sharing& sharing,
                     size_t begin, size_t end) {
    using K = Keyed<TraceRow>;
    const std::vector<K> rows = keyed_rows<TraceRow>(begin, end, [&](size_t i) {
        return sharing.trace_of(i) == static_cast<int64_t>(i) ? &all[i].trace : nullptr;
    });
    return {
        case_column(rows),
        {"seq", column_of(rows, [](const K& k) { return k.row->seq; })},
        {"op", column_of(rows, [](const K& k) { return k.row->op; })},
        {"depth", column_of(rows, [](const K& k) { return k.row->depth; })},
        {"autocast",
         column_of(rows, [](const K& k) { return static_cast<uint8_t>(k.row->autocast); })},
        {"inputs", column_of(rows, [](const K& k) { return k.row->inputs; })},
        {"outputs", column_of(rows, [](const K& k) { return k.row->outputs; })},
        {"source", column_of(rows, [](const K& k) { return k.row->source; })},
        {"kernel", column_of(rows, [](const K& k) { return k.row->kernel; })},
    };
}

/// /drift: one row per block of each curve, curves in the order the case measured them.
h5::Table drift_rows(const std::vector<CaseRecord>& all, size_t begin, size_t end) {
    std::vector<int64_t> index, block, position;
    std::vector<std::string> tensor;
    std::vector<double> rel_rmse;
    for (size_t i = begin; i < end; ++i)
        for (const DriftCurve& curve : all[i].drift)
            for (size_t b = 0; b < curve.rel_rmse.size(); ++b) {
                index.push_back(static_cast<int64_t>(i));
                tensor.push_back(curve.tensor);
                block.push_back(curve.block);
                position.push_back(static_cast<int64_t>(b) * curve.block);
                rel_rmse.push_back(curve.rel_rmse[b]);
            }
    return {{"case", std::move(index)},
            {"tensor", std::move(tensor)},
            {"block", std::move(block)},
            {"position", std::move(position)},
            {"rel_rmse", std::move(rel_rmse)}};
}

/// An order-sensitive hash of `rows`, each hashed by `fields(row)`'s members.
template <typename Row, typename Fields>
size_t hash_rows(const std::vector<Row>& rows, Fields fields) {
    size_t seed = rows.size();
    const auto mix = [&seed](size_t h) {
        seed ^= h + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2);
    };
    for (const Row& row : rows)
        std::apply(
            [&](const auto&... member) {
                (mix(std::hash<std::decay_t<decltype(member)>>{}(member)), ...);
            },
            fields(row));
    return seed;
}

template <typename Row, typename Fields>
bool same_rows(const std::vector<Row>& a, const std::vector<Row>& b, Fields fields) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [&](const Row& x, const Row& y) { return fields(x) == fields(y); });
}

/// The owner of rows like `rows` among `owners` (hash -> record), or `index` made one.
template <typename Rows, typename Fields>
int64_t share(std::unordered_multimap<size_t, size_t>& owners, size_t index, const Rows& rows_of,
              Fields fields) {
    const size_t hash = hash_rows(rows_of(index), fields);
    const auto [first, last] = owners.equal_range(hash);
    for (auto it = first; it != last; ++it)
        if (same_rows(rows_of(it->second), rows_of(index), fields))
            return static_cast<int64_t>(it->second);
    owners.emplace(hash, index);
    return static_cast<int64_t>(index);
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
    h5::write_attribute(file, "gpu", run.gpu);
    h5::write_attribute(file, "compute_capability", run.compute_capability);
    h5::write_attribute(file, "cuda_driver", run.cuda_driver);
    h5::write_attribute(file, "cuda_runtime", run.cuda_runtime);
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

void Sharing::extend(const std::vector<CaseRecord>& cases) {
    const auto trace_fields = [](const TraceRow& r) {
        return std::tie(r.seq, r.op, r.depth, r.autocast, r.inputs, r.outputs, r.source, r.kernel);
    };
    const auto item_fields = [](const ContractItem& i) {
        return std::tie(i.item, i.dtype, i.note);
    };
    for (size_t i = trace_of_.size(); i < cases.size(); ++i) {
        trace_of_.push_back(share(
            traces_, i, [&](size_t j) -> const auto& { return cases[j].trace; }, trace_fields));
        contract_of_.push_back(share(
            contracts_, i, [&](size_t j) -> const auto& { return cases[j].contract.items; },
            item_fields));
    }
}

Tables create_tables(const h5::File& file) {
    const std::vector<CaseRecord> none;
    const Sharing no_sharing;
    const auto create = [&](const char* name, const h5::Table& like) {
        return h5::create_growing_table(file, name, like, kChunkRows);
    };
    return {create("summary", summary_rows(none, 0, 0)),
            create("cases", case_rows(none, no_sharing, 0, 0)),
            create("metrics", metric_rows(none, 0, 0)),
            create("contract", contract_rows(none, no_sharing, 0, 0)),
            create("findings", finding_rows(none, 0, 0)),
            create("trace", trace_rows(none, no_sharing, 0, 0)),
            create("drift", drift_rows(none, 0, 0))};
}

void append_cases(const Tables& tables, const std::vector<CaseRecord>& cases,
                  const Sharing& sharing, size_t begin, size_t end) {
    h5::append_rows(tables.summary, summary_rows(cases, begin, end));
    h5::append_rows(tables.cases, case_rows(cases, sharing, begin, end));
    h5::append_rows(tables.metrics, metric_rows(cases, begin, end));
    h5::append_rows(tables.contract, contract_rows(cases, sharing, begin, end));
    h5::append_rows(tables.findings, finding_rows(cases, begin, end));
    h5::append_rows(tables.trace, trace_rows(cases, sharing, begin, end));
    h5::append_rows(tables.drift, drift_rows(cases, begin, end));
}

}  // namespace layout

namespace {

/// Writes the whole report into a new file at `path`.
void write_file(const std::string& path, const Report& report) {
    h5::File file = h5::File::create(path);
    layout::write_run(file, report);
    layout::Sharing sharing;
    sharing.extend(report.cases);
    layout::append_cases(layout::create_tables(file), report.cases, sharing, 0,
                         report.cases.size());
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
