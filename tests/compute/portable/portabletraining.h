#pragma once

// What tst_portable and portable_weights (its arm64 run) train with the portable kernels: the
// same made-up data and the same steps, so that their weights can be compared bit for bit.

#include <compute/portable/kernels.h>

#include <cstdint>
#include <vector>

namespace tessera::compute::portable::testing {

// A fixed stream of numbers in [-1, 1) from a 64-bit LCG: the same data on every machine.
class Stream {
public:
    explicit Stream(std::uint64_t seed)
        : m_state(seed)
    { }
    float next()
    {
        m_state = m_state * 6364136223846793005ULL + 1442695040888963407ULL;
        return float(std::int64_t(m_state >> 40) - (1LL << 23)) / float(1LL << 23);
    }
    std::vector<float> take(std::size_t n, float scale = 1.0f)
    {
        std::vector<float> out(n);
        for (auto& v : out)
            v = next() * scale;
        return out;
    }

private:
    std::uint64_t m_state;
};

// A 20-32-3 MLP on a made-up 3-class problem: 30 steps of SGD with Nesterov momentum and weight
// decay, then 30 of AdamW with gradient clipping, every kernel in the loop. The final weights.
inline std::vector<std::vector<float>> train(int threads, std::vector<float>* losses = nullptr)
{
    constexpr std::int64_t N = 64, In = 20, Hidden = 32, Classes = 3;
    Stream data(7);
    const auto x = data.take(std::size_t(N * In));
    std::vector<std::int64_t> y(N);
    for (std::int64_t i = 0; i < N; ++i)
        y[std::size_t(i)] = (x[std::size_t(i * In)] > 0.0f ? 1 : 0) + (x[std::size_t(i * In + 1)] > 0.3f ? 1 : 0);
    Stream init(11);
    std::vector<std::vector<float>> params { init.take(Hidden * In, 0.2f), init.take(Hidden, 0.1f),
        init.take(Classes * Hidden, 0.2f), init.take(Classes, 0.1f) };
    std::vector<std::vector<float>> grads, momentum, m, v;
    for (const auto& p : params) {
        grads.emplace_back(p.size());
        momentum.emplace_back(p.size());
        m.emplace_back(p.size());
        v.emplace_back(p.size());
    }
    std::vector<float> h(N * Hidden), a(N * Hidden), logits(N * Classes), dlogits(N * Classes), da(N * Hidden), dh(N * Hidden);
    for (int step = 1; step <= 60; ++step) {
        linearForward(x.data(), params[0].data(), params[1].data(), h.data(), N, In, Hidden, threads);
        reluForward(h.data(), a.data(), N * Hidden);
        linearForward(a.data(), params[2].data(), params[3].data(), logits.data(), N, Hidden, Classes, threads);
        const float loss = crossEntropy(logits.data(), y.data(), dlogits.data(), N, Classes);
        if (losses)
            losses->push_back(loss);
        linearBackward(
            a.data(), params[2].data(), dlogits.data(), da.data(), grads[2].data(), grads[3].data(), N, Hidden, Classes, threads);
        reluBackward(a.data(), da.data(), dh.data(), N * Hidden);
        linearBackward(x.data(), params[0].data(), dh.data(), nullptr, grads[0].data(), grads[1].data(), N, In, Hidden, threads);
        for (std::size_t t = 0; t < params.size(); ++t) {
            if (step <= 30) {
                sgdStep(params[t].data(), grads[t].data(), momentum[t].data(), std::int64_t(params[t].size()), 0.1f, 0.9f, 1e-4f,
                    true, step == 1);
            }
        }
        if (step > 30) {
            double squares = 0.0;
            for (const auto& g : grads)
                squares += sumOfSquares(g.data(), std::int64_t(g.size()));
            const float factor = clipFactor(squares, 0.5);
            for (std::size_t t = 0; t < params.size(); ++t) {
                for (auto& g : grads[t])
                    g = g * factor;
                adamStep(params[t].data(), grads[t].data(), m[t].data(), v[t].data(), std::int64_t(params[t].size()), 0.01, 0.9,
                    0.999, 1e-8, 0.1, true, step - 30);
            }
        }
    }
    return params;
}

} // namespace tessera::compute::portable::testing
