#pragma once

#include <cstdint>

namespace tessera::core {

// Time, in milliseconds since the epoch, injected into everything with deadlines, heartbeats,
// backoff or rates, so that tests decide when time passes.
class Clock {
public:
    virtual ~Clock() = default;
    virtual std::int64_t nowMs() const = 0;
};

class SystemClock final : public Clock {
public:
    std::int64_t nowMs() const override;
};

// A clock that moves only when told: for tests.
class ManualClock final : public Clock {
public:
    explicit ManualClock(std::int64_t start = 1'000'000)
        : m_now(start)
    { }
    std::int64_t nowMs() const override { return m_now; }
    void advance(std::int64_t ms) { m_now += ms; }
    void set(std::int64_t ms) { m_now = ms; }

private:
    std::int64_t m_now;
};

} // namespace tessera::core
