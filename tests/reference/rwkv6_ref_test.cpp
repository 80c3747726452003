// tests/reference/rwkv6_ref_test.cpp — the fp64 rwkv6 reference against its parallel form, against
// autograd, and on its dtype and varlen rules. Not a kernel test.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "common/family_test.h"
#include "core/error.h"
#include "core/varlen.h"
#include "reference/rwkv6.h"

namespace lav::ref {
namespace {

using namespace lav::test;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10; both
// sit orders of magnitude above fp64 rounding at these sizes (measured values in
// reference/rwkv6.md).
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

struct Shape {
    int64_t B, T, H, K, V;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" + std::to_string(s.H) +
           "_K" + std::to_string(s.K) + "_V" + std::to_string(s.V) +
           (s.cu_seqlens.empty() ? "" : "_varlen");
}
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

// randn q, k, v, u, h0; w = logsigmoid(randn) / normalizer (0.1 strong decay, 10 weak)
Rwkv6Inputs make_inputs(const Shape& s, double normalizer, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    Rwkv6Inputs in;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);
    in.w = at::log_sigmoid(at::randn({s.B, s.T, s.H, s.K}, gen, kF64)) / normalizer;
    in.u = at::randn({s.H, s.K}, gen, kF64);
    if (with_h0) in.h0 = at::randn({num_sequences(s.B, s.cu_seqlens), s.H, s.K, s.V}, gen, kF64);
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

using FormCase = std::tuple<Shape, double, bool>;

class Rwkv6RefForward : public testing::TestWithParam<FormCase> {};

TEST_P(Rwkv6RefForward, RecurrenceMatchesParallelForm) {
    const auto& [shape, normalizer, with_h0] = GetParam();
    const Rwkv6Inputs in = make_inputs(shape, normalizer, with_h0, 42);
    const Rwkv6Outputs rec = rwkv6_fwd(in);
    const Rwkv6Outputs par = rwkv6_fwd_parallel(in);
    expect_rel_err("o", rec.o, par.o, kFormsRelTol);
    expect_rel_err("ht", rec.ht, par.ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

std::string name_forward(const testing::TestParamInfo<FormCase>& info) {
    const auto& [shape, normalizer, with_h0] = info.param;
    const std::string n = normalizer == 1.0 ? "w1" : normalizer < 1.0 ? "w01" : "w10";
    return shape_name(shape) + "_" + n + (with_h0 ? "_h0" : "_noh0");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Rwkv6RefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, 16, {}}, Shape{1, 1, 2, 8, 8, {}},
                                     Shape{2, 50, 2, 32, 48, {}},
                                     Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 4, 64, 64, {}}),
                     testing::Values(1.0, 0.1, 10.0), testing::Bool()),
    name_forward);

// The bonus u acts on the current token only: without h0 the first output is the bonus term
// alone, and u never reaches the state.
TEST(Rwkv6Ref, BonusReadsOnlyTheCurrentToken) {
    Rwkv6Inputs in = make_inputs({1, 5, 2, 4, 3, {}}, 1.0, false, 3);
    const Rwkv6Outputs base = rwkv6_fwd(in);
    const at::Tensor q0 = in.q[0][0], k0 = in.k[0][0], v0 = in.v[0][0];  // [H, K], [H, V]
    const double scale = 0.5;
    const at::Tensor expected = scale * (q0 * in.u * k0).sum(1, true) * v0;  // [H, V]
    EXPECT_LE(rel_err(base.o[0][0], expected), 1e-14);
    in.u = in.u * 3.0;
    EXPECT_TRUE(at::equal(rwkv6_fwd(in).ht, base.ht));
}

// ---- backward vs autograd ----

// The recurrence again, out of place, so that autograd can differentiate it.
Rwkv6Outputs autograd_recurrence(const Rwkv6Inputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    std::vector<std::vector<at::Tensor>> o_rows(B);
    std::vector<at::Tensor> finals;
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            const at::Tensor q = in.q[seq.batch][t], k = in.k[seq.batch][t];
            const at::Tensor v = in.v[seq.batch][t];
            const at::Tensor bonus = (q * in.u * k).sum(1, true);  // [H, 1]
            o_rows[seq.batch].push_back(((S * q.unsqueeze(2)).sum(1) + bonus * v) * scale);
            S = S * in.w[seq.batch][t].exp().unsqueeze(2) + k.unsqueeze(2) * v.unsqueeze(1);
        }
        finals.push_back(S);
    }
    return {stack_rows(o_rows), at::stack(finals), {}};
}

using GradCase = std::tuple<Shape, double, bool>;

class Rwkv6RefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(Rwkv6RefBackward, MatchesAutograd) {
    const auto& [shape, normalizer, with_h0] = GetParam();
    Rwkv6Inputs in = make_inputs(shape, normalizer, with_h0, 7);
    in.scale = 0.3;
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const at::Tensor dht = at::randn({N, shape.H, shape.K, shape.V}, gen, kF64);
    const Rwkv6Grads grads = rwkv6_bwd(in, d_o, dht);

