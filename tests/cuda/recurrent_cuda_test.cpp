// tests/cuda/recurrent_cuda_test.cpp — the CUDA recurrent kernels of simple_gla, gla and hgrn
// against their CPU backends (same precision contract), forward and backward, over dtypes,
// state dtypes, layouts, varlen (int32/int64, empty sequence, ragged), head widths that are not
// powers of two, and NaN-poisoned outputs. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/backend_pair.h"

namespace lav::kernels {
namespace {

using backend_pair::Case;

class RecurrentCuda : public testing::TestWithParam<Case> {};

TEST_P(RecurrentCuda, MatchesCpuBackend) { backend_pair::expect_backends_agree(GetParam()); }

std::vector<Case> cases() {
    std::vector<Case> out;
    const std::vector<int64_t> ragged = {0, 37, 37, 100, 164};  // an empty sequence, ragged ends
    for (const std::string family : {"simple_gla", "gla", "hgrn"})
        for (const auto in : {at::kFloat, at::kBFloat16, at::kHalf})
            for (const auto state : {at::kFloat, at::kBFloat16}) {
                Case c;
                c.family = family;
                c.gate = family == "simple_gla" ? "g" : "";
                c.in = in;
                c.state = state;
                out.push_back(c);
                c.head_first = true;
                c.cu = ragged, c.B = 1, c.T = 164;
                out.push_back(c);
            }
    for (const std::string family : {"simple_gla", "gla", "hgrn"})
        for (const auto& [K, V] : {std::pair{60, 100}, {128, 128}, {256, 256}, {100, 60}}) {
            Case c;
            c.family = family;
            c.gate = family == "simple_gla" ? "g_gamma" : "";
            c.K = K, c.V = V, c.T = 80;
            c.cu = {0, 0, 80}, c.B = 1, c.cu_int32 = true, c.h0 = false;
            out.push_back(c);
        }
    Case none;
    none.family = "simple_gla", none.gate = "none";
    out.push_back(none);
    return out;
}

INSTANTIATE_TEST_SUITE_P(Cuda, RecurrentCuda, testing::ValuesIn(cases()), backend_pair::name_of);

}  // namespace
}  // namespace lav::kernels
