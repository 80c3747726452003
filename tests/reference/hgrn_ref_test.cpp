// tests/reference/hgrn_ref_test.cpp — the fp64 hgrn reference against its closed form, against
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
#include "reference/hgrn.h"

namespace lav::ref {
namespace {

using namespace lav::test;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 6.1e-15 on o and ht, the
// gradients by 0 from autograd (both run the same elementwise operations in the same order),
// so both bounds leave orders of margin above fp64 rounding.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

// The gates: FLA's test draws g = logsigmoid(r) and x = (1 − sigmoid(r)) · x for one randn r
// (HGRN's coupled input and forget gates); the others draw x and g independently, with
// g = logsigmoid(randn) / n for strong (n = 0.1) and weak (n = 10) decay, or g = 0 (a plain
// running sum).
enum class Gate { kCoupled, kStrong, kWeak, kZero };

std::string gate_name(Gate gate) {
    switch (gate) {
        case Gate::kCoupled:
            return "coupled";
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
    int64_t B, T, H, K;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    return test::shape_name({{"B", s.B}, {"T", s.T}, {"H", s.H}, {"K", s.K}},
                            !s.cu_seqlens.empty());
}

// gtest prints the parameters of a failed case with these
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }
void PrintTo(Gate gate, std::ostream* os) { *os << gate_name(gate); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

HgrnInputs make_inputs(const Shape& s, Gate gate, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    HgrnInputs in;
    in.x = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);                     // [B, T, H, K]
    const at::Tensor logits = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    switch (gate) {
        case Gate::kCoupled:
            in.g = at::log_sigmoid(logits);
            in.x = in.x * (1.0 - at::sigmoid(logits));
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
    if (with_h0) in.h0 = at::randn({N, s.H, s.K}, gen, kF64);  // [N, H, K]
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

using Case = std::tuple<Shape, Gate, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, gate, with_h0] = info.param;
    return shape_name(shape) + "_" + gate_name(gate) + (with_h0 ? "_h0" : "_noh0");
}

constexpr Gate kGates[] = {Gate::kCoupled, Gate::kStrong, Gate::kWeak, Gate::kZero};

// ---- recurrence vs closed form ----

class HgrnRefForward : public testing::TestWithParam<Case> {};

TEST_P(HgrnRefForward, RecurrenceMatchesClosedForm) {
    const auto& [shape, gate, with_h0] = GetParam();
    const HgrnInputs in = make_inputs(shape, gate, with_h0, 42);
    const HgrnOutputs rec = hgrn_fwd(in);
    const HgrnOutputs par = hgrn_fwd_parallel(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.x.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.H, shape.K}));
    expect_rel_err("o", rec.o, par.o, kFormsRelTol);
    expect_rel_err("ht", rec.ht, par.ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HgrnRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, {}}, Shape{1, 1, 2, 8, {}},
                                     Shape{3, 1, 1, 5, {}}, Shape{2, 63, 4, 125, {}},
                                     Shape{1, 164, 2, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 2, 64, {}}),
                     testing::ValuesIn(kGates), testing::Bool()),
    case_name);

// Splitting D into H heads of K channels changes nothing: the recurrence is elementwise.
TEST(HgrnRef, HeadSplitChangesNothing) {
    const HgrnInputs in = make_inputs({2, 30, 4, 6, {}}, Gate::kCoupled, true, 13);
    HgrnInputs flat = in;
    flat.x = in.x.reshape({2, 30, 1, 24});
    flat.g = in.g.reshape({2, 30, 1, 24});
    flat.h0 = in.h0.reshape({2, 1, 24});
    const HgrnOutputs split = hgrn_fwd(in);
    const HgrnOutputs whole = hgrn_fwd(flat);
    EXPECT_TRUE(at::equal(split.o.reshape({2, 30, 1, 24}), whole.o));
    EXPECT_TRUE(at::equal(split.ht.reshape({2, 1, 24}), whole.ht));
}

// ---- backward vs autograd ----

// The recurrence again, out of place, so that autograd can differentiate it.
HgrnOutputs autograd_recurrence(const HgrnInputs& in) {
    const int64_t B = in.x.size(0), T = in.x.size(1), H = in.x.size(2), K = in.x.size(3);
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, K]
    std::vector<at::Tensor> finals;                  // per sequence: [H, K]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor h = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            h = in.g[seq.batch][t].exp() * h + in.x[seq.batch][t];
            o_rows[seq.batch].push_back(h);
        }
        finals.push_back(h);
    }
    return {stack_rows(o_rows), at::stack(finals)};
}

using GradCase = std::tuple<Shape, Gate, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, gate, with_h0, with_dht] = info.param;
    return shape_name(shape) + "_" + gate_name(gate) + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class HgrnRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(HgrnRefBackward, MatchesAutograd) {
    const auto& [shape, gate, with_h0, with_dht] = GetParam();
    const HgrnInputs in = make_inputs(shape, gate, with_h0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.x.sizes(), gen, kF64);  // [B, T, H, K]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.H, shape.K}, gen, kF64) : at::Tensor();  // [N, H, K]

    const HgrnGrads grads = hgrn_bwd(in, d_o, dht);
    ASSERT_EQ(grads.dh0.defined(), in.h0.defined());

    HgrnInputs leaf = in;
    std::vector<GradCheck> checks = {{"dx", &leaf.x, grads.dx}, {"dg", &leaf.g, grads.dg}};
    if (in.h0.defined()) checks.push_back({"dh0", &leaf.h0, grads.dh0});
    const auto forward = [&] {
        const HgrnOutputs out = autograd_recurrence(leaf);
        return std::make_pair(out.o, out.ht);
    };
    expect_grads_match_autograd(checks, forward, d_o, dht, kGradRelTol);
}

