// tests/common/trace_test.h — what the tracer's tests ask of a trace.
#pragma once

#include <vector>

#include "trace/tracer.h"

namespace lav::trace {

/// The depth-0 ops of a trace: the ones the test called, without those they called.
inline std::vector<const OpRecord*> top_level(const Trace& trace) {
    std::vector<const OpRecord*> out;
    for (const OpRecord& op : trace.ops())
        if (op.depth == 0) out.push_back(&op);
    return out;
}

}  // namespace lav::trace
