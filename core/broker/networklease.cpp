#include "networklease.h"

#include "../privatefile.h"
#include "brokerstore.h"

#include <QFile>
#include <QRandomGenerator>

namespace tessera::core::broker {

NetworkLease::NetworkLease(BrokerStore& store, const Clock& clock, Identity identity, std::int64_t leaseMs, bool shared)
    : m_store(store)
    , m_clock(clock)
    , m_identity(std::move(identity))
    , m_leaseMs(leaseMs)
    , m_shared(shared)
{ }

Result<QString> NetworkLease::loadOrCreateId(const QString& path)
{
    QFile file(path);
    if (file.open(QIODevice::ReadOnly)) {
        const QString id = QString::fromLatin1(file.read(64)).trimmed();
        if (id.size() == 32 && QByteArray::fromHex(id.toLatin1()).toHex() == id.toLatin1())
            return id;
        return Error { path, QStringLiteral("not a broker id (32 hex digits); remove it to make a new one") };
    }
    const QString id = newId();
    if (auto status = writePrivateFile(path, id.toLatin1() + '\n', QStringLiteral("broker id")); !status)
        return status.error();
    return id;
}

QString NetworkLease::newId()
{
    QByteArray bytes(16, '\0');
    QRandomGenerator::system()->generate(bytes.begin(), bytes.end());
    return QString::fromLatin1(bytes.toHex());
}

Result<NetworkLease::Renewal> NetworkLease::renew()
{
    const std::int64_t now = m_clock.nowMs();
    if (!m_shared) {
        m_heldUntil = now + m_leaseMs;
        return Renewal::Kept;
    }
    auto generation = m_store.takeLease(
        QString::fromLatin1(Scope), LeaseRow { m_identity.holder, m_identity.endpoint, now + m_leaseMs, 0 }, now);
    if (!generation)
        return generation.error();
    if (!*generation) {
        m_heldUntil = 0;
        return Renewal::Elsewhere;
    }
    // Kept only where this broker held it without a gap, or nobody took it in the gap (the same
    // generation: a lapse that nobody used).
    const bool kept = m_generation != 0 && m_generation == **generation;
    m_generation = **generation;
    m_heldUntil = now + m_leaseMs;
    return kept ? Renewal::Kept : Renewal::Taken;
}

bool NetworkLease::due() const
{
    return m_shared && held() && m_heldUntil - m_clock.nowMs() < m_leaseMs * 2 / 3;
}

bool NetworkLease::held() const
{
    return !m_shared || m_clock.nowMs() < m_heldUntil;
}

} // namespace tessera::core::broker
