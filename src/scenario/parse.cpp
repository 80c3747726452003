// src/scenario/parse.cpp — TOML to a located tree, key and structure checks, the [prologue]'s ops
// parsed in place, load_file; not values.
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "core/dtype.h"
#include "core/error.h"
#include "core/printable.h"
#include "scenario/document.h"
#include "scenario/expr.h"
#include "scenario/scenario.h"

namespace lav::scenario {
namespace {

// a guard against a typo such as a 1000-value axis; real scenario files stay far below it
constexpr std::size_t kMaxCases = 10000;

const std::vector<std::string> kTopLevelKeys = {
    "schema", "name",          "description", "family",     "variants", "passes",     "seed",
    "layout", "initial_state", "chunk_size",  "scale",      "long",     "cu_seqlens", "shape",
    "dtypes", "options",       "inputs",      "tolerances", "prologue", "matrix"};
const std::vector<std::string> kTableKeys = {"shape",      "dtypes",   "options", "inputs",
                                             "tolerances", "prologue", "matrix"};
const std::vector<std::string> kShapeKeys = {"B", "T", "H", "K", "V", "HV"};
// HV (value heads) is optional: it defaults to H
const std::vector<std::string> kRequiredShapeKeys = {"B", "T", "H", "K", "V"};
const std::vector<std::string> kDTypeKeys = {"inputs", "gates", "state", "output", "cotangents"};
const std::vector<std::string> kGeneratorKeys = {"dist", "scale", "normalizer"};
const std::vector<std::string> kPrologueKeys = {"autocast", "ops", "python", "tensors"};
const std::vector<std::string> kPrologueTensorKeys = {"shape", "dtype", "parameter", "dist",
                                                      "scale"};
const std::vector<std::string> kPrologueDists = {"randn", "rand", "zeros", "ones"};
// the settings a [matrix] key may vary, besides "options.<name>" for the family's options
const std::vector<std::string> kMatrixPaths = {
    "layout",       "seed",          "initial_state",     "chunk_size",
    "scale",        "cu_seqlens",    "dtypes.inputs",     "dtypes.gates",
    "dtypes.state", "dtypes.output", "dtypes.cotangents", "shape.B",
    "shape.T",      "shape.H",       "shape.K",           "shape.V",
    "shape.HV"};

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

/// The Node tree of a parsed TOML value, or of what of it lies within the limits: a table or
/// array nested deeper than kMaxNesting, or an array longer than kMaxArrayItems, is reported
/// (at `outer` when toml++ knows no place for it, as for a dotted key's tables) and left out.
Node to_node(const toml::node& value, const std::string& path, int depth, const Span& outer,
             DiagnosticList& diags) {
    Node node;
    node.span = span_of(value.source(), path);
    if (!node.span.at.known()) node.span = outer;
    if ((value.is_table() || value.is_array()) && depth > kMaxNesting) {
        diags.error(node.span,
                    "tables and arrays nested " + std::to_string(depth) +
                        " levels deep, more than " + std::to_string(kMaxNesting),
                    "a scenario needs a few levels (prologue.tensors.x.shape is 4); use fewer "
                    "dotted parts");
        return node;
    }
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
            if (value.as_array()->size() > kMaxArrayItems) {
                diags.error(node.span,
                            "an array of " + std::to_string(value.as_array()->size()) +
                                " values, more than the " + std::to_string(kMaxArrayItems) +
                                " an array may hold",
                            "split the scenario into several files");
                break;
            }
            for (const toml::node& item : *value.as_array())
                node.items.push_back(to_node(item, path, depth + 1, node.span, diags));
            break;
        case toml::node_type::table:
            node.kind = NodeKind::table;
            node.type_name = "table";
            for (const auto& [key, item] : *value.as_table()) {
                Node entry = to_node(item, path, depth + 1, node.span, diags);
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

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

/// Walks a file's text byte by byte, keeping the line and the column as toml++ counts them
/// (columns in code points).
class TextCursor {
  public:
    TextCursor(std::string_view text, const std::string& path) : text_(text), path_(path) {}

    bool done() const { return i_ >= text_.size(); }
    char peek(std::size_t ahead = 0) const {
        return i_ + ahead < text_.size() ? text_[i_ + ahead] : '\0';
    }
    bool starts_with(std::string_view prefix) const {
        return text_.substr(std::min(i_, text_.size())).substr(0, prefix.size()) == prefix;
    }
    SourceLocation location() const { return {path_, line_, column_}; }

    void advance(std::size_t n = 1) {
        for (; n > 0 && i_ < text_.size(); --n) {
            if (text_[i_] == '\n') {
                ++line_;
                column_ = 1;
            } else if (i_ + 1 >= text_.size() || !is_continuation_byte(text_[i_ + 1])) {
                ++column_;
            }
            ++i_;
        }
    }

    /// Moves to the first byte written at `at`.
    void seek(const SourceLocation& at) {
        while (!done() && (line_ < at.line || (line_ == at.line && column_ < at.column))) advance();
    }

  private:
    std::string_view text_;
    const std::string& path_;
    std::size_t i_ = 0;
    int line_ = 1;
    int column_ = 1;
};

void append_utf8(std::string& out, uint32_t code_point) {
    if (code_point < 0x80) {
        out += static_cast<char>(code_point);
    } else if (code_point < 0x800) {
        out += static_cast<char>(0xC0 | (code_point >> 6));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    } else if (code_point < 0x10000) {
        out += static_cast<char>(0xE0 | (code_point >> 12));
        out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (code_point >> 18));
        out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (code_point & 0x3F));
    }
}

/// The bytes an escape sequence stands for; the cursor is on its backslash and is moved past it.
/// toml++ has rejected the file before this runs if an escape is malformed.
std::string decode_escape(TextCursor& cursor) {
    const char kind = cursor.peek(1);
    std::size_t digits = 0;
    switch (kind) {
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        case 'x':
            digits = 2;
            break;
        default: {
            cursor.advance(2);
            switch (kind) {
                case 'b':
                    return "\b";
                case 't':
                    return "\t";
                case 'n':
                    return "\n";
                case 'f':
                    return "\f";
                case 'r':
                    return "\r";
                case 'e':
                    return "\x1B";
                default:
                    return std::string(1, kind);
            }
        }
    }
    std::string hex;
    for (std::size_t d = 0; d < digits; ++d) hex += cursor.peek(2 + d);
    cursor.advance(2 + digits);
    std::string out;
    append_utf8(out, static_cast<uint32_t>(std::stoul(hex, nullptr, 16)));
    return out;
}

/// A TOML string value's text with where each of its bytes was written, so that errors in it
/// point into the file: escapes and line-ending backslashes are undone as TOML does (an escape
/// maps to its backslash), a multi-line string's first line break is dropped and CRLF read as
/// LF. The last location is the closing quote.
SourceText locate_string(std::string_view text, const Node& value) {
    TextCursor cursor(text, value.span.at.file);
    cursor.seek(value.span.at);
    const char quote = cursor.peek();
    LAV_ASSERT(quote == '"' || quote == '\'', "a string value does not start with a quote");
    const bool literal = quote == '\'';
    const bool multi_line = cursor.starts_with(std::string(3, quote));
    cursor.advance(multi_line ? 3 : 1);
    if (multi_line && cursor.starts_with("\r\n")) {
        cursor.advance(2);
    } else if (multi_line && cursor.starts_with("\n")) {
        cursor.advance();
    }
    SourceText out;
    const auto emit = [&out](const std::string& bytes, const SourceLocation& at) {
        out.text += bytes;
        out.at.insert(out.at.end(), bytes.size(), at);
    };
    while (!cursor.done()) {
        const SourceLocation at = cursor.location();
        const char c = cursor.peek();
        if (c == quote) {
            std::size_t run = 1;
            while (multi_line && cursor.peek(run) == quote) ++run;
            if (!multi_line) break;
            // up to two quotes right before the closing three belong to the text
            const std::size_t kept = run >= 3 ? std::min<std::size_t>(run - 3, 2) : run;
            for (std::size_t q = 0; q < kept; ++q) {
                emit(std::string(1, quote), cursor.location());
                cursor.advance();
            }
            if (run >= 3) break;
        } else if (multi_line && cursor.starts_with("\r\n")) {
            emit("\n", at);
            cursor.advance(2);
        } else if (!literal && c == '\\') {
            const char next = cursor.peek(1);
            if (multi_line && (next == ' ' || next == '\t' || next == '\r' || next == '\n')) {
                // a line-ending backslash drops itself and all whitespace up to the next text
                cursor.advance();
                while (!cursor.done() &&
                       std::string_view(" \t\r\n").find(cursor.peek()) != std::string_view::npos)
                    cursor.advance();
            } else {
                emit(decode_escape(cursor), at);
            }
        } else {
            emit(std::string(1, c), at);
            cursor.advance();
        }
    }
    out.at.push_back(cursor.location());
    LAV_ASSERT(out.text == value.string_value, "string positions decoded to '", out.text,
               "' instead of '", value.string_value, "'");
    return out;
}

/// The lines of `text`, without line breaks.
std::vector<std::string> lines_of(std::string_view text) {
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

bool is_identifier(std::string_view name) {
    const auto letter = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    };
    return !name.empty() && letter(name[0]) && std::all_of(name.begin(), name.end(), [&](char c) {
        return letter(c) || (c >= '0' && c <= '9');
    });
}

std::vector<std::string> option_names(const FamilyInfo& family) {
    std::vector<std::string> names;
    for (const auto& [option, values] : family.options) names.push_back(option);
    return names;
}

/// Structural checks of one file; each method records what it finds in diags_.
class Checker {
  public:
    Checker(const std::string& path, std::string_view text, const Node& root,
            const Catalog& catalog, DiagnosticList& diags)
        : text_(text), root_(root), catalog_(catalog), diags_(diags), file_start_{{path, 1, 1}, 1} {
        document_.path = path;
        document_.root = &root;
    }

