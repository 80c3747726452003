// src/scenario/expr.cpp — lexer, recursive-descent parser and static checks of the ops
// language; no tensors and no TOML here.
#include "scenario/expr.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "core/error.h"
#include "scenario/document.h"
#include "scenario/scenario.h"

namespace lav::scenario {
namespace {

enum class ArgKind { tensor, number, dtype, equation };

struct Param {
    std::string_view name;
    ArgKind kind;
};

struct FunctionInfo {
    Function function;
    std::string_view name;
    std::vector<Param> params;
    std::size_t required;  ///< the first `required` params must be given, the rest are optional
};

constexpr ArgKind kTensor = ArgKind::tensor;
constexpr ArgKind kNumber = ArgKind::number;

// in the order of the Function enum
const std::vector<FunctionInfo>& function_table() {
    static const std::vector<FunctionInfo> table = {
        {Function::addcmul,
         "addcmul",
         {{"x", kTensor}, {"a", kTensor}, {"b", kTensor}, {"value", kNumber}},
         3},
        {Function::matmul, "matmul", {{"a", kTensor}, {"b", kTensor}}, 2},
        {Function::linear, "linear", {{"x", kTensor}, {"w", kTensor}, {"b", kTensor}}, 2},
        {Function::normalize, "normalize", {{"x", kTensor}}, 1},
        {Function::l2norm, "l2norm", {{"x", kTensor}}, 1},
        {Function::rms_norm, "rms_norm", {{"x", kTensor}, {"w", kTensor}, {"eps", kNumber}}, 2},
        {Function::layer_norm,
         "layer_norm",
         {{"x", kTensor}, {"w", kTensor}, {"b", kTensor}, {"eps", kNumber}},
         3},
        {Function::exp, "exp", {{"x", kTensor}}, 1},
        {Function::sigmoid, "sigmoid", {{"x", kTensor}}, 1},
        {Function::logsigmoid, "logsigmoid", {{"x", kTensor}}, 1},
        {Function::softplus, "softplus", {{"x", kTensor}}, 1},
        {Function::silu, "silu", {{"x", kTensor}}, 1},
        {Function::softmax, "softmax", {{"x", kTensor}}, 1},
        {Function::to, "to", {{"x", kTensor}, {"dtype", ArgKind::dtype}}, 2},
        {Function::rotary, "rotary", {{"x", kTensor}, {"freqs", kTensor}}, 2},
        {Function::transpose,
         "transpose",
         {{"x", kTensor}, {"dim0", kNumber}, {"dim1", kNumber}},
         3},
        {Function::elu, "elu", {{"x", kTensor}, {"alpha", kNumber}}, 1},
        {Function::log, "log", {{"x", kTensor}}, 1},
        {Function::rsqrt, "rsqrt", {{"x", kTensor}}, 1},
        {Function::clamp, "clamp", {{"x", kTensor}, {"min", kNumber}, {"max", kNumber}}, 3},
        {Function::sum, "sum", {{"x", kTensor}, {"dim", kNumber}}, 2},
        {Function::mean, "mean", {{"x", kTensor}, {"dim", kNumber}}, 2},
        {Function::cat, "cat", {{"a", kTensor}, {"b", kTensor}, {"dim", kNumber}}, 3},
        {Function::stack, "stack", {{"a", kTensor}, {"b", kTensor}, {"dim", kNumber}}, 3},
        {Function::where, "where", {{"cond", kTensor}, {"a", kTensor}, {"b", kTensor}}, 3},
        {Function::einsum,
         "einsum",
         {{"equation", ArgKind::equation}, {"a", kTensor}, {"b", kTensor}},
         2},
    };
    return table;
}

const FunctionInfo* find_function(std::string_view name) {
    for (const FunctionInfo& info : function_table())
        if (info.name == name) return &info;
    return nullptr;
}

/// "addcmul(x, a, b[, value])".
std::string signature(const FunctionInfo& info) {
    std::string out = std::string(info.name) + "(";
    for (std::size_t i = 0; i < info.params.size(); ++i) {
        const bool optional = i >= info.required;
        if (optional) out += "[";
        if (i > 0) out += ", ";
        out += info.params[i].name;
    }
    out.append(info.params.size() - info.required, ']');
    return out + ")";
}

std::string arity_text(const FunctionInfo& info) {
    const std::size_t most = info.params.size();
    std::string count = std::to_string(info.required);
    if (most > info.required) count += " or " + std::to_string(most);
    return count + (most == 1 ? " argument" : " arguments");
}

enum class TokenKind {
    name,
    number,
    string,
    plus,
    minus,
    star,
    slash,
    open,
    close,
    comma,
    equals,
    newline,
    end,
    error,  ///< a lexical error, already reported; the parser drops the rest of the line
};

struct Token {
    TokenKind kind;
    std::size_t begin;  ///< byte offsets into SourceText::text
    std::size_t end;
    std::string text;  ///< as written
};

Span span_between(const SourceText& source, std::size_t begin, std::size_t end) {
    Span span;
    span.at = source.at[begin];
    if (end > begin) {
        const SourceLocation& last = source.at[end - 1];
        if (last.line == span.at.line && last.column >= span.at.column)
            span.length = last.column - span.at.column + 1;
    }
    return span;
}

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

class Lexer {
  public:
    Lexer(const SourceText& source, DiagnosticList& diags) : source_(source), diags_(diags) {}

