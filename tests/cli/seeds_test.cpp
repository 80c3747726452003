// tests/cli/seeds_test.cpp — the reproductions in scenarios/seeds/ report the findings the user
// reports imply, and the boundary scenarios in tests/data/scenarios/boundary/ theirs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "report/report.h"

namespace lav {
namespace {

namespace fs = std::filesystem;

int lav(const std::string& args) {
    const std::string command =
        std::string("cd ") + LAV_SOURCE_DIR + " && " + LAV_BINARY + " " + args + " >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("lav_seeds_" + std::to_string(getpid()));
    fs::create_directories(dir);
    return dir / name;
}

/// Runs `lav run <scenarios>` into a fresh report, expects exit code `code` and reads the report.
report::Report run_scenarios(const std::string& scenarios, const std::string& report_name,
                             int code = 0, const std::string& extra = "") {
    const fs::path out = scratch(report_name + ".h5");
    EXPECT_EQ(lav("run " + scenarios + " --out " + out.string() + extra), code) << scenarios;
    return report::read_report(out.string());
}

report::Report run_seed(const std::string& name) {
    return run_scenarios("scenarios/seeds/" + name + ".toml", name);
}

// The prologue's findings (those with a dtype history) of the records whose id contains `part`,
// all of which must agree; what the kernels' measures found differs from record to record.
std::vector<report::Finding> findings_of(const report::Report& r, const std::string& part) {
    std::vector<report::Finding> out;
    bool first = true;
    for (const auto& c : r.cases) {
        if (c.id.find(part) == std::string::npos) continue;
        // the prologue's traced ops first, then the kernels' declared items
        size_t traced = 0;
        bool declared = false;
        for (const auto& row : c.trace) {
            if (row.source == "traced") {
                ++traced;
                EXPECT_FALSE(declared)
                    << c.id << ": traced op #" << row.seq << " after a declared row";
            } else {
                declared = true;
            }
        }
        EXPECT_GT(traced, 0u) << c.id;
        std::vector<report::Finding> traced_findings;
        for (const auto& f : c.findings)
            if (!f.history.empty()) traced_findings.push_back(f);
        if (first) out = traced_findings;
        EXPECT_EQ(traced_findings.size(), out.size()) << c.id;
        first = false;
    }
    EXPECT_FALSE(first) << "no record matches " << part;
    return out;
}

bool has(const std::vector<report::Finding>& fs, const std::string& kind, const std::string& tensor,
         const std::string& text = "") {
    for (const auto& f : fs)
        if (f.kind == kind && f.tensor == tensor && f.message.find(text) != std::string::npos &&
            !f.history.empty())
            return true;
    return false;
}

TEST(Seeds, Rwkv7ParameterPromotesK) {
    const report::Report r = run_seed("rwkv7_fp16_k_a");
    const auto fp32 = findings_of(r, "k_a.dtype=fp32");
    EXPECT_TRUE(has(fp32, "PROMOTION", "k", "at aten::addcmul, operand k_a: fp32 (parameter)"));
    EXPECT_TRUE(has(fp32, "BOUNDARY_MISMATCH", "k", "as fp32"));
    EXPECT_FALSE(has(fp32, "BOUNDARY_MISMATCH", "q"));
    EXPECT_FALSE(has(fp32, "BOUNDARY_MISMATCH", "v"));
    EXPECT_TRUE(findings_of(r, "k_a.dtype=fp16").empty());
}

TEST(Seeds, VarNormalizeTimesFp32ScalePromotesQAndK) {
    const report::Report r = run_seed("var_normalize_scale");
    for (const char* autocast : {"autocast=off", "autocast=bf16"}) {
        const auto fs = findings_of(r, autocast);
        for (const char* t : {"q", "k"}) {
            EXPECT_TRUE(has(fs, "PROMOTION", t, "at aten::mul")) << autocast << " " << t;
            EXPECT_TRUE(has(fs, "PROMOTION", t, "scale_mul: fp32")) << autocast << " " << t;
            EXPECT_TRUE(has(fs, "BOUNDARY_MISMATCH", t, "takes fp16")) << autocast << " " << t;
        }
    }
}

TEST(Seeds, RotaryWithFp32FreqsLeavesVAlone) {
    const report::Report r = run_seed("xtransformers_rotary");
    const auto fs = findings_of(r, "seed_xtransformers_rotary");
    EXPECT_TRUE(has(fs, "BOUNDARY_MISMATCH", "q", "as fp32"));
    EXPECT_TRUE(has(fs, "BOUNDARY_MISMATCH", "k", "as fp32"));
    EXPECT_FALSE(has(fs, "BOUNDARY_MISMATCH", "v"));
    EXPECT_TRUE(has(fs, "PROMOTION", "q"));
    // operands are named by the expression that made them, never by an op number, and the
    // promotion that entered at rotary's cos and at its sin is one finding
    EXPECT_TRUE(has(fs, "PROMOTION", "q",
                    "operand sin(freqs): fp32; also at aten::mul, operand "
                    "cos(freqs): fp32"));
    int promotions_of_q = 0;
    for (const auto& f : fs) {
        promotions_of_q += f.kind == "PROMOTION" && f.tensor == "q";
        EXPECT_EQ(f.message.find('#'), std::string::npos) << f.message;
        EXPECT_EQ(f.history.find('#'), std::string::npos) << f.history;
    }
    EXPECT_EQ(promotions_of_q, 1);
}

// rel_rmse of `tensor` in the record of `variant`, forward, with states stored in `state`.
double state_error(const report::Report& r, const std::string& variant, const std::string& state,
                   const std::string& tensor) {
    for (const auto& c : r.cases)
        if (c.variant == variant && c.pass == "fwd" && c.state_dtype == state)
            for (const auto& m : c.metrics)
                if (m.tensor == tensor) return m.rel_rmse;
    ADD_FAILURE() << "no " << tensor << " of " << variant << " with " << state << " states";
    return 0;
}

TEST(Seeds, GsaStatesInFp32BeatStatesInBf16) {
    const report::Report r = run_seed("gsa_bf16_head_last_varlen");
    for (const char* variant : {"chunk", "recurrent"})
        for (const char* tensor : {"hkt", "hvt"}) {
            const double fp32 = state_error(r, variant, "fp32", tensor);
            const double bf16 = state_error(r, variant, "bf16", tensor);
            EXPECT_GT(fp32, 0) << variant << " " << tensor;
            EXPECT_LT(fp32, bf16) << variant << " " << tensor;
        }
}

TEST(Seeds, StrictBoundaryFails) {
    const report::Report r = run_scenarios("scenarios/seeds/xtransformers_rotary.toml", "strict", 1,
                                           " --strict-boundary");
    ASSERT_FALSE(r.cases.empty());
    for (const auto& c : r.cases) EXPECT_EQ(c.verdict, "fail") << c.id;
}

// The one record of the case named `scenario` (each boundary scenario has one variant and pass).
const report::CaseRecord& record_of(const report::Report& r, const std::string& scenario) {
    for (const auto& c : r.cases)
        if (c.scenario == scenario) return c;
    ADD_FAILURE() << "no record of " << scenario;
    static const report::CaseRecord none;
    return none;
}

TEST(Boundary, ShapeStrideAndOffsetsAreFindingsNotErrors) {
    const report::Report r = run_scenarios("tests/data/scenarios/boundary", "boundary", 1);
    ASSERT_EQ(r.cases.size(), 4u);

    // transposed back, q has its generated values again: the kernel measures as without ops
    const auto& head_first = record_of(r, "boundary_head_first_q");
    EXPECT_EQ(head_first.verdict, "warn") << head_first.message;
    EXPECT_TRUE(has(head_first.findings, "BOUNDARY_MISMATCH", "q", "(head_first order)"));
    ASSERT_EQ(head_first.findings.size(), 1u);
    EXPECT_NE(head_first.findings[0].history.find("aten::transpose"), std::string::npos)
        << head_first.findings[0].history;

    const auto& strided = record_of(r, "boundary_strided_k");
    EXPECT_EQ(strided.verdict, "warn") << strided.message;
    EXPECT_TRUE(has(strided.findings, "BOUNDARY_MISMATCH", "k", "last dim at stride 2"));
    EXPECT_EQ(strided.findings.size(), 1u);

    const auto& wrong = record_of(r, "boundary_wrong_shape_k");
    EXPECT_EQ(wrong.verdict, "fail");
    EXPECT_TRUE(wrong.metrics.empty());
    EXPECT_TRUE(has(wrong.findings, "BOUNDARY_MISMATCH", "k", "as [1, 64, 16, 2]"));
    EXPECT_NE(wrong.message.find("a shape it cannot take"), std::string::npos) << wrong.message;

    const auto& offsets = record_of(r, "boundary_float_cu_seqlens");
    EXPECT_EQ(offsets.verdict, "warn") << offsets.message;
    EXPECT_TRUE(has(offsets.findings, "BOUNDARY_MISMATCH", "cu_seqlens", "as fp32"));
    EXPECT_FALSE(has(offsets.findings, "BOUNDARY_MISMATCH", "cu_seqlens", "other offsets"));
}

TEST(Boundary, StrictFailsOnALayoutMismatch) {
    const report::Report r = run_scenarios("tests/data/scenarios/boundary/head_first_q.toml",
                                           "boundary_strict", 1, " --strict-boundary");
    ASSERT_EQ(r.cases.size(), 1u);
    EXPECT_EQ(r.cases[0].verdict, "fail");
}

}  // namespace
}  // namespace lav
