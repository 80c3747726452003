// tests/reference/comba_ref_test.cpp — the fp64 Comba reference against its WY form, against
// autograd, and on its varlen and dtype rules. Not a kernel test.
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
#include "reference/comba.h"

namespace lav::ref {
namespace {

using lav::test::record_error;
using lav::test::rel_err;

// reference/README.md, rule 4. Measured (x86-64, LibTorch 2.11 CPU): the forms agree to 7.2e-15 on
// o and ht, the gradients to 3.4e-16 of autograd's, so both bounds leave orders of margin.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

struct Shape {
    int64_t B, T, H, K, V;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    std::string name = "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" +
                       std::to_string(s.H) + "_K" + std::to_string(s.K) + "_V" +
                       std::to_string(s.V);
    return s.cu_seqlens.empty() ? name : name + "_varlen";
}

void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// FLA's comba tests: randn q, k, p, v, h0 (k and p unit-normalised here unless the kernel norm
// does it), g = logsigmoid(randn) / `norm`, β ~ U[0, 1).
CombaInputs make_inputs(const Shape& s, bool l2norm, bool with_h0, double norm, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    CombaInputs in;
    in.use_qk_l2norm_in_kernel = l2norm;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);
    in.p = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);
    if (!l2norm) {
        in.k = in.k / in.k.norm(2, -1, /*keepdim=*/true);
        in.p = in.p / in.p.norm(2, -1, /*keepdim=*/true);
    }
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);
    in.g = at::log_sigmoid(at::randn({s.B, s.T, s.H}, gen, kF64)) / norm;
    in.beta = at::rand({s.B, s.T, s.H}, gen, kF64);
    if (with_h0) in.h0 = at::randn({num_sequences(s.B, s.cu_seqlens), s.H, s.K, s.V}, gen, kF64);
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

// ---- recurrence vs WY form ----

using Case = std::tuple<Shape, bool, bool, double>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, l2norm, with_h0, norm] = info.param;
    return shape_name(shape) + (l2norm ? "_l2norm" : "_plain") + (with_h0 ? "_h0" : "_noh0") +
           (norm < 1.0 ? "_strongdecay" : "_decay");
}

class CombaRefForward : public testing::TestWithParam<Case> {};

TEST_P(CombaRefForward, RecurrenceMatchesWyForm) {
    const auto& [shape, l2norm, with_h0, norm] = GetParam();
    const CombaInputs in = make_inputs(shape, l2norm, with_h0, norm, 42);
    const CombaOutputs rec = comba_fwd(in);
    const CombaOutputs wy = comba_fwd_wy(in);
    const double err_o = rel_err(rec.o, wy.o), err_ht = rel_err(rec.ht, wy.ht);
    record_error("rel_err_o", err_o);
    record_error("rel_err_ht", err_ht);
    EXPECT_LE(err_o, kFormsRelTol);
    EXPECT_LE(err_ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CombaRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 2, 16, 16, {}}, Shape{3, 1, 2, 4, 4, {}},
                                     Shape{2, 50, 1, 32, 48, {}},
                                     Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 2, 64, 64, {}}),
                     testing::Bool(), testing::Bool(), testing::Values(1.0, 0.1)),
    case_name);

// ---- backward vs autograd ----

// The recurrence again, out of place and with its own norm, for autograd to differentiate.
CombaOutputs autograd_recurrence(const CombaInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    const auto norm = [&](const at::Tensor& x) {
        return in.use_qk_l2norm_in_kernel ? x / (x * x).sum(-1, true).add(kCombaL2NormEps).sqrt()
                                          : x;
    };
    const at::Tensor q = norm(in.q), k = norm(in.k), p = norm(in.p);
    std::vector<std::vector<at::Tensor>> o_rows(B);
    std::vector<at::Tensor> finals;
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            const int64_t b = seq.batch;
            const at::Tensor r = in.v[b][t] - (S * p[b][t].unsqueeze(2)).sum(1);  // [H, V]
            const at::Tensor u = in.beta[b][t].unsqueeze(1) * r;
            S = S * in.g[b][t].exp().view({H, 1, 1}) + k[b][t].unsqueeze(2) * u.unsqueeze(1);
            o_rows[b].push_back((S * q[b][t].unsqueeze(2)).sum(1) * scale);
        }
        finals.push_back(S);
    }
    std::vector<at::Tensor> o_batches;
    for (const auto& r : o_rows) o_batches.push_back(at::stack(r));
    return {at::stack(o_batches), at::stack(finals), {}};
}

