// src/scenario/expand.cpp — [matrix] cross product, per-case value checks (the [prologue]'s
// autocast, dtypes and sizes included), memory estimate.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "core/build_info.h"
#include "scenario/capture.h"
#include "scenario/document.h"
#include "scenario/expr.h"
#include "scenario/scenario.h"

namespace lav::scenario {
namespace {

const std::vector<std::string> kLayouts = {"head_first", "head_last"};
const std::vector<std::string> kPasses = {"fwd", "bwd"};
const std::vector<std::string> kDists = {"randn", "rand", "logsigmoid",
                                         "zeros", "ones", "retention"};
// what this build's kernels take, for every role (inputs, gates, state, output)
const std::vector<DType> kSupportedDTypes = {DType::fp32, DType::fp16, DType::bf16};
const std::vector<std::string> kBooleanValues = {"false", "true"};
const AutocastMode kAutocastModes[] = {AutocastMode::off, AutocastMode::bf16, AutocastMode::fp16,
                                       AutocastMode::disabled};

// the shortest text that reads back as the same double: 0.125, 0.005, 1e-05
std::string format_number(double value) {
    char buffer[32];
    for (int precision = 1; precision <= 17; ++precision) {
        std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
        if (std::strtod(buffer, nullptr) == value) break;
    }
    return buffer;
}

std::string format_bytes(uint64_t bytes) {
    constexpr double kMiB = 1024.0 * 1024.0;
    constexpr double kGiB = kMiB * 1024.0;
    char buffer[32];
    if (bytes >= kGiB) {
        std::snprintf(buffer, sizeof buffer, "%.1f GiB", static_cast<double>(bytes) / kGiB);
    } else {
        std::snprintf(buffer, sizeof buffer, "%.1f MiB", static_cast<double>(bytes) / kMiB);
    }
    return buffer;
}

// how a [matrix] value appears in Case::matrix and the case id
std::string value_text(const Node& node) {
    switch (node.kind) {
        case NodeKind::string:
            return node.string_value;
        case NodeKind::integer:
            return std::to_string(node.integer_value);
        case NodeKind::floating:
            return format_number(node.float_value);
        case NodeKind::boolean:
            return node.bool_value ? "true" : "false";
        case NodeKind::array: {
            std::vector<std::string> items;
            for (const Node& item : node.items) items.push_back(value_text(item));
            return "[" + join(items, ",") + "]";
        }
        case NodeKind::table: {
            std::vector<std::string> items;
            for (const Node& item : node.items) items.push_back(item.key + "=" + value_text(item));
            return "{" + join(items, ",") + "}";
        }
        case NodeKind::other:
            break;
    }
    return node.type_name;
}

bool is_number(const Node& node) {
    return node.kind == NodeKind::integer || node.kind == NodeKind::floating;
}

double number_of(const Node& node) {
    return node.kind == NodeKind::integer ? static_cast<double>(node.integer_value)
                                          : node.float_value;
}

// an option whose allowed values are exactly false and true may be written as a TOML boolean
bool is_boolean_option(const std::vector<std::string>& allowed) {
    return allowed.size() == kBooleanValues.size() &&
           std::is_permutation(allowed.begin(), allowed.end(), kBooleanValues.begin());
}

bool is_valid_name(std::string_view name) {
    return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '.' || c == '-';
    });
}

/// Builds and checks one case: the file's settings with the [matrix] values of this point
/// laid over them. A missing setting takes its default; a missing required one was reported
/// by check_document and is skipped here. The family's own rules run last, on a case that
/// passed every generic check.
class CaseBuilder {
  public:
    CaseBuilder(const Document& document,
                std::vector<std::pair<std::string, const Node*>> overrides, DiagnosticList& diags)
        : document_(document),
          root_(*document.root),
          overrides_(std::move(overrides)),
          diags_(diags),
          family_(document.family) {}

    /// `well_formed`: check_document found nothing wrong with the file's structure.
    Case build(const LoadOptions& options, bool well_formed) {
        Case c;
        c.file = document_.path;
        c.location = {document_.path, 1, 1};
        read_identity(c);
        read_what_runs(c);
        bool sized = read_shape(c);
        read_varlen(c);
        read_settings(c);
        read_dtypes(c);
        sized = read_capture(c, sized);
        read_generators(c);
        read_tolerances(c);
        read_prologue(c, sized);
        // a long case is only sized up when it is going to run
        const bool runs = !c.long_case || options.include_long;
        if (sized && runs && options.max_memory_bytes > 0)
            check_memory(c, options.max_memory_bytes);
        // a family's rules may rely on what the generic checks ensure (H > 0 for H | HV), and a
        // file with misplaced keys may not say what its author meant
        if (well_formed && errors_ == 0) check_family_rules(c);
        return c;
    }

