// tests/common/family_test.h — what the kernel families' tests share: error measures, seeded
// quantised inputs, named results, bounds tables, the varlen equivalence loop, the autograd
// gradient driver and the fp64-only op recorder. Test code only (GoogleTest assertions inside);
// no family's math lives here.
//
// A family test builds its own inputs and calls, and hands them to these helpers as Results
// and callables:
//
//   Results run(const std::string& variant, const FooArgs& a, ...) {
//       const FooFwd f = ...;
//       const FooGrads g = ...;
//       return {{"o", f.o}, {"ht", f.ht}, {"dq", g.dq}, {"dh0", g.dh0}};
//   }
//   expect_within("chunk varlen", run("chunk", a, ...), gold(d), [](auto&) { return 1e-5; });
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <iomanip>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/varlen.h"

namespace lav::test {

// ---- error measures ----

/// ‖x − ref‖₂ / ‖ref‖₂, on fp64 copies.
inline double rel_rmse(const at::Tensor& x, const at::Tensor& ref) {
    const at::Tensor r = ref.to(at::kDouble);
    return (x.to(at::kDouble) - r).norm().item<double>() / r.norm().item<double>();
}

/// Records a measured error in the test's XML output (--gtest_output=xml).
inline void record_error(const std::string& key, double err) {
    std::ostringstream text;
    text << std::scientific << std::setprecision(3) << err;
    testing::Test::RecordProperty(key, text.str());
}

/// ‖a − b‖₂ / ‖b‖₂ of two fp64 tensors, or ‖a‖₂ where b is exactly zero; expects both
/// defined and of one shape.
inline double rel_err(const at::Tensor& a, const at::Tensor& b) {
    EXPECT_TRUE(a.defined() && b.defined());
    EXPECT_EQ(a.sizes(), b.sizes());
    const double base = b.norm().item<double>();
    const double diff = (a - b).norm().item<double>();
    return base == 0.0 ? diff : diff / base;
}

/// Records rel_err(got, expected) as rel_err_<name> and expects it ≤ tol.
inline void expect_rel_err(const std::string& name, const at::Tensor& got,
                           const at::Tensor& expected, double tol) {
    const double err = rel_err(got, expected);
    record_error("rel_err_" + name, err);
    EXPECT_LE(err, tol) << name;
}

/// max |x − ref|, on fp64 copies.
inline double max_abs_err(const at::Tensor& x, const at::Tensor& ref) {
    return (x.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>();
}

/// True if x has no NaN and no Inf.
inline bool all_finite(const at::Tensor& x) { return at::isfinite(x).all().item<bool>(); }

/// The dtype's lav spelling (bf16, fp32, ...), as test names and messages use it.
inline std::string dtype_str(c10::ScalarType t) { return scalar_type_name(t); }

// ---- inputs ----

/// x widened to fp64, undefined staying undefined: the reference's copy of a kernel input
/// that was drawn in fp64 and quantised, so both see exactly the same values.
inline at::Tensor to_f64(const at::Tensor& x) {
    return x.defined() ? x.to(at::kDouble) : at::Tensor();
}

/// x rounded to `dtype` and widened back to fp64.
inline at::Tensor quantise(const at::Tensor& x, c10::ScalarType dtype) {
    return x.to(dtype).to(at::kDouble);
}

/// Random tensors from one seeded CPU generator, drawn in fp64 and then rounded to a dtype,
/// so that a case draws the same values whatever its dtypes.
class Draw {
  public:
    explicit Draw(uint64_t seed) : gen_(at::detail::createCPUGenerator(seed)) {}
    /// N(0, 1) · scale, rounded to dtype.
    at::Tensor randn(at::IntArrayRef sizes, c10::ScalarType dtype = at::kDouble,
                     double scale = 1.0) {
        const at::Tensor x = at::randn(sizes, gen_, at::kDouble);
        return (scale == 1.0 ? x : x * scale).to(dtype);
    }
    /// U[0, 1), rounded to dtype.
    at::Tensor rand(at::IntArrayRef sizes, c10::ScalarType dtype = at::kDouble) {
        return at::rand(sizes, gen_, at::kDouble).to(dtype);
    }
    at::Generator& gen() { return gen_; }

  private:
    at::Generator gen_;
};

/// cu_seqlens as a kernel takes it: an int64 tensor, undefined for a dense batch.
inline at::Tensor cu_tensor(const std::vector<int64_t>& cu) {
    return cu.empty() ? at::Tensor() : at::tensor(at::ArrayRef<int64_t>(cu), at::kLong);
}

/// cu_seqlens as a reference takes it: a vector, empty for a dense batch.
inline std::vector<int64_t> cu_vector(const at::Tensor& cu) {
    if (!cu.defined()) return {};
    const at::Tensor c = cu.to(at::kLong).contiguous();
    return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

/// The dtype of o: `out`, or the input dtype where `out` is Undefined.
inline c10::ScalarType output_dtype(c10::ScalarType out, c10::ScalarType in) {
    return out == c10::ScalarType::Undefined ? in : out;
}

/// "B2_T64_H3_K16" from {{"B", 2}, {"T", 64}, {"H", 3}, {"K", 16}}, with "_varlen" if varlen.
inline std::string shape_name(std::initializer_list<std::pair<const char*, int64_t>> dims,
                              bool varlen) {
    std::string name;
    for (const auto& [letter, size] : dims)
        name += (name.empty() ? "" : "_") + std::string(letter) + std::to_string(size);
    return varlen ? name + "_varlen" : name;
}

// ---- named results ----

/// The results of one forward and backward (o, ht, then the gradients), kernel or
/// reference, by name and in the family's order; a result the case lacks is undefined.
class Results {
  public:
    Results() = default;
    Results(std::initializer_list<std::pair<std::string, at::Tensor>> items) : items_(items) {}
    /// The result called `name`; throws std::out_of_range for a name the family lacks.
    const at::Tensor& operator[](const std::string& name) const {
        for (const auto& [n, t] : items_)
            if (n == name) return t;
        throw std::out_of_range("no result named " + name);
    }
    /// Every name, in order.
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& item : items_) out.push_back(item.first);
        return out;
    }

  private:
    std::vector<std::pair<std::string, at::Tensor>> items_;
};

/// The function's result and the seconds it took.
template <typename Fn>
std::pair<std::invoke_result_t<Fn>, double> timed(Fn&& fn) {
    const auto start = std::chrono::steady_clock::now();
    auto result = fn();
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    return {std::move(result), seconds.count()};
}

/// The value make() returns for `key`, made on first use and kept for the whole program
/// (one cache per call site): a reference shared by the tests that compare against it.
template <typename Key, typename Make>
const std::invoke_result_t<Make>& memoize(const Key& key, Make make) {
    static std::map<Key, std::invoke_result_t<Make>> cache;
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, make()).first;
    return it->second;
}

