// src/harness/signature.cpp — what a case draws, feeds and measures, read off its family's
// declaration.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "core/varlen.h"
#include "harness/family.h"

namespace lav::harness {
namespace {

using scenario::Case;

std::vector<std::string> split(const std::string& text, char sep) {
    std::vector<std::string> out;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, sep))
        if (!item.empty()) out.push_back(item);
    return out;
}

// the state component holding tensor `name`, or "" when the family declares none for it
std::string component_of(const Family& f, const std::string& name) {
    for (const auto& [component, tensors] : f.state_components)
        if (std::find(tensors.begin(), tensors.end(), name) != tensors.end()) return component;
    return {};
}

DType dtype_of(const Family& f, const TensorDecl& t, const Case& c) {
    if (t.role == Role::cotangent && c.cotangent_dtype) return *c.cotangent_dtype;
    switch (t.dtype) {
        case DTypeSetting::inputs:
            return c.input_dtype;
        case DTypeSetting::gate:
            return c.gate_dtype;
        case DTypeSetting::state: {
            const auto it = c.state_dtypes.find(component_of(f, t.name));
            return it != c.state_dtypes.end() ? it->second : c.state_dtype;
        }
        case DTypeSetting::output:
            return c.output_dtype;
    }
    LAV_ASSERT(false, "unknown dtype setting");
    return c.input_dtype;
}

bool is_drawn_input(Role r) { return r == Role::input || r == Role::gate || r == Role::state; }

std::vector<int64_t> shape_of(const TensorDecl& t, const std::map<std::string, int64_t>& dims) {
    std::vector<int64_t> shape;
    for (const std::vector<std::string>& axis : axes_of(t)) {
        int64_t size = 1;
        for (const std::string& letter : axis) {
            const auto it = dims.find(letter);
            LAV_ASSERT(it != dims.end(), t.name, "'s shape names unknown dimension ", letter);
            size *= it->second;
        }
        shape.push_back(size);
    }
    return shape;
}

}  // namespace

bool present(const TensorDecl& t, const Case& c) {
    if (t.when.empty()) return true;
    if (t.when == "initial_state") return c.initial_state;
    const bool negated = t.when.find("!=") != std::string::npos;
    const size_t eq = t.when.find(negated ? "!=" : "=");
    LAV_ASSERT(eq != std::string::npos, "bad condition '", t.when, "' on ", t.name);
    const std::string option = t.when.substr(0, eq);
    const std::string value = t.when.substr(eq + (negated ? 2 : 1));
    const auto it = c.options.find(option);
    LAV_ASSERT(it != c.options.end(), t.name, "'s condition names unknown option ", option);
    return (it->second == value) != negated;
}

std::vector<std::vector<std::string>> axes_of(const TensorDecl& t) {
    std::vector<std::vector<std::string>> out;
    for (const std::string& axis : split(t.shape, ' ')) out.push_back(split(axis, '*'));
    return out;
}

int64_t time_dim(const TensorDecl& t) {
    const std::vector<std::vector<std::string>> axes = axes_of(t);
    for (size_t i = 0; i < axes.size(); ++i)
        for (const std::string& letter : axes[i])
            if (letter == "T") return static_cast<int64_t>(i);
    return -1;
}

std::map<std::string, int64_t> dims_of(const Family& f, const Case& c) {
    std::map<std::string, int64_t> dims = {{"B", c.B},
                                           {"T", c.T},
                                           {"H", c.H},
                                           {"HV", c.HV > 0 ? c.HV : c.H},
                                           {"K", c.K},
                                           {"V", c.V},
                                           {"N", num_sequences(c.B, c.cu_seqlens)}};
    for (const auto& [letter, option] : f.dim_options)
        dims[letter] = std::stoll(c.options.at(option));
    return dims;
}

std::vector<TensorSpec> specs_of(const Family& f, const Case& c, Role role) {
    const std::map<std::string, int64_t> dims = dims_of(f, c);
    std::vector<TensorSpec> out;
    for (const TensorDecl& t : f.tensors) {
        const bool wanted =
            role == Role::cotangent ? t.role == Role::cotangent : is_drawn_input(t.role);
        if (!wanted || !present(t, c)) continue;
        std::optional<scenario::Generator> chosen = f.draw ? f.draw(c, t.name) : std::nullopt;
        out.push_back({t.name, shape_of(t, dims), dtype_of(f, t, c), time_dim(t) >= 0,
                       chosen ? *chosen : t.draw});
    }
    return out;
}

std::vector<MeasuredSpec> measured_of(const Family& f, const Case& c, bool backward) {
    using metrics::TensorKind;
    std::vector<MeasuredSpec> out;
    for (const TensorDecl& t : f.tensors) {
        if (!present(t, c)) continue;
        const int64_t time = time_dim(t);
        if (!backward && t.role == Role::output)
            out.push_back({t.name, time >= 0 ? TensorKind::output : TensorKind::state, time});
        if (backward && is_drawn_input(t.role) && t.grad)
            out.push_back({"d" + t.name,
                           t.role == Role::gate ? TensorKind::gate_grad : TensorKind::gradient,
                           time});
    }
    return out;
}

Call call_of(const Family& f, const Case& c) {
    Call call;
    call.options = c.options;
    call.dims = dims_of(f, c);
    call.layout = c.layout;
    call.state_dtype = to_scalar_type(c.state_dtype);
    for (const auto& [component, dtype] : c.state_dtypes)
        call.state_dtypes[component] = to_scalar_type(dtype);
    call.output_dtype = to_scalar_type(c.output_dtype);
    call.chunk_size = c.chunk_size;
    const double unset = f.default_scale > 0 ? f.default_scale : 1.0 / std::sqrt(double(c.K));
    call.scale = c.scale ? *c.scale : unset;
    call.cu_seqlens = c.cu_seqlens;
    return call;
}

std::string state_dtype_text(const Case& c) {
    if (c.state_dtypes.empty()) return std::string(dtype_name(c.state_dtype));
    std::string text;
    for (const auto& [component, dtype] : c.state_dtypes)
        text += (text.empty() ? "" : ",") + component + "=" + std::string(dtype_name(dtype));
    return text;
}

scenario::FamilyInfo info_of(const Family& f) {
    scenario::FamilyInfo info;
    info.name = f.name;
    info.summary = f.summary;
    info.variants = f.variants;
    info.options = f.options;
    info.check = f.check;
    for (const auto& component : f.state_components)
        info.state_components.push_back(component.first);
    for (const TensorDecl& t : f.tensors) {
        if (t.role != Role::output) info.inputs.push_back(t.name);
        if (t.role == Role::output) info.measured.push_back(t.name);
    }
    for (const TensorDecl& t : f.tensors)
        if (is_drawn_input(t.role) && t.grad) info.measured.push_back("d" + t.name);
    return info;
}

}  // namespace lav::harness
