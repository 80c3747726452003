// tests/common/feature_map_cpu_test.h — the CPU-backend test bodies based and rebased share
// (parallel, chunk, recurrent against the fp64 reference; argument checks). Each test file keeps
// its TEST names and a traits struct F:
//
//   struct F {
//       using Args;       // kernels::BasedArgs
//       using RefInputs;  // ref::BasedInputs
//       static void set_norm(Args&, bool);                  // the normaliser option
//       static void copy_options(RefInputs&, const Args&);  // the options, kernel to reference
//       static at::Tensor ref_fwd(const RefInputs&);
//       static auto ref_bwd(const RefInputs&, const at::Tensor& d_o);
//       static at::Tensor fwd(const std::string& variant, const Args&);
//       static auto bwd(const std::string& variant, const Args&, const at::Tensor& d_o);
//       static Bounds bounds(const std::string& variant, c10::ScalarType in, c10::ScalarType
//       state);
//   };
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/error.h"

namespace lav::test::feature_map {

inline const std::vector<std::string> kVariants = {"parallel", "chunk", "recurrent"};

struct Shape {
    int64_t B = 2, T = 512, H = 2, K = 16, V = 64;
    c10::ScalarType in = at::kBFloat16;
    c10::ScalarType state = at::kFloat;
    bool norm = true;
    std::vector<int64_t> cu;
    int64_t chunk = 64;
};

template <class F>
struct Data {
    typename F::Args args;
    at::Tensor d_o;
};

template <class F>
Data<F> make_data(const Shape& s) {
    Draw draw(42);
    Data<F> d;
    d.args.q = draw.randn({s.B, s.T, s.H, s.K}, s.in);
    d.args.k = draw.randn({s.B, s.T, s.H, s.K}, s.in);
    d.args.v = draw.randn({s.B, s.T, s.H, s.V}, s.in);
    d.args.cu_seqlens = cu_tensor(s.cu);
    F::set_norm(d.args, s.norm);
    d.args.state_dtype = s.state;
    d.args.chunk_size = s.chunk;
    d.d_o = draw.randn({s.B, s.T, s.H, s.V}, s.in);
    return d;
}

/// o, dq, dk, dv of the fp64 reference on the kernel's inputs, widened.
template <class F>
Results gold(const typename F::Args& a, const at::Tensor& d_o) {
    typename F::RefInputs r;
    r.q = to_f64(a.q);
    r.k = to_f64(a.k);
    r.v = to_f64(a.v);
    r.cu_seqlens = cu_vector(a.cu_seqlens);
    F::copy_options(r, a);
    const auto g = F::ref_bwd(r, to_f64(d_o));
    return {{"o", F::ref_fwd(r)}, {"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}};
}

/// o, dq, dk, dv of the CPU backend's `variant`.
template <class F>
Results run(const std::string& variant, const typename F::Args& a, const at::Tensor& d_o) {
    const auto g = F::bwd(variant, a, d_o);
    return {{"o", F::fwd(variant, a)}, {"dq", g.dq}, {"dk", g.dk}, {"dv", g.dv}};
}

/// B=2 T=512 H=2 K=16 V=64 in `in` with a `state` chunk state, made once per dtype pair.
template <class F>
const std::pair<Data<F>, Results>& case_for(c10::ScalarType in, c10::ScalarType state) {
    return memoize(std::make_pair(in, state), [&] {
        Shape s;
        s.in = in;
        s.state = state;
        Data<F> d = make_data<F>(s);
        Results g = gold<F>(d.args, d.d_o);
        return std::make_pair(std::move(d), std::move(g));
    });
}

/// parallel, chunk, recurrent × bf16, fp16, fp32 inputs × fp32, bf16 state.
inline auto variant_grid() {
    return testing::Combine(testing::ValuesIn(kVariants),
                            testing::Values(at::kBFloat16, at::kHalf, at::kFloat),
                            testing::Values(at::kFloat, at::kBFloat16));
}

template <class F>
void expect_within_bounds(const VariantDtypes& param) {
    const auto& [variant, in, state] = param;
    const auto& [data, ref] = case_for<F>(in, state);
    const auto [got, seconds] = timed([&] { return run<F>(variant, data.args, data.d_o); });
    const std::string what = variant + " in " + dtype_str(in) + " state " + dtype_str(state);
    print_row(what, check_row(what, got, ref, by_group(F::bounds(variant, in, state))), seconds);
}

template <class F>
void expect_unnormalised_matches_reference() {
    Shape s;
    s.T = 200;
    s.in = at::kFloat;
    s.norm = false;
    const Data<F> d = make_data<F>(s);
    const Results ref = gold<F>(d.args, d.d_o);
    for (const std::string& variant : kVariants)
        print_row(variant + " no norm fp32",
                  check_row(variant, run<F>(variant, d.args, d.d_o), ref,
                            by_group(F::bounds(variant, s.in, s.state))));
}

inline Shape small_shape() {
    Shape s;
    s.T = 150;
    s.K = 8;
    s.V = 12;
    s.chunk = 32;
    return s;
}

/// Mixed input dtypes, an unknown variant and a chunk size that is not a power of two.
template <class F>
void expect_rejects_bad_arguments() {
    const Data<F> d = make_data<F>(small_shape());
    typename F::Args a = d.args;
    a.k = d.args.k.to(at::kFloat);
    EXPECT_THROW(F::fwd("chunk", a), ShapeError);
    EXPECT_THROW(F::fwd("fused", d.args), ShapeError);
    a = d.args;
    a.chunk_size = 48;
    EXPECT_THROW(F::fwd("chunk", a), ShapeError);
}

}  // namespace lav::test::feature_map
