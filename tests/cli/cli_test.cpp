// tests/cli/cli_test.cpp — the lav executable end to end: run, show, validate, list, exit codes,
// kills.
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/lav_command.h"
#include "core/build_info.h"
#include "core/dtype.h"
#include "core/error.h"
#include "report/intermediates.h"
#include "report/report.h"

namespace lav {
namespace {

namespace fs = std::filesystem;

using test::lav;
using test::Result;

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("lav_cli_test_" + std::to_string(getpid()));
    fs::create_directories(dir);
    return dir / name;
}

TEST(Cli, SmokeRunPassesAndShowReadsIt) {
    const fs::path out = scratch("smoke.h5");
    const Result run = lav("run scenarios/smoke --out " + out.string());
    ASSERT_EQ(run.code, 0) << run.output;
    EXPECT_NE(run.output.find("passed"), std::string::npos) << run.output;

    const report::Report rep = report::read_report(out.string());
    EXPECT_TRUE(rep.complete);
    ASSERT_GT(rep.cases.size(), 10u);
    for (const auto& c : rep.cases) EXPECT_EQ(c.verdict, "pass") << c.id;

    const Result show = lav("show " + out.string());
    EXPECT_EQ(show.code, 0) << show.output;
    EXPECT_NE(show.output.find(rep.cases.front().id.substr(0, 20)), std::string::npos)
        << show.output;
}

TEST(Cli, DumpIntermediatesWritesChunkStatesPerCase) {
    const fs::path dir = scratch("dump");
    const Result run = lav("run tests/data/scenarios/cli/dump_gla.toml --out " +
                           scratch("dump.h5").string() + " --dump-intermediates " + dir.string());
    ASSERT_EQ(run.code, 0) << run.output;
    std::map<std::string, double> later;  // summed rel_rmse of the chunks after the first
    for (const char* state : {"fp32", "bf16"}) {
        const std::string id = std::string("cli_dump_gla[dtypes.state=") + state + "]";
        const fs::path file = dir / report::intermediates_file_name(id);
        EXPECT_EQ(file.filename(), std::string("cli_dump_gla_dtypes.state=") + state + "_.h5");
        const auto dumps = report::read_intermediates(file.string());
        ASSERT_EQ(dumps.size(), 1u) << file;
        const report::Intermediates& d = dumps[0];
        EXPECT_EQ(d.case_id, id);
        EXPECT_EQ(d.variant, "chunk");
        EXPECT_EQ(d.state_dtype, state);
        // sequences of 40 and 24 positions in chunks of 16: 3 + 2
        EXPECT_EQ(d.dims, (std::vector<int64_t>{5, 2, 16, 16}));
        ASSERT_EQ(d.chunks.size(), 5u);
        EXPECT_EQ(d.chunks[3].sequence, 1);
        EXPECT_EQ(d.chunks[3].position, 0);
        for (const auto& row : d.chunks) {
            // a sequence's first state is h0, drawn in the state dtype: stored exactly
            if (row.position == 0) {
                EXPECT_EQ(row.rel_rmse, 0.0) << state << " " << row.chunk;
            } else {
                later[state] += row.rel_rmse;
            }
        }
    }
    EXPECT_GT(later["fp32"], 0.0);
    EXPECT_LT(later["fp32"], later["bf16"]);
}

TEST(Cli, DumpIntermediatesWritesDeltaRuleChunkStates) {
    const fs::path dir = scratch("dump_delta_rule");
    const Result run =
        lav("run tests/data/scenarios/cli/dump_delta_rule.toml --out " +
            scratch("dump_delta_rule.h5").string() + " --dump-intermediates " + dir.string());
    ASSERT_EQ(run.code, 0) << run.output;
    for (const char* state : {"fp32", "bf16"}) {
        const std::string id = std::string("cli_dump_delta_rule[dtypes.state=") + state + "]";
        const auto dumps =
            report::read_intermediates((dir / report::intermediates_file_name(id)).string());
        ASSERT_EQ(dumps.size(), 1u) << id;
        const report::Intermediates& d = dumps[0];
        EXPECT_EQ(d.case_id, id);
        EXPECT_EQ(d.family, "delta_rule");
        EXPECT_EQ(d.variant, "chunk");
        EXPECT_EQ(d.state_dtype, state);
        // sequences of 40, 0 and 24 positions in chunks of 16: 3 + 0 + 2
        EXPECT_EQ(d.dims, (std::vector<int64_t>{5, 2, 16, 16}));
        ASSERT_EQ(d.chunks.size(), 5u);
        const std::vector<int64_t> sequence = {0, 0, 0, 2, 2};
        const std::vector<int64_t> position = {0, 16, 32, 0, 16};
        const int64_t per_chunk = 2 * 16 * 16;
        ASSERT_EQ(d.h.size(), static_cast<size_t>(5 * per_chunk));
        ASSERT_EQ(d.h_ref.size(), d.h.size());
        for (size_t i = 0; i < d.chunks.size(); ++i) {
            const report::ChunkStateRow& row = d.chunks[i];
            EXPECT_EQ(row.sequence, sequence[i]) << id << " chunk " << i;
            EXPECT_EQ(row.position, position[i]) << id << " chunk " << i;
            // the table's rel_rmse is that of the chunk's rows of h and h_ref as written
            double err = 0.0, norm = 0.0;
            const int64_t first = static_cast<int64_t>(i) * per_chunk;
            for (int64_t e = first; e < first + per_chunk; ++e) {
                err += (d.h[e] - d.h_ref[e]) * (d.h[e] - d.h_ref[e]);
                norm += d.h_ref[e] * d.h_ref[e];
            }
            EXPECT_NEAR(row.rel_rmse, std::sqrt(err / norm), 1e-9) << id << " chunk " << i;
            // h0 drawn in the state dtype is stored exactly; later states carry the chunk
            // algebra's bf16 intermediates, within the state bound (5e-3)
            if (row.position == 0)
                EXPECT_EQ(row.rel_rmse, 0.0) << id << " chunk " << i;
            else
                EXPECT_GT(row.rel_rmse, 0.0) << id << " chunk " << i;
            EXPECT_LT(row.rel_rmse, 5e-3) << id << " chunk " << i;
        }
    }
}

TEST(Cli, RecordsSplitTheirSecondsIntoReferenceAndKernel) {
    const fs::path out = scratch("seconds.h5");
    const fs::path junit = scratch("seconds.xml");
    const Result run = lav("run tests/data/scenarios/cli/declared_trace.toml --out " +
                           out.string() + " --junit " + junit.string());
    ASSERT_EQ(run.code, 0) << run.output;
    const report::Report rep = report::read_report(out.string());
    ASSERT_EQ(rep.cases.size(), 8u);
    std::map<std::string, double> reference_of;  // case id -> its reference's seconds
    std::stringstream xml;
    xml << std::ifstream(junit).rdbuf();
    for (const auto& r : rep.cases) {
        EXPECT_GT(r.reference_seconds, 0.0) << r.id;
        EXPECT_GT(r.kernel_seconds, 0.0) << r.id;
        EXPECT_GE(r.seconds, r.reference_seconds + r.kernel_seconds) << r.id;
        // the records of a case share its one reference
        const std::string case_id = r.id.substr(0, r.id.find("]/") + 1);
        const auto [it, first] = reference_of.emplace(case_id, r.reference_seconds);
        EXPECT_EQ(it->second, r.reference_seconds) << r.id;
        // JUnit's time is the record's wall time, its reference included
        std::ostringstream time;
        time << "name=\"" << r.id << "\" time=\"" << r.seconds << "\"";
        EXPECT_NE(xml.str().find(time.str()), std::string::npos) << time.str();
    }
    EXPECT_EQ(reference_of.size(), 2u);
    // the machine: a build without CUDA or a machine without a GPU names none
    if (!kCudaBuild || !at::hasCUDA()) {
        EXPECT_EQ(rep.run.gpu, "none");
        EXPECT_EQ(rep.run.compute_capability, "none");
        EXPECT_EQ(rep.run.cuda_driver, "none");
    } else {
        EXPECT_NE(rep.run.gpu, "none");
        EXPECT_NE(rep.run.cuda_runtime, "none");
    }
}

TEST(Cli, TraceCarriesEveryKernelsDeclaredContract) {
    const fs::path out = scratch("declared.h5");
    const Result run =
        lav("run tests/data/scenarios/cli/declared_trace.toml --out " + out.string());
    ASSERT_EQ(run.code, 0) << run.output;
    const report::Report rep = report::read_report(out.string());
    // 2 state dtypes x (chunk, recurrent) x (fwd, bwd)
    ASSERT_EQ(rep.cases.size(), 8u);
    std::map<std::string, const report::CaseRecord*> by_id;
    for (const auto& r : rep.cases) by_id[r.id] = &r;
    for (const char* state : {"fp32", "bf16"}) {
        const std::string case_id = std::string("cli_declared_trace[dtypes.state=") + state + "]";
        for (const char* variant : {"chunk", "recurrent"}) {
            for (const char* pass : {"fwd", "bwd"}) {
                const std::string suffix = std::string(variant) + "/cpu/" + pass;
                const std::string kernel = "simple_gla/" + suffix;
                ASSERT_TRUE(by_id.count(case_id + "/" + suffix)) << case_id << "/" << suffix;
                const report::CaseRecord& owner = *by_id.at(case_id + "/" + suffix);
                ASSERT_FALSE(owner.contract.items.empty()) << owner.id;
                // every record of the case carries the declared rows of every kernel that ran,
                // item for item as that kernel's own contract table has them
                for (const char* other_variant : {"chunk", "recurrent"}) {
                    for (const char* other_pass : {"fwd", "bwd"}) {
                        const report::CaseRecord& r =
                            *by_id.at(case_id + "/" + other_variant + "/cpu/" + other_pass);
                        std::vector<std::pair<std::string, std::string>> rows;
                        for (const auto& t : r.trace) {
                            EXPECT_EQ(t.source, "declared") << r.id << ": no prologue to trace";
                            if (t.kernel != kernel) continue;
                            EXPECT_EQ(t.seq, -1) << r.id;
                            rows.push_back({t.op, t.outputs});
                        }
                        std::vector<std::pair<std::string, std::string>> items;
                        for (const auto& item : owner.contract.items)
                            items.push_back({item.item, std::string(dtype_name(item.dtype))});
                        EXPECT_EQ(rows, items) << r.id << " rows of " << kernel;
                    }
                }
                // where the chunk variant keeps its chunk states, in the case's state dtype
                const report::CaseRecord& r = *by_id.at(case_id + "/recurrent/cpu/fwd");
                std::string stored;
                for (const auto& t : r.trace)
                    if (t.kernel == kernel && t.op == "chunk states h") stored = t.outputs;
                EXPECT_EQ(stored, std::string(variant) == "chunk" ? state : "")
                    << r.id << ": chunk states h of " << kernel;
            }
        }
    }
}

TEST(Cli, ImpossibleToleranceExitsOneAndMarksTensor) {
    const fs::path out = scratch("impossible.h5");
    const Result run =
        lav("run tests/data/scenarios/cli/impossible_tolerance.toml --out " + out.string());
    EXPECT_EQ(run.code, 1) << run.output;
    const report::Report rep = report::read_report(out.string());
    ASSERT_EQ(rep.cases.size(), 1u);
    const report::CaseRecord& c = rep.cases[0];
    EXPECT_EQ(c.verdict, "fail");
    bool o_failed = false;
    for (const auto& m : c.metrics)
        if (m.tensor == "o") o_failed = !m.pass && m.bound == 1e-12;
    EXPECT_TRUE(o_failed);
    bool finding = false;
    for (const auto& f : c.findings)
        finding = finding || (f.kind == "TOLERANCE" && f.tensor == "o");
    EXPECT_TRUE(finding);
}

TEST(Cli, KilledRunLeavesReadableReport) {
    const fs::path out = scratch("killed.h5");
    fs::remove(out);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (chdir(LAV_SOURCE_DIR) != 0) _exit(127);
        execl(LAV_BINARY, LAV_BINARY, "run", "tests/data/scenarios/cli/long_run.toml", "--out",
              out.c_str(), "--threads", "1", static_cast<char*>(nullptr));
        _exit(127);
    }
    // wait until a few cases are on disk, then kill without warning
    size_t seen = 0;
    for (int i = 0; i < 600 && seen < 3; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!fs::exists(out)) continue;
        seen = report::read_report(out.string()).cases.size();
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed";
    ASSERT_GE(seen, 3u);

