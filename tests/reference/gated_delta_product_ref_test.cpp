// tests/reference/gated_delta_product_ref_test.cpp — the fp64 gated DeltaProduct reference
// against its WY form, against autograd, and on its sub-step, varlen and dtype rules. Not a
// kernel test.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/error.h"
#include "core/varlen.h"
#include "reference/gated_delta_product.h"

namespace lav::ref {
namespace {

using test::rel_err;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch CPU): the forms differ by at most 1.1e-14 on o and ht, the
// gradients by at most 2e-15 from autograd.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

struct Shape {
    int64_t B, T, H, K, V, n;         // n: sub-steps per token
    std::vector<int64_t> cu_seqlens;  // token offsets; empty: dense
};

std::string shape_name(const Shape& s) {
    std::string name = "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" +
                       std::to_string(s.H) + "_K" + std::to_string(s.K) + "_V" +
                       std::to_string(s.V) + "_n" + std::to_string(s.n);
    return s.cu_seqlens.empty() ? name : name + "_varlen";
}

/// The gate and norm a case runs with.
enum class Opts { kPlain, kNoGate, kStrongDecay, kL2Norm };

std::string opts_name(Opts o) {
    switch (o) {
        case Opts::kPlain:
            return "plain";
        case Opts::kNoGate:
            return "nogate";
        case Opts::kStrongDecay:
            return "strongdecay";
        case Opts::kL2Norm:
            return "l2norm";
    }
    return "";
}

constexpr Opts kOpts[] = {Opts::kPlain, Opts::kNoGate, Opts::kStrongDecay, Opts::kL2Norm};

void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }
void PrintTo(Opts o, std::ostream* os) { *os << opts_name(o); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// Inputs as FLA's DeltaProduct tests draw them: randn q, k, v, h0, with k L2-normalised here
// unless the kernel norms it; g = logsigmoid(randn) / n per token; β ~ U[0, 1) per sub-step.
GatedDeltaProductInputs make_inputs(const Shape& s, Opts opts, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    GatedDeltaProductInputs in;
    in.num_householder = s.n;
    in.use_qk_l2norm_in_kernel = opts == Opts::kL2Norm;
    const int64_t Tn = s.T * s.n;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    in.k = at::randn({s.B, Tn, s.H, s.K}, gen, kF64);   // [B, T·n, H, K]
    if (!in.use_qk_l2norm_in_kernel) in.k = in.k / in.k.norm(2, -1, /*keepdim=*/true);
    in.v = at::randn({s.B, Tn, s.H, s.V}, gen, kF64);  // [B, T·n, H, V]
    if (opts != Opts::kNoGate)
        in.g = at::log_sigmoid(at::randn({s.B, s.T, s.H}, gen, kF64)) /
               (opts == Opts::kStrongDecay ? 0.1 : 1.0);
    in.beta = at::rand({s.B, Tn, s.H}, gen, kF64);  // [B, T·n, H]
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) in.h0 = at::randn({N, s.H, s.K, s.V}, gen, kF64);  // [N, H, K, V]
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

// ---- recurrence vs WY form ----

using Case = std::tuple<Shape, Opts, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, opts, with_h0] = info.param;
    return shape_name(shape) + "_" + opts_name(opts) + (with_h0 ? "_h0" : "_noh0");
}

class GatedDeltaProductRefForward : public testing::TestWithParam<Case> {};

TEST_P(GatedDeltaProductRefForward, RecurrenceMatchesWyForm) {
    const auto& [shape, opts, with_h0] = GetParam();
    const GatedDeltaProductInputs in = make_inputs(shape, opts, with_h0, 42);
    const GatedDeltaProductOutputs rec = gated_delta_product_fwd(in);
    const GatedDeltaProductOutputs wy = gated_delta_product_fwd_wy(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), at::IntArrayRef({shape.B, shape.T, shape.H, shape.V}));
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.H, shape.K, shape.V}));
    test::expect_rel_err("o", rec.o, wy.o, kFormsRelTol);
    test::expect_rel_err("ht", rec.ht, wy.ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GatedDeltaProductRefForward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 16, 16, 1, {}}, Shape{2, 40, 2, 16, 16, 2, {}},
                                     Shape{1, 1, 2, 8, 8, 3, {}}, Shape{2, 33, 1, 32, 48, 3, {}},
                                     Shape{1, 70, 2, 16, 24, 2, {0, 0, 17, 40, 70}}),
                     testing::ValuesIn(kOpts), testing::Bool()),
    case_name);

// ---- backward vs autograd ----

