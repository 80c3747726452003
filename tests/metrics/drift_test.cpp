// tests/metrics/drift_test.cpp — growth of error curves and the chunk-edge contrast.
#include "metrics/drift.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace lav::metrics {
namespace {

// a small deterministic wobble, so that fits have residuals
double wobble(size_t i) { return 1.0 + 0.02 * std::sin(1.7 * static_cast<double>(i)); }

TEST(Growth, ALinearRiseIsRealWithItsRate) {
    std::vector<double> curve;
    for (size_t i = 0; i < 32; ++i) curve.push_back((1e-3 + 1e-4 * i) * wobble(i));
    const Growth g = fit_growth(curve, 64);
    EXPECT_TRUE(g.real);
    // 1e-4 per block of 64 positions is 1.5625e-3 per 1,000
    EXPECT_NEAR(g.per_1000, 1.5625e-3, 1e-4);
    EXPECT_GT(g.stderr_per_1000, 0);
    EXPECT_LT(g.stderr_per_1000, 1e-4);
}

TEST(Growth, AFlatCurveAboveAnyBoundDoesNotGrow) {
    std::vector<double> curve;
    for (size_t i = 0; i < 32; ++i) curve.push_back(5e-3 * wobble(i));
    EXPECT_FALSE(fit_growth(curve, 64).real);
}

TEST(Growth, ARiseThatSettlesIsNotDrift) {
    // 3.3e-3 -> 5.3e-3 over four blocks, then flat: the later half does not grow
    std::vector<double> curve = {3.3e-3, 4.0e-3, 4.7e-3, 5.3e-3};
    for (size_t i = 4; i < 32; ++i) curve.push_back(5.3e-3 * wobble(i));
    const Growth g = fit_growth(curve, 64);
    EXPECT_FALSE(g.real);
}

TEST(Growth, UndefinedForShortOrNonFiniteCurves) {
    EXPECT_FALSE(fit_growth({1, 2, 3, 4, 5}, 64).real);
    EXPECT_FALSE(fit_growth({1, 2, 3, 4, 5, NAN, 7, 8}, 64).real);
    EXPECT_EQ(fit_growth({1, 2, 3, 4, 5, NAN, 7, 8}, 64).per_1000, 0);
}

// T positions in chunks of `chunk`, rel error `edge` at chunk edges and 1 inside
struct Curve {
    std::vector<double> err2, ref2;
    std::vector<int64_t> offset, length;
};
Curve chunked(int64_t T, int64_t chunk, double edge) {
    Curve c;
    for (int64_t t = 0; t < T; ++t) {
        const int64_t o = t % chunk;
        const bool is_edge = o == 0 || o == chunk - 1;
        const double e = (is_edge ? edge : 1.0) * wobble(static_cast<size_t>(t));
        c.err2.push_back(e * e);
        c.ref2.push_back(1.0);
        c.offset.push_back(o);
        c.length.push_back(chunk);
    }
    return c;
}

TEST(EdgeContrast, EdgesThreeTimesWorseAreASpike) {
    const Curve c = chunked(1024, 64, 3.0);
    const EdgeContrast e = edge_contrast(c.err2, c.ref2, c.offset, c.length);
    EXPECT_TRUE(e.spike);
    EXPECT_NEAR(e.ratio, 3.0, 0.2);
}

TEST(EdgeContrast, EvenErrorIsNoSpike) {
    const Curve c = chunked(1024, 64, 1.0);
    const EdgeContrast e = edge_contrast(c.err2, c.ref2, c.offset, c.length);
    EXPECT_FALSE(e.spike);
    EXPECT_NEAR(e.ratio, 1.0, 0.1);
}

TEST(EdgeContrast, TooFewChunksSayNothing) {
    const Curve c = chunked(4 * 64, 64, 10.0);
    EXPECT_FALSE(edge_contrast(c.err2, c.ref2, c.offset, c.length).spike);
}

}  // namespace
}  // namespace lav::metrics
