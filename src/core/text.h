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

/// FNV-1a's offset basis: the start of a hash over nothing.
inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ULL;

/// FNV-1a over `text`, continuing from `h`: a stable hash, the same on every platform and build
/// (seeds and digests that must not change between machines).
uint64_t fnv1a(const std::string& text, uint64_t h = kFnv1aBasis);

}  // namespace lav
