// bench/provider_overhead.cpp — lav's overhead around a provider call: the same forward
// through lav and bare in Python, per case.
//
//   build/bench/bench_provider_overhead PROVIDER SCENARIO [REPEATS] [ROUNDS]
//
// Loads the Python provider PROVIDER as `lav run --provider` does. For each case of SCENARIO
// and each variant the provider has a row for, it makes the case's inputs as lav run does and
// times REPEATS forward calls (after 3 warm-up calls) four ways: the provider's function called
// bare in the same interpreter on tensors of the same shapes, dtypes and device, the same
// through lav's Python shim alone (both in provider_overhead.py), through the row as lav calls
// it, and the same under the dtype tracer (as lav run calls a provider). ROUNDS rounds
// (default 5) take turns, so that a shared machine's drift hits all four alike; each prints
// the median of its rounds' medians. A CUDA call ends with a device synchronise.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
// Python.h first, as its documentation asks
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "harness/backend.h"
#include "harness/inputs.h"
#include "harness/registry.h"
#include "providers/python.h"
#include "scenario/scenario.h"
#include "trace/tracer.h"

namespace {

using namespace lav;

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

double median_seconds(int repeats, const std::function<void()>& call) {
    for (int i = 0; i < 3; ++i) call();
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        call();
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return median(times);
}

// provider_overhead.py's seconds() of `mode`, in the interpreter lav started
double python_seconds(const std::string& provider, const std::string& call_json, int repeats,
                      const char* mode) {
    const PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* helper = PyImport_ImportModule("provider_overhead");
    PyObject* seconds = helper ? PyObject_CallMethod(helper, "seconds", "ssis", provider.c_str(),
                                                     call_json.c_str(), repeats, mode)
                               : nullptr;
    if (!seconds) {
        PyErr_Print();
        std::exit(3);
    }
    const double out = PyFloat_AsDouble(seconds);
    Py_DECREF(seconds);
    Py_DECREF(helper);
    PyGILState_Release(gil);
    return out;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

std::string tensors_json(const TensorMap& tensors) {
    std::string out = "{";
    for (const auto& [name, t] : tensors) {
        if (!t.defined()) continue;
        std::string shape;
        for (int64_t size : t.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(size);
        out += (out.size() > 1 ? ", " : "") + quoted(name) + ": [" +
               quoted(c10::toString(t.scalar_type())) + ", [" + shape + "], " +
               quoted(t.device().str()) + "]";
    }
    return out + "}";
}

// the settings python.cpp hands a provider, as JSON
std::string settings_json(const Call& call) {
    std::string offsets;
    for (int64_t o : call.cu_seqlens) offsets += (offsets.empty() ? "" : ",") + std::to_string(o);
    std::string out =
        "{\"scale\": " + std::to_string(call.scale) +
        ", \"head_first\": " + (call.layout == Layout::head_first ? "true" : "false") +
        ", \"cu_seqlens\": " + (call.cu_seqlens.empty() ? "null" : "[" + offsets + "]") +
        ", \"chunk_size\": " + std::to_string(call.chunk_size) +
        ", \"state_dtype\": " + quoted(c10::toString(call.state_dtype)) +
        ", \"output_dtype\": " + quoted(c10::toString(call.output_dtype));
    for (const auto& [name, value] : call.options)
        out += ", " + quoted(name) + ": " + quoted(value);
    return out + "}";
}

int run(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: bench_provider_overhead PROVIDER SCENARIO [REPEATS] [ROUNDS]\n";
        return 2;
    }
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 20;
    const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
    harness::Registry registry;
    harness::register_all(registry);
    const providers::Loaded loaded = providers::load_python_provider(argv[1], registry);
    const PyGILState_STATE gil = PyGILState_Ensure();
    PyRun_SimpleString("import sys; sys.path.insert(0, '" LAV_BENCH_DIR "')");
    PyGILState_Release(gil);
    std::printf("provider %s, LibTorch %d threads; medians of %d rounds of %d calls\n", argv[1],
                at::get_num_threads(), rounds, repeats);
    std::printf("%-40s %-10s %-5s %9s %9s %9s %9s %9s %10s %9s\n", "case", "variant", "dev",
                "bare ms", "shim ms", "overhead", "lav ms", "overhead", "traced ms", "overhead");
    for (const scenario::Case& c : scenario::load_file(argv[2], registry.catalog(), {})) {
        const harness::Family& family = registry.get(c.family);
        const harness::CaseTensors in =
            harness::make_tensors(harness::specs_of(family, c, harness::Role::input), c, 0);
        for (const std::string& variant : c.variants) {
            const Row* row = registry.rows().find(c.family, variant, loaded.backend);
            if (!row) continue;
            Call call = harness::call_of(family, c);
            call.tensors = harness::to_device(in.kernel, row->device);
            const bool cuda = row->device == "cuda";
            const auto plain = [&] {
                row->forward(call);
                if (cuda) at::detail::getCUDAHooks().deviceSynchronize(0);
            };
            const auto traced = [&] {
                trace::TraceScope scope;
                for (const auto& [name, t] : call.tensors)
                    if (t.defined()) scope.trace().label(t, name, trace::Role::input);
                plain();
                scope.stop();
            };
            const std::string json = "{\"family\": " + quoted(c.family) +
                                     ", \"variant\": " + quoted(variant) +
                                     ", \"device\": " + quoted(row->device) +
                                     ", \"tensors\": " + tensors_json(call.tensors) +
                                     ", \"settings\": " + settings_json(call) + "}";
            std::vector<double> bare, shim, lav, lav_traced;
            for (int r = 0; r < rounds; ++r) {
                bare.push_back(python_seconds(argv[1], json, repeats, "bare"));
                shim.push_back(python_seconds(argv[1], json, repeats, "shim"));
                lav.push_back(median_seconds(repeats, plain));
                lav_traced.push_back(median_seconds(repeats, traced));
            }
            const double b = median(bare), s = median(shim), l = median(lav),
                         t = median(lav_traced);
            std::printf("%-40s %-10s %-5s %9.3f %9.3f %8.1f%% %9.3f %8.1f%% %10.3f %8.1f%%\n",
                        c.id.c_str(), variant.c_str(), row->device.c_str(), b * 1e3, s * 1e3,
                        100 * (s / b - 1), l * 1e3, 100 * (l / b - 1), t * 1e3, 100 * (t / b - 1));
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // a bad scenario or provider is reported as lav run reports it, not as an abort
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "bench_provider_overhead: " << e.what() << "\n";
        return 2;
    }
}
