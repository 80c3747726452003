// tests/reference/gsa_ref_test.cpp — the fp64 gsa reference against its parallel form, against
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
#include "reference/gsa.h"

namespace lav::ref {
namespace {

using test::expect_rel_err;
using test::rel_err;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch 2.11 CPU, one thread): see reference/gsa.md for the worst values.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

struct Shape {
    int64_t B, T, H, K, V, M;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    std::string name = "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" +
                       std::to_string(s.H) + "_K" + std::to_string(s.K) + "_V" +
                       std::to_string(s.V) + "_M" + std::to_string(s.M);
    return s.cu_seqlens.empty() ? name : name + "_varlen";
}

void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

// The gate normalizers of FLA's tests: g = logsigmoid(randn) / n; 0 stands for an all-zero gate.
constexpr double kNormalizers[] = {1.0, 0.1, 10.0, 0.0};

std::string gate_name(double n) {
    if (n == 0.0) return "gzero";
    if (n == 1.0) return "g1";
    return n < 1.0 ? "g01" : "g10";
}

// randn q, k, v, s and both initial states; the gate as gate_name says.
GsaInputs make_inputs(const Shape& s, double normalizer, bool with_h0, uint64_t seed) {
    test::Draw draw(seed);
    GsaInputs in;
    in.q = draw.randn({s.B, s.T, s.H, s.K});                     // [B, T, H, K]
    in.k = draw.randn({s.B, s.T, s.H, s.K});                     // [B, T, H, K]
    in.v = draw.randn({s.B, s.T, s.H, s.V});                     // [B, T, H, V]
    in.s = draw.randn({s.B, s.T, s.H, s.M});                     // [B, T, H, M]
    const at::Tensor logits = draw.randn({s.B, s.T, s.H, s.M});  // [B, T, H, M]
    in.g = normalizer == 0.0 ? at::zeros_like(logits) : at::log_sigmoid(logits) / normalizer;
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) {
        in.hk0 = draw.randn({N, s.H, s.K, s.M});  // [N, H, K, M]
        in.hv0 = draw.randn({N, s.H, s.M, s.V});  // [N, H, M, V]
    }
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

// ---- recurrence vs parallel form ----

using FwdCase = std::tuple<Shape, double, bool>;

std::string fwd_case_name(const testing::TestParamInfo<FwdCase>& info) {
    const auto& [shape, normalizer, with_h0] = info.param;
    return shape_name(shape) + "_" + gate_name(normalizer) + (with_h0 ? "_h0" : "_noh0");
}

class GsaRefForward : public testing::TestWithParam<FwdCase> {};

TEST_P(GsaRefForward, RecurrenceMatchesParallelForm) {
    const auto& [shape, normalizer, with_h0] = GetParam();
    const GsaInputs in = make_inputs(shape, normalizer, with_h0, 42);
    const GsaOutputs rec = gsa_fwd(in);
    const GsaOutputs par = gsa_fwd_parallel(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.v.sizes());
    ASSERT_EQ(rec.hkt.sizes(), at::IntArrayRef({N, shape.H, shape.K, shape.M}));
    ASSERT_EQ(rec.hvt.sizes(), at::IntArrayRef({N, shape.H, shape.M, shape.V}));
    expect_rel_err("o", rec.o, par.o, kFormsRelTol);
    expect_rel_err("hkt", rec.hkt, par.hkt, kFormsRelTol);
    expect_rel_err("hvt", rec.hvt, par.hvt, kFormsRelTol);
    EXPECT_TRUE(test::all_finite(rec.o));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GsaRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, 16, 8, {}}, Shape{3, 1, 2, 4, 4, 4, {}},
                                     Shape{2, 50, 2, 32, 24, 16, {}},
                                     Shape{1, 164, 2, 16, 24, 8, {0, 0, 37, 100, 164}},
                                     Shape{1, 256, 2, 64, 64, 32, {}}),
                     testing::ValuesIn(kNormalizers), testing::Bool()),
    fwd_case_name);

