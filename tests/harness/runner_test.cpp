// tests/harness/runner_test.cpp — the case runner: which results count as states, and the chunk
// states each family with a chunk-state dump hands to --dump-intermediates.
#include "harness/runner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/varlen.h"
#include "harness/family_support.h"
#include "harness/registry.h"
#include "metrics/bounds.h"

namespace lav::harness {
namespace {

using scenario::Case;

Case small_case(const std::string& family) {
    Case c;
    c.id = c.name = "runner_test_" + family;
    c.family = family;
    c.variants = {"chunk"};
    c.B = 1;
    c.T = 100;
    c.H = 2;
    c.K = c.V = 16;
    c.HV = c.H;
    c.chunk_size = 16;
    c.cu_seqlens = {0, 0, 37, 100};
    c.input_dtype = c.output_dtype = DType::bf16;
    c.state_dtype = DType::bf16;
    return c;
}

// A family whose backward returns every initial-state gradient in fp32 while its contract
// declares them bf16, and dq as declared.
const std::vector<std::string> kStates = {"h0", "hk0", "hv0", "h_kk0", "h_kv0"};

Family wrong_state_family() {
    Family f;
    f.name = "wrong_state";
    f.variants = {"chunk"};
    f.tensors = {{"q", Role::input, "B T H K", DTypeSetting::inputs}};
    for (const auto& name : kStates)
        f.tensors.push_back({name, Role::state, "B T H K", DTypeSetting::state});
    f.reference = [](const Call& c, bool) {
        TensorMap out;
        for (const auto& [name, t] : c.tensors) out["d" + name] = t;
        return out;
    };
    return f;
}

Row wrong_state_row() {
    Row r;
    r.family = "wrong_state";
    r.variant = "chunk";
    r.backend = r.device = "cpu";
    r.forward = [](const Call&) { return TensorMap{}; };
    r.backward = [](const Call& c) {
        TensorMap out;
        for (const auto& [name, t] : c.tensors)
            out["d" + name] = t.to(name == "q" ? at::kBFloat16 : at::kFloat);
        return out;
    };
    r.contract = [](const Call& c, bool) {
        PrecisionContract contract;
        contract.kernel = "wrong_state.chunk_bwd";
        for (const auto& [name, t] : c.tensors)
            contract.items.push_back({"d" + name, DType::bf16, ""});
        return contract;
    };
    return r;
}

TEST(Runner, EveryInitialStateGradientIsAState) {
    Registry registry;
    registry.add(wrong_state_family());
    registry.rows().add(wrong_state_row());
    Case c = small_case("wrong_state");
    c.cu_seqlens.clear();
    c.forward = false;
    c.backward = true;
    std::vector<report::CaseRecord> records;
    run_case(registry, c, {}, [&](report::CaseRecord r) { records.push_back(std::move(r)); });
    ASSERT_EQ(records.size(), 1u);
    std::vector<std::string> states;
    for (const auto& f : records[0].findings) {
        EXPECT_EQ(f.kind, "STATE_DTYPE_CONTRACT") << f.tensor;
        states.push_back(f.tensor);
    }
    EXPECT_EQ(states, (std::vector<std::string>{"dh0", "dhk0", "dhv0", "dh_kk0", "dh_kv0"}));
    EXPECT_EQ(records[0].verdict, "fail");
}

// A backend named on the command line that has no row for the variant is the case's error
// record, named by that backend; auto takes lav's CPU row here.
TEST(Runner, NamedBackendWithoutARowIsAnErrorRecord) {
    Registry registry;
    registry.add(wrong_state_family());
    registry.rows().add(wrong_state_row());
    Case c = small_case("wrong_state");
    c.cu_seqlens.clear();
    for (const std::string backend : {"auto", "elsewhere"}) {
        RunOptions options;
        options.backends = {backend};
        std::vector<report::CaseRecord> records;
        run_case(registry, c, options,
                 [&](report::CaseRecord r) { records.push_back(std::move(r)); });
        ASSERT_EQ(records.size(), 1u);
        if (backend == "auto") {
            EXPECT_EQ(records[0].backend, "cpu");
            EXPECT_EQ(records[0].verdict, "pass") << records[0].message;
        } else {
            EXPECT_EQ(records[0].backend, "elsewhere");
            EXPECT_EQ(records[0].verdict, "error");
            EXPECT_EQ(records[0].message, "lav has no elsewhere row for wrong_state chunk");
        }
    }
}

// The chunk states of a varlen case (an empty sequence, ragged last chunks), with h0 and the
// family's default options; gated_delta_rule and kda with two value heads per key head.
Case dump_case(const Registry& registry, const std::string& family) {
    Case c = small_case(family);
    for (const auto& [name, values] : registry.get(family).options)
        c.options[name] = values.front();
    if (family == "simple_gla") c.options["gate"] = "g";
    if (family == "gated_delta_rule" || family == "kda") c.HV = 2 * c.H;
    return c;
}

std::vector<report::Intermediates> dump(const Registry& registry, const Case& c) {
    RunOptions options;
    std::vector<report::Intermediates> dumps;
    options.on_intermediates = [&](const std::vector<report::Intermediates>& d) { dumps = d; };
    run_case(registry, c, options, [](report::CaseRecord r) {
        EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
    });
    return dumps;
}

// `steps` recurrence steps per position: gated_delta_product's sub-steps per token.
void expect_chunk_states(const std::string& family, int64_t steps = 1) {
    Registry registry;
    register_all(registry);
    const Case c = dump_case(registry, family);
    const auto dumps = dump(registry, c);
    ASSERT_EQ(dumps.size(), 1u) << family;
    const report::Intermediates& d = dumps[0];
    EXPECT_EQ(d.family, family);
    EXPECT_EQ(d.variant, "chunk");
    EXPECT_EQ(d.state_dtype, "bf16");
    // sequences of 0, 37 and 63 positions, each cut into chunks of 16 steps from its start
    std::vector<int64_t> sequence, position;
    for (const int64_t n : {int64_t{1}, int64_t{2}})
        for (int64_t step = 0; step < (n == 1 ? 37 : 63) * steps; step += 16) {
            sequence.push_back(n);
            position.push_back(step);
        }
    const int64_t NT = static_cast<int64_t>(sequence.size());
    const int64_t heads = value_heads(c);
    EXPECT_EQ(d.dims, (std::vector<int64_t>{NT, heads, 16, 16})) << family;
    ASSERT_EQ(d.chunks.size(), static_cast<size_t>(NT)) << family;
    const double bound =
        metrics::default_bound(metrics::TensorKind::state, c.input_dtype, c.state_dtype);
    for (size_t i = 0; i < d.chunks.size(); ++i) {
        const report::ChunkStateRow& row = d.chunks[i];
        EXPECT_EQ(row.chunk, static_cast<int64_t>(i));
        EXPECT_EQ(row.sequence, sequence[i]) << family << " chunk " << i;
        EXPECT_EQ(row.position, position[i]) << family << " chunk " << i;
        // the first state of a sequence is h0 itself, stored in bf16 and drawn in bf16: exact
        if (row.position == 0) {
            EXPECT_EQ(row.rel_rmse, 0.0) << family << " chunk " << i;
        } else {
            EXPECT_GT(row.rel_rmse, 0.0) << family << " chunk " << i;
            EXPECT_LT(row.rel_rmse, bound) << family << " chunk " << i;
        }
    }
    const int64_t numel = NT * heads * 16 * 16;
    ASSERT_EQ(d.h.size(), static_cast<size_t>(numel));
    ASSERT_EQ(d.h_ref.size(), static_cast<size_t>(numel));
    // every stored value is a bf16 number
    const at::Tensor h = at::tensor(d.h, at::kDouble);
    EXPECT_TRUE(at::equal(h, h.to(at::kBFloat16).to(at::kDouble))) << family;
}

TEST(Runner, SimpleGlaChunkStatesBesideTheReference) { expect_chunk_states("simple_gla"); }

TEST(Runner, GlaChunkStatesBesideTheReference) { expect_chunk_states("gla"); }

TEST(Runner, DeltaRuleChunkStatesBesideTheReference) { expect_chunk_states("delta_rule"); }

TEST(Runner, GatedDeltaRuleChunkStatesBesideTheReference) {
    expect_chunk_states("gated_delta_rule");
}

// chunks of 16 sub-steps over two sub-steps per token (the family's default num_householder)
TEST(Runner, GatedDeltaProductChunkStatesBesideTheReference) {
    expect_chunk_states("gated_delta_product", 2);
}

TEST(Runner, CombaChunkStatesBesideTheReference) { expect_chunk_states("comba"); }

TEST(Runner, KdaChunkStatesBesideTheReference) { expect_chunk_states("kda"); }

TEST(Runner, Rwkv7ChunkStatesBesideTheReference) { expect_chunk_states("rwkv7"); }

TEST(Runner, Rwkv6ChunkStatesBesideTheReference) { expect_chunk_states("rwkv6"); }

// The records of a forward and backward run of `c` on lav's CPU rows, by variant and pass.
std::map<std::string, report::CaseRecord> run_both_passes(Case c) {
    Registry registry;
    register_all(registry);
    for (const auto& [name, values] : registry.get(c.family).options)
        c.options.emplace(name, values.front());
    c.variants = {"chunk", "recurrent"};
    c.backward = true;
    std::map<std::string, report::CaseRecord> records;
    run_case(registry, c, {},
             [&](report::CaseRecord r) { records[r.variant + "/" + r.pass] = std::move(r); });
    return records;
}

DType declared(const report::CaseRecord& r, const std::string& item) {
    return r.contract.dtype_of(item);
}

std::string returned(const report::CaseRecord& r, const std::string& tensor) {
    for (const auto& m : r.metrics)
        if (m.tensor == tensor) return m.dtype;
    return "absent";
}

// Each state component stored in its own dtype: the contract declares both, the kernel returns
// both, and the record names both.
// `a_tensors` are component a's results, `a_chunks` its chunk states in the contract.
void expect_mixed_states(const std::string& family, const std::string& a, const std::string& b,
                         const std::vector<std::string>& a_tensors,
                         const std::vector<std::string>& b_tensors, const std::string& a_chunks,
                         const std::string& b_chunks) {
    Case c = small_case(family);
    c.state_dtype = DType::bf16;
    c.state_dtypes = {{a, DType::fp32}, {b, DType::bf16}};
    if (family == "gsa") c.options["slots"] = "16";
    const auto records = run_both_passes(c);
    ASSERT_EQ(records.size(), 4u);
    for (const auto& [key, r] : records) {
        EXPECT_EQ(r.state_dtype, a + "=fp32," + b + "=bf16") << key;
        EXPECT_NE(r.verdict, "fail") << key << ": " << r.message;
        EXPECT_NE(r.verdict, "error") << key << ": " << r.message;
        for (const auto& t : a_tensors) {
            const bool grad = t[0] == 'd';
            if (grad != (r.pass == "bwd")) continue;
            EXPECT_EQ(declared(r, t), DType::fp32) << key << " " << t;
            EXPECT_EQ(returned(r, t), "fp32") << key << " " << t;
        }
        for (const auto& t : b_tensors) {
            const bool grad = t[0] == 'd';
            if (grad != (r.pass == "bwd")) continue;
            EXPECT_EQ(declared(r, t), DType::bf16) << key << " " << t;
            EXPECT_EQ(returned(r, t), "bf16") << key << " " << t;
        }
    }
    const report::CaseRecord& chunk = records.at("chunk/fwd");
    EXPECT_EQ(declared(chunk, "chunk states " + a_chunks), DType::fp32);
    EXPECT_EQ(declared(chunk, "chunk states " + b_chunks), DType::bf16);
}

TEST(Runner, GsaStoresEachStateInItsOwnDtype) {
    expect_mixed_states("gsa", "hk", "hv", {"hkt", "dhk0"}, {"hvt", "dhv0"}, "hk", "hv");
}

TEST(Runner, MesaNetStoresEachStateInItsOwnDtype) {
    expect_mixed_states("mesa_net", "kk", "kv", {"ht_kk", "dh_kk0"}, {"ht_kv", "dh_kv0"}, "h_kk",
                        "h_kv");
}

// [dtypes] cotangents reaches the backward: the cotangents it was given are in the record's
// contract in that dtype, and the gradients move with the rounding of d_o.
TEST(Runner, CotangentDtypeReachesTheKernel) {
    Case c = small_case("simple_gla");
    c.options["gate"] = "g";
    std::map<std::string, double> dq_error;
    for (const DType cot : {DType::bf16, DType::fp32}) {
        c.cotangent_dtype = cot;
        const auto records = run_both_passes(c);
        for (const std::string variant : {"chunk", "recurrent"}) {
            const report::CaseRecord& r = records.at(variant + "/bwd");
            EXPECT_EQ(declared(r, "d_o"), cot) << variant;
            EXPECT_EQ(declared(r, "dht"), cot) << variant;
            // the outputs keep their own dtypes whatever the cotangents'
            EXPECT_EQ(declared(r, "o"), DType::bf16) << variant;
        }
        for (const auto& m : records.at("recurrent/bwd").metrics)
            if (m.tensor == "dq") dq_error[std::string(dtype_name(cot))] = m.rel_rmse;
    }
    ASSERT_EQ(dq_error.size(), 2u);
    EXPECT_NE(dq_error["bf16"], dq_error["fp32"]);
}

// gated_delta_product's k, v and beta (and their gradients) run over T·n sub-steps: a varlen
// case's chunk positions are found in sub-steps, not refused for T
TEST(Runner, SubStepTensorsOfAVarlenCaseAreJudged) {
    const auto records = run_both_passes(small_case("gated_delta_product"));
    ASSERT_EQ(records.size(), 4u);
    for (const auto& [key, r] : records) {
        EXPECT_NE(r.verdict, "error") << key << ": " << r.message;
        if (r.pass != "bwd") continue;
        bool dk = false;
        for (const auto& m : r.metrics) dk = dk || m.tensor == "dk";
        EXPECT_TRUE(dk) << key;
    }
}

// The delta rules refuse keys drawn too long for an un-normalised step; keys handed in (an op
// call, a capture) are the caller's, whatever their length
TEST(Runner, OnlyDrawnKeysAreCheckedForLength) {
    Registry registry;
    register_all(registry);
    for (const std::string family : {"delta_rule", "gated_delta_rule", "comba"}) {
        const Family& f = registry.get(family);
        Case c = small_case(family);
        for (const auto& [option, values] : f.options) c.options[option] = values.front();
        c.options["use_qk_l2norm_in_kernel"] = "false";
        const auto& check = f.check;
        const auto flagged = [&] {
            for (const auto& i : check(c))
                if (i.path == "options.use_qk_l2norm_in_kernel") return true;
            return false;
        };
        EXPECT_TRUE(flagged()) << family;
        c.generators["k"] = c.generators["p"] = {"randn", 0.25, 1.0};
        EXPECT_FALSE(flagged()) << family;
        c.generators.clear();
        c.inputs_given = true;
        EXPECT_FALSE(flagged()) << family;
    }
}

}  // namespace
}  // namespace lav::harness
