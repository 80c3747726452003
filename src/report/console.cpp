// src/report/console.cpp — the summary table and failure messages of console.h.
#include "report/console.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "core/printable.h"

namespace lav::report {
namespace {

/// Widest case id shown in the summary table; longer ones lose their middle.
constexpr size_t kMaxIdWidth = 100;

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

/// Terminal columns of a UTF-8 string, counting one per code point.
size_t width(const std::string& s) {
    return static_cast<size_t>(
        std::count_if(s.begin(), s.end(), [](char c) { return !is_continuation_byte(c); }));
}

/// The first `n` code points of `s`.
std::string first_code_points(const std::string& s, size_t n) {
    size_t end = 0;
    for (size_t seen = 0; end < s.size(); ++end) {
        if (!is_continuation_byte(s[end]) && seen++ == n) break;
    }
    return s.substr(0, end);
}

/// The last `n` code points of `s`.
std::string last_code_points(const std::string& s, size_t n) {
    return s.substr(first_code_points(s, width(s) - std::min(n, width(s))).size());
}

std::string format(const char* spec, double value) {
    char text[32];
    std::snprintf(text, sizeof text, spec, value);
    return text;
}

std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

std::string shorten_id(const std::string& id) {
    if (width(id) <= kMaxIdWidth) return id;
    // keep "/variant/backend/pass" whole where it fits: it tells apart the rows of a scenario
    size_t tail = kMaxIdWidth / 2;
    size_t cut = id.size();
    for (int i = 0; i < 3 && cut != std::string::npos && cut > 0; ++i) cut = id.rfind('/', cut - 1);
    if (cut != std::string::npos) tail = std::min(tail, width(id.substr(cut)));
    return first_code_points(id, kMaxIdWidth - 1 - tail) + "…" + last_code_points(id, tail);
}

/// Each line of `text` on its own line, indented by two spaces.
void print_indented(std::ostream& out, const std::string& text) {
    size_t start = 0;
    while (start < text.size()) {
        const size_t end = std::min(text.find('\n', start), text.size());
        out << "  " << text.substr(start, end - start) << '\n';
        start = end + 1;
    }
}

// how a record's kernels agree with each other is in the report; the terminal tells it where
// it helps, for a failing record
bool shown(const CaseRecord& r, const Finding& f) {
    return f.kind != "EQUIVALENCE" || r.verdict == "fail";
}

// the findings of `r` that the terminal shows
std::vector<const Finding*> shown_findings(const CaseRecord& r) {
    std::vector<const Finding*> out;
    for (const Finding& f : r.findings)
        if (shown(r, f)) out.push_back(&f);
    return out;
}

// lav's own colour codes go past the PrintableBuf that escapes the text around them
void paint(std::ostream& out, const char* code) {
    if (auto* printable = dynamic_cast<PrintableBuf*>(out.rdbuf()))
        printable->pass_through(code);
    else
        out << code;
}

// a verdict word (PASS, WARN, FAIL, ERROR), green, yellow or red with colours
void print_verdict(std::ostream& out, const std::string& word, const View& view) {
    if (view.color)
        paint(out, word == "PASS" ? "\x1b[32m" : word == "WARN" ? "\x1b[33m" : "\x1b[31m");
    out << word;
    if (view.color) paint(out, "\x1b[0m");
}

}  // namespace

std::string case_of(const std::string& record_id) {
    size_t cut = record_id.size();
    for (int i = 0; i < 3 && cut != std::string::npos && cut > 0; ++i)
        cut = record_id.rfind('/', cut - 1);
    return cut == std::string::npos ? record_id : record_id.substr(0, cut);
}

std::string plural(size_t n, const char* noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

void print_columns(std::ostream& out, const std::vector<std::vector<std::string>>& rows,
                   bool right_last, size_t verdict_column, const View& view) {
    if (rows.empty()) return;
    const size_t columns = rows.front().size();
    std::vector<size_t> widths(columns, 0);
    for (const auto& r : rows)
        for (size_t i = 0; i < columns; ++i) widths[i] = std::max(widths[i], width(r[i]));
    for (size_t row = 0; row < rows.size(); ++row) {
        const auto& r = rows[row];
        for (size_t i = 0; i < columns; ++i) {
            const bool last = i + 1 == columns;
            const std::string gap(widths[i] - width(r[i]), ' ');
            if (last && right_last) out << gap;
            if (i == verdict_column && row > 0)
                print_verdict(out, r[i], view);
            else
                out << r[i];
            if (!last) out << gap << "  ";
        }
        out << '\n';
    }
}

namespace {

// "\nkernels 4510.6 s, of which compiling and autotuning 4401.3 s (fla's count)" where a
// provider counted any, so that a cold run's JIT cost stands apart from its kernels'
std::string jit_line(const Report& report) {
    double kernels = 0, jit = 0;
    std::set<std::string> counted;
    for (const CaseRecord& c : report.cases) {
        kernels += c.kernel_seconds;
        jit += c.jit_seconds;
        if (c.jit_seconds > 0) counted.insert(c.backend);
    }
    if (counted.empty()) return "";
    std::string who;
    for (const std::string& b : counted) who += (who.empty() ? "" : ", ") + b;
    return "\nkernels " + format("%.1f", kernels) + " s, of which compiling and autotuning " +
           format("%.1f", jit) + " s (" + who + "'s count)";
}

}  // namespace

void VerdictCounts::add(const std::string& verdict) {
    ++records;
    if (verdict == "pass")
        ++pass;
    else if (verdict == "warn")
        ++warn;
    else if (verdict == "fail")
        ++fail;
    else
        ++error;
}

std::string totals_line(const Report& report, const View& view) {
    VerdictCounts n;
    for (const CaseRecord& c : report.cases) n.add(c.verdict);
    const std::string why = view.why_incomplete.empty() ? "" : ": " + view.why_incomplete;
    return plural(n.records, "case") + ": " + std::to_string(n.pass) + " passed, " +
           std::to_string(n.warn) + " warned, " + std::to_string(n.fail) + " failed, " +
           plural(n.error, "error") + (report.complete ? "" : " (incomplete run" + why + ")") +
           jit_line(report);
}

void print_summary_table(std::ostream& out, const Report& report, const View& view) {
    std::vector<std::vector<std::string>> rows = {
        {"case", "verdict", "worst", "rel_rmse", "bound", "seconds"}};
    for (const CaseRecord& c : report.cases) {
        const MetricRow* worst = c.worst();
        rows.push_back({shorten_id(c.id), upper(c.verdict), worst ? worst->tensor : "-",
                        worst ? format("%.2e", worst->rel_rmse) : "-",
                        worst ? format("%.2e", worst->bound) : "-", format("%.2f", c.seconds)});
    }
    // seconds are right-aligned so that their decimal points line up
    if (!report.cases.empty()) print_columns(out, rows, true, 1, view);
    out << totals_line(report, view) << '\n';
}

void print_case_failure(std::ostream& out, const CaseRecord& record, const View& view) {
    print_verdict(out, upper(record.verdict), view);
    out << ' ' << record.id << "  " << record.shape;
    if (!record.cu_seqlens.empty()) out << "  cu_seqlens " << record.cu_seqlens;
    out << "  " << record.input_dtype << " in / " << record.state_dtype << " state / "
        << record.layout << '\n';
    // each fact once: a failing measure is told by its finding, which carries its numbers
    if (record.verdict == "error" || shown_findings(record).empty())
        print_indented(out, record.message);
    print_findings(out, record);
}

void print_case_details(std::ostream& out, const Report& report, const View& view) {
    const auto same_findings = [](const CaseRecord& a, const CaseRecord& b) {
        if (a.verdict != b.verdict || a.message != b.message) return false;
        const std::vector<const Finding*> fa = shown_findings(a), fb = shown_findings(b);
        if (fa.size() != fb.size()) return false;
        for (size_t i = 0; i < fa.size(); ++i)
            if (fa[i]->kind != fb[i]->kind || fa[i]->tensor != fb[i]->tensor ||
                fa[i]->message != fb[i]->message)
                return false;
        return true;
    };
    const auto& cases = report.cases;
    for (size_t i = 0; i < cases.size();) {
        const CaseRecord& first = cases[i++];
        if (first.verdict == "pass" && shown_findings(first).empty()) continue;
        if (view.failures_only && (first.verdict == "pass" || first.verdict == "warn")) continue;
        // the records of one case that say the same (its prologue's findings, the end of its
        // isolated process) are told once
        std::vector<std::string> alike;
        const std::string stem = case_of(first.id);
        while (i < cases.size() && case_of(cases[i].id) == stem && same_findings(first, cases[i]))
            alike.push_back(cases[i++].id.substr(stem.size() + 1));
        out << '\n';
        print_case_failure(out, first, view);
        if (alike.empty()) continue;
        std::string names;
        for (const auto& a : alike) names += (names.empty() ? "" : ", ") + a;
        out << "  the same for " << names << '\n';
    }
}

void print_findings(std::ostream& out, const CaseRecord& record) {
    for (const Finding* finding : shown_findings(record)) {
        const Finding& f = *finding;
        out << "  " << f.kind << (f.tensor.empty() ? "" : " " + f.tensor) << ": " << f.message
            << '\n';
        if (!f.history.empty()) out << "      " << f.history << '\n';
    }
}

}  // namespace lav::report
