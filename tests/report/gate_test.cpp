// tests/report/gate_test.cpp — gate decisions, baselines, diff and JUnit output on sample reports.
#include "report/gate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "report/diff.h"
#include "report/junit.h"
#include "sample_report.h"

namespace lav::report {
namespace {

namespace fs = std::filesystem;

Report sample() {
    Report r;
    r.complete = true;
    r.run = samples::sample_run();
    r.cases = {samples::passing_case(), samples::failing_case()};
    return r;
}

MetricRow& row(Report& r, size_t c, const std::string& tensor) {
    for (auto& m : r.cases[c].metrics)
        if (m.tensor == tensor) return m;
    throw std::runtime_error("no tensor " + tensor);
}

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("lav_gate_test_" + std::to_string(getpid()));
    fs::create_directories(dir);
    return dir / name;
}

TEST(Gate, IdenticalRunsPass) {
    const Report r = sample();
    const GateOptions options;
    const GateResult g = gate(r, r, options);
    EXPECT_TRUE(g.passed(options));
    EXPECT_EQ(g.compared, 2u);
    EXPECT_TRUE(g.regressions.empty());
    EXPECT_TRUE(g.improvements.empty());
}

TEST(Gate, DoubledErrorOnOneTensorFailsNamingIt) {
    const Report base = sample();
    Report run = base;
    row(run, 0, "ht").rel_rmse *= 2;
    const GateOptions options;
    const GateResult g = gate(run, base, options);
    EXPECT_FALSE(g.passed(options));
    ASSERT_EQ(g.regressions.size(), 1u);
    EXPECT_EQ(g.regressions[0].case_id, base.cases[0].id);
    EXPECT_EQ(g.regressions[0].tensor, "ht");
    EXPECT_EQ(g.regressions[0].measure, "rel_rmse");
    std::ostringstream out;
    print_gate(out, g, options);
    EXPECT_NE(out.str().find("tensor ht  rel_rmse"), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("GATE FAIL"), std::string::npos);
}

TEST(Gate, SlackAndFloorDecide) {
    const Report base = sample();
    Report run = base;
    row(run, 0, "o").rel_rmse *= 1.05;  // inside the default 10 % slack
    GateOptions options;
    EXPECT_TRUE(gate(run, base, options).passed(options));
    options.tolerances["rel_rmse"].slack = 0.01;
    EXPECT_FALSE(gate(run, base, options).passed(options));
    options.tolerances["rel_rmse"].floor = 1.0;  // every value is below the floor now
    EXPECT_TRUE(gate(run, base, options).passed(options));
}

TEST(Gate, ImprovementPassesAndIsListed) {
    const Report base = sample();
    Report run = base;
    row(run, 1, "o").rel_rmse /= 3;
    const GateOptions options;
    const GateResult g = gate(run, base, options);
    EXPECT_TRUE(g.passed(options));
    ASSERT_EQ(g.improvements.size(), 1u);
    EXPECT_EQ(g.improvements[0].tensor, "o");
}

TEST(Gate, MissingCasesFailUnlessAllowed) {
    const Report base = sample();
    Report run = base;
    run.cases.pop_back();
    run.cases.push_back(samples::passing_case());
    run.cases.back().id = "new[case]/chunk/cpu/fwd";
    GateOptions options;
    const GateResult g = gate(run, base, options);
    EXPECT_FALSE(g.passed(options));
    EXPECT_EQ(g.missing_in_run, std::vector<std::string>{base.cases[1].id});
    EXPECT_EQ(g.missing_in_baseline, std::vector<std::string>{"new[case]/chunk/cpu/fwd"});
    options.allow_missing = true;
    EXPECT_TRUE(gate(run, base, options).passed(options));
}

TEST(Gate, VerdictChangeAndNaNRegress) {
    const Report base = sample();
    Report run = base;
    run.cases[0].verdict = "error";
    run.cases[0].message = "kernel threw";
    row(run, 1, "o").rel_rmse = std::nan("");
    const GateOptions options;
    const GateResult g = gate(run, base, options);
    ASSERT_EQ(g.regressions.size(), 2u);
    bool verdict = false, nan = false;
    for (const auto& r : g.regressions) {
        verdict = verdict || (r.case_id == base.cases[0].id && r.measure == "verdict");
        nan = nan || (r.case_id == base.cases[1].id && r.tensor == "o" && std::isnan(r.run));
    }
    EXPECT_TRUE(verdict);
    EXPECT_TRUE(nan);
}

// A record that errored or failed in the baseline and passes now is listed as an improvement
// (time to remake the baseline), and the gate passes.
TEST(Gate, AVerdictThatGotBetterIsAnImprovement) {
    Report base = sample();
    base.cases[0].verdict = "error";
    base.cases[0].message = "kernel threw";
    const Report run = sample();
    const GateOptions options;
    const GateResult g = gate(run, base, options);
    EXPECT_TRUE(g.passed(options));
    ASSERT_EQ(g.improvements.size(), 1u);
    EXPECT_EQ(g.improvements[0].case_id, base.cases[0].id);
    EXPECT_EQ(g.improvements[0].measure, "verdict");
    EXPECT_EQ(g.improvements[0].note, "error -> pass");
}

/// The message of the ReportError check_gate_input throws; "" (and a failure) when none.
std::string refusal(const Report& r, bool baseline, const GateOptions& options = {}) {
    try {
        check_gate_input(r, "file.h5", baseline, options);
    } catch (const ReportError& e) {
        EXPECT_EQ(e.exit_code(), ExitCode::kUsage);
        return e.what();
    }
    ADD_FAILURE() << "not refused";
    return "";
}

Report finite_sample() {
    Report r = sample();
    row(r, 1, "dq").rel_rmse = 4e-3;
    row(r, 1, "dq").max_rel = 5e-2;
    return r;
}

TEST(GateInput, NonfiniteBaselineIsRefusedUnlessAllowed) {
    for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
        Report base = finite_sample();
        row(base, 0, "ht").max_rel = bad;
        const std::string what = refusal(base, true);
        EXPECT_NE(what.find("file.h5"), std::string::npos) << what;
        EXPECT_NE(what.find(base.cases[0].id + " tensor ht"), std::string::npos) << what;
        EXPECT_NE(what.find("--allow-nonfinite-baseline"), std::string::npos) << what;
        GateOptions allowed;
        allowed.allow_nonfinite_baseline = true;
        EXPECT_NO_THROW(check_gate_input(base, "file.h5", true, allowed));
        // a run's NaN is a result to gate, not a broken input
        EXPECT_NO_THROW(check_gate_input(base, "file.h5", false, {}));
    }
}

