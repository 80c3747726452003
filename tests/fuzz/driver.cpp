// tests/fuzz/driver.cpp — lav_fuzz: replays a corpus through a target, then runs seeded
// mutations of it; every input that makes a finding is saved. Needs no clang (README.md).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/printable.h"
#include "mutator.h"
#include "runner.h"

namespace lav::fuzz {
namespace {

constexpr char kUsage[] =
    "usage: lav_fuzz <scenario|prologue|report> [options] <corpus files or folders>...\n"
    "  --runs N        mutated inputs to run after the corpus (default 0: the corpus only)\n"
    "  --seconds S     stop mutating after S seconds (default: no limit)\n"
    "  --seed N        seed of the mutations (default 1)\n"
    "  --timeout-ms N  a call that takes longer is a hang (default 1000)\n"
    "  --dict FILE     tokens to insert, in libFuzzer's dictionary format\n"
    "  --max-len N     largest mutated input in bytes (default 65536)\n"
    "  --findings DIR  where inputs that make findings are saved (default fuzz-findings)\n"
    "  --fork          run each input in a child process: a crash is counted, the run goes on\n";

// Accepted mutants are mutated further, up to this many (then they replace one another): valid
// variants reach deeper than the seeds alone, and the pool stays bounded.
constexpr size_t kMaxGrown = 1000;

struct Target {
    const char* name;
    TargetFn run;
};

constexpr Target kTargets[] = {
    {"scenario", fuzz_scenario}, {"prologue", fuzz_prologue}, {"report", fuzz_report}};

struct Options {
    const Target* target = nullptr;
    std::vector<std::string> paths;
    uint64_t runs = 0;
    double seconds = 0;  // 0: no limit
    uint64_t seed = 1;
    double timeout_ms = 1000;
    std::string dictionary;
    size_t max_len = 65536;
    std::string findings = "fuzz-findings";
    bool fork = false;
};

Options parse_options(int argc, char** argv) {
    if (argc < 2) throw std::invalid_argument("no target given");
    Options options;
    for (const Target& t : kTargets)
        if (argv[1] == std::string(t.name)) options.target = &t;
    if (!options.target) throw std::invalid_argument(std::string("unknown target ") + argv[1]);
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--", 0) != 0) {
            options.paths.push_back(arg);
            continue;
        }
        if (arg == "--fork") {
            options.fork = true;
            continue;
        }
        if (i + 1 == argc) throw std::invalid_argument(arg + " needs a value");
        const std::string value = argv[++i];
        if (arg == "--runs")
            options.runs = std::stoull(value);
        else if (arg == "--seconds")
            options.seconds = std::stod(value);
        else if (arg == "--seed")
            options.seed = std::stoull(value);
        else if (arg == "--timeout-ms")
            options.timeout_ms = std::stod(value);
        else if (arg == "--dict")
            options.dictionary = value;
        else if (arg == "--max-len")
            options.max_len = std::stoull(value);
        else if (arg == "--findings")
            options.findings = value;
        else
            throw std::invalid_argument("unknown option " + arg);
    }
    return options;
}

