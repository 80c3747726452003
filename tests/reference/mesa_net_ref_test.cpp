// tests/reference/mesa_net_ref_test.cpp — the fp64 MesaNet reference against its materialised
// form, against autograd, and on its varlen and dtype rules. Not a kernel test.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/error.h"
#include "core/varlen.h"
#include "reference/mesa_net.h"

namespace lav::ref {
namespace {

// reference/README.md, rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10.
// Measured here (x86-64, LibTorch CPU): the forms differ by at most 6.3e-16, the gradients by at
// most 4.6e-16 from autograd.
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

void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// Inputs as FLA's MesaNet tests draw them (tests/ops/test_mesa.py): k unit-norm (or raw randn
// for the in-kernel norm), g = log U[0.8, 0.99], β = sigmoid(U[0, 1)), λ ∈ [0.25, 1),
// h_kk0 = u uᵀ with a unit u (symmetric PSD), h_kv0 ~ U[0, 1); q, v randn here.
MesaNetInputs make_inputs(const Shape& s, bool l2norm, bool with_h0, uint64_t seed) {
    test::Draw draw(seed);
    MesaNetInputs in;
    in.use_qk_l2norm_in_kernel = l2norm;
    in.q = draw.randn({s.B, s.T, s.H, s.K});
    in.k = draw.randn({s.B, s.T, s.H, s.K});
    if (!l2norm) in.k = in.k / in.k.norm(2, -1, /*keepdim=*/true);
    in.v = draw.randn({s.B, s.T, s.H, s.V});
    in.g = at::log(0.8 + 0.19 * draw.rand({s.B, s.T, s.H}));
    in.beta = at::sigmoid(draw.rand({s.B, s.T, s.H}));
    in.lamb = 0.25 + 0.75 * draw.rand({s.H, s.K});
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) {
        at::Tensor u = draw.rand({N, s.H, s.K});
        u = u / u.norm(2, -1, /*keepdim=*/true);
        in.h_kk0 = u.unsqueeze(3) * u.unsqueeze(2);
        in.h_kv0 = draw.rand({N, s.H, s.K, s.V});
    }
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

// ---- recurrence vs materialised form ----

using Case = std::tuple<Shape, bool, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, l2norm, with_h0] = info.param;
    return shape_name(shape) + (l2norm ? "_l2norm" : "_plain") + (with_h0 ? "_h0" : "_noh0");
}

class MesaNetRefForward : public testing::TestWithParam<Case> {};

TEST_P(MesaNetRefForward, RecurrenceMatchesMaterialisedForm) {
    const auto& [shape, l2norm, with_h0] = GetParam();
    const MesaNetInputs in = make_inputs(shape, l2norm, with_h0, 42);
    const MesaNetOutputs rec = mesa_net_fwd(in);
    const MesaNetOutputs mat = mesa_net_fwd_materialised(in);
    ASSERT_EQ(rec.o.sizes(), at::IntArrayRef({shape.B, shape.T, shape.H, shape.V}));
    test::expect_rel_err("o", rec.o, mat.o, kFormsRelTol);
    test::expect_rel_err("ht_kk", rec.ht_kk, mat.ht_kk, kFormsRelTol);
    test::expect_rel_err("ht_kv", rec.ht_kv, mat.ht_kv, kFormsRelTol);
    EXPECT_TRUE(test::all_finite(rec.o));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MesaNetRefForward,
                         testing::Combine(testing::Values(Shape{2, 48, 2, 16, 16, {}},
                                                          Shape{1, 1, 2, 8, 8, {}},
                                                          Shape{2, 33, 1, 12, 20, {}},
                                                          Shape{1, 60, 2, 16, 16, {0, 0, 17, 60}}),
                                          testing::Bool(), testing::Bool()),
                         case_name);

// ---- backward vs autograd ----

