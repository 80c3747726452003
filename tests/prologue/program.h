// tests/prologue/program.h — test helpers: ops text located as a file of its own.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "scenario/diagnostics.h"
#include "scenario/expr.h"
#include "scenario/prologue.h"

namespace lav::scenario {

/// The file name ops written in a test are reported under.
inline constexpr const char kOpsFile[] = "ops.txt";

/// `text` located as if it were the whole of kOpsFile: line 1, column 1 is its first byte.
inline SourceText located(const std::string& text) {
    SourceText source;
    source.text = text;
    int line = 1;
    int column = 1;
    for (char c : text) {
        source.at.push_back({kOpsFile, line, column});
        if (c == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    source.at.push_back({kOpsFile, line, column});
    return source;
}

inline std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

/// A prologue whose ops are `ops`, parsed without name checks and located in kOpsFile; a parse
/// error fails the test.
inline Prologue parse_prologue(const std::string& ops, AutocastMode mode = AutocastMode::off) {
    DiagnosticList diags(kOpsFile, ops);
    Prologue prologue;
    prologue.file = kOpsFile;
    prologue.autocast = mode;
    prologue.autocast_span = {{kOpsFile, 1, 1}, 1};
    prologue.statements = parse_program(located(ops), nullptr, diags);
    prologue.source_lines = std::make_shared<const std::vector<std::string>>(split_lines(ops));
    EXPECT_TRUE(diags.empty()) << diags.render();
    return prologue;
}

}  // namespace lav::scenario
