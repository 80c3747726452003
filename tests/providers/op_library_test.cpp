// tests/providers/op_library_test.cpp — `lav run --load-library`: a PyTorch op library's ops as
// rows beside lav's CPU rows, judged against the same references and contracts.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/lav_command.h"
#include "report/report.h"

namespace lav {
namespace {

using test::lav;
using test::Result;
using test::scratch;

const std::string kScenarios = "tests/data/scenarios/providers";

// The good library's rows pass beside lav's own on identical inputs; the faulty one's records
// carry the contract finding and the kernel's error, and the run goes on.
TEST(OpLibrary, RowsRunBesideLavsOwnAndAreJudgedAlike) {
    const std::string out = scratch("ops.h5");
    const Result run = lav("run " + kScenarios + " --load-library " + LAV_TEST_OPS +
                           " --backend cpu,lavtest,lavbad --out " + out);
    EXPECT_EQ(run.code, 1) << run.output;  // lavbad fails
    const report::Report rep = report::read_report(out);
    ASSERT_TRUE(rep.complete);
    int lavtest = 0, cpu = 0, contract = 0, errors = 0;
    for (const report::CaseRecord& r : rep.cases) {
        if (r.backend == "cpu") {
            ++cpu;
            EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
        } else if (r.backend == "lavtest") {
            ++lavtest;
            EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
            // every measure of the pass is there: o and ht, or the five gradients
            EXPECT_EQ(r.metrics.size(), r.pass == "fwd" ? 2u : 5u) << r.id;
        } else if (r.variant == "chunk") {
            ++errors;
            EXPECT_EQ(r.verdict, "error") << r.id;
            EXPECT_NE(r.message.find("no kernel for these inputs"), std::string::npos) << r.message;
        } else if (r.input_dtype == "bf16" && r.pass == "fwd") {
            ++contract;
            EXPECT_EQ(r.verdict, "fail") << r.id;
            ASSERT_FALSE(r.findings.empty()) << r.id;
            EXPECT_EQ(r.findings[0].kind, "OUTPUT_DTYPE_CONTRACT") << r.id;
            EXPECT_EQ(r.findings[0].message, "returned fp32, contract declares bf16") << r.id;
        }
    }
    // 5 cases (4 dense, 1 varlen) x 2 variants x 2 passes each
    EXPECT_EQ(cpu, 20);
    EXPECT_EQ(lavtest, 20);
    EXPECT_EQ(errors, 10);
    EXPECT_EQ(contract, 2);
}

// A kernel that crashes the process costs its own case under --isolate: its records are errors
// naming the signal, every other record is measured, and the report is complete.
TEST(Isolate, ACrashingKernelCostsItsCase) {
    const std::string out = scratch("isolate.h5");
    const Result run = lav("run " + kScenarios + " --load-library " + LAV_TEST_OPS +
                           " --backend cpu,lavcrash --isolate --out " + out);
    EXPECT_EQ(run.code, 1) << run.output;
    const report::Report rep = report::read_report(out);
    ASSERT_TRUE(rep.complete);
    int crashed = 0;
    for (const report::CaseRecord& r : rep.cases) {
        if (r.cu_seqlens.empty()) {
            EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
            continue;
        }
        // the varlen case's process went down: its cpu records with it
        ++crashed;
        EXPECT_EQ(r.verdict, "error") << r.id;
        EXPECT_NE(r.message.find("was killed by signal"), std::string::npos) << r.message;
        EXPECT_TRUE(r.message.find("Segmentation fault") != std::string::npos ||
                    r.message.find("Aborted") != std::string::npos)
            << r.message;
    }
    // 5 cases (4 dense, 1 varlen) x 2 variants x 2 passes x 2 backends: none missing
    EXPECT_EQ(rep.cases.size(), 40u);
    EXPECT_EQ(crashed, 8);

    // without the crashing backend each isolated case runs to its measures, as in-process
    const std::string ok = scratch("isolate_ok.h5");
    const Result fine = lav("run " + kScenarios + " --isolate --out " + ok);
    EXPECT_EQ(fine.code, 0) << fine.output;
    const report::Report good = report::read_report(ok);
    EXPECT_EQ(good.cases.size(), 20u);
    for (const report::CaseRecord& r : good.cases) {
        EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
        EXPECT_FALSE(r.metrics.empty()) << r.id;
    }
}

// --equivalence: a kernel whose sequences leak into each other is found by running each sequence
// alone; lav's own rows agree with themselves in both layouts and alone.
TEST(Equivalence, ASequenceThatDependsOnItsNeighboursIsASegmentLeak) {
    const std::string out = scratch("leak.h5");
    const Result run = lav("run " + kScenarios + "/simple_gla_ops_varlen.toml --load-library " +
                           LAV_TEST_OPS + " --backend cpu,lavleak --equivalence --out " + out);
    EXPECT_EQ(run.code, 1) << run.output;
    const report::Report rep = report::read_report(out);
    int leaks = 0, own = 0;
    for (const report::CaseRecord& r : rep.cases) {
        bool leak = false;
        std::string equivalence;
        for (const auto& f : r.findings) {
            if (f.kind == "SEGMENT_LEAK") {
                leak = true;
                EXPECT_NE(f.message.find("depends on its neighbours"), std::string::npos);
            }
            if (f.kind == "EQUIVALENCE") equivalence = f.message;
        }
        if (r.backend == "lavleak") {
            leaks += leak;
            continue;
        }
        ++own;
        EXPECT_FALSE(leak) << r.id;
        EXPECT_NE(equivalence.find("vs head_first: "), std::string::npos) << equivalence;
        EXPECT_NE(equivalence.find("vs each sequence run alone: #1 "), std::string::npos)
            << equivalence;
        // lav's rows agree bitwise across layouts and with each sequence run alone
        const size_t from = equivalence.find("vs head_first: ");
        const std::string reruns =
            equivalence.substr(from, equivalence.find("rel_rmse per sequence") - from);
        EXPECT_EQ(reruns.find("e-"), std::string::npos) << reruns;
        EXPECT_NE(reruns.find("bitwise"), std::string::npos) << reruns;
    }
    EXPECT_EQ(own, 4);
    EXPECT_EQ(leaks, 2);  // recurrent fwd and bwd
}

// A provider's backend exists only once its library is loaded.
TEST(OpLibrary, BackendNeedsItsLibrary) {
    const Result list = lav(std::string("list --format json"));
    EXPECT_EQ(list.output.find("lavtest"), std::string::npos);
    const Result bad = lav("run " + kScenarios + " --backend lavtest --out " + scratch("none.h5"));
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find("--backend takes auto, cpu"), std::string::npos) << bad.output;
}

TEST(OpLibrary, BadLibrariesAreClearErrors) {
    const Result missing = lav("run " + kScenarios + " --load-library /no/such/lib.so");
    EXPECT_EQ(missing.code, 2) << missing.output;
    EXPECT_NE(missing.output.find("/no/such/lib.so: no such file"), std::string::npos)
        << missing.output;
    const std::string text = scratch("not_a_library.so");
    std::ofstream(text) << "not a shared library\n";
    const Result junk = lav("run " + kScenarios + " --load-library " + text);
    EXPECT_EQ(junk.code, 3) << junk.output;
    EXPECT_NE(junk.output.find(text), std::string::npos) << junk.output;
}

}  // namespace
}  // namespace lav
