// src/scenario/files.cpp — which files a list of command-line paths names. No parsing here.
#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "scenario/scenario.h"

namespace lav::scenario {

std::vector<std::string> collect_files(const std::vector<std::string>& paths) {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    for (const std::string& path : paths) {
        std::error_code ec;
        const fs::file_status status = fs::status(path, ec);
        if (!fs::exists(status)) throw UsageError("no such file or directory: " + path);
        // a file named on the command line is taken whatever its extension
        if (!fs::is_directory(status)) {
            files.push_back(path);
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
        files.insert(files.end(), found.begin(), found.end());
    }
    return files;
}

}  // namespace lav::scenario
