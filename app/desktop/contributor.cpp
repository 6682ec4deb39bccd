#include "contributor.h"

#include <QDir>

namespace tessera::app {

Contributor::Contributor(compute::ComputeEnvironment environment)
    : m_executor(std::move(environment))
{ }

Contributor::~Contributor()
{
    stop(false);
    for (auto& thread : m_stopping) {
        if (thread.joinable())
            thread.join();
    }
}

core::Status Contributor::start(const QList<net::BrokerAddress>& brokers, const core::NodeInfo& node, const net::CurveKeys& keys,
    const core::SigningKeys& signing, const QString& dataDirectory, int heartbeatMs, std::int64_t cacheBytes,
    const SwarmOptions& swarmFor)
{
    // Two sessions of one node at one broker would push each other out: the old ones go first.
    stop(false);
    ++m_generation;
    // Results a silent broker's session cannot report go to another broker of the same network:
    // one relay for every generation of sessions (those still finishing a shard share it).
    if (!m_relay)
        m_relay = std::make_shared<net::ResultRelay>(QDir(dataDirectory).filePath(QStringLiteral("relay")));
    if (!m_logWatch)
        m_logWatch = std::make_shared<core::ledger::LogWatch>(dataDirectory);
    for (const auto& broker : brokers) {
        auto session = std::make_unique<Session>();
        session->broker = broker;
        const QString cacheDir
            = QDir(dataDirectory)
                  .filePath(QStringLiteral("cache/") + core::Digest::ofBytes(broker.endpoint.toUtf8()).toHex().left(16));
        auto cache = core::BlobStore::open(cacheDir, cacheBytes / std::max<qsizetype>(1, brokers.size()));
        if (!cache)
            return cache.error();
        session->cache = std::move(*cache);
        net::NodeClientOptions options;
        options.broker = broker;
        options.keys = keys;
        options.signing = signing;
        options.resultLogPath = QDir(dataDirectory).filePath(QStringLiteral("node.sqlite"));
        options.node = node;
        options.heartbeatMs = heartbeatMs;
        options.relay = m_relay;
        options.logWatch = m_logWatch;
        if (swarmFor)
            options.swarm = swarmFor(int(m_sessions.size()));
        session->client = std::make_unique<net::NodeClient>(
            options, m_executor, *session->cache, QStringLiteral("%1#%2").arg(broker.endpoint, QString::number(m_generation)));
        m_sessions.push_back(std::move(session));
    }
    for (auto& session : m_sessions) {
        auto* s = session.get();
        s->thread = std::thread([s] { s->client->run(s->stop, s->abandon); });
    }
    return {};
}

void Contributor::stop(bool finishShard)
{
    if (!finishShard)
        m_executor.cancelAll();
    for (auto& session : m_sessions) {
        session->abandon = !finishShard;
        session->stop = true;
        session->client->wake(); // seen now, not at the end of its loop's wait
    }
    if (finishShard) {
        // The sessions finish their shard and report it without holding up the window.
        for (auto& session : m_sessions) {
            auto* s = session.get();
            m_finishing.push_back(std::move(session));
            m_stopping.emplace_back([s] {
                if (s->thread.joinable())
                    s->thread.join();
            });
        }
    } else {
        for (auto& session : m_sessions) {
            if (session->thread.joinable())
                session->thread.join();
        }
        for (auto& session : m_finishing) {
            session->abandon = true;
            session->client->wake();
        }
    }
    m_sessions.clear();
}

int Contributor::results() const
{
    int total = 0;
    for (const auto& session : m_sessions)
        total += session->client->counters().results;
    return total;
}

int Contributor::registrations() const
{
    int total = 0;
    for (const auto& session : m_sessions)
        total += session->client->counters().registrations;
    return total;
}

QString Contributor::logBroken() const
{
    if (!m_logWatch)
        return {};
    return m_logWatch->whyBroken();
}

} // namespace tessera::app
