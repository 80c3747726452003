// tests/prologue/python_cuda_test.cpp — a Python prologue under fp16 CUDA autocast runs on the
// GPU: its ops are traced there, and VAR's normalize × exp(scale_mul) promotes q and k as CUDA
// autocast's fp32 norm makes it. Skipped without a CUDA build and device.
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/build_info.h"
#include "report/report.h"

namespace lav {
namespace {

namespace fs = std::filesystem;

TEST(PythonPrologueCuda, Fp16AutocastRunsOnTheGpu) {
    if (!kCudaBuild || !at::hasCUDA()) GTEST_SKIP() << "needs a CUDA build and device";
    const fs::path dir = fs::temp_directory_path() / ("lav_pycuda_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path toml = dir / "var_fp16.toml";
    std::ofstream(toml) << "name = \"var_fp16\"\ndescription = \"VAR under fp16 autocast\"\n"
                        << "family = \"simple_gla\"\nvariants = [\"chunk\"]\n"
                        << "[shape]\nB = 1\nT = 128\nH = 4\nK = 64\nV = 64\n"
                        << "[dtypes]\ninputs = \"fp16\"\n[options]\ngate = \"none\"\n"
                        << "[prologue]\nautocast = \"fp16\"\npython = \"" << LAV_SOURCE_DIR
                        << "/scenarios/seeds/var_attention.py:prologue\"\n";
    const fs::path out = dir / "var_fp16.h5";
    const std::string command = std::string(LAV_BINARY) + " run " + toml.string() + " --out " +
                                out.string() + " >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) <= 1) << command;
    const report::Report r = report::read_report(out.string());
    ASSERT_FALSE(r.cases.empty());
    for (const auto& c : r.cases) {
        bool on_gpu = false;
        for (const auto& row : c.trace)
            on_gpu =
                on_gpu || (row.source == "traced" && row.inputs.find("cuda") != std::string::npos);
        EXPECT_TRUE(on_gpu) << c.id;
        bool promoted = false;
        for (const auto& f : c.findings)
            promoted = promoted || (f.kind == "BOUNDARY_MISMATCH" && f.tensor == "q" &&
                                    f.history.find("[autocast]") != std::string::npos &&
                                    f.history.find("var_attention.py:") != std::string::npos);
        EXPECT_TRUE(promoted) << c.id;
    }
}

}  // namespace
}  // namespace lav
