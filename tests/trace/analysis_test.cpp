// tests/trace/analysis_test.cpp — PROMOTION, DEMOTION, histories, the table on hand-built ops.
#include "trace/analysis.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "reference/simple_gla.h"
#include "trace/autocast.h"
#include "trace/tracer.h"

namespace lav::trace {
namespace {

// ---- PROMOTION ----

TEST(Promotion, HalfTimesFloatParameterNamesTheOperand) {
    const at::Tensor k = at::rand({2, 8}).to(at::kHalf);
    const at::Tensor k_a = at::rand({8});
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(k, "k", Role::input);
    trace.label(k_a, "k_a", Role::parameter);
    const at::Tensor out = k * k_a;
    Trace done = scope.stop();

    ASSERT_EQ(out.scalar_type(), at::kFloat);
    const auto findings = find_promotions(done, at::kHalf);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, "PROMOTION");
    EXPECT_EQ(findings[0].tensor, "k");
    EXPECT_EQ(findings[0].seq, done.producer_of(out));
    EXPECT_EQ(findings[0].message, "k: fp16 -> fp32 at aten::mul, operand k_a: fp32 (parameter)");
    EXPECT_EQ(findings[0].history, "k: fp16 —aten::mul(k_a: fp32)→ fp32");
    // fp32 is the compute dtype of an fp32 case: nothing is wider
    EXPECT_TRUE(find_promotions(done, at::kFloat).empty());
}

TEST(Promotion, DownstreamOpsShareTheRoot) {
    const at::Tensor k = at::rand({2, 8}).to(at::kHalf);
    const at::Tensor k_a = at::rand({8});
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(k, "k");
    trace.label(k_a, "k_a", Role::parameter);
    const at::Tensor k2 = at::addcmul(k, k * 0.5, k_a);
    trace.label(k2, "k");
    // wide, but only because k2 already was: not a new root
    const at::Tensor k3 = (k2 * 2.0).to(at::kDouble) * k;
    Trace done = scope.stop();

    ASSERT_EQ(k3.scalar_type(), at::kDouble);
    const auto findings = find_promotions(done, at::kBFloat16);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].seq, done.producer_of(k2));
    EXPECT_EQ(findings[0].message,
              "k: fp16 -> fp32 at aten::addcmul, operand k_a: fp32 (parameter)");
}

TEST(Promotion, NoneWhenEverythingStaysHalf) {
    const at::Tensor q = at::rand({4, 8}).to(at::kHalf);
    const at::Tensor k = at::rand({4, 8}).to(at::kHalf);
    TraceScope scope;
    // python-style scalars do not promote: fp16 * 0.5 stays fp16
    const at::Tensor scaled = k * 0.5;
    const at::Tensor s = at::matmul(q, scaled.transpose(0, 1)) + 1.0;
    const at::Tensor o = at::exp(s).sum(-1);
    Trace done = scope.stop();

    EXPECT_EQ(scaled.scalar_type(), at::kHalf);
    EXPECT_EQ(o.scalar_type(), at::kHalf);
    EXPECT_TRUE(find_promotions(done, at::kHalf).empty());
    EXPECT_TRUE(find_promotions(done, at::kBFloat16).empty());
}

TEST(Promotion, ExplicitCastIsNamed) {
    const at::Tensor g = at::rand({4}).to(at::kBFloat16);
    TraceScope scope;
    scope.trace().label(g, "g");
    const at::Tensor wide = g.to(at::kFloat);
    Trace done = scope.stop();

    const auto findings = find_promotions(done, at::kBFloat16);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].message, "g: bf16 -> fp32 at aten::to, explicit cast");
    EXPECT_EQ(findings[0].history, "g: bf16 —aten::to→ fp32");
}

TEST(Promotion, AutocastUpcastSaysSo) {
    const at::Tensor x = at::rand({4, 4}).to(at::kBFloat16);
    TraceScope scope;
    scope.trace().label(x, "x");
    at::Tensor p;
    {
        // prod runs in fp32 under CPU autocast
        AutocastGuard autocast(at::kCPU, true, at::kBFloat16);
        p = at::prod(x, 1);
    }
    Trace done = scope.stop();

    ASSERT_EQ(p.scalar_type(), at::kFloat);
    const auto findings = find_promotions(done, at::kBFloat16);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].message, "x: bf16 -> fp32 at aten::prod under autocast");
    EXPECT_EQ(findings[0].history, "x: bf16 —aten::prod[autocast]→ fp32");
}

TEST(Promotion, RejectsANonFloatingComputeDtype) {
    Trace empty;
    EXPECT_THROW(find_promotions(empty, at::kLong), ShapeError);
}

