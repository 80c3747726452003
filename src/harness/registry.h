// src/harness/registry.h — the kernel families the harness can run, behind one interface.
//
// A Family tells the harness which tensors a case needs (shapes, dtypes, default generators),
// how to run its float64 reference and each backend variant on them, and which results to
// measure. Families are added by an explicit register_all() call (no static registrars).
//
//   Registry registry;
//   register_all(registry);
//   const Family& f = registry.get("simple_gla");
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/precision_contract.h"
#include "metrics/bounds.h"
#include "scenario/case.h"
#include "scenario/catalog.h"

namespace lav::harness {

using TensorMap = std::map<std::string, at::Tensor>;

/// One tensor a case feeds to the kernel, described in head_last order.
struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;  ///< head_last: [B, T, H, ...] when time_major
    DType dtype;                 ///< the dtype the kernel receives
    bool time_major;             ///< permuted to [B, H, T, ...] for head_first cases
    scenario::Generator generator;
};

/// One result the harness compares with the reference.
struct MeasuredSpec {
    std::string name;
    metrics::TensorKind kind;
    int64_t time_dim;  ///< sequence axis in head_last order, -1 for states
};

/// What a backend variant returned: results in head_last order, in the dtypes it produced.
struct KernelResult {
    TensorMap results;
    PrecisionContract contract;
};

/// A chunk variant's stored chunk states beside the reference's states at the same positions,
/// both [NT, heads, K, V] (value heads under GVA) with chunks numbered by chunk_index()
/// (core/varlen.h) over the steps of each sequence.
struct ChunkStates {
    at::Tensor kernel;     ///< in the dtype the kernel stores them in
    at::Tensor reference;  ///< fp64
    /// recurrence steps per position: chunks cut each sequence's length × steps steps
    /// (gated_delta_product's num_householder sub-steps per token)
    int64_t steps = 1;
};

struct Family {
    scenario::FamilyInfo info;
    /// Kernel inputs of a case (q, k, v, gates, initial state).
    std::function<std::vector<TensorSpec>(const scenario::Case&)> inputs;
    /// Cotangents of the backward pass (d_o, dht), in the dtypes of o and ht.
    std::function<std::vector<TensorSpec>(const scenario::Case&)> cotangents;
    /// The results measured by a pass.
    std::function<std::vector<MeasuredSpec>(const scenario::Case&, bool backward)> measured;
    /// The float64 reference: inputs and cotangents are fp64, head_last; returns every
    /// measured tensor of the forward pass, and of the backward pass when `backward`.
    std::function<TensorMap(const scenario::Case&, const TensorMap& inputs,
                            const TensorMap& cotangents, bool backward)>
        reference;
    /// A backend variant: inputs in the case's dtypes and layout, on the CPU or, for the
    /// variants in cuda_variants, on a CUDA device (then it runs lav's CUDA kernels); returns
    /// one pass's results on the inputs' device.
    std::function<KernelResult(const scenario::Case&, const std::string& variant,
                               const TensorMap& inputs, const TensorMap& cotangents, bool backward)>
        run_cpu;
    /// The variants with a CUDA kernel in this build (none in CPU-only builds).
    std::vector<std::string> cuda_variants;
    /// Whether those kernels take the case's sizes; unset: every case. With --backend auto a
    /// case they do not take runs on the CPU backend instead.
    std::function<bool(const scenario::Case&)> cuda_fits;
    /// For families whose CPU chunk forward can hand out its stored chunk states: runs it on
    /// `inputs` (as run_cpu takes them) keeping them, and the reference on `reference_inputs`
    /// stopping at the same chunk boundaries. Empty for the other families.
    std::function<ChunkStates(const scenario::Case&, const TensorMap& inputs,
                              const TensorMap& reference_inputs)>
        chunk_states;
};

/// The tensor called `name` in `m`, or an undefined tensor when the case has none (h0, g, ...).
at::Tensor get_or_undefined(const TensorMap& m, const std::string& name);

class Registry {
  public:
    void add(Family family);
    /// The family called `name`; throws UsageError naming the known ones otherwise.
    const Family& get(const std::string& name) const;
    const std::vector<Family>& families() const { return families_; }
    /// What the scenario validator needs to know of every family.
    scenario::Catalog catalog() const;

  private:
    std::vector<Family> families_;
};

/// Adds every family of this build.
void register_all(Registry& registry);

// One `Family <f>_family();` per family of this build, each in src/harness/<f>_family.cpp.
#define LAV_FAMILY(name) Family name##_family();
#include "harness/families.inc"
#undef LAV_FAMILY

}  // namespace lav::harness
