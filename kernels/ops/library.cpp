// kernels/ops/library.cpp — lav's CUDA rows as PyTorch ops with autograd:
// torch.ops.load_library("liblav_ops.so"), then torch.ops.lav.chunk_gla(q, k, v, g, ...) etc.
//
// There is one op per CUDA row of the families in LAV_CUDA_ROWS (cmake/LavFamilies.cmake),
// named <variant>_<family> with "recurrent" spelled fused_recurrent as flash-linear-attention
// does (chunk_gla, fused_recurrent_hgrn), and its schema is read off the family's declaration
// (src/harness/family.h). Its arguments, in order:
//
//   the inputs and gates every case has, as Tensor, in declaration order;
//   those a case has under a condition (`when`), as Tensor? <name>=None;
//   float? scale=None (None: K^-0.5; a family without a scale, hgrn, refuses one);
//   the states, as Tensor? <name>=None, h0 spelled initial_state as FLA spells it;
//   Tensor? cu_seqlens=None, bool head_first=False, ScalarType? state_dtype=None (float32),
//   and int chunk_size=64 for the chunk variant;
//   keyword only, the family's options as str? <option>=None.
//
// e.g. chunk_simple_gla(Tensor q, Tensor k, Tensor v, Tensor? g=None, Tensor? g_gamma=None,
// float? scale=None, Tensor? initial_state=None, Tensor? cu_seqlens=None, bool head_first=False,
// ScalarType? state_dtype=None, int chunk_size=64, *, str? gate=None) -> (Tensor, Tensor).
// An op returns the declared outputs in order (o, then the final state). Tensors have the
// declaration's shapes (q [B, T, H, K], or [B, H, T, K] with head_first; hgrn's x [B, T, H, K],
// FLA's [B, T, D] being [B, T, 1, D]), checked against each other. An option left None takes
// the first of its values that the tensors given fit (simple_gla: gate=g with g, g_gamma with
// g_gamma, none with neither), and the family's own checks (Family::check) run on the call.
// The backward pass runs the row's backward and returns "d" + name to each tensor argument;
// an output that took no part in the loss gets a cotangent of zeros. cu_seqlens is copied to
// the host (Call holds it as offsets), so a varlen call waits for the device once.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/glue/cuda_glue.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/row.h"
#include "harness/family.h"

// ops/cuda_rows.inc (generated from LAV_CUDA_ROWS): LAV_CUDA_ROWS_OF(<f>) for each family
// with CUDA rows; its declaration is in src/harness/<f>_family.cpp, its rows in its CUDA glue.
#define LAV_CUDA_ROWS_OF(f)                    \
    namespace lav::harness {                   \
    Family f##_family();                       \
    }                                          \
    namespace lav::kernels {                   \
    void add_##f##_cuda_rows(RowTable& table); \
    }
#include "ops/cuda_rows.inc"
#undef LAV_CUDA_ROWS_OF