// The reverse pass recomputes from a checkpoint every c = ⌈√len⌉ steps. Lengths here: 40 (c = 7,
// ragged last segment), 36 (a perfect square), 1 (T = 1), and in the varlen case 0 (empty), 1
// and 2 (one segment), 3 (c = 2, ragged), 24 (c = 5) and 34 (c = 6).
INSTANTIATE_TEST_SUITE_P(
    Shapes, HgrnRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, {}}, Shape{2, 36, 2, 8, {}},
                                     Shape{3, 1, 2, 5, {}},
                                     Shape{1, 64, 2, 8, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kGates), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen and dtype rules ----

TEST(HgrnRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, {0, 0, 5, 5, 9}};
    const HgrnInputs in = make_inputs(shape, Gate::kCoupled, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.x.sizes(), gen, kF64);   // [B, T, H, K]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K]
    const HgrnOutputs out = hgrn_fwd(in);
    const HgrnOutputs par = hgrn_fwd_parallel(in);
    const HgrnGrads grads = hgrn_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(par.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

TEST(HgrnRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 24, {0, 0, 37, 100, 164}};
    const HgrnInputs in = make_inputs(shape, Gate::kCoupled, true, 5);
    at::Generator gen = at::detail::createCPUGenerator(6);
    const at::Tensor d_o = at::randn(in.x.sizes(), gen, kF64);   // [B, T, H, K]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K]
    const HgrnOutputs packed = hgrn_fwd(in);
    const HgrnGrads packed_grads = hgrn_bwd(in, d_o, dht);
    const auto run_alone = [&](const Sequence& seq) {
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        HgrnInputs alone;
        alone.x = cut(in.x);
        alone.g = cut(in.g);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const HgrnOutputs single = hgrn_fwd(alone);
        const HgrnGrads single_grads = hgrn_bwd(alone, cut(d_o), dht.narrow(0, seq.index, 1));
        return Results{
            {"o", single.o}, {"ht", single.ht}, {"dg", single_grads.dg}, {"dh0", single_grads.dh0}};
    };
    const Results all = {
        {"o", packed.o}, {"ht", packed.ht}, {"dg", packed_grads.dg}, {"dh0", packed_grads.dh0}};
    expect_varlen_matches_alone("packed", shape.cu_seqlens, all, run_alone, {"o", "dg"},
                                {"ht", "dh0"}, /*skip_empty=*/true);
}

TEST(HgrnRef, EveryOutputIsFloat64) {
    const HgrnInputs in = make_inputs({2, 10, 2, 4, {}}, Gate::kCoupled, true, 9);
    const at::Tensor d_o = at::ones_like(in.x);   // [B, T, H, K]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K]
    const HgrnOutputs rec = hgrn_fwd(in);
    const HgrnOutputs par = hgrn_fwd_parallel(in);
    const HgrnGrads grads = hgrn_bwd(in, d_o, dht);
    for (const at::Tensor& t : {rec.o, rec.ht, par.o, par.ht, grads.dx, grads.dg, grads.dh0}) {
        ASSERT_TRUE(t.defined());
        EXPECT_EQ(t.scalar_type(), at::kDouble);
    }
}

TEST(HgrnRef, EveryOpStaysFloat64) {
    const HgrnInputs in = make_inputs({1, 20, 2, 4, {0, 0, 7, 20}}, Gate::kCoupled, true, 12);
    const at::Tensor d_o = at::ones_like(in.x);   // [B, T, H, K]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K]
    expect_only_fp64_ops(
        [&] {
            hgrn_fwd(in);
            hgrn_fwd_parallel(in);
            hgrn_bwd(in, d_o, dht);
        },
        in.x);
}

TEST(HgrnRef, Float32InputIsInternalError) {
    const HgrnInputs in = make_inputs({1, 6, 2, 4, {}}, Gate::kCoupled, true, 10);
    const at::Tensor d_o = at::ones_like(in.x);   // [B, T, H, K]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K]
    using I = HgrnInputs;
    expect_narrowed_field_throws<InternalError>(
        in, {&I::x, &I::g, &I::h0},
        {[](const I& x) { hgrn_fwd(x); }, [](const I& x) { hgrn_fwd_parallel(x); },
         [&](const I& x) { hgrn_bwd(x, d_o, dht); }});
    EXPECT_THROW(hgrn_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(hgrn_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(HgrnRef, MismatchedShapeIsShapeError) {
    HgrnInputs in = make_inputs({1, 6, 2, 4, {}}, Gate::kCoupled, true, 11);
    in.g = in.g.narrow(3, 0, 3);
    EXPECT_THROW(hgrn_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, {}}, Gate::kCoupled, true, 11);
    in.h0 = at::zeros({1, 2, 4, 4}, kF64);
    EXPECT_THROW(hgrn_fwd_parallel(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, {}}, Gate::kCoupled, true, 11);
    EXPECT_THROW(hgrn_bwd(in, at::ones({1, 6, 2, 3}, kF64), at::Tensor()), ShapeError);
}

}  // namespace
}  // namespace lav::ref
