// tests/fuzz/targets.h — the fuzz targets: bytes in, and nothing but a user-facing lav error out.
//
// Each target feeds its bytes to one reader of untrusted input the way lav does. It returns 0
// when the input was accepted and -1 when lav refused it with a user-facing error (libFuzzer
// keeps only accepted inputs in its corpus, and so does lav_fuzz). An InternalError, any other
// exception, a crash or a hang is a finding: the target lets it escape.
//
//   int status = fuzz_scenario(data, size);  // 0 or -1, or an escaping finding
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace lav::fuzz {

/// A scenario file, loaded and validated with this build's families as `lav validate` does.
int fuzz_scenario(const uint8_t* data, size_t size);
/// The ops of a prologue, parsed and checked as the scenario loader does, diagnostics rendered.
int fuzz_prologue(const uint8_t* data, size_t size);
/// A report file, read back as `lav show`, `lav gate` and `lav diff` read it.
int fuzz_report(const uint8_t* data, size_t size);

using TargetFn = int (*)(const uint8_t* data, size_t size);

/// 0 when `body` returns, -1 when it throws a user-facing lav error; rethrows an InternalError.
template <typename Body>
int expect_user_errors(Body&& body) {
    try {
        body();
        return 0;
    } catch (const InternalError&) {
        throw;
    } catch (const Error&) {
        return -1;
    }
}

/// A file in this process's scratch folder, for readers that take a path. The folder is named
/// when the process starts, so that children it forks write there too, and removed at its exit.
class ScratchFile {
  public:
    explicit ScratchFile(const std::string& name);
    /// Replaces the file's contents with `size` bytes.
    void write(const uint8_t* data, size_t size) const;
    std::string path() const { return path_.string(); }

  private:
    std::filesystem::path path_;
};

}  // namespace lav::fuzz