// The recurrence again, out of place and with its own norm and a plain solve, so that
// autograd can differentiate it; returns o and both final states.
std::tuple<at::Tensor, at::Tensor, at::Tensor> autograd_recurrence(const MesaNetInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    at::Tensor q = in.q, k = in.k;
    if (in.use_qk_l2norm_in_kernel) {
        q = q / (q * q).sum(-1, true).add(kMesaNetL2NormEps).sqrt();
        k = k / (k * k).sum(-1, true).add(kMesaNetL2NormEps).sqrt();
    }
    std::vector<std::vector<at::Tensor>> o_rows(B);
    std::vector<at::Tensor> kk_finals, kv_finals;
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor kk = in.h_kk0.defined() ? in.h_kk0[seq.index] : at::zeros({H, K, K}, kF64);
        at::Tensor kv = in.h_kv0.defined() ? in.h_kv0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            const at::Tensor a = in.g[seq.batch][t].exp().view({H, 1, 1});
            const at::Tensor kb =
                (k[seq.batch][t] * in.beta[seq.batch][t].unsqueeze(1)).unsqueeze(2);
            kk = a * kk + kb * k[seq.batch][t].unsqueeze(1);
            kv = a * kv + kb * in.v[seq.batch][t].unsqueeze(1);
            const at::Tensor x =
                at::linalg_solve(kk + at::diag_embed(in.lamb), q[seq.batch][t].unsqueeze(2));
            o_rows[seq.batch].push_back((kv * x).sum(1));
        }
        kk_finals.push_back(kk);
        kv_finals.push_back(kv);
    }
    return {test::stack_rows(o_rows), at::stack(kk_finals), at::stack(kv_finals)};
}

using GradCase = std::tuple<Shape, bool, bool>;

class MesaNetRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(MesaNetRefBackward, MatchesAutograd) {
    const auto& [shape, l2norm, with_h0] = GetParam();
    const MesaNetInputs in = make_inputs(shape, l2norm, with_h0, 7);
    test::Draw draw(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = draw.randn({shape.B, shape.T, shape.H, shape.V});
    const at::Tensor dht_kk = draw.randn({N, shape.H, shape.K, shape.K});
    const at::Tensor dht_kv = draw.randn({N, shape.H, shape.K, shape.V});
    const MesaNetGrads grads = mesa_net_bwd(in, d_o, dht_kk, dht_kv);

    MesaNetInputs leaf = in;
    std::vector<test::GradCheck> checks = {
        {"dq", &leaf.q, grads.dq},          {"dk", &leaf.k, grads.dk},
        {"dv", &leaf.v, grads.dv},          {"dg", &leaf.g, grads.dg},
        {"dbeta", &leaf.beta, grads.dbeta}, {"dlamb", &leaf.lamb, grads.dlamb}};
    if (with_h0) {
        checks.push_back({"dh_kk0", &leaf.h_kk0, grads.dh_kk0});
        checks.push_back({"dh_kv0", &leaf.h_kv0, grads.dh_kv0});
    }
    // both final states enter the loss: ht_kk·dht_kk rides on o's slot through one stacked
    // pair, so the driver's Σ o·d_o + Σ ht·dht covers all three terms
    const at::Tensor dht = at::cat({dht_kk.flatten(), dht_kv.flatten()});
    test::expect_grads_match_autograd(
        checks,
        [&] {
            const auto [o, kk, kv] = autograd_recurrence(leaf);
            return std::make_pair(o, at::cat({kk.flatten(), kv.flatten()}));
        },
        d_o, dht, kGradRelTol);
    EXPECT_EQ(grads.dh_kk0.defined(), with_h0);
}

// Checkpoints every c = ⌈√len⌉ steps: 20 (c = 5, ragged), 1, and a varlen batch of 0, 1, 3
// and 16 steps.
INSTANTIATE_TEST_SUITE_P(Shapes, MesaNetRefBackward,
                         testing::Combine(testing::Values(Shape{2, 20, 2, 6, 5, {}},
                                                          Shape{3, 1, 2, 4, 4, {}},
                                                          Shape{1, 20, 2, 6, 5, {0, 0, 1, 4, 20}}),
                                          testing::Bool(), testing::Bool()),
                         case_name);

// ---- varlen and dtype rules ----

TEST(MesaNetRef, EmptySequenceKeepsInitialStatesAndGradients) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const MesaNetInputs in = make_inputs(shape, true, true, 3);
    test::Draw draw(4);
    const at::Tensor d_o = draw.randn({1, 9, 2, 3});
    const at::Tensor dkk = draw.randn(in.h_kk0.sizes());
    const at::Tensor dkv = draw.randn(in.h_kv0.sizes());
    const MesaNetOutputs out = mesa_net_fwd(in);
    const MesaNetOutputs mat = mesa_net_fwd_materialised(in);
    const MesaNetGrads grads = mesa_net_bwd(in, d_o, dkk, dkv);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht_kk[n], in.h_kk0[n])) << n;
        EXPECT_TRUE(at::equal(out.ht_kv[n], in.h_kv0[n])) << n;
        EXPECT_TRUE(at::equal(mat.ht_kv[n], in.h_kv0[n])) << n;
        EXPECT_TRUE(at::equal(grads.dh_kk0[n], dkk[n])) << n;
        EXPECT_TRUE(at::equal(grads.dh_kv0[n], dkv[n])) << n;
    }
}