TEST(GateInput, NonfiniteBaselineAllowedNeverHidesARunFarWorse) {
    Report base = finite_sample();
    row(base, 0, "o").rel_rmse = std::numeric_limits<double>::infinity();
    Report run = finite_sample();
    row(run, 0, "o").rel_rmse = std::nan("");
    GateOptions options;
    options.allow_nonfinite_baseline = true;
    EXPECT_FALSE(gate(run, base, options).passed(options));  // Inf -> NaN
    row(run, 0, "o").rel_rmse = 0.5;
    const GateResult fixed = gate(run, base, options);
    EXPECT_TRUE(fixed.passed(options));  // a finite value where the baseline had none
    ASSERT_EQ(fixed.improvements.size(), 1u);
}

TEST(GateInput, DuplicateIdsAreRefusedInRunAndBaseline) {
    Report r = finite_sample();
    r.cases.push_back(r.cases[0]);
    for (const bool baseline : {false, true}) {
        const std::string what = refusal(r, baseline);
        EXPECT_NE(what.find(r.cases[0].id + " is in the"), std::string::npos) << what;
        EXPECT_NE(what.find("twice"), std::string::npos) << what;
    }
}

TEST(GateInput, NegativeMeasureIsRefused) {
    Report r = finite_sample();
    row(r, 1, "o").rel_rmse = -1e-3;
    for (const bool baseline : {false, true}) {
        const std::string what = refusal(r, baseline);
        EXPECT_NE(what.find(r.cases[1].id + " tensor o has rel_rmse -0.001"), std::string::npos)
            << what;
    }
}

