// src/harness/prologue.h — runs a scenario's prologue with real LibTorch ops, and draws its
// declared tensors. Knows no tracer and no kernel: hooks let a caller watch each tensor.
//
// Every function of the ops language is the ATen op PyTorch code would call (at::addcmul,
// at::matmul, at::rms_norm, ...), so type promotion and autocast give exactly the dtypes
// PyTorch gives; scenarios/README.md lists the op behind each function. The ops run inside the
// prologue's autocast region, opened on the device of the tensors and closed again, whatever
// happens. An op that fails (mismatched shapes, say) becomes a ScenarioError at the op in the
// scenario file, with LibTorch's message as its note.
//
//   TensorMap env = kernel_inputs;                            // q, k, v, ... as generated
//   env.merge(make_prologue_tensors(*c.prologue, c.seed));    // a, k_a, ...
//   PrologueHooks hooks;
//   hooks.on_assign = [&](const std::string& name, const at::Tensor& t) { trace.label(t, name); };
//   TensorMap out = run_prologue(*c.prologue, std::move(env), hooks);
//   at::Tensor k = out.at("k");                                 // fp32 if k_a was
//
// A Python prologue (`python = "file.py:function"`) runs the same way, in the same autocast
// region, through a PythonRunner the caller hands in (the embedded interpreter lives in
// providers/, which this library does not link).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "scenario/prologue.h"
#include "trace/autocast.h"
#include "trace/tracer.h"

namespace lav::harness {

using TensorMap = std::map<std::string, at::Tensor>;

/// Callbacks for whoever watches the prologue (a dtype tracer labels tensors with them). Either
/// may be empty.
struct PrologueHooks {
    /// each tensor of the environment, in name order, before the first op runs
    std::function<void(const std::string& name, const at::Tensor& tensor)> on_input;
    /// the value of each assignment, right after its line ran
    std::function<void(const std::string& name, const at::Tensor& tensor)> on_assign;
    /// each tensor an expression or a function's inner step computes, with its text
    /// ("normalize(q)", "q * scale_mul", "cos(freqs)"), so that findings name it
    std::function<void(const std::string& text, const at::Tensor& tensor)> on_value;
    /// Python prologues: each parameter and buffer of the module the function takes, by
    /// qualified name ("blocks.3.attn.k_a"), before the function runs
    std::function<void(const std::string& name, const at::Tensor& tensor, bool buffer)>
        on_parameter;
    /// Python prologues: where the ops are called from, for the tracer; set before the function
    /// runs and reset to nullptr after
    std::function<void(trace::Trace::SiteSource source)> on_site_source;
};

/// Calls a Python prologue's function on `env` and returns what it assigned, by name. It calls
/// `hooks.on_input` with each tensor of `env` as the function receives it (the same values, the
/// tensors Python holds), and `on_parameter` and `on_site_source`; the caller has opened the
/// prologue's autocast region. Throws ScenarioError at the `python` key for what the function
/// raised or returned wrong, EnvironmentError where the build has no Python.
using PythonRunner = std::function<TensorMap(const scenario::Prologue& prologue,
                                             const TensorMap& env, const PrologueHooks& hooks)>;

/// `message` at `at` in the prologue's scenario file, rendered with its source line and `note`,
/// then "1 error in <file>": what the errors found while a prologue runs carry.
std::string prologue_diagnostic(const scenario::Prologue& prologue, const scenario::Span& at,
                                const std::string& message, const std::string& note);

/// Draws the prologue's declared tensors at their (resolved) shapes: drawn in fp64 and rounded
/// to each tensor's dtype, like the kernel inputs. Each tensor's stream is seeded from (seed,
/// its name), so its values do not depend on which other tensors the prologue declares.
TensorMap make_prologue_tensors(const scenario::Prologue& prologue, uint64_t seed);

/// Runs the ops in order on `env` (the kernel inputs and the prologue tensors, by name) and
/// returns it with every assignment made: assigned names are added or replaced. Throws
/// ScenarioError when an op fails, when a name the ops read is not in `env`, or when the
/// autocast mode cannot be had on the tensors' device (fp16 needs CUDA tensors). A Python
/// prologue is run by `python`; without one it throws EnvironmentError.
TensorMap run_prologue(const scenario::Prologue& prologue, TensorMap env,
                       const PrologueHooks& hooks = {}, const PythonRunner& python = {});

}  // namespace lav::harness
