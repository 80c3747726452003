// src/core/source_location.h — where a value came from in a scenario file (1-based line and column).
#pragma once

#include <string>

namespace lav {

struct SourceLocation {
    std::string file;
    int line = 0;
    int column = 0;
    bool known() const { return line > 0; }
};

}  // namespace lav
