// tests/reference/rwkv7_ref_test.cpp — the fp64 rwkv7 reference (DPLR and IPLR) against its
// chunkwise form, against autograd, and on its stability, dtype and varlen rules. Not a kernel
// test.
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
#include "reference/rwkv7.h"

namespace lav::ref {
namespace {

using namespace lav::test;

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10
// (measured values in reference/rwkv7.md).
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

// How the low-rank pair and the decay are drawn.
enum class Form {
    kRwkv7,  // DPLR, a = −k̂ (L2-normalised), b = k̂ ⊙ η with η ~ U[0, 1): RWKV-7's convention
    kNegA,    // DPLR, a = k̂, b = −a: FLA's DPLR test convention
    kIplr,    // no decay, a = k̂, b = −a
    kStrong,  // DPLR, RWKV-7's pair, w = logsigmoid(randn) / 0.1
};

std::string form_name(Form f) {
    switch (f) {
        case Form::kRwkv7:
            return "rwkv7";
        case Form::kNegA:
            return "nega";
        case Form::kIplr:
            return "iplr";
        case Form::kStrong:
            return "strong";
    }
    return "";
}

Rwkv7Inputs make_inputs(const Shape& s, Form form, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    const std::vector<int64_t> key = {s.B, s.T, s.H, s.K};
    Rwkv7Inputs in;
    in.q = at::randn(key, gen, kF64);
    in.k = at::randn(key, gen, kF64);
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);
    const at::Tensor raw = at::randn(key, gen, kF64);
    const at::Tensor kk = raw / raw.norm(2, {-1}, true);
    const at::Tensor eta = at::rand(key, gen, kF64);
    const at::Tensor logits = at::randn(key, gen, kF64);
    if (form == Form::kRwkv7 || form == Form::kStrong) {
        in.a = -kk;
        in.b = kk * eta;
    } else {
        in.a = kk;
        in.b = -kk;
    }
    if (form != Form::kIplr) in.w = at::log_sigmoid(logits) / (form == Form::kStrong ? 0.1 : 1.0);
    if (with_h0) in.h0 = at::randn({num_sequences(s.B, s.cu_seqlens), s.H, s.K, s.V}, gen, kF64);
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

constexpr Form kForms[] = {Form::kRwkv7, Form::kNegA, Form::kIplr, Form::kStrong};

using FormCase = std::tuple<Shape, Form, bool>;

class Rwkv7RefForward : public testing::TestWithParam<FormCase> {};

TEST_P(Rwkv7RefForward, RecurrenceMatchesChunkwiseForm) {
    const auto& [shape, form, with_h0] = GetParam();
    Rwkv7Inputs in = make_inputs(shape, form, with_h0, 42);
    in.scale = 1.0;
    const Rwkv7Outputs rec = rwkv7_fwd(in);
    for (int64_t chunk : {16, 64}) {
        const Rwkv7Outputs chw = rwkv7_fwd_chunkwise(in, chunk);
        expect_rel_err("o_chunk" + std::to_string(chunk), rec.o, chw.o, kFormsRelTol);
        expect_rel_err("ht_chunk" + std::to_string(chunk), rec.ht, chw.ht, kFormsRelTol);
    }
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

std::string name_forward(const testing::TestParamInfo<FormCase>& info) {
    const auto& [shape, form, with_h0] = info.param;
    return shape_name(shape) + "_" + form_name(form) + (with_h0 ? "_h0" : "_noh0");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Rwkv7RefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, 16, {}}, Shape{1, 1, 2, 8, 8, {}},
                                     Shape{2, 50, 2, 32, 48, {}},
                                     Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{1, 256, 4, 64, 64, {}}),
                     testing::ValuesIn(kForms), testing::Bool()),
    name_forward);

// With a = 0 the low-rank term vanishes and rwkv7 is gla: S_t = diag(e^{w_t}) S + k vᵀ. Checked
// against that closed form for ht.
TEST(Rwkv7Ref, ZeroLowRankIsPerKeyDecay) {
    Rwkv7Inputs in = make_inputs({1, 20, 2, 4, 3, {}}, Form::kRwkv7, true, 13);
    in.a = at::zeros_like(in.a);
    const Rwkv7Outputs out = rwkv7_fwd(in);
    const at::Tensor k = in.k[0].permute({1, 0, 2});         // [H, T, K]
    const at::Tensor v = in.v[0].permute({1, 0, 2});         // [H, T, V]
    const at::Tensor G = in.w[0].permute({1, 0, 2});         // [H, T, K]
    const at::Tensor suffix = G.sum(1, true) - G.cumsum(1);  // [H, T, K]
    const at::Tensor expected =
        in.h0[0] * G.sum(1).exp().unsqueeze(2) + at::bmm((k * suffix.exp()).transpose(1, 2), v);
    EXPECT_LE(rel_err(out.ht[0], expected), 1e-13);
}

