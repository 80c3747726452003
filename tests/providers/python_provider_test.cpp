// tests/providers/python_provider_test.cpp — `lav run --provider`: a Python module's functions as
// rows, in the interpreter embedded in lav, beside lav's CPU rows on the same inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/lav_command.h"
#include "report/report.h"

namespace lav {
namespace {

const std::string kProvider = "tests/providers/torch_provider.py";
const std::string kProbe = "tests/providers/probe_provider.py";
const std::string kNoDht = "tests/providers/dropped_dht_provider.py";

// simple_gla_ops.toml's head_last cases of input dtype DTYPE, variant VARIANT only
std::string ops_cases(const std::string& dtype, const std::string& variant) {
    return "tests/data/scenarios/providers/simple_gla_ops.toml --filter 'dtypes.inputs=" + dtype +
           ",layout=head_last]/" + variant + "'";
}

// `lav run ARGS --out <scratch NAME>`: what it printed and exited with, and the report it wrote.
struct Ran {
    test::Result run;
    report::Report rep;
};
Ran run_and_read(const std::string& args, const std::string& name) {
    const std::string out = test::scratch(name);
    Ran ran{test::lav("run " + args + " --out " + out), {}};
    ran.rep = report::read_report(out);
    return ran;
}

// The backward records of a run whose forward records must pass and backward ones be errors.
std::vector<const report::CaseRecord*> erroring_backwards(const report::Report& rep) {
    std::vector<const report::CaseRecord*> backwards;
    for (const report::CaseRecord& r : rep.cases) {
        if (r.pass == "fwd") {
            EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
            continue;
        }
        EXPECT_EQ(r.verdict, "error") << r.id;
        backwards.push_back(&r);
    }
    return backwards;
}

TEST(PythonProvider, RowsRunBesideLavsOwnWithErrorsAsRecords) {
    const auto [run, rep] = run_and_read(
        "tests/data/scenarios/providers --provider " + kProvider + " --backend cpu,torchref",
        "python.h5");
    EXPECT_EQ(run.code, 1) << run.output;  // chunk_simple_gla raises
    ASSERT_TRUE(rep.complete);
    EXPECT_EQ(rep.run.providers.rfind("torchref (" + kProvider + ", torch 2.", 0), 0u)
        << rep.run.providers;
    int passed = 0, errors = 0;
    for (const report::CaseRecord& r : rep.cases) {
        if (r.backend != "torchref") continue;
        if (r.variant == "recurrent") {
            ++passed;
            EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
            EXPECT_EQ(r.metrics.size(), r.pass == "fwd" ? 2u : 5u) << r.id;
            // judged by lav's declared contract, whose inner items the provider cannot show
            for (const ContractItem& item : r.contract.items)
                EXPECT_EQ(item.note.rfind("not observable", 0) == 0,
                          item.item != "o" && item.item != "ht" && item.item.rfind("d", 0) != 0)
                    << r.id << " " << item.item << ": " << item.note;
        } else {
            ++errors;
            EXPECT_EQ(r.verdict, "error") << r.id;
            // the exception and the provider's frame that raised it
            EXPECT_NE(r.message.find("ValueError: torchref has no chunked form"), std::string::npos)
                << r.message;
            EXPECT_NE(r.message.find("torch_provider.py"), std::string::npos) << r.message;
        }
    }
    EXPECT_EQ(passed, 10);
    EXPECT_EQ(errors, 10);
}

TEST(PythonProvider, BadModulesAreClearErrors) {
    const test::Result missing =
        test::lav("run tests/data/scenarios/providers --provider no_such_module_here");
    EXPECT_EQ(missing.code, 2) << missing.output;
    EXPECT_NE(missing.output.find("No module named 'no_such_module_here'"), std::string::npos)
        << missing.output;
    const test::Result empty = test::lav("run tests/data/scenarios/providers --provider json");
    EXPECT_EQ(empty.code, 2) << empty.output;
    EXPECT_NE(empty.output.find("has no function named <variant>_<family>"), std::string::npos)
        << empty.output;
    const std::string clock = test::scratch("bad_clock.py");
    std::ofstream(clock) << "def jit_seconds():\n    return 'soon'\n\n"
                            "def recurrent_simple_gla(q, k, v):\n    return q, None\n";
    const test::Result bad_clock =
        test::lav("run tests/data/scenarios/providers --provider " + clock);
    EXPECT_EQ(bad_clock.code, 2) << bad_clock.output;
    EXPECT_NE(bad_clock.output.find("bad_clock.py: jit_seconds() must return the seconds"),
              std::string::npos)
        << bad_clock.output;
}

// --triton-cache reaches the provider's os.environ (and so Triton's import) as an absolute path,
// the folder made; without it the variable is left as it was.
TEST(PythonProvider, TritonCacheFolderReachesTheProvider) {
    const std::string cache = test::scratch("triton cache/nested");
    std::filesystem::remove_all(cache);
    const std::string out = test::scratch("triton.h5");
    const test::Result run = test::lav(
        "run tests/data/scenarios/providers/simple_gla_ops_varlen.toml --filter "
        "recurrent/probe/fwd --provider " +
        kProbe + " --backend probe --triton-cache '" + cache + "' --out " + out);
    EXPECT_EQ(run.code, 0) << run.output;
    EXPECT_TRUE(std::filesystem::is_directory(cache));
    const report::Report rep = report::read_report(out);
    const std::string absolute = std::filesystem::absolute(cache).lexically_normal().string();
    EXPECT_NE(rep.run.providers.find("TRITON_CACHE_DIR " + absolute + ", torch "),
              std::string::npos)
        << rep.run.providers;

    const test::Result unset = test::lav(
        "run tests/data/scenarios/providers/simple_gla_ops_varlen.toml --filter "
        "recurrent/probe/fwd "
        "--provider " +
        kProbe + " --backend probe --out " + out);
    EXPECT_EQ(unset.code, 0) << unset.output;
    EXPECT_NE(report::read_report(out).run.providers.find("TRITON_CACHE_DIR unset, torch "),
              std::string::npos);

    const std::string file = test::scratch("not_a_folder");
    std::ofstream(file) << "x";
    const test::Result bad = test::lav("run tests/data/scenarios/providers --provider " + kProbe +
                                       " --triton-cache " + file + " --out " + out);
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find("--triton-cache " + file + " is not a folder"), std::string::npos)
        << bad.output;
}

// A gradient the provider leaves out is the record's error, naming it; the gradients it gives
// are judged all the same, so that what they show is not lost: the probe's chunk also never
// reads dht (FLA 0.6.0's chunk_hgrn gives no dh0 and reads no dht), which its judged gradients
// reveal. The run goes on.
TEST(PythonProvider, AGradientTheProviderLeavesOutIsAnErrorRecord) {
    const auto [run, rep] = run_and_read(
        "tests/data/scenarios/providers/simple_gla_ops_varlen.toml --filter chunk/probe "
        "--provider " +
            kProbe + " --backend probe",
        "no_dg.h5");
    EXPECT_EQ(run.code, 1) << run.output;
    ASSERT_TRUE(rep.complete);
    ASSERT_EQ(rep.cases.size(), 2u);
    for (const report::CaseRecord* r : erroring_backwards(rep)) {
        EXPECT_EQ(r->message,
                  "probe chunk simple_gla gives no dg; judged on the gradients it "
                  "gives, the record cannot pass without every one simple_gla declares");
        std::vector<std::string> judged, failed;
        for (const report::MetricRow& m : r->metrics) {
            judged.push_back(m.tensor);
            if (!m.pass) failed.push_back(m.tensor);
        }
        EXPECT_EQ(judged, (std::vector<std::string>{"dq", "dk", "dv", "dh0"})) << r->id;
        EXPECT_EQ(failed, (std::vector<std::string>{"dk", "dv", "dh0"})) << r->id;
        std::vector<std::string> dropped;
        for (const report::Finding& f : r->findings)
            if (f.kind == "DROPPED_COTANGENT") dropped.push_back(f.tensor);
        EXPECT_EQ(dropped, std::vector<std::string>{"dht"}) << r->id;
    }
}

// A backward that never reads dht fails where the final state's gradient matters, and the
// record names the cotangent it leaves out; lav's own row, which reads it, carries no such finding.
TEST(PythonProvider, ABackwardThatDropsDhtIsNamed) {
    const auto [run, rep] = run_and_read(
        ops_cases("fp32", "recurrent") + " --provider " + kNoDht + " --backend nodht,cpu",
        "no_dht.h5");
    EXPECT_EQ(run.code, 1) << run.output;
    ASSERT_EQ(rep.cases.size(), 4u);
    for (const report::CaseRecord& r : rep.cases) {
        std::vector<std::string> dropped;
        for (const report::Finding& f : r.findings)
            if (f.kind == "DROPPED_COTANGENT") dropped.push_back(f.tensor + ": " + f.message);
        if (r.backend == "nodht" && r.pass == "bwd") {
            EXPECT_EQ(r.verdict, "fail") << r.id;
            ASSERT_EQ(dropped.size(), 1u) << r.id;
            EXPECT_EQ(dropped[0].rfind("dht: ", 0), 0u) << dropped[0];
            EXPECT_NE(dropped[0].find(" against the reference computed without dht, each within "
                                      "its bound: the backward leaves out the gradient that comes "
                                      "in through ht"),
                      std::string::npos)
                << dropped[0];
            EXPECT_NE(dropped[0].find("dk "), std::string::npos) << dropped[0];
        } else {
            EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
            EXPECT_TRUE(dropped.empty()) << r.id << ": " << dropped[0];
        }
    }
}

// A forward-only function's backward record is an error that names the function; its forward
// record still passes.
TEST(PythonProvider, AForwardOnlyFunctionsBackwardIsAnErrorNamingIt) {
    const auto [run, rep] =
        run_and_read(ops_cases("fp32", "chunk") + " --provider " + kNoDht + " --backend nodht",
                     "forward_only.h5");
    EXPECT_EQ(run.code, 1) << run.output;
    ASSERT_EQ(rep.cases.size(), 2u);
    for (const report::CaseRecord* r : erroring_backwards(rep))
        EXPECT_NE(r->message.find("RuntimeError: chunk_simple_gla: no output takes part in "
                                  "autograd, so there is no backward to check"),
                  std::string::npos)
            << r->message;
}

// What a provider's jit_seconds() counts during a record is the record's jit_seconds, within its
// kernel time: the probe's first call of a function "compiles" for 0.2 s, its second does not;
// the totals give it beside the kernel time, and lav's own rows count none.
TEST(PythonProvider, CompileTimeAProviderCountsIsTheRecords) {
    const auto [run, rep] = run_and_read(
        ops_cases("fp32", "recurrent") + " --provider " + kProbe + " --backend probe,cpu",
        "jit.h5");
    EXPECT_EQ(run.code, 0) << run.output;
    EXPECT_NE(run.output.find(", of which compiling and autotuning 0.2 s (probe's count)"),
              std::string::npos)
        << run.output;
    ASSERT_EQ(rep.cases.size(), 4u);
    for (const report::CaseRecord& r : rep.cases) {
        if (r.backend == "probe" && r.pass == "fwd") {
            EXPECT_GE(r.jit_seconds, 0.2) << r.id;
            EXPECT_LT(r.jit_seconds, 0.5) << r.id;
            EXPECT_LE(r.jit_seconds, r.kernel_seconds) << r.id;
        } else {
            EXPECT_EQ(r.jit_seconds, 0.0) << r.id;
        }
    }
}

// A (family, variant) a provider has no function for is an error record saying why: what the
// module's unsupported() says where it has one, else the function it lacks.
TEST(PythonProvider, WhatAProviderLacksIsAnErrorSayingWhy) {
    const std::string gla = "tests/data/scenarios/cli/dump_gla.toml --filter 'fp32]/recurrent'";
    for (const auto& [provider, why] :
         {std::pair{kProbe, "probe has no gla recurrent: the probe knows simple_gla only"},
          std::pair{kProvider,
                    "torchref has no gla recurrent: the provider module has no "
                    "function recurrent_gla"}}) {
        const std::string backend = provider == kProbe ? "probe" : "torchref";
        const auto [run, rep] =
            run_and_read(gla + " --provider " + provider + " --backend cpu," + backend, "lacks.h5");
        EXPECT_EQ(run.code, 1) << run.output;
        ASSERT_EQ(rep.cases.size(), 2u) << run.output;  // forward only
        for (const report::CaseRecord& r : rep.cases) {
            if (r.backend == "cpu") {
                EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
            } else {
                EXPECT_EQ(r.verdict, "error") << r.id;
                EXPECT_EQ(r.message, why) << r.id;
            }
        }
    }
}

// A kernel that compiles, then refuses its inputs, spent its compile time inside its kernel time:
// an error record's kernel time runs until the kernel raised.
TEST(PythonProvider, ARefusalKeepsTheKernelTimeItSpent) {
    const auto [run, rep] = run_and_read(
        ops_cases("bf16", "chunk") + " --provider " + kProbe + " --backend probe", "refused.h5");
    EXPECT_EQ(run.code, 1) << run.output;
    ASSERT_EQ(rep.cases.size(), 2u);
    for (const report::CaseRecord& r : rep.cases) {
        EXPECT_EQ(r.verdict, "error") << r.id;
        EXPECT_NE(r.message.find("does not support bfloat16"), std::string::npos) << r.message;
        EXPECT_LE(r.jit_seconds, r.kernel_seconds) << r.id;
        if (r.pass == "fwd") {
            EXPECT_GE(r.kernel_seconds, 0.2) << r.id;
        }
    }
}

// The ops a Python provider dispatches go through lav's own dispatcher, so the dtype tracer
// sees them: the probe's bf16 q times an fp32 tensor is in each of its records' traces, and a
// Python float (a 0-dim fp64 operand, which promotes nothing) is not.
TEST(PythonProvider, TracerSeesTheOpsAProviderDispatches) {
    const auto [run, rep] = run_and_read(
        ops_cases("bf16", "recurrent") + " --provider " + kProbe + " --backend probe,cpu",
        "probe.h5");
    EXPECT_EQ(run.code, 0) << run.output;
    int probed = 0;
    for (const report::CaseRecord& r : rep.cases) {
        int promoting = 0, traced = 0, named = 0;
        for (const report::TraceRow& t : r.trace) {
            if (t.source != "traced") continue;
            ++traced;
            EXPECT_EQ(t.kernel, "simple_gla/recurrent/probe/" + r.pass) << r.id;
            if (t.op == "aten::mul" && t.inputs.rfind("bf16[2,48,2,16]", 0) == 0 &&
                t.inputs.find("; fp32[16]") != std::string::npos &&
                t.outputs.rfind("fp32[2,48,2,16]", 0) == 0) {
                ++promoting;
                named += t.inputs.rfind("bf16[2,48,2,16] (q); ", 0) == 0;
            }
        }
        if (r.backend == "cpu") {
            // lav's own rows are not traced
            EXPECT_EQ(traced, 0) << r.id;
            continue;
        }
        ++probed;
        // the backward runs the forward again under autograd: the product is made once there too
        EXPECT_EQ(promoting, 1) << r.id;
        // the forward gets lav's q itself, known by name; the backward a leaf made from it
        EXPECT_EQ(named, r.pass == "fwd" ? 1 : 0) << r.id;
        EXPECT_GE(traced, 2) << r.id;  // the product, and its cast back to bf16
        for (const report::TraceRow& t : r.trace)
            EXPECT_EQ(t.inputs.find("fp64[]"), std::string::npos) << r.id << " " << t.op;
    }
    EXPECT_EQ(probed, 2);
}

}  // namespace
}  // namespace lav