    std::optional<Document> run() {
        // a file of another schema version is not checked against this one
        if (!check_schema()) return std::nullopt;
        check_top_level();
        check_family();
        check_prologue();
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
                if (entry.key == "from") continue;  // a capture to replay, read per case
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
            const auto check = [&](const Node& entry) {
                if (contains(family->measured, entry.key)) return;
                diags_.error(entry.key_span,
                             "unknown measured tensor " + in_quotes(entry.key) + of_family,
                             did_you_mean_note(entry.key, family->measured));
            };
            for (const Node& entry : tolerances->items) {
                // [tolerances.bf16]: bounds for the cases of that input dtype only
                if (entry.kind == NodeKind::table && parse_dtype(entry.key)) {
                    for (const Node& field : entry.items) check(field);
                    continue;
                }
                check(entry);
            }
        }
    }

    // the ops are parsed here, once per file; autocast, dtypes and sizes are each case's
    void check_prologue() {
        const Node* prologue = table("prologue");
        if (!prologue) return;
        // a [prologue.tensors] header alone makes the [prologue] table, with no place of its own
        const Span at = prologue->span.at.known() ? prologue->span : file_start_;
        Prologue parsed;
        parsed.file = document_.path;
        parsed.source_lines = std::make_shared<const std::vector<std::string>>(lines_of(text_));
        parsed.autocast_span = at;
        for (const Node& entry : prologue->items)
            if (!contains(kPrologueKeys, entry.key)) unknown_key(entry, entry.key, kPrologueKeys);
        if (const Node* tensors = prologue->find("tensors")) {
            if (tensors->kind != NodeKind::table) {
                diags_.error(tensors->span, type_message("prologue.tensors", "a table", *tensors));
            } else {
                for (const Node& entry : tensors->items)
                    if (auto tensor = read_prologue_tensor(entry))
                        parsed.tensors.push_back(std::move(*tensor));
            }
        }
        const Node* ops = prologue->find("ops");
        if (const Node* python = prologue->find("python")) {
            if (ops)
                diags_.error(ops->key_span, "a prologue is 'ops' or 'python', not both",
                             "keep the one to run");
            else
                parsed.python = read_python_function(*python);
        } else if (!ops) {
            diags_.error(at, "missing required key 'prologue.ops'",
                         "add ops = \"\"\" ... \"\"\" with one assignment per line, or "
                         "python = \"file.py:function\"");
        } else if (ops->kind != NodeKind::string) {
            diags_.error(ops->span, type_message("prologue.ops", "a string", *ops));
        } else {
            const SourceText source = locate_string(text_, *ops);
            ProgramNames names;
            for (const PrologueTensor& t : parsed.tensors) names.tensors.push_back(t.name);
            if (document_.family) {
                names.kernel_inputs = document_.family->inputs;
                // a varlen case hands its offsets to the ops too, as the int64 tensor PyTorch
                // code would build, so that a prologue can replay what a model does to them
                names.kernel_inputs.push_back("cu_seqlens");
            }
            const std::size_t errors_before = diags_.size();
            parsed.statements = parse_program(source, document_.family ? &names : nullptr, diags_);
            if (parsed.statements.empty() && diags_.size() == errors_before)
                diags_.error(ops->span, "'prologue.ops' has no assignments",
                             "write one assignment per line, as in k = to(k, \"fp16\")");
        }
        document_.prologue = std::move(parsed);
    }

