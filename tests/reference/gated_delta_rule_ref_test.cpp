// tests/reference/gated_delta_rule_ref_test.cpp — the fp64 gated delta rule reference against its
// WY form, against autograd (every in-kernel option, GVA), and on its dtype and varlen rules.
// Not a kernel test.
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
#include "reference/gated_delta_rule.h"

namespace lav::ref {
namespace {

using namespace lav::test;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 7.4e-15 on o and ht, the
// gradients by at most 1.2e-15 from autograd, so both bounds leave two orders of margin or more.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

struct Shape {
    int64_t B, T, H, HV, K, V;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    return test::shape_name(
        {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"HV", s.HV}, {"K", s.K}, {"V", s.V}},
        !s.cu_seqlens.empty());
}

/// The in-kernel options and gate strengths a case runs with.
enum class Opts { kPlain, kStrongDecay, kL2Norm, kGateInKernel, kBetaSigmoid, kNegEigval, kAll };

std::string opts_name(Opts o) {
    switch (o) {
        case Opts::kPlain:
            return "plain";
        case Opts::kStrongDecay:
            return "strongdecay";
        case Opts::kL2Norm:
            return "l2norm";
        case Opts::kGateInKernel:
            return "gateinkernel";
        case Opts::kBetaSigmoid:
            return "betasigmoid";
        case Opts::kNegEigval:
            return "negeigval";
        case Opts::kAll:
            return "all";
    }
    return "";
}

constexpr Opts kOpts[] = {Opts::kPlain,        Opts::kStrongDecay, Opts::kL2Norm,
                          Opts::kGateInKernel, Opts::kBetaSigmoid, Opts::kNegEigval,
                          Opts::kAll};

// gtest prints the parameters of a failed case with these
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }
void PrintTo(Opts o, std::ostream* os) { *os << opts_name(o); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// Inputs as FLA's GDN tests draw them: randn q, k, v, h0; without the in-kernel norm k is
// L2-normalised here (a unit key keeps I − β k kᵀ a contraction); g = logsigmoid(randn) / n,
// or a raw randn gate with A_log ~ U[0, 1) and dt_bias ~ randn for the in-kernel gate; β ~ U[0, 1),
// or randn logits for the in-kernel sigmoid.
GatedDeltaRuleInputs make_inputs(const Shape& s, Opts opts, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    GatedDeltaRuleInputs in;
    in.use_qk_l2norm_in_kernel = opts == Opts::kL2Norm || opts == Opts::kAll;
    in.use_gate_in_kernel = opts == Opts::kGateInKernel || opts == Opts::kAll;
    in.use_beta_sigmoid_in_kernel =
        opts == Opts::kBetaSigmoid || opts == Opts::kNegEigval || opts == Opts::kAll;
    in.allow_neg_eigval = opts == Opts::kNegEigval || opts == Opts::kAll;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    if (!in.use_qk_l2norm_in_kernel) in.k = in.k / in.k.norm(2, -1, /*keepdim=*/true);
    in.v = at::randn({s.B, s.T, s.HV, s.V}, gen, kF64);                // [B, T, HV, V]
    const at::Tensor logits = at::randn({s.B, s.T, s.HV}, gen, kF64);  // [B, T, HV]
    if (in.use_gate_in_kernel) {
        in.g = logits;
        in.A_log = at::rand({s.HV}, gen, kF64);
        in.dt_bias = at::randn({s.HV}, gen, kF64);
    } else {
        in.g = at::log_sigmoid(logits) / (opts == Opts::kStrongDecay ? 0.1 : 1.0);
    }
    in.beta = in.use_beta_sigmoid_in_kernel ? at::randn({s.B, s.T, s.HV}, gen, kF64)
                                            : at::rand({s.B, s.T, s.HV}, gen, kF64);
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) in.h0 = at::randn({N, s.HV, s.K, s.V}, gen, kF64);  // [N, HV, K, V]
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

// ---- recurrence vs WY form ----

using Case = std::tuple<Shape, Opts, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, opts, with_h0] = info.param;
    return shape_name(shape) + "_" + opts_name(opts) + (with_h0 ? "_h0" : "_noh0");
}

class GatedDeltaRuleRefForward : public testing::TestWithParam<Case> {};

