#pragma once

#include "curvekeys.h"
#include "nodeswarm.h"

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

namespace tessera::net {

// What trains the shards a NodeClient receives (the compute thread, wired in app/). The client
// calls start() from its own thread and collects finished shards with takeFinished(); an
// executor that finishes work on another thread says so with notify(tag), which wakes the
// client's loop at once (it does not poll for it).
class ShardExecutor {
public:
    struct Finished {
        QString tag; // the client that started it
        QString assignment;
        core::ShardResult result;
        QByteArray weights; // empty when the shard failed
        QByteArray keptState; // the training state at task.keptStateCheckpoint(), for disputes
        core::Digest keptStateDigest; // its SHA-256 when the executor computed it (null: not yet)
        // Or (keptState empty) the file the executor wrote it to in the client's staging folder
        // (stageIn()), which the client's blob cache takes in by renaming it.
        QString keptStateFile;
    };
    // What a dispute asked for, made (recreate()): a training state, a trace or operands; or why
    // not (error non-empty).
    struct Recreated {
        QString tag;
        QString key;
        QByteArray state;
        core::Digest digest; // of state
        QString error;
    };

    virtual ~ShardExecutor() = default;
    // blobPaths: where the task's model and data blobs are on disk, by sha256. deadlineMs: the
    // assignment's deadline from now (TASK's deadlineMs; 0: none), which bounds how long the job
    // owner's code may compute (a sandboxed worker is stopped some time after it).
    virtual void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray& startWeights,
        const QHash<core::Digest, QString>& blobPaths, std::int64_t deadlineMs)
        = 0;
    virtual QList<Finished> takeFinished(const QString& tag) = 0; // thread-safe
    // Where the shards a client `tag` starts may leave their kept training state as a file, written
    // off the client's thread (a 40 M-parameter AdamW state is about 480 MB: writing it on the
    // network loop stalled its heartbeats). An executor that ignores it hands the bytes back.
    virtual void stageIn(const QString& tag, const QString& directory) { (void)tag, (void)directory; }
    // Answers a dispute's question about a shard this node trained, off the caller's thread: the
    // training state at a checkpoint (1..n-1), or a portable job's trace or operands, re-trained
    // from the round's weights (startWeightsPath) and the kept state (empty: none);
    // takeRecreated() collects the bytes under `key`. False: this executor cannot (the dispute is
    // answered with "none").
    virtual bool recreate(const QString& tag, const QString& key, const core::ShardTask& task,
        const core::DisputeQuestion& question, const QString& startWeightsPath, const QString& keptStatePath,
        const QHash<core::Digest, QString>& blobPaths)
    {
        (void)tag, (void)key, (void)task, (void)question, (void)startWeightsPath, (void)keptStatePath, (void)blobPaths;
        return false;
    }
    virtual QList<Recreated> takeRecreated(const QString& tag) // thread-safe
    {
        (void)tag;
        return {};
    }
    // The round's weights rebuilt from the previous round's and the round's change (rebuild()),
    // with the SHA-256 of weights, or why not (error non-empty).
    struct Rebuilt {
        QString tag;
        QString key;
        QByteArray weights;
        core::Digest digest;
        QString error;
    };
    // Whether rebuild() works: false, and the node downloads every round's weights whole.
    virtual bool rebuildsWeights() const { return false; }
    // Rebuilds a round's weights from the previous round's (a file) and the round's int8 change (a
    // file) off the caller's thread; takeRebuilt() collects them under `key`.
    virtual void rebuild(const QString& tag, const QString& key, const QString& previousPath, const QString& changePath)
    {
        (void)tag, (void)key, (void)previousPath, (void)changePath;
    }
    virtual QList<Rebuilt> takeRebuilt(const QString& tag) // thread-safe
    {
        (void)tag;
        return {};
    }
    virtual bool idle() const = 0; // thread-safe

    // The client `tag` (`owner`) sets what wakes it, and clears it as it goes (an empty
    // function; only its own: a second client of the tag keeps its own); thread-safe. Once it
    // returns, the previous function is not running and is not called again. An executor
    // outlives the clients it serves.
    void setNotifier(const QString& tag, const void* owner, std::function<void()> wake);

protected:
    // Something for client `tag` is ready to take: a finished shard, a recreated state, a rebuilt
    // round. From any thread.
    void notify(const QString& tag) const;

private:
    mutable std::mutex m_notifierMutex;
    struct Notifier {
        const void* owner = nullptr;
        std::function<void()> wake;
    };
    QHash<QString, Notifier> m_notifiers;
};

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
    };
    Counters counters() const;

    static const core::Clock& systemClock();

private:
    struct Private;
    std::unique_ptr<Private> d;
};

} // namespace tessera::net
