// src/core/precision_contract.cpp — lookups and the one-line summary of a contract.
#include "core/precision_contract.h"

#include "core/error.h"

namespace lav {

DType PrecisionContract::dtype_of(const std::string& item) const {
    for (const auto& it : items)
        if (it.item == item) return it.dtype;
    LAV_ASSERT(false, "contract of ", kernel, " has no item '", item, "'");
    return DType::fp64;
}

std::string PrecisionContract::summary() const {
    std::string out;
    for (const auto& it : items) {
        if (!out.empty()) out += " / ";
        out += it.item + " " + std::string(dtype_name(it.dtype));
    }
    return out;
}

}  // namespace lav
