#pragma once

#include "../common/computeexecutor.h"

#include <core/blobstore.h>
#include <core/ledger/logwatch.h>
#include <net/curvekeys.h>
#include <net/nodeclient.h>
#include <net/resultrelay.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace tessera::app {

// The desktop app's node: one NodeClient session per broker (the embedded one and those the user
// added), sharing one compute thread, as tessera-node run does.
class Contributor {
public:
    struct Session {
        net::BrokerAddress broker;
        std::unique_ptr<core::BlobStore> cache;
        std::unique_ptr<net::NodeClient> client;
        std::thread thread;
        std::atomic<bool> stop { false };
        std::atomic<bool> abandon { false };
    };

    explicit Contributor(compute::ComputeEnvironment environment);
    ~Contributor();

    ComputeExecutor& executor() { return m_executor; }

    // Connects to the brokers and takes work; results go to resultLogPath. swarmFor: the blob
    // swarm of the session with the index-th broker (none: blobs by GET).
    using SwarmOptions = std::function<std::optional<net::NodeSwarm::Options>(int index)>;
    core::Status start(const QList<net::BrokerAddress>& brokers, const core::NodeInfo& node, const net::CurveKeys& keys,
        const core::SigningKeys& signing, const QString& dataDirectory, int heartbeatMs, std::int64_t cacheBytes,
        const SwarmOptions& swarmFor = {});
    // Stops taking work. finishShard: the shard in training is finished and reported first (in the
    // background); otherwise it is dropped.
    void stop(bool finishShard);
    bool running() const { return !m_sessions.empty(); }
    int results() const;
    int registrations() const;
    // Why a network's ledger log broke (docs/LEDGER.md, "Watching the log"); empty while none did.
    QString logBroken() const;

private:
    ComputeExecutor m_executor;
    std::vector<std::unique_ptr<Session>> m_sessions;
    std::vector<std::thread> m_stopping; // sessions finishing their shard after stop()
    std::vector<std::unique_ptr<Session>> m_finishing;
    int m_generation = 0;
    std::shared_ptr<net::ResultRelay> m_relay; // made at the first start (it empties its folder)
    std::shared_ptr<core::ledger::LogWatch> m_logWatch; // the ledger logs' heads, kept across sessions
};

} // namespace tessera::app