// The recurrence again, out of place and with its own norm, so that autograd can
// differentiate it.
GatedDeltaProductOutputs autograd_recurrence(const GatedDeltaProductInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3), n = in.num_householder;
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    at::Tensor q = in.q, k = in.k;
    if (in.use_qk_l2norm_in_kernel) {
        q = q / (q * q).sum(-1, true).add(kGatedDeltaProductL2NormEps).sqrt();
        k = k / (k * k).sum(-1, true).add(kGatedDeltaProductL2NormEps).sqrt();
    }
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, V]
    std::vector<at::Tensor> finals;                  // per sequence: [H, K, V]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            if (in.g.defined()) S = S * in.g[seq.batch][t].exp().view({H, 1, 1});
            for (int64_t j = 0; j < n; ++j) {
                const int64_t m = t * n + j;
                const at::Tensor k_m = k[seq.batch][m].unsqueeze(2);  // [H, K, 1]
                const at::Tensor r = in.v[seq.batch][m] - (S * k_m).sum(1);
                S = S + k_m * (in.beta[seq.batch][m].unsqueeze(1) * r).unsqueeze(1);
            }
            o_rows[seq.batch].push_back((S * q[seq.batch][t].unsqueeze(2)).sum(1) * scale);
        }
        finals.push_back(S);
    }
    return {test::stack_rows(o_rows), at::stack(finals), {}};
}

using GradCase = std::tuple<Shape, Opts, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, opts, with_h0, with_dht] = info.param;
    return shape_name(shape) + "_" + opts_name(opts) + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class GatedDeltaProductRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(GatedDeltaProductRefBackward, MatchesAutograd) {
    const auto& [shape, opts, with_h0, with_dht] = GetParam();
    const GatedDeltaProductInputs in = make_inputs(shape, opts, with_h0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn({shape.B, shape.T, shape.H, shape.V}, gen, kF64);
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.H, shape.K, shape.V}, gen, kF64) : at::Tensor();

    const GatedDeltaProductGrads grads = gated_delta_product_bwd(in, d_o, dht);

    GatedDeltaProductInputs leaf = in;
    std::vector<test::GradCheck> checks = {{"dq", &leaf.q, grads.dq},
                                           {"dk", &leaf.k, grads.dk},
                                           {"dv", &leaf.v, grads.dv},
                                           {"dbeta", &leaf.beta, grads.dbeta}};
    if (in.g.defined()) checks.push_back({"dg", &leaf.g, grads.dg});
    if (in.h0.defined()) checks.push_back({"dh0", &leaf.h0, grads.dh0});
    test::expect_grads_match_autograd(
        checks,
        [&] {
            const GatedDeltaProductOutputs out = autograd_recurrence(leaf);
            return std::make_pair(out.o, out.ht);
        },
        d_o, dht, kGradRelTol);
    EXPECT_EQ(grads.dh0.defined(), in.h0.defined());
    EXPECT_EQ(grads.dg.defined(), in.g.defined());
}

