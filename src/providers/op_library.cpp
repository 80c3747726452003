// src/providers/op_library.cpp — a PyTorch op library's ops as provider rows, called through
// the dispatcher by argument name.
#include "providers/op_library.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <dlfcn.h>

#include <filesystem>
#include <set>

#include "core/error.h"
#include "harness/backend.h"
#include "providers/provider.h"

namespace lav::providers {
namespace {

using c10::IValue;

std::set<std::string> op_names() {
    std::set<std::string> out;
    for (const c10::OperatorName& op : c10::Dispatcher::singleton().getAllOpNames())
        out.insert(op.name);
    return out;
}

c10::TypePtr unwrapped(const c10::Argument& arg) {
    const c10::TypePtr& t = arg.type();
    return t->kind() == c10::TypeKind::OptionalType ? t->containedType(0) : t;
}

// An option's text as the argument's type takes it: "true" for a bool, digits for an int.
IValue option_value(const c10::Argument& arg, const std::string& text) {
    switch (unwrapped(arg)->kind()) {
        case c10::TypeKind::BoolType:
            return IValue(text == "true");
        case c10::TypeKind::IntType:
            return IValue(static_cast<int64_t>(std::stoll(text)));
        case c10::TypeKind::FloatType:
            return IValue(std::stod(text));
        default:
            return IValue(text);
    }
}

// The value lav passes for `arg`: a declared tensor, a setting, an option, or its default.
IValue argument(const c10::FunctionSchema& schema, const c10::Argument& arg, const Call& call,
                const TensorMap& inputs, const at::Device& device) {
    const std::string& name = arg.name();
    const std::string tensor = name == "initial_state" ? "h0" : name;
    if (inputs.count(tensor)) {
        const at::Tensor& t = inputs.at(tensor);
        return t.defined() ? IValue(t) : IValue();
    }
    if (name == "scale") return IValue(call.scale);
    if (name == "head_first") return IValue(call.layout == Layout::head_first);
    if (name == "chunk_size") return IValue(call.chunk_size);
    if (name == "state_dtype") return IValue(call.state_dtype);
    if (name == "output_dtype") return IValue(call.output_dtype);
    if (name == "cu_seqlens") {
        const at::Tensor cu = call.cu_seqlens_tensor();
        return cu.defined() ? IValue(cu.to(device)) : IValue();
    }
    if (call.options.count(name)) return option_value(arg, call.options.at(name));
    // an option named like a tensor (rwkv7's b) is taken as <name>_option
    const std::string option = name.size() > 7 && name.compare(name.size() - 7, 7, "_option") == 0
                                   ? name.substr(0, name.size() - 7)
                                   : "";
    if (!option.empty() && call.options.count(option))
        return option_value(arg, call.options.at(option));
    LAV_CHECK(arg.default_value().has_value(), schema.name(), " takes '", name,
              "', which lav cannot fill (not a declared tensor, setting or option of the family)",
              "; give it a default");
    return *arg.default_value();
}

void append_results(const IValue& v, std::vector<at::Tensor>& out) {
    if (v.isTensor())
        out.push_back(v.toTensor());
    else if (v.isNone())
        out.emplace_back();
    else if (v.isTuple())
        for (const IValue& e : v.toTupleRef().elements()) append_results(e, out);
    else if (v.isTensorList())
        for (const at::Tensor& t : v.toTensorVector()) out.push_back(t);
    else
        LAV_CHECK(false, "a provider op returned a ", v.tagKind(), " where tensors were expected");
}

Callable op_callable(const c10::OperatorHandle& op, const std::string& device) {
    Callable c;
    c.forward = [op, device](const Call& call, const TensorMap& inputs) {
        const c10::FunctionSchema& schema = op.schema();
        const at::Device d(device == "cuda" ? at::kCUDA : at::kCPU);
        std::vector<IValue> stack;
        for (const c10::Argument& arg : schema.arguments())
            stack.push_back(argument(schema, arg, call, inputs, d));
        op.callBoxed(&stack);
        std::vector<at::Tensor> outputs;
        for (const IValue& v : stack) append_results(v, outputs);
        return outputs;
    };
    return c;
}

// Runs on CUDA where it has a CUDA (or device-independent) kernel and a device is present.
std::string device_of(const c10::OperatorHandle& op) {
    const bool cuda = op.hasKernelForDispatchKey(c10::DispatchKey::CUDA) ||
                      op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    return cuda && harness::cuda_available() ? "cuda" : "cpu";
}

}  // namespace

std::vector<std::string> load_op_library(const std::string& path, harness::Registry& registry) {
    LAV_CHECK_AS(UsageError, std::filesystem::is_regular_file(path), "--load-library ", path,
                 ": no such file");
    const std::set<std::string> before = op_names();
    // RTLD_GLOBAL: the library's ops may be called from libraries loaded after it
    if (!dlopen(std::filesystem::absolute(path).c_str(), RTLD_NOW | RTLD_GLOBAL)) {
        const char* why = dlerror();
        throw EnvironmentError("--load-library " + path + ": " + (why ? why : "cannot load"));
    }
    std::set<std::string> namespaces;
    for (const std::string& name : op_names())
        if (!before.count(name)) namespaces.insert(name.substr(0, name.find("::")));
    std::vector<std::string> added;
    for (const std::string& ns : namespaces) {
        for (const harness::Family& f : registry.families())
            for (const std::string& variant : f.variants) {
                const auto op = c10::Dispatcher::singleton().findSchema(
                    {ns + "::" + variant + "_" + f.name, ""});
                const Row* declared = registry.rows().find(f.name, variant, "cpu");
                if (!op || !declared) continue;
                const std::string device = device_of(*op);
                registry.rows().add(
                    provider_row(f, variant, ns, device, *declared, op_callable(*op, device)));
                if (added.empty() || added.back() != ns) added.push_back(ns);
            }
    }
    LAV_CHECK_AS(UsageError, !added.empty(), "--load-library ", path,
                 " registers no op named <variant>_<family> (e.g. chunk_simple_gla) for a family "
                 "of this build");
    return added;
}

}  // namespace lav::providers
