// tests/scenario/bad_scenarios_test.cpp — each file in tests/data/scenarios/bad/, exact diagnostic.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "scenario/diagnostics.h"
#include "scenario/scenario.h"

namespace lav::scenario {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

/// Rules of the kind a family adds: V == K, H | HV, and HV != H only with gva on.
std::vector<FamilyIssue> gated_delta_rules(const Case& c) {
    std::vector<FamilyIssue> issues;
    if (c.V != c.K)
        issues.push_back(
            {"shape.V",
             "shape.V must equal shape.K = " + std::to_string(c.K) + ", got " + std::to_string(c.V),
             "set V = K"});
    if (c.HV % c.H != 0)
        issues.push_back({"shape.HV",
                          "shape.HV = " + std::to_string(c.HV) +
                              " is not a multiple of shape.H = " + std::to_string(c.H),
                          "give every head the same number of value heads"});
    if (c.HV != c.H && c.options.at("gva") == "false")
        issues.push_back({"options.gva",
                          "shape.HV = " + std::to_string(c.HV) +
                              " differs from shape.H = " + std::to_string(c.H) + " but gva is off",
                          "set gva = true in [options]"});
    return issues;
}

Catalog test_catalog() {
    FamilyInfo simple_gla;
    simple_gla.name = "simple_gla";
    simple_gla.summary = "gated linear attention with a scalar gate per head";
    simple_gla.variants = {"chunk", "recurrent"};
    simple_gla.inputs = {"q", "k", "v", "g", "g_gamma", "h0"};
    simple_gla.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dh0"};
    simple_gla.options = {{"gate", {"g", "g_gamma", "none"}}};

    FamilyInfo gated_delta;
    gated_delta.name = "gated_delta";
    gated_delta.summary = "delta rule with a scalar gate and grouped value heads";
    gated_delta.variants = {"chunk", "recurrent"};
    gated_delta.inputs = {"q", "k", "v", "g", "beta", "h0"};
    gated_delta.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    // both orders of false and true make a boolean option
    gated_delta.options = {{"gva", {"false", "true"}},
                           {"use_qk_l2norm_in_kernel", {"true", "false"}}};
    gated_delta.check = gated_delta_rules;

    FamilyInfo gsa;
    gsa.name = "gsa";
    gsa.summary = "two states over memory slots";
    gsa.variants = {"chunk", "recurrent"};
    gsa.inputs = {"q", "k", "v", "s", "g", "hk0", "hv0"};
    gsa.measured = {"o", "hkt", "hvt"};
    gsa.state_components = {"hk", "hv"};
    return {simple_gla, gated_delta, gsa};
}

std::string bad_path(const std::string& file) {
    return std::string(LAV_SOURCE_DIR) + "/tests/data/scenarios/bad/" + file;
}

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

/// The what() of the ScenarioError that loading `path` throws; fails the test if none.
std::string load_error(const std::string& path, uint64_t max_memory = 8 * kGiB) {
    LoadOptions options;
    options.max_memory_bytes = max_memory;
    try {
        load_file(path, test_catalog(), options);
    } catch (const ScenarioError& e) {
        EXPECT_EQ(e.exit_code(), ExitCode::kUsage);
        return e.what();
    }
    ADD_FAILURE() << "no ScenarioError for " << path;
    return "";
}

struct BadFile {
    const char* test_name;
    const char* file;
    int line;
    int column;
    const char* message;
    const char* note;  ///< "" when the diagnostic has none
};

void PrintTo(const BadFile& bad, std::ostream* os) { *os << bad.file; }

const BadFile kBadFiles[] = {
    {"SyntaxError", "syntax_error.toml", 6, 7,
     "invalid TOML: Error while parsing key-value pair: expected value, saw '\\n'",
     "scenario files are TOML 1.0 (https://toml.io/en/v1.0.0)"},
    {"UnknownKey", "unknown_key.toml", 5, 1, "unknown key 'varients'", "did you mean 'variants'?"},
    {"WrongType", "wrong_type.toml", 5, 8, "'seed' must be an integer, got string", ""},
    {"MissingKey", "missing_key.toml", 1, 1, "missing required key 'description'",
     "add description = \"what this scenario checks\""},
    {"UnknownDtype", "unknown_dtype.toml", 7, 10, "unknown dtype 'bf15'",
     "expected one of: fp64, fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2"},
    {"UnsupportedDtype", "unsupported_dtype.toml", 7, 9, "dtype 'fp64' is not supported for state",
     "this build takes fp32, fp16, bf16 for state"},
    {"UnknownFamily", "unknown_family.toml", 4, 10, "unknown family 'simple_gal'",
     "did you mean 'simple_gla'?"},
    {"UnknownVariant", "unknown_variant.toml", 5, 22,
     "unknown variant 'recurent' for family 'simple_gla'", "did you mean 'recurrent'?"},
    {"UnknownPass", "unknown_pass.toml", 5, 18, "unknown pass 'backward'",
     "expected one of: fwd, bwd"},
    {"UnknownLayout", "unknown_layout.toml", 5, 10, "unknown layout 'head_lats'",
     "did you mean 'head_last'?"},
    {"UnknownDist", "unknown_dist.toml", 14, 14, "unknown dist 'gaussian'",
     "expected one of: randn, rand, logsigmoid, zeros, ones, retention"},
    {"UnknownOptionValue", "unknown_option_value.toml", 14, 8,
     "unknown value 'g_gama' for option 'gate'", "did you mean 'g_gamma'?"},
    {"UnknownOption", "unknown_option.toml", 14, 1,
     "unknown option 'gates' for family 'simple_gla'", "did you mean 'gate'?"},
    {"UnknownInput", "unknown_input.toml", 14, 1,
     "unknown input tensor 'z' for family 'simple_gla'",
     "expected one of: q, k, v, g, g_gamma, h0"},
    {"CuSeqlensStart", "cu_seqlens_start.toml", 5, 15, "cu_seqlens must start at 0, got 1",
     "cu_seqlens[0] is where the first sequence starts"},
    {"CuSeqlensDecreasing", "cu_seqlens_decreasing.toml", 5, 23,
     "cu_seqlens[2] = 400 is less than cu_seqlens[1] = 500",
     "offsets must not decrease (two equal offsets make an empty sequence)"},
    {"CuSeqlensEnd", "cu_seqlens_end.toml", 5, 28, "cu_seqlens must end at T = 1024, got 1000",
     "the last offset is the total packed length, shape.T"},
    {"VarlenBatch", "varlen_batch.toml", 5, 14, "cu_seqlens requires B = 1, got B = 2",
     "varlen packs every sequence into one batch row: set shape.B = 1"},
    {"NonpositiveSize", "nonpositive_size.toml", 8, 5, "shape.T must be positive, got 0", ""},
    {"ChunkSize", "chunk_size.toml", 5, 14, "chunk_size must be a power of two in [16, 64], got 48",
     "use 16, 32 or 64"},
    {"UnsupportedSchema", "unsupported_schema.toml", 2, 10, "unsupported schema version 2",
     "this build of lav reads schema 1"},
    {"BadName", "bad_name.toml", 2, 8, "invalid name 'smoke gla'",
     "a name uses only letters, digits, '_', '.' and '-'"},
    {"Tolerance", "tolerance.toml", 14, 5, "tolerances.o must be positive and finite, got 0",
     "a tolerance bounds the relative RMS error of the tensor"},
    {"ToleranceDtype", "tolerance_dtype.toml", 13, 1,
     "[tolerances.fp64] names a dtype no input takes",
     "a table per input dtype is one of [tolerances.fp32], [tolerances.fp16], "
     "[tolerances.bf16]"},
    {"MatrixKey", "matrix_key.toml", 14, 1, "'family' cannot be varied in [matrix]",
     "[matrix] varies: layout, seed, initial_state, chunk_size, scale, cu_seqlens, "
     "dtypes.inputs, dtypes.gates, dtypes.state, dtypes.output, dtypes.cotangents, shape.B, "
     "shape.T, shape.H, shape.K, shape.V, shape.HV, options.<name>"},
    {"MatrixConflict", "matrix_conflict.toml", 15, 1,
     "'layout' is set both in [matrix] and at line 5", "remove one of the two"},
    // the bad alternative is in two of the four cases and is reported once, at the alternative
    {"MatrixValue", "matrix_value.toml", 14, 28, "unknown dtype 'bf15'",
     "expected one of: fp64, fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2"},
    {"TooMuchMemory", "too_much_memory.toml", 6, 1,
     "case 'huge' needs about 42.0 GiB, more than --max-memory 8.0 GiB",
     "lower shape.T/B/H or raise --max-memory"},
    {"HVZero", "hv_zero.toml", 10, 6, "shape.HV must be positive, got 0", ""},
    {"HVNegativeInMatrix", "hv_negative.toml", 17, 18, "shape.HV must be positive, got -2", ""},
    {"BoolOptionType", "bool_option_type.toml", 14, 44,
     "'options.use_qk_l2norm_in_kernel' must be a boolean, got integer",
     "each alternative in [matrix] is one whole value of 'options.use_qk_l2norm_in_kernel'"},
    {"BoolOptionValue", "bool_option_value.toml", 14, 7, "unknown value 'True' for option 'gva'",
     "did you mean 'true'?"},
    {"OptionNotBoolean", "option_not_boolean.toml", 14, 8,
     "'options.gate' must be a string, got boolean", ""},
    // the rule breaks in both cases of the matrix and is reported once
    {"FamilyCheck", "family_check.toml", 11, 5, "shape.V must equal shape.K = 32, got 16",
     "set V = K"},
    {"FamilyCheckInMatrix", "family_check_matrix.toml", 17, 21,
     "shape.HV = 6 is not a multiple of shape.H = 4",
     "give every head the same number of value heads"},
    {"FamilyCheckDefaultAtTable", "family_check_default.toml", 14, 1,
     "shape.HV = 4 differs from shape.H = 2 but gva is off", "set gva = true in [options]"},
    {"FamilyCheckDefaultAtFileStart", "family_check_no_table.toml", 1, 1,
     "shape.HV = 4 differs from shape.H = 2 but gva is off", "set gva = true in [options]"},
    {"FamilyCheckSkippedAfterValueError", "family_check_skipped.toml", 5, 8,
     "seed must be non-negative, got -1", ""},
    {"StateComponentUnknown", "state_component_unknown.toml", 7, 24,
     "unknown state component 'hx' of family 'gsa'", "gsa's state components: hk, hv"},
    {"StateComponentOneState", "state_component_one_state.toml", 7, 9,
     "family 'simple_gla' has one state; dtypes.state takes one dtype, not a table",
     "write state = \"fp32\" (or fp16, bf16)"},
    {"StateComponentMatrixOneState", "state_component_matrix_one_state.toml", 14, 1,
     "family 'simple_gla' has one state; it has no component 'h'", "vary \"dtypes.state\" itself"},
    {"StateComponentMatrixValue", "state_component_matrix_value.toml", 17, 30,
     "unknown dtype 'bf15'", "expected one of: fp64, fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2"},
    {"CotangentDtype", "cotangent_dtype.toml", 7, 14,
     "dtype 'fp64' is not supported for cotangents",
     "this build takes fp32, fp16, bf16 for cotangents"},
    {"FamilyCheckSkippedAfterKeyError", "family_check_after_keys.toml", 5, 1,
     "unknown key 'varients'", "did you mean 'variants'?"},
};

class BadScenario : public testing::TestWithParam<BadFile> {};

TEST_P(BadScenario, ReportsOneExactDiagnostic) {
    const BadFile& bad = GetParam();
    const std::string path = bad_path(bad.file);
    const std::vector<std::string> source = split_lines(read_text(path));
    ASSERT_GE(source.size(), static_cast<std::size_t>(bad.line)) << "fixture too short";

    const std::string what = load_error(path);
    const std::vector<std::string> lines = split_lines(what);
    ASSERT_GE(lines.size(), 4u) << what;
    EXPECT_EQ(lines[0], path + ":" + std::to_string(bad.line) + ":" + std::to_string(bad.column) +
                            ": error: " + bad.message);
    EXPECT_EQ(lines[1], "    " + source[bad.line - 1]);
    // the fixtures are ASCII without tabs, so the caret sits at column - 1 after the indent
    EXPECT_EQ(lines[2].find('^'), static_cast<std::size_t>(4 + bad.column - 1));
    const std::string note = bad.note;
    if (note.empty()) {
        EXPECT_EQ(lines[3].rfind("note: ", 0), std::string::npos) << lines[3];
    } else {
        EXPECT_EQ(lines[3], "note: " + note);
    }
    EXPECT_EQ(lines.back(), "1 error in " + path);
}

INSTANTIATE_TEST_SUITE_P(Files, BadScenario, testing::ValuesIn(kBadFiles),
                         [](const testing::TestParamInfo<BadFile>& info) {
                             return std::string(info.param.test_name);
                         });

TEST(BadScenarioText, MatchesTheStyleGuideFormat) {
    const std::string path = bad_path("unknown_dtype.toml");
    EXPECT_EQ(load_error(path), path +
                                    ":7:10: error: unknown dtype 'bf15'\n"
                                    "    inputs = \"bf15\"\n"
                                    "             ^~~~~~\n"
                                    "note: expected one of: fp64, fp32, tf32, fp16, bf16, "
                                    "fp8_e4m3, fp8_e5m2\n"
                                    "1 error in " +
                                    path);
}

TEST(BadScenarioText, CollectsEveryErrorInFileOrder) {
    const std::string path = bad_path("multiple_errors.toml");
    const std::string what = load_error(path);
    std::vector<std::string> headers;
    for (const auto& line : split_lines(what))
        if (line.find(": error: ") != std::string::npos) headers.push_back(line);
    const std::vector<std::string> expected = {
        path + ":5:8: error: seed must be non-negative, got -1",
        path + ":10:5: error: shape.H must be positive, got 0",
        path + ":15:28: error: unknown key 'normalise'",
        path + ":18:5: error: 'tolerances.o' must be a number, got string",
        path + ":21:27: error: dtype 'fp8_e4m3' is not supported for state",
    };
    EXPECT_EQ(headers, expected);
    EXPECT_NE(what.find("\nnote: did you mean 'normalizer'?\n"), std::string::npos);
    EXPECT_EQ(split_lines(what).back(), "5 errors in " + path);
}

TEST(BadScenarioText, CollectsEveryFamilyIssueAtItsSetting) {
    const std::string path = bad_path("family_check_several.toml");
    const std::string what = load_error(path);
    std::vector<std::string> headers;
    for (const auto& line : split_lines(what))
        if (line.find(": error: ") != std::string::npos) headers.push_back(line);
    // gva is left out and the file has no [options]: its rule points at the file's start
    const std::vector<std::string> expected = {
        path + ":1:1: error: shape.HV = 3 differs from shape.H = 2 but gva is off",
        path + ":10:6: error: shape.HV = 3 is not a multiple of shape.H = 2",
        path + ":14:18: error: shape.V must equal shape.K = 32, got 16",
    };
    EXPECT_EQ(headers, expected);
    EXPECT_NE(what.find("\nnote: set V = K\n"), std::string::npos);
    EXPECT_EQ(split_lines(what).back(), "3 errors in " + path);
}

TEST(BadScenarioText, StopsAfterTwentyErrors) {
    const std::string path = bad_path("too_many_errors.toml");
    const std::string what = load_error(path);
    std::size_t errors = 0;
    for (const auto& line : split_lines(what))
        if (line.find(": error: unknown key 'unknown_") != std::string::npos) ++errors;
    EXPECT_EQ(errors, kMaxDiagnostics);
    EXPECT_EQ(what.rfind(path + ":5:1: error: unknown key 'unknown_1'", 0), 0u);
    EXPECT_EQ(split_lines(what).back(), "20 errors in " + path + " (stopped after 20)");
}

TEST(BadScenarioText, MemoryLimitZeroMeansNone) {
    LoadOptions unlimited;
    const auto cases = load_file(bad_path("too_much_memory.toml"), test_catalog(), unlimited);
    ASSERT_EQ(cases.size(), 1u);
    LoadOptions roomy;
    roomy.max_memory_bytes = 64 * kGiB;
    EXPECT_EQ(load_file(bad_path("too_much_memory.toml"), test_catalog(), roomy).size(), 1u);
    EXPECT_GT(estimate_case_bytes(cases[0]), 42 * kGiB);
    EXPECT_LT(estimate_case_bytes(cases[0]), 43 * kGiB);
}

TEST(BadScenarioText, UnreadableFileIsAScenarioError) {
    const std::string path = bad_path("no_such_file.toml");
    try {
        load_file(path, test_catalog(), LoadOptions{});
        FAIL() << "no error for a missing file";
    } catch (const ScenarioError& e) {
        EXPECT_EQ(std::string(e.what()), path + ": error: cannot open the scenario file");
    }
}

TEST(Diagnostics, CaretFollowsTabsAndUtf8) {
    Diagnostic d;
    d.span = {{"f.toml", 3, 10}, 3};
    d.message = "m";
    // tab, k, space, =, space, ", é (two bytes, one column), ", space: the caret is at column 10
    const std::string line = "\tk = \"\xC3\xA9\" #xy";
    EXPECT_EQ(render_diagnostic(d, line),
              "f.toml:3:10: error: m\n    " + line + "\n    \t        ^~~");
}

TEST(Diagnostics, CaretIsCutAtLineEndAndNoteFollows) {
    Diagnostic d;
    d.span = {{"f.toml", 1, 5}, 40};
    d.message = "m";
    d.note = "n";
    EXPECT_EQ(render_diagnostic(d, "a = [1,"),
              "f.toml:1:5: error: m\n    a = [1,\n        ^~~\nnote: n");
}

TEST(Diagnostics, UnknownLineHasNoQuote) {
    Diagnostic d;
    d.span.at.file = "f.toml";
    d.message = "m";
    EXPECT_EQ(render_diagnostic(d, ""), "f.toml: error: m");
}

TEST(Diagnostics, RepeatsAreDroppedAndOrderIsByPosition) {
    DiagnosticList list("f.toml", "a = 1\nb = 2\n");
    list.error({{"f.toml", 2, 5}, 1}, "second");
    list.error({{"f.toml", 1, 5}, 1}, "first");
    list.error({{"f.toml", 2, 5}, 1}, "second");
    EXPECT_EQ(list.size(), 2u);
    EXPECT_EQ(list.render(),
              "f.toml:1:5: error: first\n    a = 1\n        ^\n"
              "f.toml:2:5: error: second\n    b = 2\n        ^\n"
              "2 errors in f.toml");
    EXPECT_THROW(list.throw_if_any(), ScenarioError);
    EXPECT_NO_THROW(DiagnosticList("g.toml", "").throw_if_any());
}

TEST(Diagnostics, EditDistanceAndSuggestions) {
    EXPECT_EQ(edit_distance("varients", "variants"), 1u);
    EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
    EXPECT_EQ(edit_distance("", "abc"), 3u);
    EXPECT_EQ(closest_match("varients", {"passes", "variants"}), "variants");
    EXPECT_EQ(closest_match("qq", {"k", "q"}), "q");
    // replacing every character is no typo
    EXPECT_EQ(closest_match("x", {"o"}), std::nullopt);
    EXPECT_EQ(closest_match("backward", {"fwd", "bwd"}), std::nullopt);
    EXPECT_EQ(did_you_mean_note("head_lats", {"head_first", "head_last"}),
              "did you mean 'head_last'?");
    EXPECT_EQ(did_you_mean_note("zz", {"fwd", "bwd"}), "expected one of: fwd, bwd");
}

}  // namespace
}  // namespace lav::scenario
