// tests/cli/shard_test.cpp — lav run --shard K/N and lav merge: three shards merged equal the
// whole run record by record (rel_rmse bitwise), every case lands in one shard whatever the
// order of the files, and merge refuses what is not the N shards of one run.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/lav_command.h"
#include "report/report.h"

namespace lav {
namespace {

using test::lav;
using test::Result;
using test::scratch;

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A small folder of three scenario files of unequal sizes: 10 cases across three families.
const std::string& scenario_dir() {
    static const std::string dir = [] {
        const std::string d = scratch("shard_scenarios");
        std::filesystem::create_directories(d);
        write(d + "/a_simple_gla.toml",
              "name = \"shard_simple_gla\"\ndescription = \"d\"\nfamily = \"simple_gla\"\n"
              "passes = [\"fwd\", \"bwd\"]\n"
              "[shape]\nB = 1\nT = 96\nH = 2\nK = 16\nV = 16\n"
              "[inputs]\ng = { dist = \"logsigmoid\" }\n"
              "[matrix]\nlayout = [\"head_first\", \"head_last\"]\n"
              "\"dtypes.inputs\" = [\"bf16\", \"fp32\"]\n");
        write(d + "/b_gla.toml",
              "name = \"shard_gla\"\ndescription = \"d\"\nfamily = \"gla\"\n"
              "cu_seqlens = [0, 0, 40, 130]\n"
              "[shape]\nB = 1\nT = 130\nH = 2\nK = 32\nV = 16\n"
              "[matrix]\nlayout = [\"head_first\", \"head_last\"]\n");
        write(d + "/c_hgrn.toml",
              "name = \"shard_hgrn\"\ndescription = \"d\"\nfamily = \"hgrn\"\n"
              "[shape]\nB = 2\nT = 64\nH = 1\nK = 8\nV = 8\n"
              "[matrix]\nseed = [1, 2, 3, 4]\n");
        return d;
    }();
    return dir;
}

std::string run_shard(const std::string& k) {
    const std::string out = scratch("shard_" + k + ".h5");
    const Result r =
        lav("run " + scenario_dir() + " -q --threads 2 --shard " + k + "/3 --out " + out);
    EXPECT_EQ(r.code, 0) << r.output;
    return out;
}

// shards 1..3 of the folder, run once for every test
const std::vector<std::string>& shards() {
    static const std::vector<std::string> paths = {run_shard("1"), run_shard("2"), run_shard("3")};
    return paths;
}

uint64_t bits(double x) {
    uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
}

TEST(Shard, MergedEqualsTheWholeRunRecordByRecord) {
    const std::string whole = scratch("whole.h5");
    const Result run = lav("run " + scenario_dir() + " -q --threads 2 --out " + whole);
    ASSERT_EQ(run.code, 0) << run.output;
    const std::string merged = scratch("merged.h5");
    const Result merge = lav("merge " + shards()[2] + " " + shards()[0] + " " + shards()[1] +
                             " --out " + merged + " --junit " + scratch("merged.xml"));
    ASSERT_EQ(merge.code, 0) << merge.output;
    EXPECT_TRUE(has(merge.output, "merged 3 shards")) << merge.output;

    const report::Report a = report::read_report(whole);
    const report::Report b = report::read_report(merged);
    EXPECT_TRUE(b.complete);
    EXPECT_EQ(b.run.shard, "");
    EXPECT_EQ(b.run.selection, a.run.selection);
    ASSERT_EQ(a.cases.size(), b.cases.size());
    std::map<std::string, const report::CaseRecord*> by_id;
    for (const auto& r : b.cases) by_id[r.id] = &r;
    ASSERT_EQ(by_id.size(), b.cases.size()) << "a record twice in the merge";
    for (const auto& r : a.cases) {
        ASSERT_TRUE(by_id.count(r.id)) << r.id << " is not in the merge";
        const report::CaseRecord& m = *by_id.at(r.id);
        EXPECT_EQ(m.verdict, r.verdict) << r.id;
        ASSERT_EQ(m.metrics.size(), r.metrics.size()) << r.id;
        ASSERT_FALSE(r.metrics.empty()) << r.id;
        for (size_t i = 0; i < r.metrics.size(); ++i) {
            EXPECT_EQ(m.metrics[i].tensor, r.metrics[i].tensor) << r.id;
            EXPECT_EQ(bits(m.metrics[i].rel_rmse), bits(r.metrics[i].rel_rmse))
                << r.id << " " << r.metrics[i].tensor;
        }
    }
    EXPECT_TRUE(std::filesystem::exists(scratch("merged.xml")));
}

TEST(Shard, EveryCaseInOneShardWhateverTheFileOrder) {
    std::map<std::string, int> shard_of;  // case id -> K
    size_t records = 0;
    for (int k = 1; k <= 3; ++k) {
        const report::Report r = report::read_report(shards()[k - 1]);
        EXPECT_EQ(r.run.shard, std::to_string(k) + "/3");
        records += r.cases.size();
        for (const auto& c : r.cases) {
            const std::string case_id = c.id.substr(0, c.id.find("]/") + 1);
            const auto [it, fresh] = shard_of.emplace(case_id, k);
            EXPECT_TRUE(fresh || it->second == k)
                << case_id << " in shards " << it->second << " and " << k;
        }
        EXPECT_FALSE(r.cases.empty()) << "shard " << k << " got nothing to run";
    }
    EXPECT_EQ(shard_of.size(), 10u);
    // the same partition when the files come in another order
    const std::string d = scenario_dir();
    const std::string out = scratch("reordered.h5");
    const Result r = lav("run " + d + "/c_hgrn.toml " + d + "/b_gla.toml " + d +
                         "/a_simple_gla.toml -q --threads 2 --shard 2/3 --out " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    std::set<std::string> want, got;
    for (const auto& c : report::read_report(shards()[1]).cases) want.insert(c.id);
    for (const auto& c : report::read_report(out).cases) got.insert(c.id);
    EXPECT_EQ(got, want);
}

// --shard-by family: each family's cases in one shard (a provider compiles its kernels once);
// the shards merge into the whole selection, and not with shards split by case.
TEST(Shard, ByFamilyKeepsEachFamilyInOneShard) {
    std::map<std::string, std::set<int>> shards_of;  // family -> the shards that ran it
    std::vector<std::string> paths;
    size_t cases = 0;
    for (int k = 1; k <= 2; ++k) {
        paths.push_back(scratch("family_" + std::to_string(k) + ".h5"));
        const Result r = lav("run " + scenario_dir() + " -q --threads 2 --shard " +
                             std::to_string(k) + "/2 --shard-by family --out " + paths.back());
        ASSERT_EQ(r.code, 0) << r.output;
        const report::Report rep = report::read_report(paths.back());
        EXPECT_FALSE(rep.cases.empty()) << "shard " << k << " got nothing to run";
        std::set<std::string> ids;
        for (const auto& c : rep.cases) {
            shards_of[c.family].insert(k);
            ids.insert(c.id.substr(0, c.id.find("]/") + 1));
        }
        cases += ids.size();
    }
    EXPECT_EQ(cases, 10u);
    ASSERT_EQ(shards_of.size(), 3u);
    for (const auto& [family, ks] : shards_of) EXPECT_EQ(ks.size(), 1u) << family;

    const Result merge =
        lav("merge " + paths[0] + " " + paths[1] + " --out " + scratch("family_merged.h5"));
    EXPECT_EQ(merge.code, 0) << merge.output;
    const std::string by_case = scratch("case_2.h5");
    ASSERT_EQ(lav("run " + scenario_dir() + " -q --threads 2 --shard 2/2 --out " + by_case).code,
              0);
    const Result mixed = lav("merge " + paths[0] + " " + by_case + " --out " + scratch("m.h5"));
    EXPECT_EQ(mixed.code, 2) << mixed.output;
    EXPECT_TRUE(has(mixed.output, "another selection")) << mixed.output;

    const Result bad =
        lav("run " + scenario_dir() + " --shard 1/2 --shard-by file --out " + scratch("never.h5"));
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_TRUE(has(bad.output, "--shard-by takes case, family, scenario or dtypes, got 'file'"))
        << bad.output;
}

// simple_gla's four cases are two dtype groups (bf16, fp32 inputs) of two layouts each
TEST(Shard, ByDtypesKeepsAScenariosCasesOfOneDtypeTogether) {
    std::map<std::string, std::set<int>> shards_of;  // scenario and input dtype -> its shards
    std::set<std::string> ids;
    std::vector<std::string> paths;
    for (int k = 1; k <= 3; ++k) {
        paths.push_back(scratch("dtypes_" + std::to_string(k) + ".h5"));
        const Result r = lav("run " + scenario_dir() + " -q --threads 2 --shard " +
                             std::to_string(k) + "/3 --shard-by dtypes --out " + paths.back());
        ASSERT_EQ(r.code, 0) << r.output;
        for (const auto& c : report::read_report(paths.back()).cases) {
            const std::string input =
                c.id.find("dtypes.inputs=fp32") != std::string::npos ? "fp32" : "bf16";
            shards_of[c.family + " " + input].insert(k);
            ids.insert(c.id.substr(0, c.id.find("]/") + 1));
        }
    }
    EXPECT_EQ(ids.size(), 10u);
    ASSERT_EQ(shards_of.size(), 4u);  // simple_gla bf16 and fp32, gla, hgrn
    for (const auto& [group, ks] : shards_of) EXPECT_EQ(ks.size(), 1u) << group;
    // unlike --shard-by family, simple_gla's two dtype groups (its costliest) go to two shards
    EXPECT_NE(*shards_of["simple_gla bf16"].begin(), *shards_of["simple_gla fp32"].begin());
    const Result merge = lav("merge " + paths[0] + " " + paths[1] + " " + paths[2] + " --out " +
                             scratch("dtypes_merged.h5"));
    EXPECT_EQ(merge.code, 0) << merge.output;
}

TEST(Shard, StrictKOverN) {
    for (const char* bad : {"0/3", "4/3", "1/0", "a/3", "1/3x", "13", "1/", "-1/3", "1 /3"}) {
        const Result r =
            lav("run " + scenario_dir() + " --shard '" + bad + "' --out " + scratch("never.h5"));
        EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
        EXPECT_TRUE(has(r.output, "bad --shard")) << bad << ": " << r.output;
    }
}

TEST(Merge, RefusesAMissingShardNamingIt) {
    const Result r = lav("merge " + shards()[0] + " " + shards()[2] + " --out " + scratch("m.h5"));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "shard 2/3 missing")) << r.output;
}

TEST(Merge, RefusesAShardTwice) {
    const Result r = lav("merge " + shards()[0] + " " + shards()[1] + " " + shards()[1] + " " +
                         shards()[2] + " --out " + scratch("m.h5"));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "shard 2/3 again")) << r.output;
}