    std::vector<Token> run() {
        const std::string& text = source_.text;
        while (i_ < text.size()) {
            const char c = text[i_];
            if (c == ' ' || c == '\t' || c == '\r') {
                ++i_;
            } else if (c == '#') {
                while (i_ < text.size() && text[i_] != '\n') ++i_;
            } else if (c == '\n') {
                push(TokenKind::newline, i_, i_ + 1);
            } else if (is_name_start(c)) {
                std::size_t end = i_;
                while (end < text.size() && is_name_char(text[end])) ++end;
                push(TokenKind::name, i_, end);
            } else if (is_digit(c) || (c == '.' && is_digit(peek(1)))) {
                lex_number();
            } else if (c == '"' || c == '\'') {
                lex_string(c);
            } else if (auto kind = punctuation(c)) {
                push(*kind, i_, i_ + 1);
            } else {
                // a UTF-8 character is shown whole
                std::size_t end = i_ + 1;
                while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
                    ++end;
                fail(i_, end, "unexpected character " + in_quotes(text.substr(i_, end - i_)),
                     "ops are written with names, numbers, + - * /, parentheses and calls");
            }
        }
        tokens_.push_back({TokenKind::end, text.size(), text.size(), ""});
        return std::move(tokens_);
    }

  private:
    char peek(std::size_t ahead) const {
        const std::size_t at = i_ + ahead;
        return at < source_.text.size() ? source_.text[at] : '\0';
    }

    static std::optional<TokenKind> punctuation(char c) {
        switch (c) {
            case '+':
                return TokenKind::plus;
            case '-':
                return TokenKind::minus;
            case '*':
                return TokenKind::star;
            case '/':
                return TokenKind::slash;
            case '(':
                return TokenKind::open;
            case ')':
                return TokenKind::close;
            case ',':
                return TokenKind::comma;
            case '=':
                return TokenKind::equals;
            default:
                return std::nullopt;
        }
    }

    void push(TokenKind kind, std::size_t begin, std::size_t end) {
        tokens_.push_back({kind, begin, end, source_.text.substr(begin, end - begin)});
        i_ = end;
    }

    void fail(std::size_t begin, std::size_t end, std::string message, std::string note) {
        diags_.error(span_between(source_, begin, end), std::move(message), std::move(note));
        push(TokenKind::error, begin, end);
    }

