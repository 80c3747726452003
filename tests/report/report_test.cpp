// tests/report/report_test.cpp — HDF5 report round trips, atomic rewrites, read errors, console
// text.
#include "report/report.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "report/console.h"
#include "report/h5.h"
#include "report/layout.h"
#include "sample_report.h"

namespace lav::report {
namespace {

namespace fs = std::filesystem;
using samples::error_case;
using samples::failing_case;
using samples::passing_case;
using samples::sample_report;
using samples::sample_run;

/// A fresh folder per test, removed afterwards.
class ReportFiles : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        folder_ = fs::temp_directory_path() / ("lav_report_test_" + std::to_string(getpid()) + "_" +
                                               info->test_suite_name() + info->name());
        fs::remove_all(folder_);
        fs::create_directories(folder_);
    }
    void TearDown() override { fs::remove_all(folder_); }

    std::string path(const std::string& name) const { return (folder_ / name).string(); }

    fs::path folder_;
};

/// Equal, or both NaN.
void expect_same_double(double expected, double actual, const std::string& what) {
    if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(actual)) << what;
    else
        EXPECT_EQ(expected, actual) << what;
}

void expect_same_case(const CaseRecord& e, const CaseRecord& a) {
    SCOPED_TRACE(e.id);
    EXPECT_EQ(e.id, a.id);
    EXPECT_EQ(e.scenario_file, a.scenario_file);
    EXPECT_EQ(e.scenario, a.scenario);
    EXPECT_EQ(e.family, a.family);
    EXPECT_EQ(e.variant, a.variant);
    EXPECT_EQ(e.backend, a.backend);
    EXPECT_EQ(e.pass, a.pass);
    EXPECT_EQ(e.input_dtype, a.input_dtype);
    EXPECT_EQ(e.gate_dtype, a.gate_dtype);
    EXPECT_EQ(e.state_dtype, a.state_dtype);
    EXPECT_EQ(e.output_dtype, a.output_dtype);
    EXPECT_EQ(e.layout, a.layout);
    EXPECT_EQ(e.shape, a.shape);
    EXPECT_EQ(e.cu_seqlens, a.cu_seqlens);
    EXPECT_EQ(e.seed, a.seed);
    EXPECT_EQ(e.verdict, a.verdict);
    EXPECT_EQ(e.message, a.message);
    EXPECT_EQ(e.seconds, a.seconds);
    EXPECT_EQ(e.reference_seconds, a.reference_seconds);
    EXPECT_EQ(e.kernel_seconds, a.kernel_seconds);
    EXPECT_EQ(e.jit_seconds, a.jit_seconds);

    ASSERT_EQ(e.metrics.size(), a.metrics.size());
    for (size_t i = 0; i < e.metrics.size(); ++i) {
        const MetricRow& em = e.metrics[i];
        const MetricRow& am = a.metrics[i];
        EXPECT_EQ(em.tensor, am.tensor);
        EXPECT_EQ(em.dtype, am.dtype);
        EXPECT_EQ(em.expected_dtype, am.expected_dtype);
        expect_same_double(em.rel_rmse, am.rel_rmse, em.tensor + " rel_rmse");
        expect_same_double(em.max_abs, am.max_abs, em.tensor + " max_abs");
        EXPECT_EQ(em.max_abs_index, am.max_abs_index);
        expect_same_double(em.max_rel, am.max_rel, em.tensor + " max_rel");
        EXPECT_EQ(em.nonfinite, am.nonfinite);
        expect_same_double(em.bound, am.bound, em.tensor + " bound");
        EXPECT_EQ(em.pass, am.pass);
    }

    ASSERT_EQ(e.drift.size(), a.drift.size());
    for (size_t i = 0; i < e.drift.size(); ++i) {
        EXPECT_EQ(e.drift[i].tensor, a.drift[i].tensor);
        EXPECT_EQ(e.drift[i].block, a.drift[i].block);
        EXPECT_EQ(e.drift[i].rel_rmse, a.drift[i].rel_rmse);
    }

    EXPECT_EQ(e.contract.kernel, a.contract.kernel);
    ASSERT_EQ(e.contract.items.size(), a.contract.items.size());
    for (size_t i = 0; i < e.contract.items.size(); ++i) {
        EXPECT_EQ(e.contract.items[i].item, a.contract.items[i].item);
        EXPECT_EQ(e.contract.items[i].dtype, a.contract.items[i].dtype);
        EXPECT_EQ(e.contract.items[i].note, a.contract.items[i].note);
    }

    ASSERT_EQ(e.trace.size(), a.trace.size());
    for (size_t i = 0; i < e.trace.size(); ++i) {
        EXPECT_EQ(e.trace[i].seq, a.trace[i].seq);
        EXPECT_EQ(e.trace[i].op, a.trace[i].op);
        EXPECT_EQ(e.trace[i].depth, a.trace[i].depth);
        EXPECT_EQ(e.trace[i].autocast, a.trace[i].autocast);
        EXPECT_EQ(e.trace[i].inputs, a.trace[i].inputs);
        EXPECT_EQ(e.trace[i].outputs, a.trace[i].outputs);
        EXPECT_EQ(e.trace[i].source, a.trace[i].source);
        EXPECT_EQ(e.trace[i].kernel, a.trace[i].kernel);
    }
    ASSERT_EQ(e.findings.size(), a.findings.size());
    for (size_t i = 0; i < e.findings.size(); ++i) {
        EXPECT_EQ(e.findings[i].kind, a.findings[i].kind);
        EXPECT_EQ(e.findings[i].tensor, a.findings[i].tensor);
        EXPECT_EQ(e.findings[i].message, a.findings[i].message);
        EXPECT_EQ(e.findings[i].history, a.findings[i].history);
    }
}