// ---- against a reference ----

/// Expects rel_rmse(got[n], ref[n]) < bound(n) for every result n that ref defines.
template <typename BoundFn>
void expect_within(const std::string& what, const Results& got, const Results& ref,
                   const BoundFn& bound) {
    for (const std::string& name : ref.names()) {
        if (!ref[name].defined()) continue;
        EXPECT_LT(rel_rmse(got[name], ref[name]), bound(name)) << what << " " << name;
    }
}

/// As expect_within, and also expects got to define exactly the results ref does, none of
/// them with NaN or Inf; returns the " name err" cells of a printed table row.
template <typename BoundFn>
std::string check_row(const std::string& what, const Results& got, const Results& ref,
                      const BoundFn& bound) {
    std::string cells;
    for (const std::string& name : ref.names()) {
        const at::Tensor& x = got[name];
        const at::Tensor& r = ref[name];
        EXPECT_EQ(x.defined(), r.defined()) << what << " " << name;
        if (!x.defined() || !r.defined()) continue;
        EXPECT_TRUE(all_finite(x)) << what << " " << name << " has NaN or Inf";
        const double err = rel_rmse(x, r);
        EXPECT_LT(err, bound(name)) << what << " " << name;
        char cell[48];
        std::snprintf(cell, sizeof cell, " %s %.2e", name.c_str(), err);
        cells += cell;
    }
    return cells;
}

/// Expects every result got defines to be free of NaN and Inf.
inline void expect_all_finite(const std::string& what, const Results& got) {
    for (const std::string& name : got.names()) {
        if (got[name].defined()) {
            EXPECT_TRUE(all_finite(got[name])) << what << " " << name;
        }
    }
}

/// A bound function giving `bound` for every result.
inline auto flat_bound(double bound) {
    return [bound](const std::string&) { return bound; };
}

/// Prints "[ rel_rmse ] what:cells", with the time where seconds ≥ 0.
inline void print_row(const std::string& what, const std::string& cells, double seconds = -1.0) {
    if (seconds < 0.0)
        std::printf("[ rel_rmse ] %s:%s\n", what.c_str(), cells.c_str());
    else
        std::printf("[ rel_rmse ] %s:%s  (fwd+bwd %.3f s)\n", what.c_str(), cells.c_str(), seconds);
}

/// rel_rmse bounds per result group. dqkv covers the gradients of the q/k/v-like inputs
/// (dq, dk, dv, dr, dx); gate covers every other gradient but dh0 (gates, β, gate parameters).
struct Bounds {
    double o, ht, dqkv, dh0, gate;
};