    // digits [. digits] [e [+-] digits], or . digits [...]
    void lex_number() {
        const std::string& text = source_.text;
        std::size_t end = i_;
        while (end < text.size() && is_digit(text[end])) ++end;
        if (end < text.size() && text[end] == '.') {
            ++end;
            while (end < text.size() && is_digit(text[end])) ++end;
        }
        if (end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
            std::size_t exponent = end + 1;
            if (exponent < text.size() && (text[exponent] == '+' || text[exponent] == '-'))
                ++exponent;
            const std::size_t digits = exponent;
            while (exponent < text.size() && is_digit(text[exponent])) ++exponent;
            if (exponent == digits) {
                fail(i_, exponent, "malformed number " + in_quotes(text.substr(i_, exponent - i_)),
                     "an exponent needs digits, as in 1e-6");
                return;
            }
            end = exponent;
        }
        push(TokenKind::number, i_, end);
    }

    void lex_string(char quote) {
        const std::string& text = source_.text;
        std::size_t end = i_ + 1;
        while (end < text.size() && text[end] != quote && text[end] != '\n') ++end;
        if (end >= text.size() || text[end] != quote) {
            fail(i_, end, "unterminated string",
                 std::string("close it with ") + quote + " on the same line");
            return;
        }
        push(TokenKind::string, i_, end + 1);
    }

    const SourceText& source_;
    DiagnosticList& diags_;
    std::vector<Token> tokens_;
    std::size_t i_ = 0;
};

enum class Kind { tensor, number, string, unknown };

std::string describe(const Token& token) {
    switch (token.kind) {
        case TokenKind::newline:
        case TokenKind::end:
            return "end of line";
        default:
            return in_quotes(token.text);
    }
}

constexpr char kStatementNote[] = "each line of ops is one assignment: name = expression";
constexpr char kStringNote[] =
    "a string names a dtype, as in to(x, \"bf16\"), or is einsum's equation";

/// Parses one line at a time; an error abandons the rest of its line (Failed), while errors of
/// meaning (functions, arities, kinds, names) are recorded and parsing goes on.
class Parser {
  public:
    Parser(const SourceText& source, std::vector<Token> tokens, const ProgramNames* names,
           DiagnosticList& diags)
        : source_(source), tokens_(std::move(tokens)), names_(names), diags_(diags) {}

    std::vector<Statement> run() {
        std::vector<Statement> statements;
        while (peek().kind != TokenKind::end) {
            if (peek().kind == TokenKind::newline) {
                ++pos_;
                continue;
            }
            Statement statement;
            try {
                parse_statement(statement);
            } catch (const Failed&) {
                statement.valid = false;
                while (peek().kind != TokenKind::newline && peek().kind != TokenKind::end) ++pos_;
            }
            if (statement.target.empty()) continue;
            if (std::find(assigned_.begin(), assigned_.end(), statement.target) == assigned_.end())
                assigned_.push_back(statement.target);
            statements.push_back(std::move(statement));
        }
        return statements;
    }

  private:
    struct Failed {};

    const Token& peek() const { return tokens_[pos_]; }

    const Token& take() {
        const Token& token = tokens_[pos_];
        if (token.kind != TokenKind::end) ++pos_;
        return token;
    }

    Span span_of(const Token& token) const { return span_between(source_, token.begin, token.end); }

    Span extent_from(std::size_t begin) const {
        return span_between(source_, begin, tokens_[pos_ - 1].end);
    }

    // the lexer recorded the diagnostic of an error token already
    [[noreturn]] void fail(const Token& token, std::string message, std::string note = {}) {
        if (token.kind != TokenKind::error)
            diags_.error(span_of(token), std::move(message), std::move(note));
        throw Failed{};
    }

    void error(const Span& at, std::string message, std::string note = {}) {
        diags_.error(at, std::move(message), std::move(note));
        line_valid_ = false;
    }

