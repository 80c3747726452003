// tests/families/generic.h — what the generic suites share: registry, cases, row runs, measures.
//
// Nothing here knows a family: sizes, tensors, options and results are read off each family's
// declaration (harness/family.h), and kernels are reached only as rows (core/row.h).
//
//   const Family& f = registry().get("gla");
//   const Case c = small_case(f, default_options(f));
//   const Ran ran = run_row(f, *registry().rows().find("gla", "chunk", "cpu"), draw(f, c));
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/layout.h"
#include "core/row.h"
#include "core/varlen.h"
#include "harness/backend.h"
#include "harness/family.h"
#include "harness/inputs.h"
#include "harness/registry.h"
#include "scenario/case.h"

namespace lav::test::generic {

using harness::Family;
using harness::MeasuredSpec;
using harness::Role;
using harness::TensorDecl;
using scenario::Case;

/// Every family and row of this build, registered once.
inline const harness::Registry& registry() {
    static const harness::Registry* const r = [] {
        auto* x = new harness::Registry;
        harness::register_all(*x);
        return x;
    }();
    return *r;
}

// ---- declarations ----

/// Whether some tensor of f names the dimension letter.
inline bool uses_letter(const Family& f, const std::string& letter) {
    for (const TensorDecl& t : f.tensors)
        for (const auto& axis : axes_of(t))
            for (const std::string& l : axis)
                if (l == letter) return true;
    return false;
}

/// Whether t has one row per sequence (its first axis is N): initial and final states.
inline bool per_sequence(const TensorDecl& t) {
    const auto axes = axes_of(t);
    return !axes.empty() && axes[0].size() == 1 && axes[0][0] == "N";
}

inline bool has_per_sequence_tensors(const Family& f) {
    for (const TensorDecl& t : f.tensors)
        if (per_sequence(t)) return true;
    return false;
}

/// The initial state each final state continues: the per-sequence outputs and states paired in
/// declaration order where their shapes agree (ht with h0; gsa's hkt, hvt with hk0, hv0).
inline std::vector<std::pair<std::string, std::string>> state_pairs(const Family& f) {
    std::vector<const TensorDecl*> finals, initials;
    for (const TensorDecl& t : f.tensors) {
        if (!per_sequence(t)) continue;
        if (t.role == Role::output) finals.push_back(&t);
        if (t.role == Role::state) initials.push_back(&t);
    }
    std::vector<std::pair<std::string, std::string>> out;
    for (size_t i = 0; i < finals.size() && i < initials.size(); ++i)
        if (finals[i]->shape == initials[i]->shape)
            out.push_back({finals[i]->name, initials[i]->name});
    return out;
}

/// The declaration behind a result: an output by its name, a gradient "d" + the input's name.
inline const TensorDecl* decl_of_result(const Family& f, const std::string& result) {
    for (const TensorDecl& t : f.tensors)
        if (t.role == Role::output && t.name == result) return &t;
    for (const TensorDecl& t : f.tensors)
        if ((t.role == Role::input || t.role == Role::gate || t.role == Role::state) &&
            "d" + t.name == result)
            return &t;
    return nullptr;
}

inline const TensorDecl* decl_named(const Family& f, const std::string& name) {
    for (const TensorDecl& t : f.tensors)
        if (t.name == name) return &t;
    return nullptr;
}

/// The cotangent that seeds output `o` in the backward pass: d_o for o, d<name> otherwise
/// (dht for ht, dhkt for hkt, ...); empty when the family declares none.
inline std::string cotangent_of(const Family& f, const std::string& output) {
    const std::string name = output == "o" ? "d_o" : "d" + output;
    const TensorDecl* t = decl_named(f, name);
    return t && t->role == Role::cotangent ? name : std::string();
}

/// Every result of a forward and a backward pass of case c, forward ones first.
inline std::vector<MeasuredSpec> measured(const Family& f, const Case& c) {
    std::vector<MeasuredSpec> out = harness::measured_of(f, c, false);
    for (const MeasuredSpec& m : harness::measured_of(f, c, true)) out.push_back(m);
    return out;
}

// ---- cases ----

/// One set of option values a suite runs a family with.
struct Options {
    std::string label;  ///< "" for the declared defaults, "<option>_<value>" or "combined"
    std::map<std::string, std::string> values;
};

/// " name=value" for each option, as gtest prints a failed case's parameter.
inline void PrintTo(const Options& o, std::ostream* os) {
    for (const auto& [name, value] : o.values) *os << " " << name << "=" << value;
}

/// The first declared value of every option.
inline std::map<std::string, std::string> default_options(const Family& f) {
    std::map<std::string, std::string> out;
    for (const auto& [name, values] : f.options) out[name] = values.front();
    return out;
}

/// Letters, digits and '_' only, as test names must be.
inline std::string identifier(const std::string& text) {
    std::string out = text;
    for (char& ch : out)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return out;
}

/// The case's dtype for a declared dtype setting.
inline DType setting_dtype(const Case& c, harness::DTypeSetting s) {
    switch (s) {
        case harness::DTypeSetting::inputs:
            return c.input_dtype;
        case harness::DTypeSetting::gate:
            return c.gate_dtype;
        case harness::DTypeSetting::state:
            return c.state_dtype;
        case harness::DTypeSetting::output:
            return c.output_dtype;
    }
    return c.input_dtype;
}

/// A small dense case of f: B=2, T=100 (a ragged last chunk for every chunk size), H=2 (HV = 2H
/// where the family has value heads), K=16, V=24 (V = K where no tensor has a V axis), chunk
/// 32, bf16 inputs and output, fp32 gate and state, an initial state.
inline Case small_case(const Family& f, const std::map<std::string, std::string>& options) {
    Case c;
    c.file = "generic";
    c.name = "generic_" + f.name;
    c.id = c.name;
    c.family = f.name;
    c.variants = f.variants;
    c.forward = true;
    c.backward = true;
    c.options = options;
    c.B = 2;
    c.T = 100;
    c.H = 2;
    c.HV = uses_letter(f, "HV") ? 2 * c.H : 0;
    c.K = 16;
    c.V = uses_letter(f, "V") ? 24 : c.K;
    c.chunk_size = 32;
    c.input_dtype = DType::bf16;
    c.gate_dtype = DType::fp32;
    c.state_dtype = DType::fp32;
    c.output_dtype = DType::bf16;
    c.initial_state = true;
    c.seed = 42;
    return c;
}

/// Sequences of 0, 37, 0, 32 and 81 positions: empty ones first and between two others, ragged
/// last chunks for chunk sizes 16 and 32, one whole chunk of 32.
inline const std::vector<int64_t>& ragged_cu_seqlens() {
    static const std::vector<int64_t> cu = {0, 0, 37, 37, 69, 150};
    return cu;
}

/// c packed as one row of sequences (cu_seqlens, B = 1).
inline Case packed(Case c, const std::vector<int64_t>& cu = ragged_cu_seqlens()) {
    c.B = 1;
    c.T = cu.back();
    c.cu_seqlens = cu;
    return c;
}

/// The family's own rules (Family::check) broken by c, one per line; empty when c is valid.
inline std::string issues_of(const Family& f, const Case& c) {
    std::string out;
    if (!f.check) return out;
    for (const scenario::FamilyIssue& i : f.check(c)) out += i.path + ": " + i.message + "\n";
    return out;
}

/// The declared defaults; each other value of each option alone, where the small case with it
/// keeps the family's rules; and, labelled "combined", as many options as keep the rules
/// together at their first other value that does (repeated until none is added), where that is
/// two or more.
inline std::vector<Options> option_sets(const Family& f) {
    const auto keeps_rules = [&](const std::map<std::string, std::string>& values) {
        return issues_of(f, small_case(f, values)).empty();
    };
    std::vector<Options> out = {{"", default_options(f)}};
    for (const auto& [name, values] : f.options)
        for (size_t i = 1; i < values.size(); ++i) {
            Options o{identifier(name + "_" + values[i]), default_options(f)};
            o.values[name] = values[i];
            if (keeps_rules(o.values)) out.push_back(o);
        }
    Options combined{"combined", default_options(f)};
    std::set<std::string> changed;
    for (bool added = true; added;) {
        added = false;
        for (const auto& [name, values] : f.options) {
            if (changed.count(name)) continue;
            for (size_t i = 1; i < values.size() && !changed.count(name); ++i) {
                std::map<std::string, std::string> trial = combined.values;
                trial[name] = values[i];
                if (!keeps_rules(trial)) continue;
                combined.values = trial;
                changed.insert(name);
                added = true;
            }
        }
    }
    if (changed.size() >= 2) out.push_back(combined);
    return out;
}

/// A case's call settings and its tensors, drawn as the runner draws them.
struct Drawn {
    Case c;
    Call call;                 ///< the case's settings, no tensors
    harness::CaseTensors in;   ///< inputs, gates and states
    harness::CaseTensors cot;  ///< cotangents
};

inline Drawn draw(const Family& f, const Case& c) {
    return {c, harness::call_of(f, c),
            harness::make_tensors(harness::specs_of(f, c, Role::input), c, 0),
            harness::make_tensors(harness::specs_of(f, c, Role::cotangent), c, 1)};
}

/// The reference's call: fp64 head_last inputs and cotangents.
inline Call reference_call(const Drawn& d) {
    Call call = d.call;
    call.layout = Layout::head_last;
    call.tensors = d.in.reference;
    for (const auto& [name, t] : d.cot.reference) call.tensors[name] = t;
    return call;
}

// ---- rows ----

/// Every measured result of one row's forward and backward pass, on the CPU and in the case's
/// layout, and the dtype its contract declares for each.
struct Ran {
    TensorMap results;
    std::map<std::string, c10::ScalarType> declared;
};

inline std::string row_name(const Row& row) {
    return row.family + " " + row.variant + " " + row.backend;
}

/// Runs row on d's kernel tensors (moved to the row's device); a measured result the row does
/// not return is a test failure.
inline Ran run_row(const Family& f, const Row& row, const Drawn& d) {
    Ran ran;
    for (const bool backward : {false, true}) {
        Call call = d.call;
        call.tensors = harness::to_device(d.in.kernel, row.device);
        if (backward)
            for (const auto& [name, t] : harness::to_device(d.cot.kernel, row.device))
                call.tensors[name] = t;
        const TensorMap raw = backward ? row.backward(call) : row.forward(call);
        const PrecisionContract contract = row.contract(call, backward);
        for (const MeasuredSpec& m : harness::measured_of(f, d.c, backward)) {
            const auto it = raw.find(m.name);
            if (it == raw.end() || !it->second.defined()) {
                ADD_FAILURE() << row_name(row) << " returned no " << m.name;
                continue;
            }
            ran.results[m.name] = it->second.cpu();
            ran.declared[m.name] = to_scalar_type(contract.dtype_of(m.name));
        }
    }
    return ran;
}

/// The result `name` of ran, or an undefined tensor (the failure is already recorded).
inline at::Tensor result(const Ran& ran, const std::string& name) {
    const auto it = ran.results.find(name);
    return it == ran.results.end() ? at::Tensor() : it->second;
}

// ---- measures ----

/// ‖a − b‖₂ / ‖b‖₂ on fp64 copies, or ‖a − b‖₂ where b is zero.
inline double rel_err(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor x = a.to(at::kDouble), y = b.to(at::kDouble);
    const double base = y.norm().item<double>();
    const double diff = (x - y).norm().item<double>();
    return base == 0.0 ? diff : diff / base;
}

inline bool all_finite(const at::Tensor& x) { return at::isfinite(x).all().item<bool>(); }

}  // namespace lav::test::generic
