// tests/reference/rebased_ref_test.cpp — the fp64 ReBased reference (quadratic form) against its
// feature-map recurrence and against autograd. Not a kernel test. The test bodies are shared
// with based in common/feature_map_ref_test.h.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/feature_map_ref_test.h"
#include "reference/rebased.h"

namespace lav::ref {
namespace {

using lav::test::rel_err;
using namespace lav::test::feature_map;

struct Rebased {
    using Inputs = RebasedInputs;
    static void set_norm(Inputs& in, bool on) { in.use_normalize = on; }
    static bool norm(const Inputs& in) { return in.use_normalize; }
    static double eps(const Inputs& in) { return in.eps; }
    static at::Tensor score(const at::Tensor& x) { return x * x; }
    static at::Tensor fwd(const Inputs& in) { return rebased_fwd(in); }
    static at::Tensor fwd_recurrent(const Inputs& in) { return rebased_fwd_recurrent(in); }
    static RebasedGrads bwd(const Inputs& in, const at::Tensor& d_o) {
        return rebased_bwd(in, d_o);
    }
};

class RebasedRefForward : public testing::TestWithParam<RefCase> {};

TEST_P(RebasedRefForward, QuadraticMatchesFeatureMapRecurrence) {
    expect_forms_agree<Rebased>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, RebasedRefForward,
                         testing::Combine(forward_shapes(), testing::Bool()), case_name);

class RebasedRefBackward : public testing::TestWithParam<RefCase> {};

TEST_P(RebasedRefBackward, MatchesAutograd) {
    expect_grads_match_autograd_form<Rebased>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, RebasedRefBackward,
                         testing::Combine(backward_shapes(), testing::Bool()), case_name);

TEST(RebasedRef, FirstPositionIsItsOwnValue) { expect_first_position_is_its_own_value<Rebased>(); }

TEST(RebasedRef, UseScaleFalseMeansUnscaledScores) {
    RebasedInputs raw = make_inputs<Rebased>({1, 30, 2, 16, 6, {}}, true, 11);
    raw.use_scale = false;
    RebasedInputs scaled = raw;
    scaled.use_scale = true;
    scaled.q = raw.q * 4.0;  // K^-0.5 = 1/4 undone
    EXPECT_LE(rel_err(rebased_fwd(raw), rebased_fwd(scaled)), 1e-14);
}

TEST(RebasedRef, VarlenSequencesDoNotLeak) { expect_varlen_sequences_do_not_leak<Rebased>(); }

TEST(RebasedRef, RejectsNonFp64AndBadShapes) { expect_rejects_non_fp64_and_bad_shapes<Rebased>(); }

}  // namespace
}  // namespace lav::ref
