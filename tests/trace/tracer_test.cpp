// tests/trace/tracer_test.cpp — the tracer's records: producers, in-place, views, autocast, scopes.
#include "trace/tracer.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/trace_test.h"
#include "core/error.h"
#include "trace/autocast.h"

namespace lav::trace {
namespace {

TEST(Tracer, RecordsDtypesShapesAndProducers) {
    const at::Tensor a = at::ones({2, 3}, at::kHalf);  // made before the scope: external
    TraceScope scope;
    const at::Tensor b = a * 2.0;
    const at::Tensor c = at::add(b, a);
    Trace trace = scope.stop();

    const auto ops = top_level(trace);
    ASSERT_EQ(ops.size(), 2u);
    const OpRecord& mul = *ops[0];
    const OpRecord& add = *ops[1];
    EXPECT_EQ(mul.op, "aten::mul");
    EXPECT_EQ(mul.depth, 0);
    EXPECT_FALSE(mul.autocast);
    // the python-style scalar is not a tensor input
    ASSERT_EQ(mul.inputs.size(), 1u);
    EXPECT_EQ(mul.inputs[0].dtype, at::kHalf);
    EXPECT_EQ(mul.inputs[0].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_TRUE(mul.inputs[0].device.is_cpu());
    EXPECT_EQ(mul.inputs[0].producer, -1);
    ASSERT_EQ(mul.outputs.size(), 1u);
    EXPECT_EQ(mul.outputs[0].dtype, at::kHalf);
    EXPECT_EQ(mul.outputs[0].inplace_of, -1);
    EXPECT_EQ(mul.outputs[0].view_of, -1);

    EXPECT_EQ(add.op, "aten::add");
    ASSERT_EQ(add.inputs.size(), 2u);
    EXPECT_EQ(add.inputs[0].producer, mul.seq);
    EXPECT_EQ(add.inputs[1].producer, -1);
    EXPECT_GT(add.seq, mul.seq);
    EXPECT_EQ(trace.producer_of(b), mul.seq);
    EXPECT_EQ(trace.producer_of(c), add.seq);
    EXPECT_EQ(trace.producer_of(a), -1);
    for (size_t i = 0; i < trace.ops().size(); ++i) EXPECT_EQ(trace.ops()[i].seq, int64_t(i));
}

TEST(Tracer, NestedOpsCarryTheirDepth) {
    const at::Tensor x = at::rand({4, 4});
    TraceScope scope;
    const at::Tensor y = x.to(at::kHalf);
    Trace trace = scope.stop();

    ASSERT_GE(trace.ops().size(), 2u);
    const OpRecord& to = trace.ops()[0];
    EXPECT_EQ(to.op, "aten::to");
    EXPECT_EQ(to.depth, 0);
    // aten::to is implemented by aten::_to_copy, which runs inside it
    bool found = false;
    for (size_t i = 1; i < trace.ops().size(); ++i) {
        EXPECT_GT(trace.ops()[i].depth, 0) << trace.ops()[i].op;
        found = found || trace.ops()[i].op == "aten::_to_copy";
    }
    EXPECT_TRUE(found);
    // the outermost op that returned the tensor is its producer
    EXPECT_EQ(trace.producer_of(y), to.seq);
}

TEST(Tracer, OutputsAreMatchedAgainstTheirOwnOpsInputs) {
    // the ops an op calls have inputs of their own, dropped when they end: to()'s copy_ writes
    // into the tensor to() returns, which is no input of to()'s, and baddbmm_ returns its own
    // first input after calls on its other inputs
    const at::Tensor x = at::rand({4, 4});
    const at::Tensor a = at::rand({2, 4, 4}), b = at::rand({2, 4, 4});
    at::Tensor c = at::rand({2, 4, 4});
    TraceScope scope;
    const at::Tensor y = x.to(at::kHalf);
    c.baddbmm_(a, b);
    const at::Tensor z = y + 1;
    Trace trace = scope.stop();

    int checked = 0;
    for (const OpRecord& op : trace.ops()) {
        ASSERT_EQ(op.outputs.size(), 1u) << op.op;
        const TensorInfo& out = op.outputs[0];
        if (op.op == "aten::to" || op.op == "aten::_to_copy") {
            EXPECT_EQ(out.inplace_of, -1) << op.op;
            EXPECT_EQ(out.view_of, -1) << op.op;
            ++checked;
        } else if (op.op == "aten::copy_" || op.op == "aten::baddbmm_") {
            EXPECT_EQ(out.inplace_of, 0) << op.op;
            ++checked;
        }
    }
    EXPECT_GE(checked, 4);
    const auto ops = top_level(trace);
    ASSERT_EQ(ops.size(), 3u);
    EXPECT_EQ(ops[1]->op, "aten::baddbmm_");
    EXPECT_EQ(ops[2]->inputs.at(0).producer, ops[0]->seq);
}

TEST(Tracer, TensorListInputsContributeEachTensor) {
    const at::Tensor a = at::ones({2}, at::kFloat);
    const at::Tensor b = at::ones({3}, at::kHalf);
    TraceScope scope;
    const at::Tensor c = at::cat({a, b});
    Trace trace = scope.stop();
    const OpRecord& cat = *top_level(trace).at(0);
    EXPECT_EQ(cat.op, "aten::cat");
    ASSERT_EQ(cat.inputs.size(), 2u);
    EXPECT_EQ(cat.inputs[0].dtype, at::kFloat);
    EXPECT_EQ(cat.inputs[1].dtype, at::kHalf);
    EXPECT_EQ(cat.inputs[1].shape, std::vector<int64_t>{3});
    EXPECT_EQ(cat.outputs.at(0).dtype, at::kFloat);
}

TEST(Tracer, InPlaceOpsUpdateTheProducer) {
    const at::Tensor y = at::ones({4}, at::kFloat);
    TraceScope scope;
    Trace& trace = scope.trace();
    at::Tensor x = at::zeros({4}, at::kFloat);
    const int64_t zeros = trace.producer_of(x);
    trace.label(x, "S", Role::state);
    x.add_(y);
    const int64_t add = trace.producer_of(x);
    const at::Tensor z = x * 2;
    Trace done = scope.stop();

    ASSERT_GE(zeros, 0);
    ASSERT_GT(add, zeros);
    const OpRecord& add_op = done.ops()[add];
    EXPECT_EQ(add_op.op, "aten::add_");
    EXPECT_EQ(add_op.inputs.at(0).producer, zeros);
    EXPECT_EQ(add_op.inputs.at(0).label, "S");
    ASSERT_EQ(add_op.outputs.size(), 1u);
    EXPECT_EQ(add_op.outputs[0].inplace_of, 0);
    // the tensor keeps its label through the in-place op
    EXPECT_EQ(add_op.outputs[0].label, "S");
    const OpRecord& mul = done.ops()[done.producer_of(z)];
    EXPECT_EQ(mul.inputs.at(0).producer, add);
    EXPECT_EQ(mul.inputs.at(0).label, "S");
    EXPECT_EQ(mul.inputs.at(0).role, Role::state);
    EXPECT_EQ(done.label_of(x), "S");
}

TEST(Tracer, ViewsAreProducedByTheViewOp) {
    const at::Tensor x = at::rand({4, 6});
    TraceScope scope;
    const at::Tensor t = x.transpose(0, 1);
    const at::Tensor n = t.narrow(0, 1, 2);
    const at::Tensor s = n.select(0, 0);
    Trace trace = scope.stop();

    const auto ops = top_level(trace);
    ASSERT_EQ(ops.size(), 3u);
    EXPECT_EQ(ops[0]->op, "aten::transpose");
    EXPECT_EQ(ops[1]->op, "aten::narrow");
    EXPECT_EQ(ops[2]->op, "aten::select");
    EXPECT_EQ(trace.producer_of(t), ops[0]->seq);
    EXPECT_EQ(trace.producer_of(n), ops[1]->seq);
    EXPECT_EQ(trace.producer_of(s), ops[2]->seq);
    EXPECT_EQ(ops[1]->inputs.at(0).producer, ops[0]->seq);
    EXPECT_EQ(ops[2]->inputs.at(0).producer, ops[1]->seq);
    for (const OpRecord* op : ops) {
        EXPECT_EQ(op->outputs.at(0).view_of, 0) << op->op;
        EXPECT_EQ(op->outputs.at(0).inplace_of, -1) << op->op;
    }
    EXPECT_EQ(ops[0]->outputs[0].shape, (std::vector<int64_t>{6, 4}));
    EXPECT_EQ(ops[2]->outputs[0].shape, std::vector<int64_t>{4});
}

TEST(Tracer, LabelsReachLaterUsesAndTheProducer) {
    const at::Tensor k = at::rand({3});
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(k, "k_a", Role::parameter);
    const at::Tensor k2 = k * 3;
    // records built before the label get it too
    ASSERT_EQ(trace.ops().size(), trace.size());
    trace.label(k2, "k");
    const at::Tensor k3 = k2 + k;
    Trace done = scope.stop();

    const OpRecord& mul = done.ops()[done.producer_of(k2)];
    EXPECT_EQ(mul.inputs.at(0).label, "k_a");
    EXPECT_EQ(mul.inputs.at(0).role, Role::parameter);
    // a label given after the op reaches the op's output record
    EXPECT_EQ(mul.outputs.at(0).label, "k");
    const OpRecord& add = done.ops()[done.producer_of(k3)];
    EXPECT_EQ(add.inputs.at(0).label, "k");
    EXPECT_EQ(add.inputs.at(1).label, "k_a");
    EXPECT_EQ(add.outputs.at(0).label, "");
    EXPECT_EQ(done.role_of(k), Role::parameter);
    EXPECT_EQ(done.label_of(k3), "");
    EXPECT_EQ(done.op(mul.seq).outputs.at(0).label, "k");
    EXPECT_EQ(done.op(add.seq).op, "aten::add");
}

TEST(Tracer, AutocastIsRecorded) {
    const at::Tensor a = at::rand({8, 8});
    const at::Tensor b = at::rand({8, 8});
    TraceScope scope;
    at::Tensor on;
    {
        AutocastGuard autocast(at::kCPU, true, at::kBFloat16);
        on = at::matmul(a, b);
    }
    const at::Tensor off = at::matmul(a, b);
    Trace trace = scope.stop();

    EXPECT_EQ(on.scalar_type(), at::kBFloat16);
    EXPECT_EQ(off.scalar_type(), at::kFloat);
    const OpRecord& on_op = trace.ops()[trace.producer_of(on)];
    const OpRecord& off_op = trace.ops()[trace.producer_of(off)];
    EXPECT_EQ(on_op.op, "aten::matmul");
    EXPECT_EQ(on_op.depth, 0);
    EXPECT_TRUE(on_op.autocast);
    EXPECT_EQ(on_op.inputs.at(0).dtype, at::kFloat);
    EXPECT_EQ(on_op.outputs.at(0).dtype, at::kBFloat16);
    EXPECT_EQ(off_op.op, "aten::matmul");
    EXPECT_FALSE(off_op.autocast);
    EXPECT_EQ(off_op.outputs.at(0).dtype, at::kFloat);
}

TEST(Tracer, FreedAddressesAreNeverMisattributed) {
    // tensors made with RecordFunction disabled are invisible to the trace, like tensors made
    // outside it; if a freed traced tensor's address were reused for one, it would appear to
    // have that tensor's producer
    constexpr int kRounds = 3000;
    TraceScope scope;
    Trace& trace = scope.trace();
    for (int i = 0; i < kRounds; ++i) {
        { const at::Tensor dead = at::ones({8}) * 2; }
        at::Tensor fresh;
        {
            at::DisableRecordFunctionGuard untraced;
            fresh = at::empty({8});
        }
        ASSERT_EQ(trace.producer_of(fresh), -1) << "round " << i;
        const at::Tensor used = fresh + 1;
        const OpRecord& add = trace.ops()[trace.producer_of(used)];
        ASSERT_EQ(add.op, "aten::add");
        ASSERT_EQ(add.inputs.at(0).producer, -1) << "round " << i;
    }
    // 3 ops a round: the producer map was pruned of dead tensors several times on the way
    EXPECT_GE(scope.stop().ops().size(), static_cast<size_t>(3 * kRounds));
}

TEST(Tracer, ProducersSurviveTensorsDyingInAnyOrder) {
    // hundreds of live tensors while temporaries die at once and others in random order:
    // entries leave the producer map one by one and in prunings, and every live tensor must
    // keep its producer
    constexpr int kSteps = 6000;
    constexpr size_t kLive = 400;
    std::mt19937 random(7);
    TraceScope scope;
    Trace& trace = scope.trace();
    std::vector<std::pair<at::Tensor, int64_t>> live;
    for (int step = 0; step < kSteps; ++step) {
        { const at::Tensor temporary = at::empty({1}); }
        if (live.size() < kLive || random() % 2 == 0) {
            at::Tensor t = at::empty({1});
            live.emplace_back(t, static_cast<int64_t>(trace.size()) - 1);
        }
        if (live.size() > kLive / 2 && random() % 2 == 0) {
            std::swap(live[random() % live.size()], live.back());
            live.pop_back();
        }
        if (step % 500 == 499) {
            for (const auto& [t, seq] : live)
                ASSERT_EQ(trace.producer_of(t), seq) << "step " << step;
        }
    }
    for (const auto& [t, seq] : live) {
        ASSERT_EQ(trace.producer_of(t), seq);
        EXPECT_EQ(trace.ops()[seq].op, "aten::empty");
    }
}

TEST(Tracer, ShapesStayExactAcrossManyDistinctShapes) {
    // each distinct shape is kept once, found again through a small cache: far more shapes
    // than its slots, revisited in random order, must still come back exactly
    constexpr int kShapes = 2000;
    std::mt19937 random(11);
    std::vector<std::vector<int64_t>> shapes;
    for (int i = 0; i < kShapes; ++i) {
        std::vector<int64_t> shape(1 + random() % 4);
        for (int64_t& d : shape) d = 1 + random() % 9;
        shapes.push_back(shape);
    }
    TraceScope scope;
    std::vector<std::vector<int64_t>> made;
    for (int i = 0; i < 3 * kShapes; ++i) {
        made.push_back(shapes[random() % kShapes]);
        const at::Tensor t = at::empty(made.back());
    }
    made.push_back({});
    const at::Tensor scalar = at::scalar_tensor(1.0);
    const Trace trace = scope.stop();

    const auto ops = top_level(trace);
    ASSERT_EQ(ops.size(), made.size());
    for (size_t i = 0; i < made.size(); ++i) {
        ASSERT_EQ(ops[i]->outputs.size(), 1u) << ops[i]->op;
        ASSERT_EQ(ops[i]->outputs[0].shape, made[i]) << "op " << i;
    }
}

TEST(Tracer, RecordsStayOffTheMallocHeap) {
#if !defined(__GLIBC__)
    GTEST_SKIP() << "mallinfo2 is glibc's";
#else
    // the records live in mappings of their own (MappedArray), so that tracing leaves the
    // traced code's heap as it would be untraced: 40,000 more ops, megabytes of records, leave
    // the malloc heap where it was
    const auto heap_bytes = [] {
        const struct mallinfo2 m = mallinfo2();
        return m.uordblks + m.hblkhd;  // in use from the heap and in malloc's own mappings
    };
    const at::Tensor x = at::ones({4});
    TraceScope scope;
    // names, shapes and the producer map settle
    for (int i = 0; i < 1000; ++i) const at::Tensor y = x * 2;
    const size_t before = heap_bytes();
    for (int i = 0; i < 40000; ++i) const at::Tensor y = x * 2;
    const size_t after = heap_bytes();
    EXPECT_GE(scope.trace().size(), 41000u);
    EXPECT_LT(after, before + (64 << 10)) << "before " << before << " B, after " << after << " B";
#endif
}

TEST(Tracer, NothingIsRecordedWithoutAScope) {
    EXPECT_FALSE(TraceScope::active());
    EXPECT_FALSE(at::hasThreadLocalCallbacks());
    const at::Tensor x = at::rand({4});
    Trace trace;
    {
        TraceScope scope;
        EXPECT_TRUE(TraceScope::active());
        EXPECT_TRUE(at::hasThreadLocalCallbacks());
        const at::Tensor y = x * 2;
        trace = scope.stop();
        EXPECT_FALSE(TraceScope::active());
        const at::Tensor z = x * 3;
    }
    EXPECT_EQ(top_level(trace).size(), 1u);
    EXPECT_FALSE(TraceScope::active());
    EXPECT_FALSE(at::hasThreadLocalCallbacks());
    // a new scope starts empty
    TraceScope again;
    EXPECT_TRUE(again.trace().ops().empty());
}

TEST(Tracer, NestedScopesAreRejected) {
    TraceScope outer;
    try {
        TraceScope inner;
        FAIL() << "a nested TraceScope opened";
    } catch (const InternalError& e) {
        EXPECT_NE(std::string(e.what()).find("do not nest"), std::string::npos) << e.what();
    }
    // the outer scope still records
    const at::Tensor x = at::rand({2}) + 1;
    EXPECT_GE(outer.trace().producer_of(x), 0);
}

TEST(Tracer, DescribesTensors) {
    TensorInfo info;
    info.dtype = at::kBFloat16;
    info.shape = {2, 64, 4, 16};
    EXPECT_EQ(describe(info), "bf16[2,64,4,16]");
    info.device = c10::Device(c10::kCUDA, 1);
    info.dtype = at::kLong;
    info.shape = {};
    EXPECT_EQ(describe(info), "int64[] cuda:1");
}

}  // namespace
}  // namespace lav::trace