// ---- dtype histories ----

TEST(History, ChainOfThreeOps) {
    const at::Tensor k = at::rand({2, 8}).to(at::kHalf);
    const at::Tensor k_a = at::rand({8});
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(k, "k");
    trace.label(k_a, "k_a", Role::parameter);
    const at::Tensor t = k * 2.0;
    const at::Tensor u = at::addcmul(t, t, k_a);
    const at::Tensor w = u.sum(-1);
    Trace done = scope.stop();

    EXPECT_EQ(history(done, w),
              "k: fp16 —aten::mul→ fp16 —aten::addcmul(k_a: fp32)→ fp32 —aten::sum→ fp32");
    EXPECT_EQ(history(done, u), "k: fp16 —aten::mul→ fp16 —aten::addcmul(k_a: fp32)→ fp32");
    EXPECT_EQ(history_of_seq(done, done.producer_of(t)), "k: fp16 —aten::mul→ fp16");
    EXPECT_EQ(history(done, k_a), "k_a: fp32");
}

TEST(History, StopsAtTheFirstLabelAndNamesUnlabelledOrigins) {
    const at::Tensor x = at::rand({3});
    TraceScope scope;
    Trace& trace = scope.trace();
    const at::Tensor a = x * 2;
    trace.label(a, "a");
    const at::Tensor b = a.to(at::kHalf) + 1;
    const at::Tensor z = at::zeros({3}, at::kDouble) + x;
    Trace done = scope.stop();

    EXPECT_EQ(history(done, b), "a: fp32 —aten::to→ fp16 —aten::add→ fp16");
    EXPECT_EQ(history(done, a), "external: fp32 —aten::mul→ fp32");
    EXPECT_EQ(history(done, z), "aten::zeros: fp64 —aten::add(external: fp32)→ fp64");
    EXPECT_EQ(history(done, x), "external: fp32");
}

TEST(History, InPlaceOpsKeepTheChain) {
    const at::Tensor k = at::rand({4}).to(at::kHalf);
    const at::Tensor y = at::rand({4});
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(k, "k");
    trace.label(y, "y");
    at::Tensor x = k * 2;
    x.add_(y);
    x.mul_(3);
    Trace done = scope.stop();

    EXPECT_EQ(x.scalar_type(), at::kHalf);
    EXPECT_EQ(history(done, x),
              "k: fp16 —aten::mul→ fp16 —aten::add_(y: fp32)→ fp16 —aten::mul_→ fp16");
}

TEST(History, FollowsViews) {
    const at::Tensor k = at::rand({4, 6}).to(at::kBFloat16);
    TraceScope scope;
    scope.trace().label(k, "k");
    const at::Tensor s = k.transpose(0, 1).narrow(0, 1, 2).select(0, 0).to(at::kFloat);
    Trace done = scope.stop();

    EXPECT_EQ(history(done, s),
              "k: bf16 —aten::transpose→ bf16 —aten::narrow→ bf16 —aten::select→ bf16 "
              "—aten::to→ fp32");
}

TEST(History, FoldsLongUnremarkableRuns) {
    const at::Tensor x = at::rand({4});
    TraceScope scope;
    scope.trace().label(x, "x");
    at::Tensor y = x.to(at::kHalf);
    for (int i = 0; i < 20; ++i) y = y * 1.0;
    y = y.to(at::kFloat);
    Trace done = scope.stop();

    EXPECT_EQ(history(done, y), "x: fp32 —aten::to→ fp16 —(20 ops)→ fp16 —aten::to→ fp32");
}

// ---- DEMOTION ----

TEST(Demotion, StateNarrowedThenAccumulatedInto) {
    const at::Tensor S = at::rand({2, 4, 4});
    const at::Tensor kv = at::rand({2, 4, 4}).to(at::kBFloat16);
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(S, "S");
    const at::Tensor narrow = S.to(at::kBFloat16);
    const at::Tensor next = narrow + kv;
    Trace done = scope.stop();

    const auto findings = find_demotions(done, {"S"});
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, "DEMOTION");
    EXPECT_EQ(findings[0].tensor, "S");
    EXPECT_EQ(findings[0].seq, done.producer_of(narrow));
    EXPECT_EQ(findings[0].message, "S: fp32 -> bf16 at aten::to (#" +
                                       std::to_string(done.producer_of(narrow)) +
                                       "), then accumulated into at aten::add (#" +
                                       std::to_string(done.producer_of(next)) + ")");
    EXPECT_EQ(findings[0].history, "S: fp32 —aten::to→ bf16 —aten::add→ bf16");
    // the same trace without the state's name: nothing to say
    EXPECT_TRUE(find_demotions(done).empty());
    EXPECT_TRUE(find_demotions(done, {"h"}).empty());
}

