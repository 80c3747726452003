// tests/kernels/rwkv6_cpu_test.cpp — rwkv6's CPU backend against the fp64 reference, its
// contract's names and its argument checks (layouts, varlen, chunk sizes and result dtypes:
// tests/families/generic_test.cpp). Not a bench.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/rwkv6/rwkv6.h"
#include "reference/rwkv6.h"

namespace lav::kernels {
namespace {

using namespace lav::test;

struct Case {
    int64_t B = 2, T = 512, H = 2, K = 64, V = 64;
    c10::ScalarType in = at::kBFloat16;
    c10::ScalarType state = at::kFloat;
    double normalizer = 1.0;  // w = logsigmoid(randn) / normalizer
    std::vector<int64_t> cu;
    double scale = 0.0;
    int64_t chunk = 64;
    uint64_t seed = 42;
};

struct Data {
    Rwkv6Args args;
    at::Tensor d_o, dht;
};

Data make_data(const Case& s) {
    Draw draw(s.seed);
    const int64_t N = num_sequences(s.B, s.cu);
    Data d;
    Rwkv6Args& a = d.args;
    a.q = draw.randn({s.B, s.T, s.H, s.K}, s.in);
    a.k = draw.randn({s.B, s.T, s.H, s.K}, s.in);
    a.v = draw.randn({s.B, s.T, s.H, s.V}, s.in);
    a.w = (at::log_sigmoid(draw.randn({s.B, s.T, s.H, s.K})) / s.normalizer).to(at::kFloat);
    a.u = draw.randn({s.H, s.K}, at::kFloat);
    a.h0 = draw.randn({N, s.H, s.K, s.V}, s.state);
    a.cu_seqlens = cu_tensor(s.cu);
    a.scale = s.scale;
    a.state_dtype = s.state;
    a.chunk_size = s.chunk;
    d.d_o = draw.randn({s.B, s.T, s.H, s.V}, s.in);
    d.dht = draw.randn({N, s.H, s.K, s.V}, s.state);
    return d;
}

Results gold(const Data& d) {
    ref::Rwkv6Inputs r;
    r.q = to_f64(d.args.q);
    r.k = to_f64(d.args.k);
    r.v = to_f64(d.args.v);
    r.w = to_f64(d.args.w);
    r.u = to_f64(d.args.u);
    r.h0 = to_f64(d.args.h0);
    r.cu_seqlens = cu_vector(d.args.cu_seqlens);
    r.scale = d.args.scale;
    const ref::Rwkv6Outputs f = ref::rwkv6_fwd(r);
    const ref::Rwkv6Grads g = ref::rwkv6_bwd(r, to_f64(d.d_o), to_f64(d.dht));
    return {{"o", f.o},   {"ht", f.ht}, {"dq", g.dq}, {"dk", g.dk},
            {"dv", g.dv}, {"dw", g.dw}, {"du", g.du}, {"dh0", g.dh0}};
}

Results run(const std::string& variant, const Rwkv6Args& a, const at::Tensor& d_o,
            const at::Tensor& dht) {
    const bool chunk = variant == "chunk";
    const Rwkv6Fwd f = chunk ? rwkv6_chunk_fwd_cpu(a) : rwkv6_recurrent_fwd_cpu(a);
    const Rwkv6Grads g =
        chunk ? rwkv6_chunk_bwd_cpu(a, d_o, dht) : rwkv6_recurrent_bwd_cpu(a, d_o, dht);
    return {{"o", f.o},   {"ht", f.ht}, {"dq", g.dq}, {"dk", g.dk},
            {"dv", g.dv}, {"dw", g.dw}, {"du", g.du}, {"dh0", g.dh0}};
}

// Bounds on rel_rmse at B=2 T=512 H=2 K=V=64 (measured values in kernels/rwkv6/README.md). bf16
// inputs with an fp32 state: the and FLA's acceptance (tests/ops/test_rwkv6.py: o 4e-3,
// the rest 5e-3; here o/ht 5e-3, dq/dk/dv/dh0 8e-3, dw/du 2e-2). fp16: the same scaled by fp16's
// 8x smaller epsilon. fp32: 1e-5 flags any lost term. 16-bit state: the bf16 table.
constexpr Bounds kBf16Bounds = {5e-3, 5e-3, 8e-3, 8e-3, 2e-2};
constexpr Bounds kFp16Bounds = {5e-3 / 8, 5e-3 / 8, 8e-3 / 8, 8e-3 / 8, 2e-2 / 8};
constexpr Bounds kFp32Bounds = {1e-5, 1e-5, 1e-5, 1e-5, 1e-5};
constexpr BoundsTable kBounds = {kBf16Bounds, kFp16Bounds, kFp32Bounds, kBf16Bounds};

const std::pair<Data, Results>& case_for(c10::ScalarType in, c10::ScalarType state) {
    return memoize(std::make_pair(in, state), [&] {
        Case s;
        s.in = in;
        s.state = state;
        Data d = make_data(s);
        Results g = gold(d);
        return std::make_pair(std::move(d), std::move(g));
    });
}

class Rwkv6CpuVsReference : public testing::TestWithParam<VariantDtypes> {};

TEST_P(Rwkv6CpuVsReference, WithinBounds) {
    const auto [variant, in, state] = GetParam();
    const std::pair<Data, Results>& c = case_for(in, state);
    const Data& d = c.first;
    const auto [got, seconds] = timed([&, v = variant] { return run(v, d.args, d.d_o, d.dht); });
    const std::string what = variant + " in " + dtype_str(in) + " state " + dtype_str(state);
    print_row(what, check_row(what, got, c.second, by_group(bounds_for(kBounds, in, state))),
              seconds);
}

INSTANTIATE_TEST_SUITE_P(B2T512H2K64, Rwkv6CpuVsReference, variant_dtype_grid(),
                         variant_dtype_name);

// strong decay (exp of the chunk cumsum underflows within a chunk) and weak decay, a scale that
// is not a power of two, a ragged last chunk and K != V, in fp32
TEST(Rwkv6Cpu, StrongAndWeakDecayMatchReference) {
    for (const double normalizer : {0.1, 10.0}) {
        Case s;
        s.T = 300;
        s.K = 32;
        s.V = 48;
        s.in = at::kFloat;
        s.normalizer = normalizer;
        s.scale = 0.3;
        const Data d = make_data(s);
        const Results ref = gold(d);
        for (const std::string variant : {"chunk", "recurrent"})
            check_row(variant + " normalizer " + std::to_string(normalizer),
                      run(variant, d.args, d.d_o, d.dht), ref, flat_bound(1e-5));
    }
}

Case small_case() {
    Case s;
    s.T = 200;
    s.H = 3;
    s.K = 32;
    s.V = 48;
    s.chunk = 32;
    return s;
}

TEST(Rwkv6Cpu, ContractNamesItsKernels) {
    Case s = small_case();
    s.in = at::kHalf;
    s.state = at::kBFloat16;
    const Data d = make_data(s);
    for (const std::string variant : {"chunk", "recurrent"}) {
        const PrecisionContract fwd = rwkv6_contract(variant, false, d.args);
        EXPECT_EQ(fwd.kernel, "rwkv6." + variant + "_fwd");
    }
    EXPECT_THROW(rwkv6_contract("fused", false, d.args), ShapeError);
}

TEST(Rwkv6Cpu, RejectsBadShapes) {
    Data d = make_data(small_case());
    Rwkv6Args bad = d.args;
    bad.u = bad.u.narrow(1, 0, 4);
    EXPECT_THROW(rwkv6_chunk_fwd_cpu(bad), ShapeError);
    bad = d.args;
    bad.chunk_size = 48;
    EXPECT_THROW(rwkv6_chunk_fwd_cpu(bad), ShapeError);
}

}  // namespace
}  // namespace lav::kernels
