// src/harness/decompose.cpp — reruns of one row with its storage roundings kept in fp32.
#include "harness/decompose.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>

#include "core/dtype.h"
#include "core/error.h"
#include "core/text.h"
#include "harness/judge.h"
#include "metrics/measures.h"

namespace lav::harness {
namespace {

// each rerun keeps one more group exact; the shares are told in this order
struct Step {
    const char* group;
    void (*apply)(Call&);
    bool round_results;  ///< results rounded to the dtypes the run returned them in
};

void fp32_inputs(Call& call) {
    for (auto& [name, t] : call.tensors)
        if (t.defined() && at::isFloatingType(t.scalar_type())) t = t.to(at::kFloat);
}
void fp32_states(Call& call) {
    call.state_dtype = at::kFloat;
    call.state_dtypes.clear();
}
void fp32_outputs(Call& call) { call.output_dtype = at::kFloat; }

// gradients follow the input dtype: until the outputs' own step, the rerun's results are
// rounded as the run's were, so that the first step does not take their rounding with it
constexpr Step kSteps[] = {
    {"intermediates rounded to the input dtype", fp32_inputs, true},
    {"stored states", fp32_states, true},
    {"output rounding", fp32_outputs, false},
};

std::string percent(double share) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.0f%%", 100 * std::clamp(share, 0.0, 1.0));
    return buf;
}

}  // namespace

std::vector<report::Finding> decompose(const scenario::Case& c, const Row& row, const Call& call,
                                       bool backward, const std::vector<MeasuredSpec>& measured,
                                       const TensorMap& gold,
                                       const std::vector<report::MetricRow>& metrics) {
    // rel_rmse of every measured tensor after each rerun, starting from the run itself
    std::map<std::string, std::vector<double>> curve;
    std::map<std::string, c10::ScalarType> returned;
    for (const report::MetricRow& m : metrics) {
        curve[m.tensor].push_back(m.rel_rmse);
        if (const auto dtype = parse_dtype(m.dtype)) returned[m.tensor] = to_scalar_type(*dtype);
    }
    Call rerun = call;
    for (const Step& step : kSteps) {
        step.apply(rerun);
        if (row.fits && !row.fits(rerun))
            return {{"DECOMPOSITION", "",
                     "not decomposed: " + row.backend + " " + row.variant + " takes no call with " +
                         step.group + " kept in fp32",
                     ""}};
        const TensorMap results =
            measured_results(c, measured, backward ? row.backward(rerun) : row.forward(rerun));
        for (const MeasuredSpec& m : measured) {
            const auto it = results.find(m.name);
            if (it == results.end() || !returned.count(m.name)) continue;
            const at::Tensor x =
                step.round_results ? it->second.to(returned.at(m.name)) : it->second;
            curve[m.name].push_back(
                metrics::measure(x, gold.at(m.name), -1, c.chunk_size).rel_rmse);
        }
    }
    std::vector<report::Finding> findings;
    for (const auto& [name, e] : curve) {
        if (e.size() != std::size(kSteps) + 1 || !(e[0] > 0)) continue;
        // squared errors of independent roundings add: each step's share is what it removed
        std::string text = "rel_rmse " + sci(e[0]) + ": ";
        for (size_t i = 0; i < std::size(kSteps); ++i)
            text += std::string(kSteps[i].group) + " " +
                    percent((e[i] * e[i] - e[i + 1] * e[i + 1]) / (e[0] * e[0])) + ", ";
        text += "fp32 arithmetic " + percent(e.back() * e.back() / (e[0] * e[0])) +
                " (rel_rmse after each rerun: " + sci(e[1]) + ", " + sci(e[2]) + ", " + sci(e[3]) +
                ")";
        findings.push_back({"DECOMPOSITION", name, text, ""});
    }
    return findings;
}

}  // namespace lav::harness
