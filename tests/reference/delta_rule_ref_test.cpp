// tests/reference/delta_rule_ref_test.cpp — the fp64 delta rule reference against its WY form,
// against autograd, and on its dtype and varlen rules. Not a kernel test.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <iomanip>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/varlen.h"
#include "reference/delta_rule.h"

namespace lav::ref {
namespace {

// NUMERICS.md rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10. Measured
// here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 1.1e-15 on o and ht, the
// gradients by at most 4e-16 from autograd, so both bounds leave two orders of margin or more.
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

// gtest prints the parameters of a failed case with this
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// Inputs as FLA's tests draw them: randn q, k, v, h0 and β ∈ [0, β_max). Without the in-kernel
// norm k is L2-normalised here, which keeps the state bounded (‖I − β k kᵀ‖ ≤ 1 for β ≤ 2);
// with it, the raw randn rows go in and the reference normalises them.
DeltaRuleInputs make_inputs(const Shape& s, bool l2norm, bool with_h0, uint64_t seed,
                            double beta_max = 1.0) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    DeltaRuleInputs in;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    if (!l2norm) in.k = in.k / in.k.norm(2, -1, /*keepdim=*/true);
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);          // [B, T, H, V]
    in.beta = at::rand({s.B, s.T, s.H}, gen, kF64) * beta_max;  // [B, T, H]
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) in.h0 = at::randn({N, s.H, s.K, s.V}, gen, kF64);  // [N, H, K, V]
    in.cu_seqlens = s.cu_seqlens;
    in.use_qk_l2norm_in_kernel = l2norm;
    return in;
}

// ‖a − b‖₂ / ‖b‖₂, or ‖a‖₂ where b is exactly zero
double rel_err(const at::Tensor& a, const at::Tensor& b) {
    EXPECT_TRUE(a.defined() && b.defined());
    EXPECT_EQ(a.sizes(), b.sizes());
    const double base = b.norm().item<double>();
    const double diff = (a - b).norm().item<double>();
    return base == 0.0 ? diff : diff / base;
}

// records a measured error in the test's XML output (--gtest_output=xml)
void record_error(const std::string& key, double err) {
    std::ostringstream text;
    text << std::scientific << std::setprecision(3) << err;
    testing::Test::RecordProperty(key, text.str());
}

// ---- recurrence vs WY form ----

using Case = std::tuple<Shape, bool, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, l2norm, with_h0] = info.param;
    return shape_name(shape) + (l2norm ? "_l2norm" : "_normk") + (with_h0 ? "_h0" : "_noh0");
}

class DeltaRuleRefForward : public testing::TestWithParam<Case> {};

TEST_P(DeltaRuleRefForward, RecurrenceMatchesWyForm) {
    const auto& [shape, l2norm, with_h0] = GetParam();
    const DeltaRuleInputs in = make_inputs(shape, l2norm, with_h0, 42);
    const DeltaRuleOutputs rec = delta_rule_fwd(in);
    const DeltaRuleOutputs wy = delta_rule_fwd_wy(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.v.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.H, shape.K, shape.V}));
    const double err_o = rel_err(rec.o, wy.o);
    const double err_ht = rel_err(rec.ht, wy.ht);
    record_error("rel_err_o", err_o);
    record_error("rel_err_ht", err_ht);
    EXPECT_LE(err_o, kFormsRelTol);
    EXPECT_LE(err_ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeltaRuleRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, 16, {}}, Shape{1, 1, 2, 8, 8, {}},
                                     Shape{3, 1, 2, 4, 4, {}}, Shape{2, 50, 2, 32, 48, {}},
                                     Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 4, 64, 64, {}}),
                     testing::Bool(), testing::Bool()),
    case_name);

// β up to 2 makes I − β k kᵀ a reflection-like map with eigenvalue 1 − β ∈ (−1, 1): still
// stable, and the two forms must still agree.
TEST(DeltaRuleRef, BetaUpToTwoMatchesWyForm) {
    const Shape shape{2, 200, 2, 32, 32, {}};
    const DeltaRuleInputs in = make_inputs(shape, true, true, 13, 2.0);
    const DeltaRuleOutputs rec = delta_rule_fwd(in);
    const DeltaRuleOutputs wy = delta_rule_fwd_wy(in);
    EXPECT_LE(rel_err(rec.o, wy.o), kFormsRelTol);
    EXPECT_LE(rel_err(rec.ht, wy.ht), kFormsRelTol);
    EXPECT_TRUE(rec.ht.isfinite().all().item<bool>());
}