void expect_same_run(const RunInfo& e, const RunInfo& a) {
    EXPECT_EQ(e.lav_version, a.lav_version);
    EXPECT_EQ(e.git_commit, a.git_commit);
    EXPECT_EQ(e.torch_version, a.torch_version);
    EXPECT_EQ(e.hdf5_version, a.hdf5_version);
    EXPECT_EQ(e.device, a.device);
    EXPECT_EQ(e.gpu, a.gpu);
    EXPECT_EQ(e.compute_capability, a.compute_capability);
    EXPECT_EQ(e.cuda_driver, a.cuda_driver);
    EXPECT_EQ(e.cuda_runtime, a.cuda_runtime);
    EXPECT_EQ(e.command_line, a.command_line);
    EXPECT_EQ(e.started_at, a.started_at);
    EXPECT_EQ(e.seed, a.seed);
}

/// Runs `read` and returns the ReportError it throws; fails the test when it throws none.
template <typename F>
ReportError report_error_of(F read) {
    try {
        read();
    } catch (const ReportError& e) {
        return e;
    }
    ADD_FAILURE() << "no ReportError thrown";
    return ReportError("none");
}

// ---- round trips ----

using ReportRoundTrip = ReportFiles;

TEST_F(ReportRoundTrip, EveryFieldSurvives) {
    const Report written = sample_report();
    write_report(path("run.h5"), written);
    const Report read = read_report(path("run.h5"));

    EXPECT_EQ(read.schema_version, kSchemaVersion);
    EXPECT_TRUE(read.complete);
    expect_same_run(written.run, read.run);
    ASSERT_EQ(read.cases.size(), written.cases.size());
    for (size_t i = 0; i < written.cases.size(); ++i)
        expect_same_case(written.cases[i], read.cases[i]);
}

TEST_F(ReportRoundTrip, EmptyReportHasEmptySummary) {
    Report written;
    written.run = sample_run();
    write_report(path("empty.h5"), written);

    const Report read = read_report(path("empty.h5"));
    EXPECT_FALSE(read.complete);
    EXPECT_TRUE(read.cases.empty());
    const h5::File file = h5::File::open_read_only(path("empty.h5"));
    EXPECT_EQ(file.open_dataset("summary").rows(), 0u);
    EXPECT_EQ(h5::read_attribute<int64_t>(file, "case_count"), 0);
}

TEST_F(ReportRoundTrip, SummaryRowsCarryEachCasesWorstTensor) {
    const Report written = sample_report();
    write_report(path("run.h5"), written);

    const h5::File file = h5::File::open_read_only(path("run.h5"));
    const h5::Table summary = h5::read_table(file, "summary",
                                             {{"id", std::vector<std::string>{}},
                                              {"pass", std::vector<std::string>{}},
                                              {"verdict", std::vector<std::string>{}},
                                              {"worst_tensor", std::vector<std::string>{}},
                                              {"worst_rel_rmse", std::vector<double>{}},
                                              {"worst_bound", std::vector<double>{}},
                                              {"seconds", std::vector<double>{}}});
    const auto& ids = h5::column<std::string>(summary, "id");
    ASSERT_EQ(ids.size(), written.cases.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        const CaseRecord& c = written.cases[i];
        SCOPED_TRACE(c.id);
        EXPECT_EQ(ids[i], c.id);
        EXPECT_EQ(h5::column<std::string>(summary, "pass")[i], c.pass);
        EXPECT_EQ(h5::column<std::string>(summary, "verdict")[i], c.verdict);
        EXPECT_EQ(h5::column<double>(summary, "seconds")[i], c.seconds);
        const MetricRow* worst = c.worst();
        EXPECT_EQ(h5::column<std::string>(summary, "worst_tensor")[i], worst ? worst->tensor : "");
        expect_same_double(worst ? worst->rel_rmse : NAN,
                           h5::column<double>(summary, "worst_rel_rmse")[i], "worst_rel_rmse");
        expect_same_double(worst ? worst->bound : NAN,
                           h5::column<double>(summary, "worst_bound")[i], "worst_bound");
    }
}