  private:
    const Node* get(std::string_view path) const {
        for (const auto& [key, value] : overrides_)
            if (key == path) return value;
        return root_.find_path(path);
    }

    void error(const Span& at, std::string message, std::string note = {}) {
        ++errors_;
        diags_.error(at, std::move(message), std::move(note));
    }

    void error(const Node& at, std::string message, std::string note = {}) {
        error(at.span, std::move(message), std::move(note));
    }

    void wrong_type(std::string_view path, std::string_view expected, const Node& node) {
        const bool from_matrix =
            std::any_of(overrides_.begin(), overrides_.end(),
                        [&](const auto& override) { return override.first == path; });
        error(node, type_message(path, expected, node),
              from_matrix ? "each alternative in [matrix] is one whole value of " + in_quotes(path)
                          : "");
    }

    /// The setting if it is present and of the kind asked for; a wrong kind is reported.
    const Node* typed(std::string_view path, NodeKind kind, std::string_view expected) {
        const Node* node = get(path);
        if (!node) return nullptr;
        const bool ok = kind == NodeKind::floating ? is_number(*node) : node->kind == kind;
        if (!ok) {
            wrong_type(path, expected, *node);
            return nullptr;
        }
        return node;
    }

    const Node* string_setting(std::string_view path) {
        return typed(path, NodeKind::string, "a string");
    }
    const Node* integer_setting(std::string_view path) {
        return typed(path, NodeKind::integer, "an integer");
    }
    const Node* number_setting(std::string_view path) {
        return typed(path, NodeKind::floating, "a number");
    }
    const Node* bool_setting(std::string_view path) {
        return typed(path, NodeKind::boolean, "a boolean");
    }

    void read_identity(Case& c) {
        if (const Node* name = string_setting("name")) {
            if (!is_valid_name(name->string_value)) {
                error(*name, "invalid name " + in_quotes(name->string_value),
                      "a name uses only letters, digits, '_', '.' and '-'");
            } else if (name->string_value.size() > kMaxNameLength) {
                error(*name,
                      "a name of " + std::to_string(name->string_value.size()) +
                          " characters, more than " + std::to_string(kMaxNameLength),
                      "shorten it; the description may say more");
            } else {
                c.name = name->string_value;
            }
        }
        if (const Node* description = string_setting("description"))
            c.description = description->string_value;
        std::vector<std::string> parts;
        for (const auto& [path, value] : overrides_) {
            c.matrix.emplace_back(path, value_text(*value));
            parts.push_back(path + "=" + c.matrix.back().second);
        }
        c.id = parts.empty() ? c.name : c.name + "[" + join(parts, ",") + "]";
        // --filter matches ids with std::regex, whose recursion grows with the text's length
        if (c.id.size() > kMaxCaseIdLength) {
            const Node* matrix = root_.find("matrix");
            error(matrix ? matrix->span : Span{{document_.path, 1, 1}, 1},
                  "case id " + in_quotes(c.id) + " has " + std::to_string(c.id.size()) +
                      " characters, more than " + std::to_string(kMaxCaseIdLength),
                  "shorten the [matrix] values, or move a long one out of [matrix]");
        }
    }

    /// The strings of an array setting that are in `allowed` (any string when it is null: the
    /// family is unknown); unknown and repeated ones are reported. nullopt when the setting is
    /// absent or unusable.
    std::optional<std::vector<std::string>> read_names(std::string_view path,
                                                       const std::vector<std::string>* allowed,
                                                       std::string_view what,
                                                       const std::string& unknown_suffix) {
        const Node* list = typed(path, NodeKind::array, "an array of strings");
        if (!list) return std::nullopt;
        if (list->items.empty()) {
            error(*list, in_quotes(path) + " is empty", "leave it out for the default");
            return std::nullopt;
        }
        std::vector<std::string> names;
        for (std::size_t i = 0; i < list->items.size(); ++i) {
            const Node& item = list->items[i];
            const std::string& name = item.string_value;
            if (item.kind != NodeKind::string) {
                error(item, type_message(std::string(path) + "[" + std::to_string(i) + "]",
                                         "a string", item));
            } else if (allowed &&
                       std::find(allowed->begin(), allowed->end(), name) == allowed->end()) {
                error(item, "unknown " + std::string(what) + " " + in_quotes(name) + unknown_suffix,
                      did_you_mean_note(name, *allowed));
            } else if (std::find(names.begin(), names.end(), name) != names.end()) {
                error(item, std::string(what) + " " + in_quotes(name) + " is listed twice");
            } else {
                names.push_back(name);
            }
        }
        return names;
    }

