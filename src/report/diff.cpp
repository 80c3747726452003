// src/report/diff.cpp — environment differences and rel_rmse changes between two reports.
#include "report/diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/text.h"

namespace lav::report {
namespace {

struct Change {
    std::string case_id;
    std::string tensor;
    double a, b;
    double size;  // |log(b / a)|
};

// keeps exact zeros comparable: 0 -> 1e-30 is a change, 0 -> 0 is not
constexpr double kTiny = 1e-30;

}  // namespace

std::vector<std::pair<std::string, std::string>> environment_of(const RunInfo& run) {
    return {{"GPU", run.gpu},
            {"compute capability", run.compute_capability},
            {"CUDA driver", run.cuda_driver},
            {"CUDA runtime", run.cuda_runtime},
            {"device", run.device},
            {"LibTorch", run.torch_version},
            {"providers", run.providers},
            {"HDF5", run.hdf5_version},
            {"lav", run.lav_version},
            {"commit", run.git_commit}};
}

std::vector<std::string> environment_changes(const RunInfo& a, const RunInfo& b, bool with_lav) {
    const auto before = environment_of(a), after = environment_of(b);
    std::vector<std::string> out;
    for (size_t i = 0; i < before.size(); ++i)
        if (before[i].second != after[i].second &&
            (with_lav || (before[i].first != "lav" && before[i].first != "commit")))
            out.push_back(before[i].first + ": " + before[i].second + "  ->  " + after[i].second);
    return out;
}

void print_diff(std::ostream& out, const Report& a, const Report& b, size_t top) {
    const std::vector<std::string> env_changes =
        environment_changes(a.run, b.run, /*with_lav=*/true);

    std::map<std::string, const CaseRecord*> in_b;
    for (const auto& c : b.cases) in_b[c.id] = &c;
    std::vector<Change> changes;
    std::vector<std::string> verdicts, only_a, only_b;
    size_t unchanged = 0;
    for (const auto& ca : a.cases) {
        const auto it = in_b.find(ca.id);
        if (it == in_b.end()) {
            only_a.push_back(ca.id);
            continue;
        }
        const CaseRecord& cb = *it->second;
        if (ca.verdict != cb.verdict)
            verdicts.push_back(ca.id + "  " + ca.verdict + " -> " + cb.verdict);
        for (const auto& ma : ca.metrics)
            for (const auto& mb : cb.metrics) {
                if (ma.tensor != mb.tensor) continue;
                const double size =
                    std::abs(std::log((mb.rel_rmse + kTiny) / (ma.rel_rmse + kTiny)));
                // the same value, NaN on both sides included, is no change
                if (size == 0 || (std::isnan(ma.rel_rmse) && std::isnan(mb.rel_rmse)))
                    ++unchanged;
                else
                    changes.push_back({ca.id, ma.tensor, ma.rel_rmse, mb.rel_rmse, size});
            }
        in_b.erase(it);
    }
    for (const auto& [id, c] : in_b) only_b.push_back(id);
    if (env_changes.empty() && changes.empty() && verdicts.empty() && only_a.empty() &&
        only_b.empty()) {
        out << "no differences: the same " << a.cases.size()
            << " records, verdicts and rel_rmse (lav " << a.run.lav_version << ", LibTorch "
            << a.run.torch_version << ", " << a.run.device << ")\n";
        return;
    }

    out << "environment:\n";
    for (const auto& line : env_changes) out << "  " << line << "\n";
    if (env_changes.empty())
        out << "  identical (lav " << a.run.lav_version << ", LibTorch " << a.run.torch_version
            << ", " << a.run.device << ")\n";
    if (!verdicts.empty()) {
        out << "\nverdicts changed (A -> B):\n";
        for (const auto& line : verdicts) out << "  " << line << "\n";
    }
    // NaN sizes sort first: a measure that became NaN is the biggest change there is
    std::stable_sort(changes.begin(), changes.end(), [](const Change& x, const Change& y) {
        if (std::isnan(x.size) != std::isnan(y.size)) return std::isnan(x.size);
        return x.size > y.size;
    });
    out << "\nrel_rmse changes, largest first (A -> B):\n";
    if (changes.empty()) out << "  none\n";
    const size_t n = top == 0 ? changes.size() : std::min(top, changes.size());
    for (size_t i = 0; i < n; ++i) {
        const Change& c = changes[i];
        out << "  " << c.case_id << "  " << c.tensor << "  " << sci(c.a, 3) << " -> " << sci(c.b, 3)
            << "  (x" << sci((c.b + kTiny) / (c.a + kTiny), 3) << ")\n";
    }
    if (n < changes.size()) out << "  ... " << changes.size() - n << " more (--top 0 shows all)\n";
    if (unchanged) out << "  " << unchanged << " unchanged\n";
    for (const auto& id : only_a) out << "only in A: " << id << "\n";
    for (const auto& id : only_b) out << "only in B: " << id << "\n";
}

}  // namespace lav::report
