// src/providers/provider.cpp — the calling convention of provider rows: inputs by declared
// name, outputs in declared order, gradients by autograd; Triton's cache folder.
#include "providers/provider.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/error.h"

namespace lav::providers {
namespace {

using harness::Family;
using harness::Role;

bool is_input(Role r) { return r == Role::input || r == Role::gate || r == Role::state; }

// The declared inputs of the call by name, undefined where the case has none.
TensorMap declared_inputs(const Family& f, const Call& call) {
    TensorMap out;
    for (const auto& t : f.tensors)
        if (is_input(t.role)) out[t.name] = call.get(t.name);
    return out;
}

// The gradients of Σ ⟨output, cotangent⟩ with respect to `differentiated`, by autograd over
// the callable's forward on leaves that require grad.
TensorMap autograd_backward(const Callable& callable, const Call& call, TensorMap inputs,
                            const std::vector<std::string>& differentiated,
                            const std::vector<at::Tensor>& cotangents) {
    std::vector<at::Tensor> leaves;
    for (const auto& name : differentiated) {
        inputs[name] = inputs.at(name).detach().requires_grad_(true);
        leaves.push_back(inputs[name]);
    }
    const std::vector<at::Tensor> outputs = callable.forward(call, inputs);
    std::vector<at::Tensor> roots, seeds;
    for (size_t i = 0; i < outputs.size(); ++i)
        if (outputs[i].defined() && outputs[i].requires_grad() && cotangents[i].defined()) {
            roots.push_back(outputs[i]);
            seeds.push_back(cotangents[i].to(outputs[i].scalar_type()));
        }
    LAV_CHECK(!roots.empty(),
              "no output of the op takes part in autograd, so there is no backward to check (the "
              "op is forward-only: register an autograd kernel for it)");
    const std::vector<at::Tensor> grads =
        torch::autograd::grad(roots, leaves, seeds, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    TensorMap out;
    for (size_t i = 0; i < differentiated.size(); ++i) out["d" + differentiated[i]] = grads[i];
    return out;
}

}  // namespace

std::vector<std::string> output_names(const Family& f) {
    std::vector<std::string> out;
    for (const auto& t : f.tensors)
        if (t.role == Role::output) out.push_back(t.name);
    return out;
}

std::vector<std::string> cotangent_names(const Family& f) {
    std::vector<std::string> out;
    for (const auto& t : f.tensors)
        if (t.role == Role::cotangent) out.push_back(t.name);
    return out;
}

void use_triton_cache(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    LAV_CHECK_AS(UsageError, !fs::exists(dir, ec) || fs::is_directory(dir, ec), "--triton-cache ",
                 dir, " is not a folder; give a folder (it is created if missing)");
    fs::create_directories(dir, ec);
    LAV_CHECK_AS(EnvironmentError, !ec, "--triton-cache ", dir,
                 ": cannot create the folder: ", ec.message());
    const std::string path = fs::absolute(dir).lexically_normal().string();
    setenv("TRITON_CACHE_DIR", path.c_str(), 1);
}

Row provider_row(const Family& f, const std::string& variant, const std::string& backend,
                 const std::string& device, const Row& declared, Callable callable) {
    LAV_ASSERT(output_names(f).size() == cotangent_names(f).size(), f.name,
               " declares outputs and cotangents that do not pair up");
    Row r;
    r.family = f.name;
    r.variant = variant;
    r.backend = backend;
    r.device = device;
    r.automatic = false;
    r.traced = true;
    // judged by the contract lav declares for the variant; what the provider keeps inside
    // (chunk states, accumulators) cannot be seen, and the contract says so
    r.contract = [f, backend, contract = declared.contract](const Call& call, bool backward) {
        PrecisionContract c = contract(call, backward);
        std::set<std::string> observable;
        for (const auto& t : f.tensors)
            observable.insert(t.role == Role::output ? t.name : "d" + t.name);
        for (ContractItem& item : c.items)
            if (!observable.count(item.item))
                item.note =
                    "not observable: " + backend + " does not expose it (lav's declaration)";
        return c;
    };
    const std::vector<std::string> names = output_names(f);
    r.forward = [f, callable, names](const Call& call) {
        const std::vector<at::Tensor> outputs = callable.forward(call, declared_inputs(f, call));
        LAV_CHECK(outputs.size() == names.size(), "the provider returned ", outputs.size(),
                  " outputs; ", f.name, " declares ", names.size());
        TensorMap out;
        for (size_t i = 0; i < names.size(); ++i) out[names[i]] = outputs[i];
        return out;
    };
    r.backward = [f, callable](const Call& call) {
        const TensorMap inputs = declared_inputs(f, call);
        std::vector<std::string> differentiated;
        for (const auto& t : f.tensors)
            if (is_input(t.role) && t.grad && inputs.at(t.name).defined() &&
                inputs.at(t.name).is_floating_point())
                differentiated.push_back(t.name);
        std::vector<at::Tensor> cotangents;
        for (const auto& name : cotangent_names(f)) cotangents.push_back(call.get(name));
        return callable.backward
                   ? callable.backward(call, inputs, differentiated, cotangents)
                   : autograd_backward(callable, call, inputs, differentiated, cotangents);
    };
    return r;
}

}  // namespace lav::providers
