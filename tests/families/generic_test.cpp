// tests/families/generic_test.cpp — one suite over every registered family and CPU row.
//
// Per row, once per option set (the declared defaults, each other option value alone, and other
// values together): head_first gives the head_last results bitwise; a packed batch gives each
// sequence's results run alone bitwise; chunk sizes agree to fp32 rounding; results carry the
// contract's dtypes and no NaN or Inf. Per family: the reference's two fp64 forward forms agree,
// and its gradients match autograd (where its second form runs under autograd) and finite
// differences. Cases are small (T = 100, K = 16) and read off each family's declaration.
#include "families/generic.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace lav::test::generic {
namespace {

// ---- parameters ----

struct RowParam {
    std::string family, variant, backend;
};

// gtest prints a failed case's parameter with this
void PrintTo(const RowParam& p, std::ostream* os) {
    *os << p.family << " " << p.variant << " " << p.backend;
}

std::string row_param_name(const testing::TestParamInfo<RowParam>& info) {
    return identifier(info.param.family + "_" + info.param.variant + "_" + info.param.backend);
}

std::string family_param_name(const testing::TestParamInfo<std::string>& info) {
    return identifier(info.param);
}

/// Every CPU row, or only the chunk rows.
std::vector<RowParam> cpu_rows(bool chunk_only) {
    std::vector<RowParam> out;
    for (const Row& row : registry().rows().rows())
        if (row.device == "cpu" && (!chunk_only || row.variant == "chunk"))
            out.push_back({row.family, row.variant, row.backend});
    return out;
}

std::vector<std::string> families() {
    std::vector<std::string> out;
    for (const Family& f : registry().families()) out.push_back(f.name);
    return out;
}

/// "options: a=1 b=2", the trace a check under one option set carries.
std::string options_trace(const Options& o) {
    std::ostringstream text;
    text << "options:";
    PrintTo(o, &text);
    return text.str();
}

testing::AssertionResult valid(const Family& f, const Case& c) {
    const std::string issues = issues_of(f, c);
    if (issues.empty()) return testing::AssertionSuccess();
    return testing::AssertionFailure() << "the generic case breaks " << f.name << "'s rules:\n"
                                       << issues;
}

// ---- dtypes ----

struct Dtypes {
    DType in, gate, state, out;
};

// Every input, state and output dtype at least once: bf16 inputs with each state dtype, fp16
// inputs with a 16-bit gate, fp32 inputs and outputs
constexpr Dtypes kDtypes[] = {
    {DType::bf16, DType::fp32, DType::fp32, DType::bf16},
    {DType::fp16, DType::bf16, DType::bf16, DType::fp32},
    {DType::fp32, DType::fp32, DType::fp32, DType::fp32},
    {DType::fp32, DType::fp32, DType::bf16, DType::fp32},
    {DType::bf16, DType::fp32, DType::fp16, DType::bf16},
};

// Where a NaN or Inf is likeliest: fp16 inputs and output (the narrowest range), 16-bit states
constexpr Dtypes kNarrowDtypes[] = {
    {DType::fp16, DType::fp32, DType::fp32, DType::fp16},
    {DType::fp16, DType::bf16, DType::bf16, DType::fp32},
    {DType::bf16, DType::fp32, DType::fp16, DType::bf16},
};

Case with_dtypes(Case c, const Dtypes& d) {
    c.input_dtype = d.in;
    c.gate_dtype = d.gate;
    c.state_dtype = d.state;
    c.output_dtype = d.out;
    return c;
}

std::string dtypes_name(const Dtypes& d) {
    return "in " + std::string(dtype_name(d.in)) + " gate " + std::string(dtype_name(d.gate)) +
           " state " + std::string(dtype_name(d.state)) + " out " + std::string(dtype_name(d.out));
}

// ---- per row ----

/// The tensor `name` of m, or an undefined tensor.
at::Tensor named(const TensorMap& m, const std::string& name) {
    const auto it = m.find(name);
    return it == m.end() ? at::Tensor() : it->second;
}

/// A row's tests, each run once per option set of its family (option_sets), the failures traced
/// with the options.
class FamilyRow : public testing::TestWithParam<RowParam> {
  protected:
    const Family& family() const { return registry().get(GetParam().family); }
    const Row& row() const {
        const RowParam& p = GetParam();
        const Row* r = registry().rows().find(p.family, p.variant, p.backend);
        EXPECT_NE(r, nullptr);
        return *r;
    }
    /// check(base) for the small case of each option set the row takes.
    template <class Check>
    void for_each_option_set(const Check& check) const {
        int ran = 0;
        for (const Options& o : option_sets(family())) {
            const Case base = small_case(family(), o.values);
            if (row().fits && !row().fits(harness::call_of(family(), base))) continue;
            SCOPED_TRACE(options_trace(o));
            check(base);
            ++ran;
        }
        if (ran == 0) GTEST_SKIP() << row_name(row()) << " takes none of the generic cases";
    }
};

/// The part of packed tensor x, declared as t, that belongs to sequence seq: its time rows, its
/// state row, or all of it (a parameter every sequence shares). x is in head_last order.
at::Tensor part_of(const TensorDecl& t, const at::Tensor& x, const Sequence& seq,
                   const std::map<std::string, int64_t>& dims) {
    const auto axes = axes_of(t);
    for (size_t i = 0; i < axes.size(); ++i) {
        int64_t per_step = 1;
        bool timed = false;
        for (const std::string& letter : axes[i]) {
            if (letter == "T")
                timed = true;
            else
                per_step *= dims.at(letter);
        }
        if (timed)
            return x.narrow(static_cast<int64_t>(i), seq.begin * per_step, seq.length() * per_step)
                .contiguous();
    }
    return per_sequence(t) ? x.narrow(0, seq.index, 1).clone() : x;
}

TEST_P(FamilyRow, HeadFirstMatchesHeadLastBitwise) {
    for_each_option_set([&](const Case& base) {
        const Family& f = family();
        for (const Case& hl : {base, packed(base)}) {
            Case hf = hl;
            hf.layout = Layout::head_first;
            ASSERT_TRUE(valid(f, hf));
            const std::string what = hl.cu_seqlens.empty() ? "dense" : "packed";
            const Ran a = run_row(f, row(), draw(f, hl));
            const Ran b = run_row(f, row(), draw(f, hf));
            for (const MeasuredSpec& m : measured(f, hl)) {
                const at::Tensor x = result(a, m.name), y = result(b, m.name);
                if (!x.defined() || !y.defined()) continue;
                const bool timed = m.time_dim >= 0;
                // a result with a time axis comes back in the inputs' layout
                EXPECT_EQ(y.sizes(),
                          timed ? from_head_last(x, Layout::head_first).sizes() : x.sizes())
                    << what << " " << m.name;
                EXPECT_TRUE(at::equal(x, timed ? to_head_last(y, Layout::head_first) : y))
                    << what << " " << m.name << " differs between head_first and head_last";
            }
        }
    });
}

TEST_P(FamilyRow, VarlenMatchesSequencesRunAloneBitwise) {
    for_each_option_set([&](const Case& base) {
        const Family& f = family();
        const Case c = packed(base);
        ASSERT_TRUE(valid(f, c));
        const Drawn d = draw(f, c);
        const Ran all = run_row(f, row(), d);
        // the gradients of parameters every sequence shares are sums over the sequences
        std::map<std::string, at::Tensor> summed;
        for (const Sequence& seq : sequences(c.B, c.T, c.cu_seqlens)) {
            // without states an empty sequence has no result to compare
            if (seq.length() == 0 && !has_per_sequence_tensors(f)) continue;
            Case one = c;
            one.T = seq.length();
            one.cu_seqlens.clear();
            Drawn alone{one, harness::call_of(f, one), {}, {}};
            for (const auto* from : {&d.in.kernel, &d.cot.kernel}) {
                TensorMap& to = from == &d.in.kernel ? alone.in.kernel : alone.cot.kernel;
                for (const auto& [name, x] : *from) {
                    const TensorDecl* t = decl_named(f, name);
                    ASSERT_NE(t, nullptr) << name;
                    to[name] = part_of(*t, x, seq, d.call.dims);
                }
            }
            const Ran r = run_row(f, row(), alone);
            const std::string what = "sequence " + std::to_string(seq.index) + " (" +
                                     std::to_string(seq.length()) + " positions) ";
            // an empty sequence passes its initial state to its final state, and the final state's
            // cotangent to the initial state's gradient
            for (const auto& [final_state, initial] : state_pairs(f)) {
                if (seq.length() > 0 || !d.in.kernel.count(initial)) continue;
                const std::string grad = "d" + initial, cot = cotangent_of(f, final_state);
                for (const auto& [name, want] : {std::pair{final_state, d.in.kernel.at(initial)},
                                                 std::pair{grad, named(d.cot.kernel, cot)}}) {
                    const at::Tensor got = result(all, name);
                    if (!got.defined() || !want.defined()) continue;
                    EXPECT_TRUE(
                        at::equal(got[seq.index].to(at::kDouble), want[seq.index].to(at::kDouble)))
                        << what << name << " is not the " << (name == grad ? cot : initial)
                        << " it was given";
                }
            }
            for (const MeasuredSpec& m : measured(f, c)) {
                const TensorDecl* t = decl_of_result(f, m.name);
                const at::Tensor got = result(r, m.name), full = result(all, m.name);
                ASSERT_NE(t, nullptr) << m.name;
                if (!got.defined() || !full.defined()) continue;
                if (m.time_dim < 0 && !per_sequence(*t)) {
                    const at::Tensor g = got.to(at::kDouble);
                    summed[m.name] = summed.count(m.name) ? summed[m.name] + g : g;
                    continue;
                }
                EXPECT_TRUE(at::equal(got, part_of(*t, full, seq, d.call.dims)))
                    << what << m.name << " differs from its part of the packed batch";
            }
        }
        for (const auto& [name, sum] : summed)
            EXPECT_LE(rel_err(result(all, name), sum), 1e-5)
                << name << " of the packed batch is not the sum of the sequences'";
    });
}

// Each result in the dtype its row's contract declares, which is also the dtype setting its
// declaration names (a gradient follows its input's).
TEST_P(FamilyRow, ResultsHaveTheContractsDtypes) {
    for_each_option_set([&](const Case& base) {
        const Family& f = family();
        for (const Dtypes& dt : kDtypes) {
            const Case c = with_dtypes(base, dt);
            ASSERT_TRUE(valid(f, c)) << dtypes_name(dt);
            const Ran ran = run_row(f, row(), draw(f, c));
            for (const MeasuredSpec& m : measured(f, c)) {
                const at::Tensor x = result(ran, m.name);
                const TensorDecl* t = decl_of_result(f, m.name);
                if (!x.defined() || !t) continue;
                const std::string got = scalar_type_name(x.scalar_type());
                EXPECT_EQ(got, scalar_type_name(ran.declared.at(m.name)))
                    << dtypes_name(dt) << ": " << m.name << " is not in its contract's dtype";
                EXPECT_EQ(got, std::string(dtype_name(setting_dtype(c, t->dtype))))
                    << dtypes_name(dt) << ": " << m.name << " is not in its declared dtype setting";
            }
        }
    });
}

// No NaN or Inf in any result (rows start their outputs as NaN, so an element left unwritten
// shows): in the narrowest dtypes, and packed in both layouts.
TEST_P(FamilyRow, ResultsAreFinite) {
    for_each_option_set([&](const Case& base) {
        const Family& f = family();
        std::vector<std::pair<std::string, Case>> cases;
        for (const Dtypes& dt : kNarrowDtypes)
            cases.push_back({dtypes_name(dt), with_dtypes(base, dt)});
        cases.push_back({"packed", packed(base)});
        Case hf = packed(base);
        hf.layout = Layout::head_first;
        cases.push_back({"packed head_first", hf});
        for (const auto& [what, c] : cases) {
            ASSERT_TRUE(valid(f, c)) << what;
            const Ran ran = run_row(f, row(), draw(f, c));
            for (const auto& [name, x] : ran.results)
                EXPECT_TRUE(all_finite(x)) << what << ": " << name << " has NaN or Inf";
        }
    });
}

INSTANTIATE_TEST_SUITE_P(Rows, FamilyRow, testing::ValuesIn(cpu_rows(false)), row_param_name);

// ---- chunk sizes ----

class FamilyChunkRow : public FamilyRow {};

// fp32 rounding amplified by the problem's conditioning. Measured here: at most 2e-6 for most
// families and option values, 1.2e-5 for gated_delta_rule's in-kernel gate, 1.4e-4 for mesa_net
// without its in-kernel key norm (ill-conditioned solves); a wrong formula is off by far more.
constexpr double kChunkRelTol = 1e-3;

// In fp32 a chunk size only moves where fp32 rounds: 1, 16 and 32 against 64, and the recurrent
// row of the same backend against it too; o must move, or the chunk size was ignored.
TEST_P(FamilyChunkRow, ChunkSizesAgreeToFp32Rounding) {
    for_each_option_set([&](const Case& base) {
        const Family& f = family();
        Case c = with_dtypes(base, {DType::fp32, DType::fp32, DType::fp32, DType::fp32});
        c.chunk_size = 64;
        ASSERT_TRUE(valid(f, c));
        const Ran at64 = run_row(f, row(), draw(f, c));
        const auto expect_near = [&](const std::string& what, const Ran& other, bool must_move) {
            for (const MeasuredSpec& m : measured(f, c)) {
                const at::Tensor x = result(other, m.name), y = result(at64, m.name);
                if (!x.defined() || !y.defined()) continue;
                const double err = rel_err(x, y);
                EXPECT_LE(err, kChunkRelTol) << what << " " << m.name << " against chunk size 64";
                if (must_move && m.name == "o") {
                    EXPECT_GT(err, 0.0) << what << ": chunk size ignored";
                }
            }
        };
        for (const int64_t chunk : {1, 16, 32}) {
            Case other = c;
            other.chunk_size = chunk;
            ASSERT_TRUE(valid(f, other)) << "chunk size " << chunk;
            expect_near("chunk size " + std::to_string(chunk), run_row(f, row(), draw(f, other)),
                        true);
        }
        const Row* recurrent = registry().rows().find(f.name, "recurrent", row().backend);
        if (recurrent) expect_near("recurrent", run_row(f, *recurrent, draw(f, c)), false);
    });
}

INSTANTIATE_TEST_SUITE_P(Rows, FamilyChunkRow, testing::ValuesIn(cpu_rows(true)), row_param_name);

// ---- the reference ----

// reference/README.md, rule 4: the two fp64 forward forms agree to 1e-12 relative, and the
// reference's gradients agree with autograd to 1e-10. Measured here: at most 2e-15 and 4e-14.
constexpr double kFormsRelTol = 1e-12;
constexpr double kAutogradRelTol = 1e-10;
// Fourth-order central differences with h = 1e-4 of the input's size: O(h⁴) truncation and
// about 1e-16 / h rounding, relative. Measured here: at most 6e-9 (rwkv7, packed da).
constexpr double kFiniteDifferenceRelTol = 1e-7;

/// A family's reference tests, each run once per option set (option_sets).
class FamilyReference : public testing::TestWithParam<std::string> {
  protected:
    const Family& family() const { return registry().get(GetParam()); }
    /// check(base) for the small case of each option set.
    template <class Check>
    void for_each_option_set(const Check& check) const {
        for (const Options& o : option_sets(family())) {
            SCOPED_TRACE(options_trace(o));
            check(small_case(family(), o.values));
        }
    }
};

/// Σ out · cotangent over the outputs of `outputs` that the call has a cotangent for: the loss
/// whose gradients a backward pass returns.
at::Tensor loss_of(const Family& f, const Case& c, const TensorMap& outputs, const Call& call) {
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (const MeasuredSpec& m : harness::measured_of(f, c, false)) {
        const at::Tensor cot = call.get(cotangent_of(f, m.name));
        if (cot.defined()) loss = loss + (named(outputs, m.name) * cot).sum();
    }
    return loss;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// A drawn input that an option replaces by a multiple of another one: the reference then reads
/// factor · source in its place, so changing the drawn tensor changes nothing, and its gradient
/// is the derivative with respect to the value read. It is checked through the source, whose
/// derivative as the forward reads it is d<source> + factor · d<input>.
struct Tie {
    const char* family;
    const char* option;
    const char* value;
    const char* input;
    const char* source;
    double factor;
};

// rwkv7's b = neg_a (FLA's DPLR test convention): b = −a
constexpr Tie kTies[] = {{"rwkv7", "b", "neg_a", "b", "a", -1.0}};

std::vector<Tie> ties_of(const Family& f, const Case& c) {
    std::vector<Tie> out;
    for (const Tie& t : kTies) {
        const auto it = c.options.find(t.option);
        if (f.name == t.family && it != c.options.end() && it->second == t.value) out.push_back(t);
    }
    return out;
}

/// The inputs whose gradients a perturbation of the drawn tensors checks, with the reference's
/// derivative of the loss with respect to each as its forward reads it.
std::vector<std::pair<std::string, at::Tensor>> checked_gradients(const Family& f, const Case& c,
                                                                  const TensorMap& grads) {
    const std::vector<Tie> ties = ties_of(f, c);
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const MeasuredSpec& m : harness::measured_of(f, c, true)) {
        const std::string input = m.name.substr(1);
        bool tied = false;
        at::Tensor g = named(grads, m.name);
        for (const Tie& t : ties) {
            tied = tied || input == t.input;
            if (input == t.source && g.defined())
                g = g + t.factor * named(grads, "d" + std::string(t.input));
        }
        if (!tied) out.push_back({input, g});
    }
    return out;
}

TEST_P(FamilyReference, ReferenceFormsAgree) {
    for_each_option_set([&](const Case& base) {
        const Family& f = family();
        ASSERT_TRUE(f.reference_check) << f.name << " declares no second fp64 form";
        for (const Case& c : {base, packed(base)}) {
            ASSERT_TRUE(valid(f, c));
            const std::string what = c.cu_seqlens.empty() ? "dense" : "packed";
            const Call call = reference_call(draw(f, c));
            const TensorMap a = f.reference(call, false);
            const TensorMap b = f.reference_check(call);
            for (const MeasuredSpec& m : harness::measured_of(f, c, false)) {
                const at::Tensor x = named(a, m.name), y = named(b, m.name);
                ASSERT_TRUE(x.defined() && y.defined()) << what << " " << m.name;
                ASSERT_EQ(x.sizes(), y.sizes()) << what << " " << m.name;
                EXPECT_LE(rel_err(x, y), kFormsRelTol) << what << " " << m.name;
            }
        }
    });
}

// Autograd differentiates the second form (the first updates its state in place); a family
// whose second form does not run under autograd either is skipped here, and checked by finite
// differences below.
TEST_P(FamilyReference, ReferenceGradientsMatchAutograd) {
    const Family& f = family();
    ASSERT_TRUE(f.reference_check) << f.name << " declares no second fp64 form";
    int differentiated = 0;
    std::string refusal;  // why the second form did not run under autograd, where it did not
    for_each_option_set([&](const Case& base) {
        for (const Case& c : {base, packed(base)}) {
            ASSERT_TRUE(valid(f, c));
            const std::string what = c.cu_seqlens.empty() ? "dense" : "packed";
            const Call call = reference_call(draw(f, c));
            const auto checked = checked_gradients(f, c, f.reference(call, true));
            Call leafy = call;
            std::vector<at::Tensor> leaves;
            for (const auto& [input, g] : checked) {
                const at::Tensor leaf = call.need(input).clone().requires_grad_(true);
                leafy.tensors[input] = leaf;
                leaves.push_back(leaf);
            }
            std::vector<at::Tensor> expected;
            try {
                const at::Tensor loss = loss_of(f, c, f.reference_check(leafy), call);
                ASSERT_TRUE(loss.requires_grad()) << f.name << "'s second form detaches o";
                expected = torch::autograd::grad({loss}, leaves, {}, false, false, true);
            } catch (const c10::Error& e) {
                refusal = first_line(e.what());
                return;
            }
            for (size_t i = 0; i < checked.size(); ++i) {
                const auto& [input, got] = checked[i];
                ASSERT_TRUE(got.defined()) << what << " reference returned no d" << input;
                const at::Tensor want =
                    expected[i].defined() ? expected[i] : at::zeros_like(leaves[i]).detach();
                EXPECT_LE(rel_err(got, want), kAutogradRelTol) << what << " d" << input;
            }
            ++differentiated;
        }
    });
    if (differentiated == 0)
        GTEST_SKIP() << f.name << "'s second fp64 form does not run under autograd (" << refusal
                     << "); ReferenceGradientsMatchFiniteDifferences checks its gradients";
    if (!refusal.empty()) RecordProperty("autograd", "not every option set: " + refusal);
}

// Along a random direction δ per input x: the reference's Σ dx·δ against fourth-order central
// differences of the loss of its forward, (8(L(h) − L(−h)) − (L(2h) − L(−2h))) / 12h.
TEST_P(FamilyReference, ReferenceGradientsMatchFiniteDifferences) {
    for_each_option_set([&](const Case& base) {
        const Family& f = family();
        for (const Case& c : {base, packed(base)}) {
            ASSERT_TRUE(valid(f, c));
            const std::string what = c.cu_seqlens.empty() ? "dense" : "packed";
            const Call call = reference_call(draw(f, c));
            uint64_t seed = 7;
            for (const auto& [input, g] : checked_gradients(f, c, f.reference(call, true))) {
                ASSERT_TRUE(g.defined()) << what << " reference returned no d" << input;
                const at::Tensor x = call.need(input);
                at::Generator gen = at::detail::createCPUGenerator(seed++);
                const at::Tensor direction = at::randn(x.sizes(), gen, at::kDouble);
                const double size = x.square().mean().sqrt().item<double>();
                const double h = 1e-4 * (size > 0.0 ? size : 1.0);
                const auto loss_at = [&, name = input](double step) {
                    Call moved = call;
                    moved.tensors[name] = x + step * direction;
                    return loss_of(f, c, f.reference(moved, false), moved).item<double>();
                };
                const double numeric =
                    (8.0 * (loss_at(h) - loss_at(-h)) - (loss_at(2.0 * h) - loss_at(-2.0 * h))) /
                    (12.0 * h);
                const double analytic = (g * direction).sum().item<double>();
                EXPECT_LE(std::abs(numeric - analytic),
                          kFiniteDifferenceRelTol * std::abs(analytic))
                    << what << " d" << input << ": finite differences " << numeric
                    << ", reference backward " << analytic;
            }
        }
    });
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyReference, testing::ValuesIn(families()),
                         family_param_name);

}  // namespace
}  // namespace lav::test::generic
