// tests/reference/hgrn_ref_test.cpp — the fp64 hgrn reference against its closed form, against
// autograd, and on its dtype and varlen rules. Not a kernel test.
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
#include "reference/hgrn.h"

namespace lav::ref {
namespace {

// NUMERICS.md rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10. Measured
// here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 6.1e-15 on o and ht, the
// gradients by 0 from autograd (both run the same elementwise operations in the same order),
// so both bounds leave orders of margin above fp64 rounding.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

// The gates: FLA's test draws g = logsigmoid(r) and x = (1 − sigmoid(r)) · x for one randn r
// (HGRN's coupled input and forget gates); the others draw x and g independently, with
// g = logsigmoid(randn) / n for strong (n = 0.1) and weak (n = 10) decay, or g = 0 (a plain
// running sum).
enum class Gate { kCoupled, kStrong, kWeak, kZero };

std::string gate_name(Gate gate) {
    switch (gate) {
        case Gate::kCoupled:
            return "coupled";
        case Gate::kStrong:
            return "g01";
        case Gate::kWeak:
            return "g10";
        case Gate::kZero:
            return "gzero";
    }
    return "";
}

struct Shape {
    int64_t B, T, H, K;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    std::string name = "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" +
                       std::to_string(s.H) + "_K" + std::to_string(s.K);
    return s.cu_seqlens.empty() ? name : name + "_varlen";
}

// gtest prints the parameters of a failed case with these
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }
void PrintTo(Gate gate, std::ostream* os) { *os << gate_name(gate); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

HgrnInputs make_inputs(const Shape& s, Gate gate, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    HgrnInputs in;
    in.x = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);                     // [B, T, H, K]
    const at::Tensor logits = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    switch (gate) {
        case Gate::kCoupled:
            in.g = at::log_sigmoid(logits);
            in.x = in.x * (1.0 - at::sigmoid(logits));
            break;
        case Gate::kStrong:
            in.g = at::log_sigmoid(logits) / 0.1;
            break;
        case Gate::kWeak:
            in.g = at::log_sigmoid(logits) / 10.0;
            break;
        case Gate::kZero:
            in.g = at::zeros_like(logits);
            break;
    }
    const int64_t N = num_sequences(s.B, s.cu_seqlens);
    if (with_h0) in.h0 = at::randn({N, s.H, s.K}, gen, kF64);  // [N, H, K]
    in.cu_seqlens = s.cu_seqlens;
    return in;
}

// ‖a − b‖₂ / ‖b‖₂, or ‖a‖₂ where b is exactly zero (dg at t = 0 without h0 must vanish)
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

using Case = std::tuple<Shape, Gate, bool>;

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const auto& [shape, gate, with_h0] = info.param;
    return shape_name(shape) + "_" + gate_name(gate) + (with_h0 ? "_h0" : "_noh0");
}

constexpr Gate kGates[] = {Gate::kCoupled, Gate::kStrong, Gate::kWeak, Gate::kZero};

// ---- recurrence vs closed form ----

class HgrnRefForward : public testing::TestWithParam<Case> {};

TEST_P(HgrnRefForward, RecurrenceMatchesClosedForm) {
    const auto& [shape, gate, with_h0] = GetParam();
    const HgrnInputs in = make_inputs(shape, gate, with_h0, 42);
    const HgrnOutputs rec = hgrn_fwd(in);
    const HgrnOutputs par = hgrn_fwd_parallel(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.x.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.H, shape.K}));
    const double err_o = rel_err(rec.o, par.o);
    const double err_ht = rel_err(rec.ht, par.ht);
    record_error("rel_err_o", err_o);
    record_error("rel_err_ht", err_ht);
    EXPECT_LE(err_o, kFormsRelTol);
    EXPECT_LE(err_ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HgrnRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, {}}, Shape{1, 1, 2, 8, {}},
                                     Shape{3, 1, 1, 5, {}}, Shape{2, 63, 4, 125, {}},
                                     Shape{1, 164, 2, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 2, 64, {}}),
                     testing::ValuesIn(kGates), testing::Bool()),
    case_name);

