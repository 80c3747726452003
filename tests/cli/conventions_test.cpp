// tests/cli/conventions_test.cpp — how every lav command behaves: show's views and formats, ids
// as filters, --fail-fast, --rerun-failed, help and version, quiet and verbose, colour, which
// stream gets what, error prefixes, diff of a run with itself.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/lav_command.h"
#include "report/report.h"

namespace lav {
namespace {

using test::lav;
using test::Result;
using test::scratch;

const char kVarlen[] = "scenarios/smoke/simple_gla_varlen.toml";
const char kHeadFirst[] = "smoke_simple_gla_varlen[layout=head_first]";
const char kSeed[] = "scenarios/seeds/var_normalize_scale.toml";
const char kSeedCase[] = "seed_var_normalize_scale[prologue.autocast=off]";

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// lav's stdout alone, and its stderr alone (exit codes kept)
Result stdout_of(const std::string& args) {
    return test::lav_command(std::string("(") + LAV_BINARY, args + " 2>/dev/null)");
}
Result stderr_of(const std::string& args) {
    return test::lav_command(std::string("(") + LAV_BINARY, args + " 2>&1 >/dev/null)");
}

std::vector<std::string> ids_of(const std::string& report) {
    std::vector<std::string> ids;
    for (const auto& r : report::read_report(report).cases) ids.push_back(r.id);
    return ids;
}

// Two cases whose every record fails: a bound no bf16 kernel meets.
std::string failing_scenario() {
    const std::string path = scratch("failing.toml");
    std::ofstream(path) << "name = \"conv_fail\"\ndescription = \"every record fails\"\n"
                           "family = \"simple_gla\"\n"
                           "variants = [\"chunk\", \"recurrent\"]\n"
                           "[shape]\nB = 1\nT = 64\nH = 2\nK = 16\nV = 16\n"
                           "[tolerances]\no = 1e-12\n"
                           "[matrix]\nlayout = [\"head_first\", \"head_last\"]\n";
    return path;
}

// The seed scenario's report: two cases of one record each, with findings, trace and contract.
const std::string& seed_report() {
    static const std::string out = [] {
        const std::string path = scratch("seed.h5");
        const Result run = lav(std::string("run ") + kSeed + " --out " + path);
        EXPECT_EQ(run.code, 0) << run.output;
        return path;
    }();
    return out;
}

// A report whose ids and messages carry what JSON and CSV must escape.
std::string awkward_report() {
    report::Report r;
    r.complete = true;
    r.run.command_line = "lav run \"x\"";
    report::CaseRecord c;
    c.id = "odd,\"name\"[a=1]/chunk/cpu/fwd";
    c.verdict = "fail";
    c.message = "line one\nline two\x1b[2J";
    c.metrics.push_back({"o", "bf16", "bf16", 0.5, 1.0, "[0]", 0.25, 0, 1e-3, false});
    c.findings.push_back({"TOLERANCE", "o", "a \"quoted\", \\ message\x01", ""});
    r.cases.push_back(c);
    const std::string path = scratch("awkward.h5");
    report::write_report(path, r);
    return path;
}

// Whether `text` is one JSON document: brackets balance outside strings, and nothing follows.
bool one_json_document(const std::string& text) {
    int depth = 0;
    bool in_string = false, closed = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (closed && !std::isspace(static_cast<unsigned char>(c))) return false;
        if (in_string) {
            if (static_cast<unsigned char>(c) < 0x20) return false;
            if (c == '\\') ++i;
            if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            ++depth;
        } else if (c == '}' || c == ']') {
            closed = --depth == 0;
        }
    }
    return closed && !in_string;
}

// The fields of each CSV row (RFC 4180: quoted fields may hold commas, quotes and line breaks).
std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
    std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
    bool quoted = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quoted) {
            if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
                rows.back().back() += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                rows.back().back() += c;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            rows.back().emplace_back();
        } else if (c == '\n') {
            rows.emplace_back(1);
        } else {
            rows.back().back() += c;
        }
    }
    if (rows.back() == std::vector<std::string>(1)) rows.pop_back();
    return rows;
}

