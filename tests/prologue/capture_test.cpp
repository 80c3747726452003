// tests/prologue/capture_test.cpp — `[inputs] from`: a capture made with python/lav/capture.py
// is read without Python, sizes and dtypes come from it, and the kernel gets its values bit for
// bit; bad captures are errors or findings naming the file or the tensor.
#include "scenario/capture.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/build_info.h"
#include "core/error.h"
#include "harness/audit.h"
#include "harness/registry.h"
#include "harness/runner.h"
#include "scenario/scenario.h"

namespace lav {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("lav_capture_" + std::to_string(getpid()));
    fs::create_directories(dir);
    return dir / name;
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// runs `body` in lav's Python with lav.capture importable and `dir` as the folder
void python(const std::string& body) {
    const fs::path script = scratch("make.py");
    write(script, "import torch, torch.nn.functional as F\nfrom lav.capture import capture\n" +
                      std::string("dir = '") + scratch("").string() + "'\n" + body);
    const std::string command =
        std::string("PYTHONPATH=") + kPythonPackageDir + " " + kPython + " " + script.string();
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

// a simple_gla scenario replaying `capture` with `extra` keys at the top
fs::path scenario(const std::string& name, const std::string& capture,
                  const std::string& extra = "") {
    const fs::path toml = scratch(name + ".toml");
    write(toml, "name = \"" + name + "\"\ndescription = \"a replay\"\nfamily = \"simple_gla\"\n" +
                    "variants = [\"chunk\"]\n" + extra + "[inputs]\nfrom = \"" + capture + "\"\n");
    return toml;
}

std::vector<scenario::Case> load(const fs::path& toml, const harness::Registry& registry) {
    return scenario::load_file(toml.string(), registry.catalog(), {});
}

harness::Registry& registry() {
    static harness::Registry r = [] {
        harness::Registry made;
        harness::register_all(made);
        return made;
    }();
    return r;
}

TEST(Capture, AHelpersCaptureReplaysBitForBit) {
    // k is strided as a head_first tensor transposed back; g is fp32, q, k, v bf16
    python(R"(
torch.manual_seed(0)
q = torch.randn(1, 64, 2, 16).bfloat16()
k = torch.randn(1, 2, 64, 16).bfloat16().transpose(1, 2)
v = torch.randn(1, 64, 2, 32).bfloat16()
g = F.logsigmoid(torch.randn(1, 64, 2))
@capture(dir + 'call.pt')
def kernel(q, k, v, g=None, scale=None, head_first=False):
    return v
kernel(q, k, v, g=g, scale=0.25)
for name, t in dict(q=q, k=k, v=v, g=g).items():
    t.contiguous().view(-1).view(torch.uint8).numpy().tofile(dir + name + '.bin')
)");
    const auto cases = load(scenario("replay", "call.pt"), registry());
    ASSERT_EQ(cases.size(), 1u);
    const scenario::Case& c = cases[0];
    EXPECT_EQ(c.B, 1);
    EXPECT_EQ(c.T, 64);
    EXPECT_EQ(c.H, 2);
    EXPECT_EQ(c.K, 16);
    EXPECT_EQ(c.V, 32);
    EXPECT_EQ(c.input_dtype, DType::bf16);
    EXPECT_EQ(c.gate_dtype, DType::fp32);
    ASSERT_TRUE(c.capture);
    EXPECT_EQ(c.capture->function, "kernel");
    // strides as given
    EXPECT_EQ(c.capture->tensors.at("k").strides(), at::IntArrayRef({2048, 16, 1024, 1}));

    const harness::Family& family = registry().get(c.family);
    harness::Audit audit;
    const harness::CaseTensors in =
        harness::captured_inputs(c, harness::specs_of(family, c, harness::Role::input), audit);
    EXPECT_TRUE(audit.findings.empty());
    for (const char* name : {"q", "k", "v", "g"}) {
        const at::Tensor t = in.kernel.at(name).contiguous();
        const std::string expected = read(scratch(std::string(name) + ".bin"));
        ASSERT_EQ(static_cast<size_t>(t.nbytes()), expected.size()) << name;
        EXPECT_EQ(std::memcmp(t.data_ptr(), expected.data(), expected.size()), 0) << name;
        EXPECT_TRUE(at::equal(in.reference.at(name), t.to(at::kDouble))) << name;
    }
}

// a case without the gate g, for captures that hold none
const std::string kNoGate = "[options]\ngate = \"none\"\n";

TEST(Capture, WhatTheFileStatesMustAgree) {
    python(R"(
@capture(dir + 'shape.pt')
def kernel(q, k, v, head_first=False):
    return v
kernel(*(torch.randn(1, 32, 2, 8).bfloat16() for _ in range(3)))
)");
    try {
        load(scenario("wrong_t", "shape.pt", "[shape]\nT = 64\n"), registry());
        FAIL() << "a stated T other than the capture's loaded";
    } catch (const ScenarioError& e) {
        const std::string what = e.what();
        EXPECT_NE(
            what.find("wrong_t.toml:6:5: error: shape.T = 64, but the capture's q has T = 32"),
            std::string::npos)
            << what;
    }
    try {
        load(scenario("wrong_layout", "shape.pt", "layout = \"head_first\"\n" + kNoGate),
             registry());
        FAIL() << "a stated layout other than the capture's loaded";
    } catch (const ScenarioError& e) {
        EXPECT_NE(std::string(e.what()).find("was captured head_last"), std::string::npos)
            << e.what();
    }
    try {
        load(scenario("fp16", "shape.pt", kNoGate + "[dtypes]\ninputs = \"fp16\"\n"), registry());
        FAIL() << "a stated dtype other than the capture's loaded";
    } catch (const ScenarioError& e) {
        EXPECT_NE(std::string(e.what()).find(
                      "fp16.toml:8:10: error: dtypes.inputs = 'fp16', but the capture's q is bf16"),
                  std::string::npos)
            << e.what();
    }
    // the capture's own dtype, stated, is no contradiction
    EXPECT_EQ(
        load(scenario("bf16", "shape.pt", kNoGate + "[dtypes]\ninputs = \"bf16\"\n"), registry())
            .at(0)
            .input_dtype,
        DType::bf16);
}

// Inputs captured in different dtypes (k made fp32 by the user's code): the file states the
// contract's dtype, and what was captured otherwise is a finding.
TEST(Capture, MixedDtypesTakeTheStatedContract) {
    python(R"(
@capture(dir + 'mixed.pt')
def kernel(q, k, v, head_first=False):
    return v
kernel(torch.randn(1, 32, 2, 8).bfloat16(), torch.randn(1, 32, 2, 8), torch.randn(1, 32, 2, 8).bfloat16())
)");
    try {
        load(scenario("unstated", "mixed.pt", kNoGate), registry());
        FAIL() << "a mixed capture loaded without a stated dtype";
    } catch (const ScenarioError& e) {
        EXPECT_NE(std::string(e.what()).find(
                      "mixed.pt holds inputs of different dtypes (q bf16, k fp32, v bf16)"),
                  std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("state [dtypes] inputs"), std::string::npos);
    }
    const auto cases =
        load(scenario("mixed", "mixed.pt", kNoGate + "[dtypes]\ninputs = \"bf16\"\n"), registry());
    harness::Audit audit;
    const harness::Family& family = registry().get("simple_gla");
    const harness::CaseTensors in = harness::captured_inputs(
        cases.at(0), harness::specs_of(family, cases[0], harness::Role::input), audit);
    ASSERT_EQ(audit.findings.size(), 1u);
    EXPECT_EQ(audit.findings[0].kind, "BOUNDARY_MISMATCH");
    EXPECT_EQ(audit.findings[0].history, "k: fp32");
    EXPECT_NE(audit.findings[0].message.find("k reaches simple_gla as fp32, the kernel's contract "
                                             "takes bf16; measured after casting it to bf16"),
              std::string::npos)
        << audit.findings[0].message;
    EXPECT_EQ(in.kernel.at("k").scalar_type(), at::kBFloat16);
}

TEST(Capture, BadCapturesNameTheFileOrTheTensor) {
    write(scratch("junk.pt"), "not a zip file at all");
    try {
        load(scenario("junk", "junk.pt"), registry());
        FAIL() << "junk loaded";
    } catch (const ScenarioError& e) {
        EXPECT_NE(std::string(e.what()).find("junk.pt: not a tensor archive"), std::string::npos)
            << e.what();
    }
    python(R"(
torch.save({'q': torch.ones(2)}, dir + 'plain.pt')
@capture(dir + 'nov.pt')
def kernel(q, k):
    return q
kernel(torch.randn(1, 8, 2, 4), torch.randn(1, 8, 2, 4))
@capture(dir + 'nan.pt')
def kernel(q, k, v, g):
    return q
q = torch.randn(1, 8, 2, 4)
q[0, 3, 1, 2] = float('nan')
kernel(q, torch.randn(1, 8, 2, 4), torch.randn(1, 8, 2, 4), F.logsigmoid(torch.randn(1, 8, 2)))
@capture(dir + 'nog.pt')
def kernel(q, k, v):
    return q
kernel(*(torch.randn(1, 8, 2, 4) for _ in range(3)))
)");
    for (const auto& [file, text] :
         {std::pair{"plain.pt", "not a capture made by python/lav/capture.py"},
          std::pair{"nov.pt", "holds no q and v of 4 dims"},
          std::pair{"absent.pt", "no such file"}}) {
        try {
            load(scenario("bad", file), registry());
            FAIL() << file << " loaded";
        } catch (const ScenarioError& e) {
            EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
        }
    }
    // a tensor the case needs and the capture lacks, and NaN inputs: the case's own result
    std::vector<report::CaseRecord> records;
    const auto sink = [&](report::CaseRecord r) { records.push_back(std::move(r)); };
    harness::run_case(registry(), load(scenario("nog", "nog.pt"), registry()).at(0), {}, sink);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0].verdict, "error");
    EXPECT_NE(records[0].message.find("nog.pt holds no g, which this simple_gla case needs"),
              std::string::npos)
        << records[0].message;
    records.clear();
    harness::run_case(registry(), load(scenario("nan", "nan.pt"), registry()).at(0), {}, sink);
    ASSERT_EQ(records.size(), 1u);
    bool named = false;
    for (const auto& f : records[0].findings)
        named = named || f.message.find("inputs did (q: 1 NaN/Inf)") != std::string::npos;
    EXPECT_TRUE(named) << records[0].message;
}

