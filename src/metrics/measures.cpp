// src/metrics/measures.cpp — rel_rmse, max errors, non-finite counts and drift curves.
#include "metrics/measures.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace lav::metrics {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double rel_rmse(const at::Tensor& diff, const at::Tensor& ref) {
    const double err = diff.norm().item<double>();
    const double base = ref.norm().item<double>();
    if (!std::isfinite(err)) return kNaN;
    if (base == 0.0) return err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    return err / base;
}

std::vector<int64_t> unravel(int64_t flat, at::IntArrayRef sizes) {
    std::vector<int64_t> index(sizes.size());
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
        index[d] = sizes[d] == 0 ? 0 : flat % sizes[d];
        flat = sizes[d] == 0 ? 0 : flat / sizes[d];
    }
    return index;
}

}  // namespace

Measures measure(const at::Tensor& x, const at::Tensor& ref, int64_t time_dim, int64_t block) {
    LAV_ASSERT(ref.scalar_type() == at::kDouble, "reference must be fp64");
    LAV_ASSERT(x.sizes() == ref.sizes(), "result shape ", x.sizes(), " differs from reference ",
               ref.sizes());
    Measures m;
    if (ref.numel() == 0) return m;

    const at::Tensor xd = x.to(at::kDouble);
    const at::Tensor diff = xd - ref;
    const at::Tensor finite = at::isfinite(xd);
    m.nonfinite = at::logical_and(at::logical_not(finite), at::isfinite(ref)).sum().item<int64_t>();
    m.rel_rmse = rel_rmse(diff, ref);

    const at::Tensor abs_diff = at::where(finite, diff.abs(), at::zeros_like(diff));
    const int64_t worst = abs_diff.flatten().argmax().item<int64_t>();
    m.max_abs = abs_diff.flatten()[worst].item<double>();
    m.max_abs_index = unravel(worst, x.sizes());
    // a floor of 1/10 of the reference's rms keeps near-zero reference values from dominating
    const double floor = std::max(0.1 * ref.square().mean().sqrt().item<double>(), 1e-300);
    m.max_rel = (abs_diff / ref.abs().clamp_min(floor)).max().item<double>();

    if (time_dim >= 0) {
        const int64_t T = ref.size(time_dim);
        for (int64_t t0 = 0; t0 < T; t0 += block) {
            const int64_t len = std::min(block, T - t0);
            m.drift.push_back(
                rel_rmse(diff.narrow(time_dim, t0, len), ref.narrow(time_dim, t0, len)));
        }
    }
    return m;
}

}  // namespace lav::metrics