TEST(Conventions, ShowCaseTellsMetricsFindingsTraceAndContract) {
    const std::string view = lav("show " + seed_report() + " --case '" + kSeedCase + "'").output;
    for (const char* part : {"WARN seed_var_normalize_scale[prologue.autocast=off]/chunk/cpu/fwd",
                             "tensor  dtype  expected  rel_rmse",
                             "PROMOTION q:", "normalize(q): fp16 —aten::mul(scale_mul: fp32)→ fp32",
                             "precision contract of simple_gla.chunk_fwd",
                             "trace:", "aten::linalg_vector_norm", "declared"})
        EXPECT_TRUE(has(view, part)) << part << "\n" << view;
    EXPECT_FALSE(has(view, "autocast=bf16")) << "the other case:\n" << view;

    const Result record =
        lav("show " + seed_report() + " --case '" + kSeedCase + "/chunk/cpu/fwd'");
    EXPECT_EQ(record.code, 0) << record.output;
    EXPECT_TRUE(has(record.output, "precision contract")) << record.output;
    const Result none = lav("show " + seed_report() + " --case no_such_case");
    EXPECT_EQ(none.code, 2) << none.output;
    EXPECT_TRUE(has(none.output, "has no record or case 'no_such_case'")) << none.output;
}

TEST(Conventions, ShowFindingsGroupsByKindWithTheirRecords) {
    const Result r = lav("show " + seed_report() + " --findings");
    ASSERT_EQ(r.code, 0) << r.output;
    const size_t promotion = r.output.find("PROMOTION: 4 findings in 4 records");
    const size_t boundary = r.output.find("BOUNDARY_MISMATCH: 4 findings in 4 records");
    ASSERT_NE(promotion, std::string::npos) << r.output;
    ASSERT_NE(boundary, std::string::npos) << r.output;
    EXPECT_LT(promotion, boundary) << "kinds in reports/SCHEMA.md's order";
    EXPECT_TRUE(has(r.output, std::string("    in ") + kSeedCase + ": chunk/cpu/fwd")) << r.output;
}

