// tests/common/lav_command.h — runs the lav binary from the source folder and keeps what it
// printed and its exit code; scratch files per test process.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace lav::test {

struct Result {
    int code;
    std::string output;  ///< stdout and stderr together
};

/// Runs `binary args` (a command line: the binary may come with a wrapper) from the source folder.
inline Result lav_command(const std::string& binary, const std::string& args) {
    const std::string command =
        std::string("cd ") + LAV_SOURCE_DIR + " && " + binary + " " + args + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    std::string output;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) output.append(buf.data(), n);
    const int status = pclose(pipe);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

inline Result lav(const std::string& args) { return lav_command(LAV_BINARY, args); }

/// As lav(), killed after `seconds`: a lav that hangs fails the test on its exit code (137)
/// instead of stopping the suite.
inline Result lav_within(int seconds, const std::string& args) {
    return lav_command("timeout -s KILL " + std::to_string(seconds) + " " + LAV_BINARY, args);
}

/// `name` in a folder of this test process's own.
inline std::string scratch(const std::string& name) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("lav_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    return (dir / name).string();
}

}  // namespace lav::test
