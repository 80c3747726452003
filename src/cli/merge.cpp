// src/cli/merge.cpp — `lav merge`: joins the reports of a run's N shards (lav run --shard K/N)
// into the report the run would have written whole.
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "cli/commands.h"
#include "cli/shard.h"
#include "core/error.h"
#include "report/console.h"
#include "report/junit.h"
#include "report/output.h"
#include "report/report.h"

namespace lav::cli {
namespace {

struct ShardReport {
    std::string path;
    Shard shard;
    report::Report report;
};

// The shard a report says it is; refuses a whole run's report and one that did not finish.
ShardReport read_shard(const std::string& path) {
    ShardReport s{path, {}, read_report_file(path)};
    const report::RunInfo& run = s.report.run;
    LAV_CHECK_AS(UsageError, !run.shard.empty(), path,
                 ": error: not a shard's report (no shard attribute: a whole run",
                 run.selection.empty() ? ", or written by a lav without shards" : "",
                 ")\nnote: lav merge joins the reports of lav run --shard K/N");
    try {
        s.shard = parse_shard(run.shard);
    } catch (const UsageError&) {
        throw UsageError(path + ": error: its shard attribute '" + run.shard +
                         "' is not K/N\nnote: was the report written by lav run --shard?");
    }
    LAV_CHECK_AS(UsageError, s.report.complete, path, ": error: shard ", run.shard,
                 " did not finish (the report is marked incomplete)\nnote: finish it with the "
                 "same lav run command plus --resume ",
                 path, ", then merge");
    return s;
}

// Refuses shards that are not the N parts of one run, each once, with no record twice.
void check_shards(const std::vector<ShardReport>& shards) {
    const ShardReport& first = shards.front();
    const report::RunInfo& one = first.report.run;
    std::map<int, std::string> seen;           // K -> the file that is shard K
    std::map<std::string, std::string> owner;  // record id -> the file that holds it
    size_t records = 0;
    for (const ShardReport& s : shards) {
        const report::RunInfo& run = s.report.run;
        const std::string versus = " than " + first.path + " (";
        LAV_CHECK_AS(UsageError,
                     run.lav_version == one.lav_version && run.git_commit == one.git_commit, s.path,
                     ": error: written by lav ", run.lav_version, " (", run.git_commit, "), ",
                     first.path, " by lav ", one.lav_version, " (", one.git_commit,
                     ")\nnote: run every shard with the same lav build");
        LAV_CHECK_AS(UsageError, s.shard.count == first.shard.count, s.path, ": error: shard ",
                     run.shard, " of a run split in ", s.shard.count, ", other", versus, one.shard,
                     ")\nnote: give the shards of one run");
        LAV_CHECK_AS(UsageError, run.selection == one.selection, s.path,
                     ": error: a shard of another selection", versus, one.selection, ", here ",
                     run.selection,
                     ")\nnote: the shards of one run share its scenario files, filters and "
                     "record-changing options");
        const auto [it, fresh] = seen.emplace(s.shard.index, s.path);
        LAV_CHECK_AS(UsageError, fresh, s.path, ": error: shard ", run.shard, " again (",
                     it->second, " is shard ", run.shard, " too)\nnote: give each shard once");
        for (const report::CaseRecord& r : s.report.cases) {
            const auto [at, mine] = owner.emplace(r.id, s.path);
            LAV_CHECK_AS(UsageError, mine, s.path, ": error: record ", r.id, " is also in ",
                         at->second, "\nnote: shards of one run never overlap; give each once");
        }
        records += s.report.cases.size();
    }
    std::string missing;
    for (int k = 1; k <= first.shard.count; ++k)
        if (!seen.count(k))
            missing += (missing.empty() ? "" : ", ") + std::to_string(k) + "/" +
                       std::to_string(first.shard.count);
    LAV_CHECK_AS(UsageError, missing.empty(), "lav merge: error: shard",
                 missing.find(',') == std::string::npos ? " " : "s ", missing,
                 " missing: the run is split in ", first.shard.count, " and ", shards.size(),
                 shards.size() == 1 ? " was" : " were",
                 " given\nnote: give the report of every shard");
    const std::string whole = std::to_string(records) + " records ";
    LAV_CHECK_AS(UsageError, one.selection.rfind(whole, 0) == 0,
                 "lav merge: error: the shards hold ", report::plural(records, "record"),
                 ", their selection has ", one.selection.substr(0, one.selection.find(" records")),
                 "\nnote: a shard's report lacks records: run that shard again");
}

}  // namespace

int cmd_merge(const std::vector<std::string>& args, const std::string& command_line) {
    po::options_description options("lav merge options");
    std::vector<std::string> files;
    std::string out;
    std::string junit;
    options.add_options()("files", po::value(&files)->value_name("SHARD.h5"),
                          "the reports of lav run --shard K/N, for every K")(
        "out,o", po::value(&out)->value_name("F"), "the merged report to write (required)")(
        "junit", po::value(&junit)->value_name("F"),
        "also write the merged results as JUnit XML to this file");
    po::positional_options_description positional;
    positional.add("files", -1);
    po::variables_map vm;
    const std::string usage = usage_line("merge", options, positional);
    if (!parse_args(args, options, positional, usage, vm)) return 0;
    LAV_CHECK_AS(UsageError, !files.empty(), "lav merge needs the shards' reports\n", usage);
    LAV_CHECK_AS(UsageError, !out.empty(), "lav merge needs --out F, the report to write\n", usage);
    for (const auto& f : files)
        LAV_CHECK_AS(UsageError, f != out, "--out ", out,
                     " is one of the shards; write the merge to a new file");

    std::vector<ShardReport> shards;
    for (const auto& f : files) shards.push_back(read_shard(f));
    check_shards(shards);
    std::sort(shards.begin(), shards.end(), [](const ShardReport& a, const ShardReport& b) {
        return a.shard.index < b.shard.index;
    });

    // shard 1's run attributes (build, machine, scenario files) stand for the run's; the merge
    // is a whole run that started when its first shard did
    report::RunInfo info = shards.front().report.run;
    info.shard.clear();
    info.command_line = command_line;
    for (const ShardReport& s : shards)
        info.started_at = std::min(info.started_at, s.report.run.started_at);
    const report::OutputLock lock(out);
    report::ReportWriter writer(out, std::move(info));
    writer.publish_every(1e9);  // one file in place, at the end
    for (ShardReport& s : shards)
        for (report::CaseRecord& r : s.report.cases) writer.add(std::move(r));
    writer.finish();
    if (!junit.empty()) report::write_junit_run(junit, writer.report());
    std::cout << "merged " << report::plural(shards.size(), "shard") << " into " << out << ": "
              << report::totals_line(writer.report()) << "\n";
    return 0;
}

}  // namespace lav::cli
