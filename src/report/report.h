// src/report/report.h — the in-memory form of an HDF5 report (schema in reports/SCHEMA.md).
//
// A report holds run attributes and one CaseRecord per (case, variant, backend, pass). The
// writer appends each case to one of two files of its own and renames that file into place, so
// the file on disk is always a complete, readable report of the finished cases; `complete`
// turns true only when the run ends.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/precision_contract.h"

namespace lav::report {

/// Schema of the files this build writes; readers accept the same major version.
inline constexpr int kSchemaVersion = 2;

namespace layout {
class Sharing;
}

struct RunInfo {
    std::string lav_version;
    std::string git_commit;
    std::string torch_version;
    std::string hdf5_version;
    std::string device;  ///< the CPU: "cpu: <model> (2 threads)"
    /// the GPU a CUDA build sees (device 0), and the CUDA driver and runtime it runs with:
    /// "NVIDIA H100 80GB HBM3", "9.0", "13.0", "13.0"; "none" without a CUDA build or device
    std::string gpu = "none", compute_capability = "none", cuda_driver = "none",
                cuda_runtime = "none";
    /// the kernels from outside lav this run loaded, "; "-separated: "fla (lav.providers.fla,
    /// fla 0.6.0, triton 3.6.0)"; "" when none
    std::string providers;
    std::string command_line;
    /// each scenario file the run read, as it was named, and its text (/scenarios), so that a
    /// report can be run again on its own (lav run --from-report)
    std::vector<std::string> scenario_paths, scenario_texts;
    std::string started_at;  ///< ISO 8601 UTC
    uint64_t seed = 0;       ///< the base seed; each case records its own too
    /// "K/N" for one shard of a run split by lav run --shard K/N; "" for a whole run (a merge
    /// of all its shards included)
    std::string shard;
    /// what the whole run selected, shards or not: "<records> records <digest>", the digest
    /// hashing the scenario files' texts, the selected record ids and the options that change a
    /// record; shards of one run share it (lav merge checks that)
    std::string selection;
};

/// One measured tensor of one case.
struct MetricRow {
    std::string tensor;          ///< "o", "ht", "dq", ...
    std::string dtype;           ///< dtype the kernel returned
    std::string expected_dtype;  ///< dtype the contract declares
    double rel_rmse = 0;         ///< ‖x − ref‖₂ / ‖ref‖₂
    double max_abs = 0;
    std::string max_abs_index;  ///< "[1, 917, 2, 40]"
    double max_rel = 0;
    int64_t nonfinite = 0;  ///< NaN/Inf where the reference is finite
    double bound = 0;       ///< rel_rmse bound
    bool pass = true;
};

/// rel_rmse per block of `block` positions along T.
struct DriftCurve {
    std::string tensor;
    int64_t block = 64;
    std::vector<double> rel_rmse;
};

/// Every kind a finding can have, in reports/SCHEMA.md's order (--fail-on names them).
const std::vector<std::string>& finding_kinds();

/// PROMOTION, DEMOTION, BOUNDARY_MISMATCH, STATE_DTYPE_CONTRACT, OUTPUT_DTYPE_CONTRACT: a record
/// with one of these and no failed measure is "warn", not "pass".
bool is_dtype_finding(const std::string& kind);

struct CaseRecord;

/// The kinds of `record`'s findings that are not informational (EQUIVALENCE, DECOMPOSITION),
/// each once, in order: "PROMOTION, BOUNDARY_MISMATCH"; "" for none. /summary's findings column.
std::string finding_summary(const CaseRecord& record);

/// A finding; `kind` is one of finding_kinds().
struct Finding {
    std::string kind;
    std::string tensor;
    std::string message;
    std::string history;  ///< the tensor's dtype history, for tracer findings; "" otherwise
};

/// One row of a case's trace: an op of its prologue (the user's op sequence before the kernel)
/// as the tracer saw it, or an item of the precision contract of a kernel variant that ran
/// (what it stores or computes inside, and in which dtype).
struct TraceRow {
    int64_t seq = 0;    ///< traced: 0, 1, 2, ... in call order; declared: -1
    std::string op;     ///< traced: "aten::addcmul"; declared: the item, "chunk states h"
    int64_t depth = 0;  ///< 0 for ops the prologue called, > 0 inside another op; declared: 0
    bool autocast = false;
    std::string inputs;   ///< "; "-joined, e.g. "fp16[2,64,4,16] <- #3 (k)"; declared: ""
    std::string outputs;  ///< "; "-joined, e.g. "fp32[2,64,4,16]"; declared: its dtype, "fp32"
    std::string source = "traced";  ///< "traced" or "declared" (from a precision contract)
    std::string kernel;             ///< declared: "<family>/<variant>/<backend>/<pass>"; traced: ""
};

struct CaseRecord {
    std::string id;  ///< "<scenario>[<matrix>]/<variant>/<backend>/<pass>", unique in a run
    std::string scenario_file;
    std::string scenario;
    std::string family;
    std::string variant;  ///< "chunk", "recurrent"
    std::string backend;  ///< "cpu", "cuda"
    std::string pass;     ///< "fwd", "bwd"
    std::string input_dtype, gate_dtype, state_dtype, output_dtype;
    std::string layout;
    std::string shape;       ///< "B2_T1024_H4_K64_V64"
    std::string cu_seqlens;  ///< "[0, 100, 1024]" or ""
    uint64_t seed = 0;
    /// "pass"; "warn" (the measures pass, with a dtype finding); "fail" (a verification failed);
    /// "error" (it could not run, or it left out a declared result: the others are measured)
    std::string verdict;
    std::string message;  ///< why, for "warn", "fail" and "error"
    /// wall time of the record: the case's reference, its kernel, measures and checks
    double seconds = 0;
    double reference_seconds = 0;  ///< the case's fp64 reference, the same in each of its records
    /// the record's kernel call, its inputs moved to its device; for an error, until it raised
    double kernel_seconds = 0;
    /// of seconds, the time an outside kernel's provider says it spent compiling and autotuning
    /// (Triton's JIT and autotuner for FLA), also where it then refused; 0 for lav's own kernels
    double jit_seconds = 0;
    std::vector<MetricRow> metrics;
    std::vector<DriftCurve> drift;
    PrecisionContract contract;
    std::vector<Finding> findings;
    /// The case's trace, the same in each of its records: the traced prologue (none without
    /// one), then the declared items of every variant and pass of the case that ran.
    std::vector<TraceRow> trace;

