// The portable matrix product in 16 float32 lanes, built with -mavx512f and without -mfma (and
// with -ffp-contract=off). Run only where the CPU has AVX-512F.
#define TESSERA_MATMUL_KERNEL_BODY
#include "matmulkernel.h"

namespace tessera::compute::portable::detail {

MatmulKernels avx512Kernels()
{
    return { Blocked<16, 8, 2>::kernel(), Blocked<16, 16, 1>::kernel() };
}

} // namespace tessera::compute::portable::detail
