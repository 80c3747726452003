// src/scenario/diagnostics.cpp — GCC-style rendering, did-you-mean, the per-file list. No checks.
#include "scenario/diagnostics.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "core/error.h"
#include "core/printable.h"

namespace lav::scenario {
namespace {

constexpr int kMaxSuggestionDistance = 2;

// toml++ counts columns in code points, so the quote walks the line by UTF-8 lead bytes
bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// code points quoted on either side of a diagnostic's column: a line of any length is quoted
// in a window of 2 · kContext + 1, with … where it goes on
constexpr int kContext = 60;
constexpr char kEllipsis[] = "…";

struct Quote {
    std::string line;   ///< the window of the source line, control characters escaped
    std::string caret;  ///< ^~~ under the span, padded with the line's own tabs
};

Quote quote_line(std::string_view line, int column, int length) {
    std::vector<std::string_view> points;  // the line's code points
    for (std::size_t i = 0; i < line.size();) {
        std::size_t end = i + 1;
        while (end < line.size() && is_continuation_byte(line[end])) ++end;
        points.push_back(line.substr(i, end - i));
        i = end;
    }
    const int count = static_cast<int>(points.size());
    // the window keeps its width near the line's ends, so a line that fits is quoted whole
    const int width = 2 * kContext + 1;
    const int first = count <= width ? 1 : std::clamp(column - kContext, 1, count - width + 1);
    const int last = std::min(count, first + width - 1);
    Quote quote;
    if (first > 1) {
        quote.line += kEllipsis;
        quote.caret += ' ';
    }
    int underlined = 0;
    for (int col = first; col <= last; ++col) {
        const std::string_view point = points[col - 1];
        // tabs stay, and the caret line repeats them, so the caret lines up at any tab width
        const std::string shown = printable(point, Breaks::keep);
        quote.line += shown;
        // an escape is as wide as its text; any other code point one column
        const int width = shown.size() == point.size() ? 1 : static_cast<int>(shown.size());
        if (col < column) {
            quote.caret.append(point == "\t" ? "\t" : std::string(width, ' '));
        } else if (col < column + std::max(1, length)) {
            underlined += width;
        }
    }
    if (last < count) quote.line += kEllipsis;
    // a column past the end of the line (a missing value at end of line) still gets its caret
    if (column > last + 1) quote.caret.append(static_cast<std::size_t>(column - last - 1), ' ');
    quote.caret += '^';
    quote.caret.append(static_cast<std::size_t>(std::max(0, underlined - 1)), '~');
    return quote;
}

std::vector<std::string> split_lines(std::string_view text) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        std::string line(text.substr(start, end - start));
        if (!line.empty() && line.back() == '\r') line.pop_back();
        lines.push_back(std::move(line));
        start = end + 1;
    }
    return lines;
}

}  // namespace

std::string render_diagnostic(const Diagnostic& diagnostic, std::string_view source_line) {
    const SourceLocation& at = diagnostic.span.at;
    std::string out = at.file;
    if (at.known()) out += ":" + std::to_string(at.line) + ":" + std::to_string(at.column);
    out += ": error: " + diagnostic.message;
    if (at.known()) {
        const Quote quote = quote_line(source_line, at.column, diagnostic.span.length);
        out += "\n    " + quote.line + "\n    " + quote.caret;
    }
    if (!diagnostic.note.empty()) out += "\nnote: " + diagnostic.note;
    return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    std::iota(row.begin(), row.end(), std::size_t{0});
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
            diagonal = above;
        }
    }
    return row[b.size()];
}

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
    std::optional<std::string> best;
    std::size_t best_distance = kMaxSuggestionDistance + 1;
    for (const auto& candidate : candidates) {
        const std::size_t d = edit_distance(word, candidate);
        // "x" for "o" is no suggestion: replacing every character is not a typo
        if (d < best_distance && d < std::max(word.size(), candidate.size())) {
            best = candidate;
            best_distance = d;
        }
    }
    return best;
}

std::string did_you_mean_note(std::string_view word, const std::vector<std::string>& candidates) {
    if (auto match = closest_match(word, candidates)) return "did you mean '" + *match + "'?";
    return "expected one of: " + join(candidates);
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
    std::string out;
    for (const auto& item : items) {
        if (!out.empty()) out += separator;
        out += item;
    }
    return out;
}

DiagnosticList::DiagnosticList(std::string file, std::string_view text)
    : file_(std::move(file)), lines_(split_lines(text)) {}

void DiagnosticList::error(const Span& span, std::string message, std::string note) {
    for (const auto& d : diagnostics_) {
        if (d.span.at.line == span.at.line && d.span.at.column == span.at.column &&
            d.message == message && d.note == note)
            return;
    }
    if (full()) {
        stopped_ = true;
        return;
    }
    diagnostics_.push_back({span, std::move(message), std::move(note)});
}

std::string DiagnosticList::render() const {
    std::vector<const Diagnostic*> sorted;
    for (const auto& d : diagnostics_) sorted.push_back(&d);
    std::stable_sort(sorted.begin(), sorted.end(), [](const Diagnostic* a, const Diagnostic* b) {
        return std::tie(a->span.at.line, a->span.at.column) <
               std::tie(b->span.at.line, b->span.at.column);
    });
    std::string out;
    for (const Diagnostic* d : sorted) {
        const int line = d->span.at.line;
        std::string_view source_line;
        if (line >= 1 && static_cast<std::size_t>(line) <= lines_.size())
            source_line = lines_[line - 1];
        out += render_diagnostic(*d, source_line) + "\n";
    }
    const std::size_t n = diagnostics_.size();
    out += std::to_string(n) + (n == 1 ? " error in " : " errors in ") + file_;
    if (stopped_) out += " (stopped after " + std::to_string(kMaxDiagnostics) + ")";
    return out;
}

void DiagnosticList::throw_if_any() const {
    if (!empty()) throw ScenarioError(render());
}

}  // namespace lav::scenario
