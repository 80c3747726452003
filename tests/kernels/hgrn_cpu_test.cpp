// tests/kernels/hgrn_cpu_test.cpp — hgrn's CPU backend against the fp64 reference, its argument
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
#include "kernels/hgrn/hgrn.h"
#include "reference/hgrn.h"

namespace lav::kernels {
namespace {

using namespace lav::test;

/// One test problem; tensors are drawn in fp64 and quantised to these dtypes. D = H·K.
struct Case {
    int64_t B = 2, T = 1024, H = 4, K = 128;
    c10::ScalarType in = at::kBFloat16;
    c10::ScalarType state = at::kFloat;
    c10::ScalarType gate_dtype = at::kFloat;
    c10::ScalarType out = c10::ScalarType::Undefined;
    // 0: FLA's coupled gates, g = logsigmoid(r) and x = (1 − sigmoid(r))·x; otherwise
    // independent g = logsigmoid(randn) / normalizer
    double gate_normalizer = 0.0;
    bool h0 = true;
    bool dht = true;
    std::vector<int64_t> cu;  // empty: dense
    int64_t chunk = 64;
    uint64_t seed = 42;
};

/// Kernel arguments (head_last) and the cotangents of o and ht.
struct Data {
    HgrnArgs args;
    at::Tensor d_o;  // [B, T, H, K] in o's dtype
    at::Tensor dht;  // [N, H, K] in the state dtype; undefined: zeros
};

Data make_data(const Case& s) {
    Draw draw(s.seed);
    const int64_t N = num_sequences(s.B, s.cu);
    Data d;
    HgrnArgs& a = d.args;
    at::Tensor x = draw.randn({s.B, s.T, s.H, s.K});             // [B, T, H, K]
    const at::Tensor logits = draw.randn({s.B, s.T, s.H, s.K});  // [B, T, H, K]
    at::Tensor g = at::log_sigmoid(logits);                      // [B, T, H, K]
    if (s.gate_normalizer == 0.0)
        x = x * (1.0 - at::sigmoid(logits));
    else
        g = g / s.gate_normalizer;
    a.x = x.to(s.in);
    a.g = g.to(s.gate_dtype);
    if (s.h0) a.h0 = draw.randn({N, s.H, s.K}, s.state);  // [N, H, K]
    a.cu_seqlens = cu_tensor(s.cu);
    a.state_dtype = s.state;
    a.output_dtype = s.out;
    a.chunk_size = s.chunk;
    d.d_o = draw.randn({s.B, s.T, s.H, s.K}, output_dtype(s.out, s.in));  // [B, T, H, K]
    if (s.dht) d.dht = draw.randn({N, s.H, s.K}, s.state);                // [N, H, K]
    return d;
}

/// The fp64 reference on exactly the kernel's (quantised) inputs, widened.
Results gold(const Data& d) {
    ref::HgrnInputs r;
    r.x = to_f64(d.args.x);
    r.g = to_f64(d.args.g);
    r.h0 = to_f64(d.args.h0);
    r.cu_seqlens = cu_vector(d.args.cu_seqlens);
    const ref::HgrnOutputs f = ref::hgrn_fwd(r);
    const ref::HgrnGrads g = ref::hgrn_bwd(r, to_f64(d.d_o), to_f64(d.dht));
    return {{"o", f.o}, {"ht", f.ht}, {"dx", g.dx}, {"dg", g.dg}, {"dh0", g.dh0}};
}

/// Forward and backward of one variant; results in the layout they came back in.
Results run(const std::string& variant, const HgrnArgs& a, const at::Tensor& d_o,
            const at::Tensor& dht) {
    const bool chunk = variant == "chunk";
    const HgrnFwd f = chunk ? hgrn_chunk_fwd_cpu(a) : hgrn_recurrent_fwd_cpu(a);
    const HgrnGrads g =
        chunk ? hgrn_chunk_bwd_cpu(a, d_o, dht) : hgrn_recurrent_bwd_cpu(a, d_o, dht);
    return {{"o", f.o}, {"ht", f.ht}, {"dx", g.dx}, {"dg", g.dg}, {"dh0", g.dh0}};
}

// ---- against the fp64 reference ----

// Bounds on rel_rmse at B=2 T=1024 D=512 (H=4 K=128), FLA's coupled gates, h0 present.
// Measured on x86-64 (LibTorch CPU, 2 threads), worst of the two variants:
//   in    state  o        ht       dx       dg       dh0
//   bf16  fp32   1.7e-3   4.0e-8   1.7e-3   9.5e-8   4.9e-8
//   fp16  fp32   2.1e-4   3.6e-8   2.1e-4   9.5e-8   5.5e-8
//   fp32  fp32   4.1e-8   4.1e-8   7.3e-8   9.5e-8   5.1e-8
//   bf16  bf16   1.7e-3   1.7e-3   1.7e-3   2.7e-4   1.7e-3
//   fp16  bf16   2.4e-4   1.7e-3   2.5e-4   2.7e-4   1.6e-3
//   fp32  bf16   1.3e-4   1.7e-3   1.3e-4   2.7e-4   1.6e-3
// Both variants keep every intermediate in fp32, so the error of each tensor is its final
// rounding alone (1.66e-3 for bf16); with a bf16 state the chunk variant adds the rounded
// chunk states to o, dx and dg.
// bf16 inputs, fp32 state: FLA's own acceptance (assert_close of fla/utils/_testing.py; its
// tests/ops/test_hgrn.py uses 5e-3 for every tensor) — o and final state 5e-3, dx/dh0 8e-3,
// gate grads 2e-2 — met with 3x to spare.
constexpr Bounds kBf16Bounds = {5e-3, 5e-3, 8e-3, 8e-3, 2e-2};
// fp16 inputs, fp32 state: the same table scaled by fp16's 8x smaller epsilon (2^-10 vs 2^-7);
// measured errors sit 3x below it.
constexpr Bounds kFp16Bounds = {5e-3 / 8, 5e-3 / 8, 8e-3 / 8, 8e-3 / 8, 2e-2 / 8};
// fp32 inputs and state: every rounding is fp32's; 1e-5 flags any lost term or stray
// half-precision rounding, 100x over the measurements.
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

class HgrnCpuVsReference : public testing::TestWithParam<VariantDtypes> {};

TEST_P(HgrnCpuVsReference, WithinBounds) {
    const auto [variant, in, state] = GetParam();
    const std::pair<Data, Results>& c = case_for(in, state);
    const Data& d = c.first;
    const auto [got, seconds] = timed([&, v = variant] { return run(v, d.args, d.d_o, d.dht); });
    const std::string what = variant + " in " + dtype_str(in) + " state " + dtype_str(state);
    print_row(what, check_row(what, got, c.second, by_group(bounds_for(kBounds, in, state))),
              seconds);
}

INSTANTIATE_TEST_SUITE_P(B2T1024H4K128, HgrnCpuVsReference, variant_dtype_grid(),
                         variant_dtype_name);

// Strong decay (normalizer 0.1: exp(G) underflows inside a 64-row chunk) and weak decay (10:
// the state is a long running sum), independent x and g, a ragged last chunk and no dht: fp32
// inputs, so the bound is fp32's.
TEST(HgrnCpu, StrongAndWeakDecayMatchReference) {
    for (const double normalizer : {0.1, 10.0}) {
        Case s;
        s.T = 300;
        s.H = 3;
        s.K = 40;
        s.in = at::kFloat;
        s.gate_normalizer = normalizer;
        s.h0 = normalizer > 1.0;
        s.dht = false;
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
    s.K = 20;
    s.chunk = 32;
    return s;
}

TEST(HgrnCpu, VarlenMatchesReference) {
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

TEST(HgrnCpu, RejectsChunkSizesThatAreNotPowersOfTwoUpTo64) {
    Data d = make_data(small_case());
    for (const int64_t chunk : {0, 48, 128}) {
        d.args.chunk_size = chunk;
        EXPECT_THROW(hgrn_chunk_fwd_cpu(d.args), ShapeError) << chunk;
    }
}

TEST(HgrnCpu, RejectsMismatchedShapes) {
    Data d = make_data(small_case());
    d.args.g = d.args.g.narrow(3, 0, 10);
    EXPECT_THROW(hgrn_chunk_fwd_cpu(d.args), ShapeError);
    EXPECT_THROW(hgrn_recurrent_bwd_cpu(d.args, d.d_o, d.dht), ShapeError);
    d = make_data(small_case());
    d.args.h0 = at::zeros({2, 3, 20, 20}, at::kFloat);  // a [N, H, K, V] state is not hgrn's
    EXPECT_THROW(hgrn_recurrent_fwd_cpu(d.args), ShapeError);
    d = make_data(small_case());
    EXPECT_THROW(hgrn_chunk_bwd_cpu(d.args, d.d_o.narrow(1, 0, 10), d.dht), ShapeError);
}

// ---- contracts ----

TEST(HgrnCpu, ContractDeclaresItsKernelsAndStoredDtypes) {
    Case s = small_case();
    s.in = at::kHalf;
    s.state = at::kBFloat16;
    s.gate_dtype = at::kBFloat16;
    s.out = at::kFloat;
    const Data d = make_data(s);
    for (const std::string variant : {"chunk", "recurrent"}) {
        const PrecisionContract fwd = hgrn_contract(variant, false, d.args);
        const PrecisionContract bwd = hgrn_contract(variant, true, d.args);
        EXPECT_EQ(fwd.kernel, "hgrn." + variant + "_fwd");
        EXPECT_EQ(bwd.kernel, "hgrn." + variant + "_bwd");
        EXPECT_EQ(fwd.dtype_of("x"), DType::fp16);
        EXPECT_EQ(fwd.dtype_of("g"), DType::bf16);
        EXPECT_EQ(fwd.dtype_of("accumulator"), DType::fp32);
    }
    const PrecisionContract chunk = hgrn_contract("chunk", true, d.args);
    EXPECT_EQ(chunk.dtype_of("chunk states h"), DType::bf16);
    EXPECT_EQ(chunk.dtype_of("chunk state grads dh"), DType::bf16);
    EXPECT_EQ(chunk.dtype_of("local scan"), DType::fp32);
    EXPECT_EQ(hgrn_contract("recurrent", false, d.args).dtype_of("state"), DType::fp32);
}

TEST(HgrnCpu, ContractNamesOnlyTheGradientsItReturns) {
    Case s = small_case();
    s.h0 = false;
    const Data d = make_data(s);
    const PrecisionContract c = hgrn_contract("chunk", true, d.args);
    EXPECT_EQ(c.dtype_of("dg"), DType::fp32);
    for (const ContractItem& item : c.items) {
        EXPECT_NE(item.item, "dh0");
        EXPECT_NE(item.item, "dq");
    }
    const Results got = run("chunk", d.args, d.d_o, d.dht);
    EXPECT_FALSE(got["dh0"].defined());
    EXPECT_THROW(hgrn_contract("fused", false, d.args), ShapeError);
}

}  // namespace
}  // namespace lav::kernels
