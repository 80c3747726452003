// tests/kernels/gla_cpu_test.cpp — gla's CPU backend against the fp64 reference, its argument
// checks and declared contract (layouts, varlen, chunk sizes and result dtypes:
// tests/families/generic_test.cpp). Not a bench.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/gla/gla.h"
#include "reference/gla.h"

namespace lav::kernels {
namespace {

using namespace lav::test;

/// One test problem; tensors are drawn in fp64 and quantised to these dtypes.
struct Case {
    int64_t B = 2, T = 1024, H = 4, K = 64, V = 64;
    c10::ScalarType in = at::kBFloat16;
    c10::ScalarType state = at::kFloat;
    c10::ScalarType gate_dtype = at::kFloat;
    c10::ScalarType out = c10::ScalarType::Undefined;
    double gate_normalizer = 1.0;  // g = logsigmoid(randn) / normalizer
    bool h0 = true;
    bool dht = true;
    std::vector<int64_t> cu;  // empty: dense
    double scale = 0.0;
    int64_t chunk = 64;
    uint64_t seed = 42;
};

/// Kernel arguments (head_last) and the cotangents of o and ht.
struct Data {
    GlaArgs args;
    at::Tensor d_o;  // [B, T, H, V] in o's dtype
    at::Tensor dht;  // [N, H, K, V] in the state dtype; undefined: zeros
};

// Inputs: randn q, k, v, h0, d_o, dht; g = logsigmoid(randn) / normalizer per key dimension.
Data make_data(const Case& s) {
    Draw draw(s.seed);
    const int64_t N = num_sequences(s.B, s.cu);
    Data d;
    GlaArgs& a = d.args;
    a.q = draw.randn({s.B, s.T, s.H, s.K}, s.in);  // [B, T, H, K]
    a.k = draw.randn({s.B, s.T, s.H, s.K}, s.in);  // [B, T, H, K]
    a.v = draw.randn({s.B, s.T, s.H, s.V}, s.in);  // [B, T, H, V]
    a.g = (at::log_sigmoid(draw.randn({s.B, s.T, s.H, s.K})) / s.gate_normalizer)
              .to(s.gate_dtype);                               // [B, T, H, K]
    if (s.h0) a.h0 = draw.randn({N, s.H, s.K, s.V}, s.state);  // [N, H, K, V]
    a.cu_seqlens = cu_tensor(s.cu);
    a.scale = s.scale;
    a.state_dtype = s.state;
    a.output_dtype = s.out;
    a.chunk_size = s.chunk;
    d.d_o = draw.randn({s.B, s.T, s.H, s.V}, output_dtype(s.out, s.in));  // [B, T, H, V]
    if (s.dht) d.dht = draw.randn({N, s.H, s.K, s.V}, s.state);           // [N, H, K, V]
    return d;
}

/// The fp64 reference on exactly the kernel's (quantised) inputs, widened.
Results gold(const Data& d) {
    ref::GlaInputs r;
    r.q = to_f64(d.args.q);
    r.k = to_f64(d.args.k);
    r.v = to_f64(d.args.v);
    r.g = to_f64(d.args.g);
    r.h0 = to_f64(d.args.h0);
    r.cu_seqlens = cu_vector(d.args.cu_seqlens);
    r.scale = d.args.scale;
    const ref::GlaOutputs f = ref::gla_fwd(r);
    const ref::GlaGrads g = ref::gla_bwd(r, to_f64(d.d_o), to_f64(d.dht));
    return {{"o", f.o},   {"ht", f.ht}, {"dq", g.dq},  {"dk", g.dk},
            {"dv", g.dv}, {"dg", g.dg}, {"dh0", g.dh0}};
}

/// Forward and backward of one variant; results in the layout they came back in.
Results run(const std::string& variant, const GlaArgs& a, const at::Tensor& d_o,
            const at::Tensor& dht) {
    const bool chunk = variant == "chunk";
    const GlaFwd f = chunk ? gla_chunk_fwd_cpu(a) : gla_recurrent_fwd_cpu(a);
    const GlaGrads g = chunk ? gla_chunk_bwd_cpu(a, d_o, dht) : gla_recurrent_bwd_cpu(a, d_o, dht);
    return {{"o", f.o},   {"ht", f.ht}, {"dq", g.dq},  {"dk", g.dk},
            {"dv", g.dv}, {"dg", g.dg}, {"dh0", g.dh0}};
}

// ---- against the fp64 reference ----

// Bounds on rel_rmse at B=2 T=1024 H=4 K=V=64, g = logsigmoid(randn) per key dimension, h0
// present. Measured on x86-64 (LibTorch CPU, 2 threads), worst of the two variants:
//   in    state  o        ht       dq/dk/dv  dg       dh0
//   bf16  fp32   2.4e-3   9.0e-4   1.7e-3    1.2e-4   1.2e-7
//   fp16  fp32   3.0e-4   1.1e-4   2.1e-4    1.5e-5   1.2e-7
//   fp32  fp32   5.0e-7   7.6e-7   5.4e-7    1.4e-6   1.3e-7
//   bf16  bf16   2.4e-3   1.9e-3   1.7e-3    2.9e-4   1.7e-3
//   fp16  bf16   3.2e-4   1.7e-3   2.5e-4    2.6e-4   1.7e-3
//   fp32  bf16   1.3e-4   1.7e-3   1.3e-4    2.6e-4   1.7e-3
// The recurrent variant's error is the final rounding of each result alone (1.66e-3 for a
// bf16 tensor); the chunk variant adds the rounded decayed q and k and the rounded scores.
// bf16 inputs, fp32 state: FLA's own acceptance (assert_close of fla/utils/_testing.py in its
// tests/ops/test_gla.py) — o and final state 5e-3, dq/dk/dv/dh0 8e-3, gate grads 2e-2 — which
// the measurements meet with 2x or more to spare.
constexpr Bounds kBf16Bounds = {5e-3, 5e-3, 8e-3, 8e-3, 2e-2};
// fp16 inputs, fp32 state: the same table scaled by fp16's 8x smaller epsilon (2^-10 vs 2^-7);
// measured errors sit 2x or more below it.
constexpr Bounds kFp16Bounds = {5e-3 / 8, 5e-3 / 8, 8e-3 / 8, 8e-3 / 8, 2e-2 / 8};
// fp32 inputs and state: every rounding is fp32's; 1e-5 flags any lost term or stray
// half-precision rounding and leaves 7x over the worst measurement for summation order.
constexpr Bounds kFp32Bounds = {1e-5, 1e-5, 1e-5, 1e-5, 1e-5};
// bf16 state: ht and dh0 are bf16 themselves (about 1.65e-3 from that rounding alone) and the
// chunk states feed o and the gradients, so every input dtype gets the bf16 table.
constexpr Bounds kBf16StateBounds = kBf16Bounds;

constexpr BoundsTable kBounds = {kBf16Bounds, kFp16Bounds, kFp32Bounds, kBf16StateBounds};

// one reference per (input, state) dtype pair, shared by both variants
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

class GlaCpuVsReference : public testing::TestWithParam<VariantDtypes> {};

TEST_P(GlaCpuVsReference, WithinBounds) {
    const auto [variant, in, state] = GetParam();
    const std::pair<Data, Results>& c = case_for(in, state);
    const Data& d = c.first;
    const auto [got, seconds] = timed([&, v = variant] { return run(v, d.args, d.d_o, d.dht); });
    const std::string what = variant + " in " + dtype_str(in) + " state " + dtype_str(state);
    print_row(what, check_row(what, got, c.second, by_group(bounds_for(kBounds, in, state))),
              seconds);
}

INSTANTIATE_TEST_SUITE_P(B2T1024H4K64, GlaCpuVsReference, variant_dtype_grid(), variant_dtype_name);

// Strong decay (normalizer 0.1: about −8 per step, so exp(G) underflows inside a 64-row
// chunk) and weak decay (10), with an explicit scale that is not a power of two, a ragged
// last chunk, K != V and no dht: fp32 inputs, so the bound is fp32's. The strong case checks
// that no factor of the sub-chunked scores overflows into Inf or NaN.
TEST(GlaCpu, StrongAndWeakDecayMatchReference) {
    for (const double normalizer : {0.1, 10.0}) {
        Case s;
        s.T = 300;
        s.H = 3;
        s.K = 32;
        s.V = 48;
        s.in = at::kFloat;
        s.gate_normalizer = normalizer;
        s.h0 = normalizer > 1.0;
        s.dht = false;
        s.scale = 0.3;
        const Data d = make_data(s);
        const Results ref = gold(d);
        for (const std::string variant : {"chunk", "recurrent"}) {
            const Results got = run(variant, d.args, d.d_o, d.dht);
            EXPECT_EQ(got["dh0"].defined(), s.h0) << variant;
            check_row(variant + " normalizer " + std::to_string(normalizer), got, ref,
                      flat_bound(1e-5));
        }
    }
}

// ---- varlen and arguments ----

Case small_case() {
    Case s;
    s.B = 2;
    s.T = 200;
    s.H = 3;
    s.K = 32;
    s.V = 48;
    s.chunk = 32;
    return s;
}

TEST(GlaCpu, VarlenMatchesReference) {
    Case s = small_case();
    s.B = 1;
    s.T = 300;
    s.cu = {0, 0, 100, 164, 300};
    s.in = at::kFloat;
    const Data d = make_data(s);
    const Results ref = gold(d);
    for (const std::string variant : {"chunk", "recurrent"})
        expect_within(variant, run(variant, d.args, d.d_o, d.dht), ref, flat_bound(1e-5));
}

TEST(GlaCpu, RejectsChunkSizesThatAreNotPowersOfTwoUpTo64) {
    Data d = make_data(small_case());
    for (const int64_t chunk : {0, 48, 128}) {
        d.args.chunk_size = chunk;
        EXPECT_THROW(gla_chunk_fwd_cpu(d.args), ShapeError) << chunk;
    }
}

TEST(GlaCpu, RejectsGateOfAnotherShape) {
    Data d = make_data(small_case());
    d.args.g = d.args.g.select(3, 0);  // a scalar gate [B, T, H] is simple_gla's, not gla's
    EXPECT_THROW(gla_chunk_fwd_cpu(d.args), ShapeError);
    EXPECT_THROW(gla_recurrent_bwd_cpu(d.args, d.d_o, d.dht), ShapeError);
    d.args.g = at::Tensor();
    EXPECT_THROW(gla_recurrent_fwd_cpu(d.args), ShapeError);
}

// ---- contracts ----

TEST(GlaCpu, ContractDeclaresItsKernelsAndStoredDtypes) {
    Case s = small_case();
    s.in = at::kHalf;
    s.state = at::kBFloat16;
    s.gate_dtype = at::kBFloat16;
    s.out = at::kFloat;
    const Data d = make_data(s);
    for (const std::string variant : {"chunk", "recurrent"}) {
        const PrecisionContract fwd = gla_contract(variant, false, d.args);
        const PrecisionContract bwd = gla_contract(variant, true, d.args);
        EXPECT_EQ(fwd.kernel, "gla." + variant + "_fwd");
        EXPECT_EQ(bwd.kernel, "gla." + variant + "_bwd");
        EXPECT_EQ(fwd.dtype_of("q, k, v"), DType::fp16);
        EXPECT_EQ(fwd.dtype_of("g"), DType::bf16);
        EXPECT_EQ(fwd.dtype_of("h0"), DType::bf16);
        EXPECT_EQ(fwd.dtype_of("accumulator"), DType::fp32);
    }
    const PrecisionContract chunk_fwd = gla_contract("chunk", false, d.args);
    EXPECT_EQ(chunk_fwd.dtype_of("decayed q"), DType::fp16);
    EXPECT_EQ(chunk_fwd.dtype_of("intra-chunk scores"), DType::fp16);
    const PrecisionContract chunk = gla_contract("chunk", true, d.args);
    EXPECT_EQ(chunk.dtype_of("chunk states h"), DType::bf16);
    EXPECT_EQ(chunk.dtype_of("chunk state grads dh"), DType::bf16);
    EXPECT_EQ(chunk.dtype_of("decayed k"), DType::fp16);
    EXPECT_EQ(chunk.dtype_of("decayed q"), DType::fp32);
    EXPECT_EQ(gla_contract("recurrent", false, d.args).dtype_of("state"), DType::fp32);
}

TEST(GlaCpu, ContractNamesOnlyTheGradientsItReturns) {
    Case s = small_case();
    s.h0 = false;
    const Data d = make_data(s);
    const PrecisionContract c = gla_contract("chunk", true, d.args);
    EXPECT_EQ(c.dtype_of("dg"), DType::fp32);
    for (const ContractItem& item : c.items) EXPECT_NE(item.item, "dh0");
    const Results got = run("chunk", d.args, d.d_o, d.dht);
    EXPECT_FALSE(got["dh0"].defined());
    EXPECT_THROW(gla_contract("fused", false, d.args), ShapeError);
}

}  // namespace
}  // namespace lav::kernels
