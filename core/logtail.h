#pragma once

#include <QList>
#include <QMutex>
#include <QString>

#include <cstdint>
#include <deque>

namespace tessera::core {

// The last lines a program logged, for its control API (docs/CONTROL.md, "log"): a bounded ring,
// safe to append to from any thread.
class LogTail {
public:
    struct Line {
        std::int64_t at = 0; // ms since the epoch
        QString level; // "info", "warning", "error"
        QString text;

        bool operator==(const Line&) const = default;
    };
    static constexpr int Capacity = 200;
    static constexpr int MaxLineChars = 1000; // longer lines are cut, with "…"

    // The process's own tail: what tessera-node printed, or the desktop app's log.
    static LogTail& process();

    void append(const QString& level, const QString& text);
    // The newest `count` lines, oldest first.
    QList<Line> last(int count) const;
    // Counts appends: a reader that saw the same number has seen every line.
    std::uint64_t appended() const;

private:
    mutable QMutex m_mutex;
    std::deque<Line> m_lines;
    std::uint64_t m_appended = 0;
};

} // namespace tessera::core
