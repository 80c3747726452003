// tests/reference/delta_rule_ref_test.cpp — the fp64 delta rule reference against its WY form,
// against autograd, and on its dtype and varlen rules. Not a kernel test.
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
#include "reference/delta_rule.h"

namespace lav::ref {
namespace {

using namespace lav::test;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 1.1e-15 on o and ht, the
// gradients by at most 4e-16 from autograd, so both bounds leave two orders of margin or more.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

struct Shape {
    int64_t B, T, H, K, V;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    return test::shape_name({{"B", s.B}, {"T", s.T}, {"H", s.H}, {"K", s.K}, {"V", s.V}},
                            !s.cu_seqlens.empty());
}

// gtest prints the parameters of a failed case with this
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// Inputs as FLA's tests draw them: randn q, k, v, h0 and β ∈ [0, β_max). Without the in-kernel
// norm k is L2-normalised here, which keeps the state bounded (‖I − β k kᵀ‖ ≤ 1 for β ≤ 2);
// with it, the raw randn rows go in and the reference normalises them.
DeltaRuleInputs make_inputs(const Shape& s, bool l2norm, bool with_h0, uint64_t seed,
                            double beta_max = 1.0) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    DeltaRuleInputs in;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    if (!l2norm) in.k = in.k / in.k.norm(2, -1, /*keepdim=*/true);
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);          // [B, T, H, V]
    in.beta = at::rand({s.B, s.T, s.H}, gen, kF64) * beta_max;  // [B, T, H]
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) in.h0 = at::randn({N, s.H, s.K, s.V}, gen, kF64);  // [N, H, K, V]
    in.cu_seqlens = s.cu_seqlens;
    in.use_qk_l2norm_in_kernel = l2norm;
    return in;
}

// ---- recurrence vs WY form ----

using Case = std::tuple<Shape, bool, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, l2norm, with_h0] = info.param;
    return shape_name(shape) + (l2norm ? "_l2norm" : "_normk") + (with_h0 ? "_h0" : "_noh0");
}

class DeltaRuleRefForward : public testing::TestWithParam<Case> {};

TEST_P(DeltaRuleRefForward, RecurrenceMatchesWyForm) {
    const auto& [shape, l2norm, with_h0] = GetParam();
    const DeltaRuleInputs in = make_inputs(shape, l2norm, with_h0, 42);
    const DeltaRuleOutputs rec = delta_rule_fwd(in);
    const DeltaRuleOutputs wy = delta_rule_fwd_wy(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.v.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.H, shape.K, shape.V}));
    expect_rel_err("o", rec.o, wy.o, kFormsRelTol);
    expect_rel_err("ht", rec.ht, wy.ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeltaRuleRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, 16, {}}, Shape{1, 1, 2, 8, 8, {}},
                                     Shape{3, 1, 2, 4, 4, {}}, Shape{2, 50, 2, 32, 48, {}},
                                     Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 4, 64, 64, {}}),
                     testing::Bool(), testing::Bool()),
    case_name);

// β up to 2 makes I − β k kᵀ a reflection-like map with eigenvalue 1 − β ∈ (−1, 1): still
// stable, and the two forms must still agree.
TEST(DeltaRuleRef, BetaUpToTwoMatchesWyForm) {
    const Shape shape{2, 200, 2, 32, 32, {}};
    const DeltaRuleInputs in = make_inputs(shape, true, true, 13, 2.0);
    const DeltaRuleOutputs rec = delta_rule_fwd(in);
    const DeltaRuleOutputs wy = delta_rule_fwd_wy(in);
    EXPECT_LE(rel_err(rec.o, wy.o), kFormsRelTol);
    EXPECT_LE(rel_err(rec.ht, wy.ht), kFormsRelTol);
    EXPECT_TRUE(rec.ht.isfinite().all().item<bool>());
}

// ---- backward vs autograd ----