TEST_F(ReportRoundTrip, RecordsWithTheSameTraceOrContractShareTheirRows) {
    // the records of one case carry one trace, and every record of one kernel one contract:
    // each is written once, and read back into every record
    Report written = sample_report();
    CaseRecord sibling = written.cases[1];
    sibling.id = "smoke[dtypes.inputs=bf16]/recurrent/cpu/bwd";
    sibling.contract.items.pop_back();
    written.cases.push_back(sibling);
    write_report(path("run.h5"), written);

    const h5::File file = h5::File::open_read_only(path("run.h5"));
    const h5::Table cases = h5::read_table(
        file, "cases",
        {{"trace_case", std::vector<int64_t>{}}, {"contract_case", std::vector<int64_t>{}}});
    EXPECT_EQ(h5::column<int64_t>(cases, "trace_case"), (std::vector<int64_t>{0, 1, 0, 1}));
    EXPECT_EQ(h5::column<int64_t>(cases, "contract_case"), (std::vector<int64_t>{0, 0, 2, 3}));
    EXPECT_EQ(file.open_dataset("trace").rows(), written.cases[1].trace.size());
    EXPECT_EQ(file.open_dataset("contract").rows(),
              written.cases[0].contract.items.size() + sibling.contract.items.size());

    const Report read = read_report(path("run.h5"));
    ASSERT_EQ(read.cases.size(), written.cases.size());
    for (size_t i = 0; i < written.cases.size(); ++i)
        expect_same_case(written.cases[i], read.cases[i]);
}

TEST_F(ReportRoundTrip, TablesKeyRowsByCaseIndex) {
    write_report(path("run.h5"), sample_report());
    const h5::File file = h5::File::open_read_only(path("run.h5"));
    const h5::Table metrics =
        h5::read_table(file, "metrics",
                       {{"case", std::vector<int64_t>{}}, {"tensor", std::vector<std::string>{}}});
    EXPECT_EQ(h5::column<int64_t>(metrics, "case"), (std::vector<int64_t>{0, 0, 1, 1, 1}));
    EXPECT_EQ(h5::column<std::string>(metrics, "tensor"),
              (std::vector<std::string>{"o", "ht", "o", "dq", "dk"}));
    const h5::Table drift = h5::read_table(file, "drift",
                                           {{"case", std::vector<int64_t>{}},
                                            {"tensor", std::vector<std::string>{}},
                                            {"position", std::vector<int64_t>{}}});
    EXPECT_EQ(h5::column<int64_t>(drift, "case"), (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1}));
    EXPECT_EQ(h5::column<int64_t>(drift, "position"),
              (std::vector<int64_t>{0, 64, 128, 192, 0, 0, 64}));
}

// ---- the writer ----

using ReportWriterFile = ReportFiles;

TEST_F(ReportWriterFile, HoldsExactlyTheFinishedCasesAfterEachAdd) {
    const std::string target = path("run.h5");
    const std::vector<CaseRecord> cases = sample_report().cases;
    ReportWriter writer(target, sample_run());
    EXPECT_TRUE(read_report(target).cases.empty());

    for (size_t n = 1; n <= cases.size(); ++n) {
        writer.add(cases[n - 1]);
        const Report read = read_report(target);
        EXPECT_FALSE(read.complete);
        ASSERT_EQ(read.cases.size(), n);
        for (size_t i = 0; i < n; ++i) expect_same_case(cases[i], read.cases[i]);
        EXPECT_FALSE(fs::exists(target + ".tmp"));
    }
    writer.finish();
    const Report read = read_report(target);
    EXPECT_TRUE(read.complete);
    EXPECT_EQ(read.cases.size(), cases.size());
    EXPECT_FALSE(fs::exists(target + ".tmp"));
    // nothing but the report is left in the folder
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(folder_))
        names.push_back(entry.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"run.h5"});
}

