// bench/trace_overhead.cpp — simple_gla CPU fwd+bwd with the dtype tracer on and off; not a test.
//
//   build-*/bench/bench_trace_overhead [threads]
//
// B=2 T=1024 H=4 K=V=64, bf16 q/k/v, fp32 gate, initial and final state. Three modes run in
// turn so that drift of a shared machine hits all alike: tracing off; a RecordFunction
// callback that does nothing but asks for inputs and outputs as the tracer does (LibTorch's
// own cost, the floor for any tracer built on it); the tracer. Each reports the median of 21
// runs after 2 warm-up rounds, in wall time and in process CPU time (the steadier of the two
// on a loaded machine), and its minor page faults a run. `threads` sets LibTorch's intra-op
// threads (default: its own).
//
// It sets malloc up as lav does for its runs (keep_freed_heap): with glibc's defaults, whether
// the heap's top goes back to the system after each run and is faulted in again in the next
// (~1,500 faults a run here, 2-4 ms, in every mode alike) depends on the process's heap
// layout, and differs from build to build and process to process. The faults column shows
// it. Compare several processes, not one; 21 runs (was 11) keep one slow run from moving a
// median.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "core/heap.h"
#include "kernels/simple_gla/simple_gla.h"
#include "trace/tracer.h"

namespace {

constexpr int kRuns = 21;
constexpr int kWarmup = 2;

struct Inputs {
    lav::kernels::SimpleGlaArgs args;
    at::Tensor d_o;  // [B, T, H, V] bf16
    at::Tensor dht;  // [B, H, K, V] fp32
};

Inputs make_inputs() {
    constexpr int64_t B = 2, T = 1024, H = 4, K = 64, V = 64;
    at::manual_seed(42);
    Inputs in;
    in.args.q = at::randn({B, T, H, K}).to(at::kBFloat16);
    in.args.k = at::randn({B, T, H, K}).to(at::kBFloat16);
    in.args.v = at::randn({B, T, H, V}).to(at::kBFloat16);
    in.args.g = at::log_sigmoid(at::randn({B, T, H}));
    in.args.h0 = at::randn({B, H, K, V});
    in.args.state_dtype = at::kFloat;
    in.d_o = at::randn({B, T, H, V}).to(at::kBFloat16);
    in.dht = at::randn({B, H, K, V});
    return in;
}

struct Timing {
    double wall = 0;  // seconds
    double cpu = 0;   // seconds of process CPU time, all threads
    long faults = 0;  // minor page faults of the process
};

long minor_faults() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

double cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

enum class Mode { off, empty_callback, traced };

std::unique_ptr<at::ObserverContext> empty_start(const at::RecordFunction&) { return nullptr; }
void empty_end(const at::RecordFunction&, at::ObserverContext*) {}

void run_kernel(const Inputs& in) {
    const auto fwd = lav::kernels::simple_gla_chunk_fwd_cpu(in.args);
    const auto grads = lav::kernels::simple_gla_chunk_bwd_cpu(in.args, in.d_o, in.dht);
}

// one forward and one backward; when traced, also the number of ops recorded
Timing run_once(const Inputs& in, Mode mode, size_t* ops) {
    const long faults0 = minor_faults();
    const double cpu0 = cpu_seconds();
    const auto wall0 = std::chrono::steady_clock::now();
    if (mode == Mode::traced) {
        lav::trace::TraceScope scope;
        run_kernel(in);
        *ops = scope.trace().size();
    } else if (mode == Mode::empty_callback) {
        const auto handle =
            at::addThreadLocalCallback(at::RecordFunctionCallback(&empty_start, &empty_end)
                                           .needsInputs(true)
                                           .needsOutputs(true)
                                           .scopes({at::RecordScope::FUNCTION}));
        run_kernel(in);
        at::removeCallback(handle);
    } else {
        run_kernel(in);
    }
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(),
            cpu_seconds() - cpu0, minor_faults() - faults0};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    lav::keep_freed_heap();
    if (argc > 1) at::set_num_threads(std::atoi(argv[1]));
    const Inputs in = make_inputs();
    size_t ops = 0;
    constexpr Mode kModes[] = {Mode::off, Mode::empty_callback, Mode::traced};
    for (int i = 0; i < kWarmup; ++i)
        for (Mode mode : kModes) run_once(in, mode, &ops);
    std::vector<double> wall[3], cpu[3];
    long faults[3] = {};
    for (int i = 0; i < kRuns; ++i) {
        for (Mode mode : kModes) {
            const Timing t = run_once(in, mode, &ops);
            wall[static_cast<int>(mode)].push_back(t.wall);
            cpu[static_cast<int>(mode)].push_back(t.cpu);
            faults[static_cast<int>(mode)] += t.faults;
        }
    }
    std::printf(
        "simple_gla chunk fwd+bwd cpu, B=2 T=1024 H=4 K=V=64 bf16, %d threads, %zu ops "
        "traced, median of %d\n",
        at::get_num_threads(), ops, kRuns);
    const auto report = [&](const char* what, const std::vector<double>* times) {
        const double off = median(times[0]), floor = median(times[1]), on = median(times[2]);
        std::printf(
            "%-4s off %7.2f ms | empty callback %7.2f ms (x%.3f) | traced %7.2f ms (x%.3f, "
            "%.2f us per op)\n",
            what, off * 1e3, floor * 1e3, floor / off, on * 1e3, on / off,
            (on - off) * 1e6 / static_cast<double>(ops));
    };
    report("wall", wall);
    report("cpu", cpu);
    std::printf("page faults a run: off %ld | empty callback %ld | traced %ld\n", faults[0] / kRuns,
                faults[1] / kRuns, faults[2] / kRuns);
    return 0;
}
