#include "matmul.h"

#include "matmulkernel.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tessera::compute::portable {

namespace {

Isa detectedIsa()
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return Isa::Avx512;
    if (__builtin_cpu_supports("avx2"))
        return Isa::Avx2;
#endif
    return Isa::Generic;
}

Isa initialIsa()
{
    const char* wanted = std::getenv("TESSERA_PORTABLE_ISA");
    if (wanted) {
        for (Isa isa : { Isa::Generic, Isa::Avx2, Isa::Avx512 }) {
            if (std::strcmp(wanted, isaName(isa)) == 0 && isaAvailable(isa))
                return isa;
        }
    }
    return detectedIsa();
}

std::atomic<Isa>& chosenIsa()
{
    static std::atomic<Isa> isa { initialIsa() };
    return isa;
}

detail::MatmulKernels kernelsOf(Isa isa)
{
    switch (isa) {
#if defined(__x86_64__)
    case Isa::Avx512:
        return detail::avx512Kernels();
    case Isa::Avx2:
        return detail::avx2Kernels();
#endif
    default:
        return detail::genericKernels();
    }
}

// Each calling thread's packing buffers, kept between calls: a layer's product runs every step.
float* scratch(std::vector<float>& buffer, std::int64_t size)
{
    if (std::int64_t(buffer.size()) < size)
        buffer.resize(std::size_t(size));
    return buffer.data();
}

} // namespace

const char* isaName(Isa isa)
{
    switch (isa) {
    case Isa::Generic:
        return "generic";
    case Isa::Avx2:
        return "avx2";
    case Isa::Avx512:
        return "avx512";
    case Isa::Auto:
        break;
    }
    return "auto";
}

bool isaAvailable(Isa isa)
{
    switch (isa) {
    case Isa::Auto:
    case Isa::Generic:
        return true;
    case Isa::Avx2:
        return detectedIsa() == Isa::Avx2 || detectedIsa() == Isa::Avx512;
    case Isa::Avx512:
        return detectedIsa() == Isa::Avx512;
    }
    return false;
}

Isa currentIsa()
{
    return chosenIsa().load();
}

bool forceIsa(Isa isa)
{
    if (!isaAvailable(isa))
        return false;
    chosenIsa().store(isa == Isa::Auto ? initialIsa() : isa);
    return true;
}

void matmul(MatrixView a, MatrixView b, float* c, std::int64_t ldc, std::int64_t m, std::int64_t n, std::int64_t k, int threads)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) { // an empty sum is 0
        for (std::int64_t i = 0; i < m; ++i)
            std::memset(c + i * ldc, 0, std::size_t(n) * sizeof(float));
        return;
    }
    thread_local std::vector<float> packedA, packedB;
    const auto kernels = kernelsOf(currentIsa());
    const auto& kernel = n <= kernels.narrow.columns ? kernels.narrow : kernels.wide;
    kernel.run({ a, b, c, ldc, m, n, k, threads < 1 ? 1 : threads, scratch(packedA, kernel.packedASize),
        scratch(packedB, kernel.packedBSize) });
}

void matmulReference(MatrixView a, MatrixView b, float* c, std::int64_t ldc, std::int64_t m, std::int64_t n, std::int64_t k)
{
    for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
            float sum = 0.0f;
            for (std::int64_t p = 0; p < k; ++p)
                sum = sum + a.at(i, p) * b.at(p, j);
            c[i * ldc + j] = sum;
        }
    }
}

} // namespace tessera::compute::portable
