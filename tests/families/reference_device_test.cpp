// tests/families/reference_device_test.cpp — every family's fp64 reference on CUDA against the
// same reference on the CPU (lav run --reference-device): forward and backward, dense and
// packed (an empty sequence, ragged ends), each option set, every result within 1e-12 relative
// and computed where its inputs were. Skips without a CUDA device.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "families/generic.h"

namespace lav::test::generic {
namespace {

// The same fp64 ops on another device differ only in summation order: at most a few ulps of the
// largest partial sums, far below this.
constexpr double kSameReference = 1e-12;

std::vector<std::string> family_names() {
    std::vector<std::string> out;
    for (const Family& f : registry().families()) out.push_back(f.name);
    return out;
}

class ReferenceDevice : public testing::TestWithParam<std::string> {};

TEST_P(ReferenceDevice, CudaAgreesWithCpu) {
    if (!harness::cuda_available()) GTEST_SKIP() << "no CUDA device";
    const Family& f = registry().get(GetParam());
    for (const Options& o : option_sets(f)) {
        SCOPED_TRACE(o.label);
        const Case base = small_case(f, o.values);
        for (const Case& c : {base, packed(base)}) {
            const std::string what = c.cu_seqlens.empty() ? "dense" : "packed";
            const Call on_cpu = reference_call(draw(f, c));
            Call on_cuda = on_cpu;
            on_cuda.tensors = harness::to_device(on_cpu.tensors, "cuda");
            const TensorMap want = f.reference(on_cpu, true);
            const TensorMap got = f.reference(on_cuda, true);
            ASSERT_EQ(got.size(), want.size()) << what;
            for (const auto& [name, w] : want) {
                const auto it = got.find(name);
                ASSERT_TRUE(it != got.end()) << what << " " << name;
                const at::Tensor& g = it->second;
                ASSERT_EQ(g.defined(), w.defined()) << what << " " << name;
                if (!w.defined()) continue;
                EXPECT_TRUE(g.is_cuda()) << what << " " << name << " was computed on the CPU";
                EXPECT_EQ(g.scalar_type(), at::kDouble) << what << " " << name;
                ASSERT_EQ(g.sizes(), w.sizes()) << what << " " << name;
                EXPECT_LE(rel_err(g.cpu(), w), kSameReference) << what << " " << name;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceDevice, testing::ValuesIn(family_names()),
                         [](const testing::TestParamInfo<std::string>& info) {
                             return info.param;
                         });

}  // namespace
}  // namespace lav::test::generic
