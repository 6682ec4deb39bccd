#pragma once

// Private to compute/portable: exp and erf as inline functions that the compiler can put in SIMD
// lanes, with exactly the operations kernels.h documents (and so the bits of the scalar code
// they replace): no libm, no branches (a lane cannot branch), selects instead. nearbyint is the
// float round-to-nearest-even of (t + 1.5 x 2^23) - 1.5 x 2^23 (exact for |t| < 2^22, and the
// default rounding); ldexp(p, k) is p times a power of two built from its bits, in two factors
// where 2^k itself is no normal float (each product is one rounding of the exact value, as
// ldexp's).

#include <bit>
#include <cstdint>
#include <limits>

namespace tessera::compute::portable::detail {

// c ? a : b by bit masks: GCC if-converts a few selects, not a dozen, and a loop with branches
// stays scalar.
inline float pick(bool c, float a, float b)
{
    const std::uint32_t mask = 0u - std::uint32_t(c);
    return std::bit_cast<float>((mask & std::bit_cast<std::uint32_t>(a)) | (~mask & std::bit_cast<std::uint32_t>(b)));
}
inline std::int32_t pick(bool c, std::int32_t a, std::int32_t b)
{
    const std::int32_t mask = -std::int32_t(c);
    return (mask & a) | (~mask & b);
}

inline float powerOfTwo(std::int32_t k) // 2^k for -126 <= k <= 127
{
    return std::bit_cast<float>(std::uint32_t(k + 127) << 23);
}

inline float expInline(float x)
{
    constexpr float Ln2Hi = 0.693145751953125f;
    constexpr float Ln2Lo = 1.428606765330187045e-06f;
    constexpr float Log2E = 1.44269504088896341f;
    constexpr float Round = 12582912.0f; // 1.5 x 2^23
    const bool nan = x != x;
    const bool over = x > 88.72283f;
    const bool under = x < -103.97208f;
    // Kept within the range whose k fits an int: lanes outside it are replaced below.
    float c = pick(under, -103.97208f, x);
    c = pick(over | nan, 88.72283f, c);
    const float k = (c * Log2E + Round) - Round;
    float r = c - k * Ln2Hi;
    r = r - k * Ln2Lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const std::int32_t e = std::int32_t(k); // -150 .. 128
    const bool low = e<-126, high = e> 127;
    std::int32_t shift = pick(low, 64, 0);
    shift = pick(high, -1, shift);
    float second = pick(low, 5.42101086242752217e-20f /* 2^-64 */, 1.0f);
    second = pick(high, 2.0f, second);
    float result = (p * powerOfTwo(e + shift)) * second;
    result = pick(under, 0.0f, result);
    result = pick(over, std::numeric_limits<float>::infinity(), result);
    return pick(nan, x, result);
}

inline float erfInline(float x)
{
    const bool negative = x < 0.0f;
    const float z = pick(negative, -x, x);
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    float p = 1.061405429f;
    p = p * t + -1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t + -0.284496736f;
    p = p * t + 0.254829592f;
    p = p * t;
    const float y = 1.0f - p * expInline(-(z * z));
    return pick(negative, -y, y);
}

} // namespace tessera::compute::portable::detail
