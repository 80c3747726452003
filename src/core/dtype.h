// src/core/dtype.h — the one table of dtype spellings used by the CLI, scenarios and reports.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lav {

/// Floating dtypes lav can name. tf32 and the fp8 types are spellings only: no kernel takes them yet.
enum class DType { fp64, fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2 };

/// The spelling used everywhere (CLI, scenario files, HDF5 attributes): "bf16", "fp32", ...
std::string_view dtype_name(DType dtype);

/// Parses a spelling from the table; nullopt when it is not one.
std::optional<DType> parse_dtype(std::string_view name);

/// Every spelling, comma-separated, for "expected one of" notes.
std::string dtype_names_list();

/// The LibTorch storage type of a dtype (tf32 is stored as float32).
c10::ScalarType to_scalar_type(DType dtype);

/// The lav dtype stored as `type` (float32 reads as fp32, never tf32); nullopt for non-floating types.
std::optional<DType> from_scalar_type(c10::ScalarType type);

/// The lav spelling of a LibTorch floating type; "int64" etc. for non-floating ones.
std::string scalar_type_name(c10::ScalarType type);

/// Machine epsilon of a dtype (2^-mantissa bits).
double dtype_epsilon(DType dtype);

}  // namespace lav