namespace lav::ops {
namespace {

using harness::Family;
using harness::Role;
using harness::TensorDecl;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

enum class ArgKind { tensor, scale, cu_seqlens, head_first, state_dtype, chunk_size, option };

struct Arg {
    ArgKind kind;
    std::string name;                    ///< as the schema spells it
    const TensorDecl* tensor = nullptr;  ///< ArgKind::tensor: its declaration
    bool optional = false;               ///< ArgKind::tensor: Tensor? <name>=None
};

/// One op: a CUDA row and the declaration of its family.
struct Op {
    std::string name;  ///< chunk_gla
    const Family* family = nullptr;
    const Row* row = nullptr;
    std::vector<Arg> args;
    std::vector<const TensorDecl*> outputs, cotangents;  ///< declaration order, paired
};

/// The settings an op call gives besides its tensors.
struct Settings {
    std::optional<double> scale;
    bool head_first = false;
    c10::ScalarType state_dtype = c10::ScalarType::Float;
    int64_t chunk_size = 64;
    std::vector<int64_t> cu_seqlens;             ///< empty: a dense batch
    std::map<std::string, std::string> options;  ///< those given
    std::string given;  ///< per tensor argument, '1' where it is given, '0' where it is None
};

bool is_input(Role r) { return r == Role::input || r == Role::gate; }

std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    std::string item;
    for (char ch : text + sep) {
        if (ch != sep) {
            item += ch;
        } else if (!item.empty()) {
            out.push_back(item);
            item.clear();
        }
    }
    return out;
}

std::string op_name(const Row& row) {
    return (row.variant == "recurrent" ? "fused_recurrent" : row.variant) + "_" + row.family;
}

Op make_op(const Family& f, const Row& row) {
    Op op;
    op.name = op_name(row);
    op.family = &f;
    op.row = &row;
    for (const TensorDecl& t : f.tensors)
        if (is_input(t.role) && t.when.empty()) op.args.push_back({ArgKind::tensor, t.name, &t});
    for (const TensorDecl& t : f.tensors)
        if (is_input(t.role) && !t.when.empty())
            op.args.push_back({ArgKind::tensor, t.name, &t, true});
    op.args.push_back({ArgKind::scale, "scale"});
    int initial_states = 0;
    for (const TensorDecl& t : f.tensors)
        initial_states += t.role == Role::state && t.when == "initial_state";
    for (const TensorDecl& t : f.tensors)
        if (t.role == Role::state)
            op.args.push_back(
                {ArgKind::tensor,
                 t.when == "initial_state" && initial_states == 1 ? "initial_state" : t.name, &t,
                 true});
    op.args.push_back({ArgKind::cu_seqlens, "cu_seqlens"});
    op.args.push_back({ArgKind::head_first, "head_first"});
    op.args.push_back({ArgKind::state_dtype, "state_dtype"});
    if (row.variant == "chunk") op.args.push_back({ArgKind::chunk_size, "chunk_size"});
    for (const auto& [option, values] : f.options) op.args.push_back({ArgKind::option, option});
    for (const TensorDecl& t : f.tensors) {
        if (t.role == Role::output) op.outputs.push_back(&t);
        if (t.role == Role::cotangent) op.cotangents.push_back(&t);
    }
    LAV_ASSERT(!op.outputs.empty() && op.outputs.size() == op.cotangents.size(), f.name,
               " declares ", op.outputs.size(), " outputs and ", op.cotangents.size(),
               " cotangents");
    return op;
}

std::string schema_of(const Op& op) {
    std::string s = op.name + "(";
    bool keywords = false;
    for (size_t i = 0; i < op.args.size(); ++i) {
        const Arg& a = op.args[i];
        s += i ? ", " : "";
        if (a.kind == ArgKind::option && !keywords) s += "*, ", keywords = true;
        switch (a.kind) {
            case ArgKind::tensor:
                s += a.optional ? "Tensor? " + a.name + "=None" : "Tensor " + a.name;
                break;
            case ArgKind::scale:
                s += "float? scale=None";
                break;
            case ArgKind::cu_seqlens:
                s += "Tensor? cu_seqlens=None";
                break;
            case ArgKind::head_first:
                s += "bool head_first=False";
                break;
            case ArgKind::state_dtype:
                s += "ScalarType? state_dtype=None";
                break;
            case ArgKind::chunk_size:
                s += "int chunk_size=64";
                break;
            case ArgKind::option:
                s += "str? " + a.name + "=None";
                break;
        }
    }
    s += ") -> ";
    if (op.outputs.size() == 1) return s + "Tensor";
    s += "(";
    for (size_t i = 0; i < op.outputs.size(); ++i) s += i ? ", Tensor" : "Tensor";
    return s + ")";
}

/// The families with CUDA rows, their rows and an op per row; made once, when the library loads.
struct Ops {
    std::vector<Family> families;
    RowTable rows;
    std::vector<Op> ops;

