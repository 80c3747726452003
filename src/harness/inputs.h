// src/harness/inputs.h — seeded case tensors: drawn in fp64, quantised, then widened for the
// reference.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/registry.h"

namespace lav::harness {

/// The same values twice: as the kernel receives them (the spec's dtype, the case's layout,
/// contiguous in that layout) and as the reference receives them (widened to fp64, head_last).
/// Quantising first makes the measured error the kernel's own, not input rounding.
struct CaseTensors {
    TensorMap kernel;
    TensorMap reference;
};

/// Draws every tensor of `specs`. Each tensor's stream is seeded from (seed, salt, name), so a
/// tensor's values do not depend on which other tensors the case has.
CaseTensors make_tensors(const std::vector<TensorSpec>& specs, const scenario::Case& c,
                         uint64_t salt);

}  // namespace lav::harness
