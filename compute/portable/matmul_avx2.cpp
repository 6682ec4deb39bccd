// The portable matrix product in 8 float32 lanes, built with -mavx2 and without -mfma (and with
// -ffp-contract=off): a multiply and an add stay two roundings. Run only where the CPU has AVX2.
#define TESSERA_MATMUL_KERNEL_BODY
#include "matmulkernel.h"

namespace tessera::compute::portable::detail {

MatmulKernels avx2Kernels()
{
    return { Blocked<8, 6, 2>::kernel(), Blocked<8, 12, 1>::kernel() };
}

} // namespace tessera::compute::portable::detail
