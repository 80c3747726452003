// tests/prologue/expr_test.cpp — the ops parser: statements, precedence, every function,
// locations, and the exact diagnostic of each kind of error.
#include "scenario/expr.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "program.h"

namespace lav::scenario {
namespace {

/// An expression as an S-expression, numbers as written: (* (+ a b) 2.0).
std::string show(const Expr& e) {
    const auto both = [&](const char* op) {
        return std::string("(") + op + " " + show(e.operands[0]) + " " + show(e.operands[1]) + ")";
    };
    switch (e.kind) {
        case ExprKind::number:
        case ExprKind::name:
            return e.text;
        case ExprKind::string:
            return "\"" + e.text + "\"";
        case ExprKind::negate:
            return "(neg " + show(e.operands[0]) + ")";
        case ExprKind::add:
            return both("+");
        case ExprKind::subtract:
            return both("-");
        case ExprKind::multiply:
            return both("*");
        case ExprKind::divide:
            return both("/");
        case ExprKind::call: {
            std::string out = "(" + std::string(function_name(e.function));
            for (const Expr& arg : e.operands) out += " " + show(arg);
            return out + ")";
        }
    }
    return "?";
}

/// The program's statements; a diagnostic fails the test.
std::vector<Statement> parse_clean(const std::string& ops) {
    DiagnosticList diags(kOpsFile, ops);
    std::vector<Statement> statements = parse_program(located(ops), nullptr, diags);
    EXPECT_TRUE(diags.empty()) << diags.render();
    return statements;
}

ProgramNames test_names() { return {{"a", "k_a"}, {"q", "k", "v"}}; }

TEST(OpsParser, ReadsOneAssignmentPerLine) {
    const auto statements = parse_clean(
        "# the RWKV7 prologue\n"
        "\n"
        "k = addcmul(k, k * (a - 1.0), k_a)   # promotes with an fp32 k_a\n"
        "  q = normalize(q)\n"
        "v = to(v, 'fp16')");
    ASSERT_EQ(statements.size(), 3u);
    EXPECT_EQ(statements[0].target, "k");
    EXPECT_EQ(show(statements[0].value), "(addcmul k (* k (- a 1.0)) k_a)");
    EXPECT_EQ(statements[1].target, "q");
    EXPECT_EQ(show(statements[1].value), "(normalize q)");
    EXPECT_EQ(statements[2].target, "v");
    EXPECT_EQ(show(statements[2].value), "(to v \"fp16\")");
    for (const Statement& s : statements) EXPECT_TRUE(s.valid);
    EXPECT_EQ(statements[1].target_span.at.line, 4);
    EXPECT_EQ(statements[1].target_span.at.column, 3);
}

TEST(OpsParser, FollowsPythonPrecedence) {
    const std::pair<const char*, const char*> cases[] = {
        {"a + b * c - d / e", "(- (+ a (* b c)) (/ d e))"},
        {"a - b - c", "(- (- a b) c)"},
        {"a / b * c", "(* (/ a b) c)"},
        {"(a + b) * c", "(* (+ a b) c)"},
        {"-a * b", "(* (neg a) b)"},
        {"a - -b", "(- a (neg b))"},
        {"--a", "(neg (neg a))"},
        {"a * (b - 1)", "(* a (- b 1))"},
        {"normalize(q) * s + 1e-6", "(+ (* (normalize q) s) 1e-6)"},
        {"exp(-(a + b)) / 2", "(/ (exp (neg (+ a b))) 2)"},
        {"((a))", "a"},
    };
    for (const auto& [expression, tree] : cases) {
        const auto statements = parse_clean(std::string("y = ") + expression);
        ASSERT_EQ(statements.size(), 1u) << expression;
        EXPECT_EQ(show(statements[0].value), tree) << expression;
    }
}

TEST(OpsParser, NumbersKeepTheirKind) {
    const std::tuple<const char*, double, bool> cases[] = {
        {"2", 2.0, true},   {"2.0", 2.0, false},       {"1e-6", 1e-6, false}, {".5", 0.5, false},
        {"1.", 1.0, false}, {"2.5E+3", 2500.0, false}, {"10", 10.0, true},
    };
    for (const auto& [text, value, integer] : cases) {
        const auto statements = parse_clean(std::string("y = x * ") + text);
        ASSERT_EQ(statements.size(), 1u) << text;
        const Expr& number = statements[0].value.operands[1];
        ASSERT_EQ(number.kind, ExprKind::number) << text;
        EXPECT_DOUBLE_EQ(number.number, value) << text;
        EXPECT_EQ(number.integer, integer) << text;
    }
}

TEST(OpsParser, ResolvesEveryFunction) {
    const std::pair<const char*, Function> calls[] = {
        {"addcmul(x, a, b)", Function::addcmul},
        {"addcmul(x, a, b, 0.5)", Function::addcmul},
        {"matmul(a, b)", Function::matmul},
        {"linear(x, w)", Function::linear},
        {"linear(x, w, b)", Function::linear},
        {"normalize(x)", Function::normalize},
        {"l2norm(x)", Function::l2norm},
        {"rms_norm(x, w)", Function::rms_norm},
        {"rms_norm(x, w, 1e-6)", Function::rms_norm},
        {"layer_norm(x, w, b)", Function::layer_norm},
        {"layer_norm(x, w, b, 1e-5)", Function::layer_norm},
        {"exp(x)", Function::exp},
        {"sigmoid(x)", Function::sigmoid},
        {"logsigmoid(x)", Function::logsigmoid},
        {"softplus(x)", Function::softplus},
        {"silu(x)", Function::silu},
        {"softmax(x)", Function::softmax},
        {"to(x, \"bf16\")", Function::to},
        {"rotary(x, freqs)", Function::rotary},
        {"transpose(x, 1, 2)", Function::transpose},
        {"elu(x)", Function::elu},
        {"elu(x, 0.5)", Function::elu},
        {"log(x)", Function::log},
        {"rsqrt(x)", Function::rsqrt},
        {"clamp(x, -1, 1)", Function::clamp},
        {"sum(x, -1)", Function::sum},
        {"mean(x, 1)", Function::mean},
        {"cat(a, b, 0)", Function::cat},
        {"stack(a, b, 0)", Function::stack},
        {"where(c, a, b)", Function::where},
        {"einsum(\"ij,jk->ik\", a, b)", Function::einsum},
        {"einsum(\"ij->ji\", a)", Function::einsum},
    };
    std::set<std::string> seen;
    for (const auto& [call, function] : calls) {
        const auto statements = parse_clean(std::string("y = ") + call);
        ASSERT_EQ(statements.size(), 1u) << call;
        const Expr& value = statements[0].value;
        ASSERT_EQ(value.kind, ExprKind::call) << call;
        EXPECT_EQ(value.function, function) << call;
        EXPECT_EQ(function_name(value.function), value.text) << call;
        seen.insert(value.text);
    }
    const std::vector<std::string> all = function_names();
    EXPECT_EQ(seen, std::set<std::string>(all.begin(), all.end()));
}

TEST(OpsParser, ExpressionsAreWrittenBackWithTheParenthesesTheyNeed) {
    const auto statements = parse_clean(
        "a = normalize(q) * scale_mul\n"
        "b = (q - k) * 2\n"
        "c = q - (k - 1.5)\n"
        "d = -(q + k)\n"
        "e = to(q, \"fp16\")\n"
        "f = q + k * 2");
    const char* expected[] = {
        "normalize(q) * scale_mul", "(q - k) * 2", "q - (k - 1.5)", "-(q + k)",
        "to(q, \"fp16\")",          "q + k * 2"};
    ASSERT_EQ(statements.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(expression_text(statements[i].value), expected[i]);
    // a long one keeps its ends
    const std::string sum = "s = " + std::string(40, 'q') + " + " + std::string(40, 'k');
    const std::string text = expression_text(parse_clean(sum)[0].value);
    EXPECT_EQ(text.rfind("qqqq", 0), 0u) << text;
    EXPECT_NE(text.find("…"), std::string::npos) << text;
    EXPECT_LE(text.size(), 63u) << text;
}

TEST(OpsParser, LocatesTokensAndExpressions) {
    // columns:  1   5          16  20 23 25     31
    const auto statements = parse_clean("k = addcmul(k, k * (a - 1.0), k_a)\nq = q");
    ASSERT_EQ(statements.size(), 2u);
    const Statement& s = statements[0];
    EXPECT_EQ(s.target_span.at.column, 1);
    const Expr& call = s.value;
    EXPECT_EQ(call.span.at.column, 5);
    EXPECT_EQ(call.span.length, 7);
    EXPECT_EQ(call.extent.at.column, 5);
    EXPECT_EQ(call.extent.length, 30);
    const Expr& product = call.operands[1];
    EXPECT_EQ(product.span.at.column, 18);  // the '*'
    EXPECT_EQ(product.extent.at.column, 16);
    EXPECT_EQ(product.extent.length, 13);
    const Expr& difference = product.operands[1];
    EXPECT_EQ(difference.span.at.column, 23);    // the '-'
    EXPECT_EQ(difference.extent.at.column, 20);  // parentheses included
    EXPECT_EQ(difference.extent.length, 9);
    const Expr& one = difference.operands[1];
    EXPECT_EQ(one.span.at.column, 25);
    EXPECT_EQ(one.span.length, 3);
    EXPECT_EQ(call.operands[2].span.at.column, 31);
    EXPECT_EQ(call.operands[2].span.length, 3);
    EXPECT_EQ(statements[1].target_span.at.line, 2);
    EXPECT_EQ(statements[1].value.span.at.file, kOpsFile);
}

struct BadOps {
    const char* test_name;
    const char* ops;
    int line;
    int column;
    int length;
    const char* message;
    const char* note;
};

void PrintTo(const BadOps& bad, std::ostream* os) { *os << bad.ops; }

const char* const kStatementNote = "each line of ops is one assignment: name = expression";

const BadOps kBadOps[] = {
    {"UnknownFunction", "k = normalise(q)", 1, 5, 9, "unknown function 'normalise'",
     "did you mean 'normalize'?"},
    {"UnknownFunctionFarOff", "k = frobnicate(q)", 1, 5, 10, "unknown function 'frobnicate'",
     "expected one of: addcmul, matmul, linear, normalize, l2norm, rms_norm, layer_norm, exp, "
     "sigmoid, logsigmoid, softplus, silu, softmax, to, rotary, transpose, elu, log, rsqrt, "
     "clamp, sum, mean, cat, stack, where, einsum"},
    {"TooFewArguments", "k = addcmul(k, a)", 1, 5, 7, "'addcmul' takes 3 or 4 arguments, got 2",
     "addcmul(x, a, b[, value])"},
    {"TooManyArguments", "q = exp(q, k)", 1, 5, 3, "'exp' takes 1 argument, got 2", "exp(x)"},
    {"UnknownName", "k = k * k_b", 1, 9, 3, "unknown name 'k_b'", "did you mean 'k_a'?"},
    {"UnknownNameListsDefined", "h = q * 2\nk = zzzz", 2, 5, 4, "unknown name 'zzzz'",
     "defined here: a, k_a (prologue tensors); q, k, v (kernel inputs); h (assigned above)"},
    {"NameReadBeforeAssigned", "y = later * 2\nlater = q", 1, 5, 5, "unknown name 'later'",
     "defined here: a, k_a (prologue tensors); q, k, v (kernel inputs)"},
    {"UnexpectedToken", "k = (k + q))", 1, 12, 1, "expected an operator or end of line, got ')'",
     "one assignment per line"},
    {"MissingOperand", "k = k *", 1, 8, 1, "expected an expression, got end of line", ""},
    {"UnclosedParenthesis", "k = (k + q\nq = k", 1, 11, 1, "expected ')', got end of line",
     "to close the '(' at column 5"},
    {"MissingComma", "k = addcmul(k, a k_a)", 1, 18, 3,
     "expected ',' or ')' after argument 2 of 'addcmul', got 'k_a'", "addcmul(x, a, b[, value])"},
    {"NoTarget", "(k) = q", 1, 1, 1, "expected a name to assign to, got '('", kStatementNote},
    {"NoEquals", "k q", 1, 3, 1, "expected '=' after 'k', got 'q'", kStatementNote},
    {"UnknownDtype", "k = to(k, \"bf61\")", 1, 11, 6, "unknown dtype 'bf61'",
     "did you mean 'bf16'?"},
    {"UnsupportedDtype", "k = to(k, 'tf32')", 1, 11, 6, "dtype 'tf32' is not supported by to()",
     "to() takes fp64, fp32, fp16, bf16"},
    {"UnquotedDtype", "k = to(k, bf16)", 1, 11, 4,
     "argument 2 of 'to' (dtype) must be a dtype string such as \"bf16\", got the name 'bf16'",
     "quote it: to(x, \"bf16\")"},
    {"TensorWhereNumber", "k = addcmul(k, a, k_a, k)", 1, 24, 1,
     "argument 4 of 'addcmul' (value) must be a number, got a tensor", "addcmul(x, a, b[, value])"},
    {"NumberWhereTensor", "k = exp(2.0 * 3)", 1, 9, 7,
     "argument 1 of 'exp' (x) must be a tensor, got a number", "exp(x)"},
    {"NumberAssigned", "k = 2 * (0.5)", 1, 5, 9, "'k' is assigned a number, not a tensor",
     "use the number where it is needed, as in k = k * 0.5"},
    {"StringInArithmetic", "k = q * 'x'", 1, 9, 3, "unexpected string 'x'",
     "a string names a dtype, as in to(x, \"bf16\"), or is einsum's equation"},
    {"UnexpectedCharacter", "k = q $ 2", 1, 7, 1, "unexpected character '$'",
     "ops are written with names, numbers, + - * /, parentheses and calls"},
    {"UnterminatedString", "k = to(q, \"bf16)", 1, 11, 6, "unterminated string",
     "close it with \" on the same line"},
    {"MalformedNumber", "k = q * 1e", 1, 9, 2, "malformed number '1e'",
     "an exponent needs digits, as in 1e-6"},
    {"ErrorOnThirdLine", "q = k\n\n  k = exp(q, q, q)  # three", 3, 7, 3,
     "'exp' takes 1 argument, got 3", "exp(x)"},
};

class OpsDiagnostic : public ::testing::TestWithParam<BadOps> {};

TEST_P(OpsDiagnostic, ReportsOneExactDiagnostic) {
    const BadOps& bad = GetParam();
    DiagnosticList diags(kOpsFile, bad.ops);
    const ProgramNames names = test_names();
    const auto statements = parse_program(located(bad.ops), &names, diags);
    ASSERT_EQ(diags.size(), 1u) << diags.render();
    const Diagnostic& d = diags.diagnostics()[0];
    EXPECT_EQ(d.span.at.file, kOpsFile);
    EXPECT_EQ(d.span.at.line, bad.line);
    EXPECT_EQ(d.span.at.column, bad.column);
    EXPECT_EQ(d.span.length, bad.length);
    EXPECT_EQ(d.message, bad.message);
    EXPECT_EQ(d.note, bad.note);
    // the line with the error is kept, and marked invalid
    const bool marked = std::any_of(statements.begin(), statements.end(), [&](const Statement& s) {
        return !s.valid && s.target_span.at.line == bad.line;
    });
    const bool has_target = bad.ops[0] != '(';
    EXPECT_EQ(marked, has_target) << diags.render();
}

INSTANTIATE_TEST_SUITE_P(Ops, OpsDiagnostic, ::testing::ValuesIn(kBadOps),
                         [](const ::testing::TestParamInfo<BadOps>& info) {
                             return std::string(info.param.test_name);
                         });

TEST(OpsParser, RendersCaretUnderTheToken) {
    const std::string ops = "k = addcmul(k, k * (a - 1.0), k_b)";
    DiagnosticList diags(kOpsFile, ops);
    const ProgramNames names = test_names();
    parse_program(located(ops), &names, diags);
    EXPECT_EQ(diags.render(),
              "ops.txt:1:31: error: unknown name 'k_b'\n"
              "    k = addcmul(k, k * (a - 1.0), k_b)\n"
              "                                  ^~~\n"
              "note: did you mean 'k_a'?\n"
              "1 error in ops.txt");
}

TEST(OpsParser, CollectsErrorsOfEveryLine) {
    const std::string ops =
        "k = nope(q)\n"
        "q = k * zz\n"
        "v = exp(q,)\n"
        "o = k + q + v";
    DiagnosticList diags(kOpsFile, ops);
    const ProgramNames names = test_names();
    const auto statements = parse_program(located(ops), &names, diags);
    ASSERT_EQ(diags.size(), 3u) << diags.render();
    EXPECT_EQ(diags.diagnostics()[0].message, "unknown function 'nope'");
    EXPECT_EQ(diags.diagnostics()[1].message, "unknown name 'zz'");
    EXPECT_EQ(diags.diagnostics()[2].message, "expected an expression, got ')'");
    ASSERT_EQ(statements.size(), 4u);
    EXPECT_FALSE(statements[0].valid);
    EXPECT_FALSE(statements[1].valid);
    EXPECT_FALSE(statements[2].valid);
    // o reads the targets of broken lines, which count as assigned
    EXPECT_TRUE(statements[3].valid);
}

TEST(OpsParser, ChecksNoNamesWithoutAFamily) {
    DiagnosticList diags(kOpsFile, "y = anything * 2");
    const auto statements = parse_program(located("y = anything * 2"), nullptr, diags);
    EXPECT_TRUE(diags.empty()) << diags.render();
    ASSERT_EQ(statements.size(), 1u);
    EXPECT_TRUE(statements[0].valid);
}

TEST(OpsParser, ReturnsNothingForBlankText) {
    DiagnosticList diags(kOpsFile, "\n  # only a comment\n\n");
    EXPECT_TRUE(parse_program(located("\n  # only a comment\n\n"), nullptr, diags).empty());
    EXPECT_TRUE(diags.empty());
}

}  // namespace
}  // namespace lav::scenario
