// tests/report/output_test.cpp — the lock on a report's path, temporary names, stale ones, and
// their removal on signals.
#include "report/output.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace lav::report {
namespace {

namespace fs = std::filesystem;

class Output : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        folder_ = fs::temp_directory_path() /
                  ("lav_output_test_" + std::to_string(getpid()) + "_" + info->name());
        fs::remove_all(folder_);
        fs::create_directories(folder_);
    }
    void TearDown() override { fs::remove_all(folder_); }
    std::string path(const std::string& name) const { return (folder_ / name).string(); }

    fs::path folder_;
};

/// The pid of a process that has ended.
pid_t dead_pid() {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, nullptr, 0);
    return child;
}

TEST_F(Output, SecondLockIsRefusedNamingTheHolder) {
    const std::string out = path("run.h5");
    {
        const OutputLock first(out);
        std::ifstream lock_file(out + ".lock");
        pid_t holder = 0;
        lock_file >> holder;
        EXPECT_EQ(holder, getpid());
        try {
            const OutputLock second(out);
            ADD_FAILURE() << "a second lock on one report was granted";
        } catch (const ReportError& e) {
            EXPECT_EQ(e.exit_code(), ExitCode::kEnvironment);
            EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(getpid())),
                      std::string::npos)
                << e.what();
        }
    }
    EXPECT_FALSE(fs::exists(out + ".lock"));
    const OutputLock again(out);  // free once the holder let go
}

TEST_F(Output, DeviceFifoAndFolderAreRefused) {
    const std::string fifo = path("fifo");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
    for (const std::string& out : {fifo, folder_.string(), std::string("/dev/null")}) {
        try {
            const OutputLock lock(out);
            ADD_FAILURE() << out << " was taken as a report's path";
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(out), std::string::npos) << e.what();
        }
    }
    struct stat status {};
    ASSERT_EQ(stat(fifo.c_str(), &status), 0);
    EXPECT_TRUE(S_ISFIFO(status.st_mode));
    EXPECT_FALSE(fs::exists(fifo + ".lock"));
    check_output_path(path("new.h5"));  // a name not taken yet is fine
}

TEST_F(Output, TemporaryNamesAreThisProcesssAndUnique) {
    const std::string out = path("run.h5");
    const std::string a = temporary_name(out, "tmp");
    const std::string b = temporary_name(out, "tmp");
    EXPECT_NE(a, b);
    EXPECT_EQ(a.rfind(out + "." + std::to_string(getpid()) + ".", 0), 0u) << a;
}

TEST_F(Output, StaleTemporariesOfDeadProcessesOnly) {
    const std::string out = path("run.h5");
    const std::string stale = out + "." + std::to_string(dead_pid()) + ".0123abcd.tmp";
    const std::string mine = temporary_name(out, "tmp");
    for (const std::string& name : {stale, mine, out + ".lock", path("run.h5.notes.txt")})
        std::ofstream(name) << "x";
    EXPECT_EQ(stale_temporaries(out), std::vector<std::string>{stale});
}

TEST_F(Output, TemporaryFileGoesOnDestructionAndOnSigterm) {
    const std::string kept = path("kept.tmp");
    {
        TemporaryFile temporary(path("gone.tmp"));
        std::ofstream(temporary.path()) << "x";
        TemporaryFile released(kept);
        std::ofstream(released.path()) << "x";
        released.release();
    }
    EXPECT_FALSE(fs::exists(path("gone.tmp")));
    EXPECT_TRUE(fs::exists(kept));

    const std::string killed = path("killed.tmp");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        TemporaryFile temporary(killed);
        std::ofstream(temporary.path()) << "x";
        raise(SIGTERM);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), SIGTERM);
    EXPECT_FALSE(fs::exists(killed));
}

}  // namespace
}  // namespace lav::report
