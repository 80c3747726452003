// tests/prologue/executor_test.cpp — the prologue executor: dtypes follow LibTorch's promotion
// and autocast, every function computes its formula, errors point at the op, hooks, generators.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "harness/prologue.h"
#include "program.h"

namespace lav::harness {
namespace {

using scenario::AutocastMode;
using scenario::parse_prologue;
using scenario::split_lines;
using trace::AutocastGuard;

at::Tensor randn(at::IntArrayRef shape, at::ScalarType type, uint64_t seed) {
    at::Generator rng = at::detail::createCPUGenerator(seed);
    return at::randn(shape, rng, at::TensorOptions().dtype(at::kDouble)).to(type);
}

TensorMap run(const std::string& ops, TensorMap env, AutocastMode mode = AutocastMode::off) {
    return run_prologue(parse_prologue(ops, mode), std::move(env));
}

/// The what() of the ScenarioError that running `ops` throws; fails the test if none.
std::string run_error(const std::string& ops, TensorMap env,
                      AutocastMode mode = AutocastMode::off) {
    try {
        run(ops, std::move(env), mode);
    } catch (const ScenarioError& e) {
        return e.what();
    }
    ADD_FAILURE() << "no ScenarioError for " << ops;
    return "";
}

/// LibTorch's own message for a failing op, first line only.
template <typename Op>
std::string libtorch_message(const Op& op) {
    try {
        op();
    } catch (const c10::Error& e) {
        const std::string what = e.what_without_backtrace();
        return what.substr(0, what.find('\n'));
    }
    ADD_FAILURE() << "the op did not fail";
    return "";
}

TEST(PrologueRun, HalfTimesFloatTensorIsFloat) {
    const at::Tensor x = randn({2, 3}, at::kHalf, 1);
    const at::Tensor p = randn({3}, at::kFloat, 2);
    const TensorMap out = run("y = x * p", {{"x", x}, {"p", p}});
    const at::Tensor& y = out.at("y");
    EXPECT_EQ(y.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::allclose(y.to(at::kDouble), x.to(at::kDouble) * p.to(at::kDouble), 1e-6));
}

TEST(PrologueRun, HalfWithNumbersStaysHalf) {
    const at::Tensor x = randn({4, 5}, at::kHalf, 3).abs() + 0.5;
    const TensorMap out =
        run("y = x * 2.0\n"
            "z = 2.0 * x\n"
            "w = x - 1\n"
            "u = 1 - x\n"
            "r = 2 / x\n"
            "n = -x",
            {{"x", x}});
    for (const char* name : {"y", "z", "w", "u", "r", "n"})
        EXPECT_EQ(out.at(name).scalar_type(), at::kHalf) << name;
    const at::Tensor xd = x.to(at::kDouble);
    // doubling and negation are exact in fp16
    EXPECT_TRUE(at::equal(out.at("y"), x * 2));
    EXPECT_TRUE(at::equal(out.at("z"), out.at("y")));
    EXPECT_TRUE(at::equal(out.at("n").to(at::kDouble), -xd));
    EXPECT_TRUE(at::allclose(out.at("w").to(at::kDouble), xd - 1, 1e-3, 1e-3));
    EXPECT_TRUE(at::allclose(out.at("u").to(at::kDouble), 1 - xd, 1e-3, 1e-3));
    EXPECT_TRUE(at::allclose(out.at("r").to(at::kDouble), 2 / xd, 2e-3, 1e-3));
}

TEST(PrologueRun, ZeroDimFloatDoesNotPromoteHalf) {
    // a 0-dim tensor of the same category does not promote a dimensioned one
    const at::Tensor x = randn({4}, at::kHalf, 4);
    const at::Tensor s = at::full({}, 0.5, at::kFloat);
    EXPECT_EQ(run("y = x * s", {{"x", x}, {"s", s}}).at("y").scalar_type(), at::kHalf);
}

TEST(PrologueRun, NumbersCombineAsInPython) {
    const at::Tensor x = randn({6}, at::kDouble, 5);
    const TensorMap out =
        run("half = x * (2 / 4)\n"
            "one = x * (7 - 2 * 3)\n"
            "neg = x * -(1 + 1)",
            {{"x", x}});
    EXPECT_TRUE(at::equal(out.at("half"), x * 0.5));
    EXPECT_TRUE(at::equal(out.at("one"), x));
    EXPECT_TRUE(at::equal(out.at("neg"), x * -2));
}

TEST(PrologueRun, AddcmulWithFloatParameterIsFloat) {
    const at::Tensor k = randn({2, 4}, at::kHalf, 6);
    const at::Tensor a = randn({2, 4}, at::kHalf, 7);
    const at::Tensor k_a = randn({4}, at::kFloat, 8);
    const TensorMap out = run("y = addcmul(k, a, k_a)\nz = addcmul(k, a, a, 0.5)",
                              {{"k", k}, {"a", a}, {"k_a", k_a}});
    EXPECT_EQ(out.at("y").scalar_type(), at::kFloat);
    EXPECT_EQ(out.at("z").scalar_type(), at::kHalf);
    const at::Tensor kd = k.to(at::kDouble);
    const at::Tensor ad = a.to(at::kDouble);
    EXPECT_TRUE(
        at::allclose(out.at("y").to(at::kDouble), kd + ad * k_a.to(at::kDouble), 1e-6, 1e-6));
    EXPECT_TRUE(at::allclose(out.at("z").to(at::kDouble), kd + 0.5 * ad * ad, 1e-2, 1e-2));
}

TEST(PrologueRun, ExplicitCastSetsTheDtype) {
    const at::Tensor k = randn({2, 4}, at::kHalf, 9);
    const at::Tensor a = randn({2, 4}, at::kHalf, 10);
    const at::Tensor k_a = randn({4}, at::kFloat, 11);
    const TensorMap out =
        run("k = to(addcmul(k, k * (a - 1.0), k_a), \"fp16\")\n"
            "b = to(a, 'bf16')\n"
            "d = to(a, 'fp64')",
            {{"k", k}, {"a", a}, {"k_a", k_a}});
    EXPECT_EQ(out.at("k").scalar_type(), at::kHalf);
    EXPECT_EQ(out.at("b").scalar_type(), at::kBFloat16);
    EXPECT_EQ(out.at("d").scalar_type(), at::kDouble);
    EXPECT_TRUE(at::equal(out.at("d"), a.to(at::kDouble)));
}

TEST(PrologueRun, NormalizeUnderCpuAutocast) {
    const at::Tensor x = randn({3, 8}, at::kFloat, 12);
    const at::Tensor h = randn({3, 8}, at::kHalf, 13);
    const at::Tensor w = randn({8, 8}, at::kFloat, 14);
    const std::string ops = "n = normalize(x)\nnh = normalize(h)\nm = matmul(x, w)";
    const TensorMap env = {{"x", x}, {"h", h}, {"w", w}};
    const TensorMap plain = run(ops, env);
    const TensorMap mixed = run(ops, env, AutocastMode::bf16);
    // the region is open: matmul runs in bf16 under CPU autocast
    EXPECT_EQ(plain.at("m").scalar_type(), at::kFloat);
    EXPECT_EQ(mixed.at("m").scalar_type(), at::kBFloat16);
    // CPU autocast has no rule for vector norms: normalize keeps its input's dtype
    EXPECT_EQ(mixed.at("n").scalar_type(), at::kFloat);
    EXPECT_EQ(mixed.at("nh").scalar_type(), at::kHalf);
    const at::Tensor norms = at::linalg_vector_norm(mixed.at("n").to(at::kDouble), 2, {-1});
    EXPECT_TRUE(at::allclose(norms, at::ones({3}, at::kDouble), 1e-6));
    // and the region is closed again
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(PrologueRun, DisabledRegionTurnsAutocastOff) {
    const at::Tensor x = randn({3, 8}, at::kFloat, 15);
    const at::Tensor w = randn({8, 8}, at::kFloat, 16);
    const TensorMap env = {{"x", x}, {"w", w}};
    AutocastGuard outer(at::kCPU, true, at::kBFloat16);
    EXPECT_EQ(run("m = matmul(x, w)", env).at("m").scalar_type(), at::kBFloat16);
    EXPECT_EQ(run("m = matmul(x, w)", env, AutocastMode::disabled).at("m").scalar_type(),
              at::kFloat);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(PrologueRun, AutocastIsRestoredAfterAnError) {
    const at::ScalarType before = at::autocast::get_autocast_dtype(at::kCPU);
    const std::string what =
        run_error("m = matmul(x, w)",
                  {{"x", randn({3, 8}, at::kFloat, 17)}, {"w", randn({4, 8}, at::kFloat, 18)}},
                  AutocastMode::bf16);
    EXPECT_EQ(split_lines(what).at(0),
              "ops.txt:1:5: error: 'matmul' failed in the assignment to 'm'");
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), before);
}

TEST(PrologueRun, FloatSixteenAutocastNeedsCudaTensors) {
    const std::string what =
        run_error("y = x * 2", {{"x", randn({2}, at::kHalf, 19)}}, AutocastMode::fp16);
    const std::vector<std::string> lines = split_lines(what);
    ASSERT_GE(lines.size(), 4u) << what;
    EXPECT_EQ(lines[0],
              "ops.txt:1:1: error: autocast 'fp16' is CUDA autocast, and this case's tensors are "
              "on the CPU");
    EXPECT_EQ(lines[3], "note: use autocast = \"bf16\" for a CPU autocast region");
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(PrologueRun, RotaryTurnsEachPairByItsAngle) {
    const at::Tensor x = randn({2, 5, 3, 8}, at::kDouble, 20);  // [B, T, H, D]
    const at::Tensor x1 = x.narrow(-1, 0, 4);
    const at::Tensor x2 = x.narrow(-1, 4, 4);

    const TensorMap still =
        run("y = rotary(x, f)", {{"x", x}, {"f", at::zeros({5, 4}, at::kDouble)}});
    EXPECT_TRUE(at::equal(still.at("y"), x));

    const at::Tensor quarter = at::full({5, 4}, M_PI / 2, at::kDouble);
    const TensorMap turned = run("y = rotary(x, f)", {{"x", x}, {"f", quarter}});
    EXPECT_TRUE(at::allclose(turned.at("y"), at::cat({-x2, x1}, -1), 1e-12, 1e-12));

    const at::Tensor theta = randn({5, 4}, at::kDouble, 21);
    const TensorMap out = run("y = rotary(x, f)\nz = rotary(x, full)",
                              {{"x", x}, {"f", theta}, {"full", at::cat({theta, theta}, -1)}});
    // [T, 1, D/2]: one angle per position and pair, the same for every head
    const at::Tensor c = at::cos(theta).unsqueeze(1);
    const at::Tensor s = at::sin(theta).unsqueeze(1);
    const at::Tensor expected = at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
    EXPECT_TRUE(at::allclose(out.at("y"), expected, 1e-12, 1e-12));
    EXPECT_TRUE(at::equal(out.at("z"), out.at("y")));
}

TEST(PrologueRun, RotaryPromotesWithFloatAngles) {
    const at::Tensor x = randn({1, 4, 2, 6}, at::kHalf, 22);
    const at::Tensor f = randn({4, 3}, at::kFloat, 23);
    const TensorMap out =
        run("y = rotary(x, f)\nz = rotary(x, to(f, 'fp16'))", {{"x", x}, {"f", f}});
    EXPECT_EQ(out.at("y").scalar_type(), at::kFloat);
    EXPECT_EQ(out.at("z").scalar_type(), at::kHalf);
}

TEST(PrologueRun, RotaryChecksShapes) {
    const std::string what = run_error(
        "y = rotary(x, f)",
        {{"x", randn({2, 5, 3, 8}, at::kFloat, 24)}, {"f", randn({5, 3}, at::kFloat, 25)}});
    const std::vector<std::string> lines = split_lines(what);
    ASSERT_GE(lines.size(), 4u) << what;
    EXPECT_EQ(lines[0], "ops.txt:1:5: error: 'rotary' failed in the assignment to 'y'");
    EXPECT_EQ(lines[3],
              "note: rotary needs freqs as [T, D/2] or [T, D] = [5, 4] or [5, 8] for x of shape "
              "[2, 5, 3, 8], got [5, 3]");
}

TEST(PrologueRun, RuntimeShapeErrorPointsAtTheOp) {
    const at::Tensor q = randn({1, 4, 1, 4}, at::kHalf, 26);
    const at::Tensor w = randn({3, 5}, at::kFloat, 27);
    const std::string what =
        run_error("q = to(q, \"fp32\")\no = matmul(q, w) + 1.0", {{"q", q}, {"w", w}});
    const std::string expected_note = libtorch_message([&] { at::matmul(q.to(at::kFloat), w); });
    EXPECT_EQ(what,
              "ops.txt:2:5: error: 'matmul' failed in the assignment to 'o'\n"
              "    o = matmul(q, w) + 1.0\n"
              "        ^~~~~~\n"
              "note: " +
                  expected_note + "\n1 error in ops.txt");
}

TEST(PrologueRun, OperatorErrorPointsAtTheOperator) {
    const at::Tensor x = randn({2, 3}, at::kFloat, 28);
    const at::Tensor z = randn({4, 5}, at::kFloat, 29);
    const std::vector<std::string> lines =
        split_lines(run_error("y = x + z", {{"x", x}, {"z", z}}));
    ASSERT_GE(lines.size(), 4u);
    EXPECT_EQ(lines[0], "ops.txt:1:7: error: '+' failed in the assignment to 'y'");
    EXPECT_EQ(lines[2], "          ^");
    EXPECT_EQ(lines[3], "note: " + libtorch_message([&] { at::add(x, z); }));
}

TEST(PrologueRun, MissingTensorIsAScenarioError) {
    const std::vector<std::string> lines =
        split_lines(run_error("y = g * 2", {{"q", randn({2}, at::kFloat, 30)}}));
    ASSERT_GE(lines.size(), 4u);
    EXPECT_EQ(lines[0], "ops.txt:1:5: error: 'g' is not a tensor of this case");
    EXPECT_EQ(lines[3], "note: this case has: q");
}

TEST(PrologueRun, HooksSeeInputsThenAssignments) {
    const at::Tensor a = randn({3}, at::kFloat, 31);
    const at::Tensor b = randn({3}, at::kHalf, 32);
    std::vector<std::string> events;
    at::Tensor assigned_c;
    PrologueHooks hooks;
    hooks.on_input = [&](const std::string& name, const at::Tensor& t) {
        events.push_back("input " + name + " " + std::string(c10::toString(t.scalar_type())));
    };
    hooks.on_assign = [&](const std::string& name, const at::Tensor& t) {
        events.push_back("assign " + name + " " + std::string(c10::toString(t.scalar_type())));
        if (name == "c") assigned_c = t;
    };
    const TensorMap out = run_prologue(parse_prologue("c = a + b\na = to(c * 2, 'fp16')"),
                                       {{"b", b}, {"a", a}}, hooks);
    EXPECT_EQ(events, (std::vector<std::string>{"input a Float", "input b Half", "assign c Float",
                                                "assign a Half"}));
    EXPECT_TRUE(assigned_c.is_same(out.at("c")));
    EXPECT_TRUE(out.at("b").is_same(b));
    EXPECT_EQ(out.at("a").scalar_type(), at::kHalf);
    EXPECT_TRUE(at::allclose(out.at("a").to(at::kDouble),
                             (a.to(at::kDouble) + b.to(at::kDouble)) * 2, 1e-2, 1e-2));
}

TEST(PrologueRun, EveryFunctionComputesItsFormula) {
    const at::Tensor x = randn({2, 3, 8}, at::kDouble, 33);
    const at::Tensor a = randn({2, 3, 8}, at::kDouble, 34);
    const at::Tensor c = randn({2, 3, 8}, at::kDouble, 35);
    const at::Tensor w = randn({8, 8}, at::kDouble, 36);
    const at::Tensor b = randn({8}, at::kDouble, 37);
    const at::Tensor g = randn({8}, at::kDouble, 38);
    const TensorMap out =
        run("addcmul_ = addcmul(x, a, c, 0.5)\n"
            "matmul_ = matmul(x, w)\n"
            "linear_ = linear(x, w, b)\n"
            "linear_nobias = linear(x, w)\n"
            "normalize_ = normalize(x)\n"
            "l2norm_ = l2norm(x)\n"
            "rms_ = rms_norm(x, g, 0.5)\n"
            "layer_ = layer_norm(x, g, b)\n"
            "layer_eps = layer_norm(x, g, b, 0.5)\n"
            "exp_ = exp(x)\n"
            "sigmoid_ = sigmoid(x)\n"
            "logsigmoid_ = logsigmoid(x)\n"
            "softplus_ = softplus(x)\n"
            "silu_ = silu(x)\n"
            "softmax_ = softmax(x)",
            {{"x", x}, {"a", a}, {"c", c}, {"w", w}, {"b", b}, {"g", g}});
    const auto sum = [](const at::Tensor& t) { return t.sum(-1, true); };
    const at::Tensor e = at::exp(x);
    const at::Tensor sigmoid = 1 / (1 + at::exp(-x));
    const at::Tensor mean = sum(x) / 8;
    const at::Tensor var = sum((x - mean) * (x - mean)) / 8;
    const at::Tensor xw = (x.unsqueeze(-1) * w).sum(-2);   // x @ w
    const at::Tensor xwt = (x.unsqueeze(-2) * w).sum(-1);  // x @ wᵀ
    const std::pair<const char*, at::Tensor> expected[] = {
        {"addcmul_", x + 0.5 * a * c},
        {"matmul_", xw},
        {"linear_", xwt + b},
        {"linear_nobias", xwt},
        {"normalize_", x / at::sqrt(sum(x * x))},
        {"l2norm_", x / at::sqrt(sum(x * x) + 1e-6)},
        {"rms_", x / at::sqrt(sum(x * x) / 8 + 0.5) * g},
        {"layer_", (x - mean) / at::sqrt(var + 1e-5) * g + b},
        {"layer_eps", (x - mean) / at::sqrt(var + 0.5) * g + b},
        {"exp_", e},
        {"sigmoid_", sigmoid},
        {"logsigmoid_", at::log(sigmoid)},
        {"softplus_", at::log(1 + e)},
        {"silu_", x * sigmoid},
        {"softmax_", e / sum(e)},
    };
    for (const auto& [name, value] : expected) {
        const at::Tensor& got = out.at(name);
        EXPECT_EQ(got.scalar_type(), at::kDouble) << name;
        EXPECT_EQ(got.sizes(), value.sizes()) << name;
        EXPECT_TRUE(at::allclose(got, value, 1e-10, 1e-10)) << name;
    }
}

TEST(PrologueRun, ModelCodeFunctionsComputeTheirFormulas) {
    const at::Tensor x = randn({2, 3, 8}, at::kDouble, 41);
    const at::Tensor a = randn({2, 3, 8}, at::kDouble, 42);
    const at::Tensor w = randn({8, 4}, at::kDouble, 43);
    const TensorMap out =
        run("elu_ = elu(x)\n"
            "elu_half = elu(x, 0.5)\n"
            "log_ = log(exp(x))\n"
            "rsqrt_ = rsqrt(exp(x))\n"
            "clamp_ = clamp(x, -0.5, 0.5)\n"
            "sum_ = sum(x, -1)\n"
            "mean_ = mean(x, 1)\n"
            "cat_ = cat(x, a, 1)\n"
            "stack_ = stack(x, a, 0)\n"
            "where_ = where(x - a, x, a)\n"
            "einsum_ = einsum(\"btk,kv->btv\", x, w)\n"
            "einsum_one = einsum(\"btk->bkt\", x)",
            {{"x", x}, {"a", a}, {"w", w}});
    const at::Tensor neg = x < 0;
    const std::pair<const char*, at::Tensor> expected[] = {
        {"elu_", at::where(neg, at::exp(x) - 1, x)},
        {"elu_half", at::where(neg, 0.5 * (at::exp(x) - 1), x)},
        {"log_", x},
        {"rsqrt_", at::exp(-0.5 * x)},
        {"clamp_", at::minimum(at::maximum(x, at::full_like(x, -0.5)), at::full_like(x, 0.5))},
        {"sum_", x.sum(-1)},
        {"mean_", x.sum(1) / 3},
        {"cat_", at::cat({x, a}, 1)},
        {"stack_", at::stack({x, a}, 0)},
        {"where_", at::where(x != a, x, a)},
        {"einsum_", (x.unsqueeze(-1) * w).sum(-2)},
        {"einsum_one", x.transpose(1, 2)},
    };
    for (const auto& [name, value] : expected) {
        const at::Tensor& got = out.at(name);
        EXPECT_EQ(got.sizes(), value.sizes()) << name;
        EXPECT_TRUE(at::allclose(got, value, 1e-10, 1e-10)) << name;
    }
}

TEST(PrologueRun, ModelCodeFunctionsFollowLibTorchsDtypeRules) {
    const at::Tensor h = randn({2, 4}, at::kHalf, 44);
    const at::Tensor f = randn({2, 4}, at::kFloat, 45);
    const TensorMap out =
        run("cat_ = cat(h, f, 0)\n"
            "where_ = where(f, h, f)\n"
            "einsum_ = einsum(\"ij->j\", h)\n"
            "sum_ = sum(h, 0)",
            {{"h", h}, {"f", f}});
    // cat and where promote to the wider dtype, as torch.cat and torch.where do
    EXPECT_EQ(out.at("cat_").scalar_type(), at::kFloat);
    EXPECT_EQ(out.at("where_").scalar_type(), at::kFloat);
    EXPECT_EQ(out.at("einsum_").scalar_type(), at::kHalf);
    EXPECT_EQ(out.at("sum_").scalar_type(), at::kHalf);
}

TEST(PrologueRun, TransposeIsAViewWithSwappedStrides) {
    const at::Tensor x = randn({2, 3, 4, 5}, at::kHalf, 39);
    const TensorMap out = run("y = transpose(x, 1, 2)\nz = transpose(x, -1, -2)", {{"x", x}});
    const at::Tensor& y = out.at("y");
    EXPECT_EQ(y.sizes(), at::IntArrayRef({2, 4, 3, 5}));
    EXPECT_TRUE(y.is_alias_of(x));
    EXPECT_TRUE(at::equal(y, x.permute({0, 2, 1, 3})));
    EXPECT_EQ(out.at("z").stride(-1), 5);
    const std::vector<std::string> lines =
        split_lines(run_error("y = transpose(x, 1.5, 2)", {{"x", x}}));
    ASSERT_GE(lines.size(), 4u);
    EXPECT_EQ(lines[0], "ops.txt:1:5: error: 'transpose' failed in the assignment to 'y'");
    EXPECT_EQ(lines[3], "note: dims are whole numbers, got dim0 = 1.500000");
}

TEST(PrologueRun, RmsNormDefaultEpsIsTheDtypes) {
    // F.rms_norm with eps=None uses torch.finfo(x.dtype).eps; for tiny x that eps dominates
    const at::Tensor x = at::full({1, 4}, 1e-9, at::kDouble);
    const at::Tensor g = at::ones({4}, at::kDouble);
    const at::Tensor y = run("y = rms_norm(x, g)", {{"x", x}, {"g", g}}).at("y");
    const double eps = std::numeric_limits<double>::epsilon();
    EXPECT_TRUE(at::allclose(y, x / std::sqrt(1e-18 + eps), 1e-12, 0));
}

TEST(PrologueRun, L2normComputesWideAndStoresNarrow) {
    const at::Tensor x = randn({4, 16}, at::kHalf, 39);
    const at::Tensor y = run("y = l2norm(x)", {{"x", x}}).at("y");
    EXPECT_EQ(y.scalar_type(), at::kHalf);
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor expected = (xf / at::sqrt((xf * xf).sum(-1, true) + 1e-6)).to(at::kHalf);
    EXPECT_TRUE(at::equal(y, expected));
}

scenario::PrologueTensor declared(const std::string& name, std::vector<int64_t> shape, DType dtype,
                                  const std::string& dist, double scale) {
    scenario::PrologueTensor t;
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = dtype;
    t.dist = dist;
    t.scale = scale;
    return t;
}

TEST(PrologueTensors, DrawsDeclaredShapesDtypesAndDists) {
    scenario::Prologue prologue;
    prologue.tensors = {declared("a", {2, 3}, DType::fp16, "randn", 1.0),
                        declared("p", {1000}, DType::fp32, "rand", 2.0),
                        declared("z", {3}, DType::bf16, "zeros", 1.0),
                        declared("o", {}, DType::fp64, "ones", 1.5)};
    const TensorMap t = make_prologue_tensors(prologue, 42);
    ASSERT_EQ(t.size(), 4u);
    EXPECT_EQ(t.at("a").sizes(), at::IntArrayRef({2, 3}));
    EXPECT_EQ(t.at("a").scalar_type(), at::kHalf);
    EXPECT_EQ(t.at("p").scalar_type(), at::kFloat);
    EXPECT_GE(t.at("p").min().item<float>(), 0.0f);
    EXPECT_LT(t.at("p").max().item<float>(), 2.0f);
    EXPECT_GT(t.at("p").max().item<float>(), 1.0f);
    EXPECT_EQ(t.at("z").scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(t.at("z"), at::zeros({3}, at::kBFloat16)));
    EXPECT_EQ(t.at("o").dim(), 0);
    EXPECT_EQ(t.at("o").item<double>(), 1.5);
}

TEST(PrologueTensors, SeedsEachTensorByName) {
    scenario::Prologue both;
    both.tensors = {declared("a", {8}, DType::fp32, "randn", 1.0),
                    declared("b", {8}, DType::fp32, "randn", 1.0)};
    scenario::Prologue only_a;
    only_a.tensors = {both.tensors[0]};
    const TensorMap first = make_prologue_tensors(both, 7);
    EXPECT_TRUE(at::equal(first.at("a"), make_prologue_tensors(both, 7).at("a")));
    EXPECT_TRUE(at::equal(first.at("a"), make_prologue_tensors(only_a, 7).at("a")));
    EXPECT_FALSE(at::equal(first.at("a"), first.at("b")));
    EXPECT_FALSE(at::equal(first.at("a"), make_prologue_tensors(both, 8).at("a")));
}

TEST(AutocastGuard, RestoresTheStateItFound) {
    ASSERT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
    const at::ScalarType before = at::autocast::get_autocast_dtype(at::kCPU);
    {
        AutocastGuard outer(at::kCPU, true, at::kHalf);
        EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
        EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kHalf);
        {
            AutocastGuard inner(at::kCPU, false, std::nullopt);
            EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
            EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kHalf);
        }
        EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    }
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), before);
}

}  // namespace
}  // namespace lav::harness
