// bench/report_writing.cpp — the report writer's cost per case, replayed from a real report.
//
//   build/bench/bench_report_writing RUN.h5 SCRATCH.h5
//
// Reads RUN.h5 (written by `lav run`), then writes its cases again, one add() each, through a
// ReportWriter into SCRATCH.h5, as `lav run` does. Prints the total and the mean cost of an
// add() over the first, middle and last hundred cases: flat means linear. bench/report_writing.sh
// runs lav on 10,000 tiny cases first and sets this total against the run's wall time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <vector>

#include "core/heap.h"
#include "report/report.h"

namespace {

using Clock = std::chrono::steady_clock;

double mean_us(const std::vector<double>& seconds, size_t first, size_t count) {
    double sum = 0;
    for (size_t i = first; i < first + count; ++i) sum += seconds[i];
    return sum / static_cast<double>(count) * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: bench_report_writing RUN.h5 SCRATCH.h5\n");
        return 2;
    }
    lav::keep_freed_heap();  // as lav does
    lav::report::Report run = lav::report::read_report(argv[1]);
    const size_t n = run.cases.size();
    std::vector<double> seconds;
    seconds.reserve(n);
    const Clock::time_point start = Clock::now();
    const std::clock_t cpu_start = std::clock();
    {
        lav::report::ReportWriter writer(argv[2], run.run);
        for (lav::report::CaseRecord& record : run.cases) {
            const Clock::time_point before = Clock::now();
            writer.add(std::move(record));
            seconds.push_back(std::chrono::duration<double>(Clock::now() - before).count());
        }
        writer.finish();
    }
    const double total = std::chrono::duration<double>(Clock::now() - start).count();
    const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const size_t window = std::min<size_t>(100, n);
    std::printf(
        "cases %zu  writing %.3f s (CPU %.3f s)  add() mean: first %zu %.0f us, middle %.0f us, "
        "last %.0f us\n",
        n, total, cpu, window, mean_us(seconds, 0, window),
        mean_us(seconds, (n - window) / 2, window), mean_us(seconds, n - window, window));
    return 0;
}
