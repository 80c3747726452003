// tests/reference/gla_ref_test.cpp — the fp64 gla reference against its parallel form, against
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
#include "reference/gla.h"

namespace lav::ref {
namespace {

// NUMERICS.md rule 4: the two fp64 forms agree to 1e-12 relative, gradients to 1e-10. Measured
// here (x86-64, LibTorch 2.11 CPU): the forms differ by at most 6.5e-15 on o and ht (worst at
// B2 T256 H4 K64 V64), the gradients by at most 3.4e-16 from autograd, so both bounds leave over
// two orders of margin above fp64 rounding.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

// g = logsigmoid(randn) / normalizer, as FLA's tests draw it: 1, strong decay (0.1), weak
// decay (10), and an all-zero gate (FLA's mask_p = 1: plain linear attention).
enum class Gate { kNorm1, kStrong, kWeak, kZero };

std::string gate_name(Gate gate) {
    switch (gate) {
        case Gate::kNorm1:
            return "g1";
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
    int64_t B, T, H, K, V;
    std::vector<int64_t> cu_seqlens;  // empty: dense
};

std::string shape_name(const Shape& s) {
    std::string name = "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" +
                       std::to_string(s.H) + "_K" + std::to_string(s.K) + "_V" +
                       std::to_string(s.V);
    return s.cu_seqlens.empty() ? name : name + "_varlen";
}

// gtest prints the parameters of a failed case with these
void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }
void PrintTo(Gate gate, std::ostream* os) { *os << gate_name(gate); }

const at::TensorOptions kF64 = at::TensorOptions().dtype(at::kDouble);

// randn q, k, v, h0 and the gate of `gate`.
GlaInputs make_inputs(const Shape& s, Gate gate, bool with_h0, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    GlaInputs in;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);                     // [B, T, H, K]
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);                     // [B, T, H, K]
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, kF64);                     // [B, T, H, V]
    const at::Tensor logits = at::randn({s.B, s.T, s.H, s.K}, gen, kF64);  // [B, T, H, K]
    switch (gate) {
        case Gate::kNorm1:
            in.g = at::log_sigmoid(logits);
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
    if (with_h0) in.h0 = at::randn({N, s.H, s.K, s.V}, gen, kF64);  // [N, H, K, V]
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

constexpr Gate kGates[] = {Gate::kNorm1, Gate::kStrong, Gate::kWeak, Gate::kZero};

// ---- recurrence vs parallel form ----

class GlaRefForward : public testing::TestWithParam<Case> {};

TEST_P(GlaRefForward, RecurrenceMatchesParallelForm) {
    const auto& [shape, gate, with_h0] = GetParam();
    const GlaInputs in = make_inputs(shape, gate, with_h0, 42);
    const GlaOutputs rec = gla_fwd(in);
    const GlaOutputs par = gla_fwd_parallel(in);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    ASSERT_EQ(rec.o.sizes(), in.v.sizes());
    ASSERT_EQ(rec.ht.sizes(), at::IntArrayRef({N, shape.H, shape.K, shape.V}));
    const double err_o = rel_err(rec.o, par.o);
    const double err_ht = rel_err(rec.ht, par.ht);
    record_error("rel_err_o", err_o);
    record_error("rel_err_ht", err_ht);
    EXPECT_LE(err_o, kFormsRelTol);
    EXPECT_LE(err_ht, kFormsRelTol);
    EXPECT_TRUE(rec.o.isfinite().all().item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GlaRefForward,
    testing::Combine(testing::Values(Shape{2, 64, 3, 16, 16, {}}, Shape{1, 1, 2, 8, 8, {}},
                                     Shape{3, 1, 2, 4, 4, {}}, Shape{2, 50, 2, 32, 48, {}},
                                     Shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}},
                                     Shape{2, 256, 4, 64, 64, {}}),
                     testing::ValuesIn(kGates), testing::Bool()),
    case_name);

// The per-dimension decay must act on the key rows only: with the gate zero in every key
// dimension but one, the other rows of the state never decay.
TEST(GlaRef, DecayActsPerKeyDimension) {
    GlaInputs in = make_inputs({1, 30, 2, 4, 3, {}}, Gate::kZero, true, 13);
    in.g.select(3, 1).fill_(-0.5);
    const GlaOutputs out = gla_fwd(in);
    // row d of ht is exp(Σ_t g_td)·h0[d] + Σ_t exp(Σ_{r>t} g_rd) k_td v_tᵀ
    const at::Tensor k = in.k[0].permute({1, 0, 2});         // [H, T, K]
    const at::Tensor v = in.v[0].permute({1, 0, 2});         // [H, T, V]
    const at::Tensor G = in.g[0].permute({1, 0, 2});         // [H, T, K]
    const at::Tensor suffix = G.sum(1, true) - G.cumsum(1);  // [H, T, K] Σ_{r>t} g_r
    const at::Tensor expected = in.h0[0] * G.sum(1).exp().unsqueeze(2) +
                                at::bmm((k * suffix.exp()).transpose(1, 2), v);  // [H, K, V]
    EXPECT_LE(rel_err(out.ht[0], expected), 1e-13);
    // the undecayed rows are plain sums
    const at::Tensor plain =
        in.h0[0].select(1, 0) + at::bmm(k.select(2, 0).unsqueeze(1), v).squeeze(1);  // [H, V]
    EXPECT_LE(rel_err(out.ht[0].select(1, 0), plain), 1e-13);
}

