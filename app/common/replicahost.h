#pragma once

#include <compute/common/environment.h>
#include <compute/supervisor/inthread.h>
#include <net/shardexecutor.h>

#include <QHash>
#include <QMutex>

#include <functional>
#include <memory>

namespace tessera::app {

// The served models' replicas a node hosts (docs/PROTOCOL.md, "Serving"), each on a thread of its
// own with its model loaded once (compute::HostedModel: LibTorch in this process, or in a confined
// worker of the replica's own for a program without LibTorch), answering its questions one at a
// time in the order they came. What comes of them is handed to `deliver` from those threads.
class ReplicaHost {
public:
    static constexpr int StreamEveryMs = 20; // tokens after the first are streamed in batches this far apart
    using Served = net::ShardExecutor::Served;
    // Loads a replica's model from its serve task and the weights' bytes, on the replica's thread;
    // `stopped` says when the replica was told to stop (a model in a worker is then killed, in
    // its load or an answer, rather than waited for).
    using Load = std::function<core::Result<std::unique_ptr<compute::HostedModel>>(
        const core::ShardTask&, const QByteArray&, const std::function<bool()>& stopped)>;
    ReplicaHost(Load load, std::function<void(Served)> deliver);
    ~ReplicaHost(); // stops every replica and waits for their threads

    void host(const QString& tag, const QString& assignment, const core::ShardTask& replica, const QString& weightsPath);
    void ask(const QString& tag, const QString& assignment, const QString& ticket, const core::inference::Question& question);
    // Stops hosting (empty assignment: all of the tag's) without waiting: an answer in progress ends
    // at its next token, and its thread is joined later.
    void unhost(const QString& tag, const QString& assignment);

    // What each hosted replica did so far (the app's Overview): its job, answers and tokens.
    struct Summary {
        QString jobId;
        std::int64_t answered = 0;
        std::int64_t tokens = 0;
    };
    QList<Summary> summaries();

private:
    struct Replica;
    static QString keyOf(const QString& tag, const QString& assignment) { return tag + u'/' + assignment; }
    void serve(const std::shared_ptr<Replica>& replica, const core::ShardTask& task, const QString& weightsPath);

    Load m_load;
    std::function<void(Served)> m_deliver;
    QMutex m_mutex;
    QHash<QString, std::shared_ptr<Replica>> m_replicas;
    QList<std::shared_ptr<Replica>> m_stopping; // told to stop; joined once their thread returns
    void reap(); // under m_mutex
};

} // namespace tessera::app