TEST_F(ReportWriterFile, WithAnIntervalPutsTheFileInPlaceAtMostThatOften) {
    const std::string target = path("run.h5");
    const std::vector<CaseRecord> cases = sample_report().cases;
    ReportWriter writer(target, sample_run());
    writer.publish_every(3600);  // longer than the test
    for (const auto& c : cases) writer.add(c);
    // the cases wait for the interval; the file on disk is still the empty report, readable
    EXPECT_TRUE(read_report(target).cases.empty());
    EXPECT_EQ(writer.report().cases.size(), cases.size());
    writer.finish();
    const Report read = read_report(target);
    EXPECT_TRUE(read.complete);
    EXPECT_EQ(read.cases.size(), cases.size());
    EXPECT_GT(writer.seconds_writing(), 0.0);
}

/// Case `i` of a big run of small cases.
CaseRecord tiny_case(size_t i) {
    CaseRecord c = passing_case();
    c.id = "tiny[seed=" + std::to_string(i) + "]/chunk/cpu/fwd";
    c.seed = i;
    return c;
}

std::vector<CaseRecord> tiny_cases(size_t count) {
    std::vector<CaseRecord> cases;
    for (size_t i = 0; i < count; ++i) cases.push_back(tiny_case(i));
    return cases;
}

ino_t inode_of(const std::string& file) {
    struct stat status {};
    EXPECT_EQ(stat(file.c_str(), &status), 0) << file;
    return status.st_ino;
}

TEST_F(ReportWriterFile, AppendsToTwoFilesInPlaceInsteadOfRewriting) {
    // a report rewritten whole after each case is a new file each time
    const std::string target = path("run.h5");
    ReportWriter writer(target, sample_run());
    std::set<ino_t> files{inode_of(target)};
    for (const CaseRecord& c : tiny_cases(12)) {
        writer.add(c);
        files.insert(inode_of(target));
    }
    EXPECT_EQ(files.size(), 2u);
    writer.finish();
    const Report read = read_report(target);
    EXPECT_TRUE(read.complete);
    EXPECT_EQ(read.cases.size(), 12u);
}

TEST_F(ReportWriterFile, AnAddCostsTheSameLateAsEarly) {
    // process CPU time, steadier than wall time on a shared machine; rewriting the whole report
    // would make the last adds about ten times dearer than the first
    const std::vector<CaseRecord> cases = tiny_cases(400);
    ReportWriter writer(path("run.h5"), sample_run());
    std::vector<double> cpu;
    for (const CaseRecord& c : cases) {
        const std::clock_t before = std::clock();
        writer.add(c);
        cpu.push_back(static_cast<double>(std::clock() - before) / CLOCKS_PER_SEC);
    }
    const auto sum = [&](size_t first) {
        return std::accumulate(cpu.begin() + static_cast<ptrdiff_t>(first),
                               cpu.begin() + static_cast<ptrdiff_t>(first + 50), 0.0);
    };
    EXPECT_LT(sum(cases.size() - 50), 3 * sum(10) + 0.05)
        << "first adds " << sum(10) << " s, last adds " << sum(cases.size() - 50) << " s";
}

TEST_F(ReportWriterFile, KilledAtAnyMomentLeavesAReadableIncompleteReport) {
    const std::string target = path("run.h5");
    std::mt19937 random(7);
    for (int attempt = 0; attempt < 12; ++attempt) {
        fs::remove(target);
        const pid_t child = fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
            ReportWriter writer(target, sample_run());
            for (size_t i = 0;; ++i) writer.add(tiny_case(i));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20000 + random() % 80000));
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
        if (!fs::exists(target)) continue;  // killed before the first report was in place
        const Report read = read_report(target);
        EXPECT_FALSE(read.complete);
        for (size_t i = 0; i < read.cases.size(); ++i) EXPECT_EQ(read.cases[i].id, tiny_case(i).id);
    }
}

TEST_F(ReportWriterFile, DroppedUnfinishedKeepsTheLastReportAndNoTemporary) {
    const std::string target = path("run.h5");
    {
        ReportWriter writer(target, sample_run());
        for (const CaseRecord& c : tiny_cases(3)) writer.add(c);
    }
    const Report read = read_report(target);
    EXPECT_FALSE(read.complete);
    EXPECT_EQ(read.cases.size(), 3u);
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(folder_))
        names.push_back(entry.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"run.h5"});
}

TEST_F(ReportWriterFile, RefusesADeviceOrAFifo) {
    const std::string fifo = path("fifo");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
    EXPECT_THROW(ReportWriter(fifo, sample_run()), UsageError);
    EXPECT_THROW(write_report(fifo, sample_report()), UsageError);
    struct stat status {};
    ASSERT_EQ(stat(fifo.c_str(), &status), 0);
    EXPECT_TRUE(S_ISFIFO(status.st_mode));
}

