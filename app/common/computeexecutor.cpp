#include "computeexecutor.h"

#include <core/readfile.h>

#include <QFile>
#include <QSet>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>

namespace tessera::app {

// A stage task's link (compute::StageLink) through its client: what it sends waits in the
// executor's outbox for the client to relay; what the client delivers waits here until the stage
// takes it, at most 2 M + 2 S tensors (a hostile or broken peer cannot fill the node's memory).
class ComputeExecutor::NetLink final : public compute::StageLink {
public:
    // limitMs: how long the stage may wait for its partners in all (its deadline and a grace; 0: no
    // limit): past it, a receive fails and the stage gives its task back.
    NetLink(ComputeExecutor& executor, QString tag, QString assignment, std::int64_t bound, std::int64_t limitMs)
        : m_executor(executor)
        , m_tag(std::move(tag))
        , m_assignment(std::move(assignment))
        , m_bound(bound)
        , m_until(limitMs > 0 ? std::chrono::steady_clock::now() + std::chrono::milliseconds(limitMs)
                              : std::chrono::steady_clock::time_point::max())
    { }
    core::Status send(std::int64_t to, Kind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes) override
    {
        {
            std::lock_guard lock(m_mutex);
            if (!m_closed.isEmpty())
                return core::Error { QStringLiteral("stage"), m_closed };
        }
        m_executor.handOver(m_executor.m_outbox, Tensor { m_tag, m_assignment, to, kind, step, micro, bytes });
        return {};
    }
    core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) override
    {
        std::unique_lock lock(m_mutex);
        const Key key { from, int(kind), step, micro };
        const bool came = m_arrived.wait_until(lock, m_until, [&] { return !m_closed.isEmpty() || m_mail.count(key); });
        const auto found = m_mail.find(key);
        if (found == m_mail.end())
            return core::Error { QStringLiteral("stage"),
                came ? m_closed
                     : QStringLiteral("stage %1's %2 for step %3 did not come before the deadline")
                           .arg(from)
                           .arg(core::nameOf(kind))
                           .arg(step + 1) };
        auto bytes = std::move(found->second);
        m_mail.erase(found);
        return bytes;
    }
    void deliver(const Tensor& tensor)
    {
        std::lock_guard lock(m_mutex);
        if (!m_closed.isEmpty())
            return;
        if (std::int64_t(m_mail.size()) >= m_bound) {
            m_closed = QStringLiteral("more tensors came ahead than the schedule sends");
        } else {
            m_mail[{ tensor.peer, int(tensor.kind), tensor.step, tensor.micro }] = tensor.bytes;
        }
        m_arrived.notify_all();
    }
    void close(const QString& why)
    {
        std::lock_guard lock(m_mutex);
        if (m_closed.isEmpty())
            m_closed = why.isEmpty() ? QStringLiteral("the stage was stopped") : why;
        m_arrived.notify_all();
    }

private:
    using Key = std::tuple<std::int64_t, int, std::int64_t, std::int64_t>; // from, kind, step, micro
    ComputeExecutor& m_executor;
    const QString m_tag, m_assignment;
    const std::int64_t m_bound;
    const std::chrono::steady_clock::time_point m_until;
    std::mutex m_mutex;
    std::condition_variable m_arrived;
    std::map<Key, QByteArray> m_mail;
    QString m_closed;
};

