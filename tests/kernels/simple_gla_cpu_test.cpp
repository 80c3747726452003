// tests/kernels/simple_gla_cpu_test.cpp — simple_gla's CPU backend against the fp64 reference,
// its argument checks and declared contract (layouts, varlen, chunk sizes and result dtypes:
// tests/families/generic_test.cpp). Not a bench.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/simple_gla/simple_gla.h"
#include "reference/simple_gla.h"

namespace lav::kernels {
namespace {

using namespace lav::test;

enum class Gate { g, g_gamma, none };

/// One test problem; tensors are drawn in fp64 and quantised to these dtypes.
struct Case {
    int64_t B = 2, T = 1024, H = 4, K = 64, V = 64;
    c10::ScalarType in = at::kBFloat16;
    c10::ScalarType state = at::kFloat;
    c10::ScalarType gate_dtype = at::kFloat;
    c10::ScalarType out = c10::ScalarType::Undefined;
    Gate gate = Gate::g;
    bool h0 = true;
    bool dht = true;
    std::vector<int64_t> cu;  // empty: dense
    double scale = 0.0;
    int64_t chunk = 64;
    uint64_t seed = 42;
};

/// Kernel arguments (head_last) and the cotangents of o and ht.
struct Data {
    SimpleGlaArgs args;
    at::Tensor d_o;  // [B, T, H, V] in o's dtype
    at::Tensor dht;  // [N, H, K, V] in the state dtype; undefined: zeros
};

// Inputs as FLA's tests draw them: randn q, k, v, h0; g = logsigmoid(randn); retention's
// g_gamma = ln(1 − 2^(−5−h)).
Data make_data(const Case& s) {
    Draw draw(s.seed);
    const int64_t N = num_sequences(s.B, s.cu);
    Data d;
    SimpleGlaArgs& a = d.args;
    a.q = draw.randn({s.B, s.T, s.H, s.K}, s.in);  // [B, T, H, K]
    a.k = draw.randn({s.B, s.T, s.H, s.K}, s.in);  // [B, T, H, K]
    a.v = draw.randn({s.B, s.T, s.H, s.V}, s.in);  // [B, T, H, V]
    if (s.gate == Gate::g) a.g = at::log_sigmoid(draw.randn({s.B, s.T, s.H})).to(s.gate_dtype);
    if (s.gate == Gate::g_gamma)
        a.g_gamma = at::log1p(-at::pow(2.0, -5.0 - at::arange(s.H, at::kDouble))).to(at::kFloat);
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
    ref::SimpleGlaInputs r;
    r.q = to_f64(d.args.q);
    r.k = to_f64(d.args.k);
    r.v = to_f64(d.args.v);
    r.g = to_f64(d.args.g);
    r.g_gamma = to_f64(d.args.g_gamma);
    r.h0 = to_f64(d.args.h0);
    r.cu_seqlens = cu_vector(d.args.cu_seqlens);
    r.scale = d.args.scale;
    const ref::SimpleGlaOutputs f = ref::simple_gla_fwd(r);
    const ref::SimpleGlaGrads g = ref::simple_gla_bwd(r, to_f64(d.d_o), to_f64(d.dht));
    return {{"o", f.o},   {"ht", f.ht}, {"dq", g.dq},  {"dk", g.dk},
            {"dv", g.dv}, {"dg", g.dg}, {"dh0", g.dh0}};
}

/// Forward and backward of one variant; results in the layout they came back in.
Results run(const std::string& variant, const SimpleGlaArgs& a, const at::Tensor& d_o,
            const at::Tensor& dht) {
    const bool chunk = variant == "chunk";
    const SimpleGlaFwd f = chunk ? simple_gla_chunk_fwd_cpu(a) : simple_gla_recurrent_fwd_cpu(a);
    const SimpleGlaGrads g =
        chunk ? simple_gla_chunk_bwd_cpu(a, d_o, dht) : simple_gla_recurrent_bwd_cpu(a, d_o, dht);
    return {{"o", f.o},   {"ht", f.ht}, {"dq", g.dq},  {"dk", g.dk},
            {"dv", g.dv}, {"dg", g.dg}, {"dh0", g.dh0}};
}

// ---- against the fp64 reference ----

// Bounds on rel_rmse at B=2 T=1024 H=4 K=V=64, g = logsigmoid(randn), h0 present. Measured
// on x86-64 (LibTorch CPU, 2 threads), worst of the two variants:
//   in    state  o        ht       dq/dk/dv  dg       dh0
//   bf16  fp32   2.4e-3   9.5e-4   1.7e-3    1.3e-4   1.3e-7
//   fp16  fp32   3.0e-4   1.2e-4   2.1e-4    1.2e-5   1.3e-7
//   fp32  fp32   5.0e-7   1.0e-6   5.5e-7    1.8e-6   1.3e-7
//   bf16  bf16   2.4e-3   1.9e-3   1.7e-3    2.8e-4   1.7e-3
//   fp16  bf16   3.2e-4   1.7e-3   2.4e-4    2.4e-4   1.7e-3
//   fp32  bf16   1.2e-4   1.7e-3   1.2e-4    2.6e-4   1.6e-3
// The recurrent variant's error is the final rounding of each result alone (1.66e-3 for a
// bf16 tensor); the chunk variant adds the rounded scores and decayed v.
// bf16 inputs, fp32 state: FLA's own acceptance (assert_close of fla/utils/_testing.py in its
// tests/ops/test_simple_gla.py) — o and final state 5e-3, dq/dk/dv/dh0 8e-3, gate grads 2e-2 —
// which the measurements meet with 2x or more to spare.
constexpr Bounds kBf16Bounds = {5e-3, 5e-3, 8e-3, 8e-3, 2e-2};
// fp16 inputs, fp32 state: the same table scaled by fp16's 8x smaller epsilon (2^-10 vs 2^-7);
// measured errors sit 2x or more below it.
constexpr Bounds kFp16Bounds = {5e-3 / 8, 5e-3 / 8, 8e-3 / 8, 8e-3 / 8, 2e-2 / 8};
// fp32 inputs and state: every rounding is fp32's; 1e-5 flags any lost term or stray
// half-precision rounding and leaves 5x over the worst measurement for summation order.
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

class SimpleGlaCpuVsReference : public testing::TestWithParam<VariantDtypes> {};

TEST_P(SimpleGlaCpuVsReference, WithinBounds) {
    const auto [variant, in, state] = GetParam();
    const std::pair<Data, Results>& c = case_for(in, state);
    const Data& d = c.first;
    const auto [got, seconds] = timed([&, v = variant] { return run(v, d.args, d.d_o, d.dht); });
    const std::string what = variant + " in " + dtype_str(in) + " state " + dtype_str(state);
    print_row(what, check_row(what, got, c.second, by_group(bounds_for(kBounds, in, state))),
              seconds);
}

INSTANTIATE_TEST_SUITE_P(B2T1024H4K64, SimpleGlaCpuVsReference, variant_dtype_grid(),
                         variant_dtype_name);

// g_gamma and no gate, with an explicit scale that is not a power of two, a ragged last chunk
// and no dht: fp32 inputs, so the bound is fp32's.
TEST(SimpleGlaCpu, ConstantDecayAndNoGateMatchReference) {
    for (const Gate gate : {Gate::g_gamma, Gate::none}) {
        Case s;
        s.T = 300;
        s.H = 3;
        s.K = 32;
        s.V = 48;
        s.in = at::kFloat;
        s.gate = gate;
        s.h0 = gate == Gate::g_gamma;
        s.dht = false;
        s.scale = 0.3;
        const Data d = make_data(s);
        const Results ref = gold(d);
        for (const std::string variant : {"chunk", "recurrent"}) {
            const Results got = run(variant, d.args, d.d_o, d.dht);
            EXPECT_FALSE(got["dg"].defined()) << variant << ": dg without g";
            EXPECT_EQ(got["dh0"].defined(), s.h0) << variant;
            expect_within(variant + " gate " + std::to_string(static_cast<int>(gate)), got, ref,
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

TEST(SimpleGlaCpu, VarlenMatchesReference) {
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

TEST(SimpleGlaCpu, RejectsChunkSizesThatAreNotPowersOfTwoUpTo64) {
    Data d = make_data(small_case());
    for (const int64_t chunk : {0, 48, 128}) {
        d.args.chunk_size = chunk;
        EXPECT_THROW(simple_gla_chunk_fwd_cpu(d.args), ShapeError) << chunk;
    }
}

TEST(SimpleGlaCpu, RejectsGateWithConstantDecay) {
    Data d = make_data(small_case());
    d.args.g_gamma = at::full({3}, -0.1, at::kFloat);
    EXPECT_THROW(simple_gla_chunk_fwd_cpu(d.args), ShapeError);
    EXPECT_THROW(simple_gla_recurrent_fwd_cpu(d.args), ShapeError);
}

// ---- contracts ----

TEST(SimpleGlaCpu, ContractDeclaresItsKernelsAndStoredDtypes) {
    Case s = small_case();
    s.in = at::kHalf;
    s.state = at::kBFloat16;
    s.gate_dtype = at::kBFloat16;
    s.out = at::kFloat;
    const Data d = make_data(s);
    for (const std::string variant : {"chunk", "recurrent"}) {
        const PrecisionContract fwd = simple_gla_contract(variant, false, d.args);
        const PrecisionContract bwd = simple_gla_contract(variant, true, d.args);
        EXPECT_EQ(fwd.kernel, "simple_gla." + variant + "_fwd");
        EXPECT_EQ(bwd.kernel, "simple_gla." + variant + "_bwd");
        EXPECT_EQ(fwd.dtype_of("q, k, v"), DType::fp16);
        EXPECT_EQ(fwd.dtype_of("accumulator"), DType::fp32);
    }
    const PrecisionContract chunk = simple_gla_contract("chunk", true, d.args);
    EXPECT_EQ(chunk.dtype_of("chunk states h"), DType::bf16);
    EXPECT_EQ(chunk.dtype_of("chunk state grads dh"), DType::bf16);
    EXPECT_EQ(chunk.dtype_of("decayed v"), DType::fp16);
    EXPECT_EQ(simple_gla_contract("recurrent", false, d.args).dtype_of("state"), DType::fp32);
}

TEST(SimpleGlaCpu, ContractNamesOnlyTheGradientsItReturns) {
    Case s = small_case();
    s.gate = Gate::g_gamma;
    s.h0 = false;
    const Data d = make_data(s);
    const PrecisionContract c = simple_gla_contract("chunk", true, d.args);
    EXPECT_EQ(c.dtype_of("g_gamma"), DType::fp32);
    for (const ContractItem& item : c.items) {
        EXPECT_NE(item.item, "dg");
        EXPECT_NE(item.item, "dh0");
        EXPECT_NE(item.item, "g");
    }
    EXPECT_THROW(simple_gla_contract("fused", false, d.args), ShapeError);
}

}  // namespace
}  // namespace lav::kernels