    const report::Report rep = report::read_report(out.string());
    EXPECT_FALSE(rep.complete);
    EXPECT_GE(rep.cases.size(), seen);
    const Result show = lav("show " + out.string());
    EXPECT_TRUE(show.code == 0 || show.code == 1) << show.output;
    EXPECT_NE(show.output.find("incomplete"), std::string::npos) << show.output;
}

TEST(Cli, KilledRunResumesToTheUninterruptedResult) {
    const fs::path whole = scratch("whole.h5");
    const fs::path killed = scratch("resumed.h5");
    const std::string scenario = "tests/data/scenarios/cli/long_run.toml";
    ASSERT_EQ(lav("run " + scenario + " --threads 1 --out " + whole.string()).code, 0);

    fs::remove(killed);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (chdir(LAV_SOURCE_DIR) != 0) _exit(127);
        execl(LAV_BINARY, LAV_BINARY, "run", scenario.c_str(), "--out", killed.c_str(), "--threads",
              "1", static_cast<char*>(nullptr));
        _exit(127);
    }
    size_t seen = 0;
    for (int i = 0; i < 600 && seen < 5; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (fs::exists(killed)) seen = report::read_report(killed.string()).cases.size();
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    const report::Report partial = report::read_report(killed.string());
    ASSERT_FALSE(partial.complete);
    ASSERT_GE(partial.cases.size(), 5u);

    const Result resumed = lav("run " + scenario + " --threads 1 --resume " + killed.string());
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    const report::Report a = report::read_report(whole.string());
    const report::Report b = report::read_report(killed.string());
    EXPECT_TRUE(b.complete);
    ASSERT_EQ(a.cases.size(), b.cases.size());
    for (size_t i = 0; i < a.cases.size(); ++i) {
        EXPECT_EQ(a.cases[i].id, b.cases[i].id);
        ASSERT_EQ(a.cases[i].metrics.size(), b.cases[i].metrics.size());
        for (size_t m = 0; m < a.cases[i].metrics.size(); ++m)
            EXPECT_EQ(a.cases[i].metrics[m].rel_rmse, b.cases[i].metrics[m].rel_rmse)
                << a.cases[i].id << " " << a.cases[i].metrics[m].tensor;
    }
}

