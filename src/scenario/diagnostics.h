// src/scenario/diagnostics.h — scenario errors at file:line:col: collect, render, throw; no checks.
//
// A DiagnosticList gathers the errors of one file, each at a Span (where the offending key or
// value was written) with an optional note carrying the fix, and throws them together as one
// ScenarioError rendered in GCC style with the source line and a caret:
//
//   DiagnosticList diags(path, text);
//   diags.error(value.span, "unknown dtype 'bf15'", "expected one of: " + dtype_names_list());
//   diags.throw_if_any();
//
//   scenarios/simple_gla/chunk_bf16.toml:7:10: error: unknown dtype 'bf15'
//       inputs = "bf15"
//                ^~~~~~
//   note: expected one of: fp64, fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2
//   1 error in scenarios/simple_gla/chunk_bf16.toml
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/source_location.h"

namespace lav::scenario {

/// At most this many errors are kept per file; a file with more stops there.
inline constexpr std::size_t kMaxDiagnostics = 20;

/// Where something was written: its first character and how many columns it spans.
struct Span {
    SourceLocation at;
    int length = 1;  ///< columns under the caret; a span running past its line is cut there
};

struct Diagnostic {
    Span span;
    std::string message;
    std::string note;  ///< the fix; empty for none
};

/// One diagnostic: "file:line:col: error: message", the quoted source line with ^~~ under the
/// span (omitted when the line is unknown), then "note: ..." when there is a note. No final
/// newline.
std::string render_diagnostic(const Diagnostic& diagnostic, std::string_view source_line);

/// Levenshtein distance (insertions, deletions, substitutions), bytewise.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate nearest to `word` within edit distance 2, for "did you mean" notes; nullopt
/// when none is that close, or when the nearest one would need every character replaced.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

/// "did you mean 'x'?" when a candidate is close to `word`, else "expected one of: a, b, c".
std::string did_you_mean_note(std::string_view word, const std::vector<std::string>& candidates);

/// "a, b, c".
std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");

/// The errors of one scenario file, rendered against its text.
class DiagnosticList {
  public:
    DiagnosticList(std::string file, std::string_view text);

    /// Records an error. A repeat of a recorded one (same place, message and note) is dropped:
    /// [matrix] expansion checks the settings its cases share once per case. Once full(),
    /// further errors are dropped too.
    void error(const Span& span, std::string message, std::string note = {});

    bool empty() const { return diagnostics_.empty(); }
    std::size_t size() const { return diagnostics_.size(); }
    /// True once kMaxDiagnostics errors are recorded; callers may stop checking.
    bool full() const { return diagnostics_.size() >= kMaxDiagnostics; }
    const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

    /// Every diagnostic in file order, then "N errors in <file>".
    std::string render() const;

    /// Throws ScenarioError carrying render() when any error was recorded.
    void throw_if_any() const;

  private:
    std::string file_;
    std::vector<std::string> lines_;
    std::vector<Diagnostic> diagnostics_;
    bool stopped_ = false;
};

}  // namespace lav::scenario