    ASSERT_EQ(grads.dh0.defined(), in.h0.defined());
    Rwkv6Inputs leaf = in;
    std::vector<GradCheck> checks = {{"dq", &leaf.q, grads.dq},
                                     {"dk", &leaf.k, grads.dk},
                                     {"dv", &leaf.v, grads.dv},
                                     {"dw", &leaf.w, grads.dw},
                                     {"du", &leaf.u, grads.du}};
    if (in.h0.defined()) checks.push_back({"dh0", &leaf.h0, grads.dh0});
    expect_grads_match_autograd(
        checks,
        [&] {
            const Rwkv6Outputs out = autograd_recurrence(leaf);
            return std::make_pair(out.o, out.ht);
        },
        d_o, dht, kGradRelTol);
}

// the reverse pass recomputes from a checkpoint every ⌈√len⌉ steps: 40 (ragged last segment),
// 36 (a perfect square), 1, and varlen lengths 0, 1, 2, 3, 24, 34
std::string name_backward(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, normalizer, with_h0] = info.param;
    return shape_name(shape) + (normalizer == 1.0 ? "_w1" : "_w01") + (with_h0 ? "_h0" : "_noh0");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Rwkv6RefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, {}}, Shape{2, 36, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 5, {}},
                                     Shape{1, 64, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::Values(1.0, 0.1), testing::Bool()),
    name_backward);

// ---- varlen and dtype rules ----

TEST(Rwkv6Ref, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const Rwkv6Inputs in = make_inputs(shape, 1.0, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);
    const Rwkv6Outputs out = rwkv6_fwd(in);
    const Rwkv6Outputs par = rwkv6_fwd_parallel(in);
    const Rwkv6Grads grads = rwkv6_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << n;
        EXPECT_TRUE(at::equal(par.ht[n], in.h0[n])) << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << n;
    }
}

TEST(Rwkv6Ref, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 100, 2, 8, 6, {0, 37, 37, 100}};
    const Rwkv6Inputs in = make_inputs(shape, 1.0, true, 5);
    at::Generator gen = at::detail::createCPUGenerator(6);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);
    const Rwkv6Outputs packed = rwkv6_fwd(in);
    const Rwkv6Grads packed_grads = rwkv6_bwd(in, d_o, dht);
    at::Tensor du_sum = at::zeros_like(in.u);
    for (const Sequence& seq : sequences(1, shape.T, shape.cu_seqlens)) {
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        Rwkv6Inputs alone = in;
        alone.cu_seqlens.clear();
        alone.q = cut(in.q);
        alone.k = cut(in.k);
        alone.v = cut(in.v);
        alone.w = cut(in.w);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const Rwkv6Outputs single = rwkv6_fwd(alone);
        const Rwkv6Grads g = rwkv6_bwd(alone, cut(d_o), dht.narrow(0, seq.index, 1));
        EXPECT_TRUE(at::equal(single.o, cut(packed.o))) << seq.index;
        EXPECT_TRUE(at::equal(single.ht[0], packed.ht[seq.index])) << seq.index;
        EXPECT_TRUE(at::equal(g.dw, cut(packed_grads.dw))) << seq.index;
        EXPECT_TRUE(at::equal(g.dh0[0], packed_grads.dh0[seq.index])) << seq.index;
        du_sum += g.du;
    }
    // du sums over every sequence
    EXPECT_LE(rel_err(du_sum, packed_grads.du), 1e-14);
}

TEST(Rwkv6Ref, RejectsOtherDtypesAndShapes) {
    Rwkv6Inputs in = make_inputs({1, 4, 2, 4, 3, {}}, 1.0, true, 1);
    Rwkv6Inputs f32 = in;
    f32.k = in.k.to(at::kFloat);
    EXPECT_THROW(rwkv6_fwd(f32), InternalError);
    Rwkv6Inputs bad_u = in;
    bad_u.u = in.u.narrow(1, 0, 3);
    EXPECT_THROW(rwkv6_fwd(bad_u), ShapeError);
    EXPECT_THROW(rwkv6_bwd(in, at::ones_like(in.v).to(at::kFloat), {}), InternalError);
}

TEST(Rwkv6Ref, EveryOpStaysFloat64) {
    const Rwkv6Inputs in = make_inputs({1, 12, 2, 4, 3, {0, 5, 12}}, 1.0, true, 2);
    const at::Tensor d_o = at::ones_like(in.v);
    const at::Tensor dht = at::ones_like(in.h0);
    Rwkv6Outputs out, par;
    Rwkv6Grads grads;
    expect_only_fp64_ops(
        [&] {
            out = rwkv6_fwd(in);
            par = rwkv6_fwd_parallel(in);
            grads = rwkv6_bwd(in, d_o, dht);
        },
        in.q);
    for (const at::Tensor& t : {out.o, out.ht, par.o, grads.dq, grads.dw, grads.du, grads.dh0})
        EXPECT_EQ(t.scalar_type(), at::kDouble);
}

}  // namespace
}  // namespace lav::ref