// A report names the commit of the lav that wrote it, so another lav does not resume it.
TEST(Cli, ResumeRefusesAReportOfAnotherCommit) {
    const Result version = lav("version");
    if (version.output.find("(unknown)") != std::string::npos)
        GTEST_SKIP() << "this lav does not know its commit: " << version.output;
    report::Report r;
    r.complete = false;
    r.run.git_commit = "0123456789ab";
    const fs::path other = scratch("other_commit.h5");
    report::write_report(other.string(), r);
    const Result resumed =
        lav("run tests/data/scenarios/cli/long_run.toml --resume " + other.string());
    EXPECT_EQ(resumed.code, 2) << resumed.output;
    EXPECT_NE(resumed.output.find(other.string() + " was written by lav 0123456789ab and this is "
                                                   "lav "),
              std::string::npos)
        << resumed.output;
    EXPECT_NE(resumed.output.find("note: finish it with the lav that wrote it"), std::string::npos)
        << resumed.output;
    EXPECT_FALSE(report::read_report(other.string()).complete) << "left as it was";
}

TEST(Cli, GateBaselineDiffAndJunit) {
    const fs::path run = scratch("gate_run.h5");
    const fs::path base = scratch("gate_base.h5");
    const fs::path xml = scratch("gate_run.xml");
    const std::string scenario = "scenarios/smoke/simple_gla_varlen.toml";
    const Result r = lav("run " + scenario + " --out " + run.string() + " --junit " + xml.string());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(fs::exists(xml));

    ASSERT_EQ(
        lav("gate " + run.string() + " --baseline " + base.string() + " --update-baseline").code,
        0);
    EXPECT_LT(fs::file_size(base), fs::file_size(run));
    const Result same = lav("gate " + run.string() + " --baseline " + base.string());
    EXPECT_EQ(same.code, 0) << same.output;
    EXPECT_NE(same.output.find("GATE PASS"), std::string::npos) << same.output;

    // a run that lacks half of the baseline's cases fails, unless missing cases are allowed
    const fs::path part = scratch("gate_part.h5");
    ASSERT_EQ(lav("run " + scenario + " --filter head_last --out " + part.string()).code, 0);
    const Result missing = lav("gate " + part.string() + " --baseline " + base.string());
    EXPECT_EQ(missing.code, 1) << missing.output;
    EXPECT_NE(missing.output.find("missing from the run"), std::string::npos) << missing.output;
    EXPECT_EQ(
        lav("gate " + part.string() + " --baseline " + base.string() + " --allow-missing").code, 0);

    const Result diff = lav("diff " + run.string() + " " + part.string());
    EXPECT_EQ(diff.code, 0) << diff.output;
    EXPECT_NE(diff.output.find("environment:"), std::string::npos) << diff.output;
    EXPECT_NE(diff.output.find("only in A:"), std::string::npos) << diff.output;
}