TEST(Merge, RefusesOverlappingRecords) {
    // a copy of shard 2 that claims to be shard 3: its records are shard 2's
    report::Report r = report::read_report(shards()[1]);
    r.run.shard = "3/3";
    const std::string forged = scratch("forged.h5");
    report::write_report(forged, r);
    const Result m = lav("merge " + shards()[0] + " " + shards()[1] + " " + forged + " --out " +
                         scratch("m.h5"));
    EXPECT_EQ(m.code, 2) << m.output;
    EXPECT_TRUE(has(m.output, "is also in")) << m.output;
}

TEST(Merge, RefusesAnotherSelectionOrShardCount) {
    const std::string filtered = scratch("filtered.h5");
    ASSERT_EQ(lav("run " + scenario_dir() + " -q --threads 2 --filter /fwd$ --shard 3/3 --out " +
                  filtered)
                  .code,
              0);
    Result r = lav("merge " + shards()[0] + " " + shards()[1] + " " + filtered + " --out " +
                   scratch("m.h5"));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "another selection")) << r.output;

    const std::string halves = scratch("half.h5");
    ASSERT_EQ(lav("run " + scenario_dir() + " -q --threads 2 --shard 2/2 --out " + halves).code, 0);
    r = lav("merge " + shards()[0] + " " + halves + " --out " + scratch("m.h5"));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "split in 2")) << r.output;
}