    void read_what_runs(Case& c) {
        if (const Node* family = root_.find("family"); family && family->kind == NodeKind::string)
            c.family = family->string_value;
        if (const auto passes = read_names("passes", &kPasses, "pass", "")) {
            c.forward = std::count(passes->begin(), passes->end(), "fwd") > 0;
            c.backward = std::count(passes->begin(), passes->end(), "bwd") > 0;
        }
        const std::string of_family = family_ ? " for family " + in_quotes(family_->name) : "";
        const auto variants =
            read_names("variants", family_ ? &family_->variants : nullptr, "variant", of_family);
        // options are the family's to define; an unknown family was reported
        if (!family_) return;
        c.variants = variants.value_or(family_->variants);
        for (const auto& [option, allowed] : family_->options) {
            const Node* value = get("options." + option);
            if (!value) {
                c.options[option] = allowed.empty() ? "" : allowed.front();
            } else if (auto text = option_text(option, allowed, *value)) {
                c.options[option] = *text;
            }
        }
    }

    /// An option's value as Case::options spells it; nullopt (reported) when it is not one of
    /// the allowed values. A boolean option takes true and false with or without quotes.
    std::optional<std::string> option_text(const std::string& option,
                                           const std::vector<std::string>& allowed,
                                           const Node& value) {
        const bool boolean = is_boolean_option(allowed);
        if (boolean && value.kind == NodeKind::boolean) return value.bool_value ? "true" : "false";
        if (value.kind != NodeKind::string) {
            wrong_type("options." + option, boolean ? "a boolean" : "a string", value);
            return std::nullopt;
        }
        const std::string& text = value.string_value;
        if (std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
            error(value, "unknown value " + in_quotes(text) + " for option " + in_quotes(option),
                  did_you_mean_note(text, allowed));
            return std::nullopt;
        }
        return text;
    }

    /// B, T, H, K, V and HV (H when left out); true when all six are valid.
    bool read_shape(Case& c) {
        const std::pair<const char*, int64_t*> sizes[] = {{"B", &c.B}, {"T", &c.T}, {"H", &c.H},
                                                          {"K", &c.K}, {"V", &c.V}, {"HV", &c.HV}};
        bool all = true;
        for (const auto& [letter, field] : sizes) {
            const std::string path = std::string("shape.") + letter;
            const Node* size = integer_setting(path);
            if (!size && field == &c.HV && !get(path)) {
                // no grouped value attention: one value head per query/key head
                c.HV = c.H;
            } else if (!size) {
                all = false;
            } else if (size->integer_value <= 0) {
                error(*size,
                      path + " must be positive, got " + std::to_string(size->integer_value));
                all = false;
            } else {
                *field = size->integer_value;
            }
        }
        return all;
    }

