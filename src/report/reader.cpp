// src/report/reader.cpp — reads an HDF5 report back into a Report; checks it is one lav can read.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "report/h5.h"
#include "report/probe.h"
#include "report/report.h"

namespace lav::report {
namespace {

constexpr const char* kWrittenBy = "lav reports are the .h5 files written by `lav run --out`";

std::string case_group_name(size_t index) {
    char name[32];
    std::snprintf(name, sizeof name, "%04zu", index);
    return name;
}

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
    // reports written before providers existed have no such attribute
    if (h5::has_attribute(file, "providers"))
        run.providers = h5::read_attribute<std::string>(file, "providers");
    run.command_line = h5::read_attribute<std::string>(file, "command_line");
    run.started_at = h5::read_attribute<std::string>(file, "started_at");
    run.seed = h5::read_attribute<uint64_t>(file, "seed");
    // reports written before shards existed have neither
    if (h5::has_attribute(file, "shard"))
        run.shard = h5::read_attribute<std::string>(file, "shard");
    if (h5::has_attribute(file, "selection"))
        run.selection = h5::read_attribute<std::string>(file, "selection");
    // reports written before they kept their scenario files have no /scenarios
    const std::vector<std::string> links = file.open_group("/").link_names();
    if (std::find(links.begin(), links.end(), "scenarios") != links.end()) {
        const h5::Table table =
            h5::read_table(file, "scenarios", {{"path", Strings{}}, {"text", Strings{}}});
        run.scenario_paths = h5::column<std::string>(table, "path");
        run.scenario_texts = h5::column<std::string>(table, "text");
    }
    return run;
}

std::vector<MetricRow> read_metrics(const h5::Group& group) {
    const h5::Table table = h5::read_table(group, "metrics",
                                           {{"tensor", Strings{}},
                                            {"dtype", Strings{}},
                                            {"expected_dtype", Strings{}},
                                            {"rel_rmse", Doubles{}},
                                            {"max_abs", Doubles{}},
                                            {"max_abs_index", Strings{}},
                                            {"max_rel", Doubles{}},
                                            {"nonfinite", Int64s{}},
                                            {"bound", Doubles{}},
                                            {"pass", UInt8s{}}});
    const auto& tensor = h5::column<std::string>(table, "tensor");
    std::vector<MetricRow> rows(tensor.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        MetricRow& m = rows[i];
        m.tensor = tensor[i];
        m.dtype = h5::column<std::string>(table, "dtype")[i];
        m.expected_dtype = h5::column<std::string>(table, "expected_dtype")[i];
        m.rel_rmse = h5::column<double>(table, "rel_rmse")[i];
        m.max_abs = h5::column<double>(table, "max_abs")[i];
        m.max_abs_index = h5::column<std::string>(table, "max_abs_index")[i];
        m.max_rel = h5::column<double>(table, "max_rel")[i];
        m.nonfinite = h5::column<int64_t>(table, "nonfinite")[i];
        m.bound = h5::column<double>(table, "bound")[i];
        m.pass = h5::column<uint8_t>(table, "pass")[i] != 0;
    }
    return rows;
}

PrecisionContract read_contract(const h5::Group& group) {
    PrecisionContract contract;
    contract.kernel = h5::read_attribute<std::string>(group, "kernel");
    const h5::Table table = h5::read_table(
        group, "contract", {{"item", Strings{}}, {"dtype", Strings{}}, {"note", Strings{}}});
    const auto& item = h5::column<std::string>(table, "item");
    const auto& dtype = h5::column<std::string>(table, "dtype");
    const auto& note = h5::column<std::string>(table, "note");
    for (size_t i = 0; i < item.size(); ++i) {
        const std::optional<DType> parsed = parse_dtype(dtype[i]);
        if (!parsed)
            group.invalid("has contract item '" + item[i] + "' of unknown dtype '" + dtype[i] +
                          "' (expected one of: " + dtype_names_list() + ")");
        contract.items.push_back({item[i], *parsed, note[i]});
    }
    return contract;
}

std::vector<Finding> read_findings(const h5::Group& group) {
    const h5::Table table = h5::read_table(group, "findings",
                                           {{"kind", Strings{}},
                                            {"tensor", Strings{}},
                                            {"message", Strings{}},
                                            {"history", Strings{}}});
    const auto& kind = h5::column<std::string>(table, "kind");
    const auto& tensor = h5::column<std::string>(table, "tensor");
    const auto& message = h5::column<std::string>(table, "message");
    const auto& history = h5::column<std::string>(table, "history");
    std::vector<Finding> findings;
    for (size_t i = 0; i < kind.size(); ++i)
        findings.push_back({kind[i], tensor[i], message[i], history[i]});
    return findings;
}

std::vector<TraceRow> read_trace(const h5::Group& group) {
    h5::Table like = {{"seq", std::vector<int64_t>{}},
                      {"op", Strings{}},
                      {"depth", std::vector<int64_t>{}},
                      {"autocast", std::vector<uint8_t>{}},
                      {"inputs", Strings{}},
                      {"outputs", Strings{}}};
    // reports written before declared rows existed hold traced rows only
    const bool declared = h5::has_column(group, "trace", "source");
    if (declared) {
        like.push_back({"source", Strings{}});
        like.push_back({"kernel", Strings{}});
    }
    const h5::Table table = h5::read_table(group, "trace", like);
    const auto& seq = h5::column<int64_t>(table, "seq");
    const auto& op = h5::column<std::string>(table, "op");
    const auto& depth = h5::column<int64_t>(table, "depth");
    const auto& autocast = h5::column<uint8_t>(table, "autocast");
    const auto& inputs = h5::column<std::string>(table, "inputs");
    const auto& outputs = h5::column<std::string>(table, "outputs");
    std::vector<TraceRow> rows;
    for (size_t i = 0; i < seq.size(); ++i) {
        TraceRow row{seq[i],    op[i],      depth[i], autocast[i] != 0,
                     inputs[i], outputs[i], "traced", ""};
        if (declared) {
            row.source = h5::column<std::string>(table, "source")[i];
            row.kernel = h5::column<std::string>(table, "kernel")[i];
            if (row.source != "traced" && row.source != "declared")
                group.invalid("has a trace row of unknown source '" + row.source +
                              "' (expected traced or declared)");
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

std::vector<DriftCurve> read_drift(const h5::Group& group) {
    const h5::Group drift = group.open_group("drift");
    std::vector<DriftCurve> curves;
    for (const std::string& tensor : drift.link_names()) {
        const h5::Dataset dataset = drift.open_dataset(tensor);
        curves.push_back(
            {tensor, h5::read_attribute<int64_t>(dataset, "block"), h5::read_doubles(dataset)});
    }
    return curves;
}

CaseRecord read_case(const h5::Group& cases, size_t index) {
    const h5::Group group = cases.open_group(case_group_name(index));
    const auto text = [&](const char* name) {
        return h5::read_attribute<std::string>(group, name);
    };
    CaseRecord c;
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
    c.seed = h5::read_attribute<uint64_t>(group, "seed");
    c.seconds = h5::read_attribute<double>(group, "seconds");
    c.metrics = read_metrics(group);
    c.contract = read_contract(group);
    c.findings = read_findings(group);
    c.trace = read_trace(group);
    c.drift = read_drift(group);
    return c;
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
            summary.invalid("row " + std::to_string(i) + " says other than /cases/" +
                            case_group_name(i) + " (" + c.id + ") in column " + column);
    }
}

/// Everything after the schema check.
Report read_contents(const h5::File& file) {
    Report report;
    report.complete = h5::read_attribute<int64_t>(file, "complete") != 0;
    report.run = read_run(file);
    const int64_t case_count = h5::read_attribute<int64_t>(file, "case_count");
    if (case_count < 0) file.invalid("has a negative case_count");
    const h5::Group cases = file.open_group("cases");
    for (int64_t i = 0; i < case_count; ++i)
        report.cases.push_back(read_case(cases, static_cast<size_t>(i)));
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