TEST_P(GatedDeltaRuleRefForward, RecurrenceMatchesWyForm) {
    const auto& [shape, opts, with_h0] = GetParam();
    const GatedDeltaRuleInputs in = make_inputs(shape, opts, with_h0, 42);
    const GatedDeltaRuleOutputs rec = gated_delta_rule_fwd(in);
    const GatedDeltaRuleOutputs wy = gated_delta_rule_fwd_wy(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.v.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.HV, shape.K, shape.V}));
    expect_rel_err("o", rec.o, wy.o, kFormsRelTol);
    expect_rel_err("ht", rec.ht, wy.ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GatedDeltaRuleRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 2, 2, 16, 16, {}}, Shape{1, 1, 2, 4, 8, 8, {}},
                                     Shape{3, 1, 2, 2, 4, 4, {}}, Shape{2, 50, 1, 3, 32, 48, {}},
                                     Shape{1, 164, 2, 4, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 4, 4, 64, 64, {}}),
                     testing::ValuesIn(kOpts), testing::Bool()),
    case_name);

// ---- backward vs autograd ----

// The recurrence again, out of place and with its own in-kernel transforms, so that autograd
// can differentiate it.
GatedDeltaRuleOutputs autograd_recurrence(const GatedDeltaRuleInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t HV = in.v.size(2), V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    at::Tensor q = in.q, k = in.k, beta = in.beta, g = in.g;
    if (in.use_qk_l2norm_in_kernel) {
        q = q / (q * q).sum(-1, true).add(kGatedDeltaRuleL2NormEps).sqrt();
        k = k / (k * k).sum(-1, true).add(kGatedDeltaRuleL2NormEps).sqrt();
    }
    q = q.repeat_interleave(HV / H, 2);
    k = k.repeat_interleave(HV / H, 2);
    if (in.use_beta_sigmoid_in_kernel) beta = beta.sigmoid() * (in.allow_neg_eigval ? 2.0 : 1.0);
    if (in.use_gate_in_kernel) g = -in.A_log.exp() * at::softplus(g + in.dt_bias);
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [HV, V]
    std::vector<at::Tensor> finals;                  // per sequence: [HV, K, V]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({HV, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            S = S * g[seq.batch][t].exp().view({HV, 1, 1});
            const at::Tensor k_t = k[seq.batch][t].unsqueeze(2);  // [HV, K, 1]
            const at::Tensor p = (S * k_t).sum(1);                // [HV, V]
            const at::Tensor u = beta[seq.batch][t].unsqueeze(1) * (in.v[seq.batch][t] - p);
            S = S + k_t * u.unsqueeze(1);
            o_rows[seq.batch].push_back((S * q[seq.batch][t].unsqueeze(2)).sum(1) * scale);
        }
        finals.push_back(S);
    }
    return {stack_rows(o_rows), at::stack(finals), {}};
}

using GradCase = std::tuple<Shape, Opts, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, opts, with_h0, with_dht] = info.param;
    return shape_name(shape) + "_" + opts_name(opts) + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class GatedDeltaRuleRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(GatedDeltaRuleRefBackward, MatchesAutograd) {
    const auto& [shape, opts, with_h0, with_dht] = GetParam();
    const GatedDeltaRuleInputs in = make_inputs(shape, opts, with_h0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);  // [B, T, HV, V]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.HV, shape.K, shape.V}, gen, kF64) : at::Tensor();

    const GatedDeltaRuleGrads grads = gated_delta_rule_bwd(in, d_o, dht);

    GatedDeltaRuleInputs leaf = in;
    std::vector<GradCheck> checks = {{"dq", &leaf.q, grads.dq},
                                     {"dk", &leaf.k, grads.dk},
                                     {"dv", &leaf.v, grads.dv},
                                     {"dg", &leaf.g, grads.dg},
                                     {"dbeta", &leaf.beta, grads.dbeta}};
    if (in.use_gate_in_kernel) {
        checks.push_back({"dA_log", &leaf.A_log, grads.dA_log});
        checks.push_back({"ddt_bias", &leaf.dt_bias, grads.ddt_bias});
    }
    if (in.h0.defined()) checks.push_back({"dh0", &leaf.h0, grads.dh0});
    const auto forward = [&] {
        const GatedDeltaRuleOutputs out = autograd_recurrence(leaf);
        return std::make_pair(out.o, out.ht);
    };
    expect_grads_match_autograd(checks, forward, d_o, dht, kGradRelTol);
    EXPECT_EQ(grads.dh0.defined(), in.h0.defined());
    EXPECT_EQ(grads.dA_log.defined(), in.use_gate_in_kernel);
}

// The reverse pass recomputes from a checkpoint every c = ⌈√len⌉ steps. Lengths here: 40 (c = 7,
// ragged last segment), 36 (a perfect square), 1 (T = 1), and in the varlen case 0 (empty), 1
// and 2 (one segment), 3 (c = 2, ragged), 24 (c = 5) and 34 (c = 6). HV = 2H and 4H are GVA.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GatedDeltaRuleRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 2, 8, 6, {}}, Shape{2, 36, 1, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 4, 5, {}},
                                     Shape{1, 64, 2, 4, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kOpts), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- GVA, options, varlen, scale and dtype rules ----

