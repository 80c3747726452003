// src/scenario/parse.cpp — TOML to a located tree, key and structure checks, load_file; not values.
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "scenario/document.h"
#include "scenario/scenario.h"

namespace lav::scenario {
namespace {

// a guard against a typo such as a 1000-value axis; real scenario files stay far below it
constexpr std::size_t kMaxCases = 10000;

const std::vector<std::string> kTopLevelKeys = {
    "schema", "name",          "description", "family",     "variants", "passes",     "seed",
    "layout", "initial_state", "chunk_size",  "scale",      "long",     "cu_seqlens", "shape",
    "dtypes", "options",       "inputs",      "tolerances", "matrix"};
const std::vector<std::string> kTableKeys = {"shape",  "dtypes",     "options",
                                             "inputs", "tolerances", "matrix"};
const std::vector<std::string> kShapeKeys = {"B", "T", "H", "K", "V", "HV"};
// HV (value heads) is optional: it defaults to H
const std::vector<std::string> kRequiredShapeKeys = {"B", "T", "H", "K", "V"};
const std::vector<std::string> kDTypeKeys = {"inputs", "gates", "state", "output"};
const std::vector<std::string> kGeneratorKeys = {"dist", "scale", "normalizer"};
// the settings a [matrix] key may vary, besides "options.<name>" for the family's options
const std::vector<std::string> kMatrixPaths = {
    "layout",        "seed",         "initial_state", "chunk_size",    "scale",   "cu_seqlens",
    "dtypes.inputs", "dtypes.gates", "dtypes.state",  "dtypes.output", "shape.B", "shape.T",
    "shape.H",       "shape.K",      "shape.V",       "shape.HV"};

bool contains(const std::vector<std::string>& list, std::string_view item) {
    return std::find(list.begin(), list.end(), item) != list.end();
}

Span span_of(const toml::source_region& region, const std::string& path) {
    Span span;
    span.at = {path, static_cast<int>(region.begin.line), static_cast<int>(region.begin.column)};
    // a value spread over several lines is marked at its first character only
    if (region.end.line == region.begin.line && region.end.column > region.begin.column)
        span.length = static_cast<int>(region.end.column - region.begin.column);
    return span;
}

bool before(const Span& a, const Span& b) {
    return std::tie(a.at.line, a.at.column) < std::tie(b.at.line, b.at.column);
}

Node to_node(const toml::node& value, const std::string& path) {
    Node node;
    node.span = span_of(value.source(), path);
    switch (value.type()) {
        case toml::node_type::string:
            node.kind = NodeKind::string;
            node.type_name = "string";
            node.string_value = value.as_string()->get();
            break;
        case toml::node_type::integer:
            node.kind = NodeKind::integer;
            node.type_name = "integer";
            node.integer_value = value.as_integer()->get();
            break;
        case toml::node_type::floating_point:
            node.kind = NodeKind::floating;
            node.type_name = "float";
            node.float_value = value.as_floating_point()->get();
            break;
        case toml::node_type::boolean:
            node.kind = NodeKind::boolean;
            node.type_name = "boolean";
            node.bool_value = value.as_boolean()->get();
            break;
        case toml::node_type::array:
            node.kind = NodeKind::array;
            node.type_name = "array";
            for (const toml::node& item : *value.as_array())
                node.items.push_back(to_node(item, path));
            break;
        case toml::node_type::table:
            node.kind = NodeKind::table;
            node.type_name = "table";
            for (const auto& [key, item] : *value.as_table()) {
                Node entry = to_node(item, path);
                entry.key = std::string(key.str());
                // toml++ 3 records where each key was written; the value stands in if it did not
                entry.key_span =
                    key.source().begin.line > 0 ? span_of(key.source(), path) : entry.span;
                node.items.push_back(std::move(entry));
            }
            // toml++ tables are ordered by key; [matrix] expansion needs the order of the file
            std::stable_sort(
                node.items.begin(), node.items.end(),
                [](const Node& a, const Node& b) { return before(a.key_span, b.key_span); });
            break;
        case toml::node_type::date:
            node.type_name = "date";
            break;
        case toml::node_type::time:
            node.type_name = "time";
            break;
        case toml::node_type::date_time:
            node.type_name = "date-time";
            break;
        case toml::node_type::none:
            node.type_name = "nothing";
            break;
    }
    return node;
}

std::vector<std::string> option_names(const FamilyInfo& family) {
    std::vector<std::string> names;
    for (const auto& [option, values] : family.options) names.push_back(option);
    return names;
}

/// Structural checks of one file; each method records what it finds in diags_.
class Checker {
  public:
    Checker(const std::string& path, const Node& root, const Catalog& catalog,
            DiagnosticList& diags)
        : root_(root), catalog_(catalog), diags_(diags), file_start_{{path, 1, 1}, 1} {
        document_.path = path;
        document_.root = &root;
    }

