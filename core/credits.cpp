#include "credits.h"

#include <limits>

namespace tessera::core {

std::optional<Credits> Credits::fromCredits(std::int64_t credits)
{
    std::int64_t micro = 0;
    if (__builtin_mul_overflow(credits, MicroPerCredit, &micro))
        return std::nullopt;
    return Credits(micro);
}

Result<Credits> Credits::parse(QStringView text)
{
    auto fail = [&](const QString& why) {
        return Error { {}, QStringLiteral("'%1' is not an amount of credits: %2").arg(text.toString(), why) };
    };
    if (text.isEmpty())
        return fail(QStringLiteral("it is empty"));

    qsizetype pos = 0;
    const bool negative = text.front() == u'-';
    if (negative || text.front() == u'+')
        ++pos;

    std::int64_t whole = 0;
    std::int64_t fraction = 0;
    int fractionDigits = 0;
    int wholeDigits = 0;
    bool inFraction = false;
    for (; pos < text.size(); ++pos) {
        const QChar c = text[pos];
        if (c == u'.') {
            if (inFraction)
                return fail(QStringLiteral("more than one decimal point"));
            inFraction = true;
            continue;
        }
        if (c < u'0' || c > u'9')
            return fail(QStringLiteral("'%1' is not a digit").arg(c));
        const int digit = c.unicode() - u'0';
        if (inFraction) {
            if (++fractionDigits > 6)
                return fail(QStringLiteral("more than 6 decimal places (the smallest unit is 0.000001)"));
            fraction = fraction * 10 + digit;
        } else {
            ++wholeDigits;
            if (__builtin_mul_overflow(whole, 10, &whole) || __builtin_add_overflow(whole, digit, &whole))
                return fail(QStringLiteral("too large"));
        }
    }
    if (wholeDigits == 0 && fractionDigits == 0)
        return fail(QStringLiteral("it has no digits"));
    for (int i = fractionDigits; i < 6; ++i)
        fraction *= 10;

    std::int64_t micro = 0;
    if (__builtin_mul_overflow(whole, MicroPerCredit, &micro) || __builtin_add_overflow(micro, fraction, &micro))
        return fail(QStringLiteral("too large"));
    return Credits(negative ? -micro : micro);
}

QString Credits::toString() const
{
    // Work on the unsigned magnitude so that INT64_MIN prints correctly.
    const bool negative = m_micro < 0;
    const std::uint64_t magnitude = negative ? std::uint64_t(0) - std::uint64_t(m_micro) : std::uint64_t(m_micro);
    const std::uint64_t whole = magnitude / MicroPerCredit;
    std::uint64_t fraction = magnitude % MicroPerCredit;

    QString text = negative ? QStringLiteral("-") : QString();
    text += QString::number(whole);
    if (fraction != 0) {
        QString digits = QStringLiteral("%1").arg(fraction, 6, 10, QLatin1Char('0'));
        while (digits.endsWith(u'0'))
            digits.chop(1);
        text += u'.' + digits;
    }
    return text;
}

std::optional<Credits> Credits::checkedAdd(Credits other) const
{
    std::int64_t sum = 0;
    if (__builtin_add_overflow(m_micro, other.m_micro, &sum))
        return std::nullopt;
    return Credits(sum);
}

std::optional<Credits> Credits::checkedSubtract(Credits other) const
{
    std::int64_t difference = 0;
    if (__builtin_sub_overflow(m_micro, other.m_micro, &difference))
        return std::nullopt;
    return Credits(difference);
}

std::optional<Credits> Credits::checkedMultiply(std::int64_t factor) const
{
    std::int64_t product = 0;
    if (__builtin_mul_overflow(m_micro, factor, &product))
        return std::nullopt;
    return Credits(product);
}

std::optional<Credits> Credits::checkedScale(std::int64_t numerator, std::int64_t denominator) const
{
    if (denominator == 0)
        return std::nullopt;
    __extension__ using Int128 = __int128;
    const Int128 scaled = static_cast<Int128>(m_micro) * numerator / denominator;
    if (scaled > std::numeric_limits<std::int64_t>::max() || scaled < std::numeric_limits<std::int64_t>::min())
        return std::nullopt;
    return Credits(static_cast<std::int64_t>(scaled));
}

} // namespace tessera::core
