// src/report/intermediates.h — the per-case file of `lav run --dump-intermediates`: a kernel's
// stored chunk states beside the fp64 reference's states at the same positions. Data in, file
// out; the layout is in reports/SCHEMA.md.
//
//   report::Intermediates dump;            // filled by the harness
//   report::write_intermediates(dir + "/" + report::intermediates_file_name(dump.case_id), dump);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lav::report {

/// One stored chunk state: where it sits and how far it is from the reference's.
struct ChunkStateRow {
    int64_t chunk = 0;     ///< its row in h and h_ref
    int64_t sequence = 0;  ///< the sequence it belongs to (row of the [N, H, K, V] states)
    /// the chunk's first position, counted from the sequence's start (gated_delta_product:
    /// its first sub-step)
    int64_t position = 0;
    double rel_rmse = 0;  ///< ‖h − h_ref‖₂ / ‖h_ref‖₂ over this chunk (0 when both are zero)
};

/// What one chunk variant of one case stored, and the reference's values of it.
struct Intermediates {
    std::string case_id;  ///< the scenario case, as in record ids before "/<variant>/..."
    std::string family;
    std::string variant;
    std::string input_dtype;
    std::string state_dtype;  ///< the dtype h is stored in by the kernel
    std::string layout;
    std::string shape;
    int64_t chunk_size = 0;
    std::vector<int64_t> dims;  ///< [NT, H, K, V]
    std::vector<double> h;      ///< the kernel's stored states, row-major, exact values
    std::vector<double> h_ref;  ///< the reference's states at the same positions
    std::vector<ChunkStateRow> chunks;
};

/// "<case id with every character outside [A-Za-z0-9._=-] as '_'>.h5".
std::string intermediates_file_name(const std::string& case_id);

/// Writes `dumps` (one per chunk variant of a case) to `path`: a temporary file, then a rename,
/// so a reader sees a whole file or none. Throws ReportError (exit code 3) when it cannot.
void write_intermediates(const std::string& path, const std::vector<Intermediates>& dumps);

/// Reads a file write_intermediates wrote. Throws ReportError (exit code 2) for anything else.
std::vector<Intermediates> read_intermediates(const std::string& path);

}  // namespace lav::report
