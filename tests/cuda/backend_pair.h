// tests/cuda/backend_pair.h — runs one case of simple_gla, gla or hgrn through the CUDA
// backend and the CPU backend (one precision contract) and compares every result; shared by
// the recurrent and chunk CUDA tests.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/cuda_glue.h"
#include "common/family_test.h"
#include "kernels/gla/gla.h"
#include "kernels/hgrn/hgrn.h"
#include "kernels/simple_gla/simple_gla.h"

namespace lav::kernels::backend_pair {

using namespace lav::test;

/// CUDA and CPU backends keep one contract; they differ only in fp32 summation order and in
/// where that lets a 16-bit rounding fall.
constexpr double kSameContract = 1e-3;

struct Case {
    std::string family;  // simple_gla, gla, hgrn
    std::string gate;    // simple_gla: g, g_gamma or none
    int64_t B = 2, T = 100, H = 3, K = 64, V = 64;
    std::vector<int64_t> cu;  // empty: dense
    bool cu_int32 = false;
    bool head_first = false;
    c10::ScalarType in = at::kBFloat16, state = at::kFloat;
    bool h0 = true;
    int64_t chunk = 0;      // 0: the recurrent variant; else the chunk variant's chunk size
    double gate_scale = 1;  // gla: the per-key gate times this
};

std::string name_of(const testing::TestParamInfo<Case>& info) {
    const Case& c = info.param;
    std::string n = c.family + (c.gate.empty() ? "" : "_" + c.gate) + "_" + dtype_str(c.in) +
                    "_state_" + dtype_str(c.state) + "_K" + std::to_string(c.K) + "_V" +
                    std::to_string(c.V) + (c.head_first ? "_head_first" : "_head_last");
    if (!c.cu.empty()) n += c.cu_int32 ? "_varlen32" : "_varlen64";
    if (c.chunk > 0) n += "_C" + std::to_string(c.chunk);
    if (c.H != Case{}.H) n += "_H" + std::to_string(c.H);
    if (c.gate_scale != Case{}.gate_scale) n += "_gate_x" + std::to_string(int(c.gate_scale));
    return n + (c.h0 ? "_h0" : "");
}

/// x ([B, T, H, D] head_last) as the case's layout: a transposed view, read through strides.
at::Tensor laid_out(const at::Tensor& x, bool head_first) {
    return head_first ? x.transpose(1, 2) : x;
}

at::Tensor on_cuda(const at::Tensor& x) { return x.defined() ? x.to(at::kCUDA) : x; }
at::Tensor on_cpu(const at::Tensor& x) { return x.defined() ? x.cpu() : x; }

/// The CPU and CUDA results of one forward + backward, by name.
struct Both {
    std::vector<std::pair<std::string, std::pair<at::Tensor, at::Tensor>>> results;
    void add(const std::string& n, const at::Tensor& cpu, const at::Tensor& cuda) {
        results.push_back({n, {cpu, on_cpu(cuda)}});
    }
};

template <typename Args>
void common_args(Args& a, const Case& c) {
    a.layout = c.head_first ? Layout::head_first : Layout::head_last;
    a.state_dtype = c.state;
    if (c.chunk > 0) a.chunk_size = c.chunk;
    if (!c.cu.empty()) a.cu_seqlens = at::tensor(c.cu, at::kLong);
}

/// The CUDA copy of CPU arguments: same values on the device, cu_seqlens as the case asks.
template <typename Args>
Args cuda_args(const Args& a, const Case& c) {
    Args g = a;
    if (c.cu_int32) g.cu_seqlens = a.cu_seqlens.to(at::kInt);
    return g;
}

Both run_gated_linear(const Case& c) {
    Draw draw(7);
    const int64_t N = c.cu.empty() ? c.B : int64_t(c.cu.size()) - 1;
    const bool fh = c.head_first;
    at::Tensor q = laid_out(draw.randn({c.B, c.T, c.H, c.K}, c.in), fh);
    at::Tensor k = laid_out(draw.randn({c.B, c.T, c.H, c.K}, c.in), fh);
    at::Tensor v = laid_out(draw.randn({c.B, c.T, c.H, c.V}, c.in), fh);
    at::Tensor h0 = c.h0 ? draw.randn({N, c.H, c.K, c.V}, c.state) : at::Tensor();
    at::Tensor d_o = laid_out(draw.randn({c.B, c.T, c.H, c.V}, c.in), fh).contiguous();
    at::Tensor dht = draw.randn({N, c.H, c.K, c.V}, c.state);
    Both both;
    if (c.family == "gla") {
        GlaArgs a;
        common_args(a, c);
        a.q = q, a.k = k, a.v = v, a.h0 = h0;
        a.g = laid_out(
            (at::log_sigmoid(draw.randn({c.B, c.T, c.H, c.K})) * c.gate_scale).to(at::kFloat), fh);
        GlaArgs g = cuda_args(a, c);
        g.q = on_cuda(a.q), g.k = on_cuda(a.k), g.v = on_cuda(a.v), g.g = on_cuda(a.g);
        g.h0 = on_cuda(a.h0);
        const bool chunk = c.chunk > 0;
        const GlaFwd f_cpu = chunk ? gla_chunk_fwd_cpu(a) : gla_recurrent_fwd_cpu(a);
        const GlaFwd f_gpu = chunk ? gla_chunk_fwd_cuda(g) : gla_recurrent_fwd_cuda(g);
        const GlaGrads b_cpu =
            chunk ? gla_chunk_bwd_cpu(a, d_o, dht) : gla_recurrent_bwd_cpu(a, d_o, dht);
        const GlaGrads b_gpu = chunk ? gla_chunk_bwd_cuda(g, on_cuda(d_o), on_cuda(dht))
                                     : gla_recurrent_bwd_cuda(g, on_cuda(d_o), on_cuda(dht));
        both.add("o", f_cpu.o, f_gpu.o), both.add("ht", f_cpu.ht, f_gpu.ht);
        both.add("dq", b_cpu.dq, b_gpu.dq), both.add("dk", b_cpu.dk, b_gpu.dk);
        both.add("dv", b_cpu.dv, b_gpu.dv), both.add("dg", b_cpu.dg, b_gpu.dg);
        both.add("dh0", b_cpu.dh0, b_gpu.dh0);
        return both;
    }
    SimpleGlaArgs a;
    common_args(a, c);
    a.q = q, a.k = k, a.v = v, a.h0 = h0;
    if (c.gate == "g")
        a.g = fh ? at::log_sigmoid(draw.randn({c.B, c.T, c.H})).to(at::kFloat).transpose(1, 2)
                 : at::log_sigmoid(draw.randn({c.B, c.T, c.H})).to(at::kFloat);
    if (c.gate == "g_gamma")
        a.g_gamma = at::log(1 - at::pow(2.0, -5.0 - at::arange(c.H, at::kDouble))).to(at::kFloat);
    SimpleGlaArgs g = cuda_args(a, c);
    g.q = on_cuda(a.q), g.k = on_cuda(a.k), g.v = on_cuda(a.v), g.g = on_cuda(a.g);
    g.g_gamma = on_cuda(a.g_gamma), g.h0 = on_cuda(a.h0);
    const bool chunk = c.chunk > 0;
    const SimpleGlaFwd f_cpu =
        chunk ? simple_gla_chunk_fwd_cpu(a) : simple_gla_recurrent_fwd_cpu(a);
    const SimpleGlaFwd f_gpu =
        chunk ? simple_gla_chunk_fwd_cuda(g) : simple_gla_recurrent_fwd_cuda(g);
    const SimpleGlaGrads b_cpu =
        chunk ? simple_gla_chunk_bwd_cpu(a, d_o, dht) : simple_gla_recurrent_bwd_cpu(a, d_o, dht);
    const SimpleGlaGrads b_gpu = chunk
                                     ? simple_gla_chunk_bwd_cuda(g, on_cuda(d_o), on_cuda(dht))
                                     : simple_gla_recurrent_bwd_cuda(g, on_cuda(d_o), on_cuda(dht));
    both.add("o", f_cpu.o, f_gpu.o), both.add("ht", f_cpu.ht, f_gpu.ht);
    both.add("dq", b_cpu.dq, b_gpu.dq), both.add("dk", b_cpu.dk, b_gpu.dk);
    both.add("dv", b_cpu.dv, b_gpu.dv), both.add("dg", b_cpu.dg, b_gpu.dg);
    both.add("dh0", b_cpu.dh0, b_gpu.dh0);
    return both;
}

Both run_hgrn(const Case& c) {
    Draw draw(11);
    const int64_t N = c.cu.empty() ? c.B : int64_t(c.cu.size()) - 1;
    const bool fh = c.head_first;
    HgrnArgs a;
    common_args(a, c);
    a.x = laid_out(draw.randn({c.B, c.T, c.H, c.K}, c.in), fh);
    a.g = laid_out(at::log_sigmoid(draw.randn({c.B, c.T, c.H, c.K})).to(at::kFloat), fh);
    if (c.h0) a.h0 = draw.randn({N, c.H, c.K}, c.state);
    const at::Tensor d_o = laid_out(draw.randn({c.B, c.T, c.H, c.K}, c.in), fh).contiguous();
    const at::Tensor dht = draw.randn({N, c.H, c.K}, c.state);
    HgrnArgs g = cuda_args(a, c);
    g.x = on_cuda(a.x), g.g = on_cuda(a.g), g.h0 = on_cuda(a.h0);
    const bool chunk = c.chunk > 0;
    const HgrnFwd f_cpu = chunk ? hgrn_chunk_fwd_cpu(a) : hgrn_recurrent_fwd_cpu(a);
    const HgrnFwd f_gpu = chunk ? hgrn_chunk_fwd_cuda(g) : hgrn_recurrent_fwd_cuda(g);
    const HgrnGrads b_cpu =
        chunk ? hgrn_chunk_bwd_cpu(a, d_o, dht) : hgrn_recurrent_bwd_cpu(a, d_o, dht);
    const HgrnGrads b_gpu = chunk ? hgrn_chunk_bwd_cuda(g, on_cuda(d_o), on_cuda(dht))
                                  : hgrn_recurrent_bwd_cuda(g, on_cuda(d_o), on_cuda(dht));
    Both both;
    both.add("o", f_cpu.o, f_gpu.o), both.add("ht", f_cpu.ht, f_gpu.ht);
    both.add("dx", b_cpu.dx, b_gpu.dx), both.add("dg", b_cpu.dg, b_gpu.dg);
    both.add("dh0", b_cpu.dh0, b_gpu.dh0);
    return both;
}

/// Skips without a GPU; otherwise runs case c on both backends with NaN-poisoned outputs and
/// expects every result finite, of the CPU result's dtype and shape, and within kSameContract.
inline void expect_backends_agree(const Case& c) {
    if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
    set_poison_outputs(true);
    const Both both = c.family == "hgrn" ? run_hgrn(c) : run_gated_linear(c);
    for (const auto& [name, pair] : both.results) {
        const auto& [cpu, gpu] = pair;
        ASSERT_EQ(cpu.defined(), gpu.defined()) << name;
        if (!cpu.defined()) continue;
        EXPECT_EQ(gpu.scalar_type(), cpu.scalar_type()) << name;
        ASSERT_EQ(gpu.sizes(), cpu.sizes()) << name;
        EXPECT_TRUE(all_finite(gpu)) << name << " has NaN or Inf (unwritten elements?)";
        const double err = rel_rmse(gpu, cpu);
        record_error(name, err);
        EXPECT_LT(err, kSameContract) << name;
    }
}

}  // namespace lav::kernels::backend_pair