// Each packed sequence alone gives the packed result, bitwise (dλ sums over sequences, so it
// is checked as the sum of the parts, to rounding).
TEST(MesaNetRef, VarlenSequencesDoNotLeak) {
    const std::vector<int64_t> cu = {0, 0, 11, 30};
    const MesaNetInputs packed = make_inputs({1, 30, 2, 6, 5, cu}, false, true, 11);
    test::Draw draw(12);
    const at::Tensor d_o = draw.randn({1, 30, 2, 5});
    const MesaNetOutputs out = mesa_net_fwd(packed);
    const MesaNetGrads grads = mesa_net_bwd(packed, d_o, at::Tensor(), at::Tensor());
    at::Tensor dlamb = at::zeros_like(packed.lamb);
    for (const Sequence& seq : sequences(1, 30, cu)) {
        MesaNetInputs alone = packed;
        alone.cu_seqlens = {};
        for (at::Tensor* t : {&alone.q, &alone.k, &alone.v, &alone.g, &alone.beta})
            *t = test::seq_rows(*t, seq);
        alone.h_kk0 = test::state_row(packed.h_kk0, seq);
        alone.h_kv0 = test::state_row(packed.h_kv0, seq);
        const MesaNetOutputs a = mesa_net_fwd(alone);
        EXPECT_TRUE(at::equal(a.o, test::seq_rows(out.o, seq))) << seq.index;
        EXPECT_TRUE(at::equal(a.ht_kk[0], out.ht_kk[seq.index])) << seq.index;
        const MesaNetGrads ga = mesa_net_bwd(alone, test::seq_rows(d_o, seq), {}, {});
        EXPECT_TRUE(at::equal(ga.dk, test::seq_rows(grads.dk, seq))) << seq.index;
        EXPECT_TRUE(at::equal(ga.dg, test::seq_rows(grads.dg, seq))) << seq.index;
        EXPECT_TRUE(at::equal(ga.dh_kk0[0], grads.dh_kk0[seq.index])) << seq.index;
        dlamb += ga.dlamb;
    }
    EXPECT_LE(test::rel_err(dlamb, grads.dlamb), 1e-14);
}

TEST(MesaNetRef, EveryOpIsFp64) {
    const MesaNetInputs in = make_inputs({1, 6, 2, 4, 4, {}}, true, true, 2);
    const at::Tensor d_o = at::ones({1, 6, 2, 4}, kF64);
    test::expect_only_fp64_ops(
        [&] {
            mesa_net_fwd(in);
            mesa_net_fwd_materialised(in);
            mesa_net_bwd(in, d_o, in.h_kk0, in.h_kv0);
        },
        in.q);
}

TEST(MesaNetRef, RejectsNonFp64AndBadShapes) {
    const MesaNetInputs good = make_inputs({1, 4, 1, 4, 4, {}}, false, true, 1);
    const at::Tensor d_o = at::ones({1, 4, 1, 4}, kF64);
    test::expect_narrowed_field_throws<InternalError>(
        good,
        {&MesaNetInputs::q, &MesaNetInputs::k, &MesaNetInputs::v, &MesaNetInputs::g,
         &MesaNetInputs::beta, &MesaNetInputs::lamb, &MesaNetInputs::h_kk0, &MesaNetInputs::h_kv0},
        {[](const MesaNetInputs& x) { mesa_net_fwd(x); },
         [](const MesaNetInputs& x) { mesa_net_fwd_materialised(x); },
         [&](const MesaNetInputs& x) { mesa_net_bwd(x, d_o, {}, {}); }});
    MesaNetInputs bad = good;
    bad.lamb = good.lamb.slice(1, 0, 3);
    EXPECT_THROW(mesa_net_fwd(bad), ShapeError);
    bad = good;
    bad.h_kk0 = good.h_kv0.slice(3, 0, 3);
    EXPECT_THROW(mesa_net_fwd(bad), ShapeError);
}

}  // namespace
}  // namespace lav::ref