// Splitting D into H heads of K channels changes nothing: the recurrence is elementwise.
TEST(HgrnRef, HeadSplitChangesNothing) {
    const HgrnInputs in = make_inputs({2, 30, 4, 6, {}}, Gate::kCoupled, true, 13);
    HgrnInputs flat = in;
    flat.x = in.x.reshape({2, 30, 1, 24});
    flat.g = in.g.reshape({2, 30, 1, 24});
    flat.h0 = in.h0.reshape({2, 1, 24});
    const HgrnOutputs split = hgrn_fwd(in);
    const HgrnOutputs whole = hgrn_fwd(flat);
    EXPECT_TRUE(at::equal(split.o.reshape({2, 30, 1, 24}), whole.o));
    EXPECT_TRUE(at::equal(split.ht.reshape({2, 1, 24}), whole.ht));
}

// ---- backward vs autograd ----

// The recurrence again, out of place, so that autograd can differentiate it.
HgrnOutputs autograd_recurrence(const HgrnInputs& in) {
    const int64_t B = in.x.size(0), T = in.x.size(1), H = in.x.size(2), K = in.x.size(3);
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, K]
    std::vector<at::Tensor> finals;                  // per sequence: [H, K]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor h = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            h = in.g[seq.batch][t].exp() * h + in.x[seq.batch][t];
            o_rows[seq.batch].push_back(h);
        }
        finals.push_back(h);
    }
    std::vector<at::Tensor> o_batches;
    for (const auto& r : o_rows) o_batches.push_back(at::stack(r));
    return {at::stack(o_batches), at::stack(finals)};
}

using GradCase = std::tuple<Shape, Gate, bool, bool>;

std::string grad_case_name(const testing::TestParamInfo<GradCase>& info) {
    const auto& [shape, gate, with_h0, with_dht] = info.param;
    return shape_name(shape) + "_" + gate_name(gate) + (with_h0 ? "_h0" : "_noh0") +
           (with_dht ? "_dht" : "_nodht");
}

class HgrnRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(HgrnRefBackward, MatchesAutograd) {
    const auto& [shape, gate, with_h0, with_dht] = GetParam();
    const HgrnInputs in = make_inputs(shape, gate, with_h0, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.x.sizes(), gen, kF64);  // [B, T, H, K]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.H, shape.K}, gen, kF64) : at::Tensor();  // [N, H, K]

    const HgrnGrads grads = hgrn_bwd(in, d_o, dht);

    // autograd's leaves, in the order dx, dg, dh0
    HgrnInputs leaf = in;
    std::vector<at::Tensor*> leaf_fields = {&leaf.x, &leaf.g};
    if (in.h0.defined()) leaf_fields.push_back(&leaf.h0);
    std::vector<at::Tensor> wrt;
    for (at::Tensor* field : leaf_fields) {
        *field = field->clone().set_requires_grad(true);
        wrt.push_back(*field);
    }
    const HgrnOutputs out = autograd_recurrence(leaf);
    at::Tensor loss = (out.o * d_o).sum();
    if (dht.defined()) loss = loss + (out.ht * dht).sum();
    const std::vector<at::Tensor> expected = torch::autograd::grad({loss}, wrt);

    const std::vector<std::pair<std::string, at::Tensor>> got = {{"dx", grads.dx},
                                                                 {"dg", grads.dg}};
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
    Shapes, HgrnRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, {}}, Shape{2, 36, 2, 8, {}},
                                     Shape{3, 1, 2, 5, {}},
                                     Shape{1, 64, 2, 8, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kGates), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen and dtype rules ----

