#pragma once

// Private to compute/portable: the blocked matrix product of matmul.h as a template over the SIMD
// width, included by one source file per instruction set (matmul_generic.cpp, matmul_avx2.cpp,
// matmul_avx512.cpp), each compiled with its own -m flags. Everything here has internal linkage
// and uses no standard-library template: a function compiled for AVX-512 must never be the one the
// linker keeps for code that runs on a CPU without it. Scratch memory comes from the caller.
//
// Loops as in BLIS (Van Zee and van de Geijn): columns in blocks of NC, the sum's k in blocks of
// KC, rows in blocks of MC; B's block is packed into panels of NR columns and A's into panels of
// MR rows; a micro-kernel keeps an MR x NR tile of C in registers and runs its k in order. A sum
// that spans several KC blocks is stored in C between blocks and loaded again: a float32 store
// and load change nothing, so every element still adds its terms one at a time in k order.

#include "matrixview.h"

#include <cstdint>
#include <cstring>

namespace tessera::compute::portable::detail {

// What a kernel needs: the product's operands and the caller's scratch.
struct MatmulCall {
    MatrixView a;
    MatrixView b;
    float* c;
    std::int64_t ldc;
    std::int64_t m;
    std::int64_t n;
    std::int64_t k;
    int threads;
    float* packedA; // MatmulKernel::packedASize floats
    float* packedB; // MatmulKernel::packedBSize floats
};

struct MatmulKernel {
    void (*run)(const MatmulCall& call);
    std::int64_t packedASize;
    std::int64_t packedBSize;
    std::int64_t columns; // NR: a product of at most this many columns wastes no lane of a wider one
};

// Each instruction set's kernels: the wide one, and a narrow one (one vector of columns, more rows)
// for products of few columns (a convolution of 16 channels).
struct MatmulKernels {
    MatmulKernel wide;
    MatmulKernel narrow;
};
MatmulKernels genericKernels();
#if defined(__x86_64__)
MatmulKernels avx2Kernels();
MatmulKernels avx512Kernels();
#endif

} // namespace tessera::compute::portable::detail

#ifdef TESSERA_MATMUL_KERNEL_BODY

