// tests/scenario/scenario_test.cpp — good files load as expected; file collection; memory estimate.
#include "scenario/scenario.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace lav::scenario {
namespace {

namespace fs = std::filesystem;

Catalog test_catalog() {
    FamilyInfo simple_gla;
    simple_gla.name = "simple_gla";
    simple_gla.summary = "gated linear attention with a scalar gate per head";
    simple_gla.variants = {"chunk", "recurrent"};
    simple_gla.inputs = {"q", "k", "v", "g", "g_gamma", "h0"};
    simple_gla.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dh0"};
    simple_gla.options = {{"gate", {"g", "g_gamma", "none"}}};

    FamilyInfo gated_delta;
    gated_delta.name = "gated_delta";
    gated_delta.summary = "delta rule with a scalar gate and grouped value heads";
    gated_delta.variants = {"chunk", "recurrent"};
    gated_delta.inputs = {"q", "k", "v", "g", "beta", "h0"};
    gated_delta.measured = {"o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    gated_delta.options = {{"gva", {"false", "true"}},
                           {"use_qk_l2norm_in_kernel", {"true", "false"}}};

    FamilyInfo gsa;
    gsa.name = "gsa";
    gsa.summary = "two states over memory slots";
    gsa.variants = {"chunk", "recurrent"};
    gsa.inputs = {"q", "k", "v", "s", "g", "hk0", "hv0"};
    gsa.measured = {"o", "hkt", "hvt"};
    gsa.state_components = {"hk", "hv"};
    return {simple_gla, gated_delta, gsa};
}

std::string good_path(const std::string& file) {
    return std::string(LAV_SOURCE_DIR) + "/tests/data/scenarios/good/" + file;
}

std::vector<Case> load(const std::string& path) {
    return load_file(path, test_catalog(), LoadOptions{});
}

/// A fresh empty directory under the system temp folder, removed by the destructor.
class TempDir {
  public:
    explicit TempDir(const std::string& name)
        : path_(fs::temp_directory_path() /
                (name + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()))) {
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    const fs::path& path() const { return path_; }
    std::string write(const std::string& relative, const std::string& text) const {
        const fs::path file = path_ / relative;
        fs::create_directories(file.parent_path());
        std::ofstream(file) << text;
        return file.string();
    }

  private:
    fs::path path_;
};

TEST(ScenarioLoad, MinimalFileTakesEveryDefault) {
    const std::string path = good_path("minimal.toml");
    const auto cases = load(path);
    ASSERT_EQ(cases.size(), 1u);
    const Case& c = cases[0];
    EXPECT_EQ(c.file, path);
    EXPECT_EQ(c.name, "minimal");
    EXPECT_EQ(c.description, "required keys only");
    EXPECT_TRUE(c.matrix.empty());
    EXPECT_EQ(c.id, "minimal");
    EXPECT_EQ(c.family, "simple_gla");
    EXPECT_EQ(c.variants, (std::vector<std::string>{"chunk", "recurrent"}));
    EXPECT_TRUE(c.forward);
    EXPECT_FALSE(c.backward);
    EXPECT_EQ(c.options, (std::map<std::string, std::string>{{"gate", "g"}}));
    EXPECT_EQ(c.B, 2);
    EXPECT_EQ(c.T, 128);
    EXPECT_EQ(c.H, 4);
    EXPECT_EQ(c.K, 32);
    EXPECT_EQ(c.V, 16);
    EXPECT_EQ(c.HV, 4);
    EXPECT_EQ(c.layout, Layout::head_last);
    EXPECT_TRUE(c.cu_seqlens.empty());
    EXPECT_EQ(c.chunk_size, 64);
    EXPECT_FALSE(c.scale.has_value());
    EXPECT_TRUE(c.initial_state);
    EXPECT_EQ(c.input_dtype, DType::bf16);
    EXPECT_EQ(c.gate_dtype, DType::fp32);
    EXPECT_EQ(c.state_dtype, DType::fp32);
    EXPECT_EQ(c.output_dtype, DType::bf16);
    EXPECT_EQ(c.seed, 42u);
    EXPECT_TRUE(c.generators.empty());
    EXPECT_TRUE(c.tolerances.empty());
    EXPECT_FALSE(c.long_case);
    EXPECT_EQ(c.location.file, path);
    EXPECT_EQ(c.location.line, 1);
    EXPECT_EQ(c.location.column, 1);
}

TEST(ScenarioLoad, FullFileSetsEverySetting) {
    const auto cases = load(good_path("full.toml"));
    ASSERT_EQ(cases.size(), 1u);
    const Case& c = cases[0];
    EXPECT_EQ(c.name, "full.settings-1");
    EXPECT_EQ(c.id, "full.settings-1");
    EXPECT_EQ(c.variants, (std::vector<std::string>{"recurrent"}));
    EXPECT_TRUE(c.forward);
    EXPECT_TRUE(c.backward);
    EXPECT_EQ(c.seed, 7u);
    EXPECT_EQ(c.layout, Layout::head_first);
    EXPECT_FALSE(c.initial_state);
    EXPECT_EQ(c.chunk_size, 32);
    ASSERT_TRUE(c.scale.has_value());
    EXPECT_DOUBLE_EQ(*c.scale, 0.25);
    EXPECT_TRUE(c.long_case);
    EXPECT_EQ(c.cu_seqlens, (std::vector<int64_t>{0, 100, 100, 1024}));
    EXPECT_EQ(c.B, 1);
    EXPECT_EQ(c.T, 1024);
    EXPECT_EQ(c.H, 2);
    EXPECT_EQ(c.K, 64);
    EXPECT_EQ(c.V, 32);
    EXPECT_EQ(c.input_dtype, DType::fp16);
    EXPECT_EQ(c.gate_dtype, DType::bf16);
    EXPECT_EQ(c.state_dtype, DType::fp16);
    EXPECT_EQ(c.output_dtype, DType::fp32);
    EXPECT_EQ(c.options.at("gate"), "g_gamma");

    ASSERT_EQ(c.generators.size(), 5u);
    EXPECT_EQ(c.generators.at("q").dist, "rand");
    EXPECT_DOUBLE_EQ(c.generators.at("q").scale, 1.0);
    EXPECT_EQ(c.generators.at("g_gamma").dist, "retention");
    EXPECT_EQ(c.generators.at("g").dist, "logsigmoid");
    EXPECT_DOUBLE_EQ(c.generators.at("g").normalizer, 10.0);
    EXPECT_EQ(c.generators.at("h0").dist, "randn");
    EXPECT_DOUBLE_EQ(c.generators.at("h0").scale, 0.5);
    // a table without dist keeps the default distribution
    EXPECT_EQ(c.generators.at("v").dist, "randn");
    EXPECT_DOUBLE_EQ(c.generators.at("v").scale, 2.0);

    ASSERT_EQ(c.tolerances.size(), 2u);
    EXPECT_DOUBLE_EQ(c.tolerances.at("o"), 5e-3);
    EXPECT_DOUBLE_EQ(c.tolerances.at("dq"), 1.0);
}

// [tolerances.bf16] holds for the bf16 cases alone, over the file's [tolerances]
TEST(ScenarioLoad, TolerancesPerInputDtype) {
    const auto cases = load(good_path("tolerance_per_dtype.toml"));
    ASSERT_EQ(cases.size(), 2u);
    for (const Case& c : cases) {
        const bool bf16 = c.input_dtype == DType::bf16;
        EXPECT_EQ(c.tolerances.size(), bf16 ? 3u : 2u) << c.id;
        EXPECT_DOUBLE_EQ(c.tolerances.at("o"), bf16 ? 6e-3 : 5e-3) << c.id;
        EXPECT_DOUBLE_EQ(c.tolerances.at("dq"), 1e-2) << c.id;
        if (bf16) {
            EXPECT_DOUBLE_EQ(c.tolerances.at("ht"), 7e-3);
        }
    }
}

TEST(ScenarioLoad, MatrixExpandsInDeclarationOrder) {
    const auto cases = load(good_path("matrix.toml"));
    std::vector<std::string> ids;
    for (const Case& c : cases) ids.push_back(c.id);
    // the first key written varies slowest, whatever order toml++ keeps its keys in
    const std::vector<std::string> expected = {
        "grid[dtypes.inputs=fp32,layout=head_first,shape.T=64]",
        "grid[dtypes.inputs=fp32,layout=head_first,shape.T=100]",
        "grid[dtypes.inputs=fp32,layout=head_last,shape.T=64]",
        "grid[dtypes.inputs=fp32,layout=head_last,shape.T=100]",
        "grid[dtypes.inputs=bf16,layout=head_first,shape.T=64]",
        "grid[dtypes.inputs=bf16,layout=head_first,shape.T=100]",
        "grid[dtypes.inputs=bf16,layout=head_last,shape.T=64]",
        "grid[dtypes.inputs=bf16,layout=head_last,shape.T=100]",
    };
    EXPECT_EQ(ids, expected);
    ASSERT_EQ(cases.size(), 8u);

    const Case& c = cases[5];
    const std::vector<std::pair<std::string, std::string>> matrix = {
        {"dtypes.inputs", "bf16"}, {"layout", "head_first"}, {"shape.T", "100"}};
    EXPECT_EQ(c.matrix, matrix);
    EXPECT_EQ(c.name, "grid");
    EXPECT_EQ(c.input_dtype, DType::bf16);
    // the output dtype follows the inputs of each case
    EXPECT_EQ(c.output_dtype, DType::bf16);
    EXPECT_EQ(cases[0].output_dtype, DType::fp32);
    EXPECT_EQ(c.layout, Layout::head_first);
    EXPECT_EQ(c.T, 100);
    EXPECT_EQ(c.B, 1);
    EXPECT_EQ(c.K, 16);
}

TEST(ScenarioLoad, MatrixValuesReadAsWritten) {
    const auto cases = load(good_path("varlen_matrix.toml"));
    ASSERT_EQ(cases.size(), 4u);
    EXPECT_EQ(cases[0].id, "varlen[cu_seqlens=[0,64],scale=0.5,options.gate=none]");
    EXPECT_EQ(cases[3].id, "varlen[cu_seqlens=[0,0,30,64],scale=0.001,options.gate=none]");
    EXPECT_EQ(cases[3].cu_seqlens, (std::vector<int64_t>{0, 0, 30, 64}));
    EXPECT_DOUBLE_EQ(cases[3].scale.value_or(0), 1e-3);
    EXPECT_EQ(cases[3].options.at("gate"), "none");
    EXPECT_EQ(cases[0].cu_seqlens, (std::vector<int64_t>{0, 64}));
}

TEST(ScenarioLoad, ValueHeadsAndBooleanOptionsVaryInMatrix) {
    Catalog catalog = test_catalog();
    std::vector<Case> checked;
    catalog[1].check = [&checked](const Case& c) {
        checked.push_back(c);
        return std::vector<FamilyIssue>{};
    };
    const auto cases = load_file(good_path("gva_matrix.toml"), catalog, LoadOptions{});
    std::vector<std::string> ids;
    for (const Case& c : cases) ids.push_back(c.id);
    const std::vector<std::string> expected = {
        "gva[shape.HV=2,options.use_qk_l2norm_in_kernel=false]",
        "gva[shape.HV=2,options.use_qk_l2norm_in_kernel=true]",
        "gva[shape.HV=4,options.use_qk_l2norm_in_kernel=false]",
        "gva[shape.HV=4,options.use_qk_l2norm_in_kernel=true]",
    };
    EXPECT_EQ(ids, expected);
    ASSERT_EQ(cases.size(), 4u);

    const std::vector<std::pair<std::string, std::string>> matrix = {
        {"shape.HV", "4"}, {"options.use_qk_l2norm_in_kernel", "false"}};
    EXPECT_EQ(cases[2].matrix, matrix);
    EXPECT_EQ(cases[0].HV, 2);
    EXPECT_EQ(cases[3].HV, 4);
    EXPECT_EQ(cases[3].H, 2);
    EXPECT_EQ(cases[2].options, (std::map<std::string, std::string>{
                                    {"gva", "true"}, {"use_qk_l2norm_in_kernel", "false"}}));
    EXPECT_EQ(cases[3].options.at("use_qk_l2norm_in_kernel"), "true");

    // the family's rules see each case once, fully loaded
    ASSERT_EQ(checked.size(), cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
        EXPECT_EQ(checked[i].id, cases[i].id);
        EXPECT_EQ(checked[i].HV, cases[i].HV);
        EXPECT_EQ(checked[i].options, cases[i].options);
    }
}

TEST(ScenarioLoad, BooleanOptionTakesBareAndQuotedValues) {
    TempDir dir("lav_boolean_option");
    const std::string head =
        "name = \"b\"\ndescription = \"d\"\nfamily = \"gated_delta\"\n"
        "[shape]\nB = 1\nT = 64\nH = 2\nK = 16\nV = 16\n[options]\n";
    const auto bare = load(dir.write("bare.toml", head + "gva = true\n"));
    const auto quoted = load(dir.write("quoted.toml", head + "gva = \"true\"\n"));
    const auto unset = load(dir.write("unset.toml", head));
    ASSERT_EQ(bare.size(), 1u);
    ASSERT_EQ(quoted.size(), 1u);
    ASSERT_EQ(unset.size(), 1u);
    // each option takes the first value its family lists when left out
    const std::map<std::string, std::string> on = {{"gva", "true"},
                                                   {"use_qk_l2norm_in_kernel", "true"}};
    EXPECT_EQ(bare[0].options, on);
    EXPECT_EQ(quoted[0].options, on);
    EXPECT_EQ(unset[0].options, (std::map<std::string, std::string>{
                                    {"gva", "false"}, {"use_qk_l2norm_in_kernel", "true"}}));
}

TEST(ScenarioLoad, ReadmeExampleIsValid) {
    std::ifstream in(std::string(LAV_SOURCE_DIR) + "/scenarios/README.md");
    std::stringstream readme;
    readme << in.rdbuf();
    const std::string text = readme.str();
    const std::string fence = "```toml\n";
    const auto begin = text.find(fence);
    ASSERT_NE(begin, std::string::npos) << "scenarios/README.md has no ```toml example";
    const auto end = text.find("```", begin + fence.size());
    ASSERT_NE(end, std::string::npos);

    TempDir dir("lav_readme_example");
    const std::string path =
        dir.write("example.toml", text.substr(begin + fence.size(), end - begin - fence.size()));
    const auto cases = load(path);
    ASSERT_EQ(cases.size(), 4u);
    EXPECT_EQ(cases[1].id, "simple_gla_bf16[layout=head_first,dtypes.state=bf16]");
    EXPECT_EQ(cases[1].state_dtype, DType::bf16);
    EXPECT_EQ(cases[1].cu_seqlens, (std::vector<int64_t>{0, 100, 100, 1024}));
}

const char* kGsaHeader = R"(name = "two_states"
description = "gsa with a dtype per state"
family = "gsa"
[shape]
B = 1
T = 64
H = 2
K = 16
V = 16
)";