TEST(Demotion, RoleStateCountsAndInPlaceThroughAView) {
    const at::Tensor S = at::rand({2, 4, 4});
    const at::Tensor x = at::rand({4, 4}).to(at::kHalf);
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(S, "state", Role::state);
    at::Tensor buffer = at::empty({2, 4, 4}, at::kHalf);
    buffer.copy_(S);
    buffer.select(0, 1).add_(x);
    Trace done = scope.stop();

    const auto findings = find_demotions(done);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_NE(findings[0].message.find("state: fp32 -> fp16 at aten::copy_"), std::string::npos)
        << findings[0].message;
    EXPECT_NE(findings[0].message.find("accumulated into at aten::add_"), std::string::npos)
        << findings[0].message;
}

TEST(Demotion, RoundTripThenScaledAndAccumulated) {
    const at::Tensor S = at::rand({2, 4, 4});
    const at::Tensor decay = at::rand({2, 1, 1});
    const at::Tensor kv = at::rand({2, 4, 4});
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(S, "S", Role::state);
    // a state stored in bf16 between steps and accumulated in fp32 still lost its precision
    const at::Tensor stored = S.to(at::kBFloat16).to(at::kFloat);
    const at::Tensor next = at::baddbmm(stored * decay, kv, kv);
    Trace done = scope.stop();

    const auto findings = find_demotions(done);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_NE(findings[0].message.find("then accumulated into at aten::baddbmm"), std::string::npos)
        << findings[0].message;
    EXPECT_EQ(findings[0].history,
              "S: fp32 —aten::to→ bf16 —aten::to→ fp32 —aten::mul→ fp32 —aten::baddbmm→ fp32");
}

TEST(Demotion, NoneForReadsWideningsOrOverwrites) {
    const at::Tensor S = at::rand({4, 4});
    const at::Tensor q = at::rand({4, 4}).to(at::kBFloat16);
    const at::Tensor x = at::rand({4, 4}).to(at::kBFloat16);
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(S, "S", Role::state);
    // read in a narrow dtype, never accumulated into: the kernels' h = round(S)
    const at::Tensor h = S.to(at::kBFloat16);
    const at::Tensor o = at::matmul(q, h);
    const at::Tensor acc = at::addmm(o, q, h);
    // widened, then accumulated into: no precision lost
    const at::Tensor wide = S.to(at::kDouble) + 1.0;
    // narrowed into a buffer that is overwritten before it is accumulated into
    at::Tensor buffer = S.to(at::kHalf);
    buffer.zero_();
    buffer.add_(1.0);
    // an unlabelled tensor narrowed and accumulated into
    const at::Tensor other = at::rand({4, 4}).to(at::kBFloat16) + x;
    Trace done = scope.stop();

    EXPECT_TRUE(find_demotions(done).empty());
}

// ---- where NaN and Inf come from ----

TEST(NonfiniteOrigin, AnFp16MatmulThatOverflowsIsOverflow) {
    const at::Tensor k = at::full({4, 8}, 100.0, at::kHalf);
    const at::Tensor w = at::full({8, 8}, 100.0, at::kHalf);
    TraceScope scope(/*check_values=*/true);
    scope.trace().label(k, "k", Role::input);
    scope.trace().label(w, "w", Role::parameter);
    at::Tensor out = at::matmul(k, w);  // 8 · 100 · 100 = 80000 > 65504
    out = out * 2;
    scope.trace().label(out, "k");
    const Trace done = scope.stop();

    const auto findings = find_nonfinite_origin(done);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, "OVERFLOW");
    EXPECT_NE(findings[0].message.find("aten::matmul(k: fp16[4,8], w: fp16[8,8])"),
              std::string::npos)
        << findings[0].message;
    EXPECT_NE(findings[0].message.find("from finite inputs"), std::string::npos);
}

TEST(NonfiniteOrigin, NaNFromFiniteValuesIsNonfinite) {
    const at::Tensor x = -at::ones({3}, at::kFloat);
    TraceScope scope(true);
    scope.trace().label(x, "x", Role::input);
    const at::Tensor y = at::sqrt(x) + 1;
    const Trace done = scope.stop();
    const auto findings = find_nonfinite_origin(done);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, "NONFINITE");
    EXPECT_EQ(findings[0].message.rfind("aten::sqrt(x: fp32[3])", 0), 0u) << findings[0].message;
}