// A value head reads the q, k of key head hv / (HV / H): the same as repeating q and k per
// value head; and the gradient of a shared key sums over its value heads.
TEST(GatedDeltaRuleRef, GroupedValueHeadsEqualRepeatedKeys) {
    const GatedDeltaRuleInputs gva = make_inputs({2, 30, 2, 6, 8, 5, {}}, Opts::kL2Norm, true, 15);
    GatedDeltaRuleInputs repeated = gva;
    repeated.q = gva.q.repeat_interleave(3, 2);
    repeated.k = gva.k.repeat_interleave(3, 2);
    const GatedDeltaRuleOutputs a = gated_delta_rule_fwd(gva);
    const GatedDeltaRuleOutputs b = gated_delta_rule_fwd(repeated);
    EXPECT_LE(rel_err(a.o, b.o), 1e-15);
    EXPECT_LE(rel_err(a.ht, b.ht), 1e-15);
    at::Generator gen = at::detail::createCPUGenerator(16);
    const at::Tensor d_o = at::randn(gva.v.sizes(), gen, kF64);  // [B, T, HV, V]
    const GatedDeltaRuleGrads ga = gated_delta_rule_bwd(gva, d_o, at::Tensor());
    const GatedDeltaRuleGrads gb = gated_delta_rule_bwd(repeated, d_o, at::Tensor());
    EXPECT_LE(rel_err(ga.dq, gb.dq.view({2, 30, 2, 3, 8}).sum(3)), 1e-14);
    EXPECT_LE(rel_err(ga.dk, gb.dk.view({2, 30, 2, 3, 8}).sum(3)), 1e-14);
    EXPECT_LE(rel_err(ga.dv, gb.dv), 1e-15);
    EXPECT_LE(rel_err(ga.dg, gb.dg), 1e-14);
}

// Each in-kernel transform equals applying it to the inputs beforehand.
TEST(GatedDeltaRuleRef, InKernelOptionsEqualTransformedInputs) {
    const GatedDeltaRuleInputs raw = make_inputs({2, 30, 2, 4, 8, 5, {}}, Opts::kAll, true, 17);
    GatedDeltaRuleInputs done = raw;
    done.use_qk_l2norm_in_kernel = false;
    done.use_gate_in_kernel = false;
    done.use_beta_sigmoid_in_kernel = false;
    done.allow_neg_eigval = false;
    done.q = raw.q / (raw.q.square().sum(-1, true) + kGatedDeltaRuleL2NormEps).sqrt();
    done.k = raw.k / (raw.k.square().sum(-1, true) + kGatedDeltaRuleL2NormEps).sqrt();
    done.g = -raw.A_log.exp() * at::log1p(at::exp(raw.g + raw.dt_bias));
    done.beta = 2.0 * at::sigmoid(raw.beta);
    done.A_log = at::Tensor();
    done.dt_bias = at::Tensor();
    const GatedDeltaRuleOutputs a = gated_delta_rule_fwd(raw);
    const GatedDeltaRuleOutputs b = gated_delta_rule_fwd(done);
    EXPECT_LE(rel_err(a.o, b.o), 1e-14);
    EXPECT_LE(rel_err(a.ht, b.ht), 1e-14);
}

TEST(GatedDeltaRuleRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 4, 3, {0, 0, 5, 5, 9}};
    const GatedDeltaRuleInputs in = make_inputs(shape, Opts::kAll, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, HV, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, HV, K, V]
    const GatedDeltaRuleOutputs out = gated_delta_rule_fwd(in);
    const GatedDeltaRuleOutputs wy = gated_delta_rule_fwd_wy(in);
    const GatedDeltaRuleGrads grads = gated_delta_rule_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(wy.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

// Each packed sequence alone gives the packed result: bitwise without transforms; with them,
// to 1e-14, since ATen's vectorised sigmoid and softplus round the last bit differently for an
// element depending on its offset in the tensor (the whole batch or one sequence).
TEST(GatedDeltaRuleRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 4, 16, 24, {0, 0, 37, 100, 164}};
    for (const Opts opts : {Opts::kPlain, Opts::kAll}) {
        const GatedDeltaRuleInputs in = make_inputs(shape, opts, true, 5);
        const GatedDeltaRuleOutputs packed = gated_delta_rule_fwd(in);
        const auto run_alone = [&](const Sequence& seq) {
            const auto cut = [&](const at::Tensor& x) {
                return x.narrow(1, seq.begin, seq.length());
            };
            GatedDeltaRuleInputs alone = in;
            alone.cu_seqlens.clear();
            alone.q = cut(in.q);
            alone.k = cut(in.k);
            alone.v = cut(in.v);
            alone.g = cut(in.g);
            alone.beta = cut(in.beta);
            alone.h0 = in.h0.narrow(0, seq.index, 1);
            const GatedDeltaRuleOutputs single = gated_delta_rule_fwd(alone);
            return Results{{"o", single.o}, {"ht", single.ht}};
        };
        expect_varlen_matches_alone(opts_name(opts), shape.cu_seqlens,
                                    {{"o", packed.o}, {"ht", packed.ht}}, run_alone, {"o"}, {"ht"},
                                    /*skip_empty=*/true, opts == Opts::kPlain ? 0.0 : 1e-14);
    }
}

