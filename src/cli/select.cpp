// src/cli/select.cpp — the records a run makes, chosen by --filter and --rerun-failed.
#include "cli/select.h"

#include <algorithm>

#include "core/error.h"
#include "harness/backend.h"
#include "harness/family.h"
#include "harness/runner.h"

namespace lav::cli {
namespace {

// std::regex compiles and matches by recursion that grows with the pattern's length; case ids
// are bounded too (scenario::kMaxCaseIdLength)
constexpr std::size_t kMaxFilterLength = 1000;

// `id` is `prefix` or starts with `prefix` and a slash: whole parts of a record id
bool names(const std::string& prefix, const std::string& id) {
    return id == prefix || (id.size() > prefix.size() &&
                            id.compare(0, prefix.size(), prefix) == 0 && id[prefix.size()] == '/');
}

void add_once(std::vector<std::string>& list, const std::string& item) {
    if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

}  // namespace

std::vector<PlannedRecord> plan_records(const harness::Registry& registry, const scenario::Case& c,
                                        const std::vector<std::string>& requested) {
    std::vector<PlannedRecord> out;
    const Call call = harness::call_of(registry.get(c.family), c);
    for (const auto& v : c.variants)
        for (const auto& b : requested) {
            const std::string backend = harness::choose_row(registry, c.family, v, call, b).backend;
            for (const auto& p : harness::passes_of(c))
                out.push_back({v, b, backend, p, harness::record_id(c, v, backend, p)});
        }
    return out;
}

RecordSelection::RecordSelection(std::string filter, std::optional<std::set<std::string>> rerun)
    : filter_(std::move(filter)), rerun_(std::move(rerun)) {
    LAV_CHECK_AS(UsageError, filter_.size() <= kMaxFilterLength, "--filter has ", filter_.size(),
                 " characters, more than ", kMaxFilterLength, ": write a shorter regex");
}

void RecordSelection::settle(const std::vector<std::string>& ids) {
    if (filter_.empty()) return;
    literal_ = std::any_of(ids.begin(), ids.end(),
                           [&](const std::string& id) { return names(filter_, id); });
    if (literal_) return;
    try {
        regex_ = std::regex(filter_);
    } catch (const std::regex_error& e) {
        throw UsageError("bad --filter regex '" + filter_ + "': " + e.what() +
                         "; an id as lav prints it (a case, <case>/<variant> or a record) "
                         "matches as it is");
    }
}

bool RecordSelection::keeps(const std::string& record_id) const {
    if (rerun_ && !rerun_->count(record_id)) return false;
    if (filter_.empty()) return true;
    return literal_ ? names(filter_, record_id) : std::regex_search(record_id, regex_);
}

std::vector<std::string> narrow(scenario::Case& c, const std::vector<PlannedRecord>& kept) {
    std::vector<std::string> variants, backends;
    bool forward = false, backward = false;
    for (const auto& r : kept) {
        add_once(variants, r.variant);
        add_once(backends, r.requested);
        forward |= r.pass == "fwd";
        backward |= r.pass == "bwd";
    }
    c.variants = variants;
    c.forward = forward;
    c.backward = backward;
    return backends;
}

}  // namespace lav::cli