    std::optional<Document> run() {
        // a file of another schema version is not checked against this one
        if (!check_schema()) return std::nullopt;
        check_top_level();
        check_family();
        collect_matrix();
        check_table_keys("shape", kShapeKeys);
        check_table_keys("dtypes", kDTypeKeys);
        check_family_tables();
        check_shape_present();
        if (!check_case_count()) return std::nullopt;
        return std::move(document_);
    }

  private:
    const Node* table(std::string_view name) const {
        const Node* node = root_.find(name);
        return node && node->kind == NodeKind::table ? node : nullptr;
    }

    void unknown_key(const Node& entry, const std::string& shown,
                     const std::vector<std::string>& known) {
        diags_.error(entry.key_span, "unknown key " + in_quotes(shown),
                     did_you_mean_note(shown, known));
    }

    bool check_schema() {
        const Node* schema = root_.find("schema");
        if (!schema) return true;
        if (schema->kind != NodeKind::integer) {
            diags_.error(schema->span, type_message("schema", "an integer", *schema));
            return false;
        }
        if (schema->integer_value != kSchemaVersion) {
            diags_.error(schema->span,
                         "unsupported schema version " + std::to_string(schema->integer_value),
                         "this build of lav reads schema " + std::to_string(kSchemaVersion));
            return false;
        }
        return true;
    }

    void check_top_level() {
        for (const Node& entry : root_.items) {
            if (!contains(kTopLevelKeys, entry.key)) {
                unknown_key(entry, entry.key, kTopLevelKeys);
            } else if (contains(kTableKeys, entry.key) && entry.kind != NodeKind::table) {
                diags_.error(entry.span, type_message(entry.key, "a table", entry));
            }
        }
        const std::pair<std::string, std::string> required[] = {
            {"name", "add name = \"...\" (letters, digits, '_', '.' and '-')"},
            {"description", "add description = \"what this scenario checks\""},
            {"family", "add family = \"...\", one of: " + join(family_names())}};
        for (const auto& [key, note] : required) {
            if (!root_.find(key))
                diags_.error(file_start_, "missing required key " + in_quotes(key), note);
        }
    }

    std::vector<std::string> family_names() const {
        std::vector<std::string> names;
        for (const auto& f : catalog_) names.push_back(f.name);
        return names;
    }

    void check_family() {
        const Node* family = root_.find("family");
        if (!family) return;
        if (family->kind != NodeKind::string) {
            diags_.error(family->span, type_message("family", "a string", *family));
            return;
        }
        for (const auto& f : catalog_) {
            if (f.name == family->string_value) {
                document_.family = &f;
                return;
            }
        }
        diags_.error(family->span, "unknown family " + in_quotes(family->string_value),
                     did_you_mean_note(family->string_value, family_names()));
    }

    void check_table_keys(std::string_view name, const std::vector<std::string>& known) {
        const Node* t = table(name);
        if (!t) return;
        for (const Node& entry : t->items)
            if (!contains(known, entry.key)) unknown_key(entry, entry.key, known);
    }