/// The files `paths` name, folders searched recursively in sorted order; dot files (.gitkeep)
/// are left out.
std::vector<std::string> corpus_files(const std::vector<std::string>& paths) {
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    for (const std::string& path : paths) {
        if (!fs::is_directory(path)) {
            if (!fs::is_regular_file(path)) throw std::invalid_argument("no such file " + path);
            files.push_back(path);
            continue;
        }
        std::vector<std::string> found;
        for (const auto& entry : fs::recursive_directory_iterator(path))
            if (entry.is_regular_file() && entry.path().filename().string()[0] != '.')
                found.push_back(entry.path().string());
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
    }
    return files;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

class Campaign {
  public:
    explicit Campaign(const Options& options) : options_(options) {}

    void run(const std::string& input, const std::string& source) {
        const Result result =
            (options_.fork ? run_input_forked : run_input)(options_.target->run, input, timeout());
        ++counts_[static_cast<size_t>(result.outcome)];
        if (is_finding(result.outcome)) {
            std::cout << "FINDING " << outcome_name(result.outcome) << " from " << source
                      << ", saved as " << save_finding(options_.findings, result.outcome, input)
                      << "\n  " << printable(result.message, Breaks::keep) << std::endl;
        }
        last_accepted_ = result.outcome == Outcome::accepted;
    }

    bool last_accepted() const { return last_accepted_; }
    uint64_t executions() const {
        uint64_t total = 0;
        for (const uint64_t n : counts_) total += n;
        return total;
    }
    uint64_t findings() const {
        return executions() - count(Outcome::accepted) - count(Outcome::refused);
    }
    uint64_t count(Outcome outcome) const { return counts_[static_cast<size_t>(outcome)]; }

    std::string summary() const {
        std::ostringstream out;
        out << executions() << " executions: " << count(Outcome::accepted) << " accepted, "
            << count(Outcome::refused) << " refused, " << count(Outcome::internal_error)
            << " internal errors, " << count(Outcome::exception) << " other exceptions, "
            << count(Outcome::hang) << " hangs, " << count(Outcome::crash) << " crashes";
        return out.str();
    }

  private:
    std::chrono::duration<double> timeout() const {
        return std::chrono::duration<double>(options_.timeout_ms / 1000);
    }

    const Options& options_;
    uint64_t counts_[static_cast<size_t>(Outcome::crash) + 1] = {};
    bool last_accepted_ = false;
};

int fuzz(const Options& options) {
    const std::vector<std::string> files = corpus_files(options.paths);
    std::vector<std::string> seeds;
    for (const std::string& file : files) seeds.push_back(read_file(file));
    watch_for_crashes(options.findings);
    Campaign campaign(options);
    for (size_t i = 0; i < files.size(); ++i) campaign.run(seeds[i], files[i]);
    if (seeds.empty()) seeds.push_back("");
    std::cout << options.target->name << " corpus: " << campaign.summary() << std::endl;

    Mutator mutator(options.seed,
                    options.dictionary.empty() ? std::vector<std::string>{}
                                               : read_dictionary(options.dictionary),
                    options.max_len);
    std::vector<std::string> grown;
    const auto start = std::chrono::steady_clock::now();
    auto next_report = start + std::chrono::seconds(10);
    for (uint64_t run = 1; run <= options.runs; ++run) {
        const auto now = std::chrono::steady_clock::now();
        if (options.seconds > 0 && now - start > std::chrono::duration<double>(options.seconds))
            break;
        if (now > next_report) {
            std::cout << "#" << run << " " << campaign.summary() << std::endl;
            next_report = now + std::chrono::seconds(10);
        }
        // half from the seeds, so that the grown inputs (which drift towards what lav accepts
        // easily, such as edits inside comments) never crowd them out
        const auto pick = [&]() -> const std::string& {
            if (grown.empty() || mutator.below(2) == 0) return seeds[mutator.below(seeds.size())];
            return grown[mutator.below(grown.size())];
        };
        const std::string& base = pick();
        const std::string& other = pick();
        std::string input = mutator.mutate(base, other);
        campaign.run(input, "mutation #" + std::to_string(run));
        if (!campaign.last_accepted()) continue;
        if (grown.size() < kMaxGrown)
            grown.push_back(std::move(input));
        else
            grown[mutator.below(kMaxGrown)] = std::move(input);
    }
    if (options.runs > 0) {
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        std::cout << options.target->name << " total, " << took.count()
                  << " s of mutations from seed " << options.seed << ": " << campaign.summary()
                  << std::endl;
    }
    return campaign.findings() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace lav::fuzz

int main(int argc, char** argv) {
    // the targets catch what lav throws: what reaches here is a bad command line or corpus
    try {
        return lav::fuzz::fuzz(lav::fuzz::parse_options(argc, argv));
    } catch (const std::exception& e) {
        std::cerr << "lav_fuzz: " << e.what() << "\n" << lav::fuzz::kUsage;
        return 2;
    }
}
