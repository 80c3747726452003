// tests/cli/seeds_test.cpp — the reproductions in scenarios/seeds/ report the findings the user
// reports imply.
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

report::Report run_seed(const std::string& name, const std::string& extra = "") {
    const fs::path dir = fs::temp_directory_path() / ("lav_seeds_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path out = dir / (name + ".h5");
    EXPECT_EQ(lav("run scenarios/seeds/" + name + ".toml --out " + out.string() + extra), 0);
    return report::read_report(out.string());
}

// The findings of the records whose id contains `part`, all of which must agree.
std::vector<report::Finding> findings_of(const report::Report& r, const std::string& part) {
    std::vector<report::Finding> out;
    bool first = true;
    for (const auto& c : r.cases) {
        if (c.id.find(part) == std::string::npos) continue;
        EXPECT_FALSE(c.trace.empty()) << c.id;
        if (first) out = c.findings;
        EXPECT_EQ(c.findings.size(), out.size()) << c.id;
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
}

TEST(Seeds, StrictBoundaryFails) {
    const fs::path out =
        fs::temp_directory_path() / ("lav_strict_" + std::to_string(getpid()) + ".h5");
    EXPECT_EQ(lav("run scenarios/seeds/xtransformers_rotary.toml --strict-boundary --out " +
                  out.string()),
              1);
    const report::Report r = report::read_report(out.string());
    ASSERT_FALSE(r.cases.empty());
    for (const auto& c : r.cases) EXPECT_EQ(c.verdict, "fail") << c.id;
}

}  // namespace
}  // namespace lav
