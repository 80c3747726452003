// src/scenario/scenario.h — loads scenario files (TOML, schema v1) into validated, expanded cases.
//
// Loading never allocates a tensor: every check (keys, types, dtypes, shapes, cu_seqlens,
// estimated memory) runs on the parsed file, and all problems of a file are reported at once
// as file:line:col diagnostics in one ScenarioError (exit code 2).
//
//   auto files = scenario::collect_files({"scenarios/smoke"});
//   for (const auto& f : files) for (auto& c : scenario::load_file(f, catalog, opts)) run(c);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scenario/case.h"
#include "scenario/catalog.h"

namespace lav::scenario {

/// The schema version this build reads (the `schema` key; absent means this one).
inline constexpr int kSchemaVersion = 1;

struct LoadOptions {
    uint64_t max_memory_bytes = 0;  ///< a case estimated above this is an error; 0: no limit
    bool include_long = false;      ///< long cases run too, so their memory is checked too
};

/// Parses, validates and expands one scenario file. Throws ScenarioError carrying every
/// diagnostic of the file (up to 20), rendered with source line and caret.
std::vector<Case> load_file(const std::string& path, const Catalog& catalog,
                            const LoadOptions& options);

/// The *.toml files named by `paths`: files as given, directories searched recursively,
/// each directory's files in sorted order. Throws UsageError for a path that does not exist.
std::vector<std::string> collect_files(const std::vector<std::string>& paths);

/// A conservative estimate of the peak host memory one case needs (bytes): every input,
/// output and gradient in fp64 and its working copies, plus the chunk states.
uint64_t estimate_case_bytes(const Case& c);

}  // namespace lav::scenario
