// src/trace/mapped_array.cpp — the mappings behind MappedArray, and the few kept for reuse.
#include "trace/mapped_array.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace lav::trace {
namespace {

// at most this much given-back memory is kept: a trace of the simple_gla benchmark maps
// about 3 MiB, mostly address space it never writes
constexpr size_t kKeptBytes = 16 << 20;

struct Kept {
    std::mutex mutex;
    std::vector<std::pair<void*, size_t>> mappings;  // (address, bytes)
    size_t bytes = 0;
};

Kept& kept() {
    // never destroyed: traces may be given back during static destruction
    static Kept* k = new Kept;
    return *k;
}

}  // namespace

size_t page_size() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
}

void* map_pages(size_t bytes) {
    {
        Kept& k = kept();
        const std::lock_guard<std::mutex> lock(k.mutex);
        for (size_t i = k.mappings.size(); i-- > 0;) {
            if (k.mappings[i].second == bytes) {
                void* p = k.mappings[i].first;
                k.mappings.erase(k.mappings.begin() + static_cast<std::ptrdiff_t>(i));
                k.bytes -= bytes;
                return p;
            }
        }
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;
}

void unmap_pages(void* p, size_t bytes) {
    {
        Kept& k = kept();
        const std::lock_guard<std::mutex> lock(k.mutex);
        if (k.bytes + bytes <= kKeptBytes) {
            k.mappings.emplace_back(p, bytes);
            k.bytes += bytes;
            return;
        }
    }
    munmap(p, bytes);
}

}  // namespace lav::trace