    void read_varlen(Case& c) {
        const Node* list = typed("cu_seqlens", NodeKind::array, "an array of integers");
        if (!list) return;
        const auto& items = list->items;
        bool ok = true;
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (items[i].kind == NodeKind::integer) continue;
            error(items[i],
                  type_message("cu_seqlens[" + std::to_string(i) + "]", "an integer", items[i]));
            ok = false;
        }
        if (!ok) return;
        if (items.size() < 2) {
            error(*list, "cu_seqlens needs at least 2 offsets, got " + std::to_string(items.size()),
                  "give the start of every sequence, then T, e.g. [0, 100, 1024]");
            return;
        }
        if (items.front().integer_value != 0) {
            error(items.front(),
                  "cu_seqlens must start at 0, got " + std::to_string(items.front().integer_value),
                  "cu_seqlens[0] is where the first sequence starts");
            ok = false;
        }
        for (std::size_t i = 1; i < items.size(); ++i) {
            const int64_t previous = items[i - 1].integer_value;
            const int64_t offset = items[i].integer_value;
            if (offset >= previous) continue;
            error(items[i],
                  "cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(offset) +
                      " is less than cu_seqlens[" + std::to_string(i - 1) +
                      "] = " + std::to_string(previous),
                  "offsets must not decrease (two equal offsets make an empty sequence)");
            ok = false;
            break;
        }
        // c.T and c.B stay 0 when their own value was bad, which was reported already
        if (c.T > 0 && items.back().integer_value != c.T) {
            error(items.back(),
                  "cu_seqlens must end at T = " + std::to_string(c.T) + ", got " +
                      std::to_string(items.back().integer_value),
                  "the last offset is the total packed length, shape.T");
            ok = false;
        }
        if (c.B > 1) {
            error(*list, "cu_seqlens requires B = 1, got B = " + std::to_string(c.B),
                  "varlen packs every sequence into one batch row: set shape.B = 1");
            ok = false;
        }
        if (!ok) return;
        for (const Node& item : items) c.cu_seqlens.push_back(item.integer_value);
    }

    void read_settings(Case& c) {
        if (const Node* layout = string_setting("layout")) {
            if (auto parsed = parse_layout(layout->string_value)) {
                c.layout = *parsed;
            } else {
                error(*layout, "unknown layout " + in_quotes(layout->string_value),
                      did_you_mean_note(layout->string_value, kLayouts));
            }
        }
        if (const Node* chunk = integer_setting("chunk_size")) {
            const int64_t v = chunk->integer_value;
            if (v == 16 || v == 32 || v == 64) {
                c.chunk_size = v;
            } else {
                error(*chunk,
                      "chunk_size must be a power of two in [16, 64], got " + std::to_string(v),
                      "use 16, 32 or 64");
            }
        }
        if (const Node* scale = number_setting("scale")) {
            const double v = number_of(*scale);
            if (!std::isfinite(v)) {
                error(*scale, "scale must be finite, got " + format_number(v));
            } else if (v <= 0) {
                error(*scale, "scale must be positive, got " + format_number(v),
                      "leave scale out for the default K^-0.5");
            } else {
                c.scale = v;
            }
        }
        if (const Node* seed = integer_setting("seed")) {
            if (seed->integer_value < 0) {
                error(*seed,
                      "seed must be non-negative, got " + std::to_string(seed->integer_value));
            } else {
                c.seed = static_cast<uint64_t>(seed->integer_value);
            }
        }
        if (const Node* initial = bool_setting("initial_state"))
            c.initial_state = initial->bool_value;
        if (const Node* long_case = bool_setting("long")) c.long_case = long_case->bool_value;
    }

    /// `value`'s dtype if this build's kernels take it for `role`; otherwise reported.
    std::optional<DType> checked_dtype(const Node& value, const std::string& role) {
        const std::string& spelling = value.string_value;
        const auto dtype = parse_dtype(spelling);
        if (!dtype) {
            error(value, "unknown dtype " + in_quotes(spelling),
                  "expected one of: " + dtype_names_list());
            return std::nullopt;
        }
        if (std::find(kSupportedDTypes.begin(), kSupportedDTypes.end(), *dtype) ==
            kSupportedDTypes.end()) {
            std::vector<std::string> names;
            for (DType d : kSupportedDTypes) names.emplace_back(dtype_name(d));
            error(value, "dtype " + in_quotes(spelling) + " is not supported for " + role,
                  "this build takes " + join(names) + " for " + role);
            return std::nullopt;
        }
        return dtype;
    }

    std::optional<DType> read_dtype(const std::string& role) {
        const Node* value = string_setting("dtypes." + role);
        if (!value) return std::nullopt;
        return checked_dtype(*value, role);
    }

    /// The components named in a table `state = { hk = "fp32", ... }` (a [matrix] alternative
    /// too): each must be one of the family's state components and a string.
    void check_state_table(const Node& table) {
        const std::vector<std::string>& known = family_->state_components;
        if (known.empty()) {
            error(table,
                  "family " + in_quotes(family_->name) +
                      " has one state; dtypes.state takes one dtype, not a table",
                  "write state = \"fp32\" (or fp16, bf16)");
            return;
        }
        for (const Node& entry : table.items) {
            if (std::find(known.begin(), known.end(), entry.key) == known.end())
                error(entry.key_span,
                      "unknown state component " + in_quotes(entry.key) + " of family " +
                          in_quotes(family_->name),
                      family_->name + "'s state components: " + join(known));
            else if (entry.kind != NodeKind::string)
                wrong_type("dtypes.state." + entry.key, "a string", entry);
        }
    }

    /// [dtypes] state: one dtype for every state, or a table with a dtype per state component
    /// (the others take the default), each also varied as [matrix] "dtypes.state.<component>".
    void read_state_dtypes(Case& c) {
        const Node* state = get("dtypes.state");
        const Node* table = nullptr;
        if (state && state->kind == NodeKind::string) {
            if (auto dtype = checked_dtype(*state, "state")) c.state_dtype = *dtype;
        } else if (state && state->kind == NodeKind::table && family_) {
            check_state_table(*state);
            table = state;
        } else if (state && state->kind != NodeKind::table) {
            wrong_type("dtypes.state", "a string or a table of state components", *state);
        }
        if (!family_) return;
        std::map<std::string, DType> dtypes;
        for (const std::string& component : family_->state_components) {
            const std::string path = "dtypes.state." + component;
            const bool varied = std::any_of(overrides_.begin(), overrides_.end(),
                                            [&](const auto& o) { return o.first == path; });
            const Node* value = varied ? get(path) : table ? table->find(component) : nullptr;
            if (!value) continue;
            if (value->kind != NodeKind::string) {
                if (varied) wrong_type(path, "a string", *value);
                continue;
            }
            if (auto dtype = checked_dtype(*value, "state " + component))
                dtypes[component] = *dtype;
        }
        if (dtypes.empty()) return;
        for (const std::string& component : family_->state_components)
            dtypes.emplace(component, c.state_dtype);
        // one dtype for all is the plain case; otherwise default bounds follow the least precise
        c.state_dtype = dtypes.begin()->second;
        bool mixed = false;
        for (const auto& [component, dtype] : dtypes) {
            mixed = mixed || dtype != c.state_dtype;
            if (dtype_epsilon(dtype) > dtype_epsilon(c.state_dtype)) c.state_dtype = dtype;
        }
        if (mixed) c.state_dtypes = std::move(dtypes);
    }

    void read_dtypes(Case& c) {
        c.input_dtype = read_dtype("inputs").value_or(DType::bf16);
        c.gate_dtype = read_dtype("gates").value_or(DType::fp32);
        read_state_dtypes(c);
        c.output_dtype = read_dtype("output").value_or(c.input_dtype);
        c.cotangent_dtype = read_dtype("cotangents");
    }

    std::optional<Generator> read_generator(const Node& entry) {
        const std::string path = "inputs." + entry.key;
        Generator generator;
        const Node* dist = nullptr;
        bool ok = true;
        if (entry.kind == NodeKind::string) {
            dist = &entry;
        } else if (entry.kind == NodeKind::table) {
            if ((dist = entry.find("dist")) && dist->kind != NodeKind::string) {
                error(*dist, type_message(path + ".dist", "a string", *dist));
                dist = nullptr;
                ok = false;
            }
            for (const char* field : {"scale", "normalizer"}) {
                const Node* value = entry.find(field);
                if (!value) continue;
                const std::string field_path = path + "." + field;
                if (!is_number(*value)) {
                    error(*value, type_message(field_path, "a number", *value));
                    ok = false;
                    continue;
                }
                const double v = number_of(*value);
                // the normalizer divides, so it must be positive; a scale only needs to be finite
                const bool is_normalizer = std::string_view(field) == "normalizer";
                if (!std::isfinite(v) || (is_normalizer && v <= 0)) {
                    error(*value, field_path +
                                      (is_normalizer ? " must be positive and finite, got "
                                                     : " must be finite, got ") +
                                      format_number(v));
                    ok = false;
                    continue;
                }
                (is_normalizer ? generator.normalizer : generator.scale) = v;
            }
        } else {
            error(entry, type_message(path, "a string or a table", entry),
                  "e.g. " + entry.key + " = \"randn\" or " + entry.key +
                      " = { dist = \"randn\", scale = 0.5 }");
            return std::nullopt;
        }
        if (dist) {
            if (std::find(kDists.begin(), kDists.end(), dist->string_value) == kDists.end()) {
                error(*dist, "unknown dist " + in_quotes(dist->string_value),
                      did_you_mean_note(dist->string_value, kDists));
                ok = false;
            } else {
                generator.dist = dist->string_value;
            }
        }
        if (!ok) return std::nullopt;
        return generator;
    }

    /// `[inputs] from = "capture.pt"` (relative to the file): the capture's q and v give the
    /// sizes, its head_first argument the layout, q's and g's dtypes the inputs' and gates',
    /// its cu_seqlens the offsets, the absence of h0 initial_state = false, wherever the file
    /// leaves them out; sizes, layout, dtypes and offsets the file states must agree. Returns
    /// whether the case is sized.
    bool read_capture(Case& c, bool sized) {
        const Node* from = root_.find_path("inputs.from");
        if (!from) return sized;
        if (from->kind != NodeKind::string) {
            error(*from, type_message("inputs.from", "a string", *from));
            return sized;
        }
        const std::filesystem::path given = from->string_value;
        const std::string path =
            (given.is_absolute() ? given
                                 : std::filesystem::path(document_.path).parent_path() / given)
                .lexically_normal()
                .string();
        try {
            c.capture = scenario::read_capture(path);
        } catch (const CaptureError& e) {
            error(*from, e.what(), "make one with python/lav/capture.py (README.md)");
            return sized;
        }
        const auto& tensors = c.capture->tensors;
        const auto q = tensors.find("q");
        const auto v = tensors.find("v");
        if (q == tensors.end() || v == tensors.end() || q->second.dim() != 4 ||
            v->second.dim() != 4) {
            error(*from, path + " holds no q and v of 4 dims, which give the case's sizes",
                  "capture a call of a kernel that takes q and v as [B, T, H, D]");
            return sized;
        }
        if (c.capture->head_first) {
            const Layout captured = *c.capture->head_first ? Layout::head_first : Layout::head_last;
            if (const Node* stated = string_setting("layout"); stated && captured != c.layout)
                error(*stated,
                      "layout " + in_quotes(stated->string_value) + ", but " + path +
                          " was captured " + std::string(layout_name(captured)),
                      "leave layout out to take the capture's");
            else
                c.layout = captured;
        }
        const bool first = c.layout == Layout::head_first;
        const at::Tensor& qt = q->second;
        const at::Tensor& vt = v->second;
        const std::pair<const char*, int64_t> sizes[] = {{"B", qt.size(0)},
                                                         {"T", qt.size(first ? 2 : 1)},
                                                         {"H", qt.size(first ? 1 : 2)},
                                                         {"K", qt.size(3)},
                                                         {"V", vt.size(3)},
                                                         {"HV", vt.size(first ? 1 : 2)}};
        for (const auto& [letter, size] : sizes) {
            const std::string key = std::string("shape.") + letter;
            const Node* stated = integer_setting(key);
            if (stated && stated->integer_value != size)
                error(*stated,
                      key + " = " + std::to_string(stated->integer_value) + ", but the capture's " +
                          (letter[0] == 'V' || letter[1] == 'V' ? "v" : "q") + " has " + letter +
                          " = " + std::to_string(size),
                      "leave it out to take the capture's size");
        }
        c.B = sizes[0].second, c.T = sizes[1].second, c.H = sizes[2].second;
        c.K = sizes[3].second, c.V = sizes[4].second, c.HV = sizes[5].second;
        // the values are replayed bit for bit, so the dtypes are the capture's: a stated one
        // that differs is a contradiction. Where q, k and v were captured in different dtypes
        // (the user's code made k fp32) no dtype follows: the file states the one the kernel's
        // contract takes, and each tensor captured otherwise is a BOUNDARY_MISMATCH.
        std::vector<std::pair<std::string, DType>> inputs;
        for (const char* name : {"q", "k", "v"})
            if (const auto t = tensors.find(name); t != tensors.end())
                if (const auto dtype = from_scalar_type(t->second.scalar_type()))
                    inputs.emplace_back(name, *dtype);
        const bool mixed = std::any_of(inputs.begin(), inputs.end(),
                                       [&](const auto& x) { return x.second != inputs[0].second; });
        if (mixed && !string_setting("dtypes.inputs")) {
            std::string held;
            for (const auto& [name, dtype] : inputs)
                held += (held.empty() ? "" : ", ") + name + " " + std::string(dtype_name(dtype));
            error(*from, path + " holds inputs of different dtypes (" + held + ")",
                  "state [dtypes] inputs: the dtype the kernel's contract takes");
        }
        const auto derive = [&](const std::string& key, std::optional<DType> captured,
                                const std::string& name, DType& dtype) {
            if (!captured) return;
            if (const Node* stated = string_setting(key)) {
                if (parse_dtype(stated->string_value) != captured)
                    error(*stated,
                          key + " = " + in_quotes(stated->string_value) + ", but the capture's " +
                              name + " is " + std::string(dtype_name(*captured)),
                          "leave it out to take the capture's dtype");
                return;
            }
            dtype = *captured;
        };
        if (!inputs.empty() && !mixed)
            derive("dtypes.inputs", inputs[0].second, inputs[0].first, c.input_dtype);
        if (const auto g = tensors.find("g"); g != tensors.end())
            derive("dtypes.gates", from_scalar_type(g->second.scalar_type()), "g", c.gate_dtype);
        // a call without an initial state replays without one
        if (!tensors.count("h0") && !root_.find("initial_state")) c.initial_state = false;
        if (const auto offsets = tensors.find("cu_seqlens"); offsets != tensors.end()) {
            const at::Tensor values = offsets->second.to(at::kLong).contiguous();
            const std::vector<int64_t> captured(values.data_ptr<int64_t>(),
                                                values.data_ptr<int64_t>() + values.numel());
            const Node* stated = root_.find("cu_seqlens");
            if (stated && !c.cu_seqlens.empty() && c.cu_seqlens != captured)
                error(*stated, "cu_seqlens differ from the capture's",
                      "leave cu_seqlens out to take the capture's");
            else
                c.cu_seqlens = captured;
        }
        return true;
    }

    void read_generators(Case& c) {
        const Node* inputs = root_.find("inputs");
        if (!family_ || !inputs || inputs->kind != NodeKind::table) return;
        for (const Node& entry : inputs->items) {
            const auto& known = family_->inputs;
            if (std::find(known.begin(), known.end(), entry.key) == known.end()) continue;
            if (auto generator = read_generator(entry)) c.generators[entry.key] = *generator;
        }
    }

    void read_tolerances(Case& c) {
        const Node* tolerances = root_.find("tolerances");
        if (!family_ || !tolerances || tolerances->kind != NodeKind::table) return;
        const auto read = [&](const Node& entry, const std::string& path, bool applies) {
            const auto& known = family_->measured;
            if (std::find(known.begin(), known.end(), entry.key) == known.end()) return;
            if (!is_number(entry)) {
                error(entry, type_message(path, "a number", entry));
                return;
            }
            const double v = number_of(entry);
            if (!std::isfinite(v) || v <= 0) {
                error(entry, path + " must be positive and finite, got " + format_number(v),
                      "a tolerance bounds the relative RMS error of the tensor");
                return;
            }
            if (applies) c.tolerances[entry.key] = v;
        };
        const auto per_dtype = [](const Node& entry) {
            return entry.kind == NodeKind::table ? parse_dtype(entry.key) : std::nullopt;
        };
        for (const Node& entry : tolerances->items)
            if (!per_dtype(entry)) read(entry, "tolerances." + entry.key, true);
        // a table per input dtype ([tolerances.bf16]) overrides the bounds above for its cases
        for (const Node& entry : tolerances->items)
            if (const auto dtype = per_dtype(entry)) {
                if (std::find(kSupportedDTypes.begin(), kSupportedDTypes.end(), *dtype) ==
                    kSupportedDTypes.end()) {
                    error(entry, "[tolerances." + entry.key + "] names a dtype no input takes",
                          "a table per input dtype is one of [tolerances.fp32], "
                          "[tolerances.fp16], [tolerances.bf16]");
                    continue;
                }
                for (const Node& field : entry.items)
                    read(field, "tolerances." + entry.key + "." + field.key,
                         *dtype == c.input_dtype);
            }
    }

    /// The file's prologue with this case's autocast mode, dtypes and sizes. `sized`: the case's
    /// sizes are all valid (otherwise they were reported and the shapes are left empty).
    void read_prologue(Case& c, bool sized) {
        if (!document_.prologue) return;
        Prologue prologue = *document_.prologue;
        if (const Node* mode = string_setting("prologue.autocast")) {
            prologue.autocast_span = mode->span;
            const std::string& text = mode->string_value;
            std::vector<std::string> names;
            std::optional<AutocastMode> found;
            for (AutocastMode m : kAutocastModes) {
                names.emplace_back(autocast_name(m));
                if (names.back() == text) found = m;
            }
            if (!found) {
                error(*mode, "unknown autocast mode " + in_quotes(text),
                      did_you_mean_note(text, names));
            } else if (*found == AutocastMode::fp16 && !kCudaBuild) {
                error(*mode, "autocast 'fp16' needs CUDA, and this build of lav is CPU-only",
                      "fp16 autocast is CUDA autocast; use \"bf16\" for a CPU autocast region");
            } else {
                prologue.autocast = *found;
            }
        }
        for (PrologueTensor& tensor : prologue.tensors) {
            const std::string path = "prologue.tensors." + tensor.name + ".dtype";
            tensor.dtype = c.input_dtype;
            if (const Node* value = string_setting(path)) {
                if (auto dtype = prologue_dtype(*value)) tensor.dtype = *dtype;
            }
            if (sized) tensor.shape = resolve_shape(c, tensor);
        }
        if (prologue.python) {
            prologue.python->sizes = {{"B", c.B}, {"T", c.T}, {"H", c.H},
                                      {"K", c.K}, {"V", c.V}, {"HV", c.HV}};
            prologue.python->seed = c.seed;
        }
        c.prologue = std::move(prologue);
    }

    std::optional<DType> prologue_dtype(const Node& value) {
        const std::string& spelling = value.string_value;
        std::vector<std::string> names;
        for (DType d : prologue_dtypes()) names.emplace_back(dtype_name(d));
        const auto dtype = parse_dtype(spelling);
        if (!dtype) {
            error(value, "unknown dtype " + in_quotes(spelling),
                  "expected one of: " + dtype_names_list());
        } else if (std::find(names.begin(), names.end(), spelling) == names.end()) {
            error(value, "dtype " + in_quotes(spelling) + " is not supported in the prologue",
                  "the prologue takes " + join(names));
        } else {
            return dtype;
        }
        return std::nullopt;
    }

    std::vector<int64_t> resolve_shape(const Case& c, const PrologueTensor& tensor) {
        const std::pair<const char*, int64_t> sizes[] = {{"B", c.B}, {"T", c.T}, {"H", c.H},
                                                         {"K", c.K}, {"V", c.V}, {"HV", c.HV}};
        std::vector<int64_t> shape;
        for (const ShapeDim& dim : tensor.dims) {
            if (dim.symbol.empty()) {
                shape.push_back(dim.factor);
                continue;
            }
            int64_t size = 0;
            for (const auto& [symbol, value] : sizes)
                if (dim.symbol == symbol) size = value;
            if (dim.op == '*') {
                shape.push_back(size * dim.factor);
            } else if (size % dim.factor == 0) {
                shape.push_back(size / dim.factor);
            } else {
                error(dim.span,
                      in_quotes(dim.text) + " is not a whole size: " + dim.symbol + " = " +
                          std::to_string(size) + " is not a multiple of " +
                          std::to_string(dim.factor),
                      "write this size as an integer, or divide " + dim.symbol +
                          " by one of its divisors");
                shape.push_back(0);
            }
        }
        return shape;
    }

    void check_memory(const Case& c, uint64_t limit) {
        const uint64_t need = estimate_case_bytes(c);
        if (need <= limit) return;
        const Node* shape = root_.find("shape");
        const Span at = shape ? shape->span : Span{{document_.path, 1, 1}, 1};
        error(at,
              "case " + in_quotes(c.id) + " needs about " + format_bytes(need) +
                  ", more than --max-memory " + format_bytes(limit),
              "lower shape.T/B/H or raise --max-memory");
    }

    /// Where a setting was written: its value (the [matrix] alternative when it came from
    /// there); for a default, the header of its table when the file has one, else 1:1.
    Span setting_span(std::string_view path) const {
        if (const Node* value = get(path)) return value->span;
        const auto dot = path.find('.');
        if (dot != std::string_view::npos) {
            const Node* table = root_.find(path.substr(0, dot));
            if (table && table->kind == NodeKind::table) return table->span;
        }
        return {{document_.path, 1, 1}, 1};
    }

    void check_family_rules(const Case& c) {
        if (!family_ || !family_->check) return;
        for (const FamilyIssue& issue : family_->check(c))
            error(setting_span(issue.path), issue.message, issue.note);
    }

    const Document& document_;
    const Node& root_;
    const std::vector<std::pair<std::string, const Node*>> overrides_;
    DiagnosticList& diags_;
    const FamilyInfo* family_;
    int errors_ = 0;  ///< errors found in this case, repeats of other cases' included
};

}  // namespace