// ---- backward vs autograd ----

// The recurrence again, out of place and with its own normalisation, so that autograd can
// differentiate it.
DeltaRuleOutputs autograd_recurrence(const DeltaRuleInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    at::Tensor q = in.q, k = in.k;
    if (in.use_qk_l2norm_in_kernel) {
        q = q / (q * q).sum(-1, true).add(kDeltaRuleL2NormEps).sqrt();
        k = k / (k * k).sum(-1, true).add(kDeltaRuleL2NormEps).sqrt();
    }
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, V]
    std::vector<at::Tensor> finals;                  // per sequence: [H, K, V]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            const at::Tensor k_t = k[seq.batch][t].unsqueeze(2);  // [H, K, 1]
            const at::Tensor p = (S * k_t).sum(1);                // [H, V]
            const at::Tensor u = in.beta[seq.batch][t].unsqueeze(1) * (in.v[seq.batch][t] - p);
            S = S + k_t * u.unsqueeze(1);
            o_rows[seq.batch].push_back((S * q[seq.batch][t].unsqueeze(2)).sum(1) * scale);
        }
        finals.push_back(S);
    }
    std::vector<at::Tensor> o_batches;
    for (const auto& r : o_rows) o_batches.push_back(at::stack(r));
    return {at::stack(o_batches), at::stack(finals)};
}

using GradCase = std::tuple<Shape, bool, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, l2norm, with_h0, with_dht] = info.param;
    return shape_name(shape) + (l2norm ? "_l2norm" : "_normk") + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class DeltaRuleRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(DeltaRuleRefBackward, MatchesAutograd) {
    const auto& [shape, l2norm, with_h0, with_dht] = GetParam();
    const DeltaRuleInputs in = make_inputs(shape, l2norm, with_h0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);  // [B, T, H, V]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.H, shape.K, shape.V}, gen, kF64) : at::Tensor();

    const DeltaRuleGrads grads = delta_rule_bwd(in, d_o, dht);

    // autograd's leaves, in the order dq, dk, dv, dbeta, dh0
    DeltaRuleInputs leaf = in;
    std::vector<at::Tensor*> leaf_fields = {&leaf.q, &leaf.k, &leaf.v, &leaf.beta};
    if (in.h0.defined()) leaf_fields.push_back(&leaf.h0);
    std::vector<at::Tensor> wrt;
    for (at::Tensor* field : leaf_fields) {
        *field = field->clone().set_requires_grad(true);
        wrt.push_back(*field);
    }
    const DeltaRuleOutputs out = autograd_recurrence(leaf);
    at::Tensor loss = (out.o * d_o).sum();
    if (dht.defined()) loss = loss + (out.ht * dht).sum();
    const std::vector<at::Tensor> expected = torch::autograd::grad({loss}, wrt);

    const std::vector<std::pair<std::string, at::Tensor>> got = {
        {"dq", grads.dq}, {"dk", grads.dk}, {"dv", grads.dv}, {"dbeta", grads.dbeta}};
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = rel_err(got[i].second, expected[i]);
        record_error("rel_err_" + got[i].first, err);
        EXPECT_LE(err, kGradRelTol) << got[i].first;
    }
    ASSERT_EQ(grads.dh0.defined(), in.h0.defined());
    if (in.h0.defined()) {
        const double err = rel_err(grads.dh0, expected[got.size()]);
        record_error("rel_err_dh0", err);
        EXPECT_LE(err, kGradRelTol) << "dh0";
    }
}

