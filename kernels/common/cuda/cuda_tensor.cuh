// kernels/common/cuda/cuda_tensor.cuh — device helpers for cuda_tensor.h: dtype-generic loads and
// stores (widened to fp32, rounded once on store) and sequence spans.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda/cuda_tensor.h"

namespace lav::cuda {

__device__ __forceinline__ float load(const void* p, DType d, int64_t i) {
    switch (d) {
        case DType::f32:
            return static_cast<const float*>(p)[i];
        case DType::f16:
            return __half2float(static_cast<const __half*>(p)[i]);
        default:
            return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    }
}

/// The raw bits of element i of a 32- or 16-bit tensor, widened by widen() later: load()
/// split in two, so that the load's latency can pass before its value is needed.
__device__ __forceinline__ uint32_t raw(const void* p, DType d, int64_t i) {
    return d == DType::f32 ? static_cast<const uint32_t*>(p)[i]
                           : static_cast<const unsigned short*>(p)[i];
}

__device__ __forceinline__ float widen(uint32_t bits, DType d) {
    switch (d) {
        case DType::f32:
            return __uint_as_float(bits);
        case DType::f16:
            return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
        default:
            return __uint_as_float(bits << 16);
    }
}

/// Elements [i, i + 4) in one load: i a multiple of 4, the data 16-byte aligned.
__device__ __forceinline__ float4 load_quad(const void* p, DType d, int64_t i) {
    if (d == DType::f32) return *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    const uint2 w = *reinterpret_cast<const uint2*>(static_cast<const unsigned short*>(p) + i);
    return make_float4(widen(w.x & 0xffffu, d), widen(w.x >> 16, d), widen(w.y & 0xffffu, d),
                       widen(w.y >> 16, d));
}

__device__ __forceinline__ void store(void* p, DType d, int64_t i, float x) {
    switch (d) {
        case DType::f32:
            static_cast<float*>(p)[i] = x;
            break;
        case DType::f16:
            static_cast<__half*>(p)[i] = __float2half_rn(x);
            break;
        default:
            static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x);
            break;
    }
}

/// x rounded to E.
template <typename E>
__device__ __forceinline__ E narrow(float x) {
    if constexpr (std::is_same_v<E, __half>)
        return __float2half_rn(x);
    else if constexpr (std::is_same_v<E, __nv_bfloat16>)
        return __float2bfloat16_rn(x);
    else
        return x;
}

/// x widened from E, exactly.
template <typename E>
__device__ __forceinline__ float widened(E x) {
    if constexpr (std::is_same_v<E, __half>)
        return __half2float(x);
    else if constexpr (std::is_same_v<E, __nv_bfloat16>)
        return __bfloat162float(x);
    else
        return x;
}

/// Two adjacent elements of E, loaded or stored as one aligned word.
template <typename E>
struct alignas(2 * sizeof(E)) ElementPair {
    E a, b;
};

template <typename E>
__device__ __forceinline__ void store_pair_as(void* p, int64_t i, float x0, float x1, bool both) {
    // two adjacent elements, stored at once when they are aligned as one
    E* y = static_cast<E*>(p) + i;
    if (both && reinterpret_cast<uintptr_t>(y) % sizeof(ElementPair<E>) == 0) {
        *reinterpret_cast<ElementPair<E>*>(y) = ElementPair<E>{narrow<E>(x0), narrow<E>(x1)};
        return;
    }
    y[0] = narrow<E>(x0);
    if (both) y[1] = narrow<E>(x1);
}

/// Elements i and, when `both`, i + 1: one store where they share an aligned word.
__device__ __forceinline__ void store_pair(void* p, DType d, int64_t i, float x0, float x1,
                                           bool both) {
    switch (d) {
        case DType::f32:
            return store_pair_as<float>(p, i, x0, x1, both);
        case DType::f16:
            return store_pair_as<__half>(p, i, x0, x1, both);
        default:
            return store_pair_as<__nv_bfloat16>(p, i, x0, x1, both);
    }
}

/// Sequence n of a batch: its batch index, first packed time step and length.
struct Span {
    int64_t b, bos, len;
};

