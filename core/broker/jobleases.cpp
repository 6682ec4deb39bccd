#include "jobleases.h"

#include "brokerstore.h"

namespace tessera::core::broker {

JobLeases::JobLeases(BrokerStore& store, const Clock& clock, NetworkLease::Identity identity, std::int64_t leaseMs, bool shared)
    : m_store(store)
    , m_clock(clock)
    , m_identity(std::move(identity))
    , m_leaseMs(leaseMs)
    , m_shared(shared)
{ }

QString JobLeases::scopeOf(const QString& jobId)
{
    return BrokerStore::JobScopePrefix + jobId;
}

Result<bool> JobLeases::take(const QString& jobId)
{
    if (!m_shared)
        return true;
    const std::int64_t now = m_clock.nowMs();
    auto generation
        = m_store.takeLease(scopeOf(jobId), LeaseRow { m_identity.holder, m_identity.endpoint, now + m_leaseMs, 0 }, now);
    if (!generation)
        return generation.error();
    if (!*generation) {
        m_jobs.remove(jobId);
        return false;
    }
    m_jobs.insert(jobId);
    return true;
}

Status JobLeases::end(const QString& jobId)
{
    if (!m_shared)
        return {};
    m_ending.insert(jobId);
    return m_store.dropLease(scopeOf(jobId), m_identity.holder);
}

Status JobLeases::drop(const QString& jobId)
{
    if (!m_shared)
        return {};
    m_jobs.remove(jobId);
    m_ending.remove(jobId);
    return m_store.dropLease(scopeOf(jobId), m_identity.holder, BrokerStore::Now::Yes);
}

void JobLeases::release(const QString& jobId)
{
    if (!m_shared)
        return;
    m_jobs.remove(jobId);
    (void)m_store.releaseLease(scopeOf(jobId), m_identity.holder);
}

Result<JobLeases::Renewal> JobLeases::renew()
{
    Renewal renewal;
    if (!m_shared)
        return renewal;
    const std::int64_t now = m_clock.nowMs();
    auto held = m_store.renewLeases(BrokerStore::JobScopePrefix, m_identity.holder, now + m_leaseMs);
    if (!held)
        return held.error();
    m_renewedAt = now;
    for (auto it = m_jobs.begin(); it != m_jobs.end();) {
        if (held->contains(scopeOf(*it))) {
            ++it;
            continue;
        }
        if (!m_ending.remove(*it)) // an ended job's lease went with it; any other was taken
            renewal.lost.append(*it);
        it = m_jobs.erase(it);
    }
    m_ending.clear(); // what is left of it rolled back: the job runs, and is still this broker's
    for (auto it = held->cbegin(); it != held->cend(); ++it) {
        const QString jobId = it.key().mid(BrokerStore::JobScopePrefix.size());
        if (!m_jobs.contains(jobId)) {
            renewal.found.append(jobId);
            m_jobs.insert(jobId);
        }
    }
    return renewal;
}

Status JobLeases::extend()
{
    if (!m_shared)
        return {};
    const std::int64_t now = m_clock.nowMs();
    auto held = m_store.renewLeases(BrokerStore::JobScopePrefix, m_identity.holder, now + m_leaseMs, BrokerStore::Learn::No);
    if (!held)
        return held.error();
    m_renewedAt = now;
    return {};
}

Result<QStringList> JobLeases::unheld(int limit)
{
    if (!m_shared)
        return QStringList {};
    return m_store.unleasedJobs(m_clock.nowMs(), limit);
}

QString JobLeases::holderEndpoint(const QString& jobId)
{
    if (holds(jobId))
        return m_identity.endpoint;
    auto row = m_store.lease(scopeOf(jobId));
    return row && *row && (*row)->expiresAt >= m_clock.nowMs() ? (*row)->endpoint : QString();
}

} // namespace tessera::core::broker
