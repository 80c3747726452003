// kernels/common/cuda/tensor_core.cuh — mma.sync building blocks shared by the tensor-core kernels:
// 16-bit operand types, fragment loads from shared memory, fp32 operands split into two 16-bit
// halves, and asynchronous tile copies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/cuda/cuda_tensor.cuh"

namespace lav::cuda {

/// The 16-bit element type T of the mma operands.
template <typename T>
struct Half16;

template <>
struct Half16<__nv_bfloat16> {
    static constexpr DType dtype = DType::bf16;
    static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ float to(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ uint32_t bits(__nv_bfloat16 x) {
        return __bfloat16_as_ushort(x);
    }
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

template <>
struct Half16<__half> {
    static constexpr DType dtype = DType::f16;
    static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ float to(__half x) { return __half2float(x); }
    static __device__ __forceinline__ uint32_t bits(__half x) { return __half_as_ushort(x); }
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

template <typename T>
__device__ __forceinline__ uint32_t word(const T* x) {
    return *reinterpret_cast<const uint32_t*>(x);
}

template <typename T>
__device__ __forceinline__ float2 to_float2(uint32_t w);

template <>
__device__ __forceinline__ float2 to_float2<__nv_bfloat16>(uint32_t w) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
}

template <>
__device__ __forceinline__ float2 to_float2<__half>(uint32_t w) {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
}

/// lo and hi rounded to T and packed into one word, lo in the low half: one conversion
/// instruction for both, rounding as Half16<T>::from does.
template <typename T>
__device__ __forceinline__ uint32_t pair(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pair<__nv_bfloat16>(float lo, float hi) {
    const __nv_bfloat162 x = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&x);
}

template <>
__device__ __forceinline__ uint32_t pair<__half>(float lo, float hi) {
    const __half2 x = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&x);
}

/// x0 and x1 packed as a pair of halves hi + lo (~16 significant bits each, as mma_split takes
/// them): hi = pair<T>(x0, x1), lo the pair of what hi leaves out.
template <typename T>
__device__ __forceinline__ void split_pair(uint32_t& hi, uint32_t& lo, float x0, float x1) {
    hi = pair<T>(x0, x1);
    const float2 h = to_float2<T>(hi);
    lo = pair<T>(x0 - h.x, x1 - h.y);
}

/// The shared-memory address ldmatrix and cp.async take.
__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// The fragment loads below use ldmatrix: each lane addresses one 16-byte row of an 8×8
// matrix, so tiles need pitches of whole 16 bytes and columns at multiples of 8. Pitches of
// 8 extra elements put the eight rows of a matrix in distinct banks.

/// Four 8×8 matrices of 16-bit elements, each lane giving the shared-memory address of one
/// 16-byte row: lanes 0-7 the first matrix's, 8-15 the second's, and so on.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&a)[4], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(address));
}

/// Two 8×8 matrices, addressed by lanes 0-15 as ldmatrix_x4.
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&b)[2], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(address));
}

/// The address lane `lane` gives fragment_a for rows r0 + [0, 16), contraction c0.
template <typename T, int P>
__device__ __forceinline__ unsigned fragment_a_address(const T (*x)[P], int r0, int c0) {
    // matrices (rows, columns): (r0, c0), (r0 + 8, c0), (r0, c0 + 8), (r0 + 8, c0 + 8)
    const int lane = threadIdx.x % 32;
    return smem_address(&x[r0 + lane % 16][c0 + lane / 16 * 8]);
}

/// The address lane `lane` gives fragment_b for columns n0 + [0, 8), contraction c0.
template <typename T, int P>
__device__ __forceinline__ unsigned fragment_b_address(const T (*y)[P], int n0, int c0) {
    // lanes 0-7 address the first matrix (columns n0, contraction c0), lanes 8-15 the second
    const int lane = threadIdx.x % 16;
    return smem_address(&y[n0 + lane % 8][c0 + lane / 8 * 8]);
}

