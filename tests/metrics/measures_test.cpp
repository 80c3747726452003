// tests/metrics/measures_test.cpp — rel_rmse, max errors, non-finite counts, drift, bounds table.
#include "metrics/measures.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "metrics/bounds.h"

namespace lav::metrics {
namespace {

TEST(Measures, RelRmseAndMaxAbs) {
    const at::Tensor ref = at::ones({2, 8, 3}, at::kDouble);
    at::Tensor x = ref.clone();
    x[1][5][2] = 1.5;
    const Measures m = measure(x, ref, 1, 4);
    EXPECT_NEAR(m.rel_rmse, 0.5 / std::sqrt(48.0), 1e-15);
    EXPECT_DOUBLE_EQ(m.max_abs, 0.5);
    EXPECT_EQ(m.max_abs_index, (std::vector<int64_t>{1, 5, 2}));
    EXPECT_DOUBLE_EQ(m.max_rel, 0.5);
    EXPECT_EQ(m.nonfinite, 0);
    ASSERT_EQ(m.drift.size(), 2u);
    EXPECT_DOUBLE_EQ(m.drift[0], 0.0);
    EXPECT_NEAR(m.drift[1], 0.5 / std::sqrt(24.0), 1e-15);
}

TEST(Measures, AllNaNSaysSoInsteadOfAZeroError) {
    const at::Tensor ref = at::ones({4, 4}, at::kDouble);
    const at::Tensor x = at::full({4, 4}, NAN, at::kFloat);
    const Measures m = measure(x, ref, -1, 64);
    EXPECT_TRUE(m.all_nonfinite);
    EXPECT_TRUE(std::isnan(m.max_abs));
    EXPECT_TRUE(std::isnan(m.max_rel));
    EXPECT_EQ(m.nonfinite, 16);
}

TEST(Measures, WorstElementBesideItsReferenceAndCountBeyond) {
    const at::Tensor ref = at::ones({2, 8}, at::kDouble);
    at::Tensor x = ref.clone();
    x[1][3] = 1.25;
    x[0][2] = 1.01;
    const Measures m = measure(x, ref, 1, 4);
    EXPECT_DOUBLE_EQ(m.worst_value, 1.25);
    EXPECT_DOUBLE_EQ(m.worst_reference, 1.0);
    EXPECT_EQ(count_beyond(x, ref, 0.05), 1);
    EXPECT_EQ(count_beyond(x, ref, 0.005), 2);
    // per position along dim 1: the squared error and the reference's squared norm
    ASSERT_EQ(m.err2.size(), 8u);
    EXPECT_NEAR(m.err2[3], 0.0625, 1e-12);
    EXPECT_DOUBLE_EQ(m.ref2[3], 2.0);
    EXPECT_DOUBLE_EQ(m.err2[0], 0.0);
}

TEST(Measures, ZerosWhereTheReferenceIsNotAreFlushed) {
    at::Tensor ref = at::full({100}, 1e-30, at::kDouble);
    ref[0] = 0;
    const at::Tensor x = ref.to(at::kHalf);  // 1e-30 is below fp16's smallest subnormal
    const Measures m = measure(x, ref, -1, 64);
    EXPECT_EQ(m.ref_nonzero, 99);
    EXPECT_EQ(m.flushed, 99);
    EXPECT_DOUBLE_EQ(m.largest_flushed, 1e-30);
    EXPECT_EQ(measure(ref.to(at::kFloat), ref, -1, 64).flushed, 0);
}

TEST(Measures, NonFiniteCountedAndFailsRelRmse) {
    const at::Tensor ref = at::ones({4, 4}, at::kDouble);
    at::Tensor x = ref.to(at::kFloat);
    x[0][1] = std::nan("");
    x[3][3] = INFINITY;
    const Measures m = measure(x, ref, -1, 64);
    EXPECT_EQ(m.nonfinite, 2);
    EXPECT_TRUE(std::isnan(m.rel_rmse));
    EXPECT_DOUBLE_EQ(m.max_abs, 0.0);
    EXPECT_TRUE(m.drift.empty());
}

TEST(Measures, LowPrecisionResultIsWidened) {
    const at::Tensor ref = at::randn({64, 16}, at::kDouble);
    const Measures m = measure(ref.to(at::kBFloat16), ref, 0, 16);
    EXPECT_GT(m.rel_rmse, 1e-4);
    EXPECT_LT(m.rel_rmse, 1.0 / 128);
    EXPECT_EQ(m.drift.size(), 4u);
}

TEST(Bounds, NarrowerDtypeDecides) {
    EXPECT_DOUBLE_EQ(default_bound(TensorKind::output, DType::bf16, DType::fp32), 5e-3);
    EXPECT_DOUBLE_EQ(default_bound(TensorKind::gradient, DType::fp32, DType::bf16), 8e-3);
    EXPECT_LT(default_bound(TensorKind::state, DType::fp32, DType::fp32), 1e-4);
    EXPECT_GT(default_bound(TensorKind::gate_grad, DType::bf16, DType::bf16),
              default_bound(TensorKind::gradient, DType::bf16, DType::bf16));
}

}  // namespace
}  // namespace lav::metrics
