// src/core/precision_contract.h — what a kernel variant promises about dtypes, item by item.
//
// Each kernel variant declares, next to its launcher, the dtype of every tensor it reads,
// stores or accumulates in ("inputs q, k, v": bf16; "chunk states h": fp32; "accumulator":
// fp32; ...). The harness writes the contract into the report beside the measured errors,
// and checks the dtypes it can observe (outputs, gradients, final state) against it.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"

namespace lav {

struct ContractItem {
    std::string item;  ///< what is stored or computed, e.g. "chunk states h"
    DType dtype;
    std::string note;  ///< why, or where it is read, in a few words
};

struct PrecisionContract {
    std::string kernel;  ///< registry name, e.g. "simple_gla.chunk_fwd"
    std::vector<ContractItem> items;

    /// The dtype declared for `item`; throws InternalError if the contract lacks it.
    DType dtype_of(const std::string& item) const;
    /// One line, e.g. "bf16 in / fp32 acc / fp32 state / bf16 out".
    std::string summary() const;
};

}  // namespace lav
