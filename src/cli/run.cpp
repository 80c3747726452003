// src/cli/run.cpp — `lav run`: runs scenario cases, writes the report case by case, prints a
// summary.
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/isolate.h"
#include "cli/progress.h"
#include "cli/select.h"
#include "cli/shard.h"
#include "cli/stored_scenarios.h"
#include "core/build_info.h"
#include "core/dtype.h"
#include "core/error.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "providers/op_library.h"
#include "providers/provider.h"
#include "providers/python.h"
#include "report/console.h"
#include "report/intermediates.h"
#include "report/junit.h"
#include "report/output.h"
#include "report/report.h"

namespace lav::cli {
namespace {

// the report on disk is brought up to date at most this often: a run of thousands of tiny cases
// spends its time on them rather than on HDF5, and a killed run loses at most this much
constexpr double kPublishEverySeconds = 0.5;

// progress lines start once a run has taken this long, so short runs stay quiet (--verbose
// shows them from the first record)
constexpr double kProgressAfterSeconds = 2.0;

// more threads than this only make LibTorch's pool slower to start (100000 never finishes)
int max_threads() {
    const unsigned hardware = std::thread::hardware_concurrency();
    return hardware > 0 ? 4 * static_cast<int>(hardware) : 1024;
}

std::string cpu_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) return line.substr(colon + 2);
        }
    }
    return "unknown CPU";
}

std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return buf;
}

report::RunInfo run_info(const std::string& command_line, uint64_t seed,
                         const std::vector<std::string>& providers, const DeviceProbe& probe) {
    report::RunInfo info;
    info.lav_version = kLavVersion;
    info.git_commit = kGitCommit;
    info.torch_version = kTorchVersion;
    info.hdf5_version = kHdf5Version;
    info.device = "cpu: " + cpu_name() + " (" + std::to_string(at::get_num_threads()) + " threads)";
    info.command_line = command_line;
    info.started_at = utc_now();
    info.seed = seed;
    for (const auto& p : providers) info.providers += (info.providers.empty() ? "" : "; ") + p;
    if (probe) {
        const std::map<std::string, std::string> gpu = probe();
        for (auto [name, field] : {std::pair{"gpu", &info.gpu},
                                   {"compute_capability", &info.compute_capability},
                                   {"cuda_driver", &info.cuda_driver},
                                   {"cuda_runtime", &info.cuda_runtime}})
            if (const auto it = gpu.find(name); it != gpu.end()) *field = it->second;
    }
    return info;
}

// "cpu,fla" -> {"cpu", "fla"}; a repeated name counts once
std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ','))
        if (!item.empty() && std::find(out.begin(), out.end(), item) == out.end())
            out.push_back(item);
    return out;
}

// --fail-on's kinds, each checked against the kinds a finding can have
std::set<std::string> parse_fail_on(const std::string& text) {
    std::set<std::string> kinds;
    if (text.empty()) return kinds;
    const std::vector<std::string>& known = report::finding_kinds();
    for (const auto& kind : split_list(text)) {
        if (std::find(known.begin(), known.end(), kind) == known.end()) {
            std::string names;
            for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
            throw UsageError("--fail-on takes finding kinds (" + names + "), got '" + kind + "'");
        }
        kinds.insert(kind);
    }
    return kinds;
}

// The records a case will have, blank: what an isolated case that dies reports as errors.
std::vector<report::CaseRecord> expected_records(const scenario::Case& c,
                                                 const std::vector<PlannedRecord>& planned) {
    std::vector<report::CaseRecord> out;
    for (const auto& r : planned)
        out.push_back(harness::blank_record(c, r.variant, r.backend, r.pass));
    return out;
}