// The recurrence again, out of place and with its own normalisation, so that autograd can
// differentiate it.
DeltaRuleOutputs autograd_recurrence(const DeltaRuleInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    at::Tensor q = in.q, k = in.k;
    if (in.use_qk_l2norm_in_kernel) {
        q = q / (q * q).sum(-1, true).add(kDeltaRuleL2NormEps).sqrt();
        k = k / (k * k).sum(-1, true).add(kDeltaRuleL2NormEps).sqrt();
    }
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, V]
    std::vector<at::Tensor> finals;                  // per sequence: [H, K, V]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            const at::Tensor k_t = k[seq.batch][t].unsqueeze(2);  // [H, K, 1]
            const at::Tensor p = (S * k_t).sum(1);                // [H, V]
            const at::Tensor u = in.beta[seq.batch][t].unsqueeze(1) * (in.v[seq.batch][t] - p);
            S = S + k_t * u.unsqueeze(1);
            o_rows[seq.batch].push_back((S * q[seq.batch][t].unsqueeze(2)).sum(1) * scale);
        }
        finals.push_back(S);
    }
    return {stack_rows(o_rows), at::stack(finals), {}};
}

using GradCase = std::tuple<Shape, bool, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, l2norm, with_h0, with_dht] = info.param;
    return shape_name(shape) + (l2norm ? "_l2norm" : "_normk") + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class DeltaRuleRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(DeltaRuleRefBackward, MatchesAutograd) {
    const auto& [shape, l2norm, with_h0, with_dht] = GetParam();
    const DeltaRuleInputs in = make_inputs(shape, l2norm, with_h0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);  // [B, T, H, V]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.H, shape.K, shape.V}, gen, kF64) : at::Tensor();

    const DeltaRuleGrads grads = delta_rule_bwd(in, d_o, dht);
    ASSERT_EQ(grads.dh0.defined(), in.h0.defined());

    DeltaRuleInputs leaf = in;
    std::vector<GradCheck> checks = {{"dq", &leaf.q, grads.dq},
                                     {"dk", &leaf.k, grads.dk},
                                     {"dv", &leaf.v, grads.dv},
                                     {"dbeta", &leaf.beta, grads.dbeta}};
    if (in.h0.defined()) checks.push_back({"dh0", &leaf.h0, grads.dh0});
    const auto forward = [&] {
        const DeltaRuleOutputs out = autograd_recurrence(leaf);
        return std::make_pair(out.o, out.ht);
    };
    expect_grads_match_autograd(checks, forward, d_o, dht, kGradRelTol);
}