// The reverse pass recomputes from a checkpoint every c = ⌈√len⌉ tokens. Lengths here: 20
// (c = 5, a perfect square's neighbour), 1 (T = 1), and in the varlen case 0 (empty), 1, 3
// (ragged segment) and 16 (a perfect square).
INSTANTIATE_TEST_SUITE_P(
    Shapes, GatedDeltaProductRefBackward,
    testing::Combine(testing::Values(Shape{2, 20, 2, 8, 6, 2, {}}, Shape{3, 1, 2, 4, 5, 3, {}},
                                     Shape{1, 20, 2, 8, 6, 3, {0, 0, 1, 4, 20}}),
                     testing::ValuesIn(kOpts), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- sub-steps, varlen, scale and dtype rules ----

// A sub-step with β = 0 is the identity: n = 2 with every second β zero equals n = 1 on the
// first sub-steps, and the zeroed sub-steps' k, v get no gradient.
TEST(GatedDeltaProductRef, ZeroBetaSubstepIsIdentity) {
    const GatedDeltaProductInputs two = make_inputs({2, 12, 2, 8, 6, 2, {}}, Opts::kPlain, true, 9);
    GatedDeltaProductInputs zeroed = two;
    zeroed.beta = two.beta.clone();
    zeroed.beta.slice(1, 1, 24, 2).zero_();
    GatedDeltaProductInputs one = two;
    one.num_householder = 1;
    one.k = two.k.slice(1, 0, 24, 2);
    one.v = two.v.slice(1, 0, 24, 2);
    one.beta = two.beta.slice(1, 0, 24, 2);
    const GatedDeltaProductOutputs a = gated_delta_product_fwd(zeroed);
    const GatedDeltaProductOutputs b = gated_delta_product_fwd(one);
    EXPECT_LE(rel_err(a.o, b.o), 1e-15);
    EXPECT_LE(rel_err(a.ht, b.ht), 1e-15);
    at::Generator gen = at::detail::createCPUGenerator(10);
    const at::Tensor d_o = at::randn(a.o.sizes(), gen, kF64);
    const GatedDeltaProductGrads ga = gated_delta_product_bwd(zeroed, d_o, at::Tensor());
    const GatedDeltaProductGrads gb = gated_delta_product_bwd(one, d_o, at::Tensor());
    EXPECT_LE(rel_err(ga.dq, gb.dq), 1e-14);
    EXPECT_LE(rel_err(ga.dk.slice(1, 0, 24, 2), gb.dk), 1e-14);
    EXPECT_LE(rel_err(ga.dv.slice(1, 0, 24, 2), gb.dv), 1e-14);
    EXPECT_LE(rel_err(ga.dg, gb.dg), 1e-14);
    EXPECT_EQ(ga.dv.slice(1, 1, 24, 2).abs().max().item<double>(), 0.0);
}

TEST(GatedDeltaProductRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, 2, {0, 0, 5, 5, 9}};
    const GatedDeltaProductInputs in = make_inputs(shape, Opts::kL2Norm, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn({1, 9, 2, 3}, gen, kF64);   // [B, T, H, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K, V]
    const GatedDeltaProductOutputs out = gated_delta_product_fwd(in);
    const GatedDeltaProductOutputs wy = gated_delta_product_fwd_wy(in);
    const GatedDeltaProductGrads grads = gated_delta_product_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(wy.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

// Each packed sequence alone gives the packed result, bitwise.
TEST(GatedDeltaProductRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 40, 2, 8, 6, 3, {0, 0, 11, 40}};
    const GatedDeltaProductInputs packed = make_inputs(shape, Opts::kPlain, true, 11);
    at::Generator gen = at::detail::createCPUGenerator(12);
    const at::Tensor d_o = at::randn({1, 40, 2, 6}, gen, kF64);  // [B, T, H, V]
    const GatedDeltaProductOutputs out = gated_delta_product_fwd(packed);
    const GatedDeltaProductGrads grads = gated_delta_product_bwd(packed, d_o, at::Tensor());
    for (int64_t s = 1; s < 3; ++s) {
        const int64_t b = shape.cu_seqlens[s], e = shape.cu_seqlens[s + 1];
        GatedDeltaProductInputs alone = packed;
        alone.cu_seqlens = {};
        alone.q = packed.q.slice(1, b, e);
        alone.k = packed.k.slice(1, 3 * b, 3 * e);
        alone.v = packed.v.slice(1, 3 * b, 3 * e);
        alone.beta = packed.beta.slice(1, 3 * b, 3 * e);
        alone.g = packed.g.slice(1, b, e);
        alone.h0 = packed.h0.slice(0, s, s + 1);
        const GatedDeltaProductOutputs a = gated_delta_product_fwd(alone);
        EXPECT_TRUE(at::equal(a.o, out.o.slice(1, b, e))) << "sequence " << s;
        EXPECT_TRUE(at::equal(a.ht[0], out.ht[s])) << "sequence " << s;
        const GatedDeltaProductGrads ga =
            gated_delta_product_bwd(alone, d_o.slice(1, b, e), at::Tensor());
        EXPECT_TRUE(at::equal(ga.dk, grads.dk.slice(1, 3 * b, 3 * e))) << "sequence " << s;
        EXPECT_TRUE(at::equal(ga.dg, grads.dg.slice(1, b, e))) << "sequence " << s;
        EXPECT_TRUE(at::equal(ga.dh0[0], grads.dh0[s])) << "sequence " << s;
    }
}

// scale = 0 means K^-0.5 and o is linear in the scale (FLA's naive ignores it; lav does not).
TEST(GatedDeltaProductRef, ScaleZeroMeansInverseSqrtK) {
    test::expect_default_scale(make_inputs({1, 10, 2, 16, 4, 2, {}}, Opts::kPlain, false, 5), 0.25,
                               gated_delta_product_fwd, gated_delta_product_fwd_wy);
}

TEST(GatedDeltaProductRef, EveryOpIsFp64) {
    const GatedDeltaProductInputs in = make_inputs({1, 6, 2, 4, 4, 2, {}}, Opts::kL2Norm, true, 2);
    const at::Tensor d_o = at::ones({1, 6, 2, 4}, kF64);
    test::expect_only_fp64_ops(
        [&] {
            gated_delta_product_fwd(in);
            gated_delta_product_fwd_wy(in);
            gated_delta_product_bwd(in, d_o, in.h0);
        },
        in.q);
}

TEST(GatedDeltaProductRef, RejectsNonFp64AndBadShapes) {
    const GatedDeltaProductInputs good = make_inputs({1, 4, 1, 4, 4, 2, {}}, Opts::kPlain, true, 1);
    const at::Tensor d_o = at::ones({1, 4, 1, 4}, kF64);
    test::expect_narrowed_field_throws<InternalError>(
        good,
        {&GatedDeltaProductInputs::q, &GatedDeltaProductInputs::k, &GatedDeltaProductInputs::v,
         &GatedDeltaProductInputs::g, &GatedDeltaProductInputs::beta, &GatedDeltaProductInputs::h0},
        {[](const GatedDeltaProductInputs& x) { gated_delta_product_fwd(x); },
         [](const GatedDeltaProductInputs& x) { gated_delta_product_fwd_wy(x); },
         [&](const GatedDeltaProductInputs& x) { gated_delta_product_bwd(x, d_o, at::Tensor()); }});
    GatedDeltaProductInputs short_k = good;
    short_k.k = good.k.slice(1, 0, 7);
    EXPECT_THROW(gated_delta_product_fwd(short_k), ShapeError);
    GatedDeltaProductInputs zero_n = good;
    zero_n.num_householder = 0;
    EXPECT_THROW(gated_delta_product_fwd(zero_n), ShapeError);
}

}  // namespace
}  // namespace lav::ref
