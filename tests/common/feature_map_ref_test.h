// tests/common/feature_map_ref_test.h — the reference-test bodies based and rebased share: the
// quadratic form against the feature-map recurrence and against autograd, the first position,
// varlen isolation and argument checks. Each test file keeps its TEST names and a traits
// struct F over its reference (no kernel here):
//
//   struct F {
//       using Inputs;  // ref::BasedInputs
//       static void set_norm(Inputs&, bool);        // the normaliser option
//       static bool norm(const Inputs&);
//       static double eps(const Inputs&);           // the normaliser's epsilon
//       static at::Tensor score(const at::Tensor& x);  // f(x), x = scale·q·k
//       static at::Tensor fwd(const Inputs&);
//       static at::Tensor fwd_recurrent(const Inputs&);
//       static auto bwd(const Inputs&, const at::Tensor& d_o);
//   };
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/family_test.h"
#include "core/error.h"
#include "core/varlen.h"

namespace lav::test::feature_map {

// reference/README.md, rule 4. Measured (x86-64, LibTorch 2.11 CPU): the two forms agree to 6.5e-16
// (based) and 8.0e-15 (rebased), the gradients to 6.9e-16 and 1.3e-15 of autograd's.
constexpr double kFormsRelTol = 1e-12;
constexpr double kGradRelTol = 1e-10;

struct RefShape {
    int64_t B, T, H, K, V;
    std::vector<int64_t> cu_seqlens;
};

inline std::string shape_name(const RefShape& s) {
    std::string name = "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_H" +
                       std::to_string(s.H) + "_K" + std::to_string(s.K) + "_V" +
                       std::to_string(s.V);
    return s.cu_seqlens.empty() ? name : name + "_varlen";
}

inline void PrintTo(const RefShape& s, std::ostream* os) { *os << shape_name(s); }

/// A shape and whether the normaliser is on.
using RefCase = std::tuple<RefShape, bool>;

inline std::string case_name(const testing::TestParamInfo<RefCase>& info) {
    const auto& [shape, norm] = info.param;
    return shape_name(shape) + (norm ? "_norm" : "_nonorm");
}

// T = 300 spans two query blocks of the quadratic form.
inline auto forward_shapes() {
    return testing::Values(RefShape{2, 64, 2, 16, 16, {}}, RefShape{3, 1, 2, 4, 4, {}},
                           RefShape{1, 300, 2, 8, 24, {}},
                           RefShape{1, 164, 2, 16, 24, {0, 0, 37, 100, 164}});
}

// At T = 1 with the normaliser o = v·f/(f + eps) and dq, dk are O(eps): a relative check of
// them measures only cancellation, so the shortest backward case has T = 2.
inline auto backward_shapes() {
    return testing::Values(RefShape{2, 64, 2, 16, 16, {}}, RefShape{3, 2, 2, 4, 4, {}},
                           RefShape{1, 300, 2, 8, 24, {}},
                           RefShape{1, 80, 2, 8, 6, {0, 0, 1, 37, 80}});
}

template <class F>
typename F::Inputs make_inputs(const RefShape& s, bool norm, uint64_t seed) {
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    at::Generator gen = at::detail::createCPUGenerator(seed);
    typename F::Inputs in;
    in.q = at::randn({s.B, s.T, s.H, s.K}, gen, f64);
    in.k = at::randn({s.B, s.T, s.H, s.K}, gen, f64);
    in.v = at::randn({s.B, s.T, s.H, s.V}, gen, f64);
    in.cu_seqlens = s.cu_seqlens;
    F::set_norm(in, norm);
    return in;
}

template <class F>
void expect_forms_agree(const RefCase& c) {
    const auto& [shape, norm] = c;
    const typename F::Inputs in = make_inputs<F>(shape, norm, 42);
    const double err = rel_err(F::fwd(in), F::fwd_recurrent(in));
    record_error("rel_err_o", err);
    EXPECT_LE(err, kFormsRelTol);
}

/// The definition, written out for autograd: full L×L scores per sequence, scale K^-0.5.
template <class F>
at::Tensor autograd_form(const typename F::Inputs& in) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(in.q.size(3)));
    std::vector<at::Tensor> pieces(in.q.size(0));
    std::vector<std::vector<at::Tensor>> rows(in.q.size(0));
    for (const Sequence& seq : sequences(in.q.size(0), in.q.size(1), in.cu_seqlens)) {
        const auto part = [&](const at::Tensor& x) {
            return x[seq.batch].narrow(0, seq.begin, seq.length()).transpose(0, 1);
        };
        const at::Tensor x = at::matmul(part(in.q), part(in.k).transpose(1, 2)) * scale;
        const at::Tensor f = F::score(x).tril();
        at::Tensor o = at::matmul(f, part(in.v));
        if (F::norm(in)) o = o / (f.sum(2, true) + F::eps(in));
        rows[seq.batch].push_back(o.transpose(0, 1));
    }
    for (size_t b = 0; b < rows.size(); ++b) pieces[b] = at::cat(rows[b], 0);
    return at::stack(pieces);
}

