// src/providers/provider.h — kernels lav did not write, as rows: the calling convention they share.
//
// A provider has a name (the backend its records carry) and one callable per (family,
// variant), named "<variant>_<family>" (chunk_gla, recurrent_simple_gla). lav calls it with the
// family's declared tensors by name and the case's settings, and reads back the declared
// outputs in order (o, then the final states). Gradients come from autograd over the forward,
// with the declared cotangents; the precision contract judged is the one lav's own CPU row
// declares for the variant. A PyTorch op library (op_library.h) and a Python module
// (python.h) are the two kinds.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/row.h"
#include "harness/family.h"

namespace lav::providers {

/// The settings a callable may take besides tensors, by their conventional names.
inline constexpr const char* kSettings[] = {"scale",      "head_first",  "cu_seqlens",
                                            "chunk_size", "state_dtype", "output_dtype"};

/// One provider callable, as the row sees it.
struct Callable {
    /// The declared outputs, in order (undefined where the callable returns none), for the
    /// declared inputs `inputs` (absent optional ones undefined).
    std::function<std::vector<at::Tensor>(const Call& call, const TensorMap& inputs)> forward;
    /// The gradients "d" + name of `differentiated` given the cotangents of the outputs (in
    /// output order); unset: autograd in C++ over `forward`.
    std::function<TensorMap(const Call& call, const TensorMap& inputs,
                            const std::vector<std::string>& differentiated,
                            const std::vector<at::Tensor>& cotangents)>
        backward;
};

/// Points Triton's kernel cache at `dir` (TRITON_CACHE_DIR, absolute), creating the folder;
/// called before the interpreter starts, so that a provider's Triton reads it at import.
/// A path that is not a folder is a UsageError, one that cannot be made an EnvironmentError.
void use_triton_cache(const std::string& dir);

/// The declared outputs of `f` in order, and their cotangents in the same order.
std::vector<std::string> output_names(const harness::Family& f);
std::vector<std::string> cotangent_names(const harness::Family& f);

/// The row of `backend` for (f, variant) calling `callable` on `device`; its contract is
/// `declared`'s (lav's CPU row of the variant).
Row provider_row(const harness::Family& f, const std::string& variant, const std::string& backend,
                 const std::string& device, const Row& declared, Callable callable);

}  // namespace lav::providers
