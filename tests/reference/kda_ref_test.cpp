// tests/reference/kda_ref_test.cpp — the fp64 KDA reference against its chunked WY form, against
// autograd through an independent recurrence, and on its dtype and varlen rules. Not a kernel test.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/error.h"
#include "core/varlen.h"
#include "reference/kda.h"

namespace lav::ref {
namespace {

using namespace lav::test;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 6e-15 on o and ht, the
// gradients by at most 1.2e-15 from autograd, both over two orders inside the bounds.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

enum class Gate { kDirect, kStrong, kSoftplus, kLowerBound };

/// The option set of one case.
struct Options {
    std::string name;
    Gate gate = Gate::kDirect;
    bool l2norm = false;
    bool beta_sigmoid = false;
    bool neg_eigval = false;
};

const std::vector<Options> kOptions = {
    {"plain", Gate::kDirect, false, false, false},
    {"strongdecay", Gate::kStrong, false, false, false},
    {"l2norm", Gate::kDirect, true, false, false},
    {"gatesoftplus", Gate::kSoftplus, false, false, false},
    {"gatelowerbound", Gate::kLowerBound, false, false, false},
    {"betasigmoid", Gate::kDirect, false, true, false},
    {"negeigval", Gate::kDirect, false, true, true},
    {"all", Gate::kSoftplus, true, true, true},
};

struct Shape {
    int64_t B, T, H, HV, K, V;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    return test::shape_name(
        {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"HV", s.HV}, {"K", s.K}, {"V", s.V}},
        !s.cu_seqlens.empty());
}

// gtest prints the parameters of a failed case with these
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }
void PrintTo(const Options& o, std::ostream* os) { *os << o.name; }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// Inputs as FLA's KDA tests draw them: randn q, k, v, h0; g = logsigmoid(randn) (÷ 0.1 for
// strong decay); β ∈ U[0, 1). Without the in-kernel l2norm, q and k are scaled by K^-1/2 so
// that ‖k‖ ≈ 1 and the delta rule's transition stays contracting. Raw gates, gate
// parameters and β logits are randn.
KdaInputs make_inputs(const Shape& s, const Options& opt, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    KdaInputs in;
    const double qk_scale = opt.l2norm ? 1.0 : 1.0 / std::sqrt(static_cast<double>(s.K));
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64) * qk_scale;  // [B, T, H, K]
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64) * qk_scale;  // [B, T, H, K]
    in.v = at::randn({s.B, s.T, s.HV, s.V}, gen, kF64);            // [B, T, HV, V]
    const at::Tensor logits = at::randn({s.B, s.T, s.HV, s.K}, gen, kF64);
    switch (opt.gate) {
        case Gate::kDirect:
            in.g = at::log_sigmoid(logits);  // [B, T, HV, K]
            break;
        case Gate::kStrong:
            in.g = at::log_sigmoid(logits) / 0.1;
            break;
        case Gate::kSoftplus:
        case Gate::kLowerBound:
            in.g = logits;
            in.use_gate_in_kernel = true;
            in.A_log = at::randn({s.HV}, gen, kF64) * 0.5;    // [HV]
            in.dt_bias = at::randn({s.HV * s.K}, gen, kF64);  // [HV * K]
            if (opt.gate == Gate::kLowerBound) in.lower_bound = -5.0;
            break;
    }
    in.beta = opt.beta_sigmoid ? at::randn({s.B, s.T, s.HV}, gen, kF64)
                               : at::rand({s.B, s.T, s.HV}, gen, kF64);  // [B, T, HV]
    in.use_qk_l2norm_in_kernel = opt.l2norm;
    in.use_beta_sigmoid_in_kernel = opt.beta_sigmoid;
    in.allow_neg_eigval = opt.neg_eigval;
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) in.h0 = at::randn({N, s.HV, s.K, s.V}, gen, kF64);  // [N, HV, K, V]
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

// ---- recurrence vs chunked WY form ----

using FormsCase = std::tuple<Shape, Options, int64_t, bool>;