/// Starts `lav run long_run.toml --out out` in the background; returns its pid once it holds
/// the report's lock.
pid_t start_long_run(const fs::path& out) {
    const pid_t pid = fork();
    if (pid == 0) {
        if (chdir(LAV_SOURCE_DIR) != 0) _exit(127);
        execl(LAV_BINARY, LAV_BINARY, "run", "tests/data/scenarios/cli/long_run.toml", "--out",
              out.c_str(), "--threads", "1", static_cast<char*>(nullptr));
        _exit(127);
    }
    for (int i = 0; i < 600 && !fs::exists(out.string() + ".lock"); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return pid;
}

TEST(Cli, SecondRunOnOneReportExitsThreeNamingTheFirst) {
    const fs::path out = scratch("shared.h5");
    fs::remove(out);
    const pid_t first = start_long_run(out);
    const Result second =
        lav("run tests/data/scenarios/cli/impossible_tolerance.toml --out " + out.string());
    kill(first, SIGKILL);
    waitpid(first, nullptr, 0);
    EXPECT_EQ(second.code, 3) << second.output;
    EXPECT_NE(second.output.find("pid " + std::to_string(first)), std::string::npos)
        << second.output;

    // the killed run's temporaries are named by the next run, which then writes the report
    const Result next =
        lav("run tests/data/scenarios/cli/impossible_tolerance.toml --out " + out.string());
    EXPECT_EQ(next.code, 1) << next.output;
    EXPECT_NE(next.output.find("warning: " + out.string() + "." + std::to_string(first)),
              std::string::npos)
        << next.output;
    EXPECT_EQ(report::read_report(out.string()).cases.size(), 1u);
}

TEST(Cli, OutOntoAFifoOrAFolderExitsTwoAndLeavesIt) {
    const fs::path fifo = scratch("out.fifo");
    fs::remove(fifo);
    ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
    for (const fs::path& out : {fifo, scratch("folder")}) {
        fs::create_directories(scratch("folder"));
        const Result run =
            lav("run tests/data/scenarios/cli/impossible_tolerance.toml --out " + out.string());
        EXPECT_EQ(run.code, 2) << run.output;
        EXPECT_EQ(run.output.find("cli_impossible_tolerance/chunk"), std::string::npos)
            << "a case ran: " << run.output;
    }
    EXPECT_TRUE(fs::is_fifo(fifo));
    EXPECT_TRUE(fs::is_directory(scratch("folder")));
}

TEST(Cli, GateRefusesUntrustedInputsAndNeverReplacesTheRun) {
    const fs::path run = scratch("trust_run.h5");
    const fs::path base = scratch("trust_base.h5");
    ASSERT_EQ(lav("run scenarios/smoke/simple_gla_varlen.toml --out " + run.string()).code, 0);
    const auto before = fs::last_write_time(run);
    const Result onto_run =
        lav("gate " + run.string() + " --baseline " + run.string() + " --update-baseline");
    EXPECT_EQ(onto_run.code, 2) << onto_run.output;
    EXPECT_EQ(fs::last_write_time(run), before);
    EXPECT_EQ(report::read_report(run.string()).cases.front().contract.items.empty(), false);

    // an incomplete baseline, and one with a case twice
    report::Report incomplete = report::read_report(run.string());
    incomplete.complete = false;
    report::write_report(base.string(), incomplete);
    const Result refused = lav("gate " + run.string() + " --baseline " + base.string());
    EXPECT_EQ(refused.code, 2) << refused.output;
    EXPECT_NE(refused.output.find(base.string()), std::string::npos) << refused.output;
    EXPECT_EQ(
        lav("gate " + run.string() + " --baseline " + base.string() + " --allow-incomplete").code,
        0);
    report::Report twice = report::read_report(run.string());
    twice.cases.push_back(twice.cases.front());
    report::write_report(base.string(), twice);
    const Result duplicate = lav("gate " + run.string() + " --baseline " + base.string());
    EXPECT_EQ(duplicate.code, 2) << duplicate.output;
    EXPECT_NE(duplicate.output.find(twice.cases.front().id), std::string::npos) << duplicate.output;
}

TEST(Cli, CorruptFilesExitTwo) {
    const fs::path good = scratch("corrupt_src.h5");
    ASSERT_EQ(
        lav("run tests/data/scenarios/cli/impossible_tolerance.toml --out " + good.string()).code,
        1);
    const fs::path truncated = scratch("truncated.h5");
    fs::copy_file(good, truncated, fs::copy_options::overwrite_existing);
    fs::resize_file(truncated, fs::file_size(good) / 2);
    const fs::path noise = scratch("noise.h5");
    {
        std::FILE* f = std::fopen(noise.c_str(), "wb");
        for (int i = 0; i < 4096; ++i) std::fputc((i * 7919) % 251, f);
        std::fclose(f);
    }
    for (const fs::path& bad : {truncated, noise}) {
        const Result show = lav("show " + bad.string());
        EXPECT_EQ(show.code, 2) << bad << "\n" << show.output;
        EXPECT_NE(show.output.find(bad.filename().string()), std::string::npos) << show.output;
        EXPECT_EQ(lav("gate " + good.string() + " --baseline " + bad.string()).code, 2);
    }
}

TEST(Cli, CommittedBaselinesMatchTheNightlyScenarios) {
    // a change to the nightly or to the report's layout must come with baselines remade by
    // tools/baselines.sh, or the nightly gate breaks
    const Result validate = lav("validate scenarios/nightly");
    ASSERT_EQ(validate.code, 0) << validate.output;
    size_t cases = 0;  // "ok  scenarios/nightly/gla.toml  (12 cases)" per file
    const std::regex count(R"(\((\d+) cases?\))");
    for (std::sregex_iterator it(validate.output.begin(), validate.output.end(), count), end;
         it != end; ++it)
        cases += std::stoul((*it)[1]);
    ASSERT_GT(cases, 0u) << validate.output;
    for (const std::string device : {"cpu", "cuda-h100"}) {
        SCOPED_TRACE(device);
        const report::Report base = report::read_report(
            std::string(LAV_SOURCE_DIR) + "/reports/baselines/nightly-" + device + ".h5");
        EXPECT_TRUE(base.complete);
        std::set<std::string> case_ids, families;
        size_t bwd = 0, cuda = 0;
        for (const auto& c : base.cases) {
            // the case id: the record id less "/<variant>/<backend>/<pass>"
            const size_t tail = c.variant.size() + c.backend.size() + c.pass.size() + 3;
            case_ids.insert(c.id.substr(0, c.id.size() - tail));
            families.insert(c.family);
            bwd += c.pass == "bwd";
            cuda += c.backend == "cuda";
        }
        EXPECT_EQ(case_ids.size(), cases) << "the baseline's cases are not the nightly's";
        EXPECT_EQ(families.size(), 14u);
        EXPECT_GT(bwd, 0u);
        if (device == "cpu")
            EXPECT_EQ(cuda, 0u);
        else
            EXPECT_GT(cuda, 0u);
    }
}

TEST(Cli, BadScenarioExitsTwoWithPosition) {
    const Result run =
        lav("run tests/data/scenarios/cli/bad_dtype.toml --out " + scratch("bad.h5").string());
    EXPECT_EQ(run.code, 2) << run.output;
    EXPECT_NE(run.output.find("bad_dtype.toml:13:10: error: unknown dtype 'bf15'"),
              std::string::npos)
        << run.output;
    EXPECT_FALSE(fs::exists(scratch("bad.h5")));
    EXPECT_EQ(lav("validate tests/data/scenarios/cli/bad_dtype.toml").code, 2);
}

TEST(Cli, UsageErrorsExitTwo) {
    EXPECT_EQ(lav("frobnicate").code, 2);
    EXPECT_EQ(lav("run").code, 2);
    EXPECT_EQ(lav("run scenarios/smoke --max-memory lots").code, 2);
    EXPECT_EQ(lav("run scenarios/smoke --filter '('").code, 2);
    EXPECT_EQ(lav("run no/such/dir").code, 2);
    EXPECT_EQ(lav("show no/such/report.h5").code, 2);
}

TEST(Cli, MemoryLimitRefusesBeforeRunning) {
    const Result run = lav("validate scenarios/smoke --max-memory 1M");
    EXPECT_EQ(run.code, 2) << run.output;
    EXPECT_NE(run.output.find("--max-memory"), std::string::npos) << run.output;
}

TEST(Cli, HelpListAndValidate) {
    for (const char* cmd : {"--help", "run --help", "validate --help", "list --help", "show --help",
                            "gate --help", "diff --help"}) {
        const Result r = lav(cmd);
        EXPECT_EQ(r.code, 0) << cmd;
        EXPECT_NE(r.output.find("usage"), std::string::npos) << cmd << "\n" << r.output;
    }
    const Result list = lav("list");
    EXPECT_EQ(list.code, 0);
    for (const char* word : {"simple_gla", "chunk", "recurrent", "bf16", "head_first"})
        EXPECT_NE(list.output.find(word), std::string::npos) << word;
    const Result validate = lav("validate scenarios/smoke");
    EXPECT_EQ(validate.code, 0) << validate.output;
    EXPECT_NE(validate.output.find("simple_gla_varlen.toml"), std::string::npos);
}

// The declaration as JSON: every family with its tensors and its rows, which the benchmark
// and the ops library read instead of keeping lists of their own.
TEST(Cli, ListAsJsonCarriesEveryFamilysDeclarationAndRows) {
    const Result json = lav("list --format json");
    ASSERT_EQ(json.code, 0) << json.output;
    for (const char* family :
         {"simple_gla", "gla", "hgrn", "delta_rule", "gated_delta_rule", "kda", "rwkv6", "rwkv7",
          "comba", "gated_delta_product", "mesa_net", "based", "rebased", "gsa"})
        EXPECT_NE(json.output.find(std::string("{\"name\": \"") + family + "\""), std::string::npos)
            << family;
    for (const char* text :
         {"\"role\": \"cotangent\"", "\"shape\": \"N H K V\"", "\"when\": \"initial_state\"",
          "{\"variant\": \"chunk\", \"backend\": \"cpu\", \"device\": \"cpu\"}"})
        EXPECT_NE(json.output.find(text), std::string::npos) << text;
    EXPECT_EQ(lav("list --format yaml").code, 2);
}

// --backend names a backend this build has rows for: an unknown name is a usage error, cuda in
// a CPU-only build an environment error.
TEST(Cli, BackendMustBeOneThisBuildHas) {
    const Result unknown = lav("run scenarios/smoke --backend tpu --out /dev/null");
    EXPECT_EQ(unknown.code, 2) << unknown.output;
    EXPECT_NE(unknown.output.find("--backend takes auto, cpu"), std::string::npos)
        << unknown.output;
    if (std::string(lav("list").output).find("backends: cpu, cuda") != std::string::npos) return;
    const Result cuda = lav("run scenarios/smoke --backend cuda --out /dev/null");
    EXPECT_EQ(cuda.code, 3) << cuda.output;
    EXPECT_NE(cuda.output.find("CPU-only"), std::string::npos) << cuda.output;
}

}  // namespace
}  // namespace lav
