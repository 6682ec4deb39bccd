#include "optimizer.h"

#include <torch/torch.h>

#include <cmath>

namespace tessera::compute::detail {

Optimizer::Optimizer(core::OptimizerSpec spec, NamedTensors parameters)
    : m_spec(spec)
    , m_parameters(std::move(parameters))
    , m_first(m_parameters.size())
    , m_second(m_parameters.size())
{ }

void Optimizer::zeroGrad()
{
    for (auto& [name, parameter] : m_parameters) {
        if (parameter.grad().defined()) {
            parameter.mutable_grad().detach_();
            parameter.mutable_grad().zero_();
        }
    }
}

void Optimizer::releaseGradients()
{
    for (auto& [name, parameter] : m_parameters)
        parameter.mutable_grad().reset();
}

void Optimizer::releaseAllBut(const std::function<bool(const std::string&)>& keeps)
{
    for (std::size_t i = 0; i < m_parameters.size(); ++i) {
        auto& [name, parameter] = m_parameters[i];
        if (keeps(name))
            continue;
        parameter.set_data(at::empty({ 0 }, parameter.options()));
        m_first[i].reset();
        m_second[i].reset();
    }
}

void Optimizer::clipGradients()
{
    // clip_grad_norm_: the norm of the per-tensor L2 norms, in float32, and each gradient scaled by
    // max / (norm + 1e-6) when that is below 1.
    std::vector<at::Tensor> norms;
    for (auto& [name, parameter] : m_parameters) {
        if (parameter.grad().defined())
            norms.push_back(parameter.grad().norm(2.0));
    }
    if (norms.empty())
        return;
    const auto total = torch::stack(norms).norm(2.0);
    const auto factor = (m_spec.clipNorm / (total + 1e-6)).clamp_max(1.0);
    for (auto& [name, parameter] : m_parameters) {
        if (parameter.grad().defined())
            parameter.mutable_grad().mul_(factor);
    }
}

void Optimizer::step(double lr)
{
    torch::NoGradGuard noGrad;
    ++m_steps;
    if (m_spec.clipNorm > 0.0)
        clipGradients();
    const bool decoupled = m_spec.kind == core::OptimizerSpec::Kind::AdamW;
    for (std::size_t i = 0; i < m_parameters.size(); ++i) {
        auto& parameter = m_parameters[i].second;
        if (!parameter.grad().defined())
            continue;
        at::Tensor gradient = parameter.grad();
        if (decoupled)
            parameter.mul_(1.0 - lr * m_spec.weightDecay); // AdamW: the decay leaves the gradient alone
        else if (m_spec.weightDecay != 0.0)
            gradient = gradient.add(parameter, m_spec.weightDecay);

        if (m_spec.kind == core::OptimizerSpec::Kind::Sgd) {
            if (m_spec.momentum != 0.0) {
                auto& buffer = m_first[i];
                if (!buffer.defined())
                    buffer = gradient.clone().detach();
                else
                    buffer.mul_(m_spec.momentum).add_(gradient);
                gradient = m_spec.nesterov ? gradient.add(buffer, m_spec.momentum) : buffer;
            }
            parameter.add_(gradient, -lr);
            continue;
        }

        auto& expAvg = m_first[i];
        auto& expAvgSq = m_second[i];
        if (!expAvg.defined()) {
            expAvg = torch::zeros_like(parameter);
            expAvgSq = torch::zeros_like(parameter);
        }
        expAvg.mul_(m_spec.beta1).add_(gradient, 1.0 - m_spec.beta1);
        expAvgSq.mul_(m_spec.beta2).addcmul_(gradient, gradient, 1.0 - m_spec.beta2);
        const double biasCorrection1 = 1.0 - std::pow(m_spec.beta1, double(m_steps));
        const double biasCorrection2 = 1.0 - std::pow(m_spec.beta2, double(m_steps));
        const double stepSize = lr / biasCorrection1;
        const auto denominator = (expAvgSq.sqrt() / std::sqrt(biasCorrection2)).add_(m_spec.eps);
        parameter.addcdiv_(expAvg, denominator, -stepSize);
    }
}

NamedTensors Optimizer::state() const
{
    NamedTensors state;
    const bool adam = m_spec.isAdam();
    for (std::size_t i = 0; i < m_parameters.size(); ++i) {
        const auto& name = m_parameters[i].first;
        if (m_first[i].defined())
            state.emplace_back((adam ? "exp_avg/" : "momentum/") + name, m_first[i]);
        if (m_second[i].defined())
            state.emplace_back("exp_avg_sq/" + name, m_second[i]);
    }
    if (adam)
        state.emplace_back("adam_step", torch::tensor(m_steps, torch::kInt64));
    sortByName(state);
    return state;
}

NamedTensors Optimizer::initialState() const
{
    NamedTensors state;
    const bool adam = m_spec.isAdam();
    for (const auto& [name, parameter] : m_parameters) {
        if (adam) {
            state.emplace_back("exp_avg/" + name, torch::zeros_like(parameter));
            state.emplace_back("exp_avg_sq/" + name, torch::zeros_like(parameter));
        } else if (m_spec.momentum != 0.0) {
            state.emplace_back("momentum/" + name, torch::zeros_like(parameter));
        }
    }
    if (adam)
        state.emplace_back("adam_step", torch::tensor(std::int64_t(0), torch::kInt64));
    sortByName(state);
    return state;
}

core::Status Optimizer::loadState(const NamedTensors& state)
{
    auto find = [&](const std::string& name) -> at::Tensor {
        for (const auto& [key, tensor] : state) {
            if (key == name)
                return tensor;
        }
        return {};
    };
    const bool adam = m_spec.isAdam();
    for (std::size_t i = 0; i < m_parameters.size(); ++i) {
        const auto& [name, parameter] = m_parameters[i];
        auto first = find((adam ? "exp_avg/" : "momentum/") + name);
        auto second = find("exp_avg_sq/" + name);
        for (const auto& tensor : { first, second }) {
            if (tensor.defined() && tensor.sizes() != parameter.sizes())
                return core::Error { QStringLiteral("optimizer"),
                    QStringLiteral("saved optimizer state does not fit the model") };
        }
        m_first[i] = first.defined() ? first.to(parameter.device()).clone() : at::Tensor();
        m_second[i] = second.defined() ? second.to(parameter.device()).clone() : at::Tensor();
    }
    const auto steps = find("adam_step");
    m_steps = steps.defined() ? steps.item<std::int64_t>() : 0;
    return {};
}

} // namespace tessera::compute::detail
