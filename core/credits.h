#pragma once

#include "error.h"

#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core {

// An amount of credits, held as integer micro-credits (1 credit = 1,000,000 micro).
// Arithmetic is overflow-checked and never uses floating point: money must add up exactly.
class Credits {
public:
    static constexpr std::int64_t MicroPerCredit = 1'000'000;

    constexpr Credits() = default;
    static constexpr Credits fromMicro(std::int64_t micro) { return Credits(micro); }
    // Whole credits; nullopt when the amount does not fit in int64 micro-credits.
    static std::optional<Credits> fromCredits(std::int64_t credits);
    // Parses "12", "12.5", "-0.000001": at most 6 decimal places, no exponent, no spaces.
    static Result<Credits> parse(QStringView text);

    constexpr std::int64_t micro() const { return m_micro; }
    constexpr bool isNegative() const { return m_micro < 0; }
    constexpr bool isZero() const { return m_micro == 0; }

    // Exact decimal form, trailing zeros trimmed: "12.5", "0.000001", "-3".
    QString toString() const;

    std::optional<Credits> checkedAdd(Credits other) const;
    std::optional<Credits> checkedSubtract(Credits other) const;
    std::optional<Credits> checkedMultiply(std::int64_t factor) const;
    // this × numerator / denominator, rounded toward zero, exact for any int64 inputs
    // (128-bit intermediate); nullopt when the result does not fit or denominator is 0.
    std::optional<Credits> checkedScale(std::int64_t numerator, std::int64_t denominator) const;

    constexpr auto operator<=>(const Credits&) const = default;

private:
    constexpr explicit Credits(std::int64_t micro)
        : m_micro(micro)
    { }
    std::int64_t m_micro = 0;
};

} // namespace tessera::core
