#pragma once

#include "replicahost.h"

#include <compute/supervisor/computethread.h>
#include <compute/supervisor/sandbox/worker.h>
#include <net/nodeclient.h>

#include <QHash>
#include <QMutex>

#include <future>
#include <list>
#include <memory>

namespace tessera::app {

// Hands shards that NodeClients receive to the compute thread, and their results back.
class ComputeExecutor final : public net::ShardExecutor {
public:
    // inThread: LibTorch on the compute thread when the sandbox is off, and for rebuilding a round's
    // weights (compute::inThreadCompute(), for a program that links LibTorch); without it both
    // happen in tessera-compute workers (the desktop app).
    explicit ComputeExecutor(compute::ComputeEnvironment environment, std::shared_ptr<compute::InThreadCompute> inThread = {});
    ~ComputeExecutor() override;

    void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray& startWeights,
        const QString& startWeightsFile, const QHash<core::Digest, QString>& blobPaths, std::int64_t deadlineMs) override;
    // How long a shard with this deadline may compute in a sandboxed worker: the deadline and a
    // grace (a quarter of it, at least 10 s), for the time it waited for its data and a slow step.
    static std::int64_t timeLimitFor(std::int64_t deadlineMs);
    QList<Finished> takeFinished(const QString& tag) override;
    void stageIn(const QString& tag, const QString& directory) override;
    bool recreate(const QString& tag, const QString& key, const core::ShardTask& task, const core::DisputeQuestion& question,
        const QString& startWeightsPath, const QString& keptStatePath, const QHash<core::Digest, QString>& blobPaths) override;
    QList<Recreated> takeRecreated(const QString& tag) override;
    bool rebuildsWeights() const override { return true; }
    // On a helper thread of its own, not the compute thread: a shard in training does not hold it up.
    void rebuild(const QString& tag, const QString& key, const QString& previousPath, const QString& changePath) override;
    QList<Rebuilt> takeRebuilt(const QString& tag) override;
    // Serving: replicas hosted by a ReplicaHost, in this process with the in-thread backend, else
    // each in a confined worker.
    bool canHost() const override { return true; }
    void host(const QString& tag, const QString& assignment, const core::ShardTask& replica, const QString& weightsPath) override;
    void ask(
        const QString& tag, const QString& assignment, const QString& ticket, const core::inference::Question& question) override;
    void unhost(const QString& tag, const QString& assignment) override;
    QList<Served> takeServed(const QString& tag) override;
    QList<ReplicaHost::Summary> hosted() { return m_replicas->summaries(); }
    bool idle() const override;
    // Stage tasks run on the compute thread with LibTorch in this process, or in its compute worker
    // (the desktop app's executor has no in-thread backend), each over a link whose tensors wait here.
    bool runsStages() const override { return true; }
    QList<Tensor> takeTensors(const QString& tag) override;
    void deliverTensor(const Tensor& tensor) override;
    void stopStage(const QString& assignment, const QString& reason) override;
    // Drops every shard handed to the compute thread and forgets them (contributing switched off).
    void cancelAll();

    compute::ComputeThread& thread() { return *m_thread; }
    // How the worker that rebuilds a round's weights (without an in-thread backend) runs.
    void setToolOptions(const compute::sandbox::WorkerOptions& options);

private:
    struct Pending {
        QString tag;
        QString assignment;
    };
    static QString keyOf(const QString& jobId, std::int64_t round, std::int64_t shard);
    ReplicaHost::Load replicaLoader(const compute::ComputeEnvironment& environment);
    // Leaves what was made for a client (a finished shard, a recreated state, a rebuilt round) in
    // `list` and wakes the client's loop (ShardExecutor::notify).
    template<typename Output> void handOver(QList<Output>& list, Output output)
    {
        const QString tag = output.tag;
        {
            QMutexLocker lock(&m_mutex);
            list.append(std::move(output));
        }
        notify(tag);
    }

    class NetLink;
    void closeLinks(const QString& why);
    QHash<QString, std::shared_ptr<NetLink>> m_links; // a running stage task's, by assignment
    QList<Tensor> m_outbox;
    mutable QMutex m_mutex;
    QHash<QString, Pending> m_pending; // by job/round/shard
    QList<Finished> m_finished;
    QList<Recreated> m_recreated;
    QList<Rebuilt> m_rebuilt;
    std::list<std::future<void>> m_rebuilds; // waited for before the rest goes
    QHash<core::Digest, QString> m_blobPaths;
    QHash<QString, QString> m_staging; // by tag: where its shards' kept states are written
    std::shared_ptr<compute::InThreadCompute> m_inThread;
    compute::sandbox::WorkerOptions m_toolOptions;
    std::unique_ptr<compute::ComputeThread> m_thread;
    QList<Served> m_served;
    std::unique_ptr<ReplicaHost> m_replicas; // last: stopped first
};

} // namespace tessera::app
