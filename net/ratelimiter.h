#pragma once

#include <cstdint>

namespace tessera::net {

// A token bucket per peer (Broker/MaxRequestsPerSecond, bursts of twice that): a message over the
// limit is refused; a peer still refused at least once a second after floodMs is to be dropped. A
// flood still gets a message through now and then, as the bucket refills: that does not end it.
// Time comes in from the caller, so tests decide when it passes.
class RateLimiter {
public:
    enum class Decision { Pass, Refuse, Drop };

    explicit RateLimiter(int perSecond = 500, std::int64_t floodMs = 5'000);

    // A message of this cost (1; a blob range a quarter) arrives now.
    Decision admit(double cost, std::int64_t nowMs);
    // A message admitted that turned out to be one the broker bounds otherwise (a TENSOR the
    // pipeline's schedule sends): its cost back, up to the burst.
    void refund(double cost);

private:
    int m_perSecond;
    std::int64_t m_floodMs;
    double m_tokens = -1.0; // < 0 until the first message
    std::int64_t m_lastRefill = 0;
    std::int64_t m_floodingSince = 0;
    std::int64_t m_lastRefused = 0;
};

// The wait before a reconnect: initial, doubling after each failed attempt up to a ceiling; reset
// once a session is established (Paranoid Pirate).
class Backoff {
public:
    Backoff(int initialMs = 1'000, int maxMs = 32'000)
        : m_initialMs(initialMs)
        , m_maxMs(maxMs)
    { }
    // The wait before the next attempt.
    int next()
    {
        m_currentMs = m_currentMs == 0 ? m_initialMs : (m_currentMs * 2 > m_maxMs ? m_maxMs : m_currentMs * 2);
        return m_currentMs;
    }
    void reset() { m_currentMs = 0; }
    int current() const { return m_currentMs; }

private:
    int m_initialMs;
    int m_maxMs;
    int m_currentMs = 0;
};

} // namespace tessera::net
