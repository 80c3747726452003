// tests/prologue/loader_test.cpp — scenario files with a [prologue]: what loads, and the exact
// diagnostic of each bad file in tests/data/scenarios/prologue/bad/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/build_info.h"
#include "core/error.h"
#include "program.h"
#include "scenario/scenario.h"

namespace lav::scenario {
namespace {

Catalog test_catalog() {
    FamilyInfo simple_gla;
    simple_gla.name = "simple_gla";
    simple_gla.summary = "gated linear attention with a scalar gate per head";
    simple_gla.variants = {"chunk", "recurrent"};
    simple_gla.inputs = {"q", "k", "v", "g", "g_gamma", "h0"};
    simple_gla.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dh0"};
    simple_gla.options = {{"gate", {"g", "g_gamma", "none"}}};
    return {simple_gla};
}

std::string data_path(const std::string& file) {
    return std::string(LAV_SOURCE_DIR) + "/tests/data/scenarios/prologue/" + file;
}

std::vector<Case> load(const std::string& path) {
    return load_file(path, test_catalog(), LoadOptions{});
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

/// The what() of the ScenarioError that loading `path` throws; fails the test if none.
std::string load_error(const std::string& path) {
    try {
        load(path);
    } catch (const ScenarioError& e) {
        return e.what();
    }
    ADD_FAILURE() << "no ScenarioError for " << path;
    return "";
}

const PrologueTensor& tensor(const Prologue& prologue, std::string_view name) {
    const PrologueTensor* t = prologue.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    static const PrologueTensor kNone;
    return t ? *t : kNone;
}

TEST(PrologueLoad, ReadsTensorsAndOps) {
    const auto cases = load(data_path("rwkv7_addcmul.toml"));
    ASSERT_EQ(cases.size(), 2u);
    EXPECT_EQ(cases[0].id, "rwkv7_addcmul[prologue.tensors.k_a.dtype=fp32]");
    EXPECT_EQ(cases[1].id, "rwkv7_addcmul[prologue.tensors.k_a.dtype=fp16]");
    ASSERT_TRUE(cases[0].prologue.has_value());
    const Prologue& p = *cases[0].prologue;
    EXPECT_EQ(p.autocast, AutocastMode::off);
    EXPECT_EQ(p.file, data_path("rwkv7_addcmul.toml"));
    ASSERT_EQ(p.tensors.size(), 2u);

    const PrologueTensor& a = tensor(p, "a");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{1, 16, 2, 8}));
    EXPECT_EQ(a.dtype, DType::fp16);  // left out: the case's inputs dtype
    EXPECT_FALSE(a.parameter);
    EXPECT_EQ(a.dist, "rand");
    EXPECT_EQ(a.scale, 1.0);

    const PrologueTensor& k_a = tensor(p, "k_a");
    EXPECT_EQ(k_a.shape, (std::vector<int64_t>{8}));
    EXPECT_EQ(k_a.dtype, DType::fp32);
    EXPECT_TRUE(k_a.parameter);
    EXPECT_EQ(k_a.dist, "randn");
    EXPECT_EQ(k_a.scale, 0.5);
    EXPECT_EQ(tensor(*cases[1].prologue, "k_a").dtype, DType::fp16);
    EXPECT_EQ(tensor(*cases[1].prologue, "a").dtype, DType::fp16);

