// tests/trace/mapped_array_test.cpp — the tracer's record store: growth, moves, reused mappings.
#include "trace/mapped_array.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace lav::trace {
namespace {

struct Pair {
    int64_t a = -1;
    int32_t b = 7;
};

TEST(MappedArray, KeepsItsContentsAsItGrows) {
    MappedArray<int64_t> x;
    EXPECT_TRUE(x.empty());
    // far past the first page and several doublings
    for (int64_t i = 0; i < 300000; ++i) x.push_back(3 * i);
    ASSERT_EQ(x.size(), 300000u);
    for (int64_t i = 0; i < 300000; ++i) ASSERT_EQ(x[i], 3 * i) << i;
    const std::vector<int64_t> more = {5, 6, 7};
    x.append(more.begin(), more.end());
    EXPECT_EQ(x.size(), 300003u);
    EXPECT_EQ(x.back(), 7);
    EXPECT_EQ(x[300000], 5);
    x.shrink_to(2);
    EXPECT_EQ(std::accumulate(x.begin(), x.end(), int64_t{0}), 3);
}

TEST(MappedArray, ValueInitialisesWhatItAdds) {
    MappedArray<Pair> x;
    Pair& p = x.emplace_back();
    EXPECT_EQ(p.a, -1);
    EXPECT_EQ(p.b, 7);
    x.assign(5000, Pair{4, 2});
    ASSERT_EQ(x.size(), 5000u);
    EXPECT_EQ(x[4999].a, 4);
    EXPECT_EQ(x[0].b, 2);
    x.clear();
    EXPECT_TRUE(x.empty());
    EXPECT_EQ(x.emplace_back().a, -1);
}

TEST(MappedArray, MovesHandOverTheMapping) {
    MappedArray<int> a;
    a.assign(1000, 9);
    const int* data = a.data();
    MappedArray<int> b(std::move(a));
    EXPECT_EQ(b.data(), data);
    EXPECT_EQ(b.size(), 1000u);
    EXPECT_TRUE(a.empty());
    // a moved-from array is empty and usable
    a.push_back(1);
    EXPECT_EQ(a[0], 1);
    MappedArray<int> c;
    c.push_back(2);
    c = std::move(b);
    EXPECT_EQ(c.data(), data);
    EXPECT_EQ(c[999], 9);
}

TEST(MappedArray, NextArraysReuseGivenBackMappings) {
    // a trace's arrays give their mappings back for the next trace's, whose pages are then
    // backed already; what a reused mapping held is never read as an element
    const void* first = nullptr;
    {
        MappedArray<Pair> x;
        x.reserve(3000);
        x.assign(3000, Pair{5, 5});
        first = x.data();
    }
    MappedArray<Pair> y;
    y.reserve(3000);
    EXPECT_EQ(static_cast<const void*>(y.data()), first);
    EXPECT_TRUE(y.empty());
    EXPECT_EQ(y.emplace_back().a, -1);
}

}  // namespace
}  // namespace lav::trace
