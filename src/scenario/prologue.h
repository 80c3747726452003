// src/scenario/prologue.h — a scenario's [prologue] as parsed: declared tensors and the ops
// program. No tensors and no evaluation here (see harness/prologue.h).
//
// A prologue is the user's op sequence that turns activations and parameters into the kernel's
// inputs, written so that lav can replay it with the same LibTorch ops and see where a dtype
// changes. The loader fills one Prologue per case: the program is parsed once per file (see
// scenario/expr.h), while the autocast mode, each tensor's dtype and its sizes are the case's.
//
//   [prologue]
//   ops = """
//   k = addcmul(k, k * (a - 1.0), k_a)
//   """
//   [prologue.tensors]
//   a   = { shape = ["B", "T", "H", "K"], dtype = "fp16" }
//   k_a = { shape = ["K"], dtype = "fp32", parameter = true }
//
// Or the user's own Python, `python = "rwkv7.py:prologue"` in place of `ops` (the file relative
// to the scenario file): lav calls that function on the same tensors (providers/python.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "scenario/diagnostics.h"

namespace lav::scenario {

/// The autocast region the ops run in.
enum class AutocastMode {
    off,       ///< no region: the ops run as they are
    bf16,      ///< an autocast region with bf16 as the lower precision type, on the tensors' device
    fp16,      ///< a CUDA autocast region with fp16; an error for tensors on the CPU
    disabled,  ///< a region with autocast explicitly off (torch.autocast(enabled=False))
};

/// "off", "bf16", "fp16", "disabled": the spelling in scenario files.
inline std::string_view autocast_name(AutocastMode mode) {
    switch (mode) {
        case AutocastMode::off:
            return "off";
        case AutocastMode::bf16:
            return "bf16";
        case AutocastMode::fp16:
            return "fp16";
        case AutocastMode::disabled:
            return "disabled";
    }
    return "off";
}

/// One size of a declared tensor as written: a positive integer, or a size symbol of the case,
/// alone or times or divided by a positive integer ("K", "K/2", "H*2").
struct ShapeDim {
    std::string symbol;  ///< "B", "T", "H", "K", "V" or "HV"; empty for a plain number
    char op = '*';       ///< '*' or '/' between the symbol and `factor`
    int64_t factor = 1;  ///< the multiplier or divisor; the size itself when `symbol` is empty
    std::string text;    ///< as written, for messages
    Span span;
};

/// A tensor the prologue declares beside the kernel inputs: an activation or a parameter.
struct PrologueTensor {
    std::string name;
    Span span;                   ///< its key in [prologue.tensors]
    std::vector<ShapeDim> dims;  ///< the shape as written
    std::vector<int64_t> shape;  ///< the case's sizes; empty for a 0-dim tensor
    DType dtype = DType::fp32;   ///< the case's dtype (left out: the case's inputs dtype)
    bool parameter = false;      ///< a model parameter rather than an activation (for tracers)
    std::string dist = "randn";  ///< randn, rand, zeros or ones
    double scale = 1.0;          ///< randn and rand draw scale · N(0, 1), scale · U[0, 1)
};

enum class ExprKind { number, name, string, negate, add, subtract, multiply, divide, call };

/// The functions ops may call; scenarios/README.md gives the semantics of each.
enum class Function {
    addcmul,
    matmul,
    linear,
    normalize,
    l2norm,
    rms_norm,
    layer_norm,
    exp,
    sigmoid,
    logsigmoid,
    softplus,
    silu,
    softmax,
    to,
    rotary,
    transpose,
    elu,
    log,
    rsqrt,
    clamp,
    sum,
    mean,
    cat,
    stack,
    where,
    einsum,
};

/// One node of an expression, with where it was written.
struct Expr {
    ExprKind kind = ExprKind::number;
    double number = 0;
    bool integer = false;  ///< a number written without '.' or exponent (an integer scalar)
    /// the name, the string's contents (no quotes), or the function name as written
    std::string text;
    Function function = Function::addcmul;  ///< for a call
    std::vector<Expr> operands;             ///< an operator's operands or a call's arguments
    Span span;    ///< the token: number, name, string, operator or function name
    Span extent;  ///< the whole expression, first to last character
};

/// `target = value`, one line of ops.
struct Statement {
    std::string target;
    Span target_span;
    Expr value;
    /// false when the line had an error; the target still counts as assigned for later lines
    bool valid = true;
};

/// `[prologue] python = "path/file.py:function"`, the file resolved against the scenario's folder.
struct PythonFunction {
    std::string file;      ///< the path as lav opens it
    std::string function;  ///< a function defined at the top level of `file`
    Span span;             ///< the key's value, for errors found while it runs
    /// the case's sizes (B, T, H, K, V, HV) and seed, for the module factory (make_module)
    std::map<std::string, int64_t> sizes;
    uint64_t seed = 0;
};

struct Prologue {
    AutocastMode autocast = AutocastMode::off;
    Span autocast_span;                    ///< the autocast value, or the [prologue] header
    std::vector<PrologueTensor> tensors;   ///< in declaration order
    std::vector<Statement> statements;     ///< in execution order; empty for a Python prologue
    std::optional<PythonFunction> python;  ///< set instead of `statements`
    std::string file;
    /// the scenario file's lines, shared by its cases, to quote in errors found while the ops
    /// run; null for a prologue that was not loaded from a file
    std::shared_ptr<const std::vector<std::string>> source_lines;

    /// Line `line` (1-based) of the scenario file; "" when unknown.
    std::string_view source_line(int line) const {
        if (!source_lines || line < 1 || line > static_cast<int>(source_lines->size())) return {};
        return (*source_lines)[static_cast<std::size_t>(line - 1)];
    }

    /// The declared tensor called `name`; nullptr when there is none.
    const PrologueTensor* find_tensor(std::string_view name) const {
        for (const PrologueTensor& t : tensors)
            if (t.name == name) return &t;
        return nullptr;
    }
};

}  // namespace lav::scenario
