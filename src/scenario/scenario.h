// src/scenario/scenario.h — loads scenario files (TOML, schema v1) into validated, expanded cases.
//
// Loading never allocates a tensor: every check (keys, types, dtypes, shapes, cu_seqlens,
// estimated memory) runs on the parsed file, and all problems of a file are reported at once
// as file:line:col diagnostics in one ScenarioError (exit code 2).
//
//   auto files = scenario::collect_files({"scenarios/smoke"});
//   for (const auto& f : files) for (auto& c : scenario::load_file(f, catalog, opts)) run(c);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "scenario/case.h"
#include "scenario/catalog.h"

namespace lav::scenario {

/// The schema version this build reads (the `schema` key; absent means this one).
inline constexpr int kSchemaVersion = 1;

// What a scenario file may hold (scenarios/README.md, "Limits"): far above what a scenario
// needs, and low enough that no file can exhaust lav's memory or stack.
inline constexpr std::size_t kMaxFileBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxLineBytes = 16384;
inline constexpr std::size_t kMaxNameLength = 128;     ///< the `name` key
inline constexpr std::size_t kMaxCaseIdLength = 1024;  ///< a name with its [matrix] values
inline constexpr std::size_t kMaxArrayItems = 4096;
inline constexpr int kMaxNesting = 16;    ///< tables and arrays inside one another
inline constexpr int kMaxExprDepth = 64;  ///< parentheses, minus signs and calls in one another
inline constexpr std::size_t kMaxExprTokens = 1000;  ///< names, numbers and signs on a line of ops

struct LoadOptions {
    uint64_t max_memory_bytes = 0;  ///< a case estimated above this is an error; 0: no limit
    bool include_long = false;      ///< long cases run too, so their memory is checked too
};

/// Parses, validates and expands one scenario file. Throws ScenarioError carrying every
/// diagnostic of the file (up to 20), rendered with source line and caret.
std::vector<Case> load_file(const std::string& path, const Catalog& catalog,
                            const LoadOptions& options);

/// The *.toml files named by `paths`: files as given, directories searched recursively,
/// each directory's files in sorted order; a file named twice (by the same real path) is taken
/// once, where it first appears. Throws UsageError for a path that does not exist or is neither
/// a regular file nor a directory (a FIFO, a device).
std::vector<std::string> collect_files(const std::vector<std::string>& paths);

/// The text of the scenario file `path`. Throws ScenarioError, before reading anything, when it
/// is not a regular file or is larger than kMaxFileBytes.
std::string read_scenario_text(const std::string& path);

/// A conservative estimate of the peak host memory one case needs (bytes): every input,
/// output and gradient in fp64 and its working copies, the chunk states, and the prologue's
/// declared tensors.
uint64_t estimate_case_bytes(const Case& c);

}  // namespace lav::scenario