    /// `python = "file.py:function"`: the file, relative to the scenario's folder, must define
    /// the function at its top level. Whether this build can run it is the run's question.
    std::optional<PythonFunction> read_python_function(const Node& value) {
        if (value.kind != NodeKind::string) {
            diags_.error(value.span, type_message("prologue.python", "a string", value));
            return std::nullopt;
        }
        const std::string& text = value.string_value;
        const std::size_t colon = text.rfind(':');
        if (colon == std::string::npos || colon == 0 || !is_identifier(text.substr(colon + 1))) {
            diags_.error(
                value.span,
                "prologue.python must be \"path/file.py:function\", got " + in_quotes(text),
                "e.g. python = \"rwkv7.py:prologue\", the path relative to this file");
            return std::nullopt;
        }
        namespace fs = std::filesystem;
        PythonFunction fn;
        fn.span = value.span;
        fn.function = text.substr(colon + 1);
        const fs::path given = text.substr(0, colon);
        fn.file = (given.is_absolute() ? given : fs::path(document_.path).parent_path() / given)
                      .lexically_normal()
                      .string();
        std::error_code ec;
        std::ifstream in(fn.file);
        if (!fs::is_regular_file(fn.file, ec) || !in) {
            diags_.error(value.span, "no Python file " + in_quotes(fn.file),
                         "the path is relative to the folder of " + document_.path);
            return std::nullopt;
        }
        // a top-level `def function(`: the file is the user's, and lav reads it without Python
        std::vector<std::string> defined;
        for (std::string line; std::getline(in, line);) {
            std::string_view rest = line;
            if (rest.rfind("async ", 0) == 0) rest.remove_prefix(6);
            if (rest.rfind("def ", 0) != 0) continue;
            rest.remove_prefix(4);
            defined.emplace_back(rest.substr(0, rest.find_first_of("( :")));
            if (defined.back() == fn.function) return fn;
        }
        diags_.error(value.span,
                     in_quotes(fn.file) + " defines no function " + in_quotes(fn.function) +
                         " at its top level",
                     defined.empty() ? "it defines no function" : "it defines: " + join(defined));
        return std::nullopt;
    }