std::vector<Case> expand_cases(const Document& document, const LoadOptions& options,
                               DiagnosticList& diags) {
    const auto& axes = document.axes;
    std::vector<std::size_t> index(axes.size(), 0);
    std::vector<Case> cases;
    const bool well_formed = diags.empty();
    while (true) {
        std::vector<std::pair<std::string, const Node*>> overrides;
        for (std::size_t a = 0; a < axes.size(); ++a)
            overrides.emplace_back(axes[a].path, axes[a].values[index[a]]);
        cases.push_back(
            CaseBuilder(document, std::move(overrides), diags).build(options, well_formed));
        if (diags.full()) break;
        // an odometer: the last axis turns fastest, so the first key declared varies slowest
        std::size_t a = axes.size();
        while (a > 0 && ++index[a - 1] == axes[a - 1].values.size()) index[--a] = 0;
        if (a == 0) break;
    }
    return cases;
}

uint64_t estimate_case_bytes(const Case& c) {
    // bytes = B·T · (2·H·K + HV·V) · 8 · 6  +  N · HV·K·V · 8 · (⌈T/chunk_size⌉ + 2·⌈√T⌉ + 4)
    //   per token, q and k (H heads of K values each), v (HV heads of V values) and likewise o
    //   and the gradients, in fp64 (8 bytes), 6 copies (drawn inputs, quantised inputs,
    //   gradients, gold, emulation, kernel); per sequence (N = B, or the cu_seqlens segments)
    //   and value head, one K×V fp64 state at each chunk boundary, up to 2·√T backward
    //   checkpoints and 4 more (initial, final, working).
    //   + Σ numel · 8 · 2 over the [prologue.tensors]: each drawn in fp64, then rounded to its
    //   dtype (counted as fp64 too). What the ops compute from them is not estimated.
    // long double keeps huge shapes from overflowing before the final clamp
    using Real = long double;
    // a Case built in code rather than loaded may leave HV at 0, which means H
    const Real value_heads = static_cast<Real>(c.HV > 0 ? c.HV : c.H);
    const Real tokens = static_cast<Real>(c.B) * static_cast<Real>(c.T);
    const Real per_token = (2 * static_cast<Real>(c.H) * static_cast<Real>(c.K) +
                            value_heads * static_cast<Real>(c.V)) *
                           8 * 6;
    const Real sequences =
        c.cu_seqlens.empty() ? static_cast<Real>(c.B) : static_cast<Real>(c.cu_seqlens.size() - 1);
    const Real chunk = static_cast<Real>(std::max<int64_t>(c.chunk_size, 1));
    const Real t = static_cast<Real>(std::max<int64_t>(c.T, 0));
    const Real states = std::ceil(t / chunk) + 2 * std::ceil(std::sqrt(t)) + 4;
    const Real state_bytes = value_heads * static_cast<Real>(c.K) * static_cast<Real>(c.V) * 8;
    Real prologue_bytes = 0;
    if (c.prologue) {
        for (const PrologueTensor& tensor : c.prologue->tensors) {
            Real numel = 1;
            for (const int64_t size : tensor.shape) numel *= static_cast<Real>(size);
            prologue_bytes += numel * 8 * 2;
        }
    }
    const Real total = tokens * per_token + sequences * state_bytes * states + prologue_bytes;
    const Real most = static_cast<Real>(std::numeric_limits<uint64_t>::max());
    return total >= most ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(total);
}

}  // namespace lav::scenario
