// src/harness/runner.h — runs one case: inputs, reference, every variant and pass, measures,
// findings.
//
// Verification failures are results: a case whose kernel is off, or throws, becomes a record
// with verdict "fail" or "error" and the caller goes on to the next case; one whose measures
// pass with a dtype finding (a promotion, a boundary mismatch, ...) is "warn".
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "harness/prologue.h"
#include "harness/registry.h"
#include "report/intermediates.h"
#include "report/report.h"

namespace lav::harness {

struct RunOptions {
    /// a BOUNDARY_MISMATCH fails the case (otherwise the kernel runs on the cast inputs)
    bool strict_boundary = false;
    /// finding kinds that fail a record (lav run --fail-on), dtype findings then fail, not warn
    std::set<std::string> fail_on;
    /// rerun each row with its storage roundings kept in fp32 and add DECOMPOSITION findings
    /// (lav run --decompose, decompose.h)
    bool decompose = false;
    /// rerun each row in the other layout and, for a varlen case, on each sequence alone, to
    /// say how they agree (lav run --equivalence; variants are compared always)
    bool equivalence = false;
    /// the backends each variant runs on, one record each: "auto" (backend.h) or a backend's
    /// name (cpu, cuda, a provider's)
    std::vector<std::string> backends = {"auto"};
    /// when set, gets each case's intermediates (lav run --dump-intermediates): the stored chunk
    /// states of its "chunk" variant's CPU forward beside the reference's, for the families
    /// that hand them out
    std::function<void(const std::vector<report::Intermediates>&)> on_intermediates;
    /// calls the functions of Python prologues (providers::run_python_prologue); unset, a case
    /// with one stops the run with EnvironmentError
    PythonRunner python_prologue;
    /// where the fp64 reference runs (lav run --reference-device): "auto", the case's device
    /// (CUDA when one of its variants runs there, else the CPU), "cpu" or "cuda"
    std::string reference_device = "auto";
    /// when set, told what the case does next: "reference", then each record's id before its
    /// kernel runs (lav run's progress within a long case)
    std::function<void(const std::string&)> on_stage;
};

/// Runs `c` on the backends `options` names: one record per (variant, backend, pass), handed to
/// `sink` once the case's last kernel has run. A case with a prologue runs it under the dtype
/// tracer first. Every record of the case carries the case's trace (the traced prologue, then the
/// precision-contract items of each variant and pass that ran, as declared rows) and the
/// prologue's findings. Throws only for lav's own bugs (InternalError).
void run_case(const Registry& registry, const scenario::Case& c, const RunOptions& options,
              const std::function<void(report::CaseRecord)>& sink);

/// The device `c` runs on under `backends`: "cuda" when one of its variants' rows runs there,
/// "cpu" otherwise. Its prologue's tensors live there, and by default its reference runs there.
std::string case_device(const Registry& registry, const scenario::Case& c,
                        const std::vector<std::string>& backends);

/// The id of one record of `c`: "<scenario>[<matrix>]/<variant>/<backend>/<pass>".
std::string record_id(const scenario::Case& c, const std::string& variant,
                      const std::string& backend, const std::string& pass);

/// A record of `c` with its identity (id, scenario, family, variant, backend, pass, dtypes,
/// layout, shape, seed) filled in and nothing measured.
report::CaseRecord blank_record(const scenario::Case& c, const std::string& variant,
                                const std::string& backend, const std::string& pass);

/// The passes a case asks for, in run order: "fwd", "bwd".
std::vector<std::string> passes_of(const scenario::Case& c);

/// The shape spelled as in case ids: "B2_T1024_H4_K64_V64".
std::string shape_name(const scenario::Case& c);

}  // namespace lav::harness
