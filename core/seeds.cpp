#include "seeds.h"

#include <limits>

namespace tessera::core {

std::uint64_t SplitMix64::next()
{
    std::uint64_t z = (m_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

std::uint64_t SplitMix64::below(std::uint64_t bound)
{
    // Reject the top partial bucket so that every value is equally likely.
    const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % bound;
    std::uint64_t value = next();
    while (value >= limit)
        value = next();
    return value % bound;
}

std::uint64_t deriveSeed(std::uint64_t seed, std::initializer_list<std::uint64_t> path)
{
    std::uint64_t state = seed;
    for (auto part : path)
        state = SplitMix64(state ^ (part * 0x9E3779B97F4A7C15ULL)).next();
    return state;
}

QList<std::int64_t> seededPermutation(std::int64_t count, std::uint64_t seed)
{
    QList<std::int64_t> permutation(count);
    for (std::int64_t i = 0; i < count; ++i)
        permutation[i] = i;
    SplitMix64 random(seed);
    for (std::int64_t i = count - 1; i > 0; --i) {
        const auto j = static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(i) + 1));
        std::swap(permutation[i], permutation[j]);
    }
    return permutation;
}

} // namespace tessera::core