TEST(GateInput, IncompleteReportIsRefusedUnlessAllowed) {
    Report r = finite_sample();
    r.complete = false;
    for (const bool baseline : {false, true}) {
        const std::string what = refusal(r, baseline);
        EXPECT_NE(what.find("incomplete (complete = 0)"), std::string::npos) << what;
        EXPECT_NE(what.find("--allow-incomplete"), std::string::npos) << what;
    }
    GateOptions allowed;
    allowed.allow_incomplete = true;
    EXPECT_NO_THROW(check_gate_input(r, "file.h5", true, allowed));
}

TEST(Gate, NonfiniteInANewTensorOrCaseRegresses) {
    const Report base = finite_sample();
    Report run = base;
    MetricRow extra = run.cases[0].metrics[0];
    extra.tensor = "dh0";
    extra.nonfinite = 2;
    extra.rel_rmse = std::nan("");
    run.cases[0].metrics.push_back(extra);
    GateOptions options;
    GateResult g = gate(run, base, options);
    EXPECT_FALSE(g.passed(options));
    ASSERT_FALSE(g.regressions.empty());
    EXPECT_EQ(g.regressions[0].tensor, "dh0");
    EXPECT_NE(g.regressions[0].note.find("new tensor"), std::string::npos);

    run = base;
    run.cases.push_back(samples::passing_case());
    run.cases.back().id = "new[case]/chunk/cpu/fwd";
    run.cases.back().metrics[0].nonfinite = 1;
    options.allow_missing = true;
    g = gate(run, base, options);
    EXPECT_FALSE(g.passed(options));
    ASSERT_EQ(g.regressions.size(), 1u);
    EXPECT_EQ(g.regressions[0].case_id, "new[case]/chunk/cpu/fwd");
}

TEST(Gate, ANewDtypeFindingRegressesAKnownOneDoesNot) {
    Report base = sample();
    base.cases[0].verdict = "warn";
    base.cases[0].findings = {{"PROMOTION", "k", "k: fp16 -> fp32 at aten::addcmul", "k: ..."}};
    Report run = base;
    const GateOptions options;
    EXPECT_TRUE(gate(run, make_baseline(base), options).passed(options));
    run.cases[0].findings.push_back(
        {"BOUNDARY_MISMATCH", "q", "q reaches simple_gla as fp32", "q: ..."});
    const GateResult g = gate(run, make_baseline(base), options);
    EXPECT_FALSE(g.passed(options));
    ASSERT_EQ(g.regressions.size(), 1u);
    EXPECT_EQ(g.regressions[0].measure, "BOUNDARY_MISMATCH");
    EXPECT_EQ(g.regressions[0].tensor, "q");
    EXPECT_NE(g.regressions[0].note.find("the baseline did not have"), std::string::npos);
    // a finding that is not about dtypes is no regression by itself
    run.cases[0].findings.pop_back();
    run.cases[0].findings.push_back({"CHUNK_BOUNDARY", "dg", "edges 3x", ""});
    EXPECT_TRUE(gate(run, make_baseline(base), options).passed(options));
}

TEST(Gate, BaselineKeepsMeasuresAndDtypeFindingsOnlyAndRoundTrips) {
    Report run = sample();
    run.cases[0].findings.push_back({"CHUNK_BOUNDARY", "dg", "edges 3x", ""});
    const Report base = make_baseline(run);
    for (const auto& c : base.cases) {
        EXPECT_TRUE(c.drift.empty());
        for (const auto& f : c.findings) EXPECT_TRUE(is_dtype_finding(f.kind)) << f.kind;
        EXPECT_TRUE(c.contract.items.empty());
        EXPECT_TRUE(c.trace.empty());
        EXPECT_FALSE(c.metrics.empty());
        for (const auto& m : c.metrics) EXPECT_TRUE(m.max_abs_index.empty()) << m.tensor;
    }
    const fs::path file = scratch("base.h5");
    write_report(file.string(), base);
    const Report back = read_report(file.string());
    const GateOptions options;
    EXPECT_TRUE(gate(run, back, options).passed(options));
}

