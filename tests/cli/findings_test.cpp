// tests/cli/findings_test.cpp — verdicts that carry dtype findings (WARN, --fail-on, JUnit),
// non-finite values traced to the op that made them, and failure text that answers.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "common/lav_command.h"
#include "report/report.h"

namespace lav {
namespace {

using test::lav;
using test::scratch;

const char kSeed[] = "scenarios/seeds/var_normalize_scale.toml";

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

bool has_kind(const report::CaseRecord& r, const std::string& kind) {
    for (const auto& f : r.findings)
        if (f.kind == kind) return true;
    return false;
}

TEST(Verdicts, ADtypeFindingWithPassingMeasuresWarnsAndExitsZero) {
    const std::string out = scratch("warn.h5"), junit = scratch("warn.xml");
    const test::Result run =
        lav("run " + std::string(kSeed) + " --out " + out + " --junit " + junit);
    EXPECT_EQ(run.code, 0) << run.output;
    EXPECT_NE(run.output.find("2 cases: 0 passed, 2 warned, 0 failed, 0 errors"), std::string::npos)
        << run.output;
    EXPECT_NE(run.output.find("WARN seed_var_normalize_scale[prologue.autocast=off]/chunk/cpu/fwd"),
              std::string::npos)
        << run.output;
    const report::Report r = report::read_report(out);
    ASSERT_EQ(r.cases.size(), 2u);
    for (const auto& c : r.cases) {
        EXPECT_EQ(c.verdict, "warn") << c.id;
        EXPECT_TRUE(has_kind(c, "PROMOTION")) << c.id;
    }
    // JUnit: not a failure of the job; the findings are the test's output
    const std::string xml = read_file(junit);
    EXPECT_NE(xml.find("failures=\"0\""), std::string::npos) << xml;
    EXPECT_NE(xml.find("<system-out>WARN: "), std::string::npos) << xml;
    EXPECT_NE(xml.find("PROMOTION q: q: fp16 -&gt; fp32 at aten::mul"), std::string::npos) << xml;

    const test::Result show = lav("show " + out);
    EXPECT_EQ(show.code, 0) << show.output;
    EXPECT_NE(show.output.find("2 warned"), std::string::npos) << show.output;
    EXPECT_NE(show.output.find("BOUNDARY_MISMATCH k:"), std::string::npos) << show.output;
}

TEST(Verdicts, FailOnTurnsAKindIntoAFailure) {
    const std::string out = scratch("fail_on.h5");
    const test::Result run =
        lav("run " + std::string(kSeed) + " --out " + out + " --fail-on DRIFT,PROMOTION");
    EXPECT_EQ(run.code, 1) << run.output;
    const report::Report r = report::read_report(out);
    for (const auto& c : r.cases) {
        EXPECT_EQ(c.verdict, "fail") << c.id;
        EXPECT_EQ(c.message.rfind("--fail-on PROMOTION: q: ", 0), 0u) << c.message;
    }
    const test::Result bad =
        lav("run " + std::string(kSeed) + " --out " + out + " --fail-on PROMOTON");
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find("--fail-on takes finding kinds (PROMOTION, "), std::string::npos)
        << bad.output;
}

TEST(Nonfinite, AnOverflowInThePrologueIsNamedAndTheKernelIsNotBlamed) {
    const std::string out = scratch("overflow.h5");
    const test::Result run =
        lav("run tests/data/scenarios/findings/fp16_overflow.toml --out " + out);
    EXPECT_EQ(run.code, 1) << run.output;
    const report::Report r = report::read_report(out);
    ASSERT_EQ(r.cases.size(), 2u);
    for (const auto& c : r.cases) {
        ASSERT_FALSE(c.findings.empty()) << c.id;
        const report::Finding& origin = c.findings.front();
        EXPECT_EQ(origin.kind, "OVERFLOW") << c.id;
        EXPECT_EQ(origin.tensor, "k");
        EXPECT_NE(origin.message.find("aten::matmul(k: fp16[1,128,2,32], w: fp16[32,32])"),
                  std::string::npos)
            << origin.message;
        for (const auto& f : c.findings) {
            if (f.kind != "TOLERANCE") continue;
            EXPECT_NE(f.message.find("the kernel's inputs did (k: "), std::string::npos)
                << f.message;
            // no maximum error of 0 for a tensor with no finite value
            EXPECT_EQ(f.message.find("worst |Δ| 0.00e+00"), std::string::npos) << f.message;
        }
    }
}

TEST(FailureText, SaysHowManyElementsTheWorstOneAndWhereTheBoundComesFrom) {
    const std::string out = scratch("flat.h5");
    const test::Result run =
        lav("run tests/data/scenarios/findings/flat_above_bound.toml --out " + out);
    EXPECT_EQ(run.code, 1) << run.output;
    const report::Report r = report::read_report(out);
    ASSERT_EQ(r.cases.size(), 1u);
    const report::CaseRecord& c = r.cases[0];
    bool tolerance = false;
    for (const auto& f : c.findings) {
        // flat along the sequence: out of bound, but not growing
        EXPECT_NE(f.kind, "DRIFT") << f.message;
        if (f.kind != "TOLERANCE" || f.tensor != "o") continue;
        tolerance = true;
        EXPECT_NE(f.message.find("([tolerances] o of tests/data/scenarios/findings/"),
                  std::string::npos)
            << f.message;
        EXPECT_NE(f.message.find(" of 65536 elements ("), std::string::npos) << f.message;
        EXPECT_NE(f.message.find(", reference "), std::string::npos) << f.message;
    }
    EXPECT_TRUE(tolerance);
    // the fact is told once: no separate metric line repeats the finding's numbers
    EXPECT_EQ(run.output.find("  tensor o "), std::string::npos) << run.output;
}

// the share of each rounding group in a DECOMPOSITION message: "<group> 86%"
int share(const std::string& message, const std::string& group) {
    const size_t at = message.find(group + " ");
    return at == std::string::npos ? -1 : std::stoi(message.substr(at + group.size() + 1));
}

// the rel_rmse left when every rounding is kept in fp32: the last of the reruns
double arithmetic_error(const std::string& message) {
    return std::stod(message.substr(message.rfind(", ") + 2));
}

TEST(Decompose, StrongDecayChunkGateGradientsFailInTheirFp32Arithmetic) {
    const std::string out = scratch("decompose.h5");
    const test::Result run = lav("run tests/data/scenarios/findings/gdr_strong_decay.toml --out " +
                                 out + " --decompose");
    EXPECT_EQ(run.code, 1) << run.output;
    const report::Report r = report::read_report(out);
    ASSERT_EQ(r.cases.size(), 2u);
    std::map<std::string, std::string> message;  // "<variant> <tensor>" -> its DECOMPOSITION
    for (const auto& c : r.cases)
        for (const auto& f : c.findings)
            if (f.kind == "DECOMPOSITION") message[c.variant + " " + f.tensor] = f.message;
    ASSERT_TRUE(message.count("chunk dA_log") && message.count("recurrent dA_log")) << run.output;
    EXPECT_EQ(r.cases[0].variant, "chunk");
    EXPECT_EQ(r.cases[0].verdict, "fail");
    EXPECT_EQ(r.cases[1].verdict, "pass");
    // all roundings kept, the chunk backward's dA_log is still far off; the recurrent one's
    // arithmetic is exact to fp32
    EXPECT_GT(arithmetic_error(message["chunk dA_log"]), 1e-2) << message["chunk dA_log"];
    EXPECT_LT(arithmetic_error(message["recurrent dA_log"]), 1e-5) << message["recurrent dA_log"];
    // the recurrent dq's error is its bf16 output rounding alone
    EXPECT_GE(share(message["recurrent dq"], "output rounding"), 95) << message["recurrent dq"];
    EXPECT_EQ(share(message["recurrent dq"], "stored states"), 0) << message["recurrent dq"];
}

}  // namespace
}  // namespace lav
