// src/providers/python.h — a Python module as a provider: `lav run --provider MODULE|FILE.py`.
//
// The module runs in an interpreter embedded in lav that imports the same LibTorch lav is linked
// against (the project's .venv torch, or the CUDA machine's), so tensors cross without copies (the
// tensors themselves) and the ATen ops its code dispatches go through lav's own dispatcher. Its
// functions "<variant>_<family>" become rows of the backend the module's NAME gives (its module
// name by default), called as provider.h describes; `versions()` is recorded in the report. A
// build without Python throws EnvironmentError saying why.
#pragma once

#include <map>
#include <string>

#include "harness/prologue.h"
#include "harness/registry.h"

namespace lav::providers {

/// What a loaded provider adds to the run: its backend name and the versions it reports.
struct Loaded {
    std::string backend;
    std::map<std::string, std::string> versions;
};

/// Imports `module` (a module name on the interpreter's path, or a path to a .py file) and adds
/// a row for each of its functions named after a variant of a family of this build.
Loaded load_python_provider(const std::string& module, harness::Registry& registry);

/// Runs a Python prologue (`[prologue] python = "file.py:function"`) in the same interpreter,
/// as harness::PythonRunner describes; lav/_prologue_call.py says how the function is called
/// and what it may return. A build without Python throws EnvironmentError at the key.
harness::TensorMap run_python_prologue(const scenario::Prologue& prologue,
                                       const harness::TensorMap& env,
                                       const harness::PrologueHooks& hooks);

/// Why this build cannot run Python providers, or "" when it can.
std::string python_unavailable();

}  // namespace lav::providers
