// tests/prologue/python_test.cpp — Python prologues through `lav run`: the seeds' findings name
// the module's parameter or buffer and the user's file:line; errors point at the `python` key.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "report/report.h"

namespace lav {
namespace {

namespace fs = std::filesystem;

// runs lav in the source tree; its output goes to `log` when given
int lav(const std::string& args, const fs::path& log = "/dev/null") {
    const std::string command = std::string("cd ") + LAV_SOURCE_DIR + " && " + LAV_BINARY + " " +
                                args + " >" + log.string() + " 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("lav_pyprologue_" + std::to_string(getpid()));
    fs::create_directories(dir);
    return dir / name;
}

std::string read(const fs::path& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// "file.py:N" of the line of scenarios/seeds/`file` that holds `text`
std::string place(const std::string& file, const std::string& text) {
    std::ifstream in(fs::path(LAV_SOURCE_DIR) / "scenarios/seeds" / file);
    int n = 0;
    for (std::string line; std::getline(in, line);)
        if (++n, line.find(text) != std::string::npos) return file + ":" + std::to_string(n);
    ADD_FAILURE() << file << " has no line with " << text;
    return "?";
}

report::Report run_seed(const std::string& name) {
    const fs::path out = scratch(name + ".h5");
    EXPECT_EQ(lav("run scenarios/seeds/" + name + ".toml --out " + out.string()), 0) << name;
    return report::read_report(out.string());
}

// the one finding of `kind` about `tensor` in every record whose id holds `part`
report::Finding finding(const report::Report& r, const std::string& part, const std::string& kind,
                        const std::string& tensor) {
    report::Finding found;
    int records = 0;
    for (const auto& c : r.cases) {
        if (c.id.find(part) == std::string::npos) continue;
        ++records;
        int n = 0;
        for (const auto& f : c.findings)
            if (f.kind == kind && f.tensor == tensor) found = f, ++n;
        EXPECT_EQ(n, 1) << c.id << ": " << kind << " of " << tensor;
    }
    EXPECT_GT(records, 0) << part;
    return found;
}

bool any_finding(const report::Report& r, const std::string& kind, const std::string& tensor) {
    for (const auto& c : r.cases)
        for (const auto& f : c.findings)
            if (f.kind == kind && f.tensor == tensor) return true;
    return false;
}

TEST(PythonPrologue, Rwkv7ParameterIsNamedWithItsLine) {
    const report::Report r = run_seed("rwkv7_python");
    const std::string at = place("rwkv7_layer.py", "k = k.addcmul(");
    const report::Finding p = finding(r, "seed_rwkv7_python", "PROMOTION", "k");
    EXPECT_NE(p.message.find("at aten::addcmul in " + at +
                             ", operand blocks.3.attn.k_a: fp32 (parameter)"),
              std::string::npos)
        << p.message;
    EXPECT_EQ(p.history, "k: fp16 —aten::addcmul(blocks.3.attn.k_a: fp32) at " + at + "→ fp32");
    const report::Finding b = finding(r, "seed_rwkv7_python", "BOUNDARY_MISMATCH", "k");
    EXPECT_NE(b.message.find("as fp32"), std::string::npos) << b.message;
    EXPECT_EQ(b.history, p.history);
    EXPECT_FALSE(any_finding(r, "BOUNDARY_MISMATCH", "q"));
    EXPECT_FALSE(any_finding(r, "BOUNDARY_MISMATCH", "v"));
    for (const auto& c : r.cases) {
        EXPECT_EQ(c.verdict, "warn") << c.id << ": " << c.message;
        // the report's trace says where each op the user's code called was called
        bool traced = false;
        for (const auto& row : c.trace) traced = traced || row.op == "aten::addcmul at " + at;
        EXPECT_TRUE(traced) << c.id;
    }
}

TEST(PythonPrologue, VarScaleParameterUnderBothAutocastModes) {
    const report::Report r = run_seed("var_python");
    for (const char* autocast : {"autocast=off", "autocast=bf16"})
        for (const auto& [tensor, line] :
             {std::pair{"q", "q = F.normalize(q"}, std::pair{"k", "k = F.normalize(k"}}) {
            const report::Finding p = finding(r, autocast, "PROMOTION", tensor);
            EXPECT_NE(p.message.find("at aten::mul in " + place("var_attention.py", line)),
                      std::string::npos)
                << p.message;
            EXPECT_NE(p.message.find("operand exp(blocks.1.attn.scale_mul) at " +
                                     place("var_attention.py", "scale = ")),
                      std::string::npos)
                << p.message;
            const report::Finding b = finding(r, autocast, "BOUNDARY_MISMATCH", tensor);
            EXPECT_NE(b.message.find("takes fp16"), std::string::npos) << b.message;
            // bf16 CPU autocast reaches the user's ops
            EXPECT_EQ(b.history.find("[autocast]") != std::string::npos,
                      std::string(autocast) == "autocast=bf16")
                << b.history;
        }
}

TEST(PythonPrologue, RotaryBufferAndOnePromotionPerTensor) {
    const report::Report r = run_seed("xtransformers_python");
    const std::string at = place("xtransformers_rotary.py", "return t * freqs.cos()");
    for (const char* tensor : {"q", "k"}) {
        const report::Finding p = finding(r, "seed_xtransformers_python", "PROMOTION", tensor);
        EXPECT_NE(p.message.find("at aten::mul in " + at), std::string::npos) << p.message;
        EXPECT_NE(p.message.find("rotary.inv_freq"), std::string::npos) << p.message;
        EXPECT_NE(p.message.find("cos("), std::string::npos) << p.message;
        EXPECT_NE(p.message.find("; also at aten::mul"), std::string::npos) << p.message;
        EXPECT_EQ(p.message.find('#'), std::string::npos) << p.message;
        const report::Finding b =
            finding(r, "seed_xtransformers_python", "BOUNDARY_MISMATCH", tensor);
        EXPECT_NE(b.history.find(" at " + at), std::string::npos) << b.history;
    }
    EXPECT_FALSE(any_finding(r, "BOUNDARY_MISMATCH", "v"));
}

// a scenario of its own beside `py`, run; returns lav's exit code and output
int run_own(const std::string& name, const std::string& python_key, const std::string& py,
            std::string& output) {
    write(scratch(name + ".py"), py);
    const fs::path toml = scratch(name + ".toml");
    write(toml,
          "name = \"" + name + "\"\ndescription = \"a Python prologue\"\n" +
              "family = \"simple_gla\"\nvariants = [\"chunk\"]\n[options]\ngate = \"none\"\n" +
              "[shape]\nB = 1\nT = 16\nH = 2\nK = 8\nV = 8\n[prologue]\npython = \"" + python_key +
              "\"\n");
    const fs::path log = scratch(name + ".log");
    const int code = lav("run " + toml.string() + " --out " + scratch(name + ".h5").string(), log);
    output = read(log);
    return code;
}

TEST(PythonPrologue, MissingFileAndFunctionAreErrorsAtTheKey) {
    std::string out;
    EXPECT_EQ(run_own("nofile", "absent.py:f", "", out), 2);
    EXPECT_NE(out.find("nofile.toml:14:10: error: no Python file"), std::string::npos) << out;
    EXPECT_EQ(
        run_own("nofunction", "nofunction.py:prologue", "def prolog(q):\n    return q\n", out), 2);
    EXPECT_NE(out.find("nofunction.toml:14:10: error:"), std::string::npos) << out;
    EXPECT_NE(out.find("defines no function 'prologue'"), std::string::npos) << out;
    EXPECT_NE(out.find("it defines: prolog"), std::string::npos) << out;
    EXPECT_EQ(run_own("noform", "noform.py", "", out), 2);
    EXPECT_NE(out.find("must be \"path/file.py:function\""), std::string::npos) << out;
}

TEST(PythonPrologue, WhatTheFunctionRaisesIsTheCasesErrorWithItsLine) {
    std::string out;
    EXPECT_EQ(
        run_own("raises", "raises.py:prologue", "def prologue(q, k):\n    return q @ k\n", out), 1);
    EXPECT_NE(out.find("raises.toml:14:10: error: prologue() raised"), std::string::npos) << out;
    EXPECT_NE(out.find("raises.py:2 in prologue"), std::string::npos) << out;
    EXPECT_EQ(run_own("badname", "badname.py:prologue",
                      "def prologue(q):\n    return {\"kk\": q}\n", out),
              1);
    EXPECT_NE(out.find("returned 'kk', which is no tensor of this case"), std::string::npos) << out;
}

TEST(PythonPrologue, ATupleIsTheFunctionsTensorParametersInOrder) {
    std::string out;
    EXPECT_EQ(run_own("tuple", "tuple.py:prologue",
                      "import torch\ndef prologue(k, q):\n    return k.float(), q\n", out),
              0);
    const report::Report r = report::read_report(scratch("tuple.h5").string());
    EXPECT_TRUE(any_finding(r, "BOUNDARY_MISMATCH", "k"));
    EXPECT_FALSE(any_finding(r, "BOUNDARY_MISMATCH", "q"));
}

TEST(PythonPrologue, ACapturesTensorsAreItsInputs) {
    // the seeds' capture holds q and k in fp32, v in bf16; the function fails on any other
    write(scratch("replayed.py"),
          "import torch\n"
          "def prologue(q, k, v):\n"
          "    assert (q.dtype, k.dtype, v.dtype) == (torch.float32, torch.float32, "
          "torch.bfloat16), (q.dtype, k.dtype, v.dtype)\n"
          "    return {'q': q.bfloat16(), 'k': k.bfloat16()}\n");
    const fs::path toml = scratch("replayed.toml");
    write(toml,
          std::string("name = \"replayed\"\ndescription = \"a capture through Python\"\n") +
              "family = \"simple_gla\"\nvariants = [\"chunk\"]\n[options]\ngate = \"none\"\n" +
              "[dtypes]\ninputs = \"bf16\"\n[inputs]\nfrom = \"" + LAV_SOURCE_DIR +
              "/scenarios/seeds/xtransformers_capture.pt\"\n[prologue]\npython = "
              "\"replayed.py:prologue\"\n");
    const fs::path log = scratch("replayed.log");
    EXPECT_EQ(lav("run " + toml.string() + " --out " + scratch("replayed.h5").string(), log), 0)
        << read(log);
    const report::Report r = report::read_report(scratch("replayed.h5").string());
    ASSERT_EQ(r.cases.size(), 1u);
    EXPECT_EQ(r.cases[0].verdict, "pass") << r.cases[0].message;
    EXPECT_FALSE(any_finding(r, "BOUNDARY_MISMATCH", "q"));
}

}  // namespace
}  // namespace lav
