// src/report/findings.cpp — the finding kinds, and which of them are about dtypes.
#include <algorithm>

#include "report/report.h"

namespace lav::report {

const std::vector<std::string>& finding_kinds() {
    static const std::vector<std::string> kinds = {"PROMOTION",
                                                   "DEMOTION",
                                                   "BOUNDARY_MISMATCH",
                                                   "STATE_DTYPE_CONTRACT",
                                                   "OUTPUT_DTYPE_CONTRACT",
                                                   "NONFINITE",
                                                   "OVERFLOW",
                                                   "UNDERFLOW",
                                                   "DRIFT",
                                                   "CHUNK_BOUNDARY",
                                                   "SEGMENT_LEAK",
                                                   "TOLERANCE",
                                                   "DROPPED_COTANGENT",
                                                   "DECOMPOSITION",
                                                   "EQUIVALENCE"};
    return kinds;
}

bool is_dtype_finding(const std::string& kind) {
    static const std::vector<std::string> dtype_kinds = {
        "PROMOTION", "DEMOTION", "BOUNDARY_MISMATCH", "STATE_DTYPE_CONTRACT",
        "OUTPUT_DTYPE_CONTRACT"};
    return std::find(dtype_kinds.begin(), dtype_kinds.end(), kind) != dtype_kinds.end();
}

std::string finding_summary(const CaseRecord& record) {
    std::vector<std::string> kinds;
    for (const Finding& f : record.findings) {
        if (f.kind == "EQUIVALENCE" || f.kind == "DECOMPOSITION") continue;
        if (std::find(kinds.begin(), kinds.end(), f.kind) == kinds.end()) kinds.push_back(f.kind);
    }
    std::string out;
    for (const auto& k : kinds) out += (out.empty() ? "" : ", ") + k;
    return out;
}

}  // namespace lav::report
