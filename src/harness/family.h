// src/harness/family.h — a kernel family declared once, as data: its tensors, variants, options.
//
// A Family names every tensor of the family once, with its role, its shape in dimension
// letters and the dtype setting it follows. What a case draws, which cotangents its backward
// pass needs, which results are measured, `lav list` and the scenario catalogue are all read
// off that one list (signature.cpp). Around it a family file pairs the declaration with its
// float64 reference and its own validation rules; its kernels are rows (core/row.h).
//
//   f.tensors = {{"q", Role::input, "B T H K", DTypeSetting::inputs},
//                {"g", Role::gate, "B T H", DTypeSetting::gate, {"logsigmoid"}, "gate=g"},
//                {"h0", Role::state, "N H K V", DTypeSetting::state, {}, "initial_state"},
//                {"o", Role::output, "B T H V", DTypeSetting::output}, ...};
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/row.h"
#include "metrics/bounds.h"
#include "scenario/case.h"
#include "scenario/catalog.h"

namespace lav::harness {

/// input: q, k, v and their kin; gate: decays, β and gate parameters (their gradients are
/// measured as gate gradients); state: initial states; output: what the forward pass returns
/// (with a time axis an output, without one a final state); cotangent: the backward's seeds.
enum class Role { input, gate, state, output, cotangent };

/// Which of the case's dtype settings a tensor is made in.
enum class DTypeSetting { inputs, gate, state, output };

struct TensorDecl {
    TensorDecl(std::string name, Role role, std::string shape, DTypeSetting dtype,
               scenario::Generator draw = {}, std::string when = {}, bool grad = true)
        : name(std::move(name)),
          role(role),
          shape(std::move(shape)),
          dtype(dtype),
          draw(std::move(draw)),
          when(std::move(when)),
          grad(grad) {}

    std::string name;
    Role role;
    /// dimension letters in head_last order, space-separated; a product as "T*NH". Letters:
    /// B T H HV K V N (sequences) and the family's dim_options. A "T" axis is permuted for
    /// head_first cases.
    std::string shape;
    DTypeSetting dtype;
    /// how the case draws it unless its [inputs] say otherwise (inputs, gates, states,
    /// cotangents); Family::draw may choose by option
    scenario::Generator draw;
    /// when the case has it: "" always, "initial_state", "<option>=<value>", "<option>!=<value>"
    std::string when;
    /// inputs, gates and states: whether the backward pass returns "d" + name
    bool grad;
};

/// One tensor a case feeds to a kernel, resolved for the case (head_last shape).
struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
    bool time_major;  ///< permuted to [B, H, T, ...] for head_first cases
    scenario::Generator generator;
};

/// One result the harness compares with the reference.
struct MeasuredSpec {
    std::string name;
    metrics::TensorKind kind;
    int64_t time_dim;  ///< sequence axis in head_last order, -1 for states and parameters
};

struct Family {
    std::string name;
    std::string summary;  ///< one line for `lav list`
    std::vector<std::string> variants = {"chunk", "recurrent"};
    /// option -> allowed values, the first the default
    std::map<std::string, std::vector<std::string>> options;
    std::vector<TensorDecl> tensors;
    /// A family with several states: each component's name and the tensors that hold it
    /// (initial, final, cotangent), e.g. {"hk", {"hk0", "hkt", "dhkt"}}. A scenario may give
    /// each component its own dtype; empty for a family with one state.
    std::vector<std::pair<std::string, std::vector<std::string>>> state_components;
    /// the family's own dimension letters, each an integer option: {"M", "num_slots"}
    std::map<std::string, std::string> dim_options;
    /// A generator chosen by the case's options or sizes, for the tensors whose declared draw
    /// does not fit every case; nullopt keeps the declared one.
    std::function<std::optional<scenario::Generator>(const scenario::Case&, const std::string&)>
        draw;
    /// What the generic schema cannot check (e.g. GVA needs H | HV); unset: nothing.
    std::function<std::vector<scenario::FamilyIssue>(const scenario::Case&)> check;
    /// The float64 reference: a call with fp64 head_last tensors; returns every output, and
    /// with `backward` every gradient; with keep_chunk_states also "states".
    std::function<TensorMap(const Call&, bool backward)> reference;
    /// The reference's second, independent fp64 forward form (parallel or chunked).
    std::function<TensorMap(const Call&)> reference_check;
    /// Whether the CPU chunk row keeps its chunk states ("h") for --dump-intermediates.
    bool stores_chunk_states = false;
    /// The option that counts recurrence steps per position (chunks cut length × steps).
    std::string steps_option;
    /// The scale where a case leaves it unset; 0: K^-0.5, FLA's default for most families.
    double default_scale = 0.0;
};

/// Whether case `c` has the tensor (its `when` holds).
bool present(const TensorDecl& t, const scenario::Case& c);

/// A declared shape's axes, each as its letters: "B T*NH H" -> {{B}, {T, NH}, {H}}.
std::vector<std::vector<std::string>> axes_of(const TensorDecl& t);

/// The head_last axis of `t`'s time letter, or -1 without one.
int64_t time_dim(const TensorDecl& t);

/// The case's dimension letters: B T H HV K V N and the family's dim_options.
std::map<std::string, int64_t> dims_of(const Family& f, const scenario::Case& c);

/// The tensors the case draws for `role` (input, gate and state are drawn together when
/// `role` is Role::input; Role::cotangent gives the cotangents), in declaration order.
std::vector<TensorSpec> specs_of(const Family& f, const scenario::Case& c, Role role);

/// The results one pass measures: outputs forward; "d" + name of every present input, gate
/// and state with grad backward.
std::vector<MeasuredSpec> measured_of(const Family& f, const scenario::Case& c, bool backward);

/// A call for the case with no tensors yet: options, dims, layout, dtypes, scale, cu_seqlens.
Call call_of(const Family& f, const scenario::Case& c);

/// The case's state dtypes as one word: "fp32", or per component "hk=fp32,hv=bf16".
std::string state_dtype_text(const scenario::Case& c);

/// What the scenario validator and `lav list` know of the family.
scenario::FamilyInfo info_of(const Family& f);

}  // namespace lav::harness