TEST(ScenarioLoad, StateTableGivesEachComponentItsDtype) {
    TempDir dir("lav_state_table");
    const auto cases = load(dir.write("s.toml", std::string(kGsaHeader) + R"(
[dtypes]
state = { hv = "bf16" }
)"));
    ASSERT_EQ(cases.size(), 1u);
    EXPECT_EQ(cases[0].id, "two_states");
    // hk takes the default; the least precise of the two bounds the case
    EXPECT_EQ(cases[0].state_dtypes,
              (std::map<std::string, DType>{{"hk", DType::fp32}, {"hv", DType::bf16}}));
    EXPECT_EQ(cases[0].state_dtype, DType::bf16);
    EXPECT_FALSE(cases[0].cotangent_dtype.has_value());
}

TEST(ScenarioLoad, StateComponentsVaryInMatrixWithReadableIds) {
    TempDir dir("lav_state_matrix");
    const auto cases = load(dir.write("s.toml", std::string(kGsaHeader) + R"(
[dtypes]
state = { hk = "fp16" }
[matrix]
"dtypes.state.hv" = ["fp16", "fp32"]
)"));
    ASSERT_EQ(cases.size(), 2u);
    EXPECT_EQ(cases[0].id, "two_states[dtypes.state.hv=fp16]");
    // one dtype for both is the plain case
    EXPECT_TRUE(cases[0].state_dtypes.empty());
    EXPECT_EQ(cases[0].state_dtype, DType::fp16);
    EXPECT_EQ(cases[1].id, "two_states[dtypes.state.hv=fp32]");
    EXPECT_EQ(cases[1].state_dtypes,
              (std::map<std::string, DType>{{"hk", DType::fp16}, {"hv", DType::fp32}}));
    EXPECT_EQ(cases[1].state_dtype, DType::fp16);
}

TEST(ScenarioLoad, StateTablesAreMatrixAlternatives) {
    TempDir dir("lav_state_alternatives");
    const auto cases = load(dir.write("s.toml", std::string(kGsaHeader) + R"(
[matrix]
"dtypes.state" = ["bf16", { hk = "fp32", hv = "bf16" }]
)"));
    ASSERT_EQ(cases.size(), 2u);
    EXPECT_EQ(cases[0].id, "two_states[dtypes.state=bf16]");
    EXPECT_TRUE(cases[0].state_dtypes.empty());
    EXPECT_EQ(cases[0].state_dtype, DType::bf16);
    EXPECT_EQ(cases[1].id, "two_states[dtypes.state={hk=fp32,hv=bf16}]");
    EXPECT_EQ(cases[1].state_dtypes,
              (std::map<std::string, DType>{{"hk", DType::fp32}, {"hv", DType::bf16}}));
}

TEST(ScenarioLoad, CotangentDtypeIsSetAndVaried) {
    TempDir dir("lav_cotangents");
    const auto set = load(dir.write("set.toml", std::string(kGsaHeader) + R"(
[dtypes]
cotangents = "fp32"
)"));
    ASSERT_EQ(set.size(), 1u);
    EXPECT_EQ(set[0].cotangent_dtype, DType::fp32);
    const auto varied = load(dir.write("varied.toml", std::string(kGsaHeader) + R"(
[matrix]
"dtypes.cotangents" = ["bf16", "fp16"]
)"));
    ASSERT_EQ(varied.size(), 2u);
    EXPECT_EQ(varied[0].id, "two_states[dtypes.cotangents=bf16]");
    EXPECT_EQ(varied[0].cotangent_dtype, DType::bf16);
    EXPECT_EQ(varied[1].cotangent_dtype, DType::fp16);
}

TEST(ScenarioFiles, DirectoriesAreSearchedRecursivelyForToml) {
    TempDir dir("lav_collect_files");
    const std::string b = dir.write("b.toml", "");
    const std::string a = dir.write("sub/a.toml", "");
    const std::string c = dir.write("c.toml", "");
    dir.write("notes.txt", "");
    dir.write("sub/deeper/readme.md", "");
    const std::string d = dir.write("sub/deeper/d.toml", "");
    const auto files = collect_files({dir.path().string()});
    EXPECT_EQ(files, (std::vector<std::string>{b, c, a, d}));
}

TEST(ScenarioFiles, FilesAreTakenAsGivenInOrderOnce) {
    TempDir dir("lav_collect_given");
    const std::string txt = dir.write("scenario.txt", "");
    const std::string toml = dir.write("x/y.toml", "");
    const auto files = collect_files({txt, (dir.path() / "x").string(), txt, toml});
    EXPECT_EQ(files, (std::vector<std::string>{txt, toml}));
}

TEST(ScenarioFiles, MissingPathIsAUsageError) {
    const std::string missing = good_path("no_such_dir");
    try {
        collect_files({good_path("minimal.toml"), missing});
        FAIL() << "no error for a missing path";
    } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()), "no such file or directory: " + missing);
    }
}

TEST(ScenarioMemory, EstimateFollowsTheDocumentedFormula) {
    Case c;
    c.B = 2;
    c.T = 100;
    c.H = 3;
    c.K = 8;
    c.V = 4;
    c.chunk_size = 16;
    // tokens 200 · H 3 · (2K + V = 20) · 8 B · 6 copies = 576000;
    // N 2 · H·K·V 96 · 8 B · (⌈100/16⌉ 7 + 2·√100 20 + 4 = 31) = 47616
    EXPECT_EQ(estimate_case_bytes(c), 576000u + 47616u);
    // varlen: one row of 100 tokens holding 2 sequences
    c.B = 1;
    c.cu_seqlens = {0, 50, 100};
    EXPECT_EQ(estimate_case_bytes(c), 288000u + 47616u);
}

TEST(ScenarioMemory, ValueHeadsScaleValuesAndStates) {
    Case c;
    c.B = 2;
    c.T = 100;
    c.H = 3;
    c.HV = 6;
    c.K = 8;
    c.V = 4;
    c.chunk_size = 16;
    // tokens 200 · (2·H·K 48 + HV·V 24 = 72) · 8 B · 6 copies = 691200;
    // N 2 · HV·K·V 192 · 8 B · 31 = 95232
    EXPECT_EQ(estimate_case_bytes(c), 691200u + 95232u);
    // HV = H gives what a case without grouped value heads needs
    c.HV = 3;
    const uint64_t grouped_as_heads = estimate_case_bytes(c);
    c.HV = 0;
    EXPECT_EQ(estimate_case_bytes(c), grouped_as_heads);
    EXPECT_EQ(grouped_as_heads, 576000u + 47616u);
}

TEST(ScenarioMemory, HugeShapesSaturate) {
    Case c;
    c.B = int64_t{1} << 40;
    c.T = int64_t{1} << 40;
    c.H = 1024;
    c.K = 1024;
    c.V = 1024;
    EXPECT_EQ(estimate_case_bytes(c), std::numeric_limits<uint64_t>::max());
}

}  // namespace
}  // namespace lav::scenario