TEST_F(ReportWriterFile, CreatesMissingFolders) {
    const std::string target = path("nested/deeper/run.h5");
    ReportWriter writer(target, sample_run());
    writer.add(passing_case());
    writer.finish();
    EXPECT_EQ(read_report(target).cases.size(), 1u);
}

TEST_F(ReportWriterFile, RewritesAnExistingReport) {
    const std::string target = path("run.h5");
    write_report(target, sample_report());
    ReportWriter writer(target, sample_run());
    writer.add(error_case());
    const Report read = read_report(target);
    ASSERT_EQ(read.cases.size(), 1u);
    EXPECT_EQ(read.cases[0].id, error_case().id);
}

TEST_F(ReportWriterFile, UnwritableFolderIsAnEnvironmentError) {
    // a regular file where the folder should be: no folder can be created there, even as root
    std::ofstream(path("not_a_folder")) << "x";
    const std::string target = path("not_a_folder/run.h5");
    const ReportError e = report_error_of([&] { ReportWriter writer(target, sample_run()); });
    EXPECT_EQ(e.exit_code(), ExitCode::kEnvironment);
    EXPECT_NE(std::string(e.what()).find(target), std::string::npos) << e.what();
    EXPECT_FALSE(fs::exists(target + ".tmp"));
}

TEST_F(ReportWriterFile, FailedWriteLeavesNoTemporaryFile) {
    // a name that fits but leaves no room for the temporary file's longer one: the create fails
    const std::string target = path(std::string(250, 'r'));
    const ReportError e = report_error_of([&] { write_report(target, sample_report()); });
    EXPECT_EQ(e.exit_code(), ExitCode::kEnvironment);
    EXPECT_NE(std::string(e.what()).find(target + "." + std::to_string(getpid())),
              std::string::npos)
        << e.what();
    EXPECT_TRUE(fs::is_empty(folder_));
}

// ---- read errors ----

using ReadReportError = ReportFiles;

void expect_usage_error_naming(const std::string& file, const std::string& words) {
    const ReportError e = report_error_of([&] { read_report(file); });
    const std::string what = e.what();
    EXPECT_EQ(e.exit_code(), ExitCode::kUsage) << what;
    EXPECT_NE(what.find(file), std::string::npos) << what;
    EXPECT_NE(what.find(words), std::string::npos) << what;
    EXPECT_NE(what.find("note: "), std::string::npos) << what;
}

