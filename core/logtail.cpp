#include "logtail.h"

#include <QDateTime>

namespace tessera::core {

LogTail& LogTail::process()
{
    static LogTail tail;
    return tail;
}

void LogTail::append(const QString& level, const QString& text)
{
    Line line { QDateTime::currentMSecsSinceEpoch(), level,
        text.size() > MaxLineChars ? text.left(MaxLineChars) + QChar(0x2026) : text };
    const QMutexLocker lock(&m_mutex);
    m_lines.push_back(std::move(line));
    if (m_lines.size() > std::size_t(Capacity))
        m_lines.pop_front();
    ++m_appended;
}

QList<LogTail::Line> LogTail::last(int count) const
{
    const QMutexLocker lock(&m_mutex);
    const auto from = m_lines.size() > std::size_t(std::max(0, count)) ? m_lines.end() - count : m_lines.begin();
    return QList<Line>(from, m_lines.end());
}

std::uint64_t LogTail::appended() const
{
    const QMutexLocker lock(&m_mutex);
    return m_appended;
}

} // namespace tessera::core