    void parse_statement(Statement& statement) {
        line_valid_ = true;
        const Token& target = take();
        if (target.kind != TokenKind::name)
            fail(target, "expected a name to assign to, got " + describe(target), kStatementNote);
        statement.target = target.text;
        statement.target_span = span_of(target);
        const Token& equals = take();
        if (equals.kind != TokenKind::equals)
            fail(equals,
                 "expected '=' after " + in_quotes(target.text) + ", got " + describe(equals),
                 kStatementNote);
        check_size();
        depth_ = 0;
        statement.value = parse_sum();
        const Token& after = peek();
        if (after.kind != TokenKind::newline && after.kind != TokenKind::end)
            fail(after, "expected an operator or end of line, got " + describe(after),
                 "one assignment per line");
        const Kind kind = check(statement.value);
        if (kind == Kind::number) {
            error(statement.value.extent,
                  in_quotes(statement.target) + " is assigned a number, not a tensor",
                  "use the number where it is needed, as in k = k * 0.5");
        } else if (kind == Kind::string) {
            error(statement.value.span, "unexpected string " + in_quotes(statement.value.text),
                  kStringNote);
        }
        statement.valid = line_valid_;
    }

    // a line's expression is a tree as large as the line: bounded, so that checking and running
    // it, which walk the tree, stay within the stack
    void check_size() {
        std::size_t end = pos_;
        while (tokens_[end].kind != TokenKind::newline && tokens_[end].kind != TokenKind::end)
            ++end;
        if (end - pos_ > kMaxExprTokens)
            fail(tokens_[pos_ + kMaxExprTokens],
                 "an expression of " + std::to_string(end - pos_) + " tokens, more than " +
                     std::to_string(kMaxExprTokens),
                 "split it over several lines, assigning its parts to names");
    }

    // the parser recurses once per parenthesis, minus sign and call
    void enter(const Token& at) {
        if (++depth_ > kMaxExprDepth)
            fail(at,
                 "an expression nested more than " + std::to_string(kMaxExprDepth) + " levels deep",
                 "assign inner parts to names on lines of their own");
    }

    Expr binary(ExprKind kind, const Token& op, Expr left, Expr right, std::size_t begin) {
        Expr e;
        e.kind = kind;
        e.span = span_of(op);
        e.operands.push_back(std::move(left));
        e.operands.push_back(std::move(right));
        e.extent = extent_from(begin);
        return e;
    }

    Expr parse_sum() {
        const std::size_t begin = peek().begin;
        Expr left = parse_product();
        while (peek().kind == TokenKind::plus || peek().kind == TokenKind::minus) {
            const Token& op = take();
            const ExprKind kind = op.kind == TokenKind::plus ? ExprKind::add : ExprKind::subtract;
            Expr right = parse_product();
            left = binary(kind, op, std::move(left), std::move(right), begin);
        }
        return left;
    }

    Expr parse_product() {
        const std::size_t begin = peek().begin;
        Expr left = parse_unary();
        while (peek().kind == TokenKind::star || peek().kind == TokenKind::slash) {
            const Token& op = take();
            const ExprKind kind =
                op.kind == TokenKind::star ? ExprKind::multiply : ExprKind::divide;
            Expr right = parse_unary();
            left = binary(kind, op, std::move(left), std::move(right), begin);
        }
        return left;
    }

    Expr parse_unary() {
        if (peek().kind != TokenKind::minus) return parse_primary();
        const std::size_t begin = peek().begin;
        const Token& op = take();
        enter(op);
        Expr e;
        e.kind = ExprKind::negate;
        e.span = span_of(op);
        e.operands.push_back(parse_unary());
        --depth_;
        e.extent = extent_from(begin);
        return e;
    }

