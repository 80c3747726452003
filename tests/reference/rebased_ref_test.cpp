// tests/reference/rebased_ref_test.cpp — the fp64 ReBased reference (quadratic form) against its
// feature-map recurrence and against autograd. Not a kernel test.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "common/family_test.h"
#include "core/error.h"
#include "core/varlen.h"
#include "reference/rebased.h"

namespace lav::ref {
namespace {

using lav::test::record_error;
using lav::test::rel_err;

// NUMERICS.md rule 4. Measured (x86-64, LibTorch 2.11 CPU): the two forms agree to 8.0e-15, the
// gradients to 1.3e-15 of autograd's.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

struct Shape {
    int64_t B, T, H, K, V;
    std::vector<int64_t> cu_seqlens;
};

std::string shape_name(const Shape& s) {
    std::string name = "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" +
                       std::to_string(s.H) + "_K" + std::to_string(s.K) + "_V" +
                       std::to_string(s.V);
    return s.cu_seqlens.empty() ? name : name + "_varlen";
}

void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

RebasedInputs make_inputs(const Shape& s, bool use_normalize, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    RebasedInputs in;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);
    in.cu_seqlens = s.cu_seqlens;
    in.use_normalize = use_normalize;
    return in;
}

using Case = std::tuple<Shape, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, use_normalize] = info.param;
    return shape_name(shape) + (use_normalize ? "_norm" : "_nonorm");
}

// T = 300 spans two query blocks of the quadratic form.
const auto kShapes =
    testing::Values(Shape{2, 64, 2, 16, 16, {}}, Shape{3, 1, 2, 4, 4, {}},
                    Shape{1, 300, 2, 8, 24, {}}, Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}});

class RebasedRefForward : public testing::TestWithParam<Case> {};

TEST_P(RebasedRefForward, QuadraticMatchesFeatureMapRecurrence) {
    const auto& [shape, use_normalize] = GetParam();
    const RebasedInputs in = make_inputs(shape, use_normalize, 42);
    const double err = rel_err(rebased_fwd(in), rebased_fwd_recurrent(in));
    record_error("rel_err_o", err);
    EXPECT_LE(err, kFormsRelTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RebasedRefForward, testing::Combine(kShapes, testing::Bool()),
                         case_name);

// The definition, written out for autograd: full L×L scores per sequence.
at::Tensor autograd_form(const RebasedInputs& in) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(in.q.size(3)));
    std::vector<at::Tensor> pieces(in.q.size(0));
    std::vector<std::vector<at::Tensor>> rows(in.q.size(0));
    for (const Sequence& seq : sequences(in.q.size(0), in.q.size(1), in.cu_seqlens)) {
        const auto part = [&](const at::Tensor& x) {
            return x[seq.batch].narrow(0, seq.begin, seq.length()).transpose(0, 1);
        };
        const at::Tensor x = at::matmul(part(in.q), part(in.k).transpose(1, 2)) * scale;
        const at::Tensor f = (x * x).tril();
        at::Tensor o = at::matmul(f, part(in.v));
        if (in.use_normalize) o = o / (f.sum(2, true) + in.eps);
        rows[seq.batch].push_back(o.transpose(0, 1));
    }
    for (size_t b = 0; b < rows.size(); ++b) pieces[b] = at::cat(rows[b], 0);
    return at::stack(pieces);
}

class RebasedRefBackward : public testing::TestWithParam<Case> {};

TEST_P(RebasedRefBackward, MatchesAutograd) {
    const auto& [shape, use_normalize] = GetParam();
    const RebasedInputs in = make_inputs(shape, use_normalize, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);
    const RebasedGrads grads = rebased_bwd(in, d_o);
    RebasedInputs leaf = in;
    leaf.q = in.q.clone().set_requires_grad(true);
    leaf.k = in.k.clone().set_requires_grad(true);
    leaf.v = in.v.clone().set_requires_grad(true);
    const auto expected =
        torch::autograd::grad({(autograd_form(leaf) * d_o).sum()}, {leaf.q, leaf.k, leaf.v});
    const std::vector<std::pair<const char*, at::Tensor>> got = {
        {"dq", grads.dq}, {"dk", grads.dk}, {"dv", grads.dv}};
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = rel_err(got[i].second, expected[i]);
        record_error(std::string("rel_err_") + got[i].first, err);
        EXPECT_LE(err, kGradRelTol) << got[i].first;
    }
}

// At T = 1 with the normaliser o = v·f/(f + eps) and dq, dk are O(eps): a relative check of
// them measures only cancellation, so the shortest backward case has T = 2.
INSTANTIATE_TEST_SUITE_P(Shapes, RebasedRefBackward,
                         testing::Combine(testing::Values(Shape{2, 64, 2, 16, 16, {}},
                                                          Shape{3, 2, 2, 4, 4, {}},
                                                          Shape{1, 300, 2, 8, 24, {}},
                                                          Shape{1, 80, 2, 8, 6, {0, 0, 1, 37, 80}}),
                                          testing::Bool()),
                         case_name);

TEST(RebasedRef, FirstPositionIsItsOwnValue) {
    // with one key the normalised output is v_0 · f / (f + eps)
    const RebasedInputs in = make_inputs({1, 1, 2, 4, 3, {}}, true, 3);
    const at::Tensor x = (in.q * in.k).sum(-1, true) * 0.5;
    const at::Tensor f = x * x;
    EXPECT_LE(rel_err(rebased_fwd(in), in.v * f / (f + kRebasedNormEps)), 1e-15);
}

TEST(RebasedRef, UseScaleFalseMeansUnscaledScores) {
    RebasedInputs raw = make_inputs({1, 30, 2, 16, 6, {}}, true, 11);
    raw.use_scale = false;
    RebasedInputs scaled = raw;
    scaled.use_scale = true;
    scaled.q = raw.q * 4.0;  // K^-0.5 = 1/4 undone
    EXPECT_LE(rel_err(rebased_fwd(raw), rebased_fwd(scaled)), 1e-14);
}

TEST(RebasedRef, VarlenSequencesDoNotLeak) {
    const RebasedInputs packed = make_inputs({1, 100, 2, 8, 6, {0, 37, 100}}, true, 9);
    const at::Tensor all = rebased_fwd(packed);
    RebasedInputs alone = packed;
    alone.cu_seqlens.clear();
    for (at::Tensor* t : {&alone.q, &alone.k, &alone.v}) *t = t->narrow(1, 37, 63);
    EXPECT_LE(rel_err(rebased_fwd(alone), all.narrow(1, 37, 63)), 1e-15);
}

TEST(RebasedRef, RejectsNonFp64AndBadShapes) {
    RebasedInputs in = make_inputs({1, 4, 2, 4, 3, {}}, true, 13);
    RebasedInputs f32 = in;
    f32.v = in.v.to(at::kFloat);
    EXPECT_THROW(rebased_fwd(f32), InternalError);
    RebasedInputs bad = in;
    bad.k = in.k.narrow(3, 0, 3);
    EXPECT_THROW(rebased_fwd(bad), ShapeError);
}

}  // namespace
}  // namespace lav::ref
