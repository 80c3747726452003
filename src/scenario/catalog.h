// src/scenario/catalog.h — what the scenario validator needs to know about each kernel family.
//
// The harness fills one FamilyInfo per registered family; scenario validation checks names
// (family, variants, options, tensors) against it without knowing any kernel.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace lav::scenario {

struct FamilyInfo {
    std::string name;                   ///< "simple_gla"
    std::string summary;                ///< one line for `lav list`
    std::vector<std::string> variants;  ///< "chunk", "recurrent"
    std::vector<std::string> inputs;    ///< tensors that take a generator: "q", "k", "v", "g", "h0"
    std::vector<std::string> measured;  ///< tensors that take a tolerance: "o", "ht", "dq", ...
    /// option -> allowed values, first is the default, e.g. "gate" -> {"g", "g_gamma", "none"}
    std::map<std::string, std::vector<std::string>> options;
};

using Catalog = std::vector<FamilyInfo>;

}  // namespace lav::scenario
