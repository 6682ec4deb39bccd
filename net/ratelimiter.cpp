#include "ratelimiter.h"

#include <algorithm>

namespace tessera::net {

RateLimiter::RateLimiter(int perSecond, std::int64_t floodMs)
    : m_perSecond(perSecond)
    , m_floodMs(floodMs)
{ }

RateLimiter::Decision RateLimiter::admit(double cost, std::int64_t nowMs)
{
    if (m_perSecond <= 0)
        return Decision::Pass;
    const double burst = 2.0 * m_perSecond;
    if (m_tokens < 0) {
        m_tokens = burst;
        m_lastRefill = nowMs;
    }
    m_tokens = std::min(burst, m_tokens + double(nowMs - m_lastRefill) * m_perSecond / 1000.0);
    m_lastRefill = nowMs;
    if (m_tokens >= cost) {
        m_tokens -= cost;
        return Decision::Pass;
    }
    if (m_floodingSince == 0 || nowMs - m_lastRefused > 1'000)
        m_floodingSince = nowMs;
    m_lastRefused = nowMs;
    return nowMs - m_floodingSince > m_floodMs ? Decision::Drop : Decision::Refuse;
}

void RateLimiter::refund(double cost)
{
    if (m_perSecond > 0 && m_tokens >= 0)
        m_tokens = std::min(2.0 * m_perSecond, m_tokens + cost);
}

} // namespace tessera::net