template <class F>
void expect_grads_match_autograd_form(const RefCase& c) {
    const auto& [shape, norm] = c;
    const typename F::Inputs in = make_inputs<F>(shape, norm, 7);
    at::Generator gen = at::detail::createCPUGenerator(8);
    const at::Tensor d_o = at::randn(in.v.sizes(), gen, at::TensorOptions().dtype(at::kDouble));
    const auto grads = F::bwd(in, d_o);
    typename F::Inputs leaf = in;
    leaf.q = in.q.clone().set_requires_grad(true);
    leaf.k = in.k.clone().set_requires_grad(true);
    leaf.v = in.v.clone().set_requires_grad(true);
    const auto expected =
        torch::autograd::grad({(autograd_form<F>(leaf) * d_o).sum()}, {leaf.q, leaf.k, leaf.v});
    const std::vector<std::pair<const char*, at::Tensor>> got = {
        {"dq", grads.dq}, {"dk", grads.dk}, {"dv", grads.dv}};
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = rel_err(got[i].second, expected[i]);
        record_error(std::string("rel_err_") + got[i].first, err);
        EXPECT_LE(err, kGradRelTol) << got[i].first;
    }
}

/// With one key the normalised output is v_0 · f / (f + eps).
template <class F>
void expect_first_position_is_its_own_value() {
    const typename F::Inputs in = make_inputs<F>({1, 1, 2, 4, 3, {}}, true, 3);
    const at::Tensor x = (in.q * in.k).sum(-1, true) * 0.5;
    const at::Tensor f = F::score(x);
    EXPECT_LE(rel_err(F::fwd(in), in.v * f / (f + F::eps(in))), 1e-15);
}

template <class F>
void expect_varlen_sequences_do_not_leak() {
    const typename F::Inputs packed = make_inputs<F>({1, 100, 2, 8, 6, {0, 37, 100}}, true, 9);
    const at::Tensor all = F::fwd(packed);
    typename F::Inputs alone = packed;
    alone.cu_seqlens.clear();
    for (at::Tensor* t : {&alone.q, &alone.k, &alone.v}) *t = t->narrow(1, 37, 63);
    EXPECT_LE(rel_err(F::fwd(alone), all.narrow(1, 37, 63)), 1e-15);
}

template <class F>
void expect_rejects_non_fp64_and_bad_shapes() {
    const typename F::Inputs in = make_inputs<F>({1, 4, 2, 4, 3, {}}, true, 13);
    typename F::Inputs f32 = in;
    f32.v = in.v.to(at::kFloat);
    EXPECT_THROW(F::fwd(f32), InternalError);
    typename F::Inputs bad = in;
    bad.k = in.k.narrow(3, 0, 3);
    EXPECT_THROW(F::fwd(bad), ShapeError);
}

}  // namespace lav::test::feature_map
