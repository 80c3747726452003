// tests/reference/simple_gla_ref_test.cpp — the fp64 simple_gla reference against its parallel
// form, against autograd, and on its dtype and varlen rules. Not a kernel test.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/error.h"
#include "core/varlen.h"
#include "reference/simple_gla.h"

namespace lav::ref {
namespace {

using namespace lav::test;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 7e-15 on o and ht (at
// B2 T256 H4 K64 V64, g and g_gamma, h0), the gradients by at most 4e-16 from autograd, so both
// bounds leave over two orders of margin above fp64 rounding.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

enum class Gate { kLogsigmoid, kStrongLogsigmoid, kGamma, kNone, kLogsigmoidAndGamma };

std::string gate_name(Gate gate) {
    switch (gate) {
        case Gate::kLogsigmoid:
            return "g1";
        case Gate::kStrongLogsigmoid:
            return "g01";
        case Gate::kGamma:
            return "gamma";
        case Gate::kNone:
            return "nogate";
        case Gate::kLogsigmoidAndGamma:
            return "g1gamma";
    }
    return "";
}

struct Shape {
    int64_t B, T, H, K, V;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    return test::shape_name({{"B", s.B}, {"T", s.T}, {"H", s.H}, {"K", s.K}, {"V", s.V}},
                            !s.cu_seqlens.empty());
}

// gtest prints the parameters of a failed case with these
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }
void PrintTo(Gate gate, std::ostream* os) { *os << gate_name(gate); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// Retention's per-head decay, ln(1 − 2^(−5−h)).
at::Tensor retention_gamma(int64_t H) {
    const at::Tensor h = at::arange(H, kF64);  // [H]
    return at::log1p(-at::pow(2.0, -5.0 - h));
}

// Inputs as FLA's tests draw them: randn q, k, v, h0 and g = logsigmoid(randn) / normalizer.
SimpleGlaInputs make_inputs(const Shape& s, Gate gate, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    SimpleGlaInputs in;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);                // [B, T, H, K]
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);                // [B, T, H, K]
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);                // [B, T, H, V]
    const at::Tensor logits = at::randn({s.B, s.T, s.H}, gen, kF64);  // [B, T, H]
    if (gate == Gate::kLogsigmoid || gate == Gate::kLogsigmoidAndGamma)
        in.g = at::log_sigmoid(logits);
    if (gate == Gate::kStrongLogsigmoid) in.g = at::log_sigmoid(logits) / 0.1;
    if (gate == Gate::kGamma || gate == Gate::kLogsigmoidAndGamma)
        in.g_gamma = retention_gamma(s.H);
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) in.h0 = at::randn({N, s.H, s.K, s.V}, gen, kF64);  // [N, H, K, V]
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

using Case = std::tuple<Shape, Gate, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, gate, with_h0] = info.param;
    return shape_name(shape) + "_" + gate_name(gate) + (with_h0 ? "_h0" : "_noh0");
}

constexpr Gate kGates[] = {Gate::kLogsigmoid, Gate::kStrongLogsigmoid, Gate::kGamma, Gate::kNone,
                           Gate::kLogsigmoidAndGamma};

// ---- recurrence vs parallel form ----

class SimpleGlaRefForward : public testing::TestWithParam<Case> {};

TEST_P(SimpleGlaRefForward, RecurrenceMatchesParallelForm) {
    const auto& [shape, gate, with_h0] = GetParam();
    const SimpleGlaInputs in = make_inputs(shape, gate, with_h0, 42);
    const SimpleGlaOutputs rec = simple_gla_fwd(in);
    const SimpleGlaOutputs par = simple_gla_fwd_parallel(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.v.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.H, shape.K, shape.V}));
    expect_rel_err("o", rec.o, par.o, kFormsRelTol);
    expect_rel_err("ht", rec.ht, par.ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SimpleGlaRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, 16, {}}, Shape{1, 1, 2, 8, 8, {}},
                                     Shape{3, 1, 2, 4, 4, {}}, Shape{2, 50, 2, 32, 48, {}},
                                     Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 4, 64, 64, {}}),
                     testing::ValuesIn(kGates), testing::Bool()),
    case_name);

// ---- backward vs autograd ----

// The recurrence again, out of place, so that autograd can differentiate it.
SimpleGlaOutputs autograd_recurrence(const SimpleGlaInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, V]
    std::vector<at::Tensor> finals;                  // per sequence: [H, K, V]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            at::Tensor a;  // [H]
            if (in.g.defined()) a = in.g[seq.batch][t];
            if (in.g_gamma.defined()) a = a.defined() ? a + in.g_gamma : in.g_gamma;
            if (a.defined()) S = S * a.exp().view({H, 1, 1});
            S = S + in.k[seq.batch][t].unsqueeze(2) * in.v[seq.batch][t].unsqueeze(1);
            o_rows[seq.batch].push_back((S * in.q[seq.batch][t].unsqueeze(2)).sum(1) * scale);
        }
        finals.push_back(S);
    }
    return {stack_rows(o_rows), at::stack(finals), {}};
}

