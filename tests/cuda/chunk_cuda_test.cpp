// tests/cuda/chunk_cuda_test.cpp — the CUDA chunk kernels of simple_gla, gla and hgrn against
// their CPU chunk backends (same precision contract), forward and backward, over chunk sizes,
// dtypes, state dtypes, layouts, varlen (int32/int64, empty sequence, ragged last chunks), head
// widths that are not powers of two, every simple_gla gate, enough heads for the widest value
// tiles, gla gates too strong to factor, and NaN-poisoned outputs. Skips without a GPU.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gated_linear_tc.h"
#include "cuda/backend_pair.h"
#include "simple_gla/simple_gla.h"

namespace lav::kernels {
namespace {

using backend_pair::Case;

class ChunkCuda : public testing::TestWithParam<Case> {};

TEST_P(ChunkCuda, MatchesCpuBackend) { backend_pair::expect_backends_agree(GetParam()); }

std::vector<Case> cases() {
    std::vector<Case> out;
    const std::vector<int64_t> ragged = {0, 37, 37, 100, 164};  // an empty sequence, ragged ends
    const std::vector<std::string> families = {"simple_gla", "gla", "hgrn"};
    for (const std::string& family : families)
        for (const int64_t chunk : {16, 32, 64})
            for (const auto in : {at::kFloat, at::kBFloat16, at::kHalf})
                for (const auto state : {at::kFloat, at::kBFloat16, at::kHalf}) {
                    // 16-bit states with fp32 inputs add nothing the other pairs miss
                    if (in == at::kFloat && state == at::kHalf) continue;
                    Case c;
                    c.family = family;
                    c.gate = family == "simple_gla" ? "g" : "";
                    c.chunk = chunk;
                    c.in = in;
                    c.state = state;
                    out.push_back(c);
                    c.head_first = true;
                    c.cu = ragged, c.B = 1, c.T = 164;
                    c.cu_int32 = chunk == 32;
                    out.push_back(c);
                }
    // K = 37, V = 42: rows not whole 16 bytes, stored states not whole quads, and a last key
    // without a partner in the paired stores
    for (const std::string& family : families)
        for (const auto& [K, V] : {std::pair{60, 100}, {128, 128}, {256, 256}, {100, 60}, {37, 42}})
            for (const int64_t chunk : {32, 64}) {
                Case c;
                c.family = family;
                c.gate = family == "simple_gla" ? "g_gamma" : "";
                c.chunk = chunk;
                c.K = K, c.V = V, c.T = 80;
                c.cu = {0, 0, 80}, c.B = 1, c.cu_int32 = true, c.h0 = false;
                out.push_back(c);
            }
    for (const std::string gate : {"g_gamma", "none"})
        for (const int64_t chunk : {16, 32, 64}) {
            Case c;
            c.family = "simple_gla", c.gate = gate, c.chunk = chunk;
            out.push_back(c);
            c.head_first = true, c.cu = ragged, c.B = 1, c.T = 164, c.in = at::kHalf;
            out.push_back(c);
        }
    // heads enough that the forwards take value tiles of 128, one block to a streaming
    // multiprocessor, with keys of 128 and of 64 (K = 60)
    for (const std::string family : {"simple_gla", "gla"})
        for (const auto state : {at::kFloat, at::kBFloat16}) {
            Case c;
            c.family = family, c.gate = family == "simple_gla" ? "g" : "";
            c.chunk = 64, c.in = at::kBFloat16, c.state = state;
            c.H = 80, c.K = 128, c.V = 128;
            out.push_back(c);
            c.head_first = true, c.cu = ragged, c.B = 1, c.T = 164, c.in = at::kHalf;
            c.K = 100, c.V = 100;
            out.push_back(c);
            c.K = 60, c.V = 128;
            out.push_back(c);
        }
    // gla's gate decaying so fast (~e^-6 a step) that its diagonal blocks are summed element
    // by element, as with fp16, not factored (kDiagonalSpan)
    for (const int64_t chunk : {32, 64}) {
        Case c;
        c.family = "gla", c.chunk = chunk, c.gate_scale = 8;
        out.push_back(c);
        c.head_first = true, c.cu = ragged, c.B = 1, c.T = 164, c.state = at::kBFloat16;
        out.push_back(c);
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(Cuda, ChunkCuda, testing::ValuesIn(cases()), backend_pair::name_of);

}  // namespace

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
    EXPECT_THROW(lav::cuda::gated_linear_tc_row_fwd(p, nullptr), std::invalid_argument);
    p.gate = lav::cuda::Gate::per_head;
    p.o.data = nullptr;
    EXPECT_THROW(lav::cuda::gated_linear_tc_row_fwd(p, nullptr), std::invalid_argument);
    p.o.data = &o;
    p.q.dtype = p.k.dtype = p.v.dtype = lav::cuda::DType::f32;
    EXPECT_THROW(lav::cuda::gated_linear_tc_row_fwd(p, nullptr), std::invalid_argument);
}
