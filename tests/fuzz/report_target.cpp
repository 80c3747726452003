// tests/fuzz/report_target.cpp — fuzz target: the bytes as a report file, read back whole.
#include "report/report.h"
#include "targets.h"

namespace lav::fuzz {

int fuzz_report(const uint8_t* data, size_t size) {
    static const ScratchFile file("report.h5");
    file.write(data, size);
    return expect_user_errors([&] { report::read_report(file.path()); });
}

}  // namespace lav::fuzz