// ---- backward vs autograd ----

// The recurrence again, out of place, so that autograd can differentiate it.
GlaOutputs autograd_recurrence(const GlaInputs& in) {
    const int64_t B = in.q.size(0), T = in.q.size(1), H = in.q.size(2), K = in.q.size(3);
    const int64_t V = in.v.size(3);
    const double scale = in.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : in.scale;
    std::vector<std::vector<at::Tensor>> o_rows(B);  // per batch row: T tensors [H, V]
    std::vector<at::Tensor> finals;                  // per sequence: [H, K, V]
    for (const Sequence& seq : sequences(B, T, in.cu_seqlens)) {
        at::Tensor S = in.h0.defined() ? in.h0[seq.index] : at::zeros({H, K, V}, kF64);
        for (int64_t t = seq.begin; t < seq.end; ++t) {
            S = S * in.g[seq.batch][t].exp().unsqueeze(2) +
                in.k[seq.batch][t].unsqueeze(2) * in.v[seq.batch][t].unsqueeze(1);
            o_rows[seq.batch].push_back((S * in.q[seq.batch][t].unsqueeze(2)).sum(1) * scale);
        }
        finals.push_back(S);
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

class GlaRefBackward : public testing::TestWithParam<GradCase> {};

TEST_P(GlaRefBackward, MatchesAutograd) {
    const auto& [shape, gate, with_h0, with_dht] = GetParam();
    GlaInputs in = make_inputs(shape, gate, with_h0, 7);
    in.scale = 0.3;
    at::Generator gen = at::detail::createCPUGenerator(8);
    const int64_t N = num_sequences(shape.B, shape.cu_seqlens);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);  // [B, T, H, V]
    const at::Tensor dht =
        with_dht ? at::randn({N, shape.H, shape.K, shape.V}, gen, kF64) : at::Tensor();

    const GlaGrads grads = gla_bwd(in, d_o, dht);

    // autograd's leaves, in the order dq, dk, dv, dg, dh0
    GlaInputs leaf = in;
    std::vector<at::Tensor*> leaf_fields = {&leaf.q, &leaf.k, &leaf.v, &leaf.g};
    if (in.h0.defined()) leaf_fields.push_back(&leaf.h0);
    std::vector<at::Tensor> wrt;
    for (at::Tensor* field : leaf_fields) {
        *field = field->clone().set_requires_grad(true);
        wrt.push_back(*field);
    }
    const GlaOutputs out = autograd_recurrence(leaf);
    at::Tensor loss = (out.o * d_o).sum();
    if (dht.defined()) loss = loss + (out.ht * dht).sum();
    const std::vector<at::Tensor> expected = torch::autograd::grad({loss}, wrt);

    const std::vector<std::pair<std::string, at::Tensor>> got = {
        {"dq", grads.dq}, {"dk", grads.dk}, {"dv", grads.dv}, {"dg", grads.dg}};
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
    Shapes, GlaRefBackward,
    testing::Combine(testing::Values(Shape{2, 40, 2, 8, 6, {}}, Shape{2, 36, 2, 8, 6, {}},
                                     Shape{3, 1, 2, 4, 5, {}},
                                     Shape{1, 64, 2, 8, 6, {0, 0, 1, 3, 6, 30, 64}}),
                     testing::ValuesIn(kGates), testing::Bool(), testing::Bool()),
    grad_case_name);

// ---- varlen, scale and dtype rules ----

TEST(GlaRef, EmptySequenceKeepsInitialStateAndGradient) {
    const Shape shape{1, 9, 2, 4, 3, {0, 0, 5, 5, 9}};
    const GlaInputs in = make_inputs(shape, Gate::kNorm1, true, 3);
    at::Generator gen = at::detail::createCPUGenerator(4);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, H, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K, V]
    const GlaOutputs out = gla_fwd(in);
    const GlaOutputs par = gla_fwd_parallel(in);
    const GlaGrads grads = gla_bwd(in, d_o, dht);
    for (int64_t n : {0, 2}) {
        EXPECT_TRUE(at::equal(out.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(par.ht[n], in.h0[n])) << "sequence " << n;
        EXPECT_TRUE(at::equal(grads.dh0[n], dht[n])) << "sequence " << n;
    }
    EXPECT_FALSE(at::equal(out.ht[1], in.h0[1]));
}

TEST(GlaRef, VarlenSequencesDoNotLeak) {
    const Shape shape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}};
    const GlaInputs in = make_inputs(shape, Gate::kNorm1, true, 5);
    at::Generator gen = at::detail::createCPUGenerator(6);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, kF64);   // [B, T, H, V]
    const at::Tensor dht = at::randn(in.h0.sizes(), gen, kF64);  // [N, H, K, V]
    const GlaOutputs packed = gla_fwd(in);
    const GlaGrads packed_grads = gla_bwd(in, d_o, dht);
    for (const Sequence& seq : sequences(1, shape.T, shape.cu_seqlens)) {
        if (seq.length() == 0) continue;
        const auto cut = [&](const at::Tensor& x) { return x.narrow(1, seq.begin, seq.length()); };
        GlaInputs alone;
        alone.q = cut(in.q);
        alone.k = cut(in.k);
        alone.v = cut(in.v);
        alone.g = cut(in.g);
        alone.h0 = in.h0.narrow(0, seq.index, 1);
        const GlaOutputs single = gla_fwd(alone);
        const GlaGrads single_grads = gla_bwd(alone, cut(d_o), dht.narrow(0, seq.index, 1));
        EXPECT_TRUE(at::equal(single.o, cut(packed.o))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single.ht[0], packed.ht[seq.index])) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single_grads.dg, cut(packed_grads.dg))) << "sequence " << seq.index;
        EXPECT_TRUE(at::equal(single_grads.dh0[0], packed_grads.dh0[seq.index]))
            << "sequence " << seq.index;
    }
}