using GradCase = std::tuple<Shape, Gate, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, gate, with_h0, with_dht] = info.param;
    return shape_name(shape) + "_" + gate_name(gate) + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class SimpleGlaRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(SimpleGlaRefBackward, MatchesAutograd) {
    const auto& [shape, gate, with_h0, with_dht] = GetParam();
    const SimpleGlaInputs in = make_inputs(shape, gate, with_h0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);  // [B, T, H, V]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.H, shape.K, shape.V}, gen, kF64) : at::Tensor();

    const SimpleGlaGrads grads = simple_gla_bwd(in, d_o, dht);
    ASSERT_EQ(grads.dg.defined(), in.g.defined());
    ASSERT_EQ(grads.dh0.defined(), in.h0.defined());

    SimpleGlaInputs leaf = in;
    std::vector<GradCheck> checks = {
        {"dq", &leaf.q, grads.dq}, {"dk", &leaf.k, grads.dk}, {"dv", &leaf.v, grads.dv}};
    if (in.g.defined()) checks.push_back({"dg", &leaf.g, grads.dg});
    if (in.h0.defined()) checks.push_back({"dh0", &leaf.h0, grads.dh0});
    const auto forward = [&] {
        const SimpleGlaOutputs out = autograd_recurrence(leaf);
        return std::make_pair(out.o, out.ht);
    };
    expect_grads_match_autograd(checks, forward, d_o, dht, kGradRelTol);
}

// The reverse pass recomputes from a checkpoint every c = ⌈√len⌉ steps. Lengths here: 40 (c = 7,
// ragged last segment), 36 (a perfect square), 1 (T = 1), and in the varlen case 0 (empty), 1
// and 2 (one segment), 3 (c = 2, ragged), 24 (c = 5) and 34 (c = 6).
INSTANTIATE_TEST_SUITE_P(
    Shapes, SimpleGlaRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, {}}, Shape{2, 36, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 5, {}},
                                     Shape{1, 64, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kGates), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen, scale and dtype rules ----

TEST(SimpleGlaRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const SimpleGlaInputs in = make_inputs(shape, Gate::kLogsigmoid, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, H, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K, V]
    const SimpleGlaOutputs out = simple_gla_fwd(in);
    const SimpleGlaGrads grads = simple_gla_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

TEST(SimpleGlaRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}};
    const SimpleGlaInputs in = make_inputs(shape, Gate::kLogsigmoid, true, 5);
    const SimpleGlaOutputs packed = simple_gla_fwd(in);
    const auto run_alone = [&](const Sequence& seq) {
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        SimpleGlaInputs alone;
        alone.q = cut(in.q);
        alone.k = cut(in.k);
        alone.v = cut(in.v);
        alone.g = cut(in.g);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const SimpleGlaOutputs single = simple_gla_fwd(alone);
        return Results{{"o", single.o}, {"ht", single.ht}};
    };
    expect_varlen_matches_alone("packed", shape.cu_seqlens, {{"o", packed.o}, {"ht", packed.ht}},
                                run_alone, {"o"}, {"ht"}, /*skip_empty=*/true);
}

TEST(SimpleGlaRef, ScaleZeroMeansInverseSqrtK) {
    expect_default_scale(make_inputs({2, 12, 2, 16, 8, {}}, Gate::kLogsigmoid, true, 6), 0.25,
                         simple_gla_fwd, simple_gla_fwd_parallel);
}

TEST(SimpleGlaRef, EveryOutputIsFloat64) {
    const SimpleGlaInputs in =
        make_inputs({2, 10, 2, 4, 3, {}}, Gate::kLogsigmoidAndGamma, true, 9);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    const SimpleGlaOutputs rec = simple_gla_fwd(in);
    const SimpleGlaOutputs par = simple_gla_fwd_parallel(in);
    const SimpleGlaGrads grads = simple_gla_bwd(in, d_o, dht);
    for (const at::Tensor& t :
         {rec.o, rec.ht, par.o, par.ht, grads.dq, grads.dk, grads.dv, grads.dg, grads.dh0}) {
        ASSERT_TRUE(t.defined());
        EXPECT_EQ(t.scalar_type(), at::kDouble);
    }
}

TEST(SimpleGlaRef, EveryOpStaysFloat64) {
    const SimpleGlaInputs in =
        make_inputs({1, 20, 2, 4, 3, {0, 0, 7, 20}}, Gate::kLogsigmoidAndGamma, true, 12);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    expect_only_fp64_ops(
        [&] {
            simple_gla_fwd(in);
            simple_gla_fwd_parallel(in);
            simple_gla_bwd(in, d_o, dht);
        },
        in.q);
}

TEST(SimpleGlaRef, Float32InputIsInternalError) {
    const SimpleGlaInputs in =
        make_inputs({1, 6, 2, 4, 3, {}}, Gate::kLogsigmoidAndGamma, true, 10);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    using I = SimpleGlaInputs;
    expect_narrowed_field_throws<InternalError>(
        in, {&I::q, &I::k, &I::v, &I::g, &I::g_gamma, &I::h0},
        {[](const I& x) { simple_gla_fwd(x); }, [](const I& x) { simple_gla_fwd_parallel(x); },
         [&](const I& x) { simple_gla_bwd(x, d_o, dht); }});
    EXPECT_THROW(simple_gla_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(simple_gla_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(SimpleGlaRef, MismatchedShapeIsShapeError) {
    SimpleGlaInputs in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kLogsigmoid, true, 11);
    in.k = in.k.narrow(3, 0, 3);
    EXPECT_THROW(simple_gla_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kLogsigmoid, true, 11);
    in.h0 = at::zeros({2, 2, 4, 3}, kF64);
    EXPECT_THROW(simple_gla_fwd_parallel(in), ShapeError);
}

}  // namespace
}  // namespace lav::ref