TEST(Capture, AroundTheUsersCodeTheFirstCallIsSaved) {
    // a module's kernel, called by the model's code inside the block: its first call is saved,
    // the attribute is itself again afterwards
    python(R"(
import types
ops = types.SimpleNamespace(kernel=lambda q, k, v, head_first=False: v)
def model(n):
    return [ops.kernel(*(torch.full((1, 8, 2, 4), float(i)) for _ in range(3))) for i in range(n)]
original = ops.kernel
with capture(dir + 'around.pt', ops, 'kernel'):
    model(3)
assert ops.kernel is original
)");
    const auto cases = load(scenario("around", "around.pt", kNoGate), registry());
    ASSERT_EQ(cases.size(), 1u);
    ASSERT_TRUE(cases[0].capture);
    EXPECT_EQ(cases[0].capture->tensors.at("q").sum().item<double>(), 0.0);  // the first call's
    EXPECT_EQ(cases[0].T, 8);
}

TEST(Capture, TheRotarySeedsCaptureShowsWhatReachedTheKernel) {
    // scenarios/seeds/make_capture.py wrote it: q and k fp32 after rotary, v bf16
    const auto cases =
        load(fs::path(LAV_SOURCE_DIR) / "scenarios/seeds/xtransformers_capture.toml", registry());
    ASSERT_EQ(cases.size(), 1u);
    EXPECT_EQ(cases[0].T, 16);
    EXPECT_EQ(cases[0].capture->tensors.at("q").scalar_type(), at::kFloat);
    std::vector<report::CaseRecord> records;
    harness::run_case(registry(), cases[0], {},
                      [&](report::CaseRecord r) { records.push_back(std::move(r)); });
    ASSERT_EQ(records.size(), 1u);
    std::vector<std::string> mismatched;
    for (const auto& f : records[0].findings)
        if (f.kind == "BOUNDARY_MISMATCH") mismatched.push_back(f.tensor + " " + f.history);
    EXPECT_EQ(mismatched, (std::vector<std::string>{"q q: fp32", "k k: fp32"}));
    EXPECT_EQ(records[0].verdict, "warn") << records[0].message;
}

}  // namespace
}  // namespace lav
