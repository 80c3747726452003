// src/scenario/document.h — a scenario file as a located tree, parse to expand (private header).
//
// parse.cpp turns the TOML text into a Node tree (every key and value with its Span, table keys
// in declaration order) and checks the file's structure once: known keys, required keys, the
// family, the [matrix] axes and the [prologue] (its ops are parsed here, against the file's
// text, so that their errors point into the file). expand.cpp then builds one Case per point of
// the [matrix] cross product, checks every value of it, and then the family's own rules
// (FamilyInfo::check). No toml++ type crosses this header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scenario/case.h"
#include "scenario/catalog.h"
#include "scenario/diagnostics.h"
#include "scenario/prologue.h"
#include "scenario/scenario.h"

namespace lav::scenario {

enum class NodeKind { string, integer, floating, boolean, array, table, other };

/// One TOML value and where it was written.
struct Node {
    NodeKind kind = NodeKind::other;
    std::string type_name;  ///< for messages: "string", "integer", "float", "boolean", "date", ...
    std::string string_value;
    int64_t integer_value = 0;
    double float_value = 0;
    bool bool_value = false;
    /// array elements in order, or table entries in declaration order
    std::vector<Node> items;
    std::string key;  ///< this entry's key in its table; empty for array elements and the root
    Span key_span;    ///< where the key was written
    Span span;        ///< where the value was written ([shape] for a table header)

    /// The entry of a table by key; nullptr when absent or when this is not a table.
    const Node* find(std::string_view name) const;
    /// The entry at a dotted path of nested tables ("prologue.tensors.x.dtype"); nullptr when
    /// any part is absent.
    const Node* find_path(std::string_view path) const;
};

/// One [matrix] key and its alternatives, e.g. "dtypes.inputs" -> ["fp32", "bf16"].
struct MatrixAxis {
    std::string path;
    std::vector<const Node*> values;  ///< the alternatives, each with its own span
};

/// A structurally checked scenario file, ready for expansion.
struct Document {
    std::string path;
    const Node* root = nullptr;
    const FamilyInfo* family = nullptr;  ///< nullptr when the family is missing or unknown
    std::vector<MatrixAxis> axes;        ///< in declaration order
    /// the [prologue], parsed once: the ops and each tensor's shape as written; the autocast
    /// mode, the dtypes and the sizes are each case's, set by expand_cases
    std::optional<Prologue> prologue;
};

/// Parses TOML text into a Node tree. A syntax error (the first only), or text beyond the limits
/// of scenario.h (a line too long, tables or arrays nested too deep, an array too long), is
/// recorded and gives nullopt.
std::optional<Node> parse_toml(const std::string& path, std::string_view text,
                               DiagnosticList& diags);

/// Checks the keys and the structure of a parsed file, collects its [matrix] axes and parses its
/// [prologue] ops (`text` is the file's text, where the ops' positions are found). Gives nullopt
/// when the file cannot be expanded: a schema this build does not read, or a [matrix] of more
/// cases than a file may hold.
std::optional<Document> check_document(const std::string& path, std::string_view text,
                                       const Node& root, const Catalog& catalog,
                                       DiagnosticList& diags);

/// Expands the [matrix] cross product and checks each case's values, then runs the family's
/// rules on each case without errors when `diags` held none on entry (a file with misplaced
/// keys may not say what its author meant). Cases are returned even when errors were
/// recorded; the caller throws.
std::vector<Case> expand_cases(const Document& document, const LoadOptions& options,
                               DiagnosticList& diags);

/// 'text', as names and values are quoted in messages.
std::string in_quotes(std::string_view text);

/// "'seed' must be an integer, got string" and the like, for a value of the wrong TOML type.
std::string type_message(std::string_view path, std::string_view expected, const Node& got);

}  // namespace lav::scenario