// The reverse pass recomputes from a checkpoint every c = ⌈√len⌉ steps. Lengths here: 40 (c = 7,
// ragged last segment), 36 (a perfect square), 1 (T = 1), and in the varlen case 0 (empty), 1
// and 2 (one segment), 3 (c = 2, ragged), 24 (c = 5) and 34 (c = 6).
INSTANTIATE_TEST_SUITE_P(
    Shapes, DeltaRuleRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, {}}, Shape{2, 36, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 5, {}},
                                     Shape{1, 64, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::Bool(), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen, scale and dtype rules ----

TEST(DeltaRuleRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const DeltaRuleInputs in = make_inputs(shape, true, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, H, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K, V]
    const DeltaRuleOutputs out = delta_rule_fwd(in);
    const DeltaRuleOutputs wy = delta_rule_fwd_wy(in);
    const DeltaRuleGrads grads = delta_rule_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(wy.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

TEST(DeltaRuleRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}};
    const DeltaRuleInputs in = make_inputs(shape, true, true, 5);
    const DeltaRuleOutputs packed = delta_rule_fwd(in);
    for (const Sequence& seq : sequences(1, shape.T, shape.cu_seqlens)) {
        if (seq.length() == 0) continue;
        DeltaRuleInputs alone = in;
        alone.cu_seqlens.clear();
        alone.q = in.q.narrow(1, seq.begin, seq.length());
        alone.k = in.k.narrow(1, seq.begin, seq.length());
        alone.v = in.v.narrow(1, seq.begin, seq.length());
        alone.beta = in.beta.narrow(1, seq.begin, seq.length());
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const DeltaRuleOutputs single = delta_rule_fwd(alone);
        EXPECT_TRUE(at::equal(single.o, packed.o.narrow(1, seq.begin, seq.length())))
            << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single.ht[0], packed.ht[seq.index])) << "sequence " << seq.index;
    }
}

TEST(DeltaRuleRef, ScaleZeroMeansInverseSqrtK) {
    DeltaRuleInputs in = make_inputs({2, 12, 2, 16, 8, {}}, true, true, 6);
    const DeltaRuleOutputs by_default = delta_rule_fwd(in);
    const DeltaRuleOutputs wy_default = delta_rule_fwd_wy(in);
    in.scale = 0.25;
    EXPECT_LE(rel_err(by_default.o, delta_rule_fwd(in).o), 1e-15);
    EXPECT_LE(rel_err(wy_default.o, delta_rule_fwd_wy(in).o), 1e-15);
    // o is linear in the scale; ht does not see it
    in.scale = 0.5;
    const DeltaRuleOutputs doubled = delta_rule_fwd(in);
    EXPECT_LE(rel_err(doubled.o, 2.0 * by_default.o), 1e-15);
    EXPECT_TRUE(at::equal(doubled.ht, by_default.ht));
}

// The in-kernel norm must equal normalising the inputs beforehand (with the same eps), and
// must change the result when the rows are not unit length.
TEST(DeltaRuleRef, InKernelNormEqualsNormalisedInputs) {
    const DeltaRuleInputs raw = make_inputs({2, 30, 2, 8, 5, {}}, true, true, 14);
    DeltaRuleInputs normalised = raw;
    normalised.use_qk_l2norm_in_kernel = false;
    normalised.q = raw.q / (raw.q.square().sum(-1, true) + kDeltaRuleL2NormEps).sqrt();
    normalised.k = raw.k / (raw.k.square().sum(-1, true) + kDeltaRuleL2NormEps).sqrt();
    const DeltaRuleOutputs a = delta_rule_fwd(raw);
    const DeltaRuleOutputs b = delta_rule_fwd(normalised);
    EXPECT_LE(rel_err(a.o, b.o), 1e-14);
    EXPECT_LE(rel_err(a.ht, b.ht), 1e-14);
    DeltaRuleInputs unnormalised = raw;
    unnormalised.use_qk_l2norm_in_kernel = false;
    unnormalised.k = raw.k / 8.0;
    EXPECT_GT(rel_err(delta_rule_fwd(unnormalised).o, a.o), 1e-3);
}

TEST(DeltaRuleRef, EveryOutputIsFloat64) {
    const DeltaRuleInputs in = make_inputs({2, 10, 2, 4, 3, {}}, true, true, 9);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    const DeltaRuleOutputs rec = delta_rule_fwd(in);
    const DeltaRuleOutputs wy = delta_rule_fwd_wy(in);
    const DeltaRuleGrads grads = delta_rule_bwd(in, d_o, dht);
    for (const at::Tensor& t :
         {rec.o, rec.ht, wy.o, wy.ht, grads.dq, grads.dk, grads.dv, grads.dbeta, grads.dh0}) {
        ASSERT_TRUE(t.defined());
        EXPECT_EQ(t.scalar_type(), at::kDouble);
    }
}