    /// A [prologue.tensors] entry with its shape as written; nullopt when ops cannot name it.
    /// Its dtype is read for each case.
    std::optional<PrologueTensor> read_prologue_tensor(const Node& entry) {
        const std::string path = "prologue.tensors." + entry.key;
        if (!is_identifier(entry.key)) {
            diags_.error(entry.key_span,
                         "prologue tensor " + in_quotes(entry.key) + " cannot be named in ops",
                         "a name is letters, digits and '_', and does not start with a digit");
            return std::nullopt;
        }
        const FamilyInfo* family = document_.family;
        if (family && contains(family->inputs, entry.key)) {
            diags_.error(entry.key_span,
                         "prologue tensor " + in_quotes(entry.key) + " is an input of family " +
                             in_quotes(family->name),
                         "the family generates " + in_quotes(entry.key) +
                             "; declare the tensor under another name and assign " + entry.key +
                             " in ops");
            return std::nullopt;
        }
        PrologueTensor tensor;
        tensor.name = entry.key;
        tensor.span = entry.key_span;
        if (entry.kind != NodeKind::table) {
            diags_.error(entry.span, type_message(path, "a table", entry),
                         "e.g. " + entry.key +
                             " = { shape = [\"B\", \"T\", \"H\", \"K\"], dtype = \"fp16\" }");
            return tensor;
        }
        for (const Node& field : entry.items)
            if (!contains(kPrologueTensorKeys, field.key))
                unknown_key(field, field.key, kPrologueTensorKeys);
        const Node* shape = entry.find("shape");
        if (!shape) {
            diags_.error(entry.span, "missing required key " + in_quotes(path + ".shape"),
                         "add shape = [...] with the case's sizes (B, T, H, K, V, HV) or integers");
        } else if (shape->kind != NodeKind::array) {
            diags_.error(shape->span, type_message(path + ".shape", "an array", *shape));
        } else {
            for (std::size_t i = 0; i < shape->items.size(); ++i) {
                const std::string item_path = path + ".shape[" + std::to_string(i) + "]";
                if (auto dim = read_dim(shape->items[i], item_path))
                    tensor.dims.push_back(std::move(*dim));
            }
        }
        if (const Node* parameter = entry.find("parameter")) {
            if (parameter->kind == NodeKind::boolean) {
                tensor.parameter = parameter->bool_value;
            } else {
                diags_.error(parameter->span,
                             type_message(path + ".parameter", "a boolean", *parameter));
            }
        }
        if (const Node* dist = entry.find("dist")) {
            if (dist->kind != NodeKind::string) {
                diags_.error(dist->span, type_message(path + ".dist", "a string", *dist));
            } else if (!contains(kPrologueDists, dist->string_value)) {
                diags_.error(dist->span, "unknown dist " + in_quotes(dist->string_value),
                             did_you_mean_note(dist->string_value, kPrologueDists));
            } else {
                tensor.dist = dist->string_value;
            }
        }
        if (const Node* scale = entry.find("scale")) {
            const bool number =
                scale->kind == NodeKind::integer || scale->kind == NodeKind::floating;
            const double v = scale->kind == NodeKind::integer
                                 ? static_cast<double>(scale->integer_value)
                                 : scale->float_value;
            if (!number) {
                diags_.error(scale->span, type_message(path + ".scale", "a number", *scale));
            } else if (!std::isfinite(v)) {
                diags_.error(scale->span, path + ".scale must be finite");
            } else {
                tensor.scale = v;
            }
        }
        return tensor;
    }