ComputeExecutor::ComputeExecutor(compute::ComputeEnvironment environment, std::shared_ptr<compute::InThreadCompute> inThread)
    : m_inThread(std::move(inThread))
{
    // Blobs are found through the paths the clients pass with each task.
    environment.blobPath = [this](const core::Digest& digest) -> std::optional<QString> {
        QMutexLocker lock(&m_mutex);
        const auto it = m_blobPaths.constFind(digest);
        return it == m_blobPaths.constEnd() ? std::nullopt : std::optional<QString>(*it);
    };
    m_replicas = std::make_unique<ReplicaHost>(
        replicaLoader(environment), [this](Served served) { handOver(m_served, std::move(served)); });
    m_thread = std::make_unique<compute::ComputeThread>(std::move(environment), m_inThread);
    QObject::connect(
        m_thread.get(), &compute::ComputeThread::shardFinished, m_thread.get(),
        [this](const compute::ShardOutput& output) {
            // Hashed here, on the compute thread, not on the client's network loop, and written here
            // to the client's staging folder when it has one (a worker's kept state is a file
            // already: moved there, never read into this process).
            const QString key = keyOf(output.result.jobId, output.result.round, output.result.shard);
            QString staging;
            {
                QMutexLocker lock(&m_mutex);
                staging = m_staging.value(m_pending.value(key).tag);
                m_links.remove(m_pending.value(key).assignment); // a stage's: over
            }
            QByteArray kept = output.keptState;
            QString keptFile;
            core::Digest keptDigest;
            if (!output.keptStateFile.isEmpty()) {
                const auto digest = core::Digest::ofFile(output.keptStateFile);
                if (digest && !staging.isEmpty()) {
                    const QString staged = QStringLiteral("%1/kept-%2.part").arg(staging, digest->toHex());
                    QFile::remove(staged);
                    if (QFile::rename(output.keptStateFile, staged)) {
                        keptFile = staged;
                        keptDigest = *digest;
                    }
                }
                if (keptFile.isEmpty()) { // no staging folder, or the move failed: the bytes themselves
                    kept = core::readFile(output.keptStateFile).value_or(QByteArray());
                    keptDigest = kept.isEmpty() ? core::Digest {} : core::Digest::ofBytes(kept);
                }
            } else if (!kept.isEmpty()) {
                keptDigest = core::Digest::ofBytes(kept);
            }
            if (!kept.isEmpty() && !staging.isEmpty()) {
                QFile file(QStringLiteral("%1/kept-%2.part").arg(staging, keptDigest.toHex()));
                if (file.open(QIODevice::WriteOnly) && file.write(kept) == kept.size() && file.flush()) {
                    keptFile = file.fileName();
                    kept = QByteArray();
                } else {
                    file.remove(); // the client stores the bytes itself
                }
            }
            Pending pending;
            {
                QMutexLocker lock(&m_mutex);
                pending = m_pending.take(key);
            }
            handOver(m_finished,
                Finished { pending.tag, pending.assignment, output.result, output.weights, kept, keptDigest, keptFile });
        },
        Qt::DirectConnection);
    // Hashed here, on the compute thread, not on the client's network loop.
    QObject::connect(
        m_thread.get(), &compute::ComputeThread::stateRecreated, m_thread.get(),
        [this](const QString& key, const QByteArray& state, const QString& error) {
            const auto digest = error.isEmpty() ? core::Digest::ofBytes(state) : core::Digest {};
            // Keyed by tag and key (recreate()): two clients' questions never take each other's answers.
            handOver(m_recreated, Recreated { key.section(u'\n', 0, 0), key.section(u'\n', 1), state, digest, error });
        },
        Qt::DirectConnection);
}

ReplicaHost::Load ComputeExecutor::replicaLoader(const compute::ComputeEnvironment& environment)
{
    // A replica's model loads in this process where LibTorch is (tessera-node), else in a confined
    // worker of its own (the desktop app), started and used on the replica's thread.
    return [this, environment](const core::ShardTask& task, const QByteArray& weights, const std::function<bool()>& stopped) {
        auto here = environment;
        if (task.portable) // computes with the threads this node allows (any count gives the same bits)
            here.portableThreads = int(std::min<std::int64_t>(task.threads, m_thread->maxThreads()));
        if (m_inThread)
            return m_inThread->host(task, weights, here);
        compute::sandbox::WorkerOptions options;
        {
            QMutexLocker lock(&m_mutex);
            options = m_toolOptions;
        }
        options.cancelled = stopped;
        return compute::sandbox::hostInWorker(task, weights, here, options);
    };
}

ComputeExecutor::~ComputeExecutor()
{
    closeLinks(QStringLiteral("the node is stopping")); // a stage waiting for a tensor lets the thread end
    m_replicas.reset();
    for (auto& rebuild : m_rebuilds)
        rebuild.wait();
}

QString ComputeExecutor::keyOf(const QString& jobId, std::int64_t round, std::int64_t shard)
{
    return QStringLiteral("%1/%2/%3").arg(jobId, QString::number(round), QString::number(shard));
}

