#include "portableops.h"

#include <compute/portable/kernels.h>

#include <torch/torch.h>

namespace tessera::compute::detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor cpuFloat(const at::Tensor& t)
{
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat, "the portable kernels take float32 CPU tensors");
    return t.contiguous();
}

int threads()
{
    return at::get_num_threads(); // any count gives the same bits
}

struct Linear : torch::autograd::Function<Linear> {
    static at::Tensor forward(AutogradContext* context, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias)
    {
        const auto x = cpuFloat(input), w = cpuFloat(weight), b = cpuFloat(bias);
        TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && b.numel() == w.size(0),
            "portable linear: shapes do not fit");
        auto y = torch::empty({ x.size(0), w.size(0) }, x.options());
        portable::linearForward(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), x.size(0),
            x.size(1), w.size(0), threads());
        context->save_for_backward({ x, w });
        return y;
    }
    static variable_list backward(AutogradContext* context, variable_list outputs)
    {
        const auto saved = context->get_saved_variables();
        const auto& x = saved[0];
        const auto& w = saved[1];
        const auto dy = cpuFloat(outputs[0]);
        auto dx = torch::empty_like(x), dw = torch::empty_like(w), db = torch::empty({ w.size(0) }, w.options());
        portable::linearBackward(x.data_ptr<float>(), w.data_ptr<float>(), dy.data_ptr<float>(), dx.data_ptr<float>(),
            dw.data_ptr<float>(), db.data_ptr<float>(), x.size(0), x.size(1), w.size(0), threads());
        return { dx, dw, db };
    }
};

struct Relu : torch::autograd::Function<Relu> {
    static at::Tensor forward(AutogradContext* context, const at::Tensor& input)
    {
        const auto x = cpuFloat(input);
        auto y = torch::empty_like(x);
        portable::reluForward(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
        context->save_for_backward({ y });
        return y;
    }
    static variable_list backward(AutogradContext* context, variable_list outputs)
    {
        const auto y = context->get_saved_variables()[0];
        const auto dy = cpuFloat(outputs[0]);
        auto dx = torch::empty_like(y);
        portable::reluBackward(y.data_ptr<float>(), dy.data_ptr<float>(), dx.data_ptr<float>(), y.numel());
        return { dx };
    }
};

struct CrossEntropy : torch::autograd::Function<CrossEntropy> {
    static at::Tensor forward(AutogradContext* context, const at::Tensor& input, const at::Tensor& targets)
    {
        const auto z = cpuFloat(input);
        const auto t = targets.to(at::kLong).contiguous();
        TORCH_CHECK(z.dim() == 2 && t.dim() == 1 && t.size(0) == z.size(0), "portable cross-entropy: shapes do not fit");
        TORCH_CHECK(t.numel() == 0 || (t.min().item<std::int64_t>() >= 0 && t.max().item<std::int64_t>() < z.size(1)),
            "portable cross-entropy: a target is not a class");
        auto dz = torch::empty_like(z);
        const float loss
            = portable::crossEntropy(z.data_ptr<float>(), t.data_ptr<std::int64_t>(), dz.data_ptr<float>(), z.size(0), z.size(1));
        context->save_for_backward({ dz });
        return torch::tensor(loss, z.options());
    }
    static variable_list backward(AutogradContext* context, variable_list outputs)
    {
        const auto dz = context->get_saved_variables()[0];
        // The loss is the graph's end: its gradient is 1, and dz is d loss / d logits as it stands.
        const float scale = outputs[0].item<float>();
        auto dx = dz.clone();
        if (scale != 1.0f) {
            auto* values = dx.data_ptr<float>();
            for (std::int64_t i = 0; i < dx.numel(); ++i)
                values[i] = values[i] * scale;
        }
        return { dx, at::Tensor() };
    }
};

} // namespace

at::Tensor portableLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b)
{
    return Linear::apply(x, w, b);
}

at::Tensor portableRelu(const at::Tensor& x)
{
    return Relu::apply(x);
}

at::Tensor portableCrossEntropy(const at::Tensor& logits, const at::Tensor& targets)
{
    return CrossEntropy::apply(logits, targets);
}

} // namespace tessera::compute::detail
