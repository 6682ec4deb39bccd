#pragma once

// Private to compute/: the seeded rule by which a language model's next token is chosen from its
// logits (docs/DETERMINISM.md, "Inference"; tessera-job sample and generate jobs alike).

#include <compute/portable/kernels.h>
#include <core/seeds.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tessera::compute::detail {

// The draw both rules share: u = (derive(seed, [t]) >> 11) x 2^-53 x (the weights' float64 sum in
// index order), and the first j whose running sum exceeds u (`fallback` if none does).
inline std::int64_t drawFromWeights(
    const std::vector<double>& weight, double total, std::uint64_t seed, std::uint64_t t, std::int64_t fallback)
{
    const double u = double(core::deriveSeed(seed, { t }) >> 11) * 0x1.0p-53 * total;
    double cumulative = 0.0;
    for (std::size_t j = 0; j < weight.size(); ++j) {
        cumulative += weight[j];
        if (u < cumulative)
            return std::int64_t(j);
    }
    return fallback;
}

// The token of the largest of `n` scores (the first, on ties) at temperature 0; else token j is
// drawn with weights w_j = exp((s_j - max) / T), summed in index order, at
// u = (derive(seed, [t]) >> 11) x 2^-53 x sum(w): the first j whose running sum exceeds u.
inline std::int64_t drawToken(const double* scores, std::int64_t n, double temperature, std::uint64_t seed, std::uint64_t t)
{
    std::int64_t next = std::max_element(scores, scores + n) - scores;
    if (!(temperature > 0.0))
        return next;
    std::vector<double> weight(static_cast<std::size_t>(n));
    double total = 0.0;
    for (std::int64_t j = 0; j < n; ++j)
        total += weight[std::size_t(j)] = std::exp((scores[j] - scores[next]) / temperature);
    return drawFromWeights(weight, total, seed, t, next);
}

// Portable mode's rule (docs/DETERMINISM.md, "Inference in portable mode"), from float32 logits l:
// at temperature 0 the first largest; else z_j = (l_j - max) / float(T) and w_j = exp(z_j) in
// float32 with Tessera's exp (portable::exp; a T that float32 rounds to 0 is 0), the w_j summed in float64 in index order, and u
// as above: the first j whose running float64 sum exceeds u.
inline std::int64_t drawTokenPortable(
    const float* logits, std::int64_t n, double temperature, std::uint64_t seed, std::uint64_t t)
{
    std::int64_t next = std::max_element(logits, logits + n) - logits;
    if (!(temperature > 0.0))
        return next;
    const float scale = float(temperature);
    if (!(scale > 0.0f)) // a temperature float32 rounds to 0 is 0
        return next;
    std::vector<double> weight(static_cast<std::size_t>(n));
    double total = 0.0;
    for (std::int64_t j = 0; j < n; ++j)
        total += weight[std::size_t(j)] = double(portable::exp((logits[j] - logits[next]) / scale));
    return drawFromWeights(weight, total, seed, t, next);
}

} // namespace tessera::compute::detail
