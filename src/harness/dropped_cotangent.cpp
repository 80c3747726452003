// src/harness/dropped_cotangent.cpp — failed gradients measured again against the reference
// without one cotangent.
#include "harness/dropped_cotangent.h"

#include <cmath>

#include "core/text.h"
#include "metrics/measures.h"

namespace lav::harness {

std::vector<report::Finding> dropped_cotangents(
    const scenario::Case& c, const std::vector<std::string>& cotangents, const TensorMap& results,
    const std::vector<report::MetricRow>& metrics,
    const std::function<const TensorMap&(const std::string&)>& reference_without) {
    std::vector<const report::MetricRow*> failed;
    for (const report::MetricRow& m : metrics)
        if (!(m.rel_rmse <= m.bound) && results.count(m.tensor)) failed.push_back(&m);
    // with a single cotangent, the reference without it is zero and explains nothing
    if (failed.empty() || cotangents.size() < 2) return {};
    std::vector<report::Finding> findings;
    for (const std::string& name : cotangents) {
        const TensorMap& gold = reference_without(name);
        std::string text;
        bool explained = true;
        for (const report::MetricRow* m : failed) {
            const auto ref = gold.find(m->tensor);
            const double without =
                ref == gold.end()
                    ? NAN
                    : metrics::measure(results.at(m->tensor), ref->second, -1, c.chunk_size)
                          .rel_rmse;
            explained = explained && without <= m->bound;
            text += (text.empty() ? "" : ", ") + m->tensor + " " + sci(m->rel_rmse) + " -> " +
                    sci(without);
        }
        if (!explained) continue;
        // a cotangent is named after its output: dht is ht's
        const std::string output = name.size() > 1 && name[0] == 'd' ? name.substr(1) : name;
        findings.push_back(
            {"DROPPED_COTANGENT", name,
             text + " against the reference computed without " + name +
                 ", each within its bound: the backward leaves out the gradient that comes in "
                 "through " +
                 output,
             ""});
    }
    return findings;
}

}  // namespace lav::harness