// Records, on this thread, every aten op that reads or writes a floating tensor other than fp64:
// the same view of the run that the dtype tracer takes (ARCHITECTURE.md).
class NonFp64OpRecorder {
  public:
    NonFp64OpRecorder() {
        found().clear();
        ops_seen() = 0;
        handle_ = at::addThreadLocalCallback(
            at::RecordFunctionCallback(&on_start, &on_end).needsInputs(true).needsOutputs(true));
    }
    ~NonFp64OpRecorder() { at::removeCallback(handle_); }
    NonFp64OpRecorder(const NonFp64OpRecorder&) = delete;
    NonFp64OpRecorder& operator=(const NonFp64OpRecorder&) = delete;

    static std::set<std::string>& found() {
        static std::set<std::string> ops;
        return ops;
    }
    static int64_t& ops_seen() {
        static int64_t n = 0;
        return n;
    }

  private:
    static void check(const at::RecordFunction& fn, const c10::IValue& value) {
        if (!value.isTensor()) return;
        const at::Tensor& t = value.toTensor();
        if (t.defined() && at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kDouble)
            found().insert(std::string(fn.name()) + " " +
                           std::string(c10::toString(t.scalar_type())));
    }
    static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
        ++ops_seen();
        for (const c10::IValue& input : fn.inputs()) check(fn, input);
        return nullptr;
    }
    static void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
        for (const c10::IValue& output : fn.outputs()) check(fn, output);
    }

    at::CallbackHandle handle_;
};

TEST(DeltaRuleRef, EveryOpStaysFloat64) {
    const DeltaRuleInputs in = make_inputs({1, 20, 2, 4, 3, {0, 0, 7, 20}}, true, true, 12);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    {
        NonFp64OpRecorder recorder;
        delta_rule_fwd(in);
        delta_rule_fwd_wy(in);
        delta_rule_bwd(in, d_o, dht);
        EXPECT_GT(NonFp64OpRecorder::ops_seen(), 100);
        EXPECT_TRUE(NonFp64OpRecorder::found().empty())
            << "first: " << *NonFp64OpRecorder::found().begin();
    }
    // the recorder does see a narrowing
    NonFp64OpRecorder recorder;
    (void)in.q.to(at::kFloat);
    EXPECT_FALSE(NonFp64OpRecorder::found().empty());
}

TEST(DeltaRuleRef, Float32InputIsInternalError) {
    const DeltaRuleInputs in = make_inputs({1, 6, 2, 4, 3, {}}, true, true, 10);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    for (at::Tensor DeltaRuleInputs::*field :
         {&DeltaRuleInputs::q, &DeltaRuleInputs::k, &DeltaRuleInputs::v, &DeltaRuleInputs::beta,
          &DeltaRuleInputs::h0}) {
        DeltaRuleInputs narrowed = in;
        narrowed.*field = (in.*field).to(at::kFloat);
        EXPECT_THROW(delta_rule_fwd(narrowed), InternalError);
        EXPECT_THROW(delta_rule_fwd_wy(narrowed), InternalError);
        EXPECT_THROW(delta_rule_bwd(narrowed, d_o, dht), InternalError);
    }
    EXPECT_THROW(delta_rule_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(delta_rule_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(DeltaRuleRef, MismatchedShapeIsShapeError) {
    DeltaRuleInputs in = make_inputs({1, 6, 2, 4, 3, {}}, true, true, 11);
    in.k = in.k.narrow(3, 0, 3);
    EXPECT_THROW(delta_rule_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, true, true, 11);
    in.beta = in.beta.unsqueeze(3);
    EXPECT_THROW(delta_rule_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, true, true, 11);
    in.h0 = at::zeros({2, 2, 4, 3}, kF64);
    EXPECT_THROW(delta_rule_fwd_wy(in), ShapeError);
}

}  // namespace
}  // namespace lav::ref