TEST(GatedDeltaRuleRef, ScaleZeroMeansInverseSqrtK) {
    expect_default_scale(make_inputs({2, 12, 2, 2, 16, 8, {}}, Opts::kPlain, true, 6), 0.25,
                         gated_delta_rule_fwd, gated_delta_rule_fwd_wy);
}

TEST(GatedDeltaRuleRef, EveryOutputIsFloat64) {
    const GatedDeltaRuleInputs in = make_inputs({2, 10, 2, 4, 4, 3, {}}, Opts::kAll, true, 9);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, HV, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, HV, K, V]
    const GatedDeltaRuleOutputs rec = gated_delta_rule_fwd(in);
    const GatedDeltaRuleOutputs wy = gated_delta_rule_fwd_wy(in);
    const GatedDeltaRuleGrads grads = gated_delta_rule_bwd(in, d_o, dht);
    for (const at::Tensor& t : {rec.o, rec.ht, wy.o, wy.ht, grads.dq, grads.dk, grads.dv, grads.dg,
                                grads.dbeta, grads.dA_log, grads.ddt_bias, grads.dh0}) {
        ASSERT_TRUE(t.defined());
        EXPECT_EQ(t.scalar_type(), at::kDouble);
    }
}

TEST(GatedDeltaRuleRef, EveryOpStaysFloat64) {
    const GatedDeltaRuleInputs in =
        make_inputs({1, 20, 2, 4, 4, 3, {0, 0, 7, 20}}, Opts::kAll, true, 12);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, HV, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, HV, K, V]
    expect_only_fp64_ops(
        [&] {
            gated_delta_rule_fwd(in);
            gated_delta_rule_fwd_wy(in);
            gated_delta_rule_bwd(in, d_o, dht);
        },
        in.q);
}

TEST(GatedDeltaRuleRef, Float32InputIsInternalError) {
    const GatedDeltaRuleInputs in = make_inputs({1, 6, 2, 2, 4, 3, {}}, Opts::kAll, true, 10);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, HV, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, HV, K, V]
    using I = GatedDeltaRuleInputs;
    expect_narrowed_field_throws<InternalError>(
        in, {&I::q, &I::k, &I::v, &I::g, &I::beta, &I::A_log, &I::dt_bias, &I::h0},
        {[](const I& x) { gated_delta_rule_fwd(x); },
         [](const I& x) { gated_delta_rule_fwd_wy(x); },
         [&](const I& x) { gated_delta_rule_bwd(x, d_o, dht); }});
    EXPECT_THROW(gated_delta_rule_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(gated_delta_rule_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(GatedDeltaRuleRef, MismatchedShapeIsShapeError) {
    const Shape shape{1, 6, 2, 4, 4, 3, {}};
    GatedDeltaRuleInputs in = make_inputs(shape, Opts::kAll, true, 11);
    in.k = in.k.narrow(3, 0, 3);
    EXPECT_THROW(gated_delta_rule_fwd(in), ShapeError);
    // HV = 3 is not a multiple of H = 2
    in = make_inputs({1, 6, 2, 3, 4, 3, {}}, Opts::kPlain, true, 11);
    EXPECT_THROW(gated_delta_rule_fwd(in), ShapeError);
    in = make_inputs(shape, Opts::kAll, true, 11);
    in.g = in.g.narrow(2, 0, 2);
    EXPECT_THROW(gated_delta_rule_fwd_wy(in), ShapeError);
    in = make_inputs(shape, Opts::kAll, true, 11);
    in.A_log = at::Tensor();
    EXPECT_THROW(gated_delta_rule_fwd(in), ShapeError);
    in = make_inputs(shape, Opts::kNegEigval, true, 11);
    in.use_beta_sigmoid_in_kernel = false;
    EXPECT_THROW(gated_delta_rule_fwd(in), ShapeError);
    in = make_inputs(shape, Opts::kPlain, true, 11);
    in.h0 = at::zeros({1, 2, 4, 3}, kF64);
    EXPECT_THROW(gated_delta_rule_bwd(in, at::ones_like(in.v), at::Tensor()), ShapeError);
}

}  // namespace
}  // namespace lav::ref