TEST(Conventions, ShowFormatsAreMachineReadable) {
    const std::string file = awkward_report();
    for (const char* view : {"", " --findings", " --backends", " --case 'odd,\"name\"[a=1]'"}) {
        const Result json = stdout_of("show " + file + view + " --format json");
        EXPECT_EQ(json.code, 0) << view << json.output;
        EXPECT_TRUE(one_json_document(json.output)) << view << "\n" << json.output;
        EXPECT_TRUE(has(json.output, R"("odd,\"name\"[a=1]/chunk/cpu/fwd")")) << json.output;

        const Result csv = stdout_of("show " + file + view + " --format csv");
        EXPECT_EQ(csv.code, 0) << view << csv.output;
        const auto rows = csv_rows(csv.output);
        ASSERT_GE(rows.size(), 2u) << csv.output;
        for (const auto& row : rows) EXPECT_EQ(row.size(), rows.front().size()) << csv.output;
        EXPECT_TRUE(has(csv.output, "\"odd,\"\"name\"\"[a=1]/chunk/cpu/fwd\"")) << csv.output;
    }
    const Result records = stdout_of("show " + file + " --case 'odd,\"name\"[a=1]' --format json");
    EXPECT_TRUE(has(records.output, R"("line one\nline two\u001b[2J")")) << records.output;
    EXPECT_TRUE(has(records.output, R"("a \"quoted\", \\ message\u0001")")) << records.output;
    const Result header = stdout_of("show " + file + " --format csv");
    EXPECT_EQ(header.output.rfind("id,verdict,worst,rel_rmse,bound,seconds\n", 0), 0u)
        << header.output;
    EXPECT_EQ(lav("show " + file + " --format yaml").code, 2);
}

// lav show --backends: a row per family and backend, families and backends in name order, its
// records by verdict and the worst rel_rmse of each pass; a NaN is the worst, and an error
// record counts with the measures it was judged on.
TEST(Conventions, ShowBackendsPutsEachFamilysBackendsSideBySide) {
    report::Report r;
    r.complete = true;
    const auto record = [&r](const std::string& family, const std::string& variant,
                             const std::string& backend, const std::string& pass,
                             const std::string& verdict,
                             std::vector<std::pair<std::string, double>> measures) {
        report::CaseRecord c;
        c.id = family + "_case/" + variant + "/" + backend + "/" + pass;
        c.family = family;
        c.variant = variant;
        c.backend = backend;
        c.pass = pass;
        c.verdict = verdict;
        for (const auto& [tensor, rel_rmse] : measures)
            c.metrics.push_back({tensor, "bf16", "bf16", rel_rmse, 0, "[0]", 0, 0, 1e-2, true});
        r.cases.push_back(c);
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    record("simple_gla", "chunk", "fla", "fwd", "pass", {{"o", 3e-3}});
    record("simple_gla", "chunk", "cpu", "fwd", "pass", {{"o", 2e-3}, {"ht", 1e-3}});
    record("simple_gla", "recurrent", "fla", "fwd", "fail", {{"o", 4e-3}});
    record("simple_gla", "chunk", "fla", "bwd", "error", {{"dk", 1e-2}, {"dq", nan}, {"dv", 1}});
    record("gla", "recurrent", "cpu", "bwd", "pass", {{"dq", 5e-3}});
    record("gla", "chunk", "cpu", "fwd", "error", {});
    const std::string path = scratch("backends.h5");
    report::write_report(path, r);

    const Result table = lav("show " + path + " --backends");
    ASSERT_EQ(table.code, 0) << table.output;
    std::vector<std::vector<std::string>> rows;
    std::istringstream lines(table.output);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        rows.emplace_back(std::istream_iterator<std::string>(words),
                          std::istream_iterator<std::string>());
    }
    const std::vector<std::vector<std::string>> expected = {
        {"gla", "cpu", "2", "1", "0", "0", "1", "-", "5.00e-03", "recurrent", "dq"},
        {"simple_gla", "cpu", "1", "1", "0", "0", "0", "2.00e-03", "chunk", "o", "-"},
        {"fla", "3", "1", "0", "1", "1", "4.00e-03", "recurrent", "o", "nan", "chunk", "dq"}};
    ASSERT_GE(rows.size(), 4u) << table.output;
    for (size_t i = 0; i < expected.size(); ++i)
        EXPECT_EQ(rows[i + 1], expected[i]) << table.output;

    const Result csv = stdout_of("show " + path + " --backends --format csv");
    EXPECT_TRUE(has(csv.output,
                    "simple_gla,fla,3,1,0,1,1,simple_gla_case/recurrent/fla/fwd,o,"
                    "0.004,simple_gla_case/chunk/fla/bwd,dq,nan\n"))
        << csv.output;
    EXPECT_EQ(lav("show " + path + " --backends --findings").code, 2);
}

TEST(Conventions, ShowExitsZeroForAReportOfFailures) {
    const std::string out = scratch("failed.h5");
    ASSERT_EQ(lav("run " + failing_scenario() + " --out " + out).code, 1);
    const Result show = lav("show " + out);
    EXPECT_EQ(show.code, 0) << show.output;
    EXPECT_TRUE(has(show.output, "FAIL")) << show.output;
    EXPECT_EQ(lav("show " + out + " --findings").code, 0);
}

TEST(Conventions, AnIdLavPrintedFiltersLiterally) {
    // regex characters in ids: [ ] . =
    const std::string out = scratch("literal.h5");
    const std::string base = std::string("run ") + kVarlen + " --out " + out + " --filter '";
    ASSERT_EQ(lav(base + kHeadFirst + "'").code, 0);
    EXPECT_EQ(ids_of(out),
              (std::vector<std::string>{std::string(kHeadFirst) + "/chunk/cpu/fwd",
                                        std::string(kHeadFirst) + "/chunk/cpu/bwd",
                                        std::string(kHeadFirst) + "/recurrent/cpu/fwd",
                                        std::string(kHeadFirst) + "/recurrent/cpu/bwd"}));
    ASSERT_EQ(lav(base + kHeadFirst + "/recurrent'").code, 0);
    EXPECT_EQ(ids_of(out).size(), 2u);
    ASSERT_EQ(lav(base + kHeadFirst + "/recurrent/cpu/bwd'").code, 0);
    EXPECT_EQ(ids_of(out),
              (std::vector<std::string>{std::string(kHeadFirst) + "/recurrent/cpu/bwd"}));
}

TEST(Conventions, AFilterRegexSearchesTheWholeRecordId) {
    const std::string out = scratch("regex.h5");
    for (const char* isolate : {"", " --isolate"}) {
        const Result run = lav(std::string("run ") + kVarlen + " --out " + out +
                               " --filter '/cpu/bwd$'" + isolate);
        ASSERT_EQ(run.code, 0) << run.output;
        const std::vector<std::string> ids = ids_of(out);
        EXPECT_EQ(ids.size(), 4u) << isolate;
        for (const auto& id : ids)
            EXPECT_TRUE(std::regex_search(id, std::regex("/cpu/bwd$"))) << id;
    }
    EXPECT_EQ(lav(std::string("run ") + kVarlen + " --out " + out + " --filter '/cuda/'").code, 2);
}

TEST(Conventions, FailFastStopsAfterTheFirstFailingCase) {
    const std::string out = scratch("fast.h5");
    const Result run = lav("run " + failing_scenario() + " --fail-fast --out " + out);
    EXPECT_EQ(run.code, 1) << run.output;
    EXPECT_TRUE(has(run.output,
                    "2 cases: 0 passed, 0 warned, 2 failed, 0 errors (incomplete run: "
                    "stopped after the first failure, 2 records not run)"))
        << run.output;
    const report::Report rep = report::read_report(out);
    EXPECT_FALSE(rep.complete);
    EXPECT_EQ(rep.cases.size(), 2u);
    // without it every case runs
    ASSERT_EQ(lav("run " + failing_scenario() + " --out " + out).code, 1);
    EXPECT_EQ(report::read_report(out).cases.size(), 4u);
}

TEST(Conventions, RerunFailedRunsOnlyWhatFailed) {
    const std::string first = scratch("mixed.h5"), again = scratch("again.h5");
    ASSERT_EQ(
        lav("run " + failing_scenario() + " " + kVarlen + " --filter '/fwd$' --out " + first).code,
        1);
    ASSERT_EQ(ids_of(first).size(), 8u);
    // the scenario files come from the report
    const Result rerun = lav("run --rerun-failed " + first + " --out " + again);
    EXPECT_EQ(rerun.code, 1) << rerun.output;
    const std::vector<std::string> ids = ids_of(again);
    EXPECT_EQ(ids.size(), 4u);
    for (const auto& id : ids) EXPECT_EQ(id.rfind("conv_fail[", 0), 0u) << id;
    // a run without failures leaves nothing to rerun
    const std::string clean = scratch("clean.h5");
    ASSERT_EQ(lav(std::string("run ") + kVarlen + " --out " + clean).code, 0);
    const Result nothing = lav("run --rerun-failed " + clean + " --out " + again);
    EXPECT_EQ(nothing.code, 0) << nothing.output;
    EXPECT_TRUE(has(nothing.output, "nothing to rerun")) << nothing.output;
}

TEST(Conventions, VersionHelpAndDidYouMean) {
    const Result version = stdout_of("version");
    EXPECT_EQ(version.code, 0);
    EXPECT_EQ(version.output.rfind("lav ", 0), 0u) << version.output;
    EXPECT_EQ(version.output, stdout_of("--version").output);
    for (const char* command : {"run", "show", "diff", "gate", "validate", "list", "report"}) {
        const Result help = stdout_of(std::string("help ") + command);
        EXPECT_EQ(help.code, 0) << command;
        EXPECT_EQ(help.output, stdout_of(std::string(command) + " --help").output) << command;
    }
    const Result typo = lav("rnu");
    EXPECT_EQ(typo.code, 2);
    EXPECT_EQ(typo.output, "lav: error: unknown command 'rnu'; did you mean 'run'?\n");
    EXPECT_TRUE(has(lav("shwo x.h5").output, "did you mean 'show'?"));
    const Result unknown = lav("frobnicate");
    EXPECT_EQ(unknown.code, 2);
    EXPECT_FALSE(has(unknown.output, "did you mean")) << unknown.output;
    EXPECT_TRUE(has(unknown.output, "the commands are run, validate")) << unknown.output;
}

TEST(Conventions, RunUsageNamesEveryOptionAndNoPositionalAsAnOption) {
    const std::string help = stdout_of("run --help").output;
    const size_t options = help.find("\noptions:\n");
    ASSERT_NE(options, std::string::npos) << help;
    const std::string usage = help.substr(0, options);
    EXPECT_EQ(usage.rfind("usage: lav run <files|dirs>...", 0), 0u) << usage;
    EXPECT_FALSE(has(help, "--paths")) << help;
    EXPECT_FALSE(has(help, " arg ")) << help;
    const std::regex option(R"(^  (?:-\w \[ )?--([a-z-]+))");
    size_t count = 0;
    std::istringstream lines(help.substr(options));
    for (std::string line; std::getline(lines, line);) {
        std::smatch m;
        if (!std::regex_search(line, m, option) || m[1] == "help") continue;
        ++count;
        EXPECT_TRUE(has(usage, "[--" + m[1].str())) << m[1] << " missing from\n" << usage;
    }
    EXPECT_GT(count, 20u) << help;
    EXPECT_FALSE(has(stdout_of("diff --help").output, "--files")) << "diff's positionals";
}

TEST(Conventions, QuietPrintsTheTotalsAndFailuresVerboseTheThreads) {
    const std::string out = scratch("quiet.h5");
    const Result quiet = lav(std::string("run ") + kVarlen + " -q --out " + out);
    EXPECT_EQ(quiet.code, 0);
    EXPECT_EQ(quiet.output, "8 cases: 8 passed, 0 warned, 0 failed, 0 errors\n");
    const Result failing = lav("run " + failing_scenario() + " --quiet --out " + out);
    EXPECT_EQ(failing.code, 1);
    EXPECT_FALSE(has(failing.output, "verdict  worst")) << failing.output;
    EXPECT_TRUE(has(failing.output, "\nFAIL conv_fail[layout=head_first]/chunk/cpu/fwd"))
        << failing.output;
    EXPECT_TRUE(has(failing.output, "\n4 cases: 0 passed, 0 warned, 4 failed, 0 errors\n"))
        << failing.output;

    const Result verbose = stderr_of(std::string("run ") + kVarlen + " -v --out " + out);
    EXPECT_TRUE(has(verbose.output, "[1/8] " + std::string(kHeadFirst))) << verbose.output;
    const Result chosen = test::lav_command(std::string("env -u OMP_WAIT_POLICY ") + LAV_BINARY,
                                            std::string("run ") + kVarlen + " -v --out " + out);
    EXPECT_TRUE(has(chosen.output, "LibTorch threads, OMP_WAIT_POLICY=PASSIVE (set by lav)"))
        << chosen.output;
    const Result given = test::lav_command(std::string("env OMP_WAIT_POLICY=ACTIVE ") + LAV_BINARY,
                                           std::string("run ") + kVarlen + " -v --out " + out);
    EXPECT_TRUE(has(given.output, "OMP_WAIT_POLICY=ACTIVE (from the environment)")) << given.output;
}

TEST(Conventions, ColourOnATerminalOnlyAndNeverWithNoColor) {
    const std::string show = "show " + seed_report();
    EXPECT_TRUE(has(lav(show + " --color always").output, "\x1b[33mWARN\x1b[0m"));
    EXPECT_FALSE(has(lav(show + " --color never").output, "\x1b["));
    EXPECT_FALSE(has(lav(show).output, "\x1b[")) << "a pipe is no terminal";
    EXPECT_EQ(lav(show + " --color sometimes").code, 2);
    // on a terminal (script gives lav one)
    const auto on_terminal = [&](const std::string& env) {
        return test::lav_command("script -qec \"" + env + " " + LAV_BINARY, show + "\" /dev/null")
            .output;
    };
    EXPECT_TRUE(has(on_terminal("env -u NO_COLOR"), "\x1b[33mWARN")) << on_terminal("env");
    EXPECT_FALSE(has(on_terminal("env NO_COLOR="), "\x1b[33m"));
    EXPECT_FALSE(has(on_terminal("env NO_COLOR=1"), "\x1b[33m"));
}

TEST(Conventions, ResultsOnStdoutDiagnosticsOnStderr) {
    const std::string out = scratch("streams.h5");
    const std::string run = std::string("run ") + kVarlen + " -v --out " + out;
    const Result results = stdout_of(run);
    EXPECT_TRUE(has(results.output, "verdict  worst")) << results.output;
    EXPECT_FALSE(has(results.output, "[1/8]")) << results.output;
    EXPECT_FALSE(has(results.output, "threads:")) << results.output;
    EXPECT_FALSE(has(stderr_of(run).output, "verdict  worst"));
    for (const std::string& args :
         {std::string("show ") + out, std::string("show ") + out + " --findings",
          std::string("diff ") + out + " " + out, std::string("validate ") + kVarlen,
          std::string("list"), std::string("--help"), std::string("version")})
        EXPECT_EQ(stderr_of(args).output, "") << args;
    for (const std::string& args :
         {std::string(""), std::string("rnu"), std::string("show no/such.h5"),
          std::string("run no/such/dir"), std::string("run --filter '('") + " " + kVarlen,
          std::string("validate tests/data/scenarios/cli/bad_dtype.toml"),
          std::string("diff ") + out, std::string("show ") + out + " --case nothing"}) {
        const Result r = stdout_of(args);
        EXPECT_NE(r.code, 0) << args;
        EXPECT_EQ(r.output, "") << args;
    }
}

TEST(Conventions, NoErrorIsPrefixedTwice) {
    for (const std::string& args :
         {std::string("show no/such.h5"), std::string("diff no/such.h5 other.h5"),
          std::string("gate no/such.h5 --baseline no/base.h5"), std::string("run no/such/dir"),
          std::string("run tests/data/scenarios/cli/bad_dtype.toml --out /dev/null"),
          std::string("rnu")}) {
        const Result r = lav(args);
        EXPECT_NE(r.code, 0) << args;
        const std::string first = r.output.substr(0, r.output.find('\n'));
        EXPECT_EQ(first.find("error:"), first.rfind("error:")) << args << ": " << first;
    }
    EXPECT_EQ(lav("show no/such.h5").output.rfind("no/such.h5: error: no such file", 0), 0u);
}

TEST(Conventions, DiffOfARunWithItselfSaysNoDifferences) {
    const std::string a = scratch("diff_a.h5"), b = scratch("diff_b.h5");
    ASSERT_EQ(lav(std::string("run ") + kVarlen + " --threads 1 --out " + a).code, 0);
    ASSERT_EQ(lav(std::string("run ") + kVarlen + " --threads 1 --out " + b).code, 0);
    const Result same = lav("diff " + a + " " + b);
    EXPECT_EQ(same.code, 0);
    EXPECT_TRUE(has(same.output, "no differences: the same 8 records")) << same.output;
    EXPECT_FALSE(has(same.output, "x1.000")) << same.output;
    const Result other = lav("diff " + a + " " + seed_report());
    EXPECT_EQ(other.code, 0);
    EXPECT_FALSE(has(other.output, "no differences")) << other.output;
    EXPECT_TRUE(has(other.output, "only in A: ")) << other.output;
}

// A report carries its scenario files and command line: it runs again where the files are not.
TEST(Conventions, AReportRunsAgainFromWhatItCarries) {
    const std::string dir = test::scratch("from_report");
    std::filesystem::create_directories(dir);
    const std::string copy = dir + "/impossible.toml";
    std::filesystem::copy_file(
        std::string(LAV_SOURCE_DIR) + "/tests/data/scenarios/cli/impossible_tolerance.toml", copy,
        std::filesystem::copy_options::overwrite_existing);
    const std::string first = dir + "/first.h5", again = dir + "/again.h5";
    EXPECT_EQ(test::lav("run " + copy + " --out " + first).code, 1);
    std::filesystem::remove(copy);
    const report::Report stored = report::read_report(first);
    ASSERT_EQ(stored.run.scenario_paths, std::vector<std::string>{copy});
    EXPECT_NE(stored.run.scenario_texts[0].find("cli_impossible_tolerance"), std::string::npos);
    EXPECT_NE(stored.run.command_line.find(copy), std::string::npos);

    const test::Result rerun = test::lav("run --from-report " + first + " --out " + again);
    EXPECT_EQ(rerun.code, 1) << rerun.output;
    const report::Report second = report::read_report(again);
    ASSERT_EQ(second.cases.size(), stored.cases.size());
    for (size_t i = 0; i < second.cases.size(); ++i) {
        EXPECT_EQ(second.cases[i].id, stored.cases[i].id);
        EXPECT_EQ(second.cases[i].scenario_file, copy) << "reported by the name it ran under";
        ASSERT_EQ(second.cases[i].metrics.size(), stored.cases[i].metrics.size());
        for (size_t m = 0; m < second.cases[i].metrics.size(); ++m)
            EXPECT_EQ(second.cases[i].metrics[m].rel_rmse, stored.cases[i].metrics[m].rel_rmse);
    }
    EXPECT_EQ(second.run.scenario_texts, stored.run.scenario_texts);

    const test::Result both = test::lav("run --from-report " + first + " " + copy);
    EXPECT_EQ(both.code, 2) << both.output;
}

}  // namespace
}  // namespace lav
