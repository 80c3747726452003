// src/providers/op_library.h — a PyTorch op library as a provider: `lav run --load-library F.so`.
//
// The library registers its ops with TORCH_LIBRARY when it is loaded. Each namespace it adds
// is a provider named after it; its op "<ns>::<variant>_<family>" becomes the row of that
// variant, called by argument name (provider.h): the family's declared tensors (an initial
// state h0 also as `initial_state`, flash-linear-attention's name), the settings, the family's
// options; an argument lav cannot fill must have a default.
#pragma once

#include <string>
#include <vector>

#include "harness/registry.h"

namespace lav::providers {

/// Loads the library at `path` and adds a row for every op of a family variant it registers;
/// returns the provider (namespace) names it added. Throws UsageError when the file cannot be
/// loaded or registers no such op.
std::vector<std::string> load_op_library(const std::string& path, harness::Registry& registry);

}  // namespace lav::providers