/// Replaces dataset `name` of report `to` by that of report `from`.
void transplant(const std::string& from, const std::string& to, const char* name) {
    const hid_t source = H5Fopen(from.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t target = H5Fopen(to.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(source, 0);
    ASSERT_GE(target, 0);
    EXPECT_GE(H5Ldelete(target, name, H5P_DEFAULT), 0);
    EXPECT_GE(H5Ocopy(source, name, target, name, H5P_DEFAULT, H5P_DEFAULT), 0);
    H5Fclose(target);
    H5Fclose(source);
}

TEST_F(ReadReportError, SummaryThatSaysOtherThanItsCase) {
    // /summary says the failing case passed: pandas readers of the summary would be misled
    const Report report = sample_report();
    Report claimed = report;
    claimed.cases[1].verdict = "pass";
    const std::string file = path("run.h5");
    write_report(file, report);
    write_report(path("claimed.h5"), claimed);
    transplant(path("claimed.h5"), file, "summary");
    const ReportError e = report_error_of([&] { read_report(file); });
    const std::string what = e.what();
    EXPECT_EQ(e.exit_code(), ExitCode::kUsage) << what;
    EXPECT_NE(what.find(file), std::string::npos) << what;
    EXPECT_NE(what.find(report.cases[1].id), std::string::npos) << what;
    EXPECT_NE(what.find("verdict"), std::string::npos) << what;
}

TEST_F(ReadReportError, RowsOutOfCaseOrderOrOfNoCaseAreRefused) {
    // rows are found by their case index; a row of no case, or out of order, is a damaged file
    Report report = sample_report();
    write_report(path("run.h5"), report);
    Report more = report;
    more.cases.push_back(passing_case());
    write_report(path("more.h5"), more);
    transplant(path("more.h5"), path("run.h5"), "metrics");
    expect_usage_error_naming(path("run.h5"), "/metrics row 5 names case 3, of 3 cases");

    {
        h5::File out = h5::File::create(path("unordered.h5"));
        h5::write_table(out, "findings",
                        {{"case", std::vector<int64_t>{1, 0}},
                         {"kind", std::vector<std::string>{"TOLERANCE", "DRIFT"}},
                         {"tensor", std::vector<std::string>{"o", "o"}},
                         {"message", std::vector<std::string>{"", ""}},
                         {"history", std::vector<std::string>{"", ""}}});
        out.close();
    }
    write_report(path("run.h5"), report);
    transplant(path("unordered.h5"), path("run.h5"), "findings");
    expect_usage_error_naming(path("run.h5"), "/findings row 1 names case 0, after case 1");
}

TEST_F(ReadReportError, MissingFile) {
    expect_usage_error_naming(path("absent.h5"), "no such file");
}

TEST_F(ReadReportError, RandomBytes) {
    std::mt19937 generator(5);
    std::ofstream out(path("noise.h5"), std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>(generator() & 0xFF));
    out.close();
    expect_usage_error_naming(path("noise.h5"), "not an HDF5 file");
}

TEST_F(ReadReportError, HdfFileThatIsNotAReport) {
    {
        h5::File file = h5::File::create(path("other.h5"));
        h5::write_attribute(file, "title", std::string("someone else's data"));
        file.close();
    }
    expect_usage_error_naming(path("other.h5"), "not a lav report");
}

TEST_F(ReadReportError, OtherSchemaVersion) {
    {
        h5::File file = h5::File::create(path("future.h5"));
        h5::write_attribute(file, "schema_version", int32_t{kSchemaVersion + 1});
        h5::write_attribute(file, "lav_version", std::string("9.0.0"));
        file.close();
    }
    expect_usage_error_naming(path("future.h5"),
                              "schema version " + std::to_string(kSchemaVersion + 1) +
                                  ", this lav reads version " + std::to_string(kSchemaVersion));
    {
        // version 1 kept a group of objects per case
        h5::File file = h5::File::create(path("old.h5"));
        h5::write_attribute(file, "schema_version", int32_t{1});
        h5::write_attribute(file, "lav_version", std::string("0.1.0"));
        h5::Group cases = file.create_group("cases");
        cases.create_group("0000");
        file.close();
    }
    expect_usage_error_naming(path("old.h5"), "schema version 1");
    const ReportError e = report_error_of([&] { read_report(path("future.h5")); });
    EXPECT_NE(std::string(e.what()).find("lav 9.0.0"), std::string::npos) << e.what();
}

TEST_F(ReadReportError, DamagedReportNamesTheMissingPiece) {
    {
        h5::File file = h5::File::create(path("damaged.h5"));
        h5::write_attribute(file, "schema_version", int32_t{kSchemaVersion});
        file.close();
    }
    expect_usage_error_naming(path("damaged.h5"), "attribute 'complete' of /");
}

TEST_F(ReadReportError, MissingTableColumnIsNamed) {
    write_report(path("run.h5"), sample_report());
    const h5::File file = h5::File::open_read_only(path("run.h5"));
    const ReportError e = report_error_of([&] {
        h5::read_table(file, "metrics", {{"ulp", std::vector<double>{}}});
    });
    EXPECT_EQ(e.exit_code(), ExitCode::kUsage);
    EXPECT_NE(std::string(e.what()).find("/metrics has no column 'ulp'"), std::string::npos)
        << e.what();
}

TEST_F(ReadReportError, TraceRowOfUnknownSourceIsNamed) {
    Report report = sample_report();
    report.cases[1].trace[2].source = "guessed";
    write_report(path("run.h5"), report);
    expect_usage_error_naming(path("run.h5"), "unknown source 'guessed'");
}

// ---- CaseRecord::worst ----

MetricRow row(const std::string& tensor, double rel_rmse, double bound) {
    MetricRow m;
    m.tensor = tensor;
    m.rel_rmse = rel_rmse;
    m.bound = bound;
    return m;
}

TEST(CaseRecordWorst, NoneWithoutMetrics) { EXPECT_EQ(CaseRecord{}.worst(), nullptr); }

TEST(CaseRecordWorst, LargestErrorRelativeToItsBound) {
    CaseRecord c;
    c.metrics = {row("o", 1e-3, 1e-2), row("dq", 4e-3, 5e-3), row("dg", 2e-2, 1e-1)};
    ASSERT_NE(c.worst(), nullptr);
    EXPECT_EQ(c.worst()->tensor, "dq");
}

TEST(CaseRecordWorst, NanErrorIsWorst) {
    CaseRecord c;
    c.metrics = {row("o", 9e-3, 5e-3), row("dq", std::numeric_limits<double>::quiet_NaN(), 5e-3)};
    EXPECT_EQ(c.worst()->tensor, "dq");
}

TEST(CaseRecordWorst, RowsWithABoundComeFirst) {
    CaseRecord c;
    c.metrics = {row("unbounded", 0.5, 0), row("o", 1e-4, 5e-3)};
    EXPECT_EQ(c.worst()->tensor, "o");
    c.metrics = {row("a", 0.1, 0), row("b", 0.5, 0)};
    EXPECT_EQ(c.worst()->tensor, "b");
}

// ---- console ----

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

TEST(ConsoleSummary, OneAlignedRowPerCaseAndTotals) {
    std::ostringstream out;
    print_summary_table(out, sample_report());
    const std::vector<std::string> lines = lines_of(out.str());
    ASSERT_EQ(lines.size(), 6u) << out.str();

    EXPECT_EQ(lines[0].rfind("case", 0), 0u) << lines[0];
    EXPECT_EQ(lines[1].rfind(passing_case().id, 0), 0u) << lines[1];
    EXPECT_NE(lines[1].find("PASS"), std::string::npos);
    EXPECT_NE(lines[1].find("2.40e-03"), std::string::npos);
    EXPECT_NE(lines[1].find("5.00e-03"), std::string::npos);
    EXPECT_NE(lines[1].find("0.42"), std::string::npos);
    // the failing case's worst tensor is dq, whose error is NaN
    EXPECT_NE(lines[2].find("FAIL"), std::string::npos);
    EXPECT_NE(lines[2].find(" dq "), std::string::npos) << lines[2];
    EXPECT_NE(lines[2].find("8.00e-03"), std::string::npos) << lines[2];
    EXPECT_NE(lines[3].find("ERROR"), std::string::npos);
    EXPECT_NE(lines[3].find(" - "), std::string::npos) << lines[3];
    EXPECT_EQ(lines[4], "3 cases: 1 passed, 0 warned, 1 failed, 1 error");
    // the failing case's row counted 0.5 s of its kernel time as compiling
    EXPECT_EQ(lines[5], "kernels 0.8 s, of which compiling and autotuning 0.5 s (cpu's count)");

    // every row starts its verdict, and ends its seconds, in the same column (in code points;
    // the error case's id holds a two-byte 'ü')
    const auto column_of = [](const std::string& line, const std::string& word) {
        const std::string before = line.substr(0, line.find(word));
        return std::count_if(before.begin(), before.end(),
                             [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
    };
    EXPECT_EQ(column_of(lines[0], "verdict"), column_of(lines[1], "PASS"));
    EXPECT_EQ(column_of(lines[0], "verdict"), column_of(lines[2], "FAIL"));
    EXPECT_EQ(column_of(lines[0], "verdict"), column_of(lines[3], "ERROR"));
    EXPECT_EQ(column_of(lines[0], "seconds") + 7, column_of(lines[1], "0.42") + 4);
    EXPECT_EQ(column_of(lines[0], "seconds") + 7, column_of(lines[2], "1.25") + 4);
}

TEST(ConsoleSummary, IncompleteRunIsSaid) {
    Report report = sample_report();
    report.complete = false;
    report.cases.pop_back();
    std::ostringstream out;
    print_summary_table(out, report);
    EXPECT_NE(out.str().find("2 cases: 1 passed, 0 warned, 1 failed, 0 errors (incomplete run)\n"),
              std::string::npos)
        << out.str();

    std::ostringstream complete;
    print_summary_table(complete, sample_report());
    EXPECT_EQ(complete.str().find("incomplete"), std::string::npos);
}

TEST(ConsoleSummary, EmptyRunPrintsOnlyTotals) {
    std::ostringstream out;
    Report report;
    report.complete = true;
    print_summary_table(out, report);
    EXPECT_EQ(out.str(), "0 cases: 0 passed, 0 warned, 0 failed, 0 errors\n");
}

TEST(ConsoleSummary, LongIdsKeepTheirEnds) {
    Report report;
    CaseRecord c = passing_case();
    c.id =
        "nightly_long_context[dtypes.inputs=bf16,dtypes.state=fp32,dtypes.gates=fp32,shape.T=65536,"
        "layout=head_first]/chunk/cpu/fwd";
    report.cases = {c};
    std::ostringstream out;
    print_summary_table(out, report);
    const std::string line = lines_of(out.str())[1];
    const std::string shown = line.substr(0, line.find("  "));
    EXPECT_EQ(shown.rfind("nightly_long_context[", 0), 0u) << shown;
    EXPECT_NE(shown.find("…"), std::string::npos) << shown;
    EXPECT_EQ(shown.substr(shown.size() - 17), "…/chunk/cpu/fwd") << shown;
    // "…" is three bytes and one column: the id fills the widest column the table allows
    EXPECT_EQ(shown.size() - 2, 100u);
}

TEST(ConsoleFailure, OneLinePerFinding) {
    std::ostringstream out;
    print_case_failure(out, failing_case());
    const std::vector<std::string> lines = lines_of(out.str());
    ASSERT_EQ(lines.size(), 6u) << out.str();
    EXPECT_EQ(lines[0],
              "FAIL smoke[dtypes.inputs=bf16]/chunk/cpu/bwd  B2_T1024_H4_K64_V64  cu_seqlens "
              "[0, 100, 1024]  bf16 in / fp32 state / head_last");
    // a failing measure is told once, by its finding
    EXPECT_EQ(lines[1], "  TOLERANCE o: rel_rmse 6.1e-03 above bound 5.0e-03");
    EXPECT_EQ(lines[2].rfind("  NONFINITE dq: 3 NaN", 0), 0u) << lines[2];
    EXPECT_EQ(lines[3].rfind("  OUTPUT_DTYPE_CONTRACT dq: ", 0), 0u) << lines[3];
    // a tracer finding carries the tensor's dtype history on its own line
    EXPECT_EQ(lines[4].rfind("  PROMOTION k: k: fp16 -> fp32 at aten::addcmul", 0), 0u) << lines[4];
    EXPECT_EQ(lines[5], "      k: fp16 —aten::addcmul(k_a: fp32)→ fp32");
    EXPECT_EQ(out.str().find("rel_rmse 6.1e-03 >"), std::string::npos) << "the metric line again";
}

TEST(ConsoleSummary, WarnedCasesAreCounted) {
    Report report = sample_report();
    report.cases[0].verdict = "warn";
    std::ostringstream out;
    print_summary_table(out, report);
    const std::vector<std::string> lines = lines_of(out.str());
    EXPECT_NE(lines[1].find("WARN"), std::string::npos) << lines[1];
    EXPECT_EQ(lines[4], "3 cases: 0 passed, 1 warned, 1 failed, 1 error");
}

TEST(ConsoleSummary, CompileTimeIsToldOnlyWhereCounted) {
    Report report = sample_report();
    for (CaseRecord& c : report.cases) c.jit_seconds = 0;
    std::ostringstream out;
    print_summary_table(out, report);
    EXPECT_EQ(lines_of(out.str()).back(), "3 cases: 1 passed, 0 warned, 1 failed, 1 error");
}

TEST(ConsoleDetails, RecordsOfOneCaseWithTheSameFindingsAreToldOnce) {
    CaseRecord warn = passing_case();
    warn.id = "seed[x=1]/chunk/cpu/fwd";
    warn.verdict = "warn";
    warn.findings = {{"PROMOTION", "k", "k: fp16 -> fp32 at aten::addcmul", "k: fp16 -> fp32"}};
    CaseRecord bwd = warn;
    bwd.id = "seed[x=1]/chunk/cpu/bwd";
    CaseRecord other = warn;
    other.id = "seed[x=2]/chunk/cpu/fwd";
    CaseRecord plain = passing_case();
    Report report;
    report.cases = {warn, bwd, other, plain};
    std::ostringstream out;
    print_case_details(out, report);
    const std::string text = out.str();
    EXPECT_NE(text.find("WARN seed[x=1]/chunk/cpu/fwd"), std::string::npos) << text;
    EXPECT_NE(text.find("  the same for chunk/cpu/bwd\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("WARN seed[x=1]/chunk/cpu/bwd"), std::string::npos) << text;
    // another case of the same scenario is its own block; a plain pass is not shown
    EXPECT_NE(text.find("WARN seed[x=2]/chunk/cpu/fwd"), std::string::npos) << text;
    EXPECT_EQ(text.find(plain.id), std::string::npos) << text;
}

TEST(ConsoleFailure, ErrorCaseShowsItsMessage) {
    std::ostringstream out;
    print_case_failure(out, error_case());
    EXPECT_EQ(out.str(),
              "ERROR seeds/fp16_ü[shape.T=8192]/recurrent/cpu/fwd  B1_T8192_H2_K64_V64  fp16 in / "
              "fp16 state / head_first\n"
              "  kernel refused the inputs: state dtype fp16 is not supported\n"
              "  wanted fp32\n");
}

TEST(ConsoleFailure, FailWithoutDetailsShowsItsMessage) {
    CaseRecord c = passing_case();
    c.verdict = "fail";
    c.message = "final state depends on the next sequence";
    std::ostringstream out;
    print_case_failure(out, c);
    EXPECT_EQ(lines_of(out.str()).at(1), "  final state depends on the next sequence");
}

}  // namespace
}  // namespace lav::report