TEST(HgrnRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, {0, 0, 5, 5, 9}};
    const HgrnInputs in = make_inputs(shape, Gate::kCoupled, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.x.sizes(), gen, kF64);   // [B, T, H, K]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K]
    const HgrnOutputs out = hgrn_fwd(in);
    const HgrnOutputs par = hgrn_fwd_parallel(in);
    const HgrnGrads grads = hgrn_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(par.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

TEST(HgrnRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 24, {0, 0, 37, 100, 164}};
    const HgrnInputs in = make_inputs(shape, Gate::kCoupled, true, 5);
    at::Generator gen = at::detail::createCPUGenerator(6);
    const at::Tensor d_o = at::randn(in.x.sizes(), gen, kF64);   // [B, T, H, K]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K]
    const HgrnOutputs packed = hgrn_fwd(in);
    const HgrnGrads packed_grads = hgrn_bwd(in, d_o, dht);
    for (const Sequence& seq : sequences(1, shape.T, shape.cu_seqlens)) {
        if (seq.length() == 0) continue;
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        HgrnInputs alone;
        alone.x = cut(in.x);
        alone.g = cut(in.g);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const HgrnOutputs single = hgrn_fwd(alone);
        const HgrnGrads single_grads = hgrn_bwd(alone, cut(d_o), dht.narrow(0, seq.index, 1));
        EXPECT_TRUE(at::equal(single.o, cut(packed.o))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single.ht[0], packed.ht[seq.index])) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single_grads.dg, cut(packed_grads.dg))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single_grads.dh0[0], packed_grads.dh0[seq.index]))
            << "sequence " << seq.index;
    }
}

TEST(HgrnRef, EveryOutputIsFloat64) {
    const HgrnInputs in = make_inputs({2, 10, 2, 4, {}}, Gate::kCoupled, true, 9);
    const at::Tensor d_o = at::ones_like(in.x);   // [B, T, H, K]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K]
    const HgrnOutputs rec = hgrn_fwd(in);
    const HgrnOutputs par = hgrn_fwd_parallel(in);
    const HgrnGrads grads = hgrn_bwd(in, d_o, dht);
    for (const at::Tensor& t : {rec.o, rec.ht, par.o, par.ht, grads.dx, grads.dg, grads.dh0}) {
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

TEST(HgrnRef, EveryOpStaysFloat64) {
    const HgrnInputs in = make_inputs({1, 20, 2, 4, {0, 0, 7, 20}}, Gate::kCoupled, true, 12);
    const at::Tensor d_o = at::ones_like(in.x);   // [B, T, H, K]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K]
    {
        NonFp64OpRecorder recorder;
        hgrn_fwd(in);
        hgrn_fwd_parallel(in);
        hgrn_bwd(in, d_o, dht);
        EXPECT_GT(NonFp64OpRecorder::ops_seen(), 100);
        EXPECT_TRUE(NonFp64OpRecorder::found().empty())
            << "first: " << *NonFp64OpRecorder::found().begin();
    }
    // the recorder does see a narrowing
    NonFp64OpRecorder recorder;
    (void)in.x.to(at::kFloat);
    EXPECT_FALSE(NonFp64OpRecorder::found().empty());
}

TEST(HgrnRef, Float32InputIsInternalError) {
    const HgrnInputs in = make_inputs({1, 6, 2, 4, {}}, Gate::kCoupled, true, 10);
    const at::Tensor d_o = at::ones_like(in.x);   // [B, T, H, K]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K]
    for (at::Tensor HgrnInputs::*field : {&HgrnInputs::x, &HgrnInputs::g, &HgrnInputs::h0}) {
        HgrnInputs narrowed = in;
        narrowed.*field = (in.*field).to(at::kFloat);
        EXPECT_THROW(hgrn_fwd(narrowed), InternalError);
        EXPECT_THROW(hgrn_fwd_parallel(narrowed), InternalError);
        EXPECT_THROW(hgrn_bwd(narrowed, d_o, dht), InternalError);
    }
    EXPECT_THROW(hgrn_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(hgrn_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(HgrnRef, MismatchedShapeIsShapeError) {
    HgrnInputs in = make_inputs({1, 6, 2, 4, {}}, Gate::kCoupled, true, 11);
    in.g = in.g.narrow(3, 0, 3);
    EXPECT_THROW(hgrn_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, {}}, Gate::kCoupled, true, 11);
    in.h0 = at::zeros({1, 2, 4, 4}, kF64);
    EXPECT_THROW(hgrn_fwd_parallel(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, {}}, Gate::kCoupled, true, 11);
    EXPECT_THROW(hgrn_bwd(in, at::ones({1, 6, 2, 3}, kF64), at::Tensor()), ShapeError);
}

}  // namespace
}  // namespace lav::ref