    Expr parse_primary() {
        const Token& token = take();
        Expr e;
        e.span = span_of(token);
        switch (token.kind) {
            case TokenKind::number: {
                e.kind = ExprKind::number;
                e.text = token.text;
                e.number = std::strtod(token.text.c_str(), nullptr);
                // beyond 2^53 an integer is no longer exact in a double: it is passed as one
                e.integer = token.text.find_first_of(".eE") == std::string::npos &&
                            e.number < 9007199254740992.0;
                break;
            }
            case TokenKind::string:
                e.kind = ExprKind::string;
                e.text = token.text.substr(1, token.text.size() - 2);
                break;
            case TokenKind::name:
                if (peek().kind == TokenKind::open) return parse_call(token);
                e.kind = ExprKind::name;
                e.text = token.text;
                break;
            case TokenKind::open: {
                enter(token);
                Expr inner = parse_sum();
                const Token& close = take();
                if (close.kind != TokenKind::close)
                    fail(close, "expected ')', got " + describe(close),
                         "to close the '(' at column " + std::to_string(e.span.at.column));
                --depth_;
                // parentheses only group: the inner expression keeps its own token
                inner.extent = span_between(source_, token.begin, close.end);
                return inner;
            }
            default:
                fail(token, "expected an expression, got " + describe(token));
        }
        e.extent = e.span;
        return e;
    }

    Expr parse_call(const Token& name) {
        enter(name);
        const Token& open = take();
        Expr e;
        e.kind = ExprKind::call;
        e.text = name.text;
        e.span = span_of(name);
        const FunctionInfo* info = find_function(name.text);
        if (info) {
            e.function = info->function;
        } else {
            std::vector<std::string> known = function_names();
            error(e.span, "unknown function " + in_quotes(name.text),
                  did_you_mean_note(name.text, known));
        }
        if (peek().kind == TokenKind::close) {
            take();
        } else {
            while (true) {
                e.operands.push_back(parse_sum());
                const Token& next = take();
                if (next.kind == TokenKind::close) break;
                if (next.kind == TokenKind::comma) continue;
                fail(next,
                     "expected ',' or ')' after argument " + std::to_string(e.operands.size()) +
                         " of " + in_quotes(name.text) + ", got " + describe(next),
                     info
                         ? signature(*info)
                         : "to close the '(' at column " + std::to_string(span_of(open).at.column));
            }
        }
        e.extent = span_between(source_, name.begin, tokens_[pos_ - 1].end);
        --depth_;
        return e;
    }

    // ---- static checks: kinds, arities, dtype strings, names ----

    Kind check(const Expr& e) {
        switch (e.kind) {
            case ExprKind::number:
                return Kind::number;
            case ExprKind::string:
                return Kind::string;
            case ExprKind::name:
                check_name(e);
                return Kind::tensor;
            case ExprKind::negate:
                return operand_kind(e.operands[0]);
            case ExprKind::add:
            case ExprKind::subtract:
            case ExprKind::multiply:
            case ExprKind::divide: {
                const Kind left = operand_kind(e.operands[0]);
                const Kind right = operand_kind(e.operands[1]);
                if (left == Kind::unknown || right == Kind::unknown) return Kind::unknown;
                return left == Kind::number && right == Kind::number ? Kind::number : Kind::tensor;
            }
            case ExprKind::call:
                return check_call(e);
        }
        return Kind::unknown;
    }

    // an operand of arithmetic: a tensor or a number
    Kind operand_kind(const Expr& e) {
        const Kind kind = check(e);
        if (kind != Kind::string) return kind;
        error(e.span, "unexpected string " + in_quotes(e.text), kStringNote);
        return Kind::unknown;
    }

    static const char* kind_text(Kind kind) {
        switch (kind) {
            case Kind::tensor:
                return "a tensor";
            case Kind::number:
                return "a number";
            case Kind::string:
                return "a string";
            case Kind::unknown:
                break;
        }
        return "nothing";
    }

