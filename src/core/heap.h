// src/core/heap.h — how lav's processes have glibc's malloc keep freed memory; nothing else.
#pragma once

namespace lav {

/// Has glibc's malloc keep freed memory for reuse rather than hand it back to the system and
/// fault it in again: blocks up to 32 MiB come from the heap instead of a mapping each, and
/// the heap's top is given back only once 512 MiB of it are free. The process's memory then
/// stays at its peak. Call once at start, before the first tensor; where malloc is not
/// glibc's, it does nothing.
void keep_freed_heap();

}  // namespace lav
