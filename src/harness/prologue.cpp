// src/harness/prologue.cpp — the prologue executor: one ATen op per function of the ops
// language, autocast regions, and the declared tensors' generator. No parsing here.
#include "harness/prologue.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "scenario/diagnostics.h"
#include "scenario/expr.h"

namespace lav::harness {
namespace {

using scenario::Expr;
using scenario::ExprKind;
using scenario::Function;
using scenario::Prologue;
using scenario::Span;

// FNV-1a: a stable hash, so seeds are the same on every platform and build
uint64_t fnv1a(std::string_view text, uint64_t h) {
    for (unsigned char ch : text) {
        h ^= ch;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/// An op's arguments refused by lav's own checks; reported like LibTorch's errors.
struct OpFailure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string shape_text(const at::Tensor& t) {
    std::string out = "[";
    for (int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
    return out + "]";
}

// LibTorch's message without the lines of context and backtrace after the first
std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

/// Rotate-half rotary embedding: x [..., T, H, D], freqs [T, D/2] or [T, D] (angles in
/// radians); dimension i turns with dimension i + D/2 by the angle freqs[t, i mod D/2].
// What names a tensor an op made: the text it gets in findings (PrologueHooks::on_value).
using Namer = std::function<void(const std::string& text, const at::Tensor& tensor)>;

at::Tensor rotary(const at::Tensor& x, const at::Tensor& freqs, const std::string& freqs_text,
                  const Namer& name) {
    if (x.dim() < 3) throw OpFailure("rotary needs x as [..., T, H, D], got " + shape_text(x));
    const int64_t D = x.size(-1);
    const int64_t T = x.size(-3);
    if (D % 2 != 0) throw OpFailure("rotary needs an even head dim D, got " + std::to_string(D));
    if (freqs.dim() != 2 || freqs.size(0) != T || (freqs.size(1) != D / 2 && freqs.size(1) != D))
        throw OpFailure("rotary needs freqs as [T, D/2] or [T, D] = [" + std::to_string(T) + ", " +
                        std::to_string(D / 2) + "] or [" + std::to_string(T) + ", " +
                        std::to_string(D) + "] for x of shape " + shape_text(x) + ", got " +
                        shape_text(freqs));
    const at::Tensor angles = freqs.size(1) == D ? freqs : at::cat({freqs, freqs}, -1);  // [T, D]
    // [T, 1, D]: the same angles for every head, broadcast over the leading dims
    const at::Tensor cos = at::cos(angles).unsqueeze(-2);
    const at::Tensor sin = at::sin(angles).unsqueeze(-2);
    if (name) name("cos(" + freqs_text + ")", cos), name("sin(" + freqs_text + ")", sin);
    const at::Tensor x1 = x.narrow(-1, 0, D / 2);      // [..., T, H, D/2]
    const at::Tensor x2 = x.narrow(-1, D / 2, D / 2);  // [..., T, H, D/2]
    const at::Tensor rotated = at::cat({at::neg(x2), x1}, -1);
    return at::add(at::mul(x, cos), at::mul(rotated, sin));
}

/// F.normalize(x, dim=-1): x / max(‖x‖₂, 1e-12) over the last dim, through the same ops
/// (torch.nn.functional.normalize calls Tensor.norm, which is linalg.vector_norm).
at::Tensor normalize(const at::Tensor& x) {
    const at::Tensor norm = at::linalg_vector_norm(x, 2, {-1}, /*keepdim=*/true, std::nullopt);
    return at::div(x, norm.clamp_min(1e-12).expand_as(x));
}

/// fla's l2norm: x / sqrt(Σx² + 1e-6) over the last dim, computed in fp32 (fp64 for fp64 x)
/// and stored in x's dtype, as fla's fused kernel does.
at::Tensor l2norm(const at::Tensor& x) {
    const at::Tensor wide = x.to(at::promote_types(x.scalar_type(), at::kFloat));
    const at::Tensor sum = at::sum(at::mul(wide, wide), {-1}, /*keepdim=*/true);
    return at::mul(wide, at::rsqrt(at::add(sum, 1e-6))).to(x.scalar_type());
}

/// What an expression evaluates to: a tensor, or a number. Numbers are Python scalars: they
/// combine among themselves as Python does, and meet tensors as weakly typed scalars.
struct Value {
    at::Tensor tensor;  ///< defined for a tensor
    at::Scalar number;
};

std::string_view operator_text(ExprKind kind) {
    switch (kind) {
        case ExprKind::add:
            return "+";
        case ExprKind::subtract:
        case ExprKind::negate:
            return "-";
        case ExprKind::multiply:
            return "*";
        case ExprKind::divide:
            return "/";
        default:
            return "?";
    }
}

class Executor {
  public:
    Executor(const Prologue& prologue, const TensorMap& env, Namer name)
        : prologue_(prologue), env_(env), name_(std::move(name)) {}

    at::Tensor run(const scenario::Statement& statement) {
        target_ = &statement.target;
        const Value value = evaluate(statement.value);
        LAV_ASSERT(value.tensor.defined(), "ops assigned a number to '", statement.target, "'");
        return value.tensor;
    }

    [[noreturn]] void fail(const Span& at, const std::string& message, const std::string& note) {
        throw ScenarioError(prologue_diagnostic(prologue_, at, message, note));
    }

  private:
    // a tensor an expression computed, named by its text
    Value named(const Expr& e, const at::Tensor& t) {
        if (name_) name_(scenario::expression_text(e), t);
        return {t, {}};
    }

    Value evaluate(const Expr& e) {
        switch (e.kind) {
            case ExprKind::number:
                return {
                    {},
                    e.integer ? at::Scalar(static_cast<int64_t>(e.number)) : at::Scalar(e.number)};
            case ExprKind::name:
                return {lookup(e), {}};
            case ExprKind::negate: {
                const Value operand = evaluate(e.operands[0]);
                if (!operand.tensor.defined()) return {{}, -operand.number};
                return named(e, apply(e, [&] { return at::neg(operand.tensor); }));
            }
            case ExprKind::add:
            case ExprKind::subtract:
            case ExprKind::multiply:
            case ExprKind::divide: {
                const Value left = evaluate(e.operands[0]);
                const Value right = evaluate(e.operands[1]);
                if (!left.tensor.defined() && !right.tensor.defined())
                    return {{}, fold(e, left.number, right.number)};
                return named(e, apply(e, [&] { return arithmetic(e.kind, left, right); }));
            }
            case ExprKind::call:
                return named(e, call(e));
            case ExprKind::string:
                break;
        }
        LAV_ASSERT(false, "a string outside to() passed the checks");
        return {};
    }

    const at::Tensor& lookup(const Expr& e) {
        const auto found = env_.find(e.text);
        if (found != env_.end()) return found->second;
        std::vector<std::string> names;
        for (const auto& [name, tensor] : env_) names.push_back(name);
        fail(e.span, "'" + e.text + "' is not a tensor of this case",
             "this case has: " + scenario::join(names));
    }

    // numbers combine as in Python: integers stay integers except under '/'
    at::Scalar fold(const Expr& e, const at::Scalar& a, const at::Scalar& b) {
        if (a.isIntegral(false) && b.isIntegral(false) && e.kind != ExprKind::divide) {
            const int64_t x = a.toLong();
            const int64_t y = b.toLong();
            return e.kind == ExprKind::add ? x + y : e.kind == ExprKind::subtract ? x - y : x * y;
        }
        const double x = a.toDouble();
        const double y = b.toDouble();
        switch (e.kind) {
            case ExprKind::add:
                return x + y;
            case ExprKind::subtract:
                return x - y;
            case ExprKind::multiply:
                return x * y;
            default:
                if (y == 0) fail(e.span, "division by zero", "");
                return x / y;
        }
    }

    // a number on the left takes Python's reflected operator of the tensor on the right
    // (Tensor.__radd__, __rsub__, __rmul__, __rtruediv__), which is what decides the ops called
    static at::Tensor arithmetic(ExprKind kind, const Value& a, const Value& b) {
        if (a.tensor.defined() && b.tensor.defined()) {
            switch (kind) {
                case ExprKind::add:
                    return at::add(a.tensor, b.tensor);
                case ExprKind::subtract:
                    return at::sub(a.tensor, b.tensor);
                case ExprKind::multiply:
                    return at::mul(a.tensor, b.tensor);
                default:
                    return at::div(a.tensor, b.tensor);
            }
        }
        if (a.tensor.defined()) {
            switch (kind) {
                case ExprKind::add:
                    return at::add(a.tensor, b.number);
                case ExprKind::subtract:
                    return at::sub(a.tensor, b.number);
                case ExprKind::multiply:
                    return at::mul(a.tensor, b.number);
                default:
                    return at::div(a.tensor, b.number);
            }
        }
        switch (kind) {
            case ExprKind::add:
                return at::add(b.tensor, a.number);
            case ExprKind::subtract:
                return at::rsub(b.tensor, a.number);
            case ExprKind::multiply:
                return at::mul(b.tensor, a.number);
            default:
                return at::mul(at::reciprocal(b.tensor), a.number);
        }
    }

    at::Tensor call(const Expr& e) {
        // arguments are evaluated left to right before the call, as in Python
        std::vector<Value> args;
        for (const Expr& arg : e.operands)
            args.push_back(arg.kind == ExprKind::string ? Value{} : evaluate(arg));
        const auto t = [&](std::size_t i) { return args[i].tensor; };
        const auto given = [&](std::size_t i) { return i < args.size(); };
        return apply(e, [&]() -> at::Tensor {
            switch (e.function) {
                case Function::addcmul:
                    return at::addcmul(t(0), t(1), t(2), given(3) ? args[3].number : at::Scalar(1));
                case Function::matmul:
                    return at::matmul(t(0), t(1));
                case Function::linear:
                    return at::linear(t(0), t(1),
                                      given(2) ? std::optional<at::Tensor>(t(2)) : std::nullopt);
                case Function::normalize:
                    return normalize(t(0));
                case Function::l2norm:
                    return l2norm(t(0));
                case Function::rms_norm:
                    // F.rms_norm(x, [D], w, eps): eps None means the dtype's epsilon
                    return at::rms_norm(
                        t(0), {t(0).size(-1)}, t(1),
                        given(2) ? std::optional<double>(args[2].number.toDouble()) : std::nullopt);
                case Function::layer_norm:
                    return at::layer_norm(t(0), {t(0).size(-1)}, t(1), t(2),
                                          given(3) ? args[3].number.toDouble() : 1e-5);
                case Function::exp:
                    return at::exp(t(0));
                case Function::sigmoid:
                    return at::sigmoid(t(0));
                case Function::logsigmoid:
                    return at::log_sigmoid(t(0));
                case Function::softplus:
                    return at::softplus(t(0));
                case Function::silu:
                    return at::silu(t(0));
                case Function::softmax:
                    return at::softmax(t(0), -1);
                case Function::to: {
                    const auto dtype = parse_dtype(e.operands[1].text);
                    LAV_ASSERT(dtype.has_value(), "to() took an unknown dtype past the checks");
                    return t(0).to(to_scalar_type(*dtype));
                }
                case Function::rotary:
                    return rotary(t(0), t(1), scenario::expression_text(e.operands[1]), name_);
                case Function::transpose:
                    return at::transpose(t(0), whole(args[1].number, "dim0"),
                                         whole(args[2].number, "dim1"));
                case Function::elu:
                    return at::elu(t(0), given(1) ? args[1].number : at::Scalar(1.0));
                case Function::log:
                    return at::log(t(0));
                case Function::rsqrt:
                    return at::rsqrt(t(0));
                case Function::clamp:
                    return at::clamp(t(0), args[1].number, args[2].number);
                case Function::sum:
                    return at::sum(t(0), {whole(args[1].number, "dim")});
                case Function::mean:
                    return at::mean(t(0), {whole(args[1].number, "dim")});
                case Function::cat:
                    return at::cat({t(0), t(1)}, whole(args[2].number, "dim"));
                case Function::stack:
                    return at::stack({t(0), t(1)}, whole(args[2].number, "dim"));
                case Function::where:
                    // a condition is any tensor, true where it is non-zero
                    return at::where(t(0).ne(0), t(1), t(2));
                case Function::einsum: {
                    std::vector<at::Tensor> operands = {t(1)};
                    if (given(2)) operands.push_back(t(2));
                    return at::einsum(e.operands[0].text, operands);
                }
            }
            LAV_ASSERT(false, "function missing from the executor");
            return {};
        });
    }

    // a dim argument must be an integer, as torch's are
    static int64_t whole(const at::Scalar& number, const char* what) {
        if (!number.isIntegral(false))
            throw OpFailure(std::string("dims are whole numbers, got ") + what + " = " +
                            std::to_string(number.toDouble()));
        return number.toLong();
    }

    /// Runs one op; a failure becomes a ScenarioError at the op's token.
    template <typename Op>
    at::Tensor apply(const Expr& e, const Op& op) {
        const std::string what =
            e.kind == ExprKind::call ? e.text : std::string(operator_text(e.kind));
        const std::string message = "'" + what + "' failed in the assignment to '" + *target_ + "'";
        try {
            return op();
        } catch (const c10::Error& error) {
            fail(e.span, message, first_line(error.what_without_backtrace()));
        } catch (const OpFailure& error) {
            fail(e.span, message, error.what());
        }
    }

    const Prologue& prologue_;
    const TensorMap& env_;
    Namer name_;
    const std::string* target_ = nullptr;
};

}  // namespace

std::string prologue_diagnostic(const Prologue& prologue, const Span& at,
                                const std::string& message, const std::string& note) {
    const scenario::Diagnostic diagnostic{at, message, note};
    return scenario::render_diagnostic(diagnostic, prologue.source_line(at.at.line)) +
           "\n1 error in " + prologue.file;
}

TensorMap make_prologue_tensors(const scenario::Prologue& prologue, uint64_t seed) {
    TensorMap out;
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    for (const scenario::PrologueTensor& t : prologue.tensors) {
        // the salt keeps these streams apart from the kernel inputs' (harness/inputs.cpp)
        const uint64_t stream =
            fnv1a(t.name, fnv1a("prologue", (seed + 1) * 0x9e3779b97f4a7c15ULL));
        at::Generator rng = at::detail::createCPUGenerator(stream);
        at::Tensor drawn;
        if (t.dist == "randn") {
            drawn = at::randn(t.shape, rng, opts) * t.scale;
        } else if (t.dist == "rand") {
            drawn = at::rand(t.shape, rng, opts) * t.scale;
        } else if (t.dist == "zeros") {
            drawn = at::zeros(t.shape, opts);
        } else {
            LAV_ASSERT(t.dist == "ones", "unknown prologue dist '", t.dist, "' passed validation");
            drawn = at::ones(t.shape, opts) * t.scale;
        }
        out[t.name] = drawn.to(to_scalar_type(t.dtype));
    }
    return out;
}

TensorMap run_prologue(const scenario::Prologue& prologue, TensorMap env,
                       const PrologueHooks& hooks, const PythonRunner& python) {
    // a Python prologue's inputs are labelled as Python holds them, by the runner
    if (hooks.on_input && !prologue.python)
        for (const auto& [name, tensor] : env) hooks.on_input(name, tensor);
    const at::DeviceType device = env.empty() ? at::kCPU : env.begin()->second.device().type();
    Executor executor(prologue, env, hooks.on_value);
    std::optional<trace::AutocastGuard> region;
    switch (prologue.autocast) {
        case scenario::AutocastMode::off:
            break;
        case scenario::AutocastMode::bf16:
            region.emplace(device, true, at::kBFloat16);
            break;
        case scenario::AutocastMode::fp16:
            if (device != at::kCUDA)
                executor.fail(prologue.autocast_span,
                              "autocast 'fp16' is CUDA autocast, and this case's tensors are on "
                              "the " +
                                  c10::DeviceTypeName(device),
                              "use autocast = \"bf16\" for a CPU autocast region");
            region.emplace(device, true, at::kHalf);
            break;
        case scenario::AutocastMode::disabled:
            region.emplace(device, false, std::nullopt);
            break;
    }
    if (prologue.python) {
        if (!python)
            throw EnvironmentError(prologue_diagnostic(
                prologue, prologue.python->span, "this run of lav cannot call Python prologues",
                "lav run calls them where its build has Python"));
        for (auto& [name, value] : python(prologue, env, hooks)) {
            if (hooks.on_assign) hooks.on_assign(name, value);
            env[name] = std::move(value);
        }
        return env;
    }
    for (const scenario::Statement& statement : prologue.statements) {
        LAV_ASSERT(statement.valid, "a prologue with errors was run");
        const at::Tensor value = executor.run(statement);
        env[statement.target] = value;
        if (hooks.on_assign) hooks.on_assign(statement.target, value);
    }
    return env;
}

}  // namespace lav::harness