// The options an isolated case's child runs with: this run's, less where its cases come from
// and where its report goes.
Isolation isolation_of(const po::variables_map& vm, const std::string& backend,
                       const std::string& reference_device, const std::string& max_memory,
                       int threads, const std::string& fail_on,
                       const std::vector<std::string>& libraries,
                       const std::vector<std::string>& providers, const std::string& dump_dir) {
    Isolation iso;
    std::vector<std::string>& o = iso.options;
    o = {"--backend", backend, "--reference-device", reference_device};
    if (!max_memory.empty()) o.insert(o.end(), {"--max-memory", max_memory});
    if (vm.count("threads")) o.insert(o.end(), {"--threads", std::to_string(threads)});
    if (!fail_on.empty()) o.insert(o.end(), {"--fail-on", fail_on});
    if (!dump_dir.empty()) o.insert(o.end(), {"--dump-intermediates", dump_dir});
    // the child makes the records of its case that this run makes
    for (const char* option : {"filter", "rerun-failed"})
        if (vm.count(option))
            o.insert(o.end(), {std::string("--") + option, vm[option].as<std::string>()});
    for (const char* flag : {"long", "strict-boundary", "decompose", "equivalence"})
        if (vm[flag].as<bool>()) o.push_back(std::string("--") + flag);
    for (const auto& l : libraries) o.insert(o.end(), {"--load-library", l});
    for (const auto& p : providers) o.insert(o.end(), {"--provider", p});
    iso.scratch_dir =
        (std::filesystem::temp_directory_path() / ("lav-isolate-" + std::to_string(getpid())))
            .string();
    return iso;
}

// A case to run, narrowed to the records this run makes.
struct Planned {
    scenario::Case c;
    std::vector<std::string> backends;   ///< the backends asked for that its records need
    std::vector<PlannedRecord> records;  ///< those records
};

// The failed and errored records of the report at `path`, and the scenario files they came from.
std::pair<std::set<std::string>, std::vector<std::string>> failed_records(const std::string& path) {
    std::set<std::string> ids;
    std::vector<std::string> files;
    for (const auto& r : read_report_file(path).cases) {
        if (r.verdict != "fail" && r.verdict != "error") continue;
        ids.insert(r.id);
        if (std::find(files.begin(), files.end(), r.scenario_file) == files.end())
            files.push_back(r.scenario_file);
    }
    return {ids, files};
}

// A case's estimated work: its estimated size times its stages (its reference and each record),
// what --shard balances and the ETA weighs.
double estimated_work(const Planned& p) {
    return static_cast<double>(scenario::estimate_case_bytes(p.c)) *
           static_cast<double>(p.records.size() + 1);
}

// The run's `selection` attribute: its scenario texts, every selected record id, the options
// that change what a record says and how shards split, so that shards of one run share it and no
// other run's does.
std::string selection_of(const std::vector<Planned>& selected, const report::RunInfo& info,
                         const harness::RunOptions& options, const std::string& shard_by) {
    std::vector<std::string> parts = info.scenario_texts;
    size_t records = 0;
    for (const auto& p : selected)
        for (const auto& r : p.records) parts.push_back(r.id), ++records;
    std::string fail_on;
    for (const auto& kind : options.fail_on) fail_on += kind + ",";
    parts.push_back("fail-on=" + fail_on);
    parts.push_back("strict-boundary=" + std::to_string(options.strict_boundary));
    parts.push_back("decompose=" + std::to_string(options.decompose));
    parts.push_back("equivalence=" + std::to_string(options.equivalence));
    parts.push_back("reference-device=" + options.reference_device);
    // shards split another way would overlap: lav merge refuses them as another run's
    if (shard_by != "case") parts.push_back("shard-by=" + shard_by);
    return selection_digest(records, parts);
}

// The group --shard-by keeps in one shard ("" for each case alone). `dtypes` groups the cases
// of a scenario that share their input and state dtypes: those a provider that specialises its
// kernels by dtype (FLA's Triton) compiles the same kernels for, whatever their layout or seed.
std::string shard_group(const scenario::Case& c, const std::string& shard_by) {
    if (shard_by == "family") return c.family;
    if (shard_by == "scenario") return c.name;
    if (shard_by != "dtypes") return "";
    std::string group = c.name + " " + std::string(dtype_name(c.input_dtype)) + " " +
                        std::string(dtype_name(c.state_dtype));
    for (const auto& [state, dtype] : c.state_dtypes)
        group += " " + state + "=" + std::string(dtype_name(dtype));
    return group;
}

}  // namespace

