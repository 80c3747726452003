// tests/kernels/kda_cpu_test.cpp — KDA's CPU backend against the fp64 reference over its options,
// its stability, argument checks and declared contract (layouts, varlen, chunk sizes and result
// dtypes: tests/families/generic_test.cpp). Not a bench.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/kda/kda.h"
#include "reference/kda.h"

namespace lav::kernels {
namespace {

using namespace lav::test;

enum class Gate { direct, softplus, lower_bound };

/// One test problem; tensors are drawn in fp64 and quantised to these dtypes.
struct Case {
    int64_t B = 2, T = 1024, H = 4, HV = 4, K = 64, V = 64;
    c10::ScalarType in = at::kBFloat16;
    c10::ScalarType state = at::kFloat;
    c10::ScalarType gate_dtype = at::kFloat;  // g, beta, A_log, dt_bias
    c10::ScalarType out = c10::ScalarType::Undefined;
    bool l2norm = true;
    Gate gate = Gate::direct;
    double gate_normalizer = 1.0;  // direct g = logsigmoid(randn) / normalizer
    bool beta_sigmoid = false;
    bool neg_eigval = false;
    bool h0 = true;
    bool dht = true;
    std::vector<int64_t> cu;  // empty: dense
    double scale = 0.0;
    int64_t chunk = 64;
    uint64_t seed = 42;
};

/// Kernel arguments (head_last) and the cotangents of o and ht.
struct Data {
    KdaArgs args;
    at::Tensor d_o;  // [B, T, HV, V] in o's dtype
    at::Tensor dht;  // [N, HV, K, V] in the state dtype; undefined: zeros
};

// Inputs as FLA's KDA tests draw them: randn q, k, v, h0; g = logsigmoid(randn) / normalizer;
// β ∈ U[0, 1). Without the in-kernel l2norm, q and k are scaled by K^-1/2 so that ‖k‖ ≈ 1 and
// the delta rule stays contracting. Raw gates, gate parameters and β logits are randn.
Data make_data(const Case& s) {
    Draw draw(s.seed);
    const int64_t N = num_sequences(s.B, s.cu);
    const double qk_scale = s.l2norm ? 1.0 : 1.0 / std::sqrt(static_cast<double>(s.K));
    Data d;
    KdaArgs& a = d.args;
    a.q = draw.randn({s.B, s.T, s.H, s.K}, s.in, qk_scale);  // [B, T, H, K]
    a.k = draw.randn({s.B, s.T, s.H, s.K}, s.in, qk_scale);  // [B, T, H, K]
    a.v = draw.randn({s.B, s.T, s.HV, s.V}, s.in);           // [B, T, HV, V]
    const at::Tensor logits = draw.randn({s.B, s.T, s.HV, s.K});
    a.g = (s.gate == Gate::direct ? at::log_sigmoid(logits) / s.gate_normalizer : logits)
              .to(s.gate_dtype);  // [B, T, HV, K]
    if (s.gate != Gate::direct) {
        a.use_gate_in_kernel = true;
        a.A_log = draw.randn({s.HV}, s.gate_dtype, 0.5);     // [HV]
        a.dt_bias = draw.randn({s.HV * s.K}, s.gate_dtype);  // [HV * K]
        if (s.gate == Gate::lower_bound) a.lower_bound = -5.0;
    }
    a.beta = s.beta_sigmoid ? draw.randn({s.B, s.T, s.HV}, s.gate_dtype)
                            : draw.rand({s.B, s.T, s.HV}, s.gate_dtype);  // [B, T, HV]
    a.use_qk_l2norm_in_kernel = s.l2norm;
    a.use_beta_sigmoid_in_kernel = s.beta_sigmoid;
    a.allow_neg_eigval = s.neg_eigval;
    if (s.h0) a.h0 = draw.randn({N, s.HV, s.K, s.V}, s.state);  // [N, HV, K, V]
    a.cu_seqlens = cu_tensor(s.cu);
    a.scale = s.scale;
    a.state_dtype = s.state;
    a.output_dtype = s.out;
    a.chunk_size = s.chunk;
    d.d_o = draw.randn({s.B, s.T, s.HV, s.V}, output_dtype(s.out, s.in));  // [B, T, HV, V]
    if (s.dht) d.dht = draw.randn({N, s.HV, s.K, s.V}, s.state);           // [N, HV, K, V]
    return d;
}

/// The fp64 reference on exactly the kernel's (quantised) inputs, widened.
Results gold(const Data& d) {
    const KdaArgs& a = d.args;
    ref::KdaInputs r;
    r.q = to_f64(a.q);
    r.k = to_f64(a.k);
    r.v = to_f64(a.v);
    r.g = to_f64(a.g);
    r.beta = to_f64(a.beta);
    r.A_log = to_f64(a.A_log);
    r.dt_bias = to_f64(a.dt_bias);
    r.h0 = to_f64(a.h0);
    r.cu_seqlens = cu_vector(a.cu_seqlens);
    r.scale = a.scale;
    r.use_qk_l2norm_in_kernel = a.use_qk_l2norm_in_kernel;
    r.use_gate_in_kernel = a.use_gate_in_kernel;
    r.lower_bound = a.lower_bound;
    r.use_beta_sigmoid_in_kernel = a.use_beta_sigmoid_in_kernel;
    r.allow_neg_eigval = a.allow_neg_eigval;
    const ref::KdaOutputs f = ref::kda_fwd(r);
    const ref::KdaGrads g = ref::kda_bwd(r, to_f64(d.d_o), to_f64(d.dht));
    return {{"o", f.o},         {"ht", f.ht},         {"dq", g.dq},
            {"dk", g.dk},       {"dv", g.dv},         {"dg", g.dg},
            {"dbeta", g.dbeta}, {"dA_log", g.dA_log}, {"ddt_bias", g.ddt_bias},
            {"dh0", g.dh0}};
}

/// Forward and backward of one variant; results in the layout they came back in.
Results run(const std::string& variant, const KdaArgs& a, const at::Tensor& d_o,
            const at::Tensor& dht) {
    const bool chunk = variant == "chunk";
    const KdaFwd f = chunk ? kda_chunk_fwd_cpu(a) : kda_recurrent_fwd_cpu(a);
    const KdaGrads g = chunk ? kda_chunk_bwd_cpu(a, d_o, dht) : kda_recurrent_bwd_cpu(a, d_o, dht);
    return {{"o", f.o},         {"ht", f.ht},         {"dq", g.dq},
            {"dk", g.dk},       {"dv", g.dv},         {"dg", g.dg},
            {"dbeta", g.dbeta}, {"dA_log", g.dA_log}, {"ddt_bias", g.ddt_bias},
            {"dh0", g.dh0}};
}

// ---- against the fp64 reference ----

// Bounds on rel_rmse at B=2 T=1024 H=4 K=V=64, q, k l2-normalised in kernel, g =
// logsigmoid(randn) and β ∈ U[0, 1) in fp32, randn v, h0, d_o, dht. Measured on x86-64
// (LibTorch 2.11 CPU), worst of the two variants (README.md has both):
//   in    state  o        ht       dq/dk/dv  dg/dbeta  dh0
//   bf16  fp32   4.1e-3   2.9e-3   3.3e-3    3.3e-3    1.7e-3
//   fp16  fp32   5.1e-4   3.7e-4   4.2e-4    3.4e-4    2.1e-4
//   fp32  fp32   4.9e-7   5.8e-7   6.3e-7    1.6e-6    1.4e-7
//   bf16  bf16   4.1e-3   3.4e-3   3.3e-3    3.3e-3    2.4e-3
//   fp16  bf16   5.2e-4   1.7e-3   4.3e-4    3.6e-4    1.7e-3
//   fp32  bf16   1.3e-4   1.7e-3   1.3e-4    1.3e-4    1.7e-3
// The worst is always the chunk variant, whose contract rounds the inverse, w, u, kg, v_new,
// A_qk and qg to the input dtype (as FLA's kernels store them); its o sits at 0.8 of the bound.
// The recurrent variant's error is each result's final rounding (1.66e-3 for bf16).
// bf16 inputs, fp32 state: FLA's own acceptance for chunk_kda (its tests/ops/test_kda.py) — o
// and final state 5e-3, dq/dk/dv/dh0 8e-3, gate and beta grads 2e-2.
constexpr Bounds kBf16Bounds = {5e-3, 5e-3, 8e-3, 8e-3, 2e-2};
// fp16 inputs, fp32 state: the same table scaled by fp16's 8x smaller epsilon (2^-10 vs 2^-7).
constexpr Bounds kFp16Bounds = {5e-3 / 8, 5e-3 / 8, 8e-3 / 8, 8e-3 / 8, 2e-2 / 8};
// fp32 inputs and state: every rounding is fp32's; 1e-5 flags any lost term or stray
// half-precision rounding, with 6x over the worst measurement for summation order.
constexpr Bounds kFp32Bounds = {1e-5, 1e-5, 1e-5, 1e-5, 1e-5};
// bf16 state: ht and dh0 are bf16 themselves (1.7e-3 from that rounding alone) and the chunk
// states feed o and the gradients, so every input dtype gets the bf16 table.
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

class KdaCpuVsReference : public testing::TestWithParam<VariantDtypes> {};

TEST_P(KdaCpuVsReference, WithinBounds) {
    const auto [variant, in, state] = GetParam();
    const std::pair<Data, Results>& c = case_for(in, state);
    const Data& d = c.first;
    const auto [got, seconds] = timed([&, v = variant] { return run(v, d.args, d.d_o, d.dht); });
    const std::string what = variant + " in " + dtype_str(in) + " state " + dtype_str(state);
    print_row(what, check_row(what, got, c.second, by_group(bounds_for(kBounds, in, state))),
              seconds);
}

INSTANTIATE_TEST_SUITE_P(B2T1024H4K64, KdaCpuVsReference, variant_dtype_grid(), variant_dtype_name);

/// A small problem with GVA (two value heads per key head), K ≠ V and a ragged last chunk.
Case small_case() {
    Case s;
    s.B = 2;
    s.T = 200;
    s.H = 2;
    s.HV = 4;
    s.K = 32;
    s.V = 48;
    s.chunk = 32;
    return s;
}

struct OptionCase {
    std::string name;
    bool l2norm;
    Gate gate;
    bool beta_sigmoid, neg_eigval;
};

const std::vector<OptionCase> kOptionCases = {
    {"plain", false, Gate::direct, false, false},
    {"l2norm", true, Gate::direct, false, false},
    {"gatesoftplus", false, Gate::softplus, false, false},
    {"gatelowerbound", false, Gate::lower_bound, false, false},
    {"betasigmoid", false, Gate::direct, true, false},
    {"negeigval", true, Gate::direct, true, true},
    {"all", true, Gate::softplus, true, true},
};

// gtest prints the parameter of a failed case with this
void PrintTo(const OptionCase& c, std::ostream* os) { *os << c.name; }

class KdaCpuOptions : public testing::TestWithParam<OptionCase> {};

// Every option with fp32 inputs, GVA, an explicit scale that is not a power of two and no dht:
// fp32 bounds (1e-5; the gate-parameter sums, dA_log and ddt_bias, add up T·K terms of both
// signs and get 1e-4).
TEST_P(KdaCpuOptions, MatchReferenceInFp32) {
    const OptionCase& opt = GetParam();
    Case s = small_case();
    s.in = at::kFloat;
    s.l2norm = opt.l2norm;
    s.gate = opt.gate;
    s.beta_sigmoid = opt.beta_sigmoid;
    s.neg_eigval = opt.neg_eigval;
    s.dht = false;
    s.scale = 0.3;
    const Data d = make_data(s);
    const Results ref = gold(d);
    for (const std::string variant : {"chunk", "recurrent"}) {
        const std::string what = variant + " " + opt.name;
        print_row(what, check_row(what, run(variant, d.args, d.d_o, d.dht), ref,
                                  [](const std::string& name) {
                                      return name == "dA_log" || name == "ddt_bias" ? 1e-4 : 1e-5;
                                  }));
    }
}

INSTANTIATE_TEST_SUITE_P(Fp32, KdaCpuOptions, testing::ValuesIn(kOptionCases),
                         [](const testing::TestParamInfo<OptionCase>& info) {
                             return info.param.name;
                         });

// Strong decay (gate logits / 0.1, so g averages about −8 per step and exp(G) underflows within
// a chunk): bf16 inputs, both variants stay finite and within the bf16 bounds.
TEST(KdaCpu, StrongDecayStaysFiniteAndAccurate) {
    Case s;
    s.T = 512;
    s.gate_normalizer = 0.1;
    const Data d = make_data(s);
    const Results ref = gold(d);
    for (const std::string variant : {"chunk", "recurrent"}) {
        const std::string what = variant + " strong decay";
        print_row(what,
                  check_row(what, run(variant, d.args, d.d_o, d.dht), ref, by_group(kBf16Bounds)));
    }
}

TEST(KdaCpu, SingleStepMatchesReference) {
    Case s = small_case();
    s.T = 1;
    s.in = at::kFloat;
    s.gate = Gate::softplus;
    const Data d = make_data(s);
    const Results ref = gold(d);
    for (const std::string variant : {"chunk", "recurrent"})
        check_row(variant + " T=1", run(variant, d.args, d.d_o, d.dht), ref, flat_bound(1e-5));
}

// ---- varlen and arguments ----

TEST(KdaCpu, VarlenMatchesReference) {
    Case s = small_case();
    s.B = 1;
    s.T = 300;
    s.cu = {0, 0, 100, 164, 300};
    s.in = at::kFloat;
    s.gate = Gate::lower_bound;
    s.beta_sigmoid = true;
    const Data d = make_data(s);
    const Results ref = gold(d);
    for (const std::string variant : {"chunk", "recurrent"})
        check_row(variant + " varlen", run(variant, d.args, d.d_o, d.dht), ref,
                  [](const std::string& name) {
                      return name == "dA_log" || name == "ddt_bias" ? 1e-4 : 1e-5;
                  });
}

TEST(KdaCpu, RejectsBadChunkSizesShapesAndOptions) {
    const Data d = make_data(small_case());
    for (const int64_t chunk : {0, 48, 128}) {
        KdaArgs a = d.args;
        a.chunk_size = chunk;
        EXPECT_THROW(kda_chunk_fwd_cpu(a), ShapeError) << chunk;
    }
    KdaArgs a = d.args;
    a.v = d.args.v.narrow(2, 0, 3);  // HV = 3 is not a multiple of H = 2
    EXPECT_THROW(kda_recurrent_fwd_cpu(a), ShapeError);
    a = d.args;
    a.allow_neg_eigval = true;  // without the beta sigmoid
    EXPECT_THROW(kda_chunk_fwd_cpu(a), ShapeError);
    a = d.args;
    a.lower_bound = -5.0;  // without the in-kernel gate
    EXPECT_THROW(kda_recurrent_fwd_cpu(a), ShapeError);
    a = d.args;
    a.use_gate_in_kernel = true;  // without A_log
    EXPECT_THROW(kda_chunk_fwd_cpu(a), ShapeError);
    a = d.args;
    a.k = d.args.k.to(at::kFloat);  // q, k, v must share a dtype
    EXPECT_THROW(kda_chunk_fwd_cpu(a), ShapeError);
}

// ---- contracts ----

TEST(KdaCpu, ContractDeclaresItsKernelsAndStoredDtypes) {
    Case s = small_case();
    s.in = at::kHalf;
    s.state = at::kBFloat16;
    s.gate_dtype = at::kBFloat16;
    s.out = at::kFloat;
    s.gate = Gate::softplus;
    s.beta_sigmoid = true;
    const Data d = make_data(s);
    for (const std::string variant : {"chunk", "recurrent"}) {
        const PrecisionContract fwd = kda_contract(variant, false, d.args);
        const PrecisionContract bwd = kda_contract(variant, true, d.args);
        EXPECT_EQ(fwd.kernel, "kda." + variant + "_fwd");
        EXPECT_EQ(bwd.kernel, "kda." + variant + "_bwd");
        EXPECT_EQ(fwd.dtype_of("q, k, v"), DType::fp16);
        EXPECT_EQ(fwd.dtype_of("accumulator"), DType::fp32);
    }
    const PrecisionContract chunk = kda_contract("chunk", false, d.args);
    EXPECT_EQ(chunk.dtype_of("chunk states h"), DType::bf16);
    EXPECT_EQ(chunk.dtype_of("solved inverse"), DType::fp16);
    EXPECT_EQ(chunk.dtype_of("w, u"), DType::fp16);
    EXPECT_EQ(chunk.dtype_of("v_new"), DType::fp16);
    EXPECT_EQ(chunk.dtype_of("decayed keys kg"), DType::fp16);
    EXPECT_EQ(kda_contract("chunk", true, d.args).dtype_of("chunk state grads dh"), DType::bf16);
    EXPECT_EQ(kda_contract("recurrent", false, d.args).dtype_of("state"), DType::fp32);
}

TEST(KdaCpu, ContractNamesOnlyTheGradientsItReturns) {
    Case s = small_case();
    s.h0 = false;
    const Data d = make_data(s);
    const PrecisionContract c = kda_contract("chunk", true, d.args);
    EXPECT_EQ(c.dtype_of("dg"), DType::fp32);
    EXPECT_EQ(c.dtype_of("dbeta"), DType::fp32);
    for (const ContractItem& item : c.items) {
        EXPECT_NE(item.item, "dA_log");
        EXPECT_NE(item.item, "ddt_bias");
        EXPECT_NE(item.item, "dh0");
    }
    const Results got = run("chunk", d.args, d.d_o, d.dht);
    EXPECT_FALSE(got["dA_log"].defined());
    EXPECT_FALSE(got["ddt_bias"].defined());
    EXPECT_FALSE(got["dh0"].defined());
    EXPECT_THROW(kda_contract("fused", false, d.args), ShapeError);
}

}  // namespace
}  // namespace lav::kernels