    /// One size of a prologue tensor: a positive integer, or "K", "K/2", "H*2".
    std::optional<ShapeDim> read_dim(const Node& item, const std::string& path) {
        ShapeDim dim;
        dim.span = item.span;
        if (item.kind == NodeKind::integer) {
            if (item.integer_value <= 0) {
                diags_.error(item.span,
                             path + " must be positive, got " + std::to_string(item.integer_value));
                return std::nullopt;
            }
            dim.factor = item.integer_value;
            dim.text = std::to_string(item.integer_value);
            return dim;
        }
        if (item.kind != NodeKind::string) {
            diags_.error(item.span, type_message(path, "a size name or an integer", item));
            return std::nullopt;
        }
        dim.text = item.string_value;
        const std::size_t op = dim.text.find_first_of("*/");
        dim.symbol = dim.text.substr(0, op);
        bool ok = contains(kShapeKeys, dim.symbol);
        if (ok && op != std::string::npos) {
            dim.op = dim.text[op];
            const std::string number = dim.text.substr(op + 1);
            ok = !number.empty() && number.size() < 10 &&
                 std::all_of(number.begin(), number.end(),
                             [](char c) { return c >= '0' && c <= '9'; });
            if (ok) dim.factor = std::stoll(number);
            ok = ok && dim.factor > 0;
        }
        if (!ok) {
            diags_.error(item.span, "unknown size " + in_quotes(dim.text),
                         "a size is a positive integer, or one of " + join(kShapeKeys) +
                             ", alone or as K/2 or H*2");
            return std::nullopt;
        }
        return dim;
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
        if (document_.family) {
            for (const auto& option : option_names(*document_.family))
                candidates.push_back("options." + option);
            for (const std::string& component : document_.family->state_components)
                candidates.push_back("dtypes.state." + component);
        }
        if (document_.prologue) {
            candidates.push_back("prologue.autocast");
            for (const PrologueTensor& t : document_.prologue->tensors)
                candidates.push_back("prologue.tensors." + t.name + ".dtype");
        }
        return candidates;
    }

