// The portable matrix product in 4 float32 lanes: SSE2 on x86-64 (its baseline), NEON on arm64.
#define TESSERA_MATMUL_KERNEL_BODY
#include "matmulkernel.h"

namespace tessera::compute::portable::detail {

MatmulKernels genericKernels()
{
    return { Blocked<4, 4, 2>::kernel(), Blocked<4, 8, 1>::kernel() };
}

} // namespace tessera::compute::portable::detail
