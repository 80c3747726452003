// tests/cuda/chunk_cuda_test.cpp — what the CUDA kernels of simple_gla, gla and hgrn do that no
// row shows: their contract's tensor-core operands, the row-gate forward's refusals and when it
// cuts sequences into segments, and int32 cu_seqlens. Every CUDA row against its CPU row:
// tests/families/cuda_rows_test.cpp. Skips without a GPU.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda/gated_linear_tc.h"
#include "families/generic.h"
#include "gla/gla.h"
#include "hgrn/hgrn.h"
#include "simple_gla/simple_gla.h"

namespace lav::kernels {
namespace {

template <class Args, class Grads>
using Backward = Grads (*)(const Args&, const at::Tensor& d_o, const at::Tensor& dht);

/// Each listed CUDA kernel of `family`, forward and backward, on a packed batch (an empty
/// sequence, ragged ends) with cu_seqlens as int64 and as int32: the same bits, as every sum has
/// a fixed order. Rows always pass int64 (core/row.h); the ops library may be handed int32.
template <class Args, class Fwd, class Grads>
void expect_int32_offsets_change_nothing(
    const std::string& family, Args (*args_of)(const Call&),
    const std::vector<std::pair<Fwd (*)(const Args&), Backward<Args, Grads>>>& kernels) {
    namespace g = test::generic;
    const g::Family& f = g::registry().get(family);
    const g::Drawn d =
        g::draw(f, g::packed(g::small_case(f, g::default_options(f)), {0, 37, 37, 100, 164}));
    Call call = d.call;
    call.tensors = harness::to_device(d.in.kernel, "cuda");
    const TensorMap cot = harness::to_device(d.cot.kernel, "cuda");
    const Args wide = args_of(call);
    Args narrow = wide;
    narrow.cu_seqlens = wide.cu_seqlens.to(at::kInt);
    const auto expect_same = [&](const TensorMap& a, const TensorMap& b) {
        for (const auto& [name, x] : a) {
            if (!x.defined()) continue;
            EXPECT_TRUE(at::equal(b.at(name).cpu(), x.cpu())) << family << " " << name;
        }
    };
    for (const auto& [fwd, bwd] : kernels) {
        expect_same(results(fwd(wide)), results(fwd(narrow)));
        expect_same(results(bwd(wide, cot.at("d_o"), cot.at("dht"))),
                    results(bwd(narrow, cot.at("d_o"), cot.at("dht"))));
    }
}

}  // namespace

TEST(CudaCuSeqlens, Int32MatchesInt64) {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    expect_int32_offsets_change_nothing<SimpleGlaArgs, SimpleGlaFwd, SimpleGlaGrads>(
        "simple_gla", simple_gla_args,
        {{simple_gla_chunk_fwd_cuda, simple_gla_chunk_bwd_cuda},
         {simple_gla_recurrent_fwd_cuda, simple_gla_recurrent_bwd_cuda}});
    expect_int32_offsets_change_nothing<GlaArgs, GlaFwd, GlaGrads>(
        "gla", gla_args,
        {{gla_chunk_fwd_cuda, gla_chunk_bwd_cuda},
         {gla_recurrent_fwd_cuda, gla_recurrent_bwd_cuda}});
    expect_int32_offsets_change_nothing<HgrnArgs, HgrnFwd, HgrnGrads>(
        "hgrn", hgrn_args,
        {{hgrn_chunk_fwd_cuda, hgrn_chunk_bwd_cuda},
         {hgrn_recurrent_fwd_cuda, hgrn_recurrent_bwd_cuda}});
}

// The chunk contract declares the tensor cores' operands exactly where those kernels run: CUDA
// inputs, all fp16 or all bf16, at most 128 keys.
TEST(ChunkCudaContract, DeclaresTensorCoreOperandsWhereTheyRun) {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    const auto declared = [](at::ScalarType type, int64_t K, at::Device device,
                             std::string_view variant) -> std::optional<DType> {
        SimpleGlaArgs a;
        const auto options = at::TensorOptions().device(device).dtype(type);
        a.q = a.k = at::zeros({1, 16, 2, K}, options);
        a.v = at::zeros({1, 16, 2, 64}, options);
        for (const ContractItem& item : simple_gla_contract(variant, false, a).items)
            if (item.item == "tensor-core operands") return item.dtype;
        return std::nullopt;
    };
    const at::Device gpu(at::kCUDA), cpu(at::kCPU);
    EXPECT_EQ(declared(at::kBFloat16, 64, gpu, "chunk"), DType::bf16);
    EXPECT_EQ(declared(at::kHalf, 128, gpu, "chunk"), DType::fp16);
    EXPECT_EQ(declared(at::kFloat, 64, gpu, "chunk"), std::nullopt);
    EXPECT_EQ(declared(at::kBFloat16, 256, gpu, "chunk"), std::nullopt);
    EXPECT_EQ(declared(at::kBFloat16, 64, gpu, "recurrent"), std::nullopt);
    EXPECT_EQ(declared(at::kBFloat16, 64, cpu, "chunk"), std::nullopt);
}

}  // namespace lav::kernels

// simple_gla's tensor-core forward refuses a problem it does not compute, before any launch:
// a per-key gate, no o to write, or 32-bit inputs.
TEST(RowGateForward, RefusesWhatItDoesNotCompute) {
    lav::cuda::GatedLinearProblem p;
    p.q.dtype = p.k.dtype = p.v.dtype = lav::cuda::DType::bf16;
    p.dk = p.dv = 64;
    float o = 0.f;
    p.o.data = &o;
    p.gate = lav::cuda::Gate::per_key;
    EXPECT_THROW(lav::cuda::gated_linear_tc_row_fwd(p, nullptr, nullptr), std::invalid_argument);
    p.gate = lav::cuda::Gate::per_head;
    p.o.data = nullptr;
    EXPECT_THROW(lav::cuda::gated_linear_tc_row_fwd(p, nullptr, nullptr), std::invalid_argument);
    p.o.data = &o;
    p.q.dtype = p.k.dtype = p.v.dtype = lav::cuda::DType::f32;
    EXPECT_THROW(lav::cuda::gated_linear_tc_row_fwd(p, nullptr, nullptr), std::invalid_argument);
}

// A few long sequences leave most multiprocessors idle, one block per (sequence, head, value
// tile), so the row-gate forward cuts them into segments (and needs scratch for what each
// segment carries to the next); 80 heads of short sequences fill the GPU as they are. The
// segmented forward's results are checked in tests/families/cuda_rows_test.cpp (one head over
// 1000 positions).
TEST(RowGateForward, CutsFewLongSequencesIntoSegments) {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    lav::cuda::GatedLinearProblem p;
    p.q.dtype = p.k.dtype = p.v.dtype = lav::cuda::DType::bf16;
    p.gate = lav::cuda::Gate::per_head;
    p.dk = p.dv = 64;
    p.chunk = 64;
    p.seqs.n = 2;
    p.seqs.t = 1000;
    p.heads = 1;
    EXPECT_GT(lav::cuda::gated_linear_tc_row_workspace_floats(p), 0);
    p.seqs.t = 100;
    p.heads = 80;
    p.dk = p.dv = 128;
    EXPECT_EQ(lav::cuda::gated_linear_tc_row_workspace_floats(p), 0);
}