std::string forms_case_name(const testing::TestParamInfo<FormsCase>& info) {
    const auto& [shape, opt, chunk, with_h0] = info.param;
    return shape_name(shape) + "_" + opt.name + "_C" + std::to_string(chunk) +
           (with_h0 ? "_h0" : "_noh0");
}

class KdaRefForward : public testing::TestWithParam<FormsCase> {
  protected:
    // the chunked form's small bmm and triangular solves, threaded, cost 30x on a busy 2-core
    // host (measured 190 ms vs 5.5 ms per case); one thread keeps the suite at a few seconds
    static void SetUpTestSuite() { at::set_num_threads(1); }
};

TEST_P(KdaRefForward, RecurrenceMatchesChunkedForm) {
    const auto& [shape, opt, chunk, with_h0] = GetParam();
    const KdaInputs in = make_inputs(shape, opt, with_h0, 42);
    const KdaOutputs rec = kda_fwd(in);
    const KdaOutputs chunked = kda_fwd_chunked(in, chunk);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.v.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.HV, shape.K, shape.V}));
    expect_rel_err("o", rec.o, chunked.o, kFormsRelTol);
    expect_rel_err("ht", rec.ht, chunked.ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
    EXPECT_GT(rec.o.norm().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, KdaRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 2, 2, 16, 16, {}}, Shape{1, 1, 2, 2, 8, 8, {}},
                                     Shape{2, 50, 1, 3, 32, 24, {}},
                                     Shape{1, 164, 2, 4, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{1, 256, 2, 2, 64, 64, {}}),
                     testing::ValuesIn(kOptions), testing::Values(16, 64), testing::Bool()),
    forms_case_name);

// ---- backward vs autograd ----

// The recurrence again, out of place and written independently of reference/kda.cpp (per
// value head, no grouping trick, the activations spelled out), so that autograd can
// differentiate it and its forward checks the reference's activations.
KdaOutputs autograd_recurrence(const KdaInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t HV = in.v.size(2), V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    const auto normalise = [&](const at::Tensor& x) {  // [.., K]
        return in.use_qk_l2norm_in_kernel ? x / at::sqrt(x.pow(2).sum(-1, true) + 1e-6) : x;
    };
    const at::Tensor q = normalise(in.q), k = normalise(in.k);  // [B, T, H, K]
    at::Tensor g = in.g;                                        // [B, T, HV, K]
    if (in.use_gate_in_kernel) {
        at::Tensor x = in.g;
        if (in.dt_bias.defined()) x = x + in.dt_bias.reshape({HV, K});
        const at::Tensor a = in.A_log.exp().reshape({HV, 1});
        g = in.lower_bound ? *in.lower_bound / (1.0 + at::exp(-a * x)) : -a * at::log1p(at::exp(x));
    }
    at::Tensor beta = in.beta;  // [B, T, HV]
    if (in.use_beta_sigmoid_in_kernel)
        beta = (in.allow_neg_eigval ? 2.0 : 1.0) / (1.0 + at::exp(-in.beta));

    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [HV, V]
    std::vector<at::Tensor> finals;                  // per sequence: [HV, K, V]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        std::vector<at::Tensor> S(HV);  // per value head: [K, V]
        for (int64_t h = 0; h < HV; ++h)
            S[h] = in.h0.defined() ? in.h0[seq.index][h] : at::zeros({K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            std::vector<at::Tensor> o_t;
            for (int64_t h = 0; h < HV; ++h) {
                const int64_t kh = h / (HV / H);
                const at::Tensor k_t = k[seq.batch][t][kh];  // [K]
                const at::Tensor Sbar = g[seq.batch][t][h].exp().unsqueeze(1) * S[h];
                const at::Tensor u =
                    beta[seq.batch][t][h] * (in.v[seq.batch][t][h] - at::matmul(k_t, Sbar));
                S[h] = Sbar + at::outer(k_t, u);
                o_t.push_back(at::matmul(q[seq.batch][t][kh] * scale, S[h]));
            }
            o_rows[seq.batch].push_back(at::stack(o_t));
        }
        finals.push_back(at::stack(S));
    }
    return {stack_rows(o_rows), at::stack(finals), {}};
}

