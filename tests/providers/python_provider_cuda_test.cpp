// tests/providers/python_provider_cuda_test.cpp — a provider on the GPU that breaks the CUDA
// context: the run ends there, and its report stays readable. Skips without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "common/lav_command.h"
#include "report/report.h"

namespace lav {
namespace {

// A call that leaves the CUDA context unusable (a device-side assert, as a faulting kernel
// would) is its record's error, and then the run ends with exit 3, saying so: no later case can
// run. The report holds the cases before it, readable and marked incomplete.
TEST(PythonProviderCuda, AStickyCudaErrorEndsTheRunWithAReadableReport) {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    const std::string out = test::scratch("sticky.h5");
    const test::Result run = test::lav(
        "run tests/data/scenarios/providers/simple_gla_ops.toml --filter 'head_last]/recurrent' "
        "--provider tests/providers/sticky_provider.py --backend sticky --out " +
        out);
    EXPECT_EQ(run.code, 3) << run.output;
    EXPECT_NE(run.output.find("the CUDA context is unusable after"), std::string::npos)
        << run.output;
    const report::Report rep = report::read_report(out);
    EXPECT_FALSE(rep.complete);
    int passed = 0;
    for (const report::CaseRecord& r : rep.cases) {
        if (r.input_dtype == "fp32") {
            EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
            ++passed;
        } else {
            EXPECT_EQ(r.verdict, "error") << r.id;
        }
    }
    EXPECT_EQ(passed, 2) << "the fp32 case, forward and backward, before the bf16 one";
}

}  // namespace
}  // namespace lav
