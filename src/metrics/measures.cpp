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

double smallest_normal(c10::ScalarType t) {
    switch (t) {
        case at::kHalf:
            return 6.103515625e-05;
        case at::kBFloat16:
        case at::kFloat:
            return static_cast<double>(std::numeric_limits<float>::min());
        default:
            return std::numeric_limits<double>::min();
    }
}

// a floor of 1/10 of the reference's rms keeps near-zero reference values from dominating
double floor_of(const at::Tensor& ref) {
    return std::max(0.1 * ref.square().mean().sqrt().item<double>(), 1e-300);
}

std::vector<double> values_of(const at::Tensor& t) {
    const at::Tensor d = t.contiguous();
    return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
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
    m.ref_nonfinite = at::logical_not(at::isfinite(ref)).sum().item<int64_t>();
    m.rel_rmse = rel_rmse(diff, ref);

    const at::Tensor abs_diff = at::where(finite, diff.abs(), at::zeros_like(diff));
    m.all_nonfinite = !finite.any().item<bool>();
    const int64_t worst = abs_diff.flatten().argmax().item<int64_t>();
    m.max_abs = m.all_nonfinite ? kNaN : abs_diff.flatten()[worst].item<double>();
    m.max_abs_index = unravel(worst, x.sizes());
    m.worst_value = xd.flatten()[worst].item<double>();
    m.worst_reference = ref.flatten()[worst].item<double>();
    m.max_rel = m.all_nonfinite
                    ? kNaN
                    : (abs_diff / ref.abs().clamp_min(floor_of(ref))).max().item<double>();

    // a zero counts as flushed only where the reference is below x's dtype's normal range: a
    // zero made by cancellation inside the kernel is an error of another kind
    const at::Tensor ref_nonzero = ref != 0;
    const at::Tensor flushed = at::logical_and(
        xd == 0, at::logical_and(ref_nonzero, ref.abs() < smallest_normal(x.scalar_type())));
    m.ref_nonzero = ref_nonzero.sum().item<int64_t>();
    m.flushed = flushed.sum().item<int64_t>();
    if (m.flushed > 0)
        m.largest_flushed = at::where(flushed, ref.abs(), at::zeros_like(ref)).max().item<double>();

    if (time_dim >= 0) {
        std::vector<int64_t> others;
        for (int64_t d = 0; d < ref.dim(); ++d)
            if (d != time_dim) others.push_back(d);
        m.err2 = values_of(diff.square().sum(others));
        m.ref2 = values_of(ref.square().sum(others));
        const int64_t T = ref.size(time_dim);
        for (int64_t t0 = 0; t0 < T; t0 += block) {
            const int64_t len = std::min(block, T - t0);
            m.drift.push_back(
                rel_rmse(diff.narrow(time_dim, t0, len), ref.narrow(time_dim, t0, len)));
        }
    }
    return m;
}

int64_t count_beyond(const at::Tensor& x, const at::Tensor& ref, double bound) {
    if (ref.numel() == 0) return 0;
    const at::Tensor diff = (x.to(at::kDouble) - ref).abs();
    const at::Tensor allowed = bound * ref.abs().clamp_min(floor_of(ref));
    // written as a negation so that NaN counts
    return at::logical_not(diff <= allowed).sum().item<int64_t>();
}

}  // namespace lav::metrics
