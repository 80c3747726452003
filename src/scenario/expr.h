// src/scenario/expr.h — the prologue's ops language: lexer, parser and static checks. No
// tensors and no evaluation here (see harness/prologue.h).
//
// `ops` holds one assignment per line; `#` starts a comment. The right side is an expression
// over names (tensors), numbers, dtype strings and calls, with Python's precedence:
//
//   statement := name '=' sum
//   sum       := product { ('+' | '-') product }
//   product   := unary { ('*' | '/') unary }
//   unary     := '-' unary | primary
//   primary   := number | string | name | name '(' [sum { ',' sum }] ')' | '(' sum ')'
//
// The parser knows every function's arity and argument kinds (tensor, number, dtype string), and
// checks that each name is defined before it is read. Errors go to a DiagnosticList at the place
// in the scenario file where the offending token was written, which is why the text comes with a
// location for each of its bytes:
//
//   SourceText ops = ...;  // the decoded TOML string, each byte located in the file
//   ProgramNames names{{"a", "k_a"}, {"q", "k", "v"}};
//   std::vector<Statement> program = parse_program(ops, &names, diags);
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/source_location.h"
#include "scenario/diagnostics.h"
#include "scenario/prologue.h"

namespace lav::scenario {

/// Text with where each of its bytes was written, so that errors point into the scenario file.
struct SourceText {
    std::string text;
    /// at[i] is where text[i] was written; one more entry, at[text.size()], is where the text
    /// ends (its closing quotes)
    std::vector<SourceLocation> at;
};

/// The names a program may read before its first assignment.
struct ProgramNames {
    std::vector<std::string> tensors;        ///< [prologue.tensors], in declaration order
    std::vector<std::string> kernel_inputs;  ///< the family's inputs, generated before the ops
};

/// Parses and checks `source`: syntax, functions, arities, argument kinds, dtype strings, and,
/// when `names` is given, that every name is defined before it is read (names are not checked
/// when the family is unknown). Each error is recorded in `diags`; a line with an error is
/// returned with valid = false, and its target still counts as assigned for later lines.
std::vector<Statement> parse_program(const SourceText& source, const ProgramNames* names,
                                     DiagnosticList& diags);

/// `e` written back as ops text ("normalize(q) * scale_mul"), with the parentheses its
/// precedence needs; longer than 60 characters, cut in the middle with "…".
std::string expression_text(const Expr& e);

/// The name of a function as ops spell it: "addcmul", "rms_norm", ...
std::string_view function_name(Function function);

/// Every function ops may call, in the order of the Function enum.
std::vector<std::string> function_names();

/// The dtypes of prologue tensors and of to(): fp64, fp32, fp16, bf16.
const std::vector<DType>& prologue_dtypes();

}  // namespace lav::scenario
