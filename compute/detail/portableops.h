#pragma once

// Private to compute/: includes torch. The portable kernels (compute/portable) as LibTorch autograd
// functions, so that a zoo model trains through them unchanged (training.determinism portable).
// Inputs must be float32 on the CPU; they are made contiguous.

#include <ATen/core/Tensor.h>

namespace tessera::compute::detail {

// x [n, in], w [out, in], b [out] -> x w^T + b, gradients for all three.
at::Tensor portableLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
at::Tensor portableRelu(const at::Tensor& x);
// The mean cross-entropy of logits [n, classes] against int64 targets [n].
at::Tensor portableCrossEntropy(const at::Tensor& logits, const at::Tensor& targets);

} // namespace tessera::compute::detail
