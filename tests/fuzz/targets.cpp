// tests/fuzz/targets.cpp — the scratch files the targets hand to lav.
#include "targets.h"

#include <unistd.h>

#include <fstream>

namespace lav::fuzz {

namespace {

struct ScratchFolder {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("lav_fuzz_" + std::to_string(getpid()));
    ~ScratchFolder() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
} const g_scratch;

}  // namespace

ScratchFile::ScratchFile(const std::string& name) : path_(g_scratch.path / name) {
    std::filesystem::create_directories(g_scratch.path);
}

void ScratchFile::write(const uint8_t* data, size_t size) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out.flush()) throw std::runtime_error("cannot write the scratch file " + path());
}

}  // namespace lav::fuzz