std::int64_t ComputeExecutor::timeLimitFor(std::int64_t deadlineMs)
{
    return deadlineMs > 0 ? deadlineMs + std::max<std::int64_t>(10'000, deadlineMs / 4) : 0;
}

void ComputeExecutor::start(const QString& tag, const QString& assignment, const core::ShardTask& task,
    const QByteArray& startWeights, const QString& startWeightsFile, const QHash<core::Digest, QString>& blobPaths,
    std::int64_t deadlineMs)
{
    std::shared_ptr<NetLink> link;
    {
        QMutexLocker lock(&m_mutex);
        m_pending.insert(keyOf(task.jobId, task.round, task.shard), { tag, assignment });
        m_blobPaths.insert(blobPaths);
        if (task.isLiveStage()) { // a re-executed stage reads its recorded inputs instead
            link = std::make_shared<NetLink>(
                *this, tag, assignment, 2 * task.microBatches + 2 * task.stages, deadlineMs > 0 ? timeLimitFor(deadlineMs) : 0);
            m_links.insert(assignment, link);
        }
    }
    m_thread->submit(task, startWeights, timeLimitFor(deadlineMs), link, startWeightsFile);
}

QList<net::ShardExecutor::Tensor> ComputeExecutor::takeTensors(const QString& tag)
{
    QMutexLocker lock(&m_mutex);
    return takeTagged(m_outbox, tag);
}

void ComputeExecutor::deliverTensor(const Tensor& tensor)
{
    std::shared_ptr<NetLink> link;
    {
        QMutexLocker lock(&m_mutex);
        link = m_links.value(tensor.assignment);
    }
    if (link)
        link->deliver(tensor);
}

void ComputeExecutor::stopStage(const QString& assignment, const QString& reason)
{
    std::shared_ptr<NetLink> link;
    {
        QMutexLocker lock(&m_mutex);
        link = m_links.take(assignment);
    }
    if (link)
        link->close(reason);
}

void ComputeExecutor::closeLinks(const QString& why)
{
    QHash<QString, std::shared_ptr<NetLink>> links;
    {
        QMutexLocker lock(&m_mutex);
        links.swap(m_links);
    }
    for (const auto& link : links)
        link->close(why);
}

void ComputeExecutor::stageIn(const QString& tag, const QString& directory)
{
    QMutexLocker lock(&m_mutex);
    m_staging.insert(tag, directory);
}

QList<net::ShardExecutor::Finished> ComputeExecutor::takeFinished(const QString& tag)
{
    QMutexLocker lock(&m_mutex);
    return takeTagged(m_finished, tag);
}

bool ComputeExecutor::recreate(const QString& tag, const QString& key, const core::ShardTask& task,
    const core::DisputeQuestion& question, const QString& startWeightsPath, const QString& keptStatePath,
    const QHash<core::Digest, QString>& blobPaths)
{
    {
        QMutexLocker lock(&m_mutex);
        m_blobPaths.insert(blobPaths);
    }
    m_thread->recreateState({ tag + u'\n' + key, task, question, startWeightsPath, keptStatePath });
    return true;
}

QList<net::ShardExecutor::Recreated> ComputeExecutor::takeRecreated(const QString& tag)
{
    QMutexLocker lock(&m_mutex);
    return takeTagged(m_recreated, tag);
}

void ComputeExecutor::setToolOptions(const compute::sandbox::WorkerOptions& options)
{
    QMutexLocker lock(&m_mutex);
    m_toolOptions = options;
}

void ComputeExecutor::rebuild(const QString& tag, const QString& key, const QString& previousPath, const QString& changePath)
{
    compute::sandbox::WorkerOptions options;
    {
        QMutexLocker lock(&m_mutex);
        options = m_toolOptions;
    }
    auto work = std::async(std::launch::async, [this, tag, key, previousPath, changePath, options] {
        Rebuilt made { tag, key, {}, {}, {} };
        try {
            auto previous = core::readFile(previousPath);
            auto change = previous ? core::readFile(changePath) : core::Result<QByteArray>(previous.error());
            auto weights = !change ? core::Result<QByteArray>(change.error())
                : m_inThread       ? m_inThread->roundWeights(*previous, *change)
                                   : compute::sandbox::roundWeightsInWorker(*previous, *change, options);
            if (weights) {
                made.digest = core::Digest::ofBytes(*weights); // here, not on the client's network loop
                made.weights = std::move(*weights);
            } else {
                made.error = weights.error().toString();
            }
        } catch (const std::exception& caught) {
            made.error = QStringLiteral("internal error: %1").arg(QString::fromUtf8(caught.what()));
        }
        handOver(m_rebuilt, std::move(made));
    });
    QMutexLocker lock(&m_mutex);
    m_rebuilds.remove_if(
        [](const std::future<void>& done) { return done.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
    m_rebuilds.push_back(std::move(work));
}

QList<net::ShardExecutor::Rebuilt> ComputeExecutor::takeRebuilt(const QString& tag)
{
    QMutexLocker lock(&m_mutex);
    return takeTagged(m_rebuilt, tag);
}

void ComputeExecutor::cancelAll()
{
    closeLinks(QStringLiteral("contributing was switched off"));
    QSet<QString> jobs;
    {
        QMutexLocker lock(&m_mutex);
        for (auto it = m_pending.constBegin(); it != m_pending.constEnd(); ++it)
            jobs.insert(it.key().section(u'/', 0, 0));
        m_pending.clear();
        m_finished.clear();
    }
    for (const auto& job : jobs)
        m_thread->cancelJob(job);
    m_thread->resume();
}

bool ComputeExecutor::idle() const
{
    QMutexLocker lock(&m_mutex);
    return m_pending.isEmpty();
}

void ComputeExecutor::host(
    const QString& tag, const QString& assignment, const core::ShardTask& replica, const QString& weightsPath)
{
    m_replicas->host(tag, assignment, replica, weightsPath);
}

void ComputeExecutor::ask(
    const QString& tag, const QString& assignment, const QString& ticket, const core::inference::Question& question)
{
    if (m_replicas)
        m_replicas->ask(tag, assignment, ticket, question);
}

void ComputeExecutor::unhost(const QString& tag, const QString& assignment)
{
    if (m_replicas)
        m_replicas->unhost(tag, assignment);
}

QList<ComputeExecutor::Served> ComputeExecutor::takeServed(const QString& tag)
{
    QMutexLocker lock(&m_mutex);
    return takeTagged(m_served, tag);
}

} // namespace tessera::app