using GradCase = std::tuple<Shape, Options, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, opt, with_h0, with_dht] = info.param;
    return shape_name(shape) + "_" + opt.name + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class KdaRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(KdaRefBackward, MatchesAutograd) {
    const auto& [shape, opt, with_h0, with_dht] = GetParam();
    const KdaInputs in = make_inputs(shape, opt, with_h0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);  // [B, T, HV, V]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.HV, shape.K, shape.V}, gen, kF64) : at::Tensor();

    const KdaGrads grads = kda_bwd(in, d_o, dht);

    KdaInputs leaf = in;
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
        const KdaOutputs out = autograd_recurrence(leaf);
        // the independent forward also checks the reference's activations and grouping
        const KdaOutputs fwd = kda_fwd(in);
        EXPECT_LE(rel_err(fwd.o, out.o.detach()), kFormsRelTol) << "o";
        EXPECT_LE(rel_err(fwd.ht, out.ht.detach()), kFormsRelTol) << "ht";
        return std::make_pair(out.o, out.ht);
    };
    expect_grads_match_autograd(checks, forward, d_o, dht, kGradRelTol);
    EXPECT_EQ(grads.dh0.defined(), in.h0.defined());
    EXPECT_EQ(grads.dA_log.defined(), in.use_gate_in_kernel);
}

// The reverse pass recomputes from a checkpoint every c = ⌈√len⌉ steps. Lengths here: 40 (c = 7,
// ragged last segment), 36 (a perfect square, GVA with 2 value heads per key head), 1 (T = 1),
// and in the varlen case 0 (empty), 1 and 2 (one segment), 3 (c = 2, ragged), 24 (c = 5) and
// 34 (c = 6).
INSTANTIATE_TEST_SUITE_P(
    Shapes, KdaRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 2, 8, 6, {}}, Shape{2, 36, 1, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 4, 5, {}},
                                     Shape{1, 64, 2, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kOptions), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen, scale, options and dtype rules ----

TEST(KdaRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 2, 4, 3, {0, 0, 5, 5, 9}};
    const KdaInputs in = make_inputs(shape, kOptions[0], true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, HV, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, HV, K, V]
    const KdaOutputs out = kda_fwd(in);
    const KdaOutputs chunked = kda_fwd_chunked(in, 4);
    const KdaGrads grads = kda_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(chunked.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

TEST(KdaRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 4, 16, 24, {0, 0, 37, 100, 164}};
    const KdaInputs in = make_inputs(shape, kOptions.back(), true, 5);
    const KdaOutputs packed = kda_fwd(in);
    const auto run_alone = [&](const Sequence& seq) {
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        KdaInputs alone = in;
        alone.cu_seqlens.clear();
        alone.q = cut(in.q);
        alone.k = cut(in.k);
        alone.v = cut(in.v);
        alone.g = cut(in.g);
        alone.beta = cut(in.beta);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const KdaOutputs single = kda_fwd(alone);
        return Results{{"o", single.o}, {"ht", single.ht}};
    };
    expect_varlen_matches_alone("packed", shape.cu_seqlens, {{"o", packed.o}, {"ht", packed.ht}},
                                run_alone, {"o"}, {"ht"}, /*skip_empty=*/true);
}

TEST(KdaRef, ScaleZeroMeansInverseSqrtK) {
    expect_default_scale(make_inputs({2, 12, 2, 2, 16, 8, {}}, kOptions[0], true, 6), 0.25, kda_fwd,
                         [](const KdaInputs& x) { return kda_fwd_chunked(x, 8); });
}