TEST(Gate, SaysFirstWhenTheMachineDiffersButNotForLavsOwnCommit) {
    const Report base = sample();
    Report run = base;
    run.run.git_commit = "ba9876543210";
    const GateOptions options;
    std::ostringstream same;
    print_gate(same, gate(run, base, options), options);
    EXPECT_EQ(same.str().rfind("GATE PASS", 0), 0u) << same.str();

    run.run.cuda_driver = "590.10.01, CUDA 13.1";
    run.run.gpu = "NVIDIA H200";
    std::ostringstream other;
    const GateResult g = gate(run, base, options);
    print_gate(other, g, options);
    const std::string text = other.str();
    EXPECT_TRUE(g.passed(options));
    EXPECT_EQ(text.rfind("the run's machine or software differs from the baseline's", 0), 0u)
        << text;
    EXPECT_NE(text.find("GPU: NVIDIA H100 80GB HBM3  ->  NVIDIA H200"), std::string::npos) << text;
    EXPECT_NE(text.find("CUDA driver: 580.159.04, CUDA 13.0  ->  590.10.01, CUDA 13.1"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("commit"), std::string::npos) << text;
}

TEST(Diff, EnvironmentFirstThenLargestChange) {
    const Report a = sample();
    Report b = a;
    b.run.torch_version = "2.12.0";
    b.run.device = "NVIDIA H200";
    b.run.compute_capability = "10.0";
    row(b, 0, "ht").rel_rmse *= 10;
    row(b, 1, "o").rel_rmse *= 1.5;
    std::ostringstream out;
    print_diff(out, a, b, 0);
    const std::string text = out.str();
    const auto env = text.find("LibTorch: 2.11.0  ->  2.12.0");
    const auto dev = text.find("device: cpu (2 threads)  ->  NVIDIA H200");
    const auto cc = text.find("compute capability: 9.0  ->  10.0");
    ASSERT_NE(cc, std::string::npos) << text;
    EXPECT_LT(cc, dev);  // the machine first
    const auto ht = text.find("  ht  ");
    const auto o = text.find("bwd  o  ");
    ASSERT_NE(env, std::string::npos) << text;
    ASSERT_NE(dev, std::string::npos) << text;
    ASSERT_NE(ht, std::string::npos) << text;
    ASSERT_NE(o, std::string::npos) << text;
    EXPECT_LT(env, ht);
    EXPECT_LT(ht, o);
}

TEST(Junit, RunHasOneTestCasePerCaseWithReasons) {
    Report r = sample();
    r.cases.push_back(samples::passing_case());
    r.cases.back().id = "err<&>/chunk/cpu/fwd";
    r.cases.back().verdict = "error";
    r.cases.back().message = "kernel threw\nsecond line";
    const fs::path file = scratch("run.xml");
    write_junit_run(file.string(), r);
    const std::string xml = slurp(file);
    size_t n = 0;
    for (size_t p = xml.find("<testcase"); p != std::string::npos; p = xml.find("<testcase", p + 1))
        ++n;
    EXPECT_EQ(n, 3u);
    EXPECT_NE(xml.find("tests=\"3\" failures=\"1\" errors=\"1\""), std::string::npos) << xml;
    EXPECT_NE(xml.find("<failure message=\"tensor o: rel_rmse"), std::string::npos) << xml;
    EXPECT_NE(xml.find("err&lt;&amp;&gt;"), std::string::npos) << xml;
    EXPECT_NE(xml.find("<error message=\"kernel threw\">"), std::string::npos) << xml;
}

TEST(Junit, GateMarksRegressionsAndMissing) {
    const Report base = sample();
    Report run = base;
    row(run, 0, "ht").rel_rmse *= 2;
    run.cases.pop_back();
    const GateOptions options;
    const GateResult g = gate(run, base, options);
    const fs::path file = scratch("gate.xml");
    write_junit_gate(file.string(), g, run, base, options);
    const std::string xml = slurp(file);
    EXPECT_NE(xml.find("tests=\"2\" failures=\"2\""), std::string::npos) << xml;
    EXPECT_NE(xml.find("regression: tensor ht rel_rmse"), std::string::npos) << xml;
    EXPECT_NE(xml.find("missing from the run"), std::string::npos) << xml;
}

}  // namespace
}  // namespace lav::report