/// The bound of the result called `name`.
inline double bound_of(const Bounds& b, const std::string& name) {
    if (name == "o") return b.o;
    if (name == "ht") return b.ht;
    if (name == "dh0") return b.dh0;
    if (name == "dq" || name == "dk" || name == "dv" || name == "dr" || name == "dx") return b.dqkv;
    return b.gate;
}

/// A bound function giving each result its group's bound in `b`.
inline auto by_group(const Bounds& b) {
    return [b](const std::string& name) { return bound_of(b, name); };
}

/// A family's bounds by input dtype with an fp32 state, and with a 16-bit state.
struct BoundsTable {
    Bounds bf16, fp16, fp32, bf16_state;
};

/// The row of `table` for inputs `in` and state `state`.
inline Bounds bounds_for(const BoundsTable& table, c10::ScalarType in, c10::ScalarType state) {
    if (state != at::kFloat) return table.bf16_state;
    if (in == at::kHalf) return table.fp16;
    return in == at::kFloat ? table.fp32 : table.bf16;
}

/// A (variant, input dtype, state dtype) case of the CPU-vs-reference grid.
using VariantDtypes = std::tuple<std::string, c10::ScalarType, c10::ScalarType>;

/// chunk and recurrent × bf16, fp16, fp32 inputs × fp32, bf16 state.
inline auto variant_dtype_grid() {
    return testing::Combine(testing::Values("chunk", "recurrent"),
                            testing::Values(at::kBFloat16, at::kHalf, at::kFloat),
                            testing::Values(at::kFloat, at::kBFloat16));
}

/// "chunk_bf16_statefp32".
inline std::string variant_dtype_name(const testing::TestParamInfo<VariantDtypes>& info) {
    const auto& [variant, in, state] = info.param;
    return variant + "_" + dtype_str(in) + "_state" + dtype_str(state);
}

// ---- equivalences ----

/// Time rows [seq.begin, seq.end) of a [B, T, ...] tensor of a single-row batch, as a copy.
inline at::Tensor seq_rows(const at::Tensor& x, const Sequence& seq) {
    return x.slice(1, seq.begin, seq.end).contiguous();
}

/// Row seq.index of an [N, ...] state tensor, as a [1, ...] copy.
inline at::Tensor state_row(const at::Tensor& x, const Sequence& seq) {
    return x.slice(0, seq.index, seq.index + 1).clone();
}

/// Expects each sequence of the packed batch `cu`, run alone by run_alone(seq), to give the
/// packed results: its time rows of `time_major`, its state row of `per_sequence`. Bitwise
/// where tol is 0, else to rel_err ≤ tol; empty sequences are run too unless skip_empty.
template <typename RunAlone>
void expect_varlen_matches_alone(const std::string& what, const std::vector<int64_t>& cu,
                                 const Results& packed, const RunAlone& run_alone,
                                 const std::vector<std::string>& time_major,
                                 const std::vector<std::string>& per_sequence = {"ht", "dh0"},
                                 bool skip_empty = false, double tol = 0.0) {
    for (const Sequence& seq : sequences(1, cu.back(), cu)) {
        if (skip_empty && seq.length() == 0) continue;
        const Results alone = run_alone(seq);
        const auto expect_same = [&](const std::string& name, const at::Tensor& a,
                                     const at::Tensor& b) {
            if (tol == 0.0)
                EXPECT_TRUE(at::equal(a, b)) << what << " sequence " << seq.index << " " << name;
            else
                EXPECT_LE(rel_err(a, b), tol) << what << " sequence " << seq.index << " " << name;
        };
        for (const std::string& name : time_major)
            expect_same(name, alone[name], packed[name].slice(1, seq.begin, seq.end));
        for (const std::string& name : per_sequence)
            expect_same(name, alone[name], packed[name].slice(0, seq.index, seq.index + 1));
    }
}

// ---- gradients against autograd ----

/// One gradient to check: its name, the input it differentiates (made an autograd leaf in
/// place) and the value under test.
struct GradCheck {
    std::string name;
    at::Tensor* input;
    at::Tensor got;
};

/// Makes every checked input a leaf, runs forward() → (o, ht) on them, differentiates
/// Σ o·d_o (+ Σ ht·dht where dht is defined) and expects each got within rel_err ≤ tol of
/// autograd's gradient, recording rel_err_<name>.
template <typename Forward>
void expect_grads_match_autograd(const std::vector<GradCheck>& checks, const Forward& forward,
                                 const at::Tensor& d_o, const at::Tensor& dht, double tol) {
    std::vector<at::Tensor> wrt;
    for (const GradCheck& c : checks) {
        *c.input = c.input->clone().set_requires_grad(true);
        wrt.push_back(*c.input);
    }
    const auto [o, ht] = forward();
    at::Tensor loss = (o * d_o).sum();
    if (dht.defined()) loss = loss + (ht * dht).sum();
    const std::vector<at::Tensor> expected = torch::autograd::grad({loss}, wrt);
    for (size_t i = 0; i < checks.size(); ++i) {
        ASSERT_TRUE(checks[i].got.defined()) << checks[i].name;
        expect_rel_err(checks[i].name, checks[i].got, expected[i], tol);
    }
}

