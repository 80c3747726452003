// src/scenario/files.cpp — which files a list of command-line paths names, and reading one of
// them within the limits; no parsing here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/regular_file.h"
#include "scenario/scenario.h"

namespace lav::scenario {

std::vector<std::string> collect_files(const std::vector<std::string>& paths) {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    std::set<fs::path> seen;  // real paths: a file named twice, or also by its folder, runs once
    const auto take = [&](const std::string& file) {
        std::error_code ec;
        const fs::path real = fs::weakly_canonical(file, ec);
        if (seen.insert(ec ? fs::path(file) : real).second) files.push_back(file);
    };
    for (const std::string& path : paths) {
        std::error_code ec;
        const fs::file_status status = fs::status(path, ec);
        if (!fs::exists(status)) throw UsageError("no such file or directory: " + path);
        // a file named on the command line is taken whatever its extension
        if (!fs::is_directory(status)) {
            if (const auto kind = non_regular_kind(path))
                throw UsageError(path + " is " + *kind +
                                 ", not a regular file: give scenario files (*.toml) or folders");
            take(path);
            continue;
        }
        std::vector<std::string> found;
        for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end;
             it.increment(ec)) {
            if (it->is_regular_file(ec) && it->path().extension() == ".toml")
                found.push_back(it->path().string());
        }
        if (ec) throw UsageError("cannot read directory " + path + ": " + ec.message());
        std::sort(found.begin(), found.end());
        for (const std::string& file : found) take(file);
    }
    return files;
}

std::string read_scenario_text(const std::string& path) {
    // O_NONBLOCK: opening a FIFO waits for a writer, and this open must not wait
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw ScenarioError(path + ": error: cannot open the scenario file");
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat status {};
    if (::fstat(fd, &status) != 0)
        throw ScenarioError(path + ": error: cannot open the scenario file");
    if (const auto kind = non_regular_kind(status.st_mode))
        throw ScenarioError(path + ": error: is " + *kind + ", not a scenario file");
    const auto too_large = [&](uint64_t bytes) {
        return ScenarioError(path + ": error: the file has " + std::to_string(bytes) +
                             " bytes, more than the " + std::to_string(kMaxFileBytes) +
                             " a scenario file may have\nnote: split it into several files");
    };
    if (static_cast<uint64_t>(status.st_size) > kMaxFileBytes) throw too_large(status.st_size);
    // one byte more than the limit tells a file that grew since fstat
    std::string text(kMaxFileBytes + 1, '\0');
    std::size_t size = 0;
    while (size < text.size()) {
        const ssize_t n = ::read(fd, text.data() + size, text.size() - size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw ScenarioError(path + ": error: cannot read the scenario file");
        if (n == 0) break;
        size += static_cast<std::size_t>(n);
    }
    if (size > kMaxFileBytes) throw too_large(size);
    text.resize(size);
    return text;
}

}  // namespace lav::scenario