TEST(NonfiniteOrigin, AValueThatEnteredWithNaNIsNamed) {
    at::Tensor g = at::ones({3}, at::kFloat);
    g[1] = NAN;
    TraceScope scope(true);
    scope.trace().label(g, "g", Role::input);
    const at::Tensor y = g * 2;
    const Trace done = scope.stop();
    const auto findings = find_nonfinite_origin(done);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, "NONFINITE");
    EXPECT_EQ(findings[0].message.rfind("g holds NaN/Inf before any traced op", 0), 0u)
        << findings[0].message;
}

TEST(NonfiniteOrigin, NothingWithoutValueChecksOrWhenFinite) {
    const at::Tensor x = -at::ones({3}, at::kFloat);
    {
        TraceScope scope;  // values not checked
        const at::Tensor y = at::sqrt(x);
        EXPECT_TRUE(find_nonfinite_origin(scope.stop()).empty());
    }
    TraceScope scope(true);
    const at::Tensor y = x * 3;
    EXPECT_TRUE(find_nonfinite_origin(scope.stop()).empty());
}

// ---- ops outside a dtype, the table ----

TEST(OutsideDtype, FlagsEveryOpWithAnotherFloat) {
    const at::Tensor a = at::rand({3}, at::kDouble);
    TraceScope scope;
    const at::Tensor b = a * 2;
    const at::Tensor c = b.to(at::kFloat);
    const at::Tensor d = at::arange(3);  // int64 is not a float: never flagged
    Trace done = scope.stop();

    const auto outside = ops_outside_dtype(done, at::kDouble);
    ASSERT_FALSE(outside.empty());
    EXPECT_EQ(outside.front(), done.producer_of(c));
    for (int64_t seq : outside) EXPECT_GE(seq, done.producer_of(c));
    EXPECT_TRUE(ops_outside_dtype(done, at::kFloat).size() > outside.size());
}

TEST(OutsideDtype, SimpleGlaReferenceStaysFp64) {
    constexpr int64_t B = 1, T = 40, H = 2, K = 8, V = 8;
    ref::SimpleGlaInputs in;
    in.q = at::randn({B, T, H, K}, at::kDouble);
    in.k = at::randn({B, T, H, K}, at::kDouble);
    in.v = at::randn({B, T, H, V}, at::kDouble);
    in.g = at::log_sigmoid(at::randn({B, T, H}, at::kDouble));
    in.h0 = at::randn({B, H, K, V}, at::kDouble);
    const at::Tensor d_o = at::randn({B, T, H, V}, at::kDouble);
    const at::Tensor dht = at::randn({B, H, K, V}, at::kDouble);

    TraceScope scope;
    const auto out = ref::simple_gla_fwd(in);
    const auto grads = ref::simple_gla_bwd(in, d_o, dht);
    Trace done = scope.stop();

    ASSERT_GT(done.ops().size(), static_cast<size_t>(T));
    const auto outside = ops_outside_dtype(done, at::kDouble);
    EXPECT_TRUE(outside.empty()) << "op #" << outside.front() << " "
                                 << done.ops()[outside.front()].op;
    EXPECT_TRUE(find_promotions(done, at::kDouble).empty());
}

TEST(Table, RowsDescribeInputsAndOutputs) {
    const at::Tensor k = at::rand({2, 3}).to(at::kBFloat16);
    const at::Tensor k_a = at::rand({3});
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(k, "k");
    trace.label(k_a, "k_a", Role::parameter);
    const at::Tensor t = k * 2.0;
    at::Tensor u = at::addcmul(t, t, k_a);
    u.add_(1.0);
    const at::Tensor v = u.transpose(0, 1);
    Trace done = scope.stop();

    const auto rows = trace_table(done);
    ASSERT_EQ(rows.size(), done.ops().size());
    const int64_t mul = done.producer_of(t);
    const TraceRow* row = nullptr;
    for (const TraceRow& r : rows)
        if (r.op == "aten::addcmul" && r.depth == 0) row = &r;
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(row->autocast, 0);
    EXPECT_EQ(row->inputs, "bf16[2,3] <- #" + std::to_string(mul) + "; bf16[2,3] <- #" +
                               std::to_string(mul) + "; fp32[3] (k_a)");
    EXPECT_EQ(row->outputs, "fp32[2,3]");
    EXPECT_EQ(rows.at(mul).inputs, "bf16[2,3] (k)");
    EXPECT_EQ(rows.at(done.producer_of(u)).outputs, "fp32[2,3] in-place");
    EXPECT_EQ(rows.at(done.producer_of(v)).outputs, "fp32[3,2] view");
    for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(rows[i].seq, static_cast<int64_t>(i));
        EXPECT_EQ(rows[i].depth, done.ops()[i].depth);
    }
}

}  // namespace
}  // namespace lav::trace
