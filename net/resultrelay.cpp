#include "resultrelay.h"

#include <QDir>
#include <QFile>

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

void ResultRelay::hand(Handed handed)
{
    if (handed.attempts >= MaxAttempts) {
        for (const auto& blob : handed.blobs)
            QFile::remove(blob.second);
        return;
    }
    const std::lock_guard lock(m_mutex);
    m_items.push_back(std::move(handed));
}

std::optional<ResultRelay::Handed> ResultRelay::take(const QString& network, const QString& broker, std::int64_t now)
{
    const std::lock_guard lock(m_mutex);
    for (auto it = m_items.begin(); it != m_items.end(); ++it) {
        const std::int64_t due = it->notBefore + (it->refusedBy == broker ? RetryMs : 0);
        if (it->network != network || due > now)
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
