// tests/kernels/gated_delta_product_cpu_test.cpp — gated DeltaProduct's CPU backend against the
// fp64 reference over sub-step counts, its argument checks and declared contract (layouts,
// varlen, chunk sizes and result dtypes: tests/families/generic_test.cpp). Not a bench.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/gated_delta_product/gated_delta_product.h"
#include "reference/gated_delta_product.h"

namespace lav::kernels {
namespace {

using test::Results;

/// One test problem; tensors are drawn in fp64 and quantised to these dtypes.
struct Case {
    int64_t B = 2, T = 512, H = 4, K = 64, V = 64, n = 2;
    c10::ScalarType in = at::kBFloat16;
    c10::ScalarType state = at::kFloat;
    bool gate = true;
    bool l2norm = false;
    bool h0 = true;
    bool dht = true;
    std::vector<int64_t> cu;  // token offsets; empty: dense
    int64_t chunk = 64;
    uint64_t seed = 42;
};

/// Kernel arguments (head_last) and the cotangents of o and ht.
struct Data {
    GatedDeltaProductArgs args;
    at::Tensor d_o;  // [B, T, H, V] in o's dtype
    at::Tensor dht;  // [N, H, K, V] in the state dtype; undefined: zeros
};

// Inputs as FLA's DeltaProduct tests draw them: randn q, k, v, h0, with k L2-normalised (in
// fp64 before quantising) unless the kernel normalises; g = logsigmoid(randn) per token and
// β ~ U[0, 1) per sub-step, in fp32.
Data make_data(const Case& s) {
    at::Generator gen = at::detail::createCPUGenerator(s.seed);
    const auto randn = [&](at::IntArrayRef sizes) { return at::randn(sizes, gen, at::kDouble); };
    const int64_t N = s.cu.empty() ? s.B : static_cast<int64_t>(s.cu.size()) - 1;
    const int64_t Tn = s.T * s.n;
    Data d;
    GatedDeltaProductArgs& a = d.args;
    a.q = randn({s.B, s.T, s.H, s.K}).to(s.in);  // [B, T, H, K]
    at::Tensor k = randn({s.B, Tn, s.H, s.K});   // [B, T·n, H, K]
    if (!s.l2norm) k = k / k.norm(2, -1, /*keepdim=*/true);
    a.k = k.to(s.in);
    a.v = randn({s.B, Tn, s.H, s.V}).to(s.in);  // [B, T·n, H, V]
    const at::Tensor logits = randn({s.B, s.T, s.H});
    if (s.gate) a.g = at::log_sigmoid(logits).to(at::kFloat);
    a.beta = at::rand({s.B, Tn, s.H}, gen, at::kDouble).to(at::kFloat);
    if (s.h0) a.h0 = randn({N, s.H, s.K, s.V}).to(s.state);  // [N, H, K, V]
    a.cu_seqlens = test::cu_tensor(s.cu);
    a.num_householder = s.n;
    a.use_qk_l2norm_in_kernel = s.l2norm;
    a.state_dtype = s.state;
    a.chunk_size = s.chunk;
    d.d_o = randn({s.B, s.T, s.H, s.V}).to(s.in);              // [B, T, H, V]
    if (s.dht) d.dht = randn({N, s.H, s.K, s.V}).to(s.state);  // [N, H, K, V]
    return d;
}

/// The fp64 reference on exactly the kernel's (quantised) inputs, widened.
Results gold(const Data& d) {
    const GatedDeltaProductArgs& a = d.args;
    ref::GatedDeltaProductInputs r;
    r.q = test::to_f64(a.q);
    r.k = test::to_f64(a.k);
    r.v = test::to_f64(a.v);
    r.g = test::to_f64(a.g);
    r.beta = test::to_f64(a.beta);
    r.h0 = test::to_f64(a.h0);
    r.cu_seqlens = test::cu_vector(a.cu_seqlens);
    r.num_householder = a.num_householder;
    r.scale = a.scale;
    r.use_qk_l2norm_in_kernel = a.use_qk_l2norm_in_kernel;
    const ref::GatedDeltaProductOutputs f = ref::gated_delta_product_fwd(r);
    const ref::GatedDeltaProductGrads g =
        ref::gated_delta_product_bwd(r, test::to_f64(d.d_o), test::to_f64(d.dht));
    return {{"o", f.o},   {"ht", f.ht}, {"dq", g.dq},       {"dk", g.dk},
            {"dv", g.dv}, {"dg", g.dg}, {"dbeta", g.dbeta}, {"dh0", g.dh0}};
}

/// Forward and backward of one variant; results in the layout they came back in.
Results run(const std::string& variant, const GatedDeltaProductArgs& a, const at::Tensor& d_o,
            const at::Tensor& dht) {
    const bool chunk = variant == "chunk";
    const GatedDeltaProductFwd f =
        chunk ? gated_delta_product_chunk_fwd_cpu(a) : gated_delta_product_recurrent_fwd_cpu(a);
    const GatedDeltaProductGrads g = chunk ? gated_delta_product_chunk_bwd_cpu(a, d_o, dht)
                                           : gated_delta_product_recurrent_bwd_cpu(a, d_o, dht);
    return {{"o", f.o},   {"ht", f.ht}, {"dq", g.dq},       {"dk", g.dk},
            {"dv", g.dv}, {"dg", g.dg}, {"dbeta", g.dbeta}, {"dh0", g.dh0}};
}

// ---- against the fp64 reference ----

// Bounds on rel_rmse at B=2 T=512 H=4 K=V=64 n=2 (1024 sub-steps per sequence), inputs drawn
// as make_data says; the measured table is in kernels/gated_delta_product/README.md.
// bf16 inputs, and any 16-bit state (it feeds v_new, o and every gradient): FLA's acceptance
// for chunk_gated_delta_product (tests/ops/test_gdp.py): o and final state 5e-3, dq/dk/dv/dh0
// 8e-3, dβ and dg 2e-2; measured at most 3.4e-3, 3.0e-3, 2.4e-3.
constexpr test::Bounds kBf16Bounds = {5e-3, 5e-3, 8e-3, 8e-3, 2e-2};
// fp16 inputs, fp32 state: fp16's epsilon is 8x smaller than bf16's and so are the measured
// errors (at most 4.2e-4); the bound takes half of that factor, leaving 2x of margin.
constexpr test::Bounds kFp16Bounds = {5e-3 / 4, 5e-3 / 4, 8e-3 / 4, 8e-3 / 4, 2e-2 / 4};
// fp32 inputs and state: every rounding is fp32's (measured at most 1.2e-6, dg of the chunk
// variant); 1e-5 flags any lost term or stray half-precision rounding, 1e-4 for the gate
// gradients (sums of cancelling differences, as in lav's default table, src/metrics/bounds.cpp).
constexpr test::Bounds kFp32Bounds = {1e-5, 1e-5, 1e-5, 1e-5, 1e-4};
constexpr test::BoundsTable kBounds = {kBf16Bounds, kFp16Bounds, kFp32Bounds, kBf16Bounds};

/// Runs one variant, checks every result the reference has against `bounds` and prints the
/// measured row.
void check_against(const std::string& label, const std::string& variant, const Data& data,
                   const Results& ref, const test::Bounds& bounds) {
    const auto [got, seconds] =
        test::timed([&] { return run(variant, data.args, data.d_o, data.dht); });
    test::print_row(variant + " " + label,
                    test::check_row(variant, got, ref, test::by_group(bounds)), seconds);
}

class GatedDeltaProductCpuVsReference : public testing::TestWithParam<test::VariantDtypes> {};

TEST_P(GatedDeltaProductCpuVsReference, WithinBounds) {
    const auto& [variant, in, state] = GetParam();
    // one reference per (input, state) dtype pair, shared by both variants
    const auto key = std::make_pair(in, state);  // named: no reference into a temporary
    const auto& [data, ref] = test::memoize(key, [&] {
        Case s;
        s.in = in;
        s.state = state;
        Data d = make_data(s);
        Results g = gold(d);
        return std::make_pair(std::move(d), std::move(g));
    });
    check_against("in " + test::dtype_str(in) + " state " + test::dtype_str(state), variant, data,
                  ref, test::bounds_for(kBounds, in, state));
}

// The 16-bit state is the input's own 16-bit dtype here (bf16 with bf16, fp16 with fp16).
INSTANTIATE_TEST_SUITE_P(
    B2T512H4K64n2, GatedDeltaProductCpuVsReference,
    testing::Values(test::VariantDtypes{"chunk", at::kBFloat16, at::kFloat},
                    test::VariantDtypes{"recurrent", at::kBFloat16, at::kFloat},
                    test::VariantDtypes{"chunk", at::kBFloat16, at::kBFloat16},
                    test::VariantDtypes{"recurrent", at::kBFloat16, at::kBFloat16},
                    test::VariantDtypes{"chunk", at::kHalf, at::kFloat},
                    test::VariantDtypes{"recurrent", at::kHalf, at::kFloat},
                    test::VariantDtypes{"chunk", at::kHalf, at::kHalf},
                    test::VariantDtypes{"recurrent", at::kHalf, at::kHalf},
                    test::VariantDtypes{"chunk", at::kFloat, at::kFloat},
                    test::VariantDtypes{"recurrent", at::kFloat, at::kFloat}),
    test::variant_dtype_name);

// Three sub-steps, no gate, keys normalised in the kernel, varlen with an empty sequence and
// ragged chunks (in sub-steps: 0, 111, 267 and 222 rows with n = 3), fp32 throughout.
TEST(GatedDeltaProductCpu, VarlenNoGateThreeSubstepsMatchesReference) {
    Case s;
    s.B = 1;
    s.T = 200;
    s.H = 2;
    s.K = 32;
    s.V = 48;
    s.n = 3;
    s.gate = false;
    s.l2norm = true;
    s.in = at::kFloat;
    s.cu = {0, 0, 37, 126, 200};
    const Data d = make_data(s);
    const Results ref = gold(d);
    for (const char* variant : {"chunk", "recurrent"})
        check_against("varlen n3 nogate fp32", variant, d, ref, kFp32Bounds);
}

TEST(GatedDeltaProductCpu, SingleTokenMatchesReference) {
    Case s;
    s.B = 3;
    s.T = 1;
    s.K = 16;
    s.V = 16;
    s.n = 3;
    s.in = at::kFloat;
    const Data d = make_data(s);
    const Results ref = gold(d);
    for (const char* variant : {"chunk", "recurrent"})
        check_against("T1 fp32", variant, d, ref, kFp32Bounds);
}

TEST(GatedDeltaProductCpu, RejectsBadArguments) {
    Case s;
    s.T = 8;
    s.H = 1;
    s.K = 8;
    s.V = 8;
    const Data d = make_data(s);
    GatedDeltaProductArgs a = d.args;
    a.num_householder = 0;
    EXPECT_THROW(gated_delta_product_chunk_fwd_cpu(a), ShapeError);
    a = d.args;
    a.num_householder = 3;  // k has 2 rows per token
    EXPECT_THROW(gated_delta_product_chunk_fwd_cpu(a), ShapeError);
    a = d.args;
    a.g = d.args.g.slice(1, 0, 4);
    EXPECT_THROW(gated_delta_product_recurrent_fwd_cpu(a), ShapeError);
    a = d.args;
    a.chunk_size = 48;
    EXPECT_THROW(gated_delta_product_chunk_fwd_cpu(a), ShapeError);
}

TEST(GatedDeltaProductCpu, ContractDeclaresItsStoredDtypes) {
    Case s;
    s.T = 20;
    s.H = 2;
    s.K = 8;
    s.V = 8;
    s.in = at::kHalf;
    s.state = at::kBFloat16;
    const Data d = make_data(s);
    for (const char* variant : {"chunk", "recurrent"}) {
        const PrecisionContract fwd = gated_delta_product_contract(variant, false, d.args);
        const PrecisionContract bwd = gated_delta_product_contract(variant, true, d.args);
        EXPECT_EQ(fwd.dtype_of("interleaved q"), DType::fp16);
        EXPECT_EQ(bwd.dtype_of("interleaved d_o"), DType::fp16);
        EXPECT_EQ(fwd.dtype_of("ht"), DType::bf16);
    }
}

}  // namespace
}  // namespace lav::kernels
