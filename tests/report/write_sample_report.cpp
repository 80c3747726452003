// tests/report/write_sample_report.cpp — writes the sample report to argv[1], for read_report.py.
#include <iostream>

#include "core/error.h"
#include "report/report.h"
#include "sample_report.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: write_sample_report <out.h5>\n";
        return 2;
    }
    try {
        // through ReportWriter, as `lav run` writes, case by case
        const lav::report::Report sample = lav::report::samples::sample_report();
        lav::report::ReportWriter writer(argv[1], sample.run);
        for (const auto& c : sample.cases) writer.add(c);
        writer.finish();
    } catch (const lav::Error& e) {
        std::cerr << e.what() << '\n';
        return static_cast<int>(e.exit_code());
    }
    return 0;
}
