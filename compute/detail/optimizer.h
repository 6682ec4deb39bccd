#pragma once

// Private to compute/: includes torch.

#include "tensors.h"

#include <core/error.h>
#include <core/jobspec.h>

namespace tessera::compute::detail {

// SGD (momentum, Nesterov, weight decay) and Adam with the update rules of torch.optim.SGD and
// torch.optim.Adam (single-tensor path). Tessera keeps its own so that the optimizer state is
// plain named tensors: a paused shard saves it and a verifier restores it bit for bit.
class Optimizer {
public:
    Optimizer(core::OptimizerSpec spec, NamedTensors parameters);

    void zeroGrad();
    void step();
    // After the last step: the gradients' memory is freed (a model's worth), since no step follows.
    void releaseGradients();

    // "momentum/<param>" (sgd); "exp_avg/<param>", "exp_avg_sq/<param>" and "adam_step" (adam).
    NamedTensors state() const;
    core::Status loadState(const NamedTensors& state);

private:
    core::OptimizerSpec m_spec;
    NamedTensors m_parameters;
    std::vector<at::Tensor> m_first; // momentum buffer (sgd) or exp_avg (adam); undefined until step 1
    std::vector<at::Tensor> m_second; // exp_avg_sq (adam)
    std::int64_t m_steps = 0;
};

} // namespace tessera::compute::detail
