// src/core/heap.cpp — glibc malloc thresholds for lav's processes.
#include "core/heap.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace lav {

void keep_freed_heap() {
#if defined(__GLIBC__)
    // glibc's defaults move both thresholds with the largest block freed so far, and whether
    // a kernel call then hands its heap back at the end, to fault it in again in the next,
    // hangs on where a few long-lived small blocks happen to lie: the simple_gla CPU forward
    // and backward at B=2 T=1024 H=4 K=V=64 took either ~20 or ~1,500 page faults a call
    // (19 ms or 23 ms), from one build and one process to the next. Fixed thresholds take
    // that away: 0-10 faults (bench/trace_overhead.cpp). 32 MiB is glibc's largest mmap
    // threshold, the one it would reach itself after freeing a block that large.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

}  // namespace lav
