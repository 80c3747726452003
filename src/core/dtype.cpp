// src/core/dtype.cpp — dtype spellings, LibTorch types and epsilons in one table.
#include "core/dtype.h"

#include "core/error.h"

namespace lav {
namespace {

struct DTypeRow {
    DType dtype;
    std::string_view name;
    c10::ScalarType storage;
    double epsilon;
};

// epsilon = 2^-(stored mantissa bits): fp32 23, tf32 10, fp16 10, bf16 7, e4m3 3, e5m2 2
constexpr DTypeRow kDTypes[] = {
    {DType::fp64, "fp64", c10::ScalarType::Double, 0x1p-52},
    {DType::fp32, "fp32", c10::ScalarType::Float, 0x1p-23},
    {DType::tf32, "tf32", c10::ScalarType::Float, 0x1p-10},
    {DType::fp16, "fp16", c10::ScalarType::Half, 0x1p-10},
    {DType::bf16, "bf16", c10::ScalarType::BFloat16, 0x1p-7},
    {DType::fp8_e4m3, "fp8_e4m3", c10::ScalarType::Float8_e4m3fn, 0x1p-3},
    {DType::fp8_e5m2, "fp8_e5m2", c10::ScalarType::Float8_e5m2, 0x1p-2},
};

const DTypeRow& row(DType dtype) {
    for (const auto& r : kDTypes)
        if (r.dtype == dtype) return r;
    LAV_ASSERT(false, "dtype missing from kDTypes");
    return kDTypes[0];
}

}  // namespace

std::string_view dtype_name(DType dtype) { return row(dtype).name; }

std::optional<DType> parse_dtype(std::string_view name) {
    for (const auto& r : kDTypes)
        if (r.name == name) return r.dtype;
    return std::nullopt;
}

std::string dtype_names_list() {
    std::string out;
    for (const auto& r : kDTypes) {
        if (!out.empty()) out += ", ";
        out += r.name;
    }
    return out;
}

c10::ScalarType to_scalar_type(DType dtype) { return row(dtype).storage; }

std::optional<DType> from_scalar_type(c10::ScalarType type) {
    // tf32 shares float32 storage, so the storage type reads back as fp32
    for (const auto& r : kDTypes)
        if (r.storage == type && r.dtype != DType::tf32) return r.dtype;
    return std::nullopt;
}

std::string scalar_type_name(c10::ScalarType type) {
    if (const auto d = from_scalar_type(type)) return std::string(dtype_name(*d));
    switch (type) {
        case c10::ScalarType::Long:
            return "int64";
        case c10::ScalarType::Int:
            return "int32";
        case c10::ScalarType::Bool:
            return "bool";
        default:
            return c10::toString(type);
    }
}

double dtype_epsilon(DType dtype) { return row(dtype).epsilon; }

}  // namespace lav