    // ops start on the line after the opening quotes; the comment is line 19
    ASSERT_EQ(p.statements.size(), 1u);
    const Statement& s = p.statements[0];
    EXPECT_EQ(s.target, "k");
    EXPECT_EQ(s.target_span.at.line, 20);
    EXPECT_EQ(s.target_span.at.column, 1);
    EXPECT_EQ(s.value.function, Function::addcmul);
    EXPECT_EQ(s.value.operands[1].span.at.line, 20);
    EXPECT_EQ(s.value.operands[1].span.at.column, 18);
    EXPECT_EQ(p.source_line(20), "k = addcmul(k, k * (a - 1.0), k_a)");
}

TEST(PrologueLoad, VariesAutocastInMatrix) {
    const auto cases = load(data_path("var_normalize.toml"));
    ASSERT_EQ(cases.size(), 2u);
    ASSERT_TRUE(cases[0].prologue && cases[1].prologue);
    EXPECT_EQ(cases[0].prologue->autocast, AutocastMode::off);
    EXPECT_EQ(cases[1].prologue->autocast, AutocastMode::bf16);
    // the mode points at the alternative it came from
    EXPECT_EQ(cases[1].prologue->autocast_span.at.line, 23);
    EXPECT_EQ(cases[1].prologue->autocast_span.at.column, 31);
    const PrologueTensor& scale_mul = tensor(*cases[0].prologue, "scale_mul");
    EXPECT_EQ(scale_mul.shape, (std::vector<int64_t>{1, 1, 4, 1}));
    EXPECT_EQ(scale_mul.dist, "ones");
    EXPECT_EQ(scale_mul.scale, 2.5);
    ASSERT_EQ(cases[0].prologue->statements.size(), 1u);
    // a single-line string: the ops start one column after the quote
    EXPECT_EQ(cases[0].prologue->statements[0].target_span.at.column, 8);
}

TEST(PrologueLoad, ReadsEverySetting) {
    const auto cases = load(data_path("every_setting.toml"));
    ASSERT_EQ(cases.size(), 1u);
    ASSERT_TRUE(cases[0].prologue.has_value());
    const Prologue& p = *cases[0].prologue;
    EXPECT_EQ(p.autocast, AutocastMode::bf16);
    EXPECT_EQ(p.autocast_span.at.line, 17);
    ASSERT_EQ(p.tensors.size(), 5u);
    EXPECT_EQ(p.tensors[0].name, "x");  // declaration order
    EXPECT_EQ(p.tensors[4].name, "wide");
    EXPECT_EQ(tensor(p, "x").shape, (std::vector<int64_t>{2, 32, 4, 64}));
    EXPECT_EQ(tensor(p, "x").dtype, DType::bf16);
    EXPECT_EQ(tensor(p, "freqs").shape, (std::vector<int64_t>{32, 32}));
    EXPECT_EQ(tensor(p, "freqs").scale, 3.0);
    EXPECT_EQ(tensor(p, "w_q").dtype, DType::fp64);
    EXPECT_EQ(tensor(p, "w_q").dist, "zeros");
    EXPECT_TRUE(tensor(p, "gain").shape.empty());
    EXPECT_EQ(tensor(p, "gain").dims.size(), 0u);
    EXPECT_EQ(tensor(p, "gain").scale, 2.0);
    EXPECT_EQ(tensor(p, "wide").shape, (std::vector<int64_t>{8, 3}));
    ASSERT_EQ(tensor(p, "wide").dims.size(), 2u);
    EXPECT_EQ(tensor(p, "wide").dims[0].text, "H*2");
    ASSERT_EQ(p.statements.size(), 3u);
    EXPECT_EQ(p.statements[0].target_span.at.line, 19);
    EXPECT_EQ(p.statements[1].target_span.at.line, 21);
    EXPECT_EQ(p.statements[2].target, "k");
    EXPECT_EQ(p.statements[2].target_span.at.line, 22);
}

TEST(PrologueLoad, MapsEscapesToTheirPlaceInTheFile) {
    const auto cases = load(data_path("escapes.toml"));
    ASSERT_EQ(cases.size(), 1u);
    const Prologue& p = *cases[0].prologue;
    ASSERT_EQ(p.statements.size(), 2u);
    // ops = "q = to(q, \"fp32\")\nv = exp(v) * 2\t# ..."
    const Expr& dtype = p.statements[0].value.operands[1];
    EXPECT_EQ(dtype.text, "fp32");
    EXPECT_EQ(dtype.span.at.line, 13);
    EXPECT_EQ(dtype.span.at.column, 18);  // the escaped quote
    EXPECT_EQ(dtype.span.length, 7);
    EXPECT_EQ(p.statements[1].target_span.at.line, 13);
    EXPECT_EQ(p.statements[1].target_span.at.column, 29);  // after the \n escape
    EXPECT_EQ(p.statements[1].value.operands[0].span.at.column, 33);
}

TEST(PrologueLoad, NoPrologueLeavesItEmpty) {
    const auto cases =
        load(std::string(LAV_SOURCE_DIR) + "/tests/data/scenarios/good/minimal.toml");
    ASSERT_EQ(cases.size(), 1u);
    EXPECT_FALSE(cases[0].prologue.has_value());
}

struct BadFile {
    const char* test_name;
    const char* file;
    int line;
    int column;
    const char* message;
    const char* note;
};

void PrintTo(const BadFile& bad, std::ostream* os) { *os << bad.file; }

const BadFile kBadFiles[] = {
    {"UnknownFunction", "unknown_function.toml", 15, 5, "unknown function 'normalise'",
     "did you mean 'normalize'?"},
    {"UnknownNameInline", "unknown_name_inline.toml", 13, 16, "unknown name 'k_b'",
     "did you mean 'k_a'?"},
    {"EscapedPositions", "escaped_positions.toml", 13, 37, "unknown name 'vv'",
     "did you mean 'v'?"},
    {"WrongArityLiteral", "wrong_arity_literal.toml", 14, 5,
     "'addcmul' takes 3 or 4 arguments, got 2", "addcmul(x, a, b[, value])"},
    {"UnknownDtype", "unknown_dtype.toml", 14, 11, "unknown dtype 'bf61'", "did you mean 'bf16'?"},
    {"UnexpectedToken", "unexpected_token.toml", 14, 12,
     "expected an operator or end of line, got ')'", "one assignment per line"},
    {"UnclosedCall", "unclosed_call.toml", 14, 16,
     "expected ',' or ')' after argument 1 of 'exp', got end of line", "exp(x)"},
    {"TextAfterQuotes", "text_after_quotes.toml", 14, 13, "unknown name 'qq'", "did you mean 'q'?"},
    {"UnknownAutocast", "unknown_autocast.toml", 13, 12, "unknown autocast mode 'bf61'",
     "did you mean 'bf16'?"},
    {"UnknownPrologueKey", "unknown_prologue_key.toml", 13, 1, "unknown key 'autocst'",
     "did you mean 'autocast'?"},
    {"TensorShadowsInput", "tensor_shadows_input.toml", 16, 1,
     "prologue tensor 'k' is an input of family 'simple_gla'",
     "the family generates 'k'; declare the tensor under another name and assign k in ops"},
    {"UnknownTensorKey", "unknown_tensor_key.toml", 16, 22, "unknown key 'dtyp'",
     "did you mean 'dtype'?"},
    {"UnknownSize", "unknown_size.toml", 16, 21, "unknown size 'Q'",
     "a size is a positive integer, or one of B, T, H, K, V, HV, alone or as K/2 or H*2"},
    {"SizeNotDivisible", "size_not_divisible.toml", 16, 25,
     "'K/3' is not a whole size: K = 4 is not a multiple of 3",
     "write this size as an integer, or divide K by one of its divisors"},
    {"UnsupportedTensorDtype", "unsupported_tensor_dtype.toml", 16, 30,
     "dtype 'tf32' is not supported in the prologue", "the prologue takes fp64, fp32, fp16, bf16"},
    {"MissingOps", "missing_ops.toml", 12, 1, "missing required key 'prologue.ops'",
     "add ops = \"\"\" ... \"\"\" with one assignment per line, or python = "
     "\"file.py:function\""},
    {"MatrixOps", "matrix_ops.toml", 16, 1, "'prologue.ops' cannot be varied in [matrix]",
     "[matrix] varies: layout, seed, initial_state, chunk_size, scale, cu_seqlens, "
     "dtypes.inputs, dtypes.gates, dtypes.state, dtypes.output, dtypes.cotangents, shape.B, "
     "shape.T, shape.H, shape.K, shape.V, shape.HV, options.<name>, prologue.autocast, "
     "prologue.tensors.<name>.dtype"},
    {"NumberAssigned", "number_assigned.toml", 14, 5, "'k' is assigned a number, not a tensor",
     "use the number where it is needed, as in k = k * 0.5"},
    {"NoAssignments", "no_assignments.toml", 13, 7, "'prologue.ops' has no assignments",
     "write one assignment per line, as in k = to(k, \"fp16\")"},
};

class BadPrologue : public ::testing::TestWithParam<BadFile> {};

TEST_P(BadPrologue, ReportsOneExactDiagnostic) {
    const BadFile& bad = GetParam();
    const std::string path = data_path("bad/" + std::string(bad.file));
    const std::vector<std::string> source = split_lines(read_text(path));
    ASSERT_GE(source.size(), static_cast<std::size_t>(bad.line)) << "fixture too short";

    const std::vector<std::string> lines = split_lines(load_error(path));
    ASSERT_GE(lines.size(), 4u);
    EXPECT_EQ(lines[0], path + ":" + std::to_string(bad.line) + ":" + std::to_string(bad.column) +
                            ": error: " + bad.message);
    EXPECT_EQ(lines[1], "    " + source[bad.line - 1]);
    // the caret stands under the column (the fixtures are ASCII without tabs)
    ASSERT_GE(lines[2].size(), static_cast<std::size_t>(4 + bad.column));
    EXPECT_EQ(lines[2].find('^'), static_cast<std::size_t>(3 + bad.column)) << lines[2];
    const bool has_note = bad.note[0] != '\0';
    EXPECT_EQ(lines[3], has_note ? "note: " + std::string(bad.note) : "1 error in " + path);
    EXPECT_EQ(lines.back(), "1 error in " + path);
}

INSTANTIATE_TEST_SUITE_P(Files, BadPrologue, ::testing::ValuesIn(kBadFiles),
                         [](const ::testing::TestParamInfo<BadFile>& info) {
                             return std::string(info.param.test_name);
                         });

TEST(PrologueLoad, FloatSixteenAutocastNeedsACudaBuild) {
    if (kCudaBuild) GTEST_SKIP() << "this build has CUDA: fp16 autocast is accepted";
    const std::string path = data_path("bad/fp16_autocast.toml");
    const std::vector<std::string> lines = split_lines(load_error(path));
    ASSERT_GE(lines.size(), 4u);
    EXPECT_EQ(lines[0], path +
                            ":13:12: error: autocast 'fp16' needs CUDA, and this build of lav "
                            "is CPU-only");
    EXPECT_EQ(lines[3],
              "note: fp16 autocast is CUDA autocast; use \"bf16\" for a CPU autocast region");
}

/// A scenario file written for one test, removed afterwards.
class TempScenario {
  public:
    TempScenario(const std::string& name, const std::string& text)
        : path_((std::filesystem::temp_directory_path() /
                 (name + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                  ".toml"))
                    .string()) {
        std::ofstream(path_) << text;
    }
    ~TempScenario() { std::filesystem::remove(path_); }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

const char* const kHeader =
    "name = \"several\"\n"
    "description = \"errors in several places of the prologue\"\n"
    "family = \"simple_gla\"\n"
    "[shape]\n"
    "B = 1\n"
    "T = 4\n"
    "H = 1\n"
    "K = 4\n"
    "V = 4\n";  // 9 lines

TEST(PrologueLoad, CollectsEveryErrorOfTheFile) {
    const TempScenario file("prologue_several",
                            std::string(kHeader) +
                                "[prologue]\n"                    // 10
                                "autocast = \"of\"\n"             // 11
                                "ops = \"\"\"\n"                  // 12
                                "k = exp(k, q)\n"                 // 13
                                "q = q * w_qq\n"                  // 14
                                "\"\"\"\n"                        // 15
                                "[prologue.tensors]\n"            // 16
                                "w_q = { shape = [\"K\", 0] }\n"  // 17
    );
    const std::string what = load_error(file.path());
    const std::string p = file.path();
    EXPECT_NE(what.find(p + ":11:12: error: unknown autocast mode 'of'\n"), std::string::npos)
        << what;
    EXPECT_NE(what.find(p + ":13:5: error: 'exp' takes 1 argument, got 2\n"), std::string::npos)
        << what;
    EXPECT_NE(what.find(p + ":14:9: error: unknown name 'w_qq'\n"), std::string::npos) << what;
    EXPECT_NE(what.find(p + ":17:23: error: prologue.tensors.w_q.shape[1] must be positive, got 0"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("\n4 errors in " + p), std::string::npos) << what;
}

TEST(PrologueLoad, LocatesThroughCrlfEscapesAndContinuations) {
    std::string text =
        std::string(kHeader) +
        "[prologue]\n"               // 10
        "ops = \"\"\"\n"             // 11
        "k = exp(\\u0071) * 2 \\\n"  // 12: the escape is q; a line-ending backslash joins lines
        "      + zz\n"               // 13
        "v = normalise(v)\n"         // 14
        "o = exp(\\u0071q)\n"        // 15
        "\"\"\"\n";                  // 16
    std::string crlf;
    for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    const TempScenario file("prologue_crlf", crlf);
    const std::string what = load_error(file.path());
    const std::string p = file.path();
    EXPECT_NE(what.find(p + ":13:9: error: unknown name 'zz'\n          + zz\n            ^~\n"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(p + ":14:5: error: unknown function 'normalise'\n"), std::string::npos)
        << what;
    // an escape stands at its backslash
    EXPECT_NE(what.find(p + ":15:9: error: unknown name 'qq'\n"), std::string::npos) << what;
    EXPECT_NE(what.find("\n3 errors in " + p), std::string::npos) << what;
}

TEST(PrologueLoad, MatrixChecksProloguePaths) {
    const TempScenario file("prologue_matrix",
                            std::string(kHeader) +
                                "[prologue]\n"                                          // 10
                                "autocast = \"bf16\"\n"                                 // 11
                                "ops = \"k = k * w\"\n"                                 // 12
                                "[prologue.tensors]\n"                                  // 13
                                "w = { shape = [\"K\"] }\n"                             // 14
                                "[matrix]\n"                                            // 15
                                "\"prologue.autocast\" = [\"off\", \"bf16\"]\n"         // 16
                                "\"prologue.tensors.ww.dtype\" = [\"fp16\"]\n"          // 17
                                "\"prologue.tensors.w.dtype\" = [\"fp16\", \"fp8\"]\n"  // 18
    );
    const std::string what = load_error(file.path());
    const std::string p = file.path();
    EXPECT_NE(what.find(p + ":16:1: error: 'prologue.autocast' is set both in [matrix] and at "
                            "line 11\n"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find(p + ":17:1: error: unknown key 'prologue.tensors.ww.dtype'\n"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("note: did you mean 'prologue.tensors.w.dtype'?"), std::string::npos)
        << what;
    EXPECT_NE(what.find(p + ":18:39: error: unknown dtype 'fp8'\n"), std::string::npos) << what;
}

TEST(PrologueLoad, RuntimeErrorFileLoads) {
    const auto cases = load(data_path("runtime_shape_error.toml"));
    ASSERT_EQ(cases.size(), 1u);
    ASSERT_TRUE(cases[0].prologue.has_value());
    EXPECT_EQ(cases[0].prologue->statements.size(), 2u);
}

}  // namespace
}  // namespace lav::scenario