// The options change the math: each one, switched on, moves o.
TEST(KdaRef, EveryOptionChangesTheResult) {
    const Shape shape{1, 20, 2, 2, 8, 8, {}};
    KdaInputs base = make_inputs(shape, kOptions[0], true, 13);
    base.A_log = at::full({2}, 0.3, kF64);
    base.dt_bias = at::full({16}, 0.2, kF64);
    const at::Tensor o = kda_fwd(base).o;
    const auto moved = [&](KdaInputs changed) { return !at::allclose(kda_fwd(changed).o, o); };
    KdaInputs x = base;
    x.use_qk_l2norm_in_kernel = true;
    EXPECT_TRUE(moved(x)) << "l2norm";
    x = base;
    x.use_gate_in_kernel = true;
    EXPECT_TRUE(moved(x)) << "gate";
    x.lower_bound = -5.0;
    const at::Tensor softplus_gate = [&] {
        KdaInputs y = x;
        y.lower_bound.reset();
        return kda_fwd(y).o;
    }();
    EXPECT_FALSE(at::allclose(kda_fwd(x).o, softplus_gate)) << "lower_bound";
    x = base;
    x.use_beta_sigmoid_in_kernel = true;
    EXPECT_TRUE(moved(x)) << "beta sigmoid";
    KdaInputs y = x;
    y.allow_neg_eigval = true;
    EXPECT_FALSE(at::allclose(kda_fwd(y).o, kda_fwd(x).o)) << "neg eigval";
}

TEST(KdaRef, EveryOutputIsFloat64) {
    const KdaInputs in = make_inputs({2, 10, 1, 2, 4, 3, {}}, kOptions.back(), true, 9);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, HV, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, HV, K, V]
    const KdaOutputs rec = kda_fwd(in);
    const KdaOutputs chunked = kda_fwd_chunked(in, 4);
    const KdaGrads grads = kda_bwd(in, d_o, dht);
    for (const at::Tensor& t : {rec.o, rec.ht, chunked.o, chunked.ht, grads.dq, grads.dk, grads.dv,
                                grads.dg, grads.dbeta, grads.dA_log, grads.ddt_bias, grads.dh0}) {
        ASSERT_TRUE(t.defined());
        EXPECT_EQ(t.scalar_type(), at::kDouble);
    }
}

TEST(KdaRef, EveryOpStaysFloat64) {
    const KdaInputs in = make_inputs({1, 20, 1, 2, 4, 3, {0, 0, 7, 20}}, kOptions.back(), true, 12);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, HV, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, HV, K, V]
    expect_only_fp64_ops(
        [&] {
            kda_fwd(in);
            kda_fwd_chunked(in, 4);
            kda_bwd(in, d_o, dht);
        },
        in.q);
}

TEST(KdaRef, Float32InputIsInternalError) {
    const KdaInputs in = make_inputs({1, 6, 1, 2, 4, 3, {}}, kOptions.back(), true, 10);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, HV, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, HV, K, V]
    using I = KdaInputs;
    expect_narrowed_field_throws<InternalError>(
        in, {&I::q, &I::k, &I::v, &I::g, &I::beta, &I::A_log, &I::dt_bias, &I::h0},
        {[](const I& x) { kda_fwd(x); }, [](const I& x) { kda_fwd_chunked(x, 4); },
         [&](const I& x) { kda_bwd(x, d_o, dht); }});
    EXPECT_THROW(kda_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(kda_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(KdaRef, BadShapesAndOptionsAreShapeErrors) {
    const Shape shape{1, 6, 2, 4, 4, 3, {}};
    KdaInputs in = make_inputs(shape, kOptions[0], true, 11);
    // HV = 3 is not a multiple of H = 2
    KdaInputs bad = in;
    bad.v = in.v.narrow(2, 0, 3);
    EXPECT_THROW(kda_fwd(bad), ShapeError);
    bad = in;
    bad.g = in.g.narrow(3, 0, 3);
    EXPECT_THROW(kda_fwd(bad), ShapeError);
    bad = in;
    bad.h0 = at::zeros({2, 4, 4, 3}, kF64);
    EXPECT_THROW(kda_fwd_chunked(bad, 4), ShapeError);
    bad = in;
    bad.use_gate_in_kernel = true;  // without A_log
    EXPECT_THROW(kda_fwd(bad), ShapeError);
    bad = in;
    bad.lower_bound = -5.0;  // without the in-kernel gate
    EXPECT_THROW(kda_fwd(bad), ShapeError);
    bad = in;
    bad.allow_neg_eigval = true;  // without the beta sigmoid
    EXPECT_THROW(kda_fwd(bad), ShapeError);
}

}  // namespace
}  // namespace lav::ref