TEST(Merge, RefusesAnotherLavAnIncompleteShardAndAWholeRun) {
    report::Report other = report::read_report(shards()[2]);
    other.run.git_commit = "0123456789ab";
    const std::string built_elsewhere = scratch("elsewhere.h5");
    report::write_report(built_elsewhere, other);
    Result r = lav("merge " + shards()[0] + " " + shards()[1] + " " + built_elsewhere + " --out " +
                   scratch("m.h5"));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "same lav build")) << r.output;

    report::Report unfinished = report::read_report(shards()[2]);
    unfinished.complete = false;
    const std::string stopped = scratch("stopped.h5");
    report::write_report(stopped, unfinished);
    r = lav("merge " + shards()[0] + " " + shards()[1] + " " + stopped + " --out " +
            scratch("m.h5"));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "did not finish")) << r.output;
    EXPECT_TRUE(has(r.output, "--resume")) << r.output;

    report::Report whole = report::read_report(shards()[0]);
    whole.run.shard.clear();
    const std::string not_shard = scratch("not_shard.h5");
    report::write_report(not_shard, whole);
    r = lav("merge " + not_shard + " --out " + scratch("m.h5"));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "not a shard's report")) << r.output;
}

TEST(Merge, Help) {
    const Result r = lav("merge --help");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "usage: lav merge")) << r.output;
    EXPECT_TRUE(has(r.output, "--out")) << r.output;
    const Result none = lav("merge");
    EXPECT_EQ(none.code, 2) << none.output;
}

}  // namespace
}  // namespace lav