/// The per-batch-row lists of time steps [H, ...] of a recurrence, stacked to [B, T, H, ...].
inline at::Tensor stack_rows(const std::vector<std::vector<at::Tensor>>& rows) {
    std::vector<at::Tensor> batches;
    for (const std::vector<at::Tensor>& row : rows) batches.push_back(at::stack(row));
    return at::stack(batches);
}

// ---- reference rules ----

/// Expects scale 0 to mean K^-1/2 (`inv_sqrt_k`) in fwd and in other_form, o to be linear in
/// the scale and ht not to see it. fwd and other_form map inputs to outputs with o and ht.
template <typename In, typename Fwd, typename OtherForm>
void expect_default_scale(In in, double inv_sqrt_k, const Fwd& fwd, const OtherForm& other_form) {
    const auto by_default = fwd(in);
    const auto other_default = other_form(in);
    in.scale = inv_sqrt_k;
    EXPECT_LE(rel_err(by_default.o, fwd(in).o), 1e-15);
    EXPECT_LE(rel_err(other_default.o, other_form(in).o), 1e-15);
    in.scale = 2.0 * inv_sqrt_k;
    const auto doubled = fwd(in);
    EXPECT_LE(rel_err(doubled.o, 2.0 * by_default.o), 1e-15);
    EXPECT_TRUE(at::equal(doubled.ht, by_default.ht));
}

// ---- fp64 discipline ----

/// Records, on this thread, every aten op that reads or writes a floating tensor other than
/// fp64: the same view of the run that the dtype tracer takes (src/trace/tracer.h).
class NonFp64OpRecorder {
  public:
    NonFp64OpRecorder() {
        found().clear();
        ops_seen() = 0;
        handle_ = at::addThreadLocalCallback(
            at::RecordFunctionCallback(&on_start, &on_end).needsInputs(true).needsOutputs(true));
    }
    ~NonFp64OpRecorder() { at::removeCallback(handle_); }
    NonFp64OpRecorder(const NonFp64OpRecorder&) = delete;
    NonFp64OpRecorder& operator=(const NonFp64OpRecorder&) = delete;

    /// "op dtype" of every offending op seen since construction.
    static std::set<std::string>& found() {
        static std::set<std::string> ops;
        return ops;
    }
    /// How many ops were seen since construction.
    static int64_t& ops_seen() {
        static int64_t n = 0;
        return n;
    }

  private:
    static void check(const at::RecordFunction& fn, const c10::IValue& value) {
        if (!value.isTensor()) return;
        const at::Tensor& t = value.toTensor();
        if (t.defined() && at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kDouble)
            found().insert(std::string(fn.name()) + " " +
                           std::string(c10::toString(t.scalar_type())));
    }
    static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
        ++ops_seen();
        for (const c10::IValue& input : fn.inputs()) check(fn, input);
        return nullptr;
    }
    static void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
        for (const c10::IValue& output : fn.outputs()) check(fn, output);
    }

    at::CallbackHandle handle_;
};

/// Expects run() to go through more than 100 ops, none of them on a floating tensor other
/// than fp64; then checks that the recorder does see a narrowing of `probe`.
template <typename Run>
void expect_only_fp64_ops(const Run& run, const at::Tensor& probe) {
    {
        NonFp64OpRecorder recorder;
        run();
        EXPECT_GT(NonFp64OpRecorder::ops_seen(), 100);
        EXPECT_TRUE(NonFp64OpRecorder::found().empty())
            << "first: " << *NonFp64OpRecorder::found().begin();
    }
    NonFp64OpRecorder recorder;
    (void)probe.to(at::kFloat);
    EXPECT_FALSE(NonFp64OpRecorder::found().empty());
}

/// Expects every call to throw `Error` when any one of `fields` of `in` is narrowed to fp32.
template <typename Error, typename In>
void expect_narrowed_field_throws(const In& in, std::initializer_list<at::Tensor In::*> fields,
                                  const std::vector<std::function<void(const In&)>>& calls) {
    for (at::Tensor In::*field : fields) {
        In narrowed = in;
        narrowed.*field = (in.*field).to(at::kFloat);
        for (const auto& call : calls) EXPECT_THROW(call(narrowed), Error);
    }
}

}  // namespace lav::test