// RWKV-7's transition diag(e^w) − η k̂ k̂ᵀ (and FLA's D − a aᵀ, IPLR's I − a aᵀ) has no
// eigenvalue above 1 in magnitude, so a long sequence keeps its state bounded.
TEST(Rwkv7Ref, LongSequenceStaysBounded) {
    for (Form form : {Form::kRwkv7, Form::kNegA, Form::kIplr}) {
        const Rwkv7Inputs in = make_inputs({1, 4096, 1, 16, 8, {}}, form, true, 17);
        const Rwkv7Outputs out = rwkv7_fwd(in);
        EXPECT_TRUE(out.o.isfinite().all().item<bool>()) << form_name(form);
        // each step adds k vᵀ (‖k‖‖v‖ ≈ √(16·8) ≈ 11) to a non-expanding state; the bound is loose
        EXPECT_LT(out.ht.abs().max().item<double>(), 1e4) << form_name(form);
    }
}

// ---- backward vs autograd ----

Rwkv7Outputs autograd_recurrence(const Rwkv7Inputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    std::vector<std::vector<at::Tensor>> o_rows(B);
    std::vector<at::Tensor> finals;
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            const int64_t r = seq.batch;
            const at::Tensor ha = (S * in.a[r][t].unsqueeze(2)).sum(1);  // [H, V]
            const at::Tensor decayed = in.w.defined() ? S * in.w[r][t].exp().unsqueeze(2) : S;
            S = decayed + in.b[r][t].unsqueeze(2) * ha.unsqueeze(1) +
                in.k[r][t].unsqueeze(2) * in.v[r][t].unsqueeze(1);
            o_rows[r].push_back((S * in.q[r][t].unsqueeze(2)).sum(1) * scale);
        }
        finals.push_back(S);
    }
    return {stack_rows(o_rows), at::stack(finals), {}};
}

using GradCase = std::tuple<Shape, Form, bool>;

class Rwkv7RefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(Rwkv7RefBackward, MatchesAutograd) {
    const auto& [shape, form, with_h0] = GetParam();
    Rwkv7Inputs in = make_inputs(shape, form, with_h0, 7);
    in.scale = 0.3;
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const at::Tensor dht = at::randn({N, shape.H, shape.K, shape.V}, gen, kF64);
    const Rwkv7Grads grads = rwkv7_bwd(in, d_o, dht);

    ASSERT_EQ(grads.dw.defined(), in.w.defined());
    ASSERT_EQ(grads.dh0.defined(), in.h0.defined());
    Rwkv7Inputs leaf = in;
    std::vector<GradCheck> checks = {{"dq", &leaf.q, grads.dq},
                                     {"dk", &leaf.k, grads.dk},
                                     {"dv", &leaf.v, grads.dv},
                                     {"da", &leaf.a, grads.da},
                                     {"db", &leaf.b, grads.db}};
    if (in.w.defined()) checks.push_back({"dw", &leaf.w, grads.dw});
    if (in.h0.defined()) checks.push_back({"dh0", &leaf.h0, grads.dh0});
    expect_grads_match_autograd(
        checks,
        [&] {
            const Rwkv7Outputs out = autograd_recurrence(leaf);
            return std::make_pair(out.o, out.ht);
        },
        d_o, dht, kGradRelTol);
}

std::string name_backward(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, form, with_h0] = info.param;
    return shape_name(shape) + "_" + form_name(form) + (with_h0 ? "_h0" : "_noh0");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Rwkv7RefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, {}}, Shape{2, 36, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 5, {}},
                                     Shape{1, 64, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kForms), testing::Bool()),
    name_backward);