// The reverse pass recomputes from a checkpoint every c = ⌈√len⌉ steps. Lengths here: 40 (c = 7,
// ragged last segment), 36 (a perfect square), 1 (T = 1), and in the varlen case 0 (empty), 1
// and 2 (one segment), 3 (c = 2, ragged), 24 (c = 5) and 34 (c = 6).
INSTANTIATE_TEST_SUITE_P(
    Shapes, DeltaRuleRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, {}}, Shape{2, 36, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 5, {}},
                                     Shape{1, 64, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::Bool(), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen, scale and dtype rules ----

TEST(DeltaRuleRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const DeltaRuleInputs in = make_inputs(shape, true, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, H, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K, V]
    const DeltaRuleOutputs out = delta_rule_fwd(in);
    const DeltaRuleOutputs wy = delta_rule_fwd_wy(in);
    const DeltaRuleGrads grads = delta_rule_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(wy.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

TEST(DeltaRuleRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}};
    const DeltaRuleInputs in = make_inputs(shape, true, true, 5);
    const DeltaRuleOutputs packed = delta_rule_fwd(in);
    const auto run_alone = [&](const Sequence& seq) {
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        DeltaRuleInputs alone = in;
        alone.cu_seqlens.clear();
        alone.q = cut(in.q);
        alone.k = cut(in.k);
        alone.v = cut(in.v);
        alone.beta = cut(in.beta);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const DeltaRuleOutputs single = delta_rule_fwd(alone);
        return Results{{"o", single.o}, {"ht", single.ht}};
    };
    expect_varlen_matches_alone("packed", shape.cu_seqlens, {{"o", packed.o}, {"ht", packed.ht}},
                                run_alone, {"o"}, {"ht"}, /*skip_empty=*/true);
}

TEST(DeltaRuleRef, ScaleZeroMeansInverseSqrtK) {
    expect_default_scale(make_inputs({2, 12, 2, 16, 8, {}}, true, true, 6), 0.25, delta_rule_fwd,
                         delta_rule_fwd_wy);
}

// The in-kernel norm must equal normalising the inputs beforehand (with the same eps), and
// must change the result when the rows are not unit length.
TEST(DeltaRuleRef, InKernelNormEqualsNormalisedInputs) {
    const DeltaRuleInputs raw = make_inputs({2, 30, 2, 8, 5, {}}, true, true, 14);
    DeltaRuleInputs normalised = raw;
    normalised.use_qk_l2norm_in_kernel = false;
    normalised.q = raw.q / (raw.q.square().sum(-1, true) + kDeltaRuleL2NormEps).sqrt();
    normalised.k = raw.k / (raw.k.square().sum(-1, true) + kDeltaRuleL2NormEps).sqrt();
    const DeltaRuleOutputs a = delta_rule_fwd(raw);
    const DeltaRuleOutputs b = delta_rule_fwd(normalised);
    EXPECT_LE(rel_err(a.o, b.o), 1e-14);
    EXPECT_LE(rel_err(a.ht, b.ht), 1e-14);
    DeltaRuleInputs unnormalised = raw;
    unnormalised.use_qk_l2norm_in_kernel = false;
    unnormalised.k = raw.k / 8.0;
    EXPECT_GT(rel_err(delta_rule_fwd(unnormalised).o, a.o), 1e-3);
}

TEST(DeltaRuleRef, EveryOutputIsFloat64) {
    const DeltaRuleInputs in = make_inputs({2, 10, 2, 4, 3, {}}, true, true, 9);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    const DeltaRuleOutputs rec = delta_rule_fwd(in);
    const DeltaRuleOutputs wy = delta_rule_fwd_wy(in);
    const DeltaRuleGrads grads = delta_rule_bwd(in, d_o, dht);
    for (const at::Tensor& t :
         {rec.o, rec.ht, wy.o, wy.ht, grads.dq, grads.dk, grads.dv, grads.dbeta, grads.dh0}) {
        ASSERT_TRUE(t.defined());
        EXPECT_EQ(t.scalar_type(), at::kDouble);
    }
}

TEST(DeltaRuleRef, EveryOpStaysFloat64) {
    const DeltaRuleInputs in = make_inputs({1, 20, 2, 4, 3, {0, 0, 7, 20}}, true, true, 12);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    expect_only_fp64_ops(
        [&] {
            delta_rule_fwd(in);
            delta_rule_fwd_wy(in);
            delta_rule_bwd(in, d_o, dht);
        },
        in.q);
}

TEST(DeltaRuleRef, Float32InputIsInternalError) {
    const DeltaRuleInputs in = make_inputs({1, 6, 2, 4, 3, {}}, true, true, 10);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    using I = DeltaRuleInputs;
    expect_narrowed_field_throws<InternalError>(
        in, {&I::q, &I::k, &I::v, &I::beta, &I::h0},
        {[](const I& x) { delta_rule_fwd(x); }, [](const I& x) { delta_rule_fwd_wy(x); },
         [&](const I& x) { delta_rule_bwd(x, d_o, dht); }});
    EXPECT_THROW(delta_rule_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(delta_rule_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(DeltaRuleRef, MismatchedShapeIsShapeError) {
    DeltaRuleInputs in = make_inputs({1, 6, 2, 4, 3, {}}, true, true, 11);
    in.k = in.k.narrow(3, 0, 3);
    EXPECT_THROW(delta_rule_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, true, true, 11);
    in.beta = in.beta.unsqueeze(3);
    EXPECT_THROW(delta_rule_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, true, true, 11);
    in.h0 = at::zeros({2, 2, 4, 3}, kF64);
    EXPECT_THROW(delta_rule_fwd_wy(in), ShapeError);
}

}  // namespace
}  // namespace lav::ref
