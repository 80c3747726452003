// src/core/text.h — numbers and index lists as lav prints them in messages and reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lav {

/// `x` in scientific notation with `digits` after the point: sci(0.00228) == "2.28e-03".
std::string sci(double x, int digits = 2);

/// "[1, 917, 2, 40]"; "[]" for none.
std::string bracketed(const std::vector<int64_t>& values);

}  // namespace lav