    Kind check_call(const Expr& e) {
        const FunctionInfo* info = find_function(e.text);
        const std::size_t given = e.operands.size();
        if (info && (given < info->required || given > info->params.size())) {
            error(e.span,
                  in_quotes(e.text) + " takes " + arity_text(*info) + ", got " +
                      std::to_string(given),
                  signature(*info));
            info = nullptr;
        }
        for (std::size_t i = 0; i < given; ++i) {
            const Expr& arg = e.operands[i];
            if (!info) {
                // the call is reported already; its arguments may still misuse names
                if (arg.kind != ExprKind::string) check(arg);
                continue;
            }
            const Param& param = info->params[i];
            const std::string which = "argument " + std::to_string(i + 1) + " of " +
                                      in_quotes(info->name) + " (" + std::string(param.name) + ")";
            if (param.kind == ArgKind::dtype) {
                check_dtype_argument(arg, which, *info);
                continue;
            }
            if (param.kind == ArgKind::equation) {
                if (arg.kind != ExprKind::string)
                    error(arg.extent,
                          which + " must be an einsum equation such as \"bhtk,bhsk->bhts\"",
                          signature(*info));
                continue;
            }
            const Kind kind = check(arg);
            const Kind wanted = param.kind == ArgKind::tensor ? Kind::tensor : Kind::number;
            if (kind != wanted && kind != Kind::unknown)
                error(arg.extent,
                      which + " must be " + kind_text(wanted) + ", got " + kind_text(kind),
                      signature(*info));
        }
        return Kind::tensor;
    }

    void check_dtype_argument(const Expr& arg, const std::string& which, const FunctionInfo& info) {
        if (arg.kind != ExprKind::string) {
            const std::string got = arg.kind == ExprKind::name ? "the name " + in_quotes(arg.text)
                                                               : std::string(kind_text(check(arg)));
            error(arg.extent, which + " must be a dtype string such as \"bf16\", got " + got,
                  arg.kind == ExprKind::name
                      ? "quote it: " + std::string(info.name) + "(x, \"" + arg.text + "\")"
                      : signature(info));
            return;
        }
        std::vector<std::string> allowed;
        for (DType d : prologue_dtypes()) allowed.emplace_back(dtype_name(d));
        if (std::find(allowed.begin(), allowed.end(), arg.text) != allowed.end()) return;
        if (parse_dtype(arg.text)) {
            error(arg.span, "dtype " + in_quotes(arg.text) + " is not supported by to()",
                  "to() takes " + join(allowed));
        } else {
            error(arg.span, "unknown dtype " + in_quotes(arg.text),
                  did_you_mean_note(arg.text, allowed));
        }
    }

    void check_name(const Expr& e) {
        if (!names_) return;
        const auto defined = [&](const std::vector<std::string>& list) {
            return std::find(list.begin(), list.end(), e.text) != list.end();
        };
        if (defined(names_->tensors) || defined(names_->kernel_inputs) || defined(assigned_))
            return;
        error(e.span, "unknown name " + in_quotes(e.text), names_note(e.text));
    }

    std::string names_note(const std::string& word) const {
        std::vector<std::string> above;
        for (const std::string& name : assigned_) {
            const auto& t = names_->tensors;
            const auto& k = names_->kernel_inputs;
            if (std::find(t.begin(), t.end(), name) == t.end() &&
                std::find(k.begin(), k.end(), name) == k.end())
                above.push_back(name);
        }
        std::vector<std::string> all = names_->tensors;
        all.insert(all.end(), names_->kernel_inputs.begin(), names_->kernel_inputs.end());
        all.insert(all.end(), above.begin(), above.end());
        if (auto match = closest_match(word, all)) return "did you mean '" + *match + "'?";
        std::vector<std::string> groups;
        if (!names_->tensors.empty())
            groups.push_back(join(names_->tensors) + " (prologue tensors)");
        if (!names_->kernel_inputs.empty())
            groups.push_back(join(names_->kernel_inputs) + " (kernel inputs)");
        if (!above.empty()) groups.push_back(join(above) + " (assigned above)");
        if (groups.empty()) return "declare it in [prologue.tensors]";
        return "defined here: " + join(groups, "; ");
    }

