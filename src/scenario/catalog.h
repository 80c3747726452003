// src/scenario/catalog.h — what the scenario validator needs to know about each kernel family.
//
// The harness fills one FamilyInfo per registered family; scenario validation checks names
// (family, variants, options, tensors) against it without knowing any kernel.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lav::scenario {

struct Case;

/// A family-specific problem with an expanded case, found before anything runs. `path` is the
/// setting to point at ("shape.V", "options.gva", "dtypes.inputs"), as in [matrix] keys.
struct FamilyIssue {
    std::string path;
    std::string message;
    std::string note;  ///< the fix
};

struct FamilyInfo {
    std::string name;                   ///< "simple_gla"
    std::string summary;                ///< one line for `lav list`
    std::vector<std::string> variants;  ///< "chunk", "recurrent"
    std::vector<std::string> inputs;    ///< tensors that take a generator: "q", "k", "v", "g", "h0"
    std::vector<std::string> measured;  ///< tensors that take a tolerance: "o", "ht", "dq", ...
    /// option -> allowed values, first is the default, e.g. "gate" -> {"g", "g_gamma", "none"}
    std::map<std::string, std::vector<std::string>> options;
    /// the state components a scenario may give dtypes one by one ("hk", "hv"); empty for a
    /// family with one state
    std::vector<std::string> state_components;
    /// Checks what the generic schema cannot (e.g. hgrn needs V == K, GVA needs H | HV);
    /// empty when the family has no extra rules.
    std::function<std::vector<FamilyIssue>(const Case&)> check;
};

using Catalog = std::vector<FamilyInfo>;

}  // namespace lav::scenario
