#pragma once

// How the matrix product (matmul.h) and its kernels (matmulkernel.h) see an operand.

#include <cstdint>

namespace tessera::compute::portable {

// A read-only matrix of float32 with any strides: element (r, c) is data[r * rowStride + c * colStride].
struct MatrixView {
    const float* data = nullptr;
    std::int64_t rowStride = 0;
    std::int64_t colStride = 1;

    float at(std::int64_t r, std::int64_t c) const { return data[r * rowStride + c * colStride]; }
};

// Row-major A[m, k] and its transpose as views.
inline MatrixView rowMajor(const float* data, std::int64_t columns)
{
    return { data, columns, 1 };
}
inline MatrixView transposed(const float* data, std::int64_t columns)
{
    return { data, 1, columns };
}

} // namespace tessera::compute::portable