// The softmax sees each slot's key-pass score: with one slot, p = 1 and o is the plain
// gated sum of s-weighted values, whatever q and k are.
TEST(GsaRef, OneSlotIgnoresQueriesAndKeys) {
    GsaInputs in = make_inputs({2, 20, 2, 8, 5, 1, {}}, 1.0, true, 3);
    const GsaOutputs out = gsa_fwd(in);
    in.q = at::randn_like(in.q);
    in.k = at::randn_like(in.k);
    const GsaOutputs other = gsa_fwd(in);
    EXPECT_LE(rel_err(other.o, out.o), 1e-14);
    EXPECT_TRUE(at::equal(other.hvt, out.hvt));
}

// ---- backward vs autograd ----

// The recurrence again, out of place and per sequence, so that autograd can differentiate it.
GsaOutputs autograd_recurrence(const GsaInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3), M = in.s.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, V]
    std::vector<at::Tensor> hk_finals, hv_finals;
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor hk = in.hk0.defined() ? in.hk0[seq.index] : at::zeros({H, K, M}, kF64);
        at::Tensor hv = in.hv0.defined() ? in.hv0[seq.index] : at::zeros({H, M, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            const at::Tensor a = in.g[seq.batch][t].exp();  // [H, M]
            const at::Tensor s = in.s[seq.batch][t];        // [H, M]
            hk = hk * a.unsqueeze(1) + in.k[seq.batch][t].unsqueeze(2) * s.unsqueeze(1);
            hv = hv * a.unsqueeze(2) + s.unsqueeze(2) * in.v[seq.batch][t].unsqueeze(1);
            const at::Tensor p =
                at::softmax((hk * in.q[seq.batch][t].unsqueeze(2)).sum(1) * scale, -1);
            o_rows[seq.batch].push_back((hv * p.unsqueeze(2)).sum(1));
        }
        hk_finals.push_back(hk);
        hv_finals.push_back(hv);
    }
    return {test::stack_rows(o_rows), at::stack(hk_finals), at::stack(hv_finals)};
}

