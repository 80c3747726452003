// tests/prologue/seeds_test.cpp — seed cases 2 (RWKV7 addcmul) and 5 (VAR normalize) replayed
// from their scenario files: the dtypes the user reported, and the fixes that keep fp16.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "harness/prologue.h"
#include "program.h"
#include "scenario/scenario.h"

namespace lav::harness {
namespace {

using scenario::Case;
using scenario::split_lines;

scenario::Catalog test_catalog() {
    scenario::FamilyInfo simple_gla;
    simple_gla.name = "simple_gla";
    simple_gla.variants = {"chunk", "recurrent"};
    simple_gla.inputs = {"q", "k", "v", "g", "g_gamma", "h0"};
    simple_gla.measured = {"o", "ht"};
    simple_gla.options = {{"gate", {"g", "g_gamma", "none"}}};
    return {simple_gla};
}

std::string data_path(const std::string& file) {
    return std::string(LAV_SOURCE_DIR) + "/tests/data/scenarios/prologue/" + file;
}

std::vector<Case> load(const std::string& file) {
    return scenario::load_file(data_path(file), test_catalog(), scenario::LoadOptions{});
}

/// q, k, v as the harness would hand them over: [B, T, H, K] and [B, T, H, V] in the case's
/// inputs dtype, and the tensors `prologue` declares.
TensorMap environment(const Case& c, const scenario::Prologue& prologue) {
    const at::ScalarType type = to_scalar_type(c.input_dtype);
    const auto draw = [&](std::vector<int64_t> shape, uint64_t seed) {
        at::Generator rng = at::detail::createCPUGenerator(seed);
        return at::randn(shape, rng, at::TensorOptions().dtype(at::kDouble)).to(type);
    };
    TensorMap env = {{"q", draw({c.B, c.T, c.H, c.K}, 1)},
                     {"k", draw({c.B, c.T, c.H, c.K}, 2)},
                     {"v", draw({c.B, c.T, c.H, c.V}, 3)}};
    TensorMap declared = make_prologue_tensors(prologue, c.seed);
    env.merge(declared);
    return env;
}

TEST(SeedRwkv7, FloatParameterPromotesKOnly) {
    const auto cases = load("rwkv7_addcmul.toml");
    ASSERT_EQ(cases.size(), 2u);
    const Case& c = cases[0];
    ASSERT_EQ(c.prologue->find_tensor("k_a")->dtype, DType::fp32);
    const TensorMap in = environment(c, *c.prologue);
    const TensorMap out = run_prologue(*c.prologue, in);
    EXPECT_EQ(out.at("k").scalar_type(), at::kFloat);
    EXPECT_EQ(out.at("q").scalar_type(), at::kHalf);
    EXPECT_EQ(out.at("v").scalar_type(), at::kHalf);
    EXPECT_TRUE(out.at("q").is_same(in.at("q")));
    // k + k·(a − 1)·k_a, from the same fp16 and fp32 values in fp64
    const at::Tensor k = in.at("k").to(at::kDouble);
    const at::Tensor a = in.at("a").to(at::kDouble);
    const at::Tensor k_a = in.at("k_a").to(at::kDouble);
    EXPECT_TRUE(at::allclose(out.at("k").to(at::kDouble), k + k * (a - 1) * k_a, 1e-3, 1e-3));
}

TEST(SeedRwkv7, HalfParameterKeepsHalf) {
    const auto cases = load("rwkv7_addcmul.toml");
    ASSERT_EQ(cases.size(), 2u);
    const Case& c = cases[1];
    ASSERT_EQ(c.prologue->find_tensor("k_a")->dtype, DType::fp16);
    const TensorMap out = run_prologue(*c.prologue, environment(c, *c.prologue));
    for (const char* name : {"q", "k", "v"})
        EXPECT_EQ(out.at(name).scalar_type(), at::kHalf) << name;
}

TEST(SeedRwkv7, ExplicitCastKeepsHalf) {
    const auto cases = load("rwkv7_addcmul.toml");
    ASSERT_FALSE(cases.empty());
    scenario::Prologue prologue = *cases[0].prologue;
    prologue.statements =
        scenario::parse_prologue("k = to(addcmul(k, k * (a - 1.0), k_a), \"fp16\")").statements;
    const TensorMap out = run_prologue(prologue, environment(cases[0], *cases[0].prologue));
    EXPECT_EQ(out.at("k").scalar_type(), at::kHalf);
}

TEST(SeedVar, FloatScalePromotesQWithAndWithoutAutocast) {
    const auto cases = load("var_normalize.toml");
    ASSERT_EQ(cases.size(), 2u);
    EXPECT_EQ(cases[0].prologue->autocast, scenario::AutocastMode::off);
    EXPECT_EQ(cases[1].prologue->autocast, scenario::AutocastMode::bf16);
    for (const Case& c : cases) {
        const TensorMap out = run_prologue(*c.prologue, environment(c, *c.prologue));
        EXPECT_EQ(out.at("q").scalar_type(), at::kFloat) << c.id;
        EXPECT_EQ(out.at("k").scalar_type(), at::kHalf) << c.id;
        // every row of q is normalized, then scaled by 2.5
        const at::Tensor norms = at::linalg_vector_norm(out.at("q").to(at::kDouble), 2, {-1});
        EXPECT_TRUE(at::allclose(norms, at::full_like(norms, 2.5), 2e-3)) << c.id;
    }
}

TEST(SeedVar, HalfScaleKeepsHalf) {
    for (const Case& c : load("var_normalize.toml")) {
        scenario::Prologue prologue = *c.prologue;
        prologue.tensors[0].dtype = DType::fp16;
        const TensorMap out = run_prologue(prologue, environment(c, prologue));
        EXPECT_EQ(out.at("q").scalar_type(), at::kHalf) << c.id;
    }
}

TEST(SeedFiles, ReadmeExampleIsTheDataFile) {
    std::ifstream in(std::string(LAV_SOURCE_DIR) + "/scenarios/README.md");
    std::ostringstream readme;
    readme << in.rdbuf();
    const std::string text = readme.str();
    const std::size_t section = text.find("## Prologue");
    ASSERT_NE(section, std::string::npos);
    const std::string fence = "```toml\n";
    const std::size_t begin = text.find(fence, section);
    ASSERT_NE(begin, std::string::npos);
    const std::size_t end = text.find("```\n", begin + fence.size());
    std::ifstream file(data_path("readme_example.toml"));
    std::ostringstream example;
    example << file.rdbuf();
    EXPECT_EQ(text.substr(begin + fence.size(), end - begin - fence.size()), example.str());
}

TEST(SeedFiles, ReadmeExampleRuns) {
    const auto cases = load("readme_example.toml");
    ASSERT_EQ(cases.size(), 2u);
    const DType parameter[] = {DType::fp32, DType::fp16};
    const at::ScalarType first_k[] = {at::kFloat, at::kHalf};
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        EXPECT_EQ(c.prologue->find_tensor("k_a")->dtype, parameter[i]) << c.id;
        std::vector<at::ScalarType> k_dtypes;
        PrologueHooks hooks;
        hooks.on_assign = [&](const std::string& name, const at::Tensor& t) {
            if (name == "k") k_dtypes.push_back(t.scalar_type());
        };
        const TensorMap out = run_prologue(*c.prologue, environment(c, *c.prologue), hooks);
        // k leaves fp16 at addcmul when k_a is fp32, and the cast brings it back
        EXPECT_EQ(k_dtypes, (std::vector<at::ScalarType>{first_k[i], at::kHalf})) << c.id;
        EXPECT_EQ(out.at("q").scalar_type(), at::kHalf) << c.id;
        EXPECT_EQ(out.at("q").sizes(), at::IntArrayRef({1, 1024, 4, 64})) << c.id;
    }
}

TEST(SeedFiles, RuntimeErrorPointsIntoTheFile) {
    const auto cases = load("runtime_shape_error.toml");
    ASSERT_EQ(cases.size(), 1u);
    const TensorMap env = environment(cases[0], *cases[0].prologue);
    std::string what;
    try {
        run_prologue(*cases[0].prologue, env);
    } catch (const ScenarioError& e) {
        what = e.what();
    }
    std::string libtorch;
    try {
        at::matmul(env.at("q").to(at::kFloat), env.at("w"));
    } catch (const c10::Error& e) {
        const std::string message = e.what_without_backtrace();
        libtorch = message.substr(0, message.find('\n'));
    }
    ASSERT_FALSE(libtorch.empty());
    const std::string path = data_path("runtime_shape_error.toml");
    EXPECT_EQ(what, path +
                        ":15:5: error: 'matmul' failed in the assignment to 'o'\n"
                        "    o = matmul(q, w) + 1.0\n"
                        "        ^~~~~~\n"
                        "note: " +
                        libtorch + "\n1 error in " + path);
}

}  // namespace
}  // namespace lav::harness