    // [options], [inputs] and [tolerances] name what the family has; unchecked without one
    void check_family_tables() {
        const FamilyInfo* family = document_.family;
        if (!family) return;
        const std::string of_family = " for family " + in_quotes(family->name);
        if (const Node* options = table("options")) {
            const std::vector<std::string> names = option_names(*family);
            for (const Node& entry : options->items) {
                if (contains(names, entry.key)) continue;
                diags_.error(entry.key_span, "unknown option " + in_quotes(entry.key) + of_family,
                             names.empty() ? "family " + in_quotes(family->name) + " has no options"
                                           : did_you_mean_note(entry.key, names));
            }
        }
        if (const Node* inputs = table("inputs")) {
            for (const Node& entry : inputs->items) {
                if (!contains(family->inputs, entry.key)) {
                    diags_.error(entry.key_span,
                                 "unknown input tensor " + in_quotes(entry.key) + of_family,
                                 did_you_mean_note(entry.key, family->inputs));
                    continue;
                }
                if (entry.kind != NodeKind::table) continue;
                for (const Node& field : entry.items)
                    if (!contains(kGeneratorKeys, field.key))
                        unknown_key(field, field.key, kGeneratorKeys);
            }
        }
        if (const Node* tolerances = table("tolerances")) {
            for (const Node& entry : tolerances->items) {
                if (contains(family->measured, entry.key)) continue;
                diags_.error(entry.key_span,
                             "unknown measured tensor " + in_quotes(entry.key) + of_family,
                             did_you_mean_note(entry.key, family->measured));
            }
        }
    }

    // [matrix] keys are dotted paths, quoted ("dtypes.inputs") or as nested tables
    void flatten_matrix(const Node& node, const std::string& prefix) {
        for (const Node& entry : node.items) {
            const std::string path = prefix + entry.key;
            if (entry.kind == NodeKind::table) {
                flatten_matrix(entry, path + ".");
            } else {
                matrix_entries_.emplace_back(path, &entry);
            }
        }
    }

    std::vector<std::string> matrix_candidates() const {
        std::vector<std::string> candidates = kMatrixPaths;
        if (document_.family)
            for (const auto& option : option_names(*document_.family))
                candidates.push_back("options." + option);
        return candidates;
    }

    const Node* base_value(const std::string& path) const {
        const auto dot = path.find('.');
        if (dot == std::string::npos) return root_.find(path);
        const Node* t = table(path.substr(0, dot));
        return t ? t->find(path.substr(dot + 1)) : nullptr;
    }

    bool matrix_can_vary(const std::string& path, const Node& entry) {
        const std::vector<std::string> candidates = matrix_candidates();
        if (contains(candidates, path)) return true;
        const auto dot = path.find('.');
        const std::string head = path.substr(0, dot);
        if (head == "options" && document_.family && dot != std::string::npos) {
            const std::vector<std::string> names = option_names(*document_.family);
            const std::string option = path.substr(dot + 1);
            diags_.error(entry.key_span,
                         "unknown option " + in_quotes(option) + " for family " +
                             in_quotes(document_.family->name),
                         did_you_mean_note(option, names));
        } else if (head != "options" && head != "shape" && head != "dtypes" &&
                   contains(kTopLevelKeys, head)) {
            diags_.error(entry.key_span, in_quotes(path) + " cannot be varied in [matrix]",
                         "[matrix] varies: " + join(kMatrixPaths) + ", options.<name>");
        } else if (head != "options" || document_.family) {
            unknown_key(entry, path, candidates);
        }
        return false;
    }

    void collect_matrix() {
        const Node* matrix = table("matrix");
        if (!matrix) return;
        flatten_matrix(*matrix, "");
        std::stable_sort(matrix_entries_.begin(), matrix_entries_.end(),
                         [](const auto& a, const auto& b) {
                             return before(a.second->key_span, b.second->key_span);
                         });
        for (const auto& [path, entry] : matrix_entries_) {
            if (!matrix_can_vary(path, *entry)) continue;
            const bool repeated =
                std::any_of(document_.axes.begin(), document_.axes.end(),
                            [&](const MatrixAxis& axis) { return axis.path == path; });
            if (repeated) {
                diags_.error(entry->key_span, in_quotes(path) + " appears twice in [matrix]",
                             "merge the two lists of values");
                continue;
            }
            if (const Node* base = base_value(path)) {
                diags_.error(entry->key_span,
                             in_quotes(path) + " is set both in [matrix] and at line " +
                                 std::to_string(base->key_span.at.line),
                             "remove one of the two");
                continue;
            }
            if (entry->kind != NodeKind::array) {
                diags_.error(entry->span,
                             "[matrix] " + type_message(path, "an array of alternatives", *entry),
                             "write " + path + " = [...] with the values to try");
                continue;
            }
            if (entry->items.empty()) {
                diags_.error(entry->span, "[matrix] " + in_quotes(path) + " has no alternatives",
                             "give at least one value");
                continue;
            }
            MatrixAxis axis{path, {}};
            for (const Node& value : entry->items) axis.values.push_back(&value);
            document_.axes.push_back(std::move(axis));
        }
    }

