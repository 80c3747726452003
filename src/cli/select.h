// src/cli/select.h — which records of the loaded cases `lav run` makes: --filter (an id lav
// printed, matched literally, or a regex over record ids) and --rerun-failed (a previous run's
// failed and errored records).
#pragma once

#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "harness/registry.h"
#include "scenario/case.h"

namespace lav::cli {

/// One record a case can make: its variant, the backend asked for ("auto", "cpu", ...) and the
/// one it resolves to, its pass and its id "<case>/<variant>/<backend>/<pass>".
struct PlannedRecord {
    std::string variant, requested, backend, pass, id;
};

/// Every record of `c` on the `requested` backends, in run order.
std::vector<PlannedRecord> plan_records(const harness::Registry& registry, const scenario::Case& c,
                                        const std::vector<std::string>& requested);

class RecordSelection {
  public:
    /// `filter`: --filter's text ("" keeps all); `rerun`: the record ids of --rerun-failed, if
    /// given. Throws UsageError for a filter too long to be a regex lav compiles.
    RecordSelection(std::string filter, std::optional<std::set<std::string>> rerun);

    /// Decides how the filter reads, once the ids of every record the run could make are known:
    /// literally when it is one of them, a case id or "<case>/<variant>"; as a regex otherwise
    /// (UsageError when it is none).
    void settle(const std::vector<std::string>& ids);

    bool keeps(const std::string& record_id) const;

  private:
    std::string filter_;
    std::optional<std::set<std::string>> rerun_;
    bool literal_ = false;
    std::regex regex_;
};

/// Narrows `c` to the variants and passes of its kept records and returns the backends asked
/// for that they need (empty when no record of `c` is kept).
std::vector<std::string> narrow(scenario::Case& c, const std::vector<PlannedRecord>& kept);

}  // namespace lav::cli