TEST(GlaRef, ScaleZeroMeansInverseSqrtK) {
    GlaInputs in = make_inputs({2, 12, 2, 16, 8, {}}, Gate::kNorm1, true, 6);
    const GlaOutputs by_default = gla_fwd(in);
    const GlaOutputs parallel_default = gla_fwd_parallel(in);
    in.scale = 0.25;
    EXPECT_LE(rel_err(by_default.o, gla_fwd(in).o), 1e-15);
    EXPECT_LE(rel_err(parallel_default.o, gla_fwd_parallel(in).o), 1e-15);
    // o is linear in the scale; ht does not see it
    in.scale = 0.5;
    const GlaOutputs doubled = gla_fwd(in);
    EXPECT_LE(rel_err(doubled.o, 2.0 * by_default.o), 1e-15);
    EXPECT_TRUE(at::equal(doubled.ht, by_default.ht));
}

TEST(GlaRef, EveryOutputIsFloat64) {
    const GlaInputs in = make_inputs({2, 10, 2, 4, 3, {}}, Gate::kNorm1, true, 9);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    const GlaOutputs rec = gla_fwd(in);
    const GlaOutputs par = gla_fwd_parallel(in);
    const GlaGrads grads = gla_bwd(in, d_o, dht);
    for (const at::Tensor& t :
         {rec.o, rec.ht, par.o, par.ht, grads.dq, grads.dk, grads.dv, grads.dg, grads.dh0}) {
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

TEST(GlaRef, EveryOpStaysFloat64) {
    const GlaInputs in = make_inputs({1, 20, 2, 4, 3, {0, 0, 7, 20}}, Gate::kNorm1, true, 12);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    {
        NonFp64OpRecorder recorder;
        gla_fwd(in);
        gla_fwd_parallel(in);
        gla_bwd(in, d_o, dht);
        EXPECT_GT(NonFp64OpRecorder::ops_seen(), 100);
        EXPECT_TRUE(NonFp64OpRecorder::found().empty())
            << "first: " << *NonFp64OpRecorder::found().begin();
    }
    // the recorder does see a narrowing
    NonFp64OpRecorder recorder;
    (void)in.q.to(at::kFloat);
    EXPECT_FALSE(NonFp64OpRecorder::found().empty());
}

TEST(GlaRef, Float32InputIsInternalError) {
    const GlaInputs in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kNorm1, true, 10);
    const at::Tensor d_o = at::ones_like(in.v);   // [B, T, H, V]
    const at::Tensor dht = at::ones_like(in.h0);  // [N, H, K, V]
    for (at::Tensor GlaInputs::*field :
         {&GlaInputs::q, &GlaInputs::k, &GlaInputs::v, &GlaInputs::g, &GlaInputs::h0}) {
        GlaInputs narrowed = in;
        narrowed.*field = (in.*field).to(at::kFloat);
        EXPECT_THROW(gla_fwd(narrowed), InternalError);
        EXPECT_THROW(gla_fwd_parallel(narrowed), InternalError);
        EXPECT_THROW(gla_bwd(narrowed, d_o, dht), InternalError);
    }
    EXPECT_THROW(gla_bwd(in, d_o.to(at::kFloat), dht), InternalError);
    EXPECT_THROW(gla_bwd(in, d_o, dht.to(at::kFloat)), InternalError);
}

TEST(GlaRef, MismatchedShapeIsShapeError) {
    GlaInputs in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kNorm1, true, 11);
    in.g = in.g.narrow(3, 0, 3);
    EXPECT_THROW(gla_fwd(in), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kNorm1, true, 11);
    in.g = in.g.select(3, 0);
    EXPECT_THROW(gla_bwd(in, at::ones_like(in.v), at::Tensor()), ShapeError);
    in = make_inputs({1, 6, 2, 4, 3, {}}, Gate::kNorm1, true, 11);
    in.h0 = at::zeros({2, 2, 4, 3}, kF64);
    EXPECT_THROW(gla_fwd_parallel(in), ShapeError);
}

}  // namespace
}  // namespace lav::ref
