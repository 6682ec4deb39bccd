#pragma once

#include "curvekeys.h"
#include "nodeswarm.h"
#include "shardexecutor.h"

#include <core/blobstore.h>
#include <core/clock.h>
#include <core/disputequestion.h>
#include <core/nodeinfo.h>
#include <core/resultlog.h>
#include <core/shardresult.h>
#include <core/shardtask.h>
#include <core/signing.h>

#include <QHash>
#include <QList>
#include <QString>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace zmq {
class context_t;
}

namespace tessera::core::ledger {
class LogWatch;
}

namespace tessera::net {

class ResultRelay;

struct NodeClientOptions {
    BrokerAddress broker;
    std::optional<CurveKeys> keys; // the node's own keypair (its identity under CURVE)
    core::SigningKeys signing; // signs commitments; its public key is options.node.signingKey
    QString resultLogPath; // node.sqlite, where each result's lifecycle is kept; empty: none
    core::NodeInfo node;
    int heartbeatMs = 1000;
    int liveness = 3;
    int initialBackoffMs = 1000;
    int maxBackoffMs = 32000;
    // The ZeroMQ context to connect in; null: one of its own. Tests share theirs to use inproc://.
    zmq::context_t* context = nullptr;
    // The blob swarm (docs/SWARM.md, Swarm/Enabled); none: every blob by GET.
    std::optional<NodeSwarm::Options> swarm;
    // Shared by the node's sessions: a result this session cannot report goes to another session of
    // the same network (WELCOME's network), and this one delivers theirs (ResultRelay). None: a
    // result waits for its own broker.
    std::shared_ptr<ResultRelay> relay;
    // Shared by the node's sessions: the newest head of each network's ledger log, which every
    // session's broker must extend (docs/LEDGER.md, "Watching the log"). None: heads unchecked.
    std::shared_ptr<core::ledger::LogWatch> logWatch;
    // How long the broker must have been silent before its unreported results are handed on:
    // longer than a job's lease between brokers (6 s), so that another broker holds the job by then.
    int handOffAfterMs = 10'000;
};

// One node's session with one broker (Paranoid Pirate): registers, heartbeats, asks for work,
// fetches the blobs a task needs (cached on disk, never twice while cached), hands the task to
// the executor, uploads the weights and reports the result; reconnects with a doubling backoff
// when the broker goes silent, and registers again. Every request it sends carries an id, and a
// reply is matched to its request by that id alone (one with an id it did not send is ignored).
// Owns its socket; run() or step() on one thread. Time comes from the clock it is given.
class NodeClient {
public:
    NodeClient(NodeClientOptions options, ShardExecutor& executor, core::BlobStore& cache, QString tag,
        const core::Clock& clock = systemClock());
    ~NodeClient();
    NodeClient(const NodeClient&) = delete;
    NodeClient& operator=(const NodeClient&) = delete;

    // Serves until stop is set. A shard in training when stop comes is finished and reported first
    // (as for SIGTERM), unless abandon is set too.
    void run(const std::atomic<bool>& stop, const std::atomic<bool>& abandon);
    // Wakes run()'s wait now (after setting `stop`, say); from any thread.
    void wake();
    // One turn: collects finished shards, reconnects when due, reports, asks for work, heartbeats,
    // waits at most maxWaitMs (real time) for messages and handles them. run() is this in a loop.
    void step(int maxWaitMs);

    enum class Session { Disconnected, Registering, Registered };
    Session session() const;
    // The wait before the next reconnect (0 until the broker first went silent).
    int backoffMs() const;

    struct Counters {
        int registrations = 0;
        int tasks = 0;
        int results = 0;
        int blobsFetched = 0;
        std::int64_t bytesFetched = 0; // decoded: the blobs' sizes
        std::int64_t wireBytesFetched = 0; // the payloads that brought them, zstd-coded where the broker coded them
        std::int64_t bytesUploaded = 0;
        std::int64_t wireBytesUploaded = 0;
        int slashed = 0; // verdicts that slashed this node
        int reconnects = 0;
        int ignoredReplies = 0; // replies to no request of this session
        int weightsRebuilt = 0; // rounds' weights made from their int8 change instead of downloaded
        int rebuildsFailed = 0; // changes that did not give the round's weights (downloaded whole then)
        int blobsFromSwarm = 0; // blobs fetched from peers over the swarm (in blobsFetched and bytesFetched too)
        std::int64_t bytesFromSwarm = 0;
        int swarmFallbacks = 0; // swarm fetches that failed or stalled: GET instead
        std::int64_t swarmBytesUploaded = 0; // what this node served its peers
        int logHeadsChecked = 0; // heads of the ledger's log checked against the kept one
        bool logBroken = false; // this session's network's log broke (no more work from it)
    };
    Counters counters() const;

    static const core::Clock& systemClock();

private:
    struct Private;
    std::unique_ptr<Private> d;
};

} // namespace tessera::net
