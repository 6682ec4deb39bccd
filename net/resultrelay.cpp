#include "resultrelay.h"

#include <QDir>
#include <QFile>

#include <unistd.h>

namespace tessera::net {

ResultRelay::ResultRelay(QString staging)
    : m_staging(std::move(staging))
{
    // What a run before left there was never taken (the relay lives in memory).
    QDir(m_staging).removeRecursively();
    QDir().mkpath(m_staging);
}

ResultRelay::~ResultRelay()
{
    QDir(m_staging).removeRecursively();
}

std::optional<QString> ResultRelay::stage(const QString& file)
{
    std::uint64_t serial = 0;
    {
        const std::lock_guard lock(m_mutex);
        serial = ++m_staged;
    }
    // Named by the relay alone: nothing of a broker's (an assignment id, a session's tag) in a path.
    const QString staged = QDir(m_staging).filePath(QStringLiteral("blob-%1").arg(serial));
    if (::link(QFile::encodeName(file).constData(), QFile::encodeName(staged).constData()) == 0)
        return staged;
    if (QFile::copy(file, staged))
        return staged;
    QFile::remove(staged);
    return std::nullopt;
}

void ResultRelay::hand(Handed handed)
{
    const std::lock_guard lock(m_mutex);
    m_items.push_back(std::move(handed));
}

std::optional<ResultRelay::Handed> ResultRelay::take(const QString& network, const QString& broker, std::int64_t now)
{
    const std::lock_guard lock(m_mutex);
    for (auto it = m_items.begin(); it != m_items.end(); ++it) {
        const std::int64_t due = it->notBefore + (it->refusedBy == broker ? RetryMs : 0);
        const bool exhausted = it->attempts >= MaxAttempts && it->from != broker;
        if (it->network != network || due > now || exhausted)
            continue;
        Handed handed = std::move(*it);
        m_items.erase(it);
        return handed;
    }
    return std::nullopt;
}

int ResultRelay::size() const
{
    const std::lock_guard lock(m_mutex);
    return int(m_items.size());
}

} // namespace tessera::net
