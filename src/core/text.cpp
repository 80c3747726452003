// src/core/text.cpp — numbers and index lists as lav prints them.
#include "core/text.h"

#include <cstdio>

namespace lav {

std::string sci(double x, int digits) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*e", digits, x);
    return buf;
}

std::string bracketed(const std::vector<int64_t>& values) {
    std::string out = "[";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
    return out + "]";
}

uint64_t fnv1a(const std::string& text, uint64_t h) {
    for (const unsigned char ch : text) {
        h ^= ch;
        h *= 0x100000001b3ULL;
    }
    return h;
}

}  // namespace lav
