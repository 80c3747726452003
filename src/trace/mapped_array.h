// src/trace/mapped_array.h — a growable array in pages mapped for it alone, off the malloc heap;
// the tracer's record store, not a general container.
//
// The tracer records while the traced code allocates its buffers. Blocks of the tracer's own
// on the malloc heap land between those buffers and change how glibc reuses, trims and faults
// back the heap: the traced code then runs on different memory with tracing on than off.
// Kept in their own mappings, the tracer's records leave the traced code's heap as it would be
// without them.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

namespace lav::trace {

/// `bytes` (a multiple of the page size) of zero or stale memory: a mapping given back
/// earlier of that size, or a new one. Throws std::bad_alloc.
void* map_pages(size_t bytes);
/// Gives back a mapping of map_pages. A few MiB of them are kept for the next traces, whose
/// arrays grow through the same sizes: their pages are backed already, where a new mapping
/// faults in every page it writes (some 100 a simple_gla forward and backward).
void unmap_pages(void* p, size_t bytes);
/// The page size.
size_t page_size();

/// A vector of trivially copyable T in memory mapped from the system (mmap), grown by doubling.
/// Pages are only backed once written, so a large reserve() costs address space, not memory.
///
///   MappedArray<int64_t> a;
///   a.push_back(3);
///   a.append(sizes.begin(), sizes.end());
template <typename T>
class MappedArray {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

  public:
    MappedArray() = default;
    ~MappedArray() { release(); }
    MappedArray(MappedArray&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)),
          size_(std::exchange(other.size_, 0)),
          capacity_(std::exchange(other.capacity_, 0)) {}
    MappedArray& operator=(MappedArray&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
            capacity_ = std::exchange(other.capacity_, 0);
        }
        return *this;
    }
    MappedArray(const MappedArray&) = delete;
    MappedArray& operator=(const MappedArray&) = delete;

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    T* data() { return data_; }
    const T* data() const { return data_; }
    T* begin() { return data_; }
    T* end() { return data_ + size_; }
    const T* begin() const { return data_; }
    const T* end() const { return data_ + size_; }
    T& operator[](size_t i) { return data_[i]; }
    const T& operator[](size_t i) const { return data_[i]; }
    T& back() { return data_[size_ - 1]; }

    /// Appends a value-initialised T and returns it.
    T& emplace_back() {
        if (size_ == capacity_) grow(size_ + 1);
        return *new (data_ + size_++) T{};
    }
    void push_back(const T& value) { emplace_back() = value; }
    template <typename It>
    void append(It first, It last) {
        const size_t n = static_cast<size_t>(last - first);
        if (size_ + n > capacity_) grow(size_ + n);
        for (; first != last; ++first) new (data_ + size_++) T(*first);
    }

    /// Keeps the first n elements (n <= size()).
    void shrink_to(size_t n) { size_ = n; }
    void clear() { size_ = 0; }
    void reserve(size_t n) {
        if (n > capacity_) grow(n);
    }
    /// n copies of `value`, in place of the contents.
    void assign(size_t n, const T& value) {
        reserve(n);
        for (size_t i = 0; i < n; ++i) new (data_ + i) T(value);
        size_ = n;
    }

  private:
    static size_t page_bytes(size_t bytes) {
        const size_t page = page_size();
        return (bytes + page - 1) / page * page;
    }
    void grow(size_t min_capacity) {
        size_t capacity = capacity_ == 0 ? 1 : 2 * capacity_;
        if (capacity < min_capacity) capacity = min_capacity;
        const size_t bytes = page_bytes(capacity * sizeof(T));
        void* p = map_pages(bytes);
        if (size_ > 0) std::memcpy(p, data_, size_ * sizeof(T));
        release();
        data_ = static_cast<T*>(p);
        capacity_ = bytes / sizeof(T);
    }
    void release() {
        if (data_ != nullptr) unmap_pages(data_, page_bytes(capacity_ * sizeof(T)));
        data_ = nullptr;
        capacity_ = 0;
    }

    T* data_ = nullptr;
    size_t size_ = 0;
    size_t capacity_ = 0;
};

}  // namespace lav::trace