    /// The metric row with the largest rel_rmse / bound; nullptr when there are none.
    const MetricRow* worst() const;
};

struct Report {
    int schema_version = kSchemaVersion;
    bool complete = false;
    RunInfo run;
    std::vector<CaseRecord> cases;
};

/// Writes a report case by case; the file at `path` is complete and readable after each add()
/// and an add() costs the same at the first case and the ten-thousandth.
///
/// Two files of its own beside `path` take turns: each add() appends the rows of the cases the
/// file not in place lacks (the new one, and the one before, which went to the other) to its
/// run-wide tables, flushes it and renames it over `path` (keeping a second name for it, to append
/// to it again later). So `path` is replaced in one step by a file that is complete as it stands,
/// whenever the process dies. The caller holds an OutputLock on `path` (report/output.h).
class ReportWriter {
  public:
    /// Writes the empty report at once, so an unwritable path fails before any case runs.
    ReportWriter(std::string path, RunInfo run);
    /// Continues `resumed` (a report read back from `path`): its cases stay, new ones follow.
    ReportWriter(std::string path, Report resumed);
    /// Without finish(), `path` keeps the last report put in place (marked incomplete); the
    /// files of its own are removed.
    ~ReportWriter();
    ReportWriter(const ReportWriter&) = delete;
    ReportWriter& operator=(const ReportWriter&) = delete;
    /// Appends a case and replaces the file in one step (at most once per interval given to
    /// publish_every: the cases between wait for the next). Throws ReportError (exit 3) on I/O
    /// failure.
    void add(CaseRecord record);
    /// Puts the file in place at most once per `seconds` (0, the default: after every case): a
    /// run of many tiny cases then spends its time on them, and a process that dies loses at
    /// most that many seconds of records, which --resume runs again.
    void publish_every(double seconds) { interval_ = seconds; }
    /// Puts every case added so far in place now; the report stays incomplete.
    void flush() { publish(false); }
    /// The seconds add() and finish() spent writing, so far.
    double seconds_writing() const { return seconds_writing_; }
    /// Marks the run complete and puts the file in place a last time.
    void finish();
    const Report& report() const { return report_; }

  private:
    struct Copy;
    void publish(bool last);
    void publish_now(bool last);
    std::string path_;
    Report report_;
    std::array<std::unique_ptr<Copy>, 2> copies_;
    std::unique_ptr<layout::Sharing> sharing_;  ///< decided once, written alike to both copies
    size_t lagging_ = 0;                        ///< the copy not in place, the next to catch up
    double interval_ = 0;
    std::chrono::steady_clock::time_point published_ = std::chrono::steady_clock::now();
    double seconds_writing_ = 0;
};

/// Writes `report` to `path` (temporary file, then rename).
void write_report(const std::string& path, const Report& report);

/// Reads a report. Throws ReportError (exit 2) naming the file for a missing file, a file that
/// is not HDF5 or not a lav report, or a schema major version this build does not read.
Report read_report(const std::string& path);

}  // namespace lav::report