    const SourceText& source_;
    const std::vector<Token> tokens_;
    const ProgramNames* names_;
    DiagnosticList& diags_;
    std::size_t pos_ = 0;
    int depth_ = 0;                      ///< parentheses, minus signs and calls open at pos_
    std::vector<std::string> assigned_;  ///< targets of the lines so far, first assignment order
    bool line_valid_ = true;
};

}  // namespace

std::vector<Statement> parse_program(const SourceText& source, const ProgramNames* names,
                                     DiagnosticList& diags) {
    LAV_ASSERT(source.at.size() == source.text.size() + 1, "ops text and its locations differ");
    std::vector<Token> tokens = Lexer(source, diags).run();
    return Parser(source, std::move(tokens), names, diags).run();
}

std::string_view function_name(Function function) {
    for (const FunctionInfo& info : function_table())
        if (info.function == function) return info.name;
    LAV_ASSERT(false, "function missing from the table");
    return {};
}

std::vector<std::string> function_names() {
    std::vector<std::string> names;
    for (const FunctionInfo& info : function_table()) names.emplace_back(info.name);
    return names;
}

const std::vector<DType>& prologue_dtypes() {
    static const std::vector<DType> dtypes = {DType::fp64, DType::fp32, DType::fp16, DType::bf16};
    return dtypes;
}

namespace {

// binding strength: sums, products, unary minus, primaries
int precedence(ExprKind kind) {
    switch (kind) {
        case ExprKind::add:
        case ExprKind::subtract:
            return 1;
        case ExprKind::multiply:
        case ExprKind::divide:
            return 2;
        case ExprKind::negate:
            return 3;
        default:
            return 4;
    }
}

std::string written(const Expr& e) {
    switch (e.kind) {
        case ExprKind::number: {
            char buf[32];
            if (e.integer)
                std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(e.number));
            else
                std::snprintf(buf, sizeof buf, "%g", e.number);
            return buf;
        }
        case ExprKind::name:
            return e.text;
        case ExprKind::string:
            return "\"" + e.text + "\"";
        case ExprKind::call: {
            std::string out = e.text + "(";
            for (std::size_t i = 0; i < e.operands.size(); ++i)
                out += (i ? ", " : "") + written(e.operands[i]);
            return out + ")";
        }
        case ExprKind::negate: {
            const std::string operand = written(e.operands[0]);
            return precedence(e.operands[0].kind) < 3 ? "-(" + operand + ")" : "-" + operand;
        }
        default: {
            static const char* const symbol[] = {" + ", " - ", " * ", " / "};
            const int p = precedence(e.kind);
            const auto side = [&](const Expr& x, bool right) {
                // a right operand of equal precedence keeps its parentheses: a - (b - c)
                const bool wrap = precedence(x.kind) < p || (right && precedence(x.kind) == p);
                return wrap ? "(" + written(x) + ")" : written(x);
            };
            const int op = static_cast<int>(e.kind) - static_cast<int>(ExprKind::add);
            return side(e.operands[0], false) + symbol[op] + side(e.operands[1], true);
        }
    }
}

}  // namespace

std::string expression_text(const Expr& e) {
    constexpr std::size_t kMax = 60;
    const std::string text = written(e);
    if (text.size() <= kMax) return text;
    // cut at a character boundary: UTF-8 continuation bytes stay with their lead byte
    std::size_t head = kMax / 2, tail = text.size() - kMax / 2 + 1;
    while (head > 0 && (static_cast<unsigned char>(text[head]) & 0xC0) == 0x80) --head;
    while (tail < text.size() && (static_cast<unsigned char>(text[tail]) & 0xC0) == 0x80) ++tail;
    return text.substr(0, head) + "…" + text.substr(tail);
}

}  // namespace lav::scenario
