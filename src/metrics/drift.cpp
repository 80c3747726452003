// src/metrics/drift.cpp — least-squares growth of error curves and the chunk-edge contrast.
#include "metrics/drift.h"

#include <cmath>

namespace lav::metrics {
namespace {

struct Line {
    double slope = 0;
    double stderr_slope = 0;
};

// ordinary least squares of y over x = 0, 1, 2, ...
Line fit_line(const std::vector<double>& y, size_t from) {
    const size_t n = y.size() - from;
    double mx = 0, my = 0;
    for (size_t i = from; i < y.size(); ++i) mx += static_cast<double>(i - from), my += y[i];
    mx /= static_cast<double>(n);
    my /= static_cast<double>(n);
    double sxx = 0, sxy = 0;
    for (size_t i = from; i < y.size(); ++i) {
        const double dx = static_cast<double>(i - from) - mx;
        sxx += dx * dx;
        sxy += dx * (y[i] - my);
    }
    Line line;
    line.slope = sxy / sxx;
    double rss = 0;
    for (size_t i = from; i < y.size(); ++i) {
        const double r = y[i] - my - line.slope * (static_cast<double>(i - from) - mx);
        rss += r * r;
    }
    line.stderr_slope = std::sqrt(rss / static_cast<double>(n - 2) / sxx);
    return line;
}

bool grows(const Line& line) { return line.slope - 2 * line.stderr_slope > 0; }

}  // namespace

Growth fit_growth(const std::vector<double>& curve, int64_t block) {
    Growth g;
    if (curve.size() < 6 || block <= 0) return g;
    double mean = 0;
    for (const double v : curve) {
        if (!std::isfinite(v)) return g;
        mean += v / static_cast<double>(curve.size());
    }
    const Line all = fit_line(curve, 0);
    const Line late = fit_line(curve, curve.size() / 2);
    const double per_block_to_per_1000 = 1000.0 / static_cast<double>(block);
    g.per_1000 = all.slope * per_block_to_per_1000;
    g.stderr_per_1000 = all.stderr_slope * per_block_to_per_1000;
    const double rise = all.slope * static_cast<double>(curve.size() - 1);
    g.real = grows(all) && grows(late) && rise >= 0.1 * mean;
    return g;
}

EdgeContrast edge_contrast(const std::vector<double>& err2, const std::vector<double>& ref2,
                           const std::vector<int64_t>& offset, const std::vector<int64_t>& length) {
    // per chunk: edge and interior sums, closed when the next chunk starts
    std::vector<double> log_ratios;
    double edge_e = 0, edge_r = 0, in_e = 0, in_r = 0;
    const auto close = [&] {
        if (edge_r > 0 && in_r > 0 && edge_e > 0 && in_e > 0)
            log_ratios.push_back(0.5 * std::log((edge_e / edge_r) / (in_e / in_r)));
        edge_e = edge_r = in_e = in_r = 0;
    };
    for (size_t t = 0; t < err2.size(); ++t) {
        if (offset[t] == 0) close();
        // a chunk of 3 or fewer positions has no interior to compare with
        if (length[t] <= 3) continue;
        const bool edge = offset[t] == 0 || offset[t] == length[t] - 1;
        (edge ? edge_e : in_e) += err2[t];
        (edge ? edge_r : in_r) += ref2[t];
    }
    close();
    EdgeContrast c;
    const size_t n = log_ratios.size();
    if (n < 8) return c;
    double mean = 0, var = 0;
    for (const double d : log_ratios) mean += d / static_cast<double>(n);
    for (const double d : log_ratios) var += (d - mean) * (d - mean) / static_cast<double>(n - 1);
    c.ratio = std::exp(mean);
    const double se = std::sqrt(var / static_cast<double>(n));
    c.z = se > 0 ? mean / se : (mean > 0 ? INFINITY : 0);
    c.spike = c.ratio >= 2 && c.z >= 4;
    if (!std::isfinite(c.ratio)) c.spike = false;
    return c;
}

}  // namespace lav::metrics