    bool in_matrix(const std::string& path) const {
        return std::any_of(matrix_entries_.begin(), matrix_entries_.end(),
                           [&](const auto& e) { return e.first == path; });
    }

    void check_shape_present() {
        const Node* shape = root_.find("shape");
        if (shape && shape->kind != NodeKind::table) return;
        const bool any_in_matrix =
            std::any_of(kRequiredShapeKeys.begin(), kRequiredShapeKeys.end(),
                        [&](const auto& k) { return in_matrix("shape." + k); });
        if (!shape && !any_in_matrix) {
            diags_.error(file_start_, "missing required table [shape]",
                         "add [shape] with B, T, H, K and V");
            return;
        }
        for (const std::string& key : kRequiredShapeKeys) {
            if ((shape && shape->find(key)) || in_matrix("shape." + key)) continue;
            diags_.error(shape ? shape->span : file_start_,
                         "missing required key " + in_quotes("shape." + key),
                         "add " + key + " = <positive integer> to [shape]");
        }
    }

    bool check_case_count() {
        std::size_t cases = 1;
        for (const MatrixAxis& axis : document_.axes) {
            cases *= axis.values.size();
            if (cases > kMaxCases) {
                diags_.error(
                    table("matrix")->span,
                    "[matrix] expands to more than " + std::to_string(kMaxCases) + " cases",
                    "split the scenario into several files");
                return false;
            }
        }
        return true;
    }

    const Node& root_;
    const Catalog& catalog_;
    DiagnosticList& diags_;
    const Span file_start_;
    Document document_;
    std::vector<std::pair<std::string, const Node*>> matrix_entries_;
};

}  // namespace

const Node* Node::find(std::string_view name) const {
    if (kind != NodeKind::table) return nullptr;
    for (const Node& item : items)
        if (item.key == name) return &item;
    return nullptr;
}

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

std::string type_message(std::string_view path, std::string_view expected, const Node& got) {
    return in_quotes(path) + " must be " + std::string(expected) + ", got " + got.type_name;
}

std::optional<Node> parse_toml(const std::string& path, std::string_view text,
                               DiagnosticList& diags) {
    try {
        const toml::table table = toml::parse(text, std::string_view(path));
        Node root = to_node(table, path);
        root.span = {{path, 1, 1}, 1};
        return root;
    } catch (const toml::parse_error& e) {
        const auto& begin = e.source().begin;
        diags.error({{path, static_cast<int>(begin.line), static_cast<int>(begin.column)}, 1},
                    "invalid TOML: " + std::string(e.description()),
                    "scenario files are TOML 1.0 (https://toml.io/en/v1.0.0)");
        return std::nullopt;
    }
}

std::optional<Document> check_document(const std::string& path, const Node& root,
                                       const Catalog& catalog, DiagnosticList& diags) {
    return Checker(path, root, catalog, diags).run();
}

std::vector<Case> load_file(const std::string& path, const Catalog& catalog,
                            const LoadOptions& options) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw ScenarioError(path + ": error: is a directory, not a scenario file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ScenarioError(path + ": error: cannot open the scenario file");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();

    DiagnosticList diags(path, text);
    std::vector<Case> cases;
    if (auto root = parse_toml(path, text, diags)) {
        if (auto document = check_document(path, *root, catalog, diags))
            cases = expand_cases(*document, options, diags);
    }
    diags.throw_if_any();
    return cases;
}

}  // namespace lav::scenario