using GradCase = std::tuple<Shape, double, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, normalizer, with_h0, with_dht] = info.param;
    return shape_name(shape) + "_" + gate_name(normalizer) + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class GsaRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(GsaRefBackward, MatchesAutograd) {
    const auto& [shape, normalizer, with_h0, with_dht] = GetParam();
    GsaInputs in = make_inputs(shape, normalizer, with_h0, 7);
    in.scale = 0.3;
    test::Draw draw(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = draw.randn(in.v.sizes());  // [B, T, H, V]
    at::Tensor dhkt, dhvt;
    if (with_dht) {
        dhkt = draw.randn({N, shape.H, shape.K, shape.M});  // [N, H, K, M]
        dhvt = draw.randn({N, shape.H, shape.M, shape.V});  // [N, H, M, V]
    }
    const GsaGrads grads = gsa_bwd(in, d_o, dhkt, dhvt);

    ASSERT_EQ(grads.dhk0.defined(), with_h0);
    ASSERT_EQ(grads.dhv0.defined(), with_h0);
    GsaInputs leaf = in;
    std::vector<test::GradCheck> checks = {{"dq", &leaf.q, grads.dq},
                                           {"dk", &leaf.k, grads.dk},
                                           {"dv", &leaf.v, grads.dv},
                                           {"ds", &leaf.s, grads.ds},
                                           {"dg", &leaf.g, grads.dg}};
    if (with_h0) {
        checks.push_back({"dhk0", &leaf.hk0, grads.dhk0});
        checks.push_back({"dhv0", &leaf.hv0, grads.dhv0});
    }
    // the driver takes one final state: both states flattened into one, and their cotangents
    const auto forward = [&] {
        const GsaOutputs out = autograd_recurrence(leaf);
        return std::make_pair(out.o, at::cat({out.hkt.flatten(), out.hvt.flatten()}));
    };
    const at::Tensor dht = with_dht ? at::cat({dhkt.flatten(), dhvt.flatten()}) : at::Tensor();
    test::expect_grads_match_autograd(checks, forward, d_o, dht, kGradRelTol);
}

// The reverse sweep recomputes from a checkpoint every c = ⌈√len⌉ steps. Lengths: 40 (c = 7,
// ragged last segment), 36 (a perfect square), 1, and in the varlen case 0, 1, 2, 3, 24 and 34.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GsaRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, 5, {}}, Shape{1, 36, 2, 8, 6, 4, {}},
                                     Shape{3, 1, 2, 4, 5, 3, {}},
                                     Shape{1, 64, 2, 8, 6, 4, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kNormalizers), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen, scale and dtype rules ----

TEST(GsaRef, EmptySequenceKeepsInitialStatesAndGradients) {
    const Shape shape{1, 9, 2, 4, 3, 5, {0, 0, 5, 5, 9}};
    const GsaInputs in = make_inputs(shape, 1.0, true, 3);
    test::Draw draw(4);
    const at::Tensor d_o = draw.randn(in.v.sizes());     // [B, T, H, V]
    const at::Tensor dhkt = draw.randn(in.hk0.sizes());  // [N, H, K, M]
    const at::Tensor dhvt = draw.randn(in.hv0.sizes());  // [N, H, M, V]
    const GsaOutputs out = gsa_fwd(in);
    const GsaOutputs par = gsa_fwd_parallel(in);
    const GsaGrads grads = gsa_bwd(in, d_o, dhkt, dhvt);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.hkt[n], in.hk0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(out.hvt[n], in.hv0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(par.hkt[n], in.hk0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(par.hvt[n], in.hv0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dhk0[n], dhkt[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dhv0[n], dhvt[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.hkt[1], in.hk0[1]));
}

TEST(GsaRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 16, 24, 8, {0, 0, 37, 100, 164}};
    const GsaInputs in = make_inputs(shape, 1.0, true, 5);
    test::Draw draw(6);
    const at::Tensor d_o = draw.randn(in.v.sizes());     // [B, T, H, V]
    const at::Tensor dhkt = draw.randn(in.hk0.sizes());  // [N, H, K, M]
    const at::Tensor dhvt = draw.randn(in.hv0.sizes());  // [N, H, M, V]
    const GsaOutputs packed = gsa_fwd(in);
    const GsaGrads packed_grads = gsa_bwd(in, d_o, dhkt, dhvt);
    for (const Sequence& seq : sequences(1, shape.T, shape.cu_seqlens)) {
        if (seq.length() == 0) continue;
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        const auto row = [&](const at::Tensor& x) { return x.narrow(0, seq.index, 1); };
        GsaInputs alone;
        alone.q = cut(in.q);
        alone.k = cut(in.k);
        alone.v = cut(in.v);
        alone.s = cut(in.s);
        alone.g = cut(in.g);
        alone.hk0 = row(in.hk0);
        alone.hv0 = row(in.hv0);
        const GsaOutputs single = gsa_fwd(alone);
        const GsaGrads single_grads = gsa_bwd(alone, cut(d_o), row(dhkt), row(dhvt));
        EXPECT_TRUE(at::equal(single.o, cut(packed.o))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single.hkt, row(packed.hkt))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single.hvt, row(packed.hvt))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single_grads.ds, cut(packed_grads.ds))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single_grads.dg, cut(packed_grads.dg))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single_grads.dhk0, row(packed_grads.dhk0)))
            << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single_grads.dhv0, row(packed_grads.dhv0)))
            << "sequence " << seq.index;
    }
}

