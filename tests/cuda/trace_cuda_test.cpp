// tests/cuda/trace_cuda_test.cpp — the dtype tracer on CUDA ops: devices, dtypes, producers,
// CUDA autocast and the PROMOTION finding, as on the CPU. Needs LibTorch's CUDA half only at run
// time, so it builds everywhere; skips without a GPU.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/trace_test.h"
#include "trace/analysis.h"
#include "trace/autocast.h"
#include "trace/tracer.h"

namespace lav::trace {
namespace {

void expect_on_cuda(const std::vector<TensorInfo>& tensors, const std::string& what) {
    for (const TensorInfo& t : tensors) {
        EXPECT_TRUE(t.device.is_cuda()) << what << ": " << describe(t);
        EXPECT_NE(describe(t).find(" cuda:"), std::string::npos) << what << ": " << describe(t);
    }
}

/// The RWKV7 seed's expression on `device`: k = addcmul(k, k * (a - 1), k_a) with fp16
/// activations and an fp32 parameter k_a, traced; `k2` gets the result.
Trace trace_addcmul(c10::Device device, at::Tensor& k2) {
    at::manual_seed(3);
    const at::Tensor k = at::randn({2, 16, 4, 8}).to(device, at::kHalf);
    const at::Tensor a = at::rand({2, 16, 4, 8}).to(device, at::kHalf);
    const at::Tensor k_a = at::randn({8}).to(device, at::kFloat);
    TraceScope scope;
    Trace& trace = scope.trace();
    trace.label(k, "k", Role::input);
    trace.label(k_a, "k_a", Role::parameter);
    k2 = at::addcmul(k, k * (a - 1), k_a);
    trace.label(k2, "k");
    return scope.stop();
}

TEST(TraceCuda, HalfTimesFloatParameterPromotesOnTheGpu) {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    at::Tensor k2;
    const Trace done = trace_addcmul(at::kCUDA, k2);
    ASSERT_TRUE(k2.is_cuda());
    ASSERT_EQ(k2.scalar_type(), at::kFloat);

    const auto ops = top_level(done);
    ASSERT_EQ(ops.size(), 3u);
    const OpRecord& sub = *ops[0];
    const OpRecord& mul = *ops[1];
    const OpRecord& addcmul = *ops[2];
    EXPECT_EQ(sub.op, "aten::sub");
    EXPECT_EQ(mul.op, "aten::mul");
    EXPECT_EQ(addcmul.op, "aten::addcmul");
    for (const OpRecord* op : ops) {
        expect_on_cuda(op->inputs, op->op + " input");
        expect_on_cuda(op->outputs, op->op + " output");
        EXPECT_FALSE(op->autocast) << op->op;
    }
    ASSERT_EQ(sub.outputs.size(), 1u);
    EXPECT_EQ(sub.outputs[0].dtype, at::kHalf);
    ASSERT_EQ(mul.outputs.size(), 1u);
    EXPECT_EQ(mul.outputs[0].dtype, at::kHalf);
    ASSERT_EQ(addcmul.inputs.size(), 3u);
    EXPECT_EQ(addcmul.inputs[0].dtype, at::kHalf);
    EXPECT_EQ(addcmul.inputs[0].label, "k");
    EXPECT_EQ(addcmul.inputs[1].dtype, at::kHalf);
    EXPECT_EQ(addcmul.inputs[1].producer, mul.seq);
    EXPECT_EQ(addcmul.inputs[2].dtype, at::kFloat);
    EXPECT_EQ(addcmul.inputs[2].label, "k_a");
    EXPECT_EQ(addcmul.inputs[2].role, Role::parameter);
    ASSERT_EQ(addcmul.outputs.size(), 1u);
    EXPECT_EQ(addcmul.outputs[0].dtype, at::kFloat);
    EXPECT_EQ(addcmul.outputs[0].shape, (std::vector<int64_t>{2, 16, 4, 8}));
    EXPECT_EQ(done.producer_of(k2), addcmul.seq);

    const auto findings = find_promotions(done, at::kHalf);
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].kind, "PROMOTION");
    EXPECT_EQ(findings[0].tensor, "k");
    EXPECT_EQ(findings[0].seq, addcmul.seq);
    EXPECT_EQ(findings[0].message,
              "k: fp16 -> fp32 at aten::addcmul, operand k_a: fp32 (parameter)");
    EXPECT_EQ(findings[0].history, "k: fp16 —aten::addcmul(k_a: fp32)→ fp32");

    // the same ops on the CPU make the same records and findings, devices aside
    at::Tensor cpu_k2;
    const Trace cpu = trace_addcmul(at::kCPU, cpu_k2);
    const auto cpu_ops = top_level(cpu);
    ASSERT_EQ(cpu_ops.size(), ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
        EXPECT_EQ(cpu_ops[i]->op, ops[i]->op);
        ASSERT_EQ(cpu_ops[i]->outputs.size(), ops[i]->outputs.size()) << ops[i]->op;
        for (size_t o = 0; o < ops[i]->outputs.size(); ++o)
            EXPECT_EQ(cpu_ops[i]->outputs[o].dtype, ops[i]->outputs[o].dtype) << ops[i]->op;
    }
    const auto cpu_findings = find_promotions(cpu, at::kHalf);
    ASSERT_EQ(cpu_findings.size(), 1u);
    EXPECT_EQ(cpu_findings[0].message, findings[0].message);
    EXPECT_EQ(cpu_findings[0].history, findings[0].history);
}

TEST(TraceCuda, CudaAutocastIsRecordedForCudaOpsOnly) {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    const at::Tensor x = at::randn({16, 32}, at::device(at::kCUDA).dtype(at::kFloat));
    const at::Tensor w = at::randn({32, 8}, at::device(at::kCUDA).dtype(at::kFloat));
    const at::Tensor c = at::randn({4});
    TraceScope scope;
    at::Tensor y;
    at::Tensor cpu;
    {
        AutocastGuard autocast(at::kCUDA, true, at::kHalf);
        y = at::matmul(x, w);
        // CPU autocast stays off
        cpu = c * 2;
    }
    const at::Tensor z = y * 2;
    const Trace done = scope.stop();

    ASSERT_EQ(y.scalar_type(), at::kHalf);
    const auto ops = top_level(done);
    ASSERT_EQ(ops.size(), 3u);
    EXPECT_EQ(ops[0]->op, "aten::matmul");
    EXPECT_TRUE(ops[0]->autocast);
    expect_on_cuda(ops[0]->inputs, "matmul input");
    ASSERT_EQ(ops[0]->outputs.size(), 1u);
    EXPECT_EQ(ops[0]->outputs[0].dtype, at::kHalf);
    EXPECT_EQ(ops[1]->op, "aten::mul");
    EXPECT_FALSE(ops[1]->autocast) << "a CPU op under CUDA autocast";
    ASSERT_EQ(ops[1]->inputs.size(), 1u);
    EXPECT_TRUE(ops[1]->inputs[0].device.is_cpu());
    EXPECT_EQ(ops[2]->op, "aten::mul");
    EXPECT_FALSE(ops[2]->autocast) << "after the autocast region";
    ASSERT_EQ(ops[2]->inputs.size(), 1u);
    EXPECT_EQ(ops[2]->inputs[0].producer, ops[0]->seq);
}

}  // namespace
}  // namespace lav::trace
