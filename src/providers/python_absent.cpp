// src/providers/python_absent.cpp — Python providers in a build configured without Python.
#include "core/build_info.h"
#include "core/error.h"
#include "providers/python.h"

namespace lav::providers {

std::string python_unavailable() {
    return std::string("this build of lav has no Python: ") + kPythonDecision;
}

Loaded load_python_provider(const std::string& module, harness::Registry&) {
    throw EnvironmentError("--provider " + module + ": " + python_unavailable() +
                           "; reconfigure where Python's headers and library are installed "
                           "(python3-dev), or use --load-library with an op library");
}

harness::TensorMap run_python_prologue(const scenario::Prologue& prologue,
                                       const harness::TensorMap&, const harness::PrologueHooks&) {
    throw EnvironmentError(harness::prologue_diagnostic(
        prologue, prologue.python->span, "a Python prologue needs Python: " + python_unavailable(),
        "reconfigure lav where Python's headers and library are installed (python3-dev), or "
        "write the prologue as ops"));
}

}  // namespace lav::providers
