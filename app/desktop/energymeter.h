#pragma once

#include <QDate>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::app {

// What training cost this computer in CPU energy today. A shard's energy is the package's power,
// from RAPL's joule counter over the time the app watched the shard, times the longer of that
// window and the shard's computing time; where RAPL cannot be read (or the window was too short to
// mean something), it is estimated from the computing time, the threads and a busy thread's power.
// Plain arithmetic on readings it is handed: the app's clock, the sensors and the date come in.
class EnergyMeter {
public:
    // What a busy thread of a desktop CPU draws, for the estimate (said to be one wherever shown).
    static constexpr double EstimatedWattsPerThread = 10.0;
    // RAPL's count over less than this is not a power.
    static constexpr double MinimumWindowSeconds = 0.5;

    struct Shard {
        double joules = 0.0;
        double seconds = 0.0; // computing time
        bool measured = false; // by RAPL, not estimated
        // ", 1.2 s of computing, 0.004 Wh of CPU energy (RAPL)", for the log line.
        QString describe() const;
    };

    // A shard began (the app hears of it at its first progress), at `nowMs` with RAPL at `joules`.
    void shardBegan(std::int64_t nowMs, std::optional<double> joules);
    bool shardRunning() const { return m_startMs.has_value(); }
    // The shard ended after `busySeconds` of computing on `threads` threads; it is added to `today`'s
    // total (a new day starts from zero). Nothing when no shard began.
    std::optional<Shard> shardEnded(
        std::int64_t nowMs, std::optional<double> joules, double busySeconds, int threads, const QDate& today);

    double todayJoules(const QDate& today) const { return today == m_day ? m_todayJoules : 0.0; }
    // The last shard's energy was measured (so today's total is, as far as it goes).
    bool measured() const { return m_measured; }
    // The Overview's line: today's energy, and what it costs at `pricePerKWh` against `earnedToday`
    // (no price: no cost).
    QString overviewLine(const QDate& today, double pricePerKWh, double earnedToday) const;

private:
    std::optional<std::int64_t> m_startMs;
    std::optional<double> m_startJoules;
    QDate m_day;
    double m_todayJoules = 0.0;
    bool m_measured = false;
};

} // namespace tessera::app
