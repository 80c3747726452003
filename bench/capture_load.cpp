// bench/capture_load.cpp — how long a capture replay takes to start; not a test.
//
//   build/bench/bench_capture_load SCENARIO.toml      (bench/capture_load.sh makes one)
//
// Times loading the scenario (reading the capture with LibTorch's zip reader and unpickler,
// deriving sizes and dtypes) and making the case's kernel and fp64 reference inputs from it
// (captured_inputs): what `lav run` does before the first kernel starts.
#include <chrono>
#include <cstdio>
#include <string>

#include "harness/audit.h"
#include "harness/registry.h"
#include "scenario/capture.h"
#include "scenario/scenario.h"

int main(int argc, char** argv) {
    using namespace lav;
    using clock = std::chrono::steady_clock;
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_capture_load SCENARIO.toml\n");
        return 2;
    }
    harness::Registry registry;
    harness::register_all(registry);
    const auto start = clock::now();
    const scenario::Case c = scenario::load_file(argv[1], registry.catalog(), {}).at(0);
    const auto loaded = clock::now();
    harness::Audit audit;
    const harness::Family& family = registry.get(c.family);
    const harness::CaseTensors in =
        harness::captured_inputs(c, harness::specs_of(family, c, harness::Role::input), audit);
    const auto ready = clock::now();
    const auto s = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    int64_t bytes = 0;
    for (const auto& [name, t] : c.capture->tensors) bytes += t.nbytes();
    std::printf("%s: B%lld T%lld H%lld K%lld V%lld %s, %.0f MB captured\n", argv[1],
                static_cast<long long>(c.B), static_cast<long long>(c.T),
                static_cast<long long>(c.H), static_cast<long long>(c.K),
                static_cast<long long>(c.V), std::string(dtype_name(c.input_dtype)).c_str(),
                bytes / 1e6);
    std::printf("  load (read the capture, derive the case)  %.3f s\n", s(start, loaded));
    std::printf("  kernel and fp64 reference inputs           %.3f s\n", s(loaded, ready));
    std::printf("  total before the first kernel              %.3f s\n", s(start, ready));
    return in.kernel.empty() ? 1 : 0;
}
