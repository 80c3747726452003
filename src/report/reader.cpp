// src/report/reader.cpp — reads an HDF5 report back into a Report; checks it is one lav can read.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "report/h5.h"
#include "report/probe.h"
#include "report/report.h"

namespace lav::report {
namespace {

constexpr const char* kWrittenBy = "lav reports are the .h5 files written by `lav run --out`";

using Strings = std::vector<std::string>;
using Doubles = std::vector<double>;
using Int64s = std::vector<int64_t>;
using UInt8s = std::vector<uint8_t>;

RunInfo read_run(const h5::File& file) {
    RunInfo run;
    run.lav_version = h5::read_attribute<std::string>(file, "lav_version");
    run.git_commit = h5::read_attribute<std::string>(file, "git_commit");
    run.torch_version = h5::read_attribute<std::string>(file, "torch_version");
    run.hdf5_version = h5::read_attribute<std::string>(file, "hdf5_version");
    run.device = h5::read_attribute<std::string>(file, "device");
    // optional: reports written before lav named the GPU keep RunInfo's "none"
    for (auto [name, field] : {std::pair{"gpu", &run.gpu},
                               {"compute_capability", &run.compute_capability},
                               {"cuda_driver", &run.cuda_driver},
                               {"cuda_runtime", &run.cuda_runtime}})
        if (h5::has_attribute(file, name)) *field = h5::read_attribute<std::string>(file, name);
    run.providers = h5::read_attribute<std::string>(file, "providers");
    run.command_line = h5::read_attribute<std::string>(file, "command_line");
    run.started_at = h5::read_attribute<std::string>(file, "started_at");
    run.seed = h5::read_attribute<uint64_t>(file, "seed");
    run.shard = h5::read_attribute<std::string>(file, "shard");
    run.selection = h5::read_attribute<std::string>(file, "selection");
    const h5::Table table =
        h5::read_table(file, "scenarios", {{"path", Strings{}}, {"text", Strings{}}});
    run.scenario_paths = h5::column<std::string>(table, "path");
    run.scenario_texts = h5::column<std::string>(table, "text");
    return run;
}

/// A table keyed by case: its columns, and rows [first[i], first[i + 1]) of case i.
struct Keyed {
    h5::Table table;
    std::vector<size_t> first;
    size_t begin(int64_t index) const { return first[static_cast<size_t>(index)]; }
    size_t end(int64_t index) const { return first[static_cast<size_t>(index) + 1]; }
};

/// Reads table `name` with a `case` column ahead of `like`'s; its rows must be in case order,
/// each naming one of the `count` cases.
Keyed read_keyed(const h5::File& file, const std::string& name, h5::Table like, size_t count) {
    like.insert(like.begin(), {"case", Int64s{}});
    Keyed keyed{h5::read_table(file, name, like), std::vector<size_t>(count + 1, 0)};
    const auto& index = h5::column<int64_t>(keyed.table, "case");
    int64_t previous = 0;
    for (size_t row = 0; row < index.size(); ++row) {
        if (index[row] < previous || index[row] >= static_cast<int64_t>(count))
            file.open_dataset(name).invalid(
                "row " + std::to_string(row) + " names case " + std::to_string(index[row]) +
                (index[row] < previous ? ", after case " + std::to_string(previous)
                                       : ", of " + std::to_string(count) + " cases"));
        previous = index[row];
        ++keyed.first[static_cast<size_t>(index[row]) + 1];
    }
    for (size_t i = 0; i < count; ++i) keyed.first[i + 1] += keyed.first[i];
    return keyed;
}

/// The `column` value of `record`'s /cases row: a case whose rows it shares, checked in range.
int64_t shared_case(const h5::File& file, const h5::Table& cases, const char* column,
                    size_t record) {
    const int64_t index = h5::column<int64_t>(cases, column)[record];
    if (index < 0 || index >= static_cast<int64_t>(h5::column<std::string>(cases, "id").size()))
        file.open_dataset("cases").invalid("row " + std::to_string(record) + " has " + column +
                                           " " + std::to_string(index) + ", no case of the run");
    return index;
}

void read_metrics(const Keyed& keyed, int64_t index, CaseRecord& c) {
    const h5::Table& t = keyed.table;
    for (size_t i = keyed.begin(index); i < keyed.end(index); ++i) {
        MetricRow m;
        m.tensor = h5::column<std::string>(t, "tensor")[i];
        m.dtype = h5::column<std::string>(t, "dtype")[i];
        m.expected_dtype = h5::column<std::string>(t, "expected_dtype")[i];
        m.rel_rmse = h5::column<double>(t, "rel_rmse")[i];
        m.max_abs = h5::column<double>(t, "max_abs")[i];
        m.max_abs_index = h5::column<std::string>(t, "max_abs_index")[i];
        m.max_rel = h5::column<double>(t, "max_rel")[i];
        m.nonfinite = h5::column<int64_t>(t, "nonfinite")[i];
        m.bound = h5::column<double>(t, "bound")[i];
        m.pass = h5::column<uint8_t>(t, "pass")[i] != 0;
        c.metrics.push_back(std::move(m));
    }
}

void read_contract(const h5::File& file, const Keyed& keyed, int64_t index, CaseRecord& c) {
    const h5::Table& t = keyed.table;
    for (size_t i = keyed.begin(index); i < keyed.end(index); ++i) {
        const std::string& item = h5::column<std::string>(t, "item")[i];
        const std::string& dtype = h5::column<std::string>(t, "dtype")[i];
        const std::optional<DType> parsed = parse_dtype(dtype);
        if (!parsed)
            file.open_dataset("contract")
                .invalid("row " + std::to_string(i) + " has item '" + item +
                         "' of unknown dtype '" + dtype +
                         "' (expected one of: " + dtype_names_list() + ")");
        c.contract.items.push_back({item, *parsed, h5::column<std::string>(t, "note")[i]});
    }
}

void read_findings(const Keyed& keyed, int64_t index, CaseRecord& c) {
    const h5::Table& t = keyed.table;
    for (size_t i = keyed.begin(index); i < keyed.end(index); ++i)
        c.findings.push_back(
            {h5::column<std::string>(t, "kind")[i], h5::column<std::string>(t, "tensor")[i],
             h5::column<std::string>(t, "message")[i], h5::column<std::string>(t, "history")[i]});
}

void read_trace(const h5::File& file, const Keyed& keyed, int64_t index, CaseRecord& c) {
    const h5::Table& t = keyed.table;
    for (size_t i = keyed.begin(index); i < keyed.end(index); ++i) {
        TraceRow row{
            h5::column<int64_t>(t, "seq")[i],        h5::column<std::string>(t, "op")[i],
            h5::column<int64_t>(t, "depth")[i],      h5::column<uint8_t>(t, "autocast")[i] != 0,
            h5::column<std::string>(t, "inputs")[i], h5::column<std::string>(t, "outputs")[i],
            h5::column<std::string>(t, "source")[i], h5::column<std::string>(t, "kernel")[i]};
        if (row.source != "traced" && row.source != "declared")
            file.open_dataset("trace").invalid("row " + std::to_string(i) +
                                               " has unknown source '" + row.source +
                                               "' (expected traced or declared)");
        c.trace.push_back(std::move(row));
    }
}

void read_drift(const Keyed& keyed, int64_t index, CaseRecord& c) {
    const h5::Table& t = keyed.table;
    const auto& tensor = h5::column<std::string>(t, "tensor");
    // a curve is the run of rows of one tensor, in the order the case measured them
    for (size_t i = keyed.begin(index); i < keyed.end(index); ++i) {
        if (c.drift.empty() || c.drift.back().tensor != tensor[i])
            c.drift.push_back({tensor[i], h5::column<int64_t>(t, "block")[i], {}});
        c.drift.back().rel_rmse.push_back(h5::column<double>(t, "rel_rmse")[i]);
    }
}

/// The records of /cases, their rows of the keyed tables gathered.
std::vector<CaseRecord> read_cases(const h5::File& file, size_t count) {
    h5::Table like = {
        {"id", Strings{}},          {"scenario_file", Strings{}}, {"scenario", Strings{}},
        {"family", Strings{}},      {"variant", Strings{}},       {"backend", Strings{}},
        {"pass", Strings{}},        {"input_dtype", Strings{}},   {"gate_dtype", Strings{}},
        {"state_dtype", Strings{}}, {"output_dtype", Strings{}},  {"layout", Strings{}},
        {"shape", Strings{}},       {"cu_seqlens", Strings{}},    {"verdict", Strings{}},
        {"message", Strings{}},     {"kernel", Strings{}},        {"seed", std::vector<uint64_t>{}},
        {"seconds", Doubles{}},     {"trace_case", Int64s{}},     {"contract_case", Int64s{}}};
    // reports written before the split of a record's time have neither column
    const bool split = h5::has_column(file, "cases", "kernel_seconds");
    if (split) {
        like.push_back({"reference_seconds", Doubles{}});
        like.push_back({"kernel_seconds", Doubles{}});
    }
    // nor do those written before providers counted their JIT time
    const bool jit = h5::has_column(file, "cases", "jit_seconds");
    if (jit) like.push_back({"jit_seconds", Doubles{}});
    const h5::Table cases = h5::read_table(file, "cases", like);

    if (h5::column<std::string>(cases, "id").size() != count)
        file.open_dataset("cases").invalid(
            "has " + std::to_string(h5::column<std::string>(cases, "id").size()) +
            " rows, case_count says " + std::to_string(count));
    const Keyed metrics = read_keyed(file, "metrics",
                                     {{"tensor", Strings{}},
                                      {"dtype", Strings{}},
                                      {"expected_dtype", Strings{}},
                                      {"rel_rmse", Doubles{}},
                                      {"max_abs", Doubles{}},
                                      {"max_abs_index", Strings{}},
                                      {"max_rel", Doubles{}},
                                      {"nonfinite", Int64s{}},
                                      {"bound", Doubles{}},
                                      {"pass", UInt8s{}}},
                                     count);
    const Keyed contract = read_keyed(
        file, "contract", {{"item", Strings{}}, {"dtype", Strings{}}, {"note", Strings{}}}, count);
    const Keyed findings = read_keyed(file, "findings",
                                      {{"kind", Strings{}},
                                       {"tensor", Strings{}},
                                       {"message", Strings{}},
                                       {"history", Strings{}}},
                                      count);
    const Keyed trace = read_keyed(file, "trace",
                                   {{"seq", Int64s{}},
                                    {"op", Strings{}},
                                    {"depth", Int64s{}},
                                    {"autocast", UInt8s{}},
                                    {"inputs", Strings{}},
                                    {"outputs", Strings{}},
                                    {"source", Strings{}},
                                    {"kernel", Strings{}}},
                                   count);
    const Keyed drift =
        read_keyed(file, "drift",
                   {{"tensor", Strings{}}, {"block", Int64s{}}, {"rel_rmse", Doubles{}}}, count);

    std::vector<CaseRecord> records(count);
    for (size_t i = 0; i < count; ++i) {
        CaseRecord& c = records[i];
        const auto text = [&](const char* name) -> const std::string& {
            return h5::column<std::string>(cases, name)[i];
        };
        c.id = text("id");
        c.scenario_file = text("scenario_file");
        c.scenario = text("scenario");
        c.family = text("family");
        c.variant = text("variant");
        c.backend = text("backend");
        c.pass = text("pass");
        c.input_dtype = text("input_dtype");
        c.gate_dtype = text("gate_dtype");
        c.state_dtype = text("state_dtype");
        c.output_dtype = text("output_dtype");
        c.layout = text("layout");
        c.shape = text("shape");
        c.cu_seqlens = text("cu_seqlens");
        c.verdict = text("verdict");
        c.message = text("message");
        c.contract.kernel = text("kernel");
        c.seed = h5::column<uint64_t>(cases, "seed")[i];
        c.seconds = h5::column<double>(cases, "seconds")[i];
        if (split) {
            c.reference_seconds = h5::column<double>(cases, "reference_seconds")[i];
            c.kernel_seconds = h5::column<double>(cases, "kernel_seconds")[i];
        }
        if (jit) c.jit_seconds = h5::column<double>(cases, "jit_seconds")[i];
        const auto index = static_cast<int64_t>(i);
        read_metrics(metrics, index, c);
        read_contract(file, contract, shared_case(file, cases, "contract_case", i), c);
        read_findings(findings, index, c);
        read_trace(file, trace, shared_case(file, cases, "trace_case", i), c);
        read_drift(drift, index, c);
    }
    return records;
}

/// `/summary` repeats what the cases hold, and readers without lav (pandas) read it alone: a row
/// that says other than its case is refused, naming the case.
void check_summary(const h5::File& file, const Report& report) {
    const h5::Table table = h5::read_table(file, "summary",
                                           {{"id", Strings{}},
                                            {"verdict", Strings{}},
                                            {"worst_tensor", Strings{}},
                                            {"worst_rel_rmse", Doubles{}},
                                            {"worst_bound", Doubles{}}});
    const auto& id = h5::column<std::string>(table, "id");
    const h5::Dataset summary = file.open_dataset("summary");
    if (id.size() != report.cases.size())
        summary.invalid("has " + std::to_string(id.size()) + " rows for " +
                        std::to_string(report.cases.size()) + " cases");
    constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    for (size_t i = 0; i < id.size(); ++i) {
        const CaseRecord& c = report.cases[i];
        const MetricRow* worst = c.worst();
        const auto same = [](double a, double b) {
            return a == b || (std::isnan(a) && std::isnan(b));
        };
        const char* column = nullptr;
        if (id[i] != c.id)
            column = "id";
        else if (h5::column<std::string>(table, "verdict")[i] != c.verdict)
            column = "verdict";
        else if (h5::column<std::string>(table, "worst_tensor")[i] != (worst ? worst->tensor : ""))
            column = "worst_tensor";
        else if (!same(h5::column<double>(table, "worst_rel_rmse")[i],
                       worst ? worst->rel_rmse : kNone))
            column = "worst_rel_rmse";
        else if (!same(h5::column<double>(table, "worst_bound")[i], worst ? worst->bound : kNone))
            column = "worst_bound";
        if (column != nullptr)
            summary.invalid("row " + std::to_string(i) + " says other than /cases row " +
                            std::to_string(i) + " (" + c.id + ") in column " + column);
    }
}

/// Everything after the schema check.
Report read_contents(const h5::File& file) {
    Report report;
    report.complete = h5::read_attribute<int64_t>(file, "complete") != 0;
    report.run = read_run(file);
    const int64_t case_count = h5::read_attribute<int64_t>(file, "case_count");
    if (case_count < 0) file.invalid("has a negative case_count");
    report.cases = read_cases(file, static_cast<size_t>(case_count));
    check_summary(file, report);
    return report;
}

}  // namespace

Report read_report(const std::string& path) {
    std::error_code error;
    if (!std::filesystem::exists(path, error))
        throw ReportError(path + ": error: no such file\nnote: " + kWrittenBy);
    if (std::filesystem::is_directory(path, error))
        throw ReportError(path + ": error: is a folder, not a report\nnote: " + kWrittenBy);
    if (!h5::is_hdf5(path))
        throw ReportError(path + ": error: not an HDF5 file\nnote: " + kWrittenBy);

    probe_report(path, [&] { read_contents(h5::File::open_read_only(path)); });
    const h5::File file = h5::File::open_read_only(path);
    if (!h5::has_attribute(file, "schema_version"))
        throw ReportError(
            path + ": error: not a lav report (no schema_version attribute)\nnote: " + kWrittenBy);
    const int64_t version = h5::read_attribute<int64_t>(file, "schema_version");
    if (version != kSchemaVersion) {
        const std::string writer =
            h5::has_attribute(file, "lav_version")
                ? "lav " + h5::read_attribute<std::string>(file, "lav_version")
                : "the lav that wrote it";
        throw ReportError(path + ": error: report schema version " + std::to_string(version) +
                          ", this lav reads version " + std::to_string(kSchemaVersion) +
                          "\nnote: read it with " + writer + ", or run the scenarios again");
    }

    try {
        return read_contents(file);
    } catch (const ReportError& e) {
        throw ReportError(std::string(e.what()) +
                              "\nnote: the report is damaged or was not written by lav; run the "
                              "scenarios again to write a new one",
                          e.exit_code());
    }
}

}  // namespace lav::report
