// src/report/export.cpp — JSON and CSV forms of a report's summary, records and findings.
#include "report/export.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/dtype.h"
#include "report/views.h"

namespace lav::report {
namespace {

// the fewest digits that read back as the value the report holds
std::string number(double x) {
    if (!std::isfinite(x)) return "null";
    char text[32];
    for (int digits = 15; digits <= 17; ++digits) {
        std::snprintf(text, sizeof text, "%.*g", digits, x);
        if (std::strtod(text, nullptr) == x) break;
    }
    return text;
}

std::string csv_number(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    return number(x);
}

// {"key": value, ...}, built a field at a time
class Object {
  public:
    Object& raw(const char* key, const std::string& json) {
        text_ += (text_.empty() ? "" : ", ") + json_string(key) + ": " + json;
        return *this;
    }
    Object& str(const char* key, const std::string& value) { return raw(key, json_string(value)); }
    Object& num(const char* key, double value) { return raw(key, number(value)); }
    std::string text() const { return "{" + text_ + "}"; }

  private:
    std::string text_;
};

// [a, b, ...]; with `indent`, one item a line
std::string array(const std::vector<std::string>& items, const std::string& indent = "") {
    if (items.empty()) return "[]";
    const std::string gap = indent.empty() ? ", " : ",\n" + indent;
    std::string out = indent.empty() ? "[" : "[\n" + indent;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? gap : "") + items[i];
    return out + (indent.empty() ? "]" : "\n" + indent.substr(2) + "]");
}

std::string csv_row(const std::vector<std::string>& fields) {
    std::string out;
    for (size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_field(fields[i]);
    return out + "\n";
}

// "records", "pass", "warn", "fail", "error" added to `o`
Object& with_counts(Object& o, const VerdictCounts& n) {
    return o.raw("records", std::to_string(n.records))
        .raw("pass", std::to_string(n.pass))
        .raw("warn", std::to_string(n.warn))
        .raw("fail", std::to_string(n.fail))
        .raw("error", std::to_string(n.error));
}

std::string record_json(const CaseRecord& r) {
    std::vector<std::string> metrics, findings, items, trace;
    for (const auto& m : r.metrics)
        metrics.push_back(Object()
                              .str("tensor", m.tensor)
                              .str("dtype", m.dtype)
                              .str("expected_dtype", m.expected_dtype)
                              .num("rel_rmse", m.rel_rmse)
                              .num("bound", m.bound)
                              .num("max_abs", m.max_abs)
                              .str("max_abs_index", m.max_abs_index)
                              .num("max_rel", m.max_rel)
                              .raw("nonfinite", std::to_string(m.nonfinite))
                              .raw("pass", m.pass ? "true" : "false")
                              .text());
    for (const auto& f : r.findings)
        findings.push_back(Object()
                               .str("kind", f.kind)
                               .str("tensor", f.tensor)
                               .str("message", f.message)
                               .str("history", f.history)
                               .text());
    for (const auto& i : r.contract.items)
        items.push_back(Object()
                            .str("item", i.item)
                            .str("dtype", std::string(dtype_name(i.dtype)))
                            .str("note", i.note)
                            .text());
    for (const auto& t : r.trace)
        trace.push_back(Object()
                            .raw("seq", std::to_string(t.seq))
                            .str("op", t.op)
                            .raw("depth", std::to_string(t.depth))
                            .raw("autocast", t.autocast ? "true" : "false")
                            .str("inputs", t.inputs)
                            .str("outputs", t.outputs)
                            .str("source", t.source)
                            .str("kernel", t.kernel)
                            .text());
    return Object()
        .str("id", r.id)
        .str("scenario_file", r.scenario_file)
        .str("scenario", r.scenario)
        .str("family", r.family)
        .str("variant", r.variant)
        .str("backend", r.backend)
        .str("pass", r.pass)
        .str("input_dtype", r.input_dtype)
        .str("gate_dtype", r.gate_dtype)
        .str("state_dtype", r.state_dtype)
        .str("output_dtype", r.output_dtype)
        .str("layout", r.layout)
        .str("shape", r.shape)
        .str("cu_seqlens", r.cu_seqlens)
        .raw("seed", std::to_string(r.seed))
        .str("verdict", r.verdict)
        .str("message", r.message)
        .num("seconds", r.seconds)
        .raw("metrics", array(metrics))
        .raw("findings", array(findings))
        .raw("contract",
             Object().str("kernel", r.contract.kernel).raw("items", array(items)).text())
        .raw("trace", array(trace))
        .text();
}

}  // namespace

std::string json_string(const std::string& text) {
    std::string out = "\"";
    for (const char ch : text) {
        const auto byte = static_cast<unsigned char>(ch);
        if (ch == '"' || ch == '\\') {
            out += '\\';
            out += ch;
        } else if (ch == '\n') {
            out += "\\n";
        } else if (ch == '\t') {
            out += "\\t";
        } else if (byte < 0x20 || byte == 0x7F) {
            char escape[8];
            std::snprintf(escape, sizeof escape, "\\u%04x", byte);
            out += escape;
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
    std::string out = "\"";
    for (const char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return out + "\"";
}

void write_json_summary(std::ostream& out, const std::string& file, const Report& report) {
    VerdictCounts counts;
    std::vector<std::string> records;
    for (const auto& r : report.cases) {
        counts.add(r.verdict);
        const MetricRow* worst = r.worst();
        Object row;
        row.str("id", r.id).str("verdict", r.verdict);
        row.raw("worst", worst ? json_string(worst->tensor) : "null")
            .raw("rel_rmse", worst ? number(worst->rel_rmse) : "null")
            .raw("bound", worst ? number(worst->bound) : "null")
            .num("seconds", r.seconds);
        records.push_back(row.text());
    }
    Object totals;
    with_counts(totals, counts);
    const RunInfo& run = report.run;
    out << Object()
               .str("file", file)
               .raw("complete", report.complete ? "true" : "false")
               .raw("schema_version", std::to_string(report.schema_version))
               .raw("run", Object()
                               .str("lav_version", run.lav_version)
                               .str("git_commit", run.git_commit)
                               .str("torch_version", run.torch_version)
                               .str("hdf5_version", run.hdf5_version)
                               .str("device", run.device)
                               .str("providers", run.providers)
                               .str("command_line", run.command_line)
                               .str("started_at", run.started_at)
                               .raw("seed", std::to_string(run.seed))
                               .text())
               .raw("totals", totals.text())
               .raw("records", array(records, "  "))
               .text()
        << '\n';
}

void write_csv_summary(std::ostream& out, const Report& report) {
    out << csv_row({"id", "verdict", "worst", "rel_rmse", "bound", "seconds"});
    for (const auto& r : report.cases) {
        const MetricRow* worst = r.worst();
        out << csv_row({r.id, r.verdict, worst ? worst->tensor : "",
                        worst ? csv_number(worst->rel_rmse) : "",
                        worst ? csv_number(worst->bound) : "", csv_number(r.seconds)});
    }
}

void write_json_records(std::ostream& out, const std::vector<const CaseRecord*>& records) {
    std::vector<std::string> items;
    for (const CaseRecord* r : records) items.push_back(record_json(*r));
    out << Object().raw("records", array(items, "  ")).text() << '\n';
}

void write_csv_records(std::ostream& out, const std::vector<const CaseRecord*>& records) {
    out << csv_row({"record", "verdict", "tensor", "dtype", "expected_dtype", "rel_rmse", "bound",
                    "max_abs", "max_abs_index", "max_rel", "nonfinite", "pass"});
    for (const CaseRecord* r : records) {
        if (r->metrics.empty())
            out << csv_row({r->id, r->verdict, "", "", "", "", "", "", "", "", "", ""});
        for (const auto& m : r->metrics)
            out << csv_row({r->id, r->verdict, m.tensor, m.dtype, m.expected_dtype,
                            csv_number(m.rel_rmse), csv_number(m.bound), csv_number(m.max_abs),
                            m.max_abs_index, csv_number(m.max_rel), std::to_string(m.nonfinite),
                            m.pass ? "true" : "false"});
    }
}

void write_json_findings(std::ostream& out, const Report& report) {
    std::vector<std::string> items;
    for (const auto& g : group_findings(report)) {
        std::vector<std::string> ids;
        for (const auto& id : g.records) ids.push_back(json_string(id));
        items.push_back(Object()
                            .str("kind", g.finding.kind)
                            .str("tensor", g.finding.tensor)
                            .str("message", g.finding.message)
                            .str("history", g.finding.history)
                            .raw("records", array(ids))
                            .text());
    }
    out << Object().raw("findings", array(items, "  ")).text() << '\n';
}

void write_csv_findings(std::ostream& out, const Report& report) {
    out << csv_row({"kind", "tensor", "message", "history", "record"});
    for (const auto& g : group_findings(report))
        for (const auto& id : g.records)
            out << csv_row(
                {g.finding.kind, g.finding.tensor, g.finding.message, g.finding.history, id});
}

void write_json_backends(std::ostream& out, const Report& report) {
    const auto worst = [](const BackendSide::Worst& w) {
        if (!w.metric) return std::string("null");
        return Object()
            .str("record", w.record->id)
            .str("variant", w.record->variant)
            .str("tensor", w.metric->tensor)
            .num("rel_rmse", w.metric->rel_rmse)
            .text();
    };
    std::vector<std::string> sides;
    for (const auto& side : backends_side_by_side(report)) {
        Object o;
        o.str("family", side.family).str("backend", side.backend);
        sides.push_back(with_counts(o, side.verdicts)
                            .raw("worst_fwd", worst(side.fwd))
                            .raw("worst_bwd", worst(side.bwd))
                            .text());
    }
    out << Object().raw("backends", array(sides, "  ")).text() << '\n';
}

void write_csv_backends(std::ostream& out, const Report& report) {
    out << csv_row({"family", "backend", "records", "pass", "warn", "fail", "error", "fwd_record",
                    "fwd_tensor", "fwd_rel_rmse", "bwd_record", "bwd_tensor", "bwd_rel_rmse"});
    for (const auto& side : backends_side_by_side(report)) {
        const VerdictCounts& n = side.verdicts;
        std::vector<std::string> row = {side.family,
                                        side.backend,
                                        std::to_string(n.records),
                                        std::to_string(n.pass),
                                        std::to_string(n.warn),
                                        std::to_string(n.fail),
                                        std::to_string(n.error)};
        for (const BackendSide::Worst* w : {&side.fwd, &side.bwd}) {
            row.push_back(w->metric ? w->record->id : "");
            row.push_back(w->metric ? w->metric->tensor : "");
            row.push_back(w->metric ? csv_number(w->metric->rel_rmse) : "");
        }
        out << csv_row(row);
    }
}

}  // namespace lav::report
