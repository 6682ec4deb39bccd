#pragma once

#include "enumnames.h"

#include <QDateTime>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core {

// Whether this machine should be training now, and what the tray shows: the desktop app's
// contribute / snooze / pause logic, free of widgets so that it is tested on its own.
//
//   off:       the user has not switched contributing on
//   working:   contributing, a shard is training
//   waiting:   contributing, connected, no shard yet
//   paused:    contributing, but held by a rule (not idle, on battery, outside the schedule)
//   snoozed:   the user snoozed it (for a while, or until the machine is idle)
//   offline:   contributing, but no broker answers
//   error:     something the user must fix (the message says what)
class Contribution {
public:
    enum class State { Off, Working, Waiting, Paused, Snoozed, Offline, Error };

    struct Rules {
        bool runOnlyWhenIdle = false;
        std::int64_t idleSeconds = 300; // the machine counts as idle after this long without input
        bool pauseOnBattery = true;
    };

    struct Inputs {
        std::int64_t userIdleSeconds = 0; // since the last keyboard or mouse input
        bool onBattery = false;
        bool insideSchedule = true; // Compute/Schedule allows now
    };

    void setRules(Rules rules) { m_rules = rules; }
    const Rules& rules() const { return m_rules; }

    void setContributing(bool on);
    bool contributing() const { return m_contributing; }
    // Snoozes until `until`, or (untilIdle) until the machine is next idle.
    void snoozeUntil(const QDateTime& until);
    void snoozeUntilIdle();
    void endSnooze();
    // Paused until resumed, from another program (the control API, docs/CONTROL.md): the state is
    // paused, and the shard in training is kept.
    void setHeld(bool held) { m_held = held; }
    bool held() const { return m_held; }
    std::optional<QDateTime> snoozedUntil() const { return m_snoozeUntil; }

    void setConnected(bool connected) { m_connected = connected; }
    void setTraining(bool training) { m_training = training; }
    void setError(const QString& message) { m_error = message; }
    void clearError() { m_error.clear(); }

    // Re-evaluates with the machine's state now; ends a snooze whose time has come.
    void update(const Inputs& inputs, const QDateTime& now);

    State state() const;
    // Whether the compute thread may run shards now.
    bool mayCompute() const;
    // Why it is paused or in error, for the tray's tooltip.
    QString reason() const;
    // Whether `now` falls in one of Compute/Schedule's windows ("HH:mm-HH:mm", comma-separated; a
    // window may cross midnight). No windows: always.
    static bool insideSchedule(const QString& schedule, const QTime& now);

private:
    Rules m_rules;
    bool m_contributing = false;
    bool m_connected = false;
    bool m_training = false;
    bool m_snoozedUntilIdle = false;
    bool m_held = false;
    std::optional<QDateTime> m_snoozeUntil;
    QString m_error;
    QString m_pausedBecause;
};

// What the tray and the Overview call each state.
template<> struct EnumNames<Contribution::State> {
    static constexpr std::array names { "idle", "working", "waiting for work", "paused", "snoozed", "offline", "error" };
};

} // namespace tessera::core