    Ops() {
#define LAV_CUDA_ROWS_OF(f)                    \
    families.push_back(harness::f##_family()); \
    kernels::add_##f##_cuda_rows(rows);
#include "ops/cuda_rows.inc"
#undef LAV_CUDA_ROWS_OF
        // the rows turn on NaN-poisoned outputs for lav's runner; an op would pay a pass for it
        kernels::set_poison_outputs(false);
        for (const Row& row : rows.rows()) {
            if (row.device != "cuda") continue;
            for (const Family& f : families)
                if (f.name == row.family) ops.push_back(make_op(f, row));
        }
    }

    const Op& find(const std::string& name) const {
        for (const Op& op : ops)
            if (op.name == name) return op;
        throw InternalError("no lav op " + name);
    }
};

const Ops& all_ops() {
    static const Ops ops;
    return ops;
}

// ---- a call: the case the tensors and settings make, checked as a scenario's case is ----

/// The tensors given (those of s.given, in argument order) by declared name.
std::map<std::string, at::Tensor> given_tensors(const Op& op, at::TensorList tensors,
                                                const Settings& s) {
    std::map<std::string, at::Tensor> out;
    size_t slot = 0, next = 0;
    for (const Arg& a : op.args) {
        if (a.kind != ArgKind::tensor) continue;
        if (s.given.at(slot++) == '1') out[a.tensor->name] = tensors[next++];
    }
    LAV_ASSERT(next == tensors.size(), op.name, ": ", tensors.size(), " tensors for ", next);
    return out;
}

const Arg& arg_of(const Op& op, const std::string& decl_name) {
    for (const Arg& a : op.args)
        if (a.kind == ArgKind::tensor && a.tensor->name == decl_name) return a;
    throw InternalError(op.name + " has no tensor " + decl_name);
}

/// The axes' letters of `t` in the layout given: a time axis second moves behind the heads.
std::vector<std::string> axes_of(const TensorDecl& t, bool head_first) {
    std::vector<std::string> axes = split(t.shape, ' ');
    if (head_first && harness::time_dim(t) == 1 && axes.size() > 2) std::swap(axes[1], axes[2]);
    return axes;
}

std::string joined(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
}

/// Why `option` = `value` does not fit the tensors given; empty when it does.
std::string misfit(const Op& op, const std::map<std::string, at::Tensor>& given,
                   const std::string& option, const std::string& value) {
    for (const TensorDecl& t : op.family->tensors) {
        if (!is_input(t.role) && t.role != Role::state) continue;
        const bool negated = t.when.rfind(option + "!=", 0) == 0;
        if (!negated && t.when.rfind(option + "=", 0) != 0) continue;
        const std::string wanted = t.when.substr(option.size() + (negated ? 2 : 1));
        const bool holds = (value == wanted) != negated;
        const bool present = given.count(t.name) > 0;
        if (holds && !present) return option + "=" + value + " needs " + arg_of(op, t.name).name;
        if (!holds && present)
            return arg_of(op, t.name).name + " is given, but " + option + "=" + value +
                   " takes none (it is taken when " + t.when + ")";
    }
    return "";
}

scenario::Case case_of(const Op& op, const std::map<std::string, at::Tensor>& given,
                       const Settings& s) {
    const Family& f = *op.family;
    scenario::Case c;
    c.family = f.name;
    c.variants = {op.row->variant};
    c.layout = s.head_first ? Layout::head_first : Layout::head_last;
    c.cu_seqlens = s.cu_seqlens;
    c.chunk_size = s.chunk_size;
    c.scale = s.scale;
    c.initial_state = false;
    c.inputs_given = true;

    // dimension letters from the shapes, each the same in every tensor that has it
    std::map<std::string, std::pair<int64_t, std::string>> dims;  // letter -> (size, argument)
    for (const auto& [name, tensor] : given) {
        const TensorDecl& t = *arg_of(op, name).tensor;
        const std::string& arg = arg_of(op, name).name;
        LAV_CHECK(tensor.device().type() == at::Device(op.row->device).type(), op.name, ": ", arg,
                  " is on ", tensor.device().str(), "; this op takes ", op.row->device, " tensors");
        const std::vector<std::string> axes = axes_of(t, s.head_first);
        LAV_CHECK(tensor.dim() == int64_t(axes.size()), op.name, ": ", arg, " must be [",
                  joined(axes), "], got ", tensor.dim(), " dimensions ", tensor.sizes());
        for (size_t k = 0; k < axes.size(); ++k) {
            if (axes[k].find('*') != std::string::npos) continue;
            const auto [it, fresh] = dims.emplace(axes[k], std::make_pair(tensor.size(k), arg));
            LAV_CHECK(fresh || it->second.first == tensor.size(k), op.name, ": ", arg, "'s ",
                      axes[k], " is ", tensor.size(k), " where ", it->second.second, "'s is ",
                      it->second.first);
        }
        if (t.role == Role::state) c.initial_state = true;
    }
    const auto dim = [&](const std::string& letter, int64_t fallback) {
        const auto it = dims.find(letter);
        return it == dims.end() ? fallback : it->second.first;
    };
    c.B = dim("B", 0), c.T = dim("T", 0), c.H = dim("H", 0), c.K = dim("K", 0);
    c.V = dim("V", c.K);  // a family without a V letter has V = K (hgrn)
    c.HV = dim("HV", 0);
    if (!s.cu_seqlens.empty()) {
        LAV_CHECK(c.B == 1, op.name, ": cu_seqlens needs a batch of 1, got B = ", c.B);
        bool ordered = s.cu_seqlens.front() == 0 && s.cu_seqlens.back() == c.T;
        for (size_t i = 1; i < s.cu_seqlens.size(); ++i)
            ordered = ordered && s.cu_seqlens[i - 1] <= s.cu_seqlens[i];
        LAV_CHECK(s.cu_seqlens.size() >= 2 && ordered, op.name,
                  ": cu_seqlens must rise from 0 to T = ", c.T);
    }

    // options: as given; a dimension option as its letter's size; else the first value the
    // tensors given fit
    std::map<std::string, std::string> options = s.options;
    for (const auto& [letter, option] : f.dim_options)
        if (!options.count(option) && dims.count(letter))
            options[option] = std::to_string(dims.at(letter).first);
    for (const auto& [option, values] : f.options) {
        const auto it = options.find(option);
        if (it != options.end()) {
            bool allowed = false;
            for (const auto& v : values) allowed = allowed || v == it->second;
            for (const auto& [letter, dim_option] : f.dim_options)
                allowed = allowed || dim_option == option;  // any size
            LAV_CHECK(allowed, op.name, ": ", option, " takes ", joined(values), ", got '",
                      it->second, "'");
            const std::string why = misfit(op, given, option, it->second);
            LAV_CHECK(why.empty(), op.name, ": ", why);
            c.options[option] = it->second;
            continue;
        }
        std::vector<std::string> whys;
        for (const auto& v : values) {
            whys.push_back(misfit(op, given, option, v));
            if (whys.back().empty()) {
                c.options[option] = v;
                break;
            }
        }
        LAV_CHECK(c.options.count(option), op.name, ": no value of ", option,
                  " fits the tensors given: ", joined(whys));
    }
    for (const Arg& a : op.args) {
        if (a.kind != ArgKind::tensor) continue;
        const bool wanted = harness::present(*a.tensor, c), has = given.count(a.tensor->name);
        LAV_CHECK(wanted || !has, op.name, ": ", a.name, " is given, but this call takes none (",
                  a.tensor->name, " is taken when ", a.tensor->when, ")");
        LAV_CHECK(has || !wanted, op.name, ": ", a.name, " is required");
    }

    // dtypes: the first input's, the first gate's, the state dtype asked for
    const auto dtype_of = [&](const std::string& name, const at::Tensor& t) {
        const std::optional<DType> d = from_scalar_type(t.scalar_type());
        LAV_CHECK(d, op.name, ": ", arg_of(op, name).name, " must be a floating tensor, got ",
                  scalar_type_name(t.scalar_type()));
        return *d;
    };
    bool input_seen = false, gate_seen = false;
    for (const TensorDecl& t : f.tensors) {
        const auto it = given.find(t.name);
        if (it == given.end()) continue;
        if (t.dtype == harness::DTypeSetting::inputs && !input_seen)
            c.input_dtype = dtype_of(t.name, it->second), input_seen = true;
        if (t.dtype == harness::DTypeSetting::gate && !gate_seen)
            c.gate_dtype = dtype_of(t.name, it->second), gate_seen = true;
    }
    const std::optional<DType> state = from_scalar_type(s.state_dtype);
    LAV_CHECK(state, op.name, ": state_dtype must be floating, got ",
              scalar_type_name(s.state_dtype));
    c.state_dtype = *state;
    c.output_dtype = c.input_dtype;

    if (f.check) {
        std::string issues;
        for (const scenario::FamilyIssue& i : f.check(c))
            issues += (issues.empty() ? "" : "; ") + i.message +
                      (i.note.empty() ? "" : " (" + i.note + ")");
        LAV_CHECK(issues.empty(), op.name, ": ", issues);
    }
    return c;
}

Call call_of(const Op& op, const scenario::Case& c,
             const std::map<std::string, at::Tensor>& given) {
    Call call = harness::call_of(*op.family, c);
    call.tensors = TensorMap(given.begin(), given.end());
    LAV_CHECK(!op.row->fits || op.row->fits(call), op.name,
              ": lav's CUDA kernels do not take this call (B=", c.B, ", T=", c.T, ", H=", c.H,
              ", K=", c.K, ", V=", c.V, ")");
    return call;
}

// ---- autograd ----

void save(AutogradContext* ctx, const Op& op, const Settings& s) {
    ctx->saved_data["op"] = op.name;
    ctx->saved_data["scale"] = s.scale ? c10::IValue(*s.scale) : c10::IValue();
    ctx->saved_data["head_first"] = s.head_first;
    ctx->saved_data["state_dtype"] = int64_t(s.state_dtype);
    ctx->saved_data["chunk_size"] = s.chunk_size;
    ctx->saved_data["cu_seqlens"] = s.cu_seqlens;
    ctx->saved_data["given"] = s.given;
    for (const auto& [name, value] : s.options) ctx->saved_data["option:" + name] = value;
}

Settings restore(AutogradContext* ctx) {
    Settings s;
    const c10::IValue& scale = ctx->saved_data["scale"];
    if (!scale.isNone()) s.scale = scale.toDouble();
    s.head_first = ctx->saved_data["head_first"].toBool();
    s.state_dtype = c10::ScalarType(ctx->saved_data["state_dtype"].toInt());
    s.chunk_size = ctx->saved_data["chunk_size"].toInt();
    s.cu_seqlens = ctx->saved_data["cu_seqlens"].toIntVector();
    s.given = ctx->saved_data["given"].toStringRef();
    for (const auto& [key, value] : ctx->saved_data)
        if (key.rfind("option:", 0) == 0) s.options[key.substr(7)] = value.toStringRef();
    return s;
}

// Function::apply links autograd through its tensor arguments: the tensors given go as one
// TensorList (Settings::given says which arguments they are), the op and its settings as
// plain values.
struct RowFunction : torch::autograd::Function<RowFunction> {
    static variable_list forward(AutogradContext* ctx, at::TensorList tensors, const Op* op,
                                 const Settings& s) {
        const std::map<std::string, at::Tensor> given = given_tensors(*op, tensors, s);
        const scenario::Case c = case_of(*op, given, s);
        const TensorMap out = op->row->forward(call_of(*op, c, given));
        ctx->save_for_backward(tensors.vec());
        save(ctx, *op, s);
        variable_list results;
        for (const TensorDecl* t : op->outputs) {
            const auto it = out.find(t->name);
            LAV_ASSERT(it != out.end() && it->second.defined(), op->name, " returned no ", t->name);
            results.push_back(it->second);
        }
        return results;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const Op& op = all_ops().find(ctx->saved_data["op"].toStringRef());
        const variable_list tensors = ctx->get_saved_variables();
        const Settings s = restore(ctx);
        const std::map<std::string, at::Tensor> given = given_tensors(op, tensors, s);
        const scenario::Case c = case_of(op, given, s);
        Call call = call_of(op, c, given);
        // a result that took no part in the loss has a cotangent of zeros
        const at::Tensor& first = given.begin()->second;
        const std::vector<harness::TensorSpec> specs =
            harness::specs_of(*op.family, c, Role::cotangent);
        for (size_t i = 0; i < op.cotangents.size(); ++i) {
            const std::string& name = op.cotangents[i]->name;
            if (grads[i].defined()) {
                call.tensors[name] = grads[i].contiguous();
                continue;
            }
            for (const harness::TensorSpec& spec : specs) {
                if (spec.name != name) continue;
                std::vector<int64_t> shape = spec.shape;
                if (s.head_first && spec.time_major) std::swap(shape[1], shape[2]);
                call.tensors[name] =
                    at::zeros(shape, first.options().dtype(to_scalar_type(spec.dtype)));
            }
        }
        const TensorMap d = op.row->backward(call);
        variable_list out(tensors.size() + 2);  // + the op and its settings
        size_t slot = 0, next = 0;
        for (const Arg& a : op.args) {
            if (a.kind != ArgKind::tensor || s.given.at(slot++) != '1') continue;
            const auto it = d.find("d" + a.tensor->name);
            if (a.tensor->grad && it != d.end() && it->second.defined()) out[next] = it->second;
            ++next;
        }
        return out;
    }
};

std::vector<int64_t> offsets(const at::Tensor& cu_seqlens) {
    LAV_CHECK(cu_seqlens.dim() == 1 && !at::isFloatingType(cu_seqlens.scalar_type()),
              "cu_seqlens must be a 1-D integer tensor of N + 1 offsets");
    const at::Tensor host = cu_seqlens.to(at::kCPU, at::kLong).contiguous();
    return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

/// Every op's kernel: reads its arguments off the stack by the op's declaration, runs the row
/// under autograd and pushes the outputs.
void run_op(const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
    const std::string& full = handle.schema().name();
    const Op& op = all_ops().find(full.substr(full.find("::") + 2));
    const size_t n = op.args.size();
    std::vector<at::Tensor> tensors;
    Settings s;
    const auto args = torch::jit::last(*stack, n);
    for (size_t i = 0; i < n; ++i) {
        const c10::IValue& v = args[i];
        switch (op.args[i].kind) {
            case ArgKind::tensor:
                s.given += v.isNone() ? '0' : '1';
                if (!v.isNone()) tensors.push_back(v.toTensor());
                break;
            case ArgKind::scale:
                if (!v.isNone()) s.scale = v.toDouble();
                break;
            case ArgKind::cu_seqlens:
                if (!v.isNone()) s.cu_seqlens = offsets(v.toTensor());
                break;
            case ArgKind::head_first:
                s.head_first = v.toBool();
                break;
            case ArgKind::state_dtype:
                if (!v.isNone()) s.state_dtype = v.toScalarType();
                break;
            case ArgKind::chunk_size:
                s.chunk_size = v.toInt();
                break;
            case ArgKind::option:
                if (!v.isNone()) s.options[op.args[i].name] = v.toStringRef();
                break;
        }
    }
    torch::jit::drop(*stack, n);
    // gcc 13 sees libstdc++'s vector<bool>::reserve, inlined from torch's Function::apply,
    // copy a word past a one-word buffer (-Warray-bounds, -Wstringop-overflow); the copy stays
    // within the buffer
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
    const variable_list out = RowFunction::apply(at::TensorList(tensors), &op, s);
#pragma GCC diagnostic pop
    for (const at::Tensor& t : out) torch::jit::push(*stack, t);
}

}  // namespace
}  // namespace lav::ops

TORCH_LIBRARY(lav, m) {
    for (const lav::ops::Op& op : lav::ops::all_ops().ops) m.def(lav::ops::schema_of(op).c_str());
}

TORCH_LIBRARY_IMPL(lav, Autograd, m) {
    for (const lav::ops::Op& op : lav::ops::all_ops().ops)
        m.impl(op.name.c_str(), torch::CppFunction::makeFromBoxedFunction<&lav::ops::run_op>());
}