namespace {

using tessera::compute::portable::MatrixView;
using tessera::compute::portable::detail::MatmulCall;
using tessera::compute::portable::detail::MatmulKernel;

inline std::int64_t smaller(std::int64_t a, std::int64_t b)
{
    return a < b ? a : b;
}

// W float32 lanes (4: SSE2 or NEON, 8: AVX2, 16: AVX-512); tiles of MR rows by NRV vectors.
template<int W, int MR, int NRV> struct Blocked {
    typedef float Vector __attribute__((vector_size(W * 4)));
    static constexpr std::int64_t NR = W * NRV;
    static constexpr std::int64_t KC = 256;
    static constexpr std::int64_t MC = MR * 16;
    static constexpr std::int64_t NC = NR * 16;

    // Panels of NR columns of B's block: panel q holds kc rows of NR values, zeros past n.
    static void packB(
        const MatrixView& b, float* out, std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc, std::int64_t q)
    {
        float* panel = out + q * kc * NR;
        const std::int64_t j0 = jc + q * NR, width = smaller(NR, nc - q * NR);
        for (std::int64_t p = 0; p < kc; ++p) {
            float* row = panel + p * NR;
            const float* source = b.data + (pc + p) * b.rowStride + j0 * b.colStride;
            std::int64_t l = 0;
            if (b.colStride == 1 && width == NR) { // a whole panel row: a fixed-size copy the compiler inlines
#pragma GCC unroll 4
                for (int v = 0; v < NR; ++v)
                    row[v] = source[v];
                continue;
            }
            if (b.colStride == 1) {
                for (; l < width; ++l)
                    row[l] = source[l];
            } else {
                for (; l < width; ++l)
                    row[l] = source[l * b.colStride];
            }
            for (; l < NR; ++l)
                row[l] = 0.0f;
        }
    }

    // Panels of MR rows of A's block: panel r holds kc columns of MR values, zeros past m.
    static void packA(
        const MatrixView& a, float* out, std::int64_t ic, std::int64_t mc, std::int64_t pc, std::int64_t kc, std::int64_t r)
    {
        float* panel = out + r * kc * MR;
        const std::int64_t i0 = ic + r * MR, height = smaller(MR, mc - r * MR);
        for (std::int64_t p = 0; p < kc; ++p) {
            float* column = panel + p * MR;
            const float* source = a.data + i0 * a.rowStride + (pc + p) * a.colStride;
            std::int64_t l = 0;
            for (; l < height; ++l)
                column[l] = source[l * a.rowStride];
            for (; l < MR; ++l)
                column[l] = 0.0f;
        }
    }

    // C's mr x nr tile += the panels' product over kc, or = it when first (the sum starts at 0).
    static void micro(std::int64_t kc, const float* ap, const float* bp, float* c, std::int64_t ldc, std::int64_t mr,
        std::int64_t nr, bool first)
    {
        Vector accumulator[MR][NRV];
        float tile[MR * NR];
        const bool full = mr == MR && nr == NR;
        float* target = full ? c : tile;
        const std::int64_t stride = full ? ldc : NR;
        if (!full && !first) {
            for (std::int64_t r = 0; r < mr; ++r)
                std::memcpy(tile + r * NR, c + r * ldc, std::size_t(nr) * sizeof(float));
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
            for (int v = 0; v < NRV; ++v) {
                if (first)
                    accumulator[r][v] = Vector {};
                else
                    std::memcpy(&accumulator[r][v], target + r * stride + v * W, sizeof(Vector));
            }
        }
        for (std::int64_t p = 0; p < kc; ++p) {
            Vector b[NRV];
#pragma GCC unroll 4
            for (int v = 0; v < NRV; ++v)
                std::memcpy(&b[v], bp + p * NR + v * W, sizeof(Vector));
            const float* column = ap + p * MR;
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) {
                const float a = column[r];
#pragma GCC unroll 4
                for (int v = 0; v < NRV; ++v)
                    accumulator[r][v] = accumulator[r][v] + a * b[v];
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
            for (int v = 0; v < NRV; ++v)
                std::memcpy(target + r * stride + v * W, &accumulator[r][v], sizeof(Vector));
        }
        if (!full) {
            for (std::int64_t r = 0; r < mr; ++r)
                std::memcpy(c + r * ldc, tile + r * NR, std::size_t(nr) * sizeof(float));
        }
    }

    // One thread: the same loops without OpenMP's work-sharing, whose barriers cost more than a
    // small block's arithmetic (a product with k = 50,000 has 196 blocks of k).
    static void runSerial(const MatmulCall& call)
    {
        float* const packedA = call.packedA;
        float* const packedB = call.packedB;
        for (std::int64_t jc = 0; jc < call.n; jc += NC) {
            const std::int64_t nc = smaller(NC, call.n - jc), panelsB = (nc + NR - 1) / NR;
            for (std::int64_t pc = 0; pc < call.k; pc += KC) {
                const std::int64_t kc = smaller(KC, call.k - pc);
                const bool first = pc == 0;
                for (std::int64_t q = 0; q < panelsB; ++q)
                    packB(call.b, packedB, pc, kc, jc, nc, q);
                for (std::int64_t ic = 0; ic < call.m; ic += MC) {
                    const std::int64_t mc = smaller(MC, call.m - ic), panelsA = (mc + MR - 1) / MR;
                    for (std::int64_t r = 0; r < panelsA; ++r)
                        packA(call.a, packedA, ic, mc, pc, kc, r);
                    for (std::int64_t q = 0; q < panelsB; ++q) {
                        for (std::int64_t r = 0; r < panelsA; ++r) {
                            const std::int64_t i = ic + r * MR, j = jc + q * NR;
                            micro(kc, packedA + r * kc * MR, packedB + q * kc * NR, call.c + i * call.ldc + j, call.ldc,
                                smaller(MR, call.m - i), smaller(NR, call.n - j), first);
                        }
                    }
                }
            }
        }
    }

    static void run(const MatmulCall& call)
    {
        if (call.threads <= 1) {
            runSerial(call);
            return;
        }
        float* const packedA = call.packedA;
        float* const packedB = call.packedB;
#pragma omp parallel num_threads(call.threads)
        for (std::int64_t jc = 0; jc < call.n; jc += NC) {
            const std::int64_t nc = smaller(NC, call.n - jc), panelsB = (nc + NR - 1) / NR;
            for (std::int64_t pc = 0; pc < call.k; pc += KC) {
                const std::int64_t kc = smaller(KC, call.k - pc);
                const bool first = pc == 0;
#pragma omp for schedule(static)
                for (std::int64_t q = 0; q < panelsB; ++q)
                    packB(call.b, packedB, pc, kc, jc, nc, q);
                for (std::int64_t ic = 0; ic < call.m; ic += MC) {
                    const std::int64_t mc = smaller(MC, call.m - ic), panelsA = (mc + MR - 1) / MR;
#pragma omp for schedule(static)
                    for (std::int64_t r = 0; r < panelsA; ++r)
                        packA(call.a, packedA, ic, mc, pc, kc, r);
#pragma omp for collapse(2) schedule(static)
                    for (std::int64_t q = 0; q < panelsB; ++q) {
                        for (std::int64_t r = 0; r < panelsA; ++r) {
                            const std::int64_t i = ic + r * MR, j = jc + q * NR;
                            micro(kc, packedA + r * kc * MR, packedB + q * kc * NR, call.c + i * call.ldc + j, call.ldc,
                                smaller(MR, call.m - i), smaller(NR, call.n - j), first);
                        }
                    }
                }
            }
        }
    }

    static MatmulKernel kernel()
    {
        return { &run, MC * KC, KC * NC, NR };
    }
};

} // namespace

#endif