    std::string matrix_note() const {
        std::string note = "[matrix] varies: " + join(kMatrixPaths) + ", options.<name>";
        if (document_.family && !document_.family->state_components.empty())
            note += ", dtypes.state.<component>";
        if (document_.prologue) note += ", prologue.autocast, prologue.tensors.<name>.dtype";
        return note;
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
        } else if (path.rfind("dtypes.state.", 0) == 0 && document_.family &&
                   document_.family->state_components.empty()) {
            diags_.error(entry.key_span,
                         "family " + in_quotes(document_.family->name) +
                             " has one state; it has no component " +
                             in_quotes(path.substr(std::string("dtypes.state.").size())),
                         "vary \"dtypes.state\" itself");
        } else if (head != "options" && head != "shape" && head != "dtypes" &&
                   contains(kTopLevelKeys, head) && path.rfind("prologue.tensors.", 0) != 0) {
            diags_.error(entry.key_span, in_quotes(path) + " cannot be varied in [matrix]",
                         matrix_note());
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
            if (const Node* base = root_.find_path(path)) {
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
        if (root_.find_path("inputs.from")) return;  // a capture's tensors give the sizes
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

    std::string_view text_;
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

const Node* Node::find_path(std::string_view path) const {
    const Node* node = this;
    while (node) {
        const auto dot = path.find('.');
        node = node->find(path.substr(0, dot));
        if (dot == std::string_view::npos) break;
        path.remove_prefix(dot + 1);
    }
    return node;
}

std::string in_quotes(std::string_view text) {
    // a long value is cut short: the quoted source line shows where it is
    constexpr std::size_t kShown = 200;
    if (text.size() <= kShown) return "'" + printable(text) + "'";
    std::size_t cut = kShown;
    while (cut > 0 && is_continuation_byte(text[cut])) --cut;
    return "'" + printable(text.substr(0, cut)) + "…'";
}

std::string type_message(std::string_view path, std::string_view expected, const Node& got) {
    return in_quotes(path) + " must be " + std::string(expected) + ", got " + got.type_name;
}

std::optional<Node> parse_toml(const std::string& path, std::string_view text,
                               DiagnosticList& diags) {
    int line = 1;
    for (std::size_t start = 0; start < text.size(); ++line) {
        const std::size_t end = std::min(text.find('\n', start), text.size());
        if (end - start > kMaxLineBytes) {
            diags.error({{path, line, 1}, 1},
                        "line " + std::to_string(line) + " has " + std::to_string(end - start) +
                            " bytes, more than the " + std::to_string(kMaxLineBytes) +
                            " a line may have",
                        "break it up: an array may span several lines");
            return std::nullopt;
        }
        start = end + 1;
    }
    try {
        const toml::table table = toml::parse(text, std::string_view(path));
        const Span file_start{{path, 1, 1}, 1};
        const std::size_t errors_before = diags.size();
        Node root = to_node(table, path, 0, file_start, diags);
        root.span = file_start;
        if (diags.size() > errors_before) return std::nullopt;
        return root;
    } catch (const toml::parse_error& e) {
        const auto& begin = e.source().begin;
        diags.error({{path, static_cast<int>(begin.line), static_cast<int>(begin.column)}, 1},
                    "invalid TOML: " + printable(e.description()),
                    "scenario files are TOML 1.0 (https://toml.io/en/v1.0.0)");
        return std::nullopt;
    }
}

std::optional<Document> check_document(const std::string& path, std::string_view text,
                                       const Node& root, const Catalog& catalog,
                                       DiagnosticList& diags) {
    return Checker(path, text, root, catalog, diags).run();
}

std::vector<Case> load_file(const std::string& path, const Catalog& catalog,
                            const LoadOptions& options) {
    const std::string text = read_scenario_text(path);

    DiagnosticList diags(path, text);
    std::vector<Case> cases;
    if (auto root = parse_toml(path, text, diags)) {
        if (auto document = check_document(path, text, *root, catalog, diags))
            cases = expand_cases(*document, options, diags);
    }
    diags.throw_if_any();
    return cases;
}

}  // namespace lav::scenario
