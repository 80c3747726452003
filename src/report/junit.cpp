// src/report/junit.cpp — writes JUnit XML (the subset every common CI reporter reads).
#include "report/junit.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/text.h"

namespace lav::report {
namespace {

std::string xml_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\n':
                out += "&#10;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

struct TestCase {
    std::string classname;
    std::string name;
    double seconds = 0;
    std::string kind;     // "", "failure" or "error"
    std::string message;  // one line
    std::string details;
    std::string output;  // <system-out>: the findings of a case that did not fail
};

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

void write_xml(const std::string& path, const std::string& suite,
               const std::vector<TestCase>& cases) {
    size_t failures = 0, errors = 0;
    double seconds = 0;
    for (const auto& c : cases) {
        failures += c.kind == "failure";
        errors += c.kind == "error";
        seconds += c.seconds;
    }
    std::ostringstream xml;
    xml << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\""
        << xml_escape(suite) << "\" tests=\"" << cases.size() << "\" failures=\"" << failures
        << "\" errors=\"" << errors << "\" time=\"" << seconds << "\">\n";
    for (const auto& c : cases) {
        xml << "    <testcase classname=\"" << xml_escape(c.classname) << "\" name=\""
            << xml_escape(c.name) << "\" time=\"" << c.seconds << "\"";
        if (c.kind.empty() && c.output.empty()) {
            xml << "/>\n";
            continue;
        }
        xml << ">\n";
        if (!c.kind.empty())
            xml << "      <" << c.kind << " message=\"" << xml_escape(c.message) << "\">"
                << xml_escape(c.details) << "</" << c.kind << ">\n";
        if (!c.output.empty())
            xml << "      <system-out>" << xml_escape(c.output) << "</system-out>\n";
        xml << "    </testcase>\n";
    }
    xml << "  </testsuite>\n</testsuites>\n";
    const std::string tmp = path + ".tmp";
    std::ofstream file(tmp);
    file << xml.str();
    file.close();
    if (!file || std::rename(tmp.c_str(), path.c_str()) != 0)
        throw ReportError("cannot write JUnit file " + path, ExitCode::kEnvironment);
}

// The one-line reason of a failed case: its worst failing tensor, or its first finding.
std::string reason(const CaseRecord& c) {
    for (const auto& m : c.metrics)
        if (!m.pass)
            return "tensor " + m.tensor + ": rel_rmse " + sci(m.rel_rmse, 2) + " > bound " +
                   sci(m.bound, 2) +
                   (m.nonfinite ? ", " + std::to_string(m.nonfinite) + " nonfinite" : "");
    if (!c.findings.empty()) return c.findings.front().kind + " " + c.findings.front().tensor;
    return first_line(c.message);
}

}  // namespace

void write_junit_run(const std::string& path, const Report& run) {
    std::vector<TestCase> cases;
    for (const auto& c : run.cases) {
        TestCase t{c.scenario, c.id, c.seconds, "", "", "", ""};
        if (c.verdict == "pass" || c.verdict == "warn") {
            // a warning is not a failure of the CI job; its findings are the test's output
            if (c.verdict == "warn") t.output = "WARN: " + c.message + "\n";
            for (const auto& f : c.findings)
                t.output += f.kind + " " + f.tensor + ": " + f.message + "\n";
        } else if (c.verdict == "fail") {
            t.kind = "failure";
            t.message = reason(c);
            for (const auto& f : c.findings)
                t.details += f.kind + " " + f.tensor + ": " + f.message + "\n";
        } else if (c.verdict == "error") {
            t.kind = "error";
            t.message = first_line(c.message);
            t.details = c.message;
        }
        cases.push_back(std::move(t));
    }
    write_xml(path, "lav run", cases);
}

void write_junit_gate(const std::string& path, const GateResult& result, const Report& run,
                      const Report& baseline, const GateOptions& options) {
    std::map<std::string, TestCase> cases;
    for (const Report* r : {&baseline, &run})
        for (const auto& c : r->cases)
            cases[c.id] = TestCase{c.scenario, c.id, c.seconds, "", "", "", ""};
    for (const auto& g : result.regressions) {
        TestCase& t = cases[g.case_id];
        const std::string line =
            (g.tensor.empty() ? "" : "tensor " + g.tensor + " ") + g.measure +
            (g.note.empty() ? " " + sci(g.baseline, 2) + " -> " + sci(g.run, 2) : " " + g.note);
        if (t.kind.empty()) t.message = "regression: " + line;
        t.kind = "failure";
        t.details += line + "\n";
    }
    if (!options.allow_missing) {
        const auto mark = [&cases](const std::string& id, const char* message) {
            cases[id].kind = "failure";
            cases[id].message = message;
        };
        for (const auto& id : result.missing_in_run) mark(id, "missing from the run");
        for (const auto& id : result.missing_in_baseline) mark(id, "not in the baseline");
    }
    std::vector<TestCase> list;
    for (auto& [id, t] : cases) list.push_back(std::move(t));
    write_xml(path, "lav gate", list);
}

}  // namespace lav::report