using GradCase = std::tuple<Shape, bool, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, l2norm, with_h0, with_dht] = info.param;
    return shape_name(shape) + (l2norm ? "_l2norm" : "_plain") + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class CombaRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(CombaRefBackward, MatchesAutograd) {
    const auto& [shape, l2norm, with_h0, with_dht] = GetParam();
    const CombaInputs in = make_inputs(shape, l2norm, with_h0, 1.0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const at::Tensor dht =
        with_dht ? at::randn({num_sequences(shape.B, shape.cu_seqlens), shape.H, shape.K, shape.V},
                             gen, kF64)
                 : at::Tensor();
    const CombaGrads grads = comba_bwd(in, d_o, dht);

    CombaInputs leaf = in;
    std::vector<std::pair<std::string, at::Tensor*>> fields = {
        {"dq", &leaf.q}, {"dk", &leaf.k}, {"dv", &leaf.v},
        {"dp", &leaf.p}, {"dg", &leaf.g}, {"dbeta", &leaf.beta}};
    std::vector<at::Tensor> got = {grads.dq, grads.dk, grads.dv, grads.dp, grads.dg, grads.dbeta};
    if (in.h0.defined()) {
        fields.push_back({"dh0", &leaf.h0});
        got.push_back(grads.dh0);
    }
    std::vector<at::Tensor> wrt;
    for (auto& [name, field] : fields) {
        *field = field->clone().set_requires_grad(true);
        wrt.push_back(*field);
    }
    const CombaOutputs out = autograd_recurrence(leaf);
    at::Tensor loss = (out.o * d_o).sum();
    if (dht.defined()) loss = loss + (out.ht * dht).sum();
    const std::vector<at::Tensor> expected = torch::autograd::grad({loss}, wrt);
    for (size_t i = 0; i < fields.size(); ++i) {
        ASSERT_TRUE(got[i].defined()) << fields[i].first;
        const double err = rel_err(got[i], expected[i]);
        record_error("rel_err_" + fields[i].first, err);
        EXPECT_LE(err, kGradRelTol) << fields[i].first;
    }
    EXPECT_EQ(grads.dh0.defined(), in.h0.defined());
}

// Checkpoints every ⌈√len⌉ steps: 40 (ragged last segment), 36 (a square), 1, and varlen
// lengths 0, 1, 2, 3, 24, 34.
INSTANTIATE_TEST_SUITE_P(
    Shapes, CombaRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, {}}, Shape{2, 36, 1, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 5, {}},
                                     Shape{1, 64, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::Bool(), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- semantics, varlen, dtype rules ----

// One step from h0 by hand: the correction reads h0 before the decay,
// S_0 = e^{g_0} h0 + β_0 k_0 (v_0 − h0ᵀ p_0)ᵀ.
TEST(CombaRef, OneStepClosedForm) {
    const CombaInputs in = make_inputs({1, 1, 2, 4, 3, {}}, false, true, 1.0, 5);
    const CombaOutputs out = comba_fwd(in);
    for (int64_t h = 0; h < 2; ++h) {
        const at::Tensor k = in.k[0][0][h].unsqueeze(1), p = in.p[0][0][h].unsqueeze(1);
        const double beta = in.beta[0][0][h].item<double>();
        const double a = std::exp(in.g[0][0][h].item<double>());
        const at::Tensor h0 = in.h0[0][h];
        const at::Tensor expected = a * h0 + beta * k.mm(in.v[0][0][h].unsqueeze(0) - p.t().mm(h0));
        EXPECT_LE(rel_err(out.ht[0][h], expected), 1e-15);
    }
}

TEST(CombaRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const CombaInputs in = make_inputs(shape, true, true, 1.0, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);
    const CombaOutputs out = comba_fwd(in);
    const CombaOutputs wy = comba_fwd_wy(in);
    const CombaGrads grads = comba_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(wy.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
}

TEST(CombaRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 100, 2, 8, 6, {0, 37, 100}};
    const CombaInputs packed = make_inputs(shape, false, true, 1.0, 9);
    const CombaOutputs all = comba_fwd(packed);
    for (int64_t n = 0; n < 2; ++n) {
        const int64_t b = shape.cu_seqlens[n], e = shape.cu_seqlens[n + 1];
        CombaInputs alone = packed;
        for (at::Tensor* t : {&alone.q, &alone.k, &alone.v, &alone.p, &alone.g, &alone.beta})
            *t = t->narrow(1, b, e - b);
        alone.h0 = packed.h0.narrow(0, n, 1);
        alone.cu_seqlens.clear();
        const CombaOutputs one = comba_fwd(alone);
        EXPECT_TRUE(at::equal(one.o, all.o.narrow(1, b, e - b))) << "sequence " << n;
        EXPECT_TRUE(at::equal(one.ht[0], all.ht[n])) << "sequence " << n;
    }
}

TEST(CombaRef, ScaleZeroMeansInverseSqrtK) {
    CombaInputs in = make_inputs({1, 20, 2, 16, 4, {}}, false, false, 1.0, 11);
    const CombaOutputs a = comba_fwd(in);
    in.scale = 0.25;
    const CombaOutputs b = comba_fwd(in);
    EXPECT_TRUE(at::equal(a.o, b.o));
}

TEST(CombaRef, RejectsNonFp64AndBadShapes) {
    CombaInputs in = make_inputs({1, 4, 2, 4, 3, {}}, false, false, 1.0, 13);
    CombaInputs f32 = in;
    f32.p = in.p.to(at::kFloat);
    EXPECT_THROW(comba_fwd(f32), InternalError);
    CombaInputs bad = in;
    bad.p = in.p.narrow(3, 0, 3);
    EXPECT_THROW(comba_fwd(bad), ShapeError);
}

}  // namespace
}  // namespace lav::ref