TEST(GsaRef, ScaleZeroMeansInverseSqrtK) {
    GsaInputs in = make_inputs({2, 12, 2, 16, 8, 4, {}}, 1.0, true, 6);
    const GsaOutputs by_default = gsa_fwd(in);
    const GsaOutputs parallel_default = gsa_fwd_parallel(in);
    in.scale = 0.25;
    EXPECT_LE(rel_err(by_default.o, gsa_fwd(in).o), 1e-15);
    EXPECT_LE(rel_err(parallel_default.o, gsa_fwd_parallel(in).o), 1e-15);
    // the states do not see the scale
    in.scale = 0.5;
    const GsaOutputs other = gsa_fwd(in);
    EXPECT_TRUE(at::equal(other.hkt, by_default.hkt));
    EXPECT_TRUE(at::equal(other.hvt, by_default.hvt));
    EXPECT_GT(rel_err(other.o, by_default.o), 1e-3);
}

TEST(GsaRef, EveryOutputAndOpIsFloat64) {
    const GsaInputs in = make_inputs({1, 20, 2, 4, 3, 5, {0, 0, 7, 20}}, 1.0, true, 12);
    const at::Tensor d_o = at::ones_like(in.v);     // [B, T, H, V]
    const at::Tensor dhkt = at::ones_like(in.hk0);  // [N, H, K, M]
    const at::Tensor dhvt = at::ones_like(in.hv0);  // [N, H, M, V]
    test::expect_only_fp64_ops(
        [&] {
            const GsaOutputs out = gsa_fwd(in);
            const GsaOutputs par = gsa_fwd_parallel(in);
            const GsaGrads grads = gsa_bwd(in, d_o, dhkt, dhvt);
            for (const at::Tensor& t :
                 {out.o, out.hkt, out.hvt, par.o, par.hkt, par.hvt, grads.dq, grads.dk, grads.dv,
                  grads.ds, grads.dg, grads.dhk0, grads.dhv0})
                EXPECT_EQ(t.scalar_type(), at::kDouble);
        },
        in.q);
}

TEST(GsaRef, Float32InputIsInternalError) {
    const GsaInputs in = make_inputs({1, 6, 2, 4, 3, 2, {}}, 1.0, true, 10);
    const at::Tensor d_o = at::ones_like(in.v);  // [B, T, H, V]
    test::expect_narrowed_field_throws<InternalError>(
        in,
        {&GsaInputs::q, &GsaInputs::k, &GsaInputs::v, &GsaInputs::s, &GsaInputs::g, &GsaInputs::hk0,
         &GsaInputs::hv0},
        {[](const GsaInputs& x) { gsa_fwd(x); }, [](const GsaInputs& x) { gsa_fwd_parallel(x); },
         [&](const GsaInputs& x) { gsa_bwd(x, d_o, {}, {}); }});
    EXPECT_THROW(gsa_bwd(in, d_o.to(at::kFloat), {}, {}), InternalError);
    EXPECT_THROW(gsa_bwd(in, d_o, at::ones_like(in.hk0).to(at::kFloat), {}), InternalError);
    EXPECT_THROW(gsa_bwd(in, d_o, {}, at::ones_like(in.hv0).to(at::kFloat)), InternalError);
}

TEST(GsaRef, MismatchedShapeIsShapeError) {
    const GsaInputs good = make_inputs({1, 6, 2, 4, 3, 5, {}}, 1.0, true, 11);
    GsaInputs in = good;
    in.g = in.g.narrow(3, 0, 4);
    EXPECT_THROW(gsa_fwd(in), ShapeError);
    in = good;
    in.s = in.s.narrow(3, 0, 4);
    EXPECT_THROW(gsa_bwd(in, at::ones_like(in.v), {}, {}), ShapeError);
    in = good;
    // the key state is [N, H, K, M], not [N, H, M, K]
    in.hk0 = in.hk0.transpose(2, 3);
    EXPECT_THROW(gsa_fwd_parallel(in), ShapeError);
}

}  // namespace
}  // namespace lav::ref