/// The address lane `lane` gives ldmatrix_x4 for the 16×16 block at (r0, c0) of a tile as four
/// 8×8 matrices in row order, (r0, c0), (r0, c0 + 8), (r0 + 8, c0), (r0 + 8, c0 + 8);
/// fragment_a_address takes them in column order. Stored [column][contraction], the block is
/// the B fragments of columns r0 + [0, 8) and r0 + [8, 16): registers 0-1 the first, 2-3 the
/// second.
template <typename T, int P>
__device__ __forceinline__ unsigned quad_address(const T (*x)[P], int r0, int c0) {
    const int lane = threadIdx.x % 32;
    return smem_address(&x[r0 + lane / 16 * 8 + lane % 8][c0 + lane / 8 % 2 * 8]);
}

/// ldmatrix_x4 with each matrix transposed on the way.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&a)[4], unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(address));
}

/// The A fragment (rows r0 + [0, 16), contraction c0 + [0, 16)) of a row-major tile.
template <typename T, int P>
__device__ __forceinline__ void fragment_a(uint32_t (&a)[4], const T (*x)[P], int r0, int c0) {
    ldmatrix_x4(a, fragment_a_address(x, r0, c0));
}

/// The A fragment (rows r0 + [0, 16), contraction c0 + [0, 16)) of a tile stored
/// [contraction][row], transposed on the way.
template <typename T, int P>
__device__ __forceinline__ void fragment_a_rows(uint32_t (&a)[4], const T (*x)[P], int c0, int r0) {
    // matrices (contraction, rows): (c0, r0), (c0, r0 + 8), (c0 + 8, r0), (c0 + 8, r0 + 8)
    ldmatrix_x4_trans(a, quad_address(x, c0, r0));
}

/// The B fragment (columns n0 + [0, 8), contraction c0 + [0, 16)) of a tile stored
/// [column][contraction].
template <typename T, int P>
__device__ __forceinline__ void fragment_b(uint32_t (&b)[2], const T (*y)[P], int n0, int c0) {
    ldmatrix_x2(b, fragment_b_address(y, n0, c0));
}

/// The 8×8 matrix of 16-bit elements held as an mma C fragment's packed pairs (lane l: row
/// l / 4, columns 2·(l % 4) and + 1), transposed: lane l then holds row l / 4 of the
/// transpose. Taken by the whole warp.
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

/// 16 bytes from global to shared memory without a trip through registers (sm_80's
/// cp.async), or 16 zero bytes when !valid; complete after copies_wait().
__device__ __forceinline__ void copy16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)),
                 "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void copies_wait() { asm volatile("cp.async.wait_all;\n" ::); }

/// Threads of a block of the tensor-core kernels.
constexpr int kTensorCoreThreads = 256;

/// Rows [0, Rows) × columns [col0, col0 + W) of x (E-typed elements) in chunk (s, c0, len),
/// head h, into the row-major tile dst of pitch P; zeros past the chunk's end or x's width.
/// With `vec` (every row 16-byte aligned, widths a whole number of 16 bytes) the copies are
/// asynchronous, all of a chunk's in flight at once; otherwise element by element, widened
/// to D. Called by all Threads threads of the block.
template <typename E, typename D, int Rows, int W, int Threads = kTensorCoreThreads, int P>
__device__ void load_rows(D (*dst)[P], const Strided& x, const Span& s, int64_t c0, int len, int h,
                          int col0, int width, bool vec) {
    constexpr int kVec = 16 / sizeof(E);
    const E* base = static_cast<const E*>(x.data);
    // the chunk's first row, found once: the copies step from it by whole rows
    const int64_t first = at(x, s, c0, h) + col0;
    if (vec && sizeof(D) == sizeof(E)) {
        // each thread keeps one column of 16 bytes and steps down the rows
        constexpr int kPerRow = W / kVec, kRowStep = Threads / kPerRow;
        static_assert(Threads % kPerRow == 0 && Rows % kRowStep == 0,
                      "a tile's 16-byte columns divide the block");
        const int r0 = threadIdx.x / kPerRow, c = threadIdx.x % kPerRow * kVec;
        const bool column = col0 + c < width;
        const E* from = base + first + r0 * x.st + c;
        const int64_t step = kRowStep * x.st;
        if (column && len >= Rows) {
            // a whole chunk: no row to check
#pragma unroll
            for (int n = 0; n < Rows / kRowStep; ++n, from += step)
                copy16(&dst[r0 + n * kRowStep][c], from, true);
            return;
        }
#pragma unroll
        for (int n = 0; n < Rows / kRowStep; ++n, from += step) {
            const int r = r0 + n * kRowStep;
            const bool valid = column && r < len;
            copy16(&dst[r][c], valid ? from : base, valid);
        }
        return;
    }
    for (int e = threadIdx.x; e < Rows * W; e += Threads) {
        const int r = e / W, c = e % W;
        const bool valid = r < len && col0 + c < width;
        dst[r][c] = D(valid ? load(x.data, x.dtype, first + r * x.st + c) : 0.f);
    }
}

