#pragma once

// Private to compute/: includes torch.

#include "tensors.h"

#include <core/error.h>
#include <core/jobspec.h>

#include <functional>

namespace tessera::compute::detail {

// SGD (momentum, Nesterov, weight decay), Adam and AdamW (decoupled weight decay) with the update
// rules of torch.optim.SGD, Adam and AdamW (single-tensor path), after gradients are clipped to
// the spec's global norm as torch.nn.utils.clip_grad_norm_ does. Tessera keeps its own so that the
// optimizer state is plain named tensors: a paused shard saves it and a verifier restores it bit
// for bit.
class Optimizer {
public:
    Optimizer(core::OptimizerSpec spec, NamedTensors parameters);

    void zeroGrad();
    // One update at learning rate lr (the spec's schedule gives it: OptimizerSpec::learningRateAt).
    void step(double lr);
    void step() { step(m_spec.lr); }
    // After the last step: the gradients' memory is freed (a model's worth), since no step follows.
    void releaseGradients();
    // A stage task's (docs/PERFORMANCE.md, "Pipeline stages"): the parameters it does not train, and
    // their buffers, let go of (each parameter left empty), so that it holds only its share.
    void releaseAllBut(const std::function<bool(const std::string&)>& keeps);

    // "momentum/<param>" (sgd); "exp_avg/<param>", "exp_avg_sq/<param>" and "adam_step" (adam, adamw).
    NamedTensors state() const;
    core::Status loadState(const NamedTensors& state);
    // The state before any step, as state() names it: zero buffers for every parameter (none for
    // sgd without momentum) and adam_step 0. Loaded, it steps to the same values as a fresh optimizer.
    NamedTensors initialState() const;

private:
    // In portable mode the step's program (portablestep.h) updates the parameters and this state.
    friend class PortableStep;

    void clipGradients();
    core::OptimizerSpec m_spec;
    NamedTensors m_parameters;
    std::vector<at::Tensor> m_first; // momentum buffer (sgd) or exp_avg (adam); undefined until step 1
    std::vector<at::Tensor> m_second; // exp_avg_sq (adam)
    std::int64_t m_steps = 0;
};

} // namespace tessera::compute::detail
