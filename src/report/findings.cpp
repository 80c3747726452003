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

}  // namespace lav::report