/// The B fragment (contraction k0 + [0, 16), columns n0 + [0, 8)) of a tile stored
/// [contraction][column], transposed on the way.
template <typename T, int P>
__device__ __forceinline__ void fragment_b_rows(uint32_t (&b)[2], const T (*x)[P], int k0, int n0) {
    // lanes 0-7 address the rows of the first 8×8 matrix, lanes 8-15 those of the second
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_address(&x[k0 + threadIdx.x % 16][n0])));
}

/// The A fragment (rows r0 + [0, 16), contraction c0 + [0, 16)) of an fp32 tile x, or of xᵀ
/// when Transposed, as two 16-bit halves hi + lo (~16 significant bits).
template <typename T, bool Transposed, int P>
__device__ __forceinline__ void fragment_a_split(uint32_t (&hi)[4], uint32_t (&lo)[4],
                                                 const float (*x)[P], int r0, int c0) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int i = r0 + g + (u & 1) * 8, j = c0 + 2 * t + (u & 2) * 4;
        const float x0 = Transposed ? x[j][i] : x[i][j];
        const float x1 = Transposed ? x[j + 1][i] : x[i][j + 1];
        split_pair<T>(hi[u], lo[u], x0, x1);
    }
}

/// c += a·b for operands given as two halves each: hi·hi + hi·lo + lo·hi (lo·lo is below
/// the ~16 significant bits the halves keep).
template <typename T>
__device__ __forceinline__ void mma_split(float (&c)[4], const uint32_t (&a_hi)[4],
                                          const uint32_t (&a_lo)[4], const uint32_t (&b_hi)[2],
                                          const uint32_t (&b_lo)[2]) {
    Half16<T>::mma(c, a_hi, b_hi);
    Half16<T>::mma(c, a_hi, b_lo);
    Half16<T>::mma(c, a_lo, b_hi);
}

/// acc += (a + a_lo)·(x_hi + x_lo) less a_lo·x_lo, for the B fragment (contraction k0,
/// columns n0) of a tile stored [contraction][column] as two halves: the a_lo term only with
/// `a_split`, the x_lo term only with `x_split`.
template <typename T, int P>
__device__ __forceinline__ void mma_split_rows(float (&acc)[4], const uint32_t (&a)[4],
                                               const uint32_t (&a_lo)[4], bool a_split,
                                               const T (*x_hi)[P], const T (*x_lo)[P], int k0,
                                               int n0, bool x_split) {
    uint32_t b[2];
    fragment_b_rows(b, x_hi, k0, n0);
    Half16<T>::mma(acc, a, b);
    if (a_split) Half16<T>::mma(acc, a_lo, b);
    if (!x_split) return;
    fragment_b_rows(b, x_lo, k0, n0);
    Half16<T>::mma(acc, a, b);
}

/// Whether every row of x starts 16-byte aligned and `width` elements are whole 16 bytes.
inline bool rows_aligned(const Strided& x, int width) {
    const int per16 = x.dtype == DType::f32 ? 4 : 8;
    return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.sb % per16 == 0 &&
           x.st % per16 == 0 && x.sh % per16 == 0 && width % per16 == 0;
}

}  // namespace lav::cuda