int cmd_run(const std::vector<std::string>& args, const std::string& command_line) {
    po::options_description options("lav run options");
    std::vector<std::string> paths;
    std::string out = "reports/out/run.h5";
    std::string filter_text;
    std::string max_memory;
    std::string resume;
    std::string backend;
    std::vector<std::string> libraries;
    std::vector<std::string> provider_modules;
    std::string triton_cache;
    std::string junit;
    std::string dump_dir;
    std::string fail_on;
    std::string case_id;
    std::string rerun_failed;
    std::string from_report;
    std::string shard_text;
    std::string shard_by;
    std::string reference_device;
    std::string color = "auto";
    int threads = 0;
    options.add_options()("paths", po::value(&paths)->value_name("files|dirs"),
                          "scenario files or folders")(
        "out,o", po::value(&out)->value_name("F"), "report to write (default reports/out/run.h5)")(
        "filter", po::value(&filter_text)->value_name("ID|REGEX"),
        "run only these records: an id as lav prints it (a case, <case>/<variant> or a whole "
        "record <case>/<variant>/<backend>/<pass>) matches as it is; other text is a regex "
        "searched in each record id (e.g. '/cpu/bwd$')")(
        "from-report", po::value(&from_report)->value_name("F"),
        "run the scenario files report F carries (every report keeps those it ran), where the "
        "files themselves are not at hand; with --filter for some of its cases")(
        "rerun-failed", po::value(&rerun_failed)->value_name("F"),
        "run only the records that failed or errored in the report F (the scenario files come "
        "from F where no paths are given)")(
        "fail-fast", po::bool_switch(),
        "stop after the case of the first failed or errored record; the report keeps the records "
        "run so far and is marked incomplete")(
        "max-memory", po::value(&max_memory)->value_name("SIZE"),
        "refuse cases estimated above this size, e.g. 8G (default: half of RAM)")(
        "long", po::bool_switch(), "also run cases marked long")(
        "threads", po::value(&threads)->value_name("N"),
        "CPU threads for LibTorch (default: all cores)")(
        "resume", po::value(&resume)->value_name("F"),
        "continue the incomplete report F (give the same paths): its cases are kept, the rest run")(
        "junit", po::value(&junit)->value_name("F"),
        "also write the results as JUnit XML to this file")(
        "quiet,q", po::bool_switch(),
        "print only the failed and errored records and the totals line: no progress, no table")(
        "verbose,v", po::bool_switch(),
        "progress from the first record, and the threads LibTorch runs with")(
        "color", po::value(&color)->value_name("auto|always|never"),
        "colour verdicts: auto (default) on a terminal without NO_COLOR")(
        "backend", po::value(&backend)->default_value("auto")->value_name("auto|NAME[,NAME]"),
        "auto: lav's CUDA kernels where the build, the machine and the variant have them, the "
        "CPU backend otherwise; or backends by name, comma-separated, each variant running on "
        "each (cpu, cuda, a provider's: `lav list` shows this build's)")(
        "load-library", po::value(&libraries)->composing()->value_name("F.so"),
        "load a PyTorch op library F.so (repeatable); its ops <ns>::<variant>_<family> become "
        "rows of backend <ns>")(
        "provider", po::value(&provider_modules)->composing()->value_name("MODULE|F.py"),
        "import the Python provider MODULE or FILE.py (repeatable); its functions "
        "<variant>_<family> become rows of the backend it names (e.g. lav.providers.fla)")(
        "triton-cache", po::value(&triton_cache)->value_name("DIR"),
        "keep the Triton kernels a provider compiles in DIR (TRITON_CACHE_DIR, created if "
        "missing), so that a second run skips Triton's JIT and autotuning; default: Triton's own")(
        "fail-on", po::value(&fail_on)->value_name("KIND[,KIND]"),
        "finding kinds that fail a case, comma-separated (e.g. PROMOTION,BOUNDARY_MISMATCH,DRIFT); "
        "by default a dtype finding makes a passing case WARN, which exits 0")(
        "decompose", po::bool_switch(),
        "rerun each kernel with the roundings its contract names kept in fp32, one group more "
        "at a time (intermediates in the input dtype, stored states, outputs), and add a "
        "DECOMPOSITION finding per tensor: each group's share of the error")(
        "equivalence", po::bool_switch(),
        "also rerun each kernel in the other layout and, for a varlen case, on each sequence "
        "alone: the EQUIVALENCE finding says how they agree, SEGMENT_LEAK where a sequence "
        "depends on its neighbours (costs a rerun per record and per sequence)")(
        "isolate", po::bool_switch(),
        "run each case in a child process: a kernel that crashes (segfault, abort, sticky CUDA "
        "error) becomes that case's error records, and the run goes on")(
        "case", po::value(&case_id)->value_name("ID"),
        "run only the case with this exact id, as lav prints it without /variant/backend/pass")(
        "reference-device",
        po::value(&reference_device)->default_value("auto")->value_name("auto|cpu|cuda"),
        "where the fp64 reference runs: auto (default), the case's device (CUDA when one of its "
        "variants runs there, else the CPU); cpu; or cuda (needs a CUDA build and device)")(
        "shard", po::value(&shard_text)->value_name("K/N"),
        "run shard K of N of the selected cases (1 <= K <= N): each case goes to one shard, the "
        "same for every K, balanced by estimated cost; `lav merge` joins the N reports")(
        "shard-by",
        po::value(&shard_by)->default_value("case")->value_name("case|family|scenario|dtypes"),
        "what --shard keeps together: each case alone (default, the most even split); all cases "
        "of a family or of a scenario; or a scenario's cases of the same input and state dtypes "
        "(dtypes): so that a provider compiles its kernels (FLA's Triton JIT and autotuning) "
        "once instead of in every shard, dtypes spreading that work widest")(
        "strict-boundary", po::bool_switch(),
        "fail a case whose prologue hands the kernel a dtype, shape or layout its contract "
        "refuses (default: report it, fix it, and measure)")(
        "dump-intermediates", po::value(&dump_dir)->value_name("DIR"),
        "write each case's stored chunk states and the reference's, with rel_rmse per chunk, to "
        "DIR/<case id>.h5 (simple_gla and gla chunk variants)");
    po::positional_options_description positional;
    positional.add("paths", -1);
    po::variables_map vm;
    if (!parse_args(args, options, positional, usage_line("run", options, positional), vm))
        return 0;

    const bool quiet = vm["quiet"].as<bool>(), verbose = vm["verbose"].as<bool>();
    LAV_CHECK_AS(UsageError, !quiet || !verbose, "--quiet and --verbose contradict; give one");
    report::View view;
    view.color = use_color(color);
    view.failures_only = quiet;
    std::optional<std::set<std::string>> rerun;
    if (!rerun_failed.empty()) {
        auto [ids, files] = failed_records(rerun_failed);
        if (ids.empty()) {
            std::cout << rerun_failed << " has no failed or errored record: nothing to rerun\n";
            return static_cast<int>(ExitCode::kPass);
        }
        rerun = std::move(ids);
        if (paths.empty()) paths = files;
    }
    // the files a report carries, under the names they were run by
    std::map<std::string, std::string> restored;
    const std::string restore_dir =
        (std::filesystem::temp_directory_path() / ("lav-from-report-" + std::to_string(getpid())))
            .string();
    if (!from_report.empty()) {
        LAV_CHECK_AS(UsageError, paths.empty(), "--from-report runs the scenario files ",
                     from_report, " carries; give no paths beside it");
        restored = restore_scenarios(from_report, restore_dir);
        for (const auto& [file, name] : restored) paths.push_back(file);
    }
    LAV_CHECK_AS(UsageError, !paths.empty(),
                 "lav run needs scenario files or folders (or --rerun-failed F, --from-report F)\n",
                 usage_line("run", options, positional));
    RecordSelection selection(filter_text, std::move(rerun));
    const Shard shard = shard_text.empty() ? Shard{} : parse_shard(shard_text);
    LAV_CHECK_AS(UsageError,
                 shard_by == "case" || shard_by == "family" || shard_by == "scenario" ||
                     shard_by == "dtypes",
                 "--shard-by takes case, family, scenario or dtypes, got '", shard_by, "'");
    LAV_CHECK_AS(
        UsageError,
        reference_device == "auto" || reference_device == "cpu" || reference_device == "cuda",
        "--reference-device takes auto, cpu or cuda, got '", reference_device, "'");
    LAV_CHECK_AS(EnvironmentError, reference_device != "cuda" || harness::cuda_available(),
                 "--reference-device cuda needs ",
                 kCudaBuild ? "a CUDA device (none is visible)"
                            : "a CUDA build of lav (this build is CPU-only)",
                 "; use auto or cpu");
    if (vm.count("threads")) {
        LAV_CHECK_AS(UsageError, threads >= 1 && threads <= max_threads(), "--threads takes 1 to ",
                     max_threads(), " (four per hardware thread of this machine), got ", threads);
        at::set_num_threads(threads);
    }
    harness::Registry registry;
    harness::register_all(registry);
    std::vector<std::string> provided;  // "name version ..." of each provider, for the report
    if (!triton_cache.empty()) providers::use_triton_cache(triton_cache);
    for (const auto& library : libraries)
        for (const auto& ns : providers::load_op_library(library, registry))
            provided.push_back(ns + " (" + library + ")");
    for (const auto& module : provider_modules) {
        const providers::Loaded loaded = providers::load_python_provider(module, registry);
        std::string text = loaded.backend + " (" + module;
        for (const auto& [name, version] : loaded.versions) text += ", " + name + " " + version;
        provided.push_back(text + ")");
    }
    const std::vector<std::string> requested = split_list(backend);
    LAV_CHECK_AS(UsageError, !requested.empty(), "--backend names no backend");
    const std::vector<std::string> known = registry.backends();
    for (const auto& b : requested) {
        if (b == "auto" || std::find(known.begin(), known.end(), b) != known.end()) continue;
        LAV_CHECK_AS(EnvironmentError, b != "cuda",
                     "--backend cuda needs a CUDA build of lav (this build is CPU-only)");
        std::string names = "auto";
        for (const auto& k : known) names += ", " + k;
        throw UsageError("--backend takes " + names + " (comma-separated), got '" + b + "'");
    }
    LAV_CHECK_AS(EnvironmentError,
                 std::find(requested.begin(), requested.end(), "cuda") == requested.end() ||
                     harness::cuda_available(),
                 "--backend cuda needs a CUDA device (none is visible)");
    const uint64_t limit =
        max_memory.empty() ? default_max_memory() : parse_memory_size(max_memory);
    std::vector<scenario::Case> cases;
    size_t skipped_long = 0;
    for (auto& c : load_cases(paths, registry, {limit, vm["long"].as<bool>()})) {
        // a restored file is reported by the name it was run under (an isolated case's child
        // still needs the copy's)
        if (restored.count(c.file) && !vm["isolate"].as<bool>()) c.file = restored.at(c.file);
        if (c.long_case && !vm["long"].as<bool>()) {
            ++skipped_long;
            continue;
        }
        if (!case_id.empty() && c.id != case_id) continue;
        cases.push_back(std::move(c));
    }
    std::vector<std::vector<PlannedRecord>> plans;
    std::vector<std::string> ids;
    for (const auto& c : cases) {
        plans.push_back(plan_records(registry, c, requested));
        for (const auto& r : plans.back()) ids.push_back(r.id);
    }
    selection.settle(ids);
    std::vector<Planned> selected;
    for (size_t i = 0; i < cases.size(); ++i) {
        Planned p{std::move(cases[i]), {}, {}};
        for (const auto& r : plans[i])
            if (selection.keeps(r.id)) p.records.push_back(r);
        if (p.records.empty()) continue;
        p.backends = narrow(p.c, p.records);
        selected.push_back(std::move(p));
    }
    LAV_CHECK_AS(UsageError, !selected.empty(), "no case to run",
                 filter_text.empty() ? "" : " (nothing matches --filter)",
                 case_id.empty() ? "" : " (no case has the --case id)",
                 rerun_failed.empty() ? "" : " (no failed record of --rerun-failed is in them)",
                 skipped_long ? "; long cases need --long" : "");

    harness::RunOptions run_options;
    run_options.strict_boundary = vm["strict-boundary"].as<bool>();
    run_options.backends = requested;
    run_options.fail_on = parse_fail_on(fail_on);
    run_options.decompose = vm["decompose"].as<bool>();
    run_options.equivalence = vm["equivalence"].as<bool>();
    run_options.reference_device = reference_device;
    run_options.python_prologue = providers::run_python_prologue;
    report::RunInfo info =
        run_info(command_line, selected.front().c.seed, provided, registry.rows().device_probe());
    {
        std::vector<std::string> files;
        for (const auto& p : selected) files.push_back(p.c.file);
        std::map<std::string, std::string> copies;  // a restored file's name -> its copy
        for (const auto& [copy, name] : restored) copies[name] = copy;
        keep_scenarios(files, copies, info);
    }
    info.shard = shard.text();
    info.selection = selection_of(selected, info, run_options, shard_by);
    if (!shard.whole()) {
        std::vector<ShardItem> items;
        for (const auto& p : selected)
            items.push_back({p.c.id, estimated_work(p), shard_group(p.c, shard_by)});
        std::vector<Planned> mine;
        for (const size_t i : shard_positions(items, shard)) mine.push_back(std::move(selected[i]));
        selected = std::move(mine);
    }

    LAV_CHECK_AS(UsageError, resume.empty() || !vm.count("out") || out == resume,
                 "--resume F writes to F itself; drop --out");
    if (!resume.empty()) out = resume;
    // one run writes a report at a time, and a device or FIFO is never replaced by one;
    // checked once the scenarios are, and before any case runs
    const report::OutputLock lock(out);
    for (const auto& stale : report::stale_temporaries(out))
        std::cerr << "lav: warning: " << stale
                  << " was left by a lav that was killed while writing this report; remove it\n";
    // a resumed run keeps the records it has and runs only cases with a record still missing
    std::set<std::string> kept;
    std::unique_ptr<report::ReportWriter> writer;
    if (!resume.empty()) {
        report::Report previous = read_report_file(resume);
        // a report names one lav's commit: another lav's records would pass under it
        const std::string& was = previous.run.git_commit;
        LAV_CHECK_AS(UsageError,
                     was == info.git_commit || was.empty() || was == "unknown" ||
                         info.git_commit == "unknown",
                     resume, " was written by lav ", was, " and this is lav ", info.git_commit,
                     ": the records of both would stand under its commit\nnote: finish it with "
                     "the lav that wrote it, or run it again without --resume");
        LAV_CHECK_AS(UsageError,
                     previous.run.shard == info.shard && previous.run.selection == info.selection,
                     resume, " was run ",
                     previous.run.shard.empty() ? "whole" : "as shard " + previous.run.shard,
                     " of a selection of ", previous.run.selection, "; this run is ",
                     info.shard.empty() ? "whole" : "shard " + info.shard, " of ", info.selection,
                     "\nnote: resume it with the scenario files and options it was run with");
        for (const auto& r : previous.cases) kept.insert(r.id);
        writer = std::make_unique<report::ReportWriter>(out, std::move(previous));
    } else {
        writer = std::make_unique<report::ReportWriter>(out, std::move(info));
    }
    writer->publish_every(kPublishEverySeconds);
    const auto start = std::chrono::steady_clock::now();
    size_t runs = 0;
    std::set<std::string> wanted;  // a narrowed case can still make records not selected
    std::vector<const Planned*> todo;
    for (const auto& p : selected) {
        size_t missing = 0;
        for (const auto& r : p.records) missing += wanted.insert(r.id).second && !kept.count(r.id);
        if (missing == 0) continue;
        runs += missing;
        todo.push_back(&p);
    }
    if (!kept.empty() && !quiet)
        std::cerr << "resuming " << out << ": " << kept.size() << " records kept, " << runs
                  << " to run\n";
    if (verbose)
        std::cerr << threading_note() << "\nrunning " << report::plural(runs, "record") << " of "
                  << report::plural(todo.size(), "case") << "\n";
    if (!dump_dir.empty())
        run_options.on_intermediates = [&](const std::vector<report::Intermediates>& dumps) {
            const std::string file = report::intermediates_file_name(dumps.front().case_id);
            report::write_intermediates((std::filesystem::path(dump_dir) / file).string(), dumps);
        };
    Isolation isolation;
    if (vm["isolate"].as<bool>()) {
        isolation = isolation_of(vm, backend, reference_device, max_memory, threads, fail_on,
                                 libraries, provider_modules, dump_dir);
        std::filesystem::create_directories(isolation.scratch_dir);
    }
    double total_cost = 0;
    for (const Planned* p : todo) total_cost += estimated_work(*p);
    Progress progress(std::cerr, !quiet, verbose ? 0.0 : kProgressAfterSeconds, runs, total_cost);
    run_options.on_stage = [&](const std::string& stage) { progress.stage(stage); };
    size_t done = 0;
    bool stopped = false;  // by --fail-fast
    for (const Planned* p : todo) {
        std::string errored;  // a record of the case that ended in an error
        bool failed = false;
        progress.start_case(p->c.id, estimated_work(*p), p->records.size() + 1);
        const auto sink = [&](report::CaseRecord r) {
            if (kept.count(r.id) || !wanted.count(r.id)) return;
            if (r.verdict == "error") errored = r.id;
            failed |= r.verdict == "fail" || r.verdict == "error";
            ++done;
            progress.record(r.id, r.verdict);
            writer->add(std::move(r));
        };
        if (!isolation.scratch_dir.empty()) {
            run_isolated(p->c, expected_records(p->c, p->records), isolation, sink);
        } else {
            harness::RunOptions case_options = run_options;
            case_options.backends = p->backends;
            harness::run_case(registry, p->c, case_options, sink);
        }
        progress.end_case();
        // a kernel's CUDA error can be sticky: then no later case can run, and the report keeps
        // the finished ones, marked incomplete
        if (!errored.empty() && isolation.scratch_dir.empty() && harness::cuda_available()) {
            const std::string broken = harness::cuda_context_error();
            if (!broken.empty()) writer->flush();
            LAV_CHECK_AS(EnvironmentError, broken.empty(), "the CUDA context is unusable after ",
                         errored, " (", broken, "); ", out,
                         " holds the cases before it, marked incomplete");
        }
        if (failed && vm["fail-fast"].as<bool>()) {
            stopped = true;
            break;
        }
    }
    // a run stopped early stays marked incomplete, so that --resume can finish it
    if (stopped) {
        writer->flush();
        view.why_incomplete = "stopped after the first failure, " +
                              report::plural(runs - done, "record") + " not run";
    } else {
        writer->finish();
    }
    if (verbose) {
        const double total =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        char share[64];
        std::snprintf(share, sizeof share, "%.1f s of %.1f s (%.1f%%)", writer->seconds_writing(),
                      total, total > 0 ? 100 * writer->seconds_writing() / total : 0.0);
        std::cerr << "report writing: " << share << "\n";
    }
    if (!restored.empty()) std::filesystem::remove_all(restore_dir);
    if (!isolation.scratch_dir.empty()) std::filesystem::remove_all(isolation.scratch_dir);

    const report::Report& rep = writer->report();
    if (!junit.empty()) report::write_junit_run(junit, rep);
    const bool failed = std::any_of(rep.cases.begin(), rep.cases.end(), [](const auto& r) {
        return r.verdict == "fail" || r.verdict == "error";
    });
    if (quiet) {
        report::print_case_details(std::cout, rep, view);
        std::cout << (failed ? "\n" : "") << report::totals_line(rep, view) << "\n";
        return static_cast<int>(failed ? ExitCode::kVerificationFailed : ExitCode::kPass);
    }
    report::print_summary_table(std::cout, rep, view);
    report::print_case_details(std::cout, rep, view);
    if (skipped_long)
        std::cout << "\n" << skipped_long << " long cases skipped (run with --long)\n";
    std::cout << "\nreport: " << out << "\n";
    return static_cast<int>(failed ? ExitCode::kVerificationFailed : ExitCode::kPass);
}

}  // namespace lav::cli
