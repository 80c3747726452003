// tests/harness/runner_test.cpp — the case runner: which results count as states, and the chunk
// states it hands to --dump-intermediates.
#include "harness/runner.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/varlen.h"

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
Family wrong_state_family() {
    static const std::vector<std::string> kGrads = {"dq",   "dh0",    "dhk0",
                                                    "dhv0", "dh_kk0", "dh_kv0"};
    Family f;
    f.info.name = "wrong_state";
    f.info.variants = {"chunk"};
    f.inputs = [](const Case&) {
        return std::vector<TensorSpec>{{"q", {1, 4, 1, 2}, DType::bf16, true, {}}};
    };
    f.cotangents = [](const Case&) { return std::vector<TensorSpec>{}; };
    f.measured = [](const Case&, bool backward) {
        std::vector<MeasuredSpec> out;
        for (const auto& name : kGrads)
            if (backward) out.push_back({name, metrics::TensorKind::gradient, -1});
        return out;
    };
    f.reference = [](const Case&, const TensorMap& in, const TensorMap&, bool) {
        TensorMap out;
        for (const auto& name : kGrads) out[name] = in.at("q");
        return out;
    };
    f.run_cpu = [](const Case&, const std::string&, const TensorMap& in, const TensorMap&, bool) {
        KernelResult k;
        k.contract.kernel = "wrong_state.chunk_bwd";
        for (const auto& name : kGrads) {
            k.contract.items.push_back({name, DType::bf16, ""});
            k.results[name] = in.at("q").to(name == "dq" ? at::kBFloat16 : at::kFloat);
        }
        return k;
    };
    return f;
}

TEST(Runner, EveryInitialStateGradientIsAState) {
    Registry registry;
    registry.add(wrong_state_family());
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

// The chunk states of a varlen case (an empty sequence, ragged last chunks), with h0.
std::vector<report::Intermediates> dump(const std::string& family) {
    Registry registry;
    register_all(registry);
    Case c = small_case(family);
    if (family == "simple_gla") c.options = {{"gate", "g"}};
    RunOptions options;
    std::vector<report::Intermediates> dumps;
    options.on_intermediates = [&](const std::vector<report::Intermediates>& d) { dumps = d; };
    run_case(registry, c, options, [](report::CaseRecord r) {
        EXPECT_EQ(r.verdict, "pass") << r.id << ": " << r.message;
    });
    return dumps;
}

void expect_chunk_states(const std::string& family) {
    const auto dumps = dump(family);
    ASSERT_EQ(dumps.size(), 1u) << family;
    const report::Intermediates& d = dumps[0];
    EXPECT_EQ(d.variant, "chunk");
    EXPECT_EQ(d.state_dtype, "bf16");
    // sequences of 0, 37 and 63 positions: 0 + 3 + 4 chunks of 16
    EXPECT_EQ(d.dims, (std::vector<int64_t>{7, 2, 16, 16}));
    ASSERT_EQ(d.chunks.size(), 7u);
    const std::vector<int64_t> sequence = {1, 1, 1, 2, 2, 2, 2};
    const std::vector<int64_t> position = {0, 16, 32, 0, 16, 32, 48};
    for (size_t i = 0; i < d.chunks.size(); ++i) {
        const report::ChunkStateRow& row = d.chunks[i];
        EXPECT_EQ(row.chunk, static_cast<int64_t>(i));
        EXPECT_EQ(row.sequence, sequence[i]) << i;
        EXPECT_EQ(row.position, position[i]) << i;
        // the first state of a sequence is h0 itself, stored in bf16 and drawn in bf16: exact
        if (row.position == 0) {
            EXPECT_EQ(row.rel_rmse, 0.0) << family << " chunk " << i;
        } else {
            EXPECT_GT(row.rel_rmse, 0.0) << family << " chunk " << i;
            // one bf16 rounding of the state and the fp32 chunk algebra (2^-9 ≈ 2e-3 per value)
            EXPECT_LT(row.rel_rmse, 8e-3) << family << " chunk " << i;
        }
    }
    const int64_t numel = 7 * 2 * 16 * 16;
    ASSERT_EQ(d.h.size(), static_cast<size_t>(numel));
    ASSERT_EQ(d.h_ref.size(), static_cast<size_t>(numel));
    // every stored value is a bf16 number
    const at::Tensor h = at::tensor(d.h, at::kDouble);
    EXPECT_TRUE(at::equal(h, h.to(at::kBFloat16).to(at::kDouble)));
}

TEST(Runner, SimpleGlaChunkStatesBesideTheReference) { expect_chunk_states("simple_gla"); }

TEST(Runner, GlaChunkStatesBesideTheReference) { expect_chunk_states("gla"); }

}  // namespace
}  // namespace lav::harness
