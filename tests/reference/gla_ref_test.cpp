// tests/reference/gla_ref_test.cpp — the fp64 gla reference against its parallel form, against
// autograd, and on its dtype and varlen rules. Not a kernel test.
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
#include "reference/gla.h"

namespace lav::ref {
namespace {

using namespace lav::test;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 6.5e-15 on o and ht (worst
// at B2 T256 H4 K64 V64), the gradients by at most 3.4e-16 from autograd, so both bounds leave over
// two orders of margin above fp64 rounding.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

// g = logsigmoid(randn) / normalizer, as FLA's tests draw it: 1, strong decay (0.1), weak
// decay (10), and an all-zero gate (FLA's mask_p = 1: plain linear attention).
enum class Gate { kNorm1, kStrong, kWeak, kZero };

std::string gate_name(Gate gate) {
    switch (gate) {
        case Gate::kNorm1:
            return "g1";
        case Gate::kStrong:
            return "g01";
        case Gate::kWeak:
            return "g10";
        case Gate::kZero:
            return "gzero";
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

// randn q, k, v, h0 and the gate of `gate`.
GlaInputs make_inputs(const Shape& s, Gate gate, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    GlaInputs in;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);                     // [B, T, H, K]
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);                     // [B, T, H, K]
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);                     // [B, T, H, V]
    const at::Tensor logits = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    switch (gate) {
        case Gate::kNorm1:
            in.g = at::log_sigmoid(logits);
            break;
        case Gate::kStrong:
            in.g = at::log_sigmoid(logits) / 0.1;
            break;
        case Gate::kWeak:
            in.g = at::log_sigmoid(logits) / 10.0;
            break;
        case Gate::kZero:
            in.g = at::zeros_like(logits);
            break;
    }
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

constexpr Gate kGates[] = {Gate::kNorm1, Gate::kStrong, Gate::kWeak, Gate::kZero};

// ---- recurrence vs parallel form ----

class GlaRefForward : public testing::TestWithParam<Case> {};

TEST_P(GlaRefForward, RecurrenceMatchesParallelForm) {
    const auto& [shape, gate, with_h0] = GetParam();
    const GlaInputs in = make_inputs(shape, gate, with_h0, 42);
    const GlaOutputs rec = gla_fwd(in);
    const GlaOutputs par = gla_fwd_parallel(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.v.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.H, shape.K, shape.V}));
    expect_rel_err("o", rec.o, par.o, kFormsRelTol);
    expect_rel_err("ht", rec.ht, par.ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GlaRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, 16, {}}, Shape{1, 1, 2, 8, 8, {}},
                                     Shape{3, 1, 2, 4, 4, {}}, Shape{2, 50, 2, 32, 48, {}},
                                     Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 4, 64, 64, {}}),
                     testing::ValuesIn(kGates), testing::Bool()),
    case_name);

// The per-dimension decay must act on the key rows only: with the gate zero in every key
// dimension but one, the other rows of the state never decay.
TEST(GlaRef, DecayActsPerKeyDimension) {
    GlaInputs in = make_inputs({1, 30, 2, 4, 3, {}}, Gate::kZero, true, 13);
    in.g.select(3, 1).fill_(-0.5);
    const GlaOutputs out = gla_fwd(in);
    // row d of ht is exp(Σ_t g_td)·h0[d] + Σ_t exp(Σ_{r>t} g_rd) k_td v_tᵀ
    const at::Tensor k = in.k[0].permute({1, 0, 2});         // [H, T, K]
    const at::Tensor v = in.v[0].permute({1, 0, 2});         // [H, T, V]
    const at::Tensor G = in.g[0].permute({1, 0, 2});         // [H, T, K]
    const at::Tensor suffix = G.sum(1, true) - G.cumsum(1);  // [H, T, K] Σ_{r>t} g_r
    const at::Tensor expected = in.h0[0] * G.sum(1).exp().unsqueeze(2) +
                                at::bmm((k * suffix.exp()).transpose(1, 2), v);  // [H, K, V]
    EXPECT_LE(rel_err(out.ht[0], expected), 1e-13);
    // the undecayed rows are plain sums
    const at::Tensor plain =
        in.h0[0].select(1, 0) + at::bmm(k.select(2, 0).unsqueeze(1), v).squeeze(1);  // [H, V]
    EXPECT_LE(rel_err(out.ht[0].select(1, 0), plain), 1e-13);
}

// ---- backward vs autograd ----

// The recurrence again, out of place, so that autograd can differentiate it.
GlaOutputs autograd_recurrence(const GlaInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, V]
    std::vector<at::Tensor> finals;                  // per sequence: [H, K, V]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            S = S * in.g[seq.batch][t].exp().unsqueeze(2) +
                in.k[seq.batch][t].unsqueeze(2) * in.v[seq.batch][t].unsqueeze(1);
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

class GlaRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(GlaRefBackward, MatchesAutograd) {
    const auto& [shape, gate, with_h0, with_dht] = GetParam();
    GlaInputs in = make_inputs(shape, gate, with_h0, 7);
    in.scale = 0.3;
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);  // [B, T, H, V]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.H, shape.K, shape.V}, gen, kF64) : at::Tensor();

    const GlaGrads grads = gla_bwd(in, d_o, dht);
    ASSERT_EQ(grads.dh0.defined(), in.h0.defined());

    GlaInputs leaf = in;
    std::vector<GradCheck> checks = {{"dq", &leaf.q, grads.dq},
                                     {"dk", &leaf.k, grads.dk},
                                     {"dv", &leaf.v, grads.dv},
                                     {"dg", &leaf.g, grads.dg}};
    if (in.h0.defined()) checks.push_back({"dh0", &leaf.h0, grads.dh0});
    const auto forward = [&] {
        const GlaOutputs out = autograd_recurrence(leaf);
        return std::make_pair(out.o, out.ht);
    };
    expect_grads_match_autograd(checks, forward, d_o, dht, kGradRelTol);
}

// The reverse pass recomputes from a checkpoint every c = ⌈√len⌉ steps. Lengths here: 40 (c = 7,
// ragged last segment), 36 (a perfect square), 1 (T = 1), and in the varlen case 0 (empty), 1
// and 2 (one segment), 3 (c = 2, ragged), 24 (c = 5) and 34 (c = 6).
INSTANTIATE_TEST_SUITE_P(
    Shapes, GlaRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, {}}, Shape{2, 36, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 5, {}},
                                     Shape{1, 64, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kGates), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen, scale and dtype rules ----

TEST(GlaRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const GlaInputs in = make_inputs(shape, Gate::kNorm1, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, H, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K, V]
    const GlaOutputs out = gla_fwd(in);
    const GlaOutputs par = gla_fwd_parallel(in);
    const GlaGrads grads = gla_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(par.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

TEST(GlaRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}};
    const GlaInputs in = make_inputs(shape, Gate::kNorm1, true, 5);
    at::Generator gen = at::detail::createCPUGenerator(6);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, H, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K, V]
    const GlaOutputs packed = gla_fwd(in);
    const GlaGrads packed_grads = gla_bwd(in, d_o, dht);
    const auto run_alone = [&](const Sequence& seq) {
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        GlaInputs alone;
        alone.q = cut(in.q);
        alone.k = cut(in.k);
        alone.v = cut(in.v);
        alone.g = cut(in.g);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const GlaOutputs single = gla_fwd(alone);
        const GlaGrads single_grads = gla_bwd(alone, cut(d_o), dht.narrow(0, seq.index, 1));
        return Results{
            {"o", single.o}, {"ht", single.ht}, {"dg", single_grads.dg}, {"dh0", single_grads.dh0}};
    };
    const Results all = {
        {"o", packed.o}, {"ht", packed.ht}, {"dg", packed_grads.dg}, {"dh0", packed_grads.dh0}};
    expect_varlen_matches_alone("packed", shape.cu_seqlens, all, run_alone, {"o", "dg"},
                                {"ht", "dh0"}, /*skip_empty=*/true);
}

TEST(GlaRef, ScaleZeroMeansInverseSqrtK) {
    expect_default_scale(make_inputs({2, 12, 2, 16, 8, {}}, Gate::kNorm1, true, 6), 0.25, gla_fwd,
                         gla_fwd_parallel);
}

TEST(GlaRef, EveryOutputIsFloat64) {
    const GlaInputs in = make_inputs({2, 10, 2, 4, 3, {}}, Gate::kNorm1, true, 9);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    const GlaOutputs rec = gla_fwd(in);
    const GlaOutputs par = gla_fwd_parallel(in);
    const GlaGrads grads = gla_bwd(in, d_o, dht);
    for (const at::Tensor& t :
         {rec.o, rec.ht, par.o, par.ht, grads.dq, grads.dk, grads.dv, grads.dg, grads.dh0}) {
        ASSERT_TRUE(t.defined());
        EXPECT_EQ(t.scalar_type(), at::kDouble);
    }
}

TEST(GlaRef, EveryOpStaysFloat64) {
    const GlaInputs in = make_inputs({1, 20, 2, 4, 3, {0, 0, 7, 20}}, Gate::kNorm1, true, 12);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    expect_only_fp64_ops(
        [&] {
            gla_fwd(in);
            gla_fwd_parallel(in);
            gla_bwd(in, d_o, dht);
        },
        in.q);
}

TEST(GlaRef, Float32InputIsInternalError) {
    const GlaInputs in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kNorm1, true, 10);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    using I = GlaInputs;
    expect_narrowed_field_throws<InternalError>(
        in, {&I::q, &I::k, &I::v, &I::g, &I::h0},
        {[](const I& x) { gla_fwd(x); }, [](const I& x) { gla_fwd_parallel(x); },
         [&](const I& x) { gla_bwd(x, d_o, dht); }});
    EXPECT_THROW(gla_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(gla_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(GlaRef, MismatchedShapeIsShapeError) {
    GlaInputs in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kNorm1, true, 11);
    in.g = in.g.narrow(3, 0, 3);
    EXPECT_THROW(gla_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kNorm1, true, 11);
    in.g = in.g.select(3, 0);
    EXPECT_THROW(gla_bwd(in, at::ones_like(in.v), at::Tensor()), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kNorm1, true, 11);
    in.h0 = at::zeros({2, 2, 4, 3}, kF64);
    EXPECT_THROW(gla_fwd_parallel(in), ShapeError);
}

}  // namespace
}  // namespace lav::ref
