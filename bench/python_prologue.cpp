// bench/python_prologue.cpp — the dtype tracer's cost on a Python prologue; not a test.
//
//   build/bench/bench_python_prologue [SCENARIO.toml] [runs]
//
// Runs the first case's prologue (default bench/python_prologue.toml: the RWKV-7 seed at
// B1 T4096 H16 K64) in one process, in turn: untraced (run_prologue with no TraceScope); under
// the tracer as it records sites (file:line per op) and labels (qualified names), values not
// checked; and as `lav run` does it (run_prologue_audited: values checked for NaN/Inf, findings
// and the boundary check). Prints each mode's median wall time over `runs` (default 21) after
// two warm-up rounds, and its ratio to untraced.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/audit.h"
#include "harness/inputs.h"
#include "harness/prologue.h"
#include "harness/registry.h"
#include "providers/python.h"
#include "scenario/scenario.h"
#include "trace/tracer.h"

namespace {

using namespace lav;

double seconds_of(const std::function<void()>& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : LAV_SOURCE_DIR "/bench/python_prologue.toml";
    const int runs = argc > 2 ? std::stoi(argv[2]) : 21;
    harness::Registry registry;
    harness::register_all(registry);
    const scenario::Case c = scenario::load_file(path, registry.catalog(), {}).at(0);
    const harness::Family& family = registry.get(c.family);
    const auto specs = harness::specs_of(family, c, harness::Role::input);
    const harness::CaseTensors generated = harness::make_tensors(specs, c, 0);
    harness::TensorMap env = harness::make_prologue_tensors(*c.prologue, c.seed);
    for (const auto& spec : specs)
        env[spec.name] = generated.reference.at(spec.name).to(to_scalar_type(spec.dtype));

    const auto untraced = [&] {
        harness::run_prologue(*c.prologue, env, {}, providers::run_python_prologue);
    };
    bool check_values = false;
    const auto traced = [&] {
        trace::TraceScope scope(check_values);
        harness::PrologueHooks hooks;
        hooks.on_input = [&](const std::string& n, const at::Tensor& t) {
            scope.trace().label(t, n, trace::Role::input);
        };
        hooks.on_parameter = [&](const std::string& n, const at::Tensor& t, bool buffer) {
            scope.trace().label(t, n, buffer ? trace::Role::buffer : trace::Role::parameter);
        };
        hooks.on_site_source = [&](trace::Trace::SiteSource s) {
            scope.trace().set_site_source(s);
        };
        hooks.on_assign = [&](const std::string& n, const at::Tensor& t) {
            scope.trace().label(t, n);
        };
        harness::run_prologue(*c.prologue, env, hooks, providers::run_python_prologue);
        scope.stop();
    };
    const auto traced_values = [&] {
        check_values = true;
        traced();
        check_values = false;
    };
    const auto as_lav_runs = [&] {
        harness::Audit audit;
        harness::run_prologue_audited(c, specs, generated, audit, providers::run_python_prologue);
    };
    const std::vector<std::pair<const char*, std::function<void()>>> modes = {
        {"untraced", untraced},
        {"traced (sites, names)", traced},
        {"traced, values checked", traced_values},
        {"as lav run (+values, findings)", as_lav_runs}};
    std::vector<std::vector<double>> times(modes.size());
    for (int round = 0; round < runs + 2; ++round)
        for (size_t m = 0; m < modes.size(); ++m) {
            const double t = seconds_of(modes[m].second);
            if (round >= 2) times[m].push_back(t);
        }
    std::printf("%s: %s B%lld T%lld H%lld K%lld, median of %d runs\n", path.c_str(),
                c.prologue->python ? c.prologue->python->function.c_str() : "ops",
                static_cast<long long>(c.B), static_cast<long long>(c.T),
                static_cast<long long>(c.H), static_cast<long long>(c.K), runs);
    const double base = median(times[0]);
    for (size_t m = 0; m < modes.size(); ++m)
        std::printf("  %-32s %9.3f ms  %5.2fx\n", modes[m].first, 1e3 * median(times[m]),
                    median(times[m]) / base);
    return 0;
}