// a and b drawn independently (no stability needed at T = 12): the gradients of the two
// low-rank factors must not rely on b = λ a
TEST(Rwkv7Ref, BackwardWithIndependentLowRankFactors) {
    Rwkv7Inputs in = make_inputs({1, 12, 2, 5, 4, {}}, Form::kRwkv7, true, 21);
    at::Generator gen = at::detail::createCPUGenerator(22);
    in.a = at::randn(in.a.sizes(), gen, kF64) * 0.4;
    in.b = at::randn(in.b.sizes(), gen, kF64) * 0.4;
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const Rwkv7Grads grads = rwkv7_bwd(in, d_o, {});
    Rwkv7Inputs leaf = in;
    expect_grads_match_autograd(
        {{"da", &leaf.a, grads.da}, {"db", &leaf.b, grads.db}},
        [&] {
            const Rwkv7Outputs out = autograd_recurrence(leaf);
            return std::make_pair(out.o, out.ht);
        },
        d_o, at::Tensor(), kGradRelTol);
}

// ---- varlen and dtype rules ----

TEST(Rwkv7Ref, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const Rwkv7Inputs in = make_inputs(shape, Form::kRwkv7, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);
    const Rwkv7Outputs out = rwkv7_fwd(in);
    const Rwkv7Outputs chw = rwkv7_fwd_chunkwise(in, 16);
    const Rwkv7Grads grads = rwkv7_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << n;
        EXPECT_TRUE(at::equal(chw.ht[n], in.h0[n])) << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << n;
    }
}

TEST(Rwkv7Ref, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 100, 2, 8, 6, {0, 37, 37, 100}};
    const Rwkv7Inputs in = make_inputs(shape, Form::kRwkv7, true, 5);
    at::Generator gen = at::detail::createCPUGenerator(6);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);
    const Rwkv7Outputs packed = rwkv7_fwd(in);
    const Rwkv7Grads packed_grads = rwkv7_bwd(in, d_o, dht);
    for (const Sequence& seq : sequences(1, shape.T, shape.cu_seqlens)) {
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        Rwkv7Inputs alone = in;
        alone.cu_seqlens.clear();
        for (at::Tensor* f : {&alone.q, &alone.w, &alone.k, &alone.v, &alone.a, &alone.b})
            *f = cut(*f);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const Rwkv7Outputs single = rwkv7_fwd(alone);
        const Rwkv7Grads g = rwkv7_bwd(alone, cut(d_o), dht.narrow(0, seq.index, 1));
        EXPECT_TRUE(at::equal(single.o, cut(packed.o))) << seq.index;
        EXPECT_TRUE(at::equal(single.ht[0], packed.ht[seq.index])) << seq.index;
        EXPECT_TRUE(at::equal(g.da, cut(packed_grads.da))) << seq.index;
        EXPECT_TRUE(at::equal(g.dh0[0], packed_grads.dh0[seq.index])) << seq.index;
    }
}

TEST(Rwkv7Ref, RejectsOtherDtypesAndShapes) {
    const Rwkv7Inputs in = make_inputs({1, 4, 2, 4, 3, {}}, Form::kRwkv7, true, 1);
    Rwkv7Inputs f32 = in;
    f32.a = in.a.to(at::kFloat);
    EXPECT_THROW(rwkv7_fwd(f32), InternalError);
    Rwkv7Inputs bad_b = in;
    bad_b.b = in.b.narrow(3, 0, 3);
    EXPECT_THROW(rwkv7_fwd(bad_b), ShapeError);
    EXPECT_THROW(rwkv7_bwd(in, at::ones_like(in.v).to(at::kHalf), {}), InternalError);
}

TEST(Rwkv7Ref, EveryOpStaysFloat64) {
    const Rwkv7Inputs in = make_inputs({1, 12, 2, 4, 3, {0, 5, 12}}, Form::kRwkv7, true, 2);
    const at::Tensor d_o = at::ones_like(in.v);
    const at::Tensor dht = at::ones_like(in.h0);
    Rwkv7Outputs out, chw;
    Rwkv7Grads grads;
    expect_only_fp64_ops(
        [&] {
            out = rwkv7_fwd(in);
            chw = rwkv7_fwd_chunkwise(in, 4);
            grads = rwkv7_bwd(in, d_o, dht);
        },
        in.q);
    for (const at::Tensor& t : {out.o, out.ht, chw.o, grads.dq, grads.dw, grads.da, grads.db})
        EXPECT_EQ(t.scalar_type(), at::kDouble);
}

}  // namespace
}  // namespace lav::ref
