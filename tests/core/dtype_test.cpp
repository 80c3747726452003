// tests/core/dtype_test.cpp — the dtype table: spellings round-trip, storage types, epsilons.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include "core/layout.h"

namespace lav {
namespace {

TEST(DType, SpellingsRoundTrip) {
    for (DType d : {DType::fp64, DType::fp32, DType::tf32, DType::fp16, DType::bf16,
                    DType::fp8_e4m3, DType::fp8_e5m2}) {
        const auto parsed = parse_dtype(dtype_name(d));
        ASSERT_TRUE(parsed.has_value()) << dtype_name(d);
        EXPECT_EQ(*parsed, d);
    }
    EXPECT_FALSE(parse_dtype("bf15").has_value());
    EXPECT_FALSE(parse_dtype("float32").has_value());
}

TEST(DType, StorageTypesAndNames) {
    EXPECT_EQ(to_scalar_type(DType::bf16), c10::ScalarType::BFloat16);
    EXPECT_EQ(to_scalar_type(DType::tf32), c10::ScalarType::Float);
    EXPECT_EQ(scalar_type_name(c10::ScalarType::Float), "fp32");
    EXPECT_EQ(scalar_type_name(c10::ScalarType::Half), "fp16");
    EXPECT_EQ(scalar_type_name(c10::ScalarType::Long), "int64");
}

TEST(DType, EpsilonsOrdered) {
    EXPECT_LT(dtype_epsilon(DType::fp64), dtype_epsilon(DType::fp32));
    EXPECT_LT(dtype_epsilon(DType::fp32), dtype_epsilon(DType::fp16));
    EXPECT_LT(dtype_epsilon(DType::fp16), dtype_epsilon(DType::bf16));
    EXPECT_EQ(dtype_epsilon(DType::bf16), 1.0 / 128);
}

TEST(Layout, Spellings) {
    EXPECT_EQ(parse_layout("head_first"), Layout::head_first);
    EXPECT_EQ(parse_layout(layout_name(Layout::head_last)), Layout::head_last);
    EXPECT_FALSE(parse_layout("head-last").has_value());
}

}  // namespace
}  // namespace lav