__device__ __forceinline__ Span span(const Sequences& s, int64_t n) {
    if (s.cu_seqlens == nullptr) return {n, 0, s.t};
    const int64_t bos = s.cu_int64 ? static_cast<const int64_t*>(s.cu_seqlens)[n]
                                   : static_cast<const int32_t*>(s.cu_seqlens)[n];
    const int64_t eos = s.cu_int64 ? static_cast<const int64_t*>(s.cu_seqlens)[n + 1]
                                   : static_cast<const int32_t*>(s.cu_seqlens)[n + 1];
    return {0, bos, eos - bos};
}

/// Offset m of the packed sequences' cu_seqlens.
__device__ __forceinline__ int64_t offset(const Sequences& s, int64_t m) {
    return s.cu_int64 ? static_cast<const int64_t*>(s.cu_seqlens)[m]
                      : static_cast<const int32_t*>(s.cu_seqlens)[m];
}

/// The first chunk slot of sequence n (span s), as chunk_slots() lays them out.
__device__ __forceinline__ int64_t first_slot(const Sequences& q, int size, int64_t n,
                                              const Span& s) {
    return q.cu_seqlens == nullptr ? n * ((q.t + size - 1) / size) : s.bos / size + n;
}

/// Chunk c of sequence n: steps [c0, c0 + len) of span s; len 0 for a slot past the end.
struct Chunk {
    Span s;
    int64_t n, c0;
    int len;
};

/// The chunk in `slot`; varlen slots are found by bisection on first_slot(), which strictly
/// increases with n.
__device__ __forceinline__ Chunk chunk_at(const Sequences& q, int size, int64_t slot) {
    int64_t n = 0;
    if (q.cu_seqlens == nullptr) {
        n = slot / ((q.t + size - 1) / size);
    } else {
        int64_t hi = q.n - 1;
        while (n < hi) {
            const int64_t mid = (n + hi + 1) / 2;
            if (offset(q, mid) / size + mid <= slot)
                n = mid;
            else
                hi = mid - 1;
        }
    }
    Chunk c;
    c.s = span(q, n);
    c.n = n;
    c.c0 = (slot - first_slot(q, size, n, c.s)) * size;
    c.len = c.c0 < c.s.len ? int(c.s.len - c.c0 < size ? c.s.len - c.c0 : size) : 0;
    return c;
}

/// x rounded to d and widened again: a storage point of a precision contract, kept in a
/// register.
__device__ __forceinline__ float rounded(float x, DType d) {
    switch (d) {
        case DType::f32:
            return x;
        case DType::f16:
            return __half2float(__float2half_rn(x));
        default:
            return __bfloat162float(__float2bfloat16_rn(x));
    }
}

/// Calls f(round), where round(x) is x rounded to d and widened again, with d fixed at
/// compile time: a loop over many elements dispatches on the dtype once, not per element.
template <typename F>
__device__ __forceinline__ void with_rounding(DType d, F&& f) {
    switch (d) {
        case DType::f32:
            return f([](float x) { return x; });
        case DType::f16:
            return f([](float x) { return __half2float(__float2half_rn(x)); });
        default:
            return f([](float x) { return __bfloat162float(__float2bfloat16_rn(x)); });
    }
}

/// Calls f(E{}) with E the element type of d (float, __half or __nv_bfloat16) fixed at compile
/// time, as with_rounding does for a rounding.
template <typename F>
__device__ __forceinline__ void with_element(DType d, F&& f) {
    switch (d) {
        case DType::f32:
            return f(float{});
        case DType::f16:
            return f(__half{});
        default:
            return f(__nv_bfloat16{});
    }
}

/// Element offset of (step t of span s, head h, channel 0) in x.
__device__ __forceinline__ int64_t at(const Strided& x, const Span& s, int64_t t, int64_t h) {
    return s.b * x.sb + (s.bos + t) * x.st + h * x.sh;
}

/// Row of (span s, step t) in a packed [B * T, ...] workspace.
__device__ __forceinline__ int64_t row(const Sequences& q, const Span& s, int64_t t) {
    return s.b * q.t + s.bos + t;
}

/// exp(x) as one multiply and one ex2.approx, results below FLT_MIN flushed to zero: a few fp32
/// ulps from expf (which takes about eight instructions) for the arguments the kernels' decays
/// give, where a pairwise factor is formed once per term of a sum.
__device__ __forceinline__ float fast_exp(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

}  // namespace lav::cuda
