// tests/reference/based_ref_test.cpp — the fp64 Based reference (quadratic form) against its
// feature-map recurrence and against autograd. Not a kernel test. The test bodies are shared
// with rebased in common/feature_map_ref_test.h.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "common/feature_map_ref_test.h"
#include "reference/based.h"

namespace lav::ref {
namespace {

using lav::test::rel_err;
using namespace lav::test::feature_map;

struct Based {
    using Inputs = BasedInputs;
    static void set_norm(Inputs& in, bool on) { in.use_norm = on; }
    static bool norm(const Inputs& in) { return in.use_norm; }
    static double eps(const Inputs&) { return kBasedNormEps; }
    static at::Tensor score(const at::Tensor& x) { return 1.0 + x + x * x / 2.0; }
    static at::Tensor fwd(const Inputs& in) { return based_fwd(in); }
    static at::Tensor fwd_recurrent(const Inputs& in) { return based_fwd_recurrent(in); }
    static BasedGrads bwd(const Inputs& in, const at::Tensor& d_o) { return based_bwd(in, d_o); }
};

class BasedRefForward : public testing::TestWithParam<RefCase> {};

TEST_P(BasedRefForward, QuadraticMatchesFeatureMapRecurrence) {
    expect_forms_agree<Based>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, BasedRefForward,
                         testing::Combine(forward_shapes(), testing::Bool()), case_name);

class BasedRefBackward : public testing::TestWithParam<RefCase> {};

TEST_P(BasedRefBackward, MatchesAutograd) { expect_grads_match_autograd_form<Based>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Shapes, BasedRefBackward,
                         testing::Combine(backward_shapes(), testing::Bool()), case_name);

TEST(BasedRef, FirstPositionIsItsOwnValue) { expect_first_position_is_its_own_value<Based>(); }

TEST(BasedRef, VarlenSequencesDoNotLeak) { expect_varlen_sequences_do_not_leak<Based>(); }

TEST(BasedRef, RejectsNonFp64AndBadShapes) { expect_rejects_non_fp64_and_bad_shapes<Based>(); }

}  // namespace
}  // namespace lav::ref
