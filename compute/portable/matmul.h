#pragma once

// The one matrix product every portable layer is built on (linear, and convolution through its
// unfolded input): C = A B with a fixed order of float32 operations, whatever the CPU.
//
// The contract, for every output element: c = 0.0f; then for p = 0, 1, ..., k-1 in that order,
// c = c + a(i, p) * b(p, j), each product and each sum rounded to float32 on its own (never a fused
// multiply-add). Anything that computes exactly that is a valid implementation: the kernels below
// block the loops for the cache and run 4, 8 or 16 output elements side by side in SIMD lanes
// (SSE2/NEON, AVX2, AVX-512: chosen at run time), and split the output elements between threads,
// but never split or reorder one element's sum. So they give the bits of the plain triple loop.

#include "matrixview.h"

#include <cstdint>

namespace tessera::compute::portable {

// c[i * ldc + j] = sum over p of a(i, p) * b(p, j) for i < m, j < n, in the order above.
void matmul(
    MatrixView a, MatrixView b, float* c, std::int64_t ldc, std::int64_t m, std::int64_t n, std::int64_t k, int threads = 1);

// The same contract as the simplest loop that keeps it: the reference the fast kernels are tested
// against, and the definition a third party implements first.
void matmulReference(MatrixView a, MatrixView b, float* c, std::int64_t ldc, std::int64_t m, std::int64_t n, std::int64_t k);

// Which SIMD kernel matmul runs. Every one gives the same bits; the choice only changes the speed.
// Auto takes the widest this CPU has; TESSERA_PORTABLE_ISA (generic, avx2, avx512) in the
// environment overrides it, so tests can run each on one machine.
enum class Isa { Auto, Generic, Avx2, Avx512 };
// The kernel matmul runs now (never Auto).
Isa currentIsa();
// Whether this CPU (and build) can run a kernel.
bool isaAvailable(Isa isa);
// For tests: run this kernel from now on (Auto: back to the CPU's choice); false when unavailable.
bool forceIsa(Isa isa);
const char* isaName(Isa isa);

} // namespace tessera::compute::portable
