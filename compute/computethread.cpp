#include "computethread.h"

#include <core/memoryestimate.h>
#include <core/readfile.h>

#include <QElapsedTimer>
#include <QFileInfo>
#include <QMutex>
#include <QThread>
#include <QWaitCondition>

#include <deque>
#include <exception>
#include <optional>

namespace tessera::compute {

namespace {

struct QueuedShard {
    core::ShardTask task;
    QByteArray weights; // start weights (also kept with a paused shard: a compressed update needs them)
    QByteArray suspended; // the state of a paused shard
};

// Emitting progress for every step of a small model would flood the GUI's event queue.
constexpr std::int64_t ProgressIntervalMs = 100;

// What the shard would hold in memory here (core::estimateShardMemory): the model from the round's
// weights as received, the data as this node holds it.
core::ShardMemory shardMemory(const core::ShardTask& task, std::int64_t weightBytes, const ComputeEnvironment& environment)
{
    const auto data = core::datasetBytes(task.dataset, [&](const core::Digest& digest) -> std::optional<std::int64_t> {
        const auto path = environment.blobPath ? environment.blobPath(digest) : std::nullopt;
        return path ? std::optional<std::int64_t>(QFileInfo(*path).size()) : std::nullopt;
    });
    return core::estimateShardMemory(task.model, task.optimizer, task.batchSize, weightBytes, data);
}

} // namespace

struct ComputeThread::Private {
    ComputeThread* q = nullptr;
    ComputeEnvironment environment;

    mutable QMutex mutex;
    QWaitCondition wake;
    std::deque<QueuedShard> queue;
    std::deque<StateRequest> stateRequests;
    bool pauseRequested = false;
    bool pauseAfterCurrent = false;
    bool stopRequested = false;
    QString cancelledJob;
    int cpuPercent = 100;
    int maxThreads = 1 << 16;
    std::int64_t maxMemoryMiB = 0; // 0: no limit
    State state = State::Idle;
    struct Hold {
        QString jobId;
        std::int64_t shard = 0;
        std::int64_t step = 0;
    };
    std::optional<Hold> hold;
    bool holdReleased = false;

    std::unique_ptr<QThread> thread;

    void setState(State next)
    {
        {
            QMutexLocker lock(&mutex);
            if (state == next)
                return;
            state = next;
        }
        Q_EMIT q->stateChanged(next);
    }

    void loop();
    void runShard(QueuedShard item);
    // Answers every waiting StateRequest (without the mutex held on entry).
    void serveStateRequests();
    // With the mutex held: waits at a hold placed on this step, if any, until something ends it.
    void waitIfHeld(QMutexLocker<QMutex>& lock, const core::ShardTask& task, std::int64_t step);
};

ComputeThread::ComputeThread(ComputeEnvironment environment, QObject* parent)
    : QObject(parent)
    , d(std::make_unique<Private>())
{
    qRegisterMetaType<ShardProgress>();
    qRegisterMetaType<ShardOutput>();
    qRegisterMetaType<core::ShardTask>();
    d->q = this;
    d->environment = std::move(environment);
    d->thread.reset(QThread::create([this] { d->loop(); }));
    d->thread->setObjectName(QStringLiteral("tessera-compute"));
    d->thread->start(QThread::LowPriority);
}

ComputeThread::~ComputeThread()
{
    {
        QMutexLocker lock(&d->mutex);
        d->stopRequested = true;
        d->wake.wakeAll();
    }
    d->thread->wait();
}

void ComputeThread::submit(const core::ShardTask& task, const QByteArray& startWeights)
{
    QMutexLocker lock(&d->mutex);
    d->queue.push_back({ task, startWeights, {} });
    d->wake.wakeAll();
}

void ComputeThread::submitSuspended(const core::ShardTask& task, const QByteArray& suspendedState, const QByteArray& startWeights)
{
    QMutexLocker lock(&d->mutex);
    d->queue.push_back({ task, startWeights, suspendedState });
    d->wake.wakeAll();
}

void ComputeThread::recreateState(const StateRequest& request)
{
    QMutexLocker lock(&d->mutex);
    d->stateRequests.push_back(request);
    d->wake.wakeAll();
}

void ComputeThread::pause()
{
    QMutexLocker lock(&d->mutex);
    d->pauseRequested = true;
    d->wake.wakeAll();
}

void ComputeThread::finishCurrentThenPause()
{
    QMutexLocker lock(&d->mutex);
    d->pauseAfterCurrent = true;
    d->wake.wakeAll();
}

void ComputeThread::holdAt(const QString& jobId, std::int64_t shard, std::int64_t step)
{
    QMutexLocker lock(&d->mutex);
    d->hold = Private::Hold { jobId, shard, step };
    d->holdReleased = false;
}

void ComputeThread::releaseHold()
{
    QMutexLocker lock(&d->mutex);
    d->hold.reset();
    d->holdReleased = true;
    d->wake.wakeAll();
}

void ComputeThread::resume()
{
    QMutexLocker lock(&d->mutex);
    d->pauseRequested = false;
    d->pauseAfterCurrent = false;
    d->wake.wakeAll();
}

void ComputeThread::cancelJob(const QString& jobId)
{
    QMutexLocker lock(&d->mutex);
    d->cancelledJob = jobId;
    std::erase_if(d->queue, [&](const QueuedShard& item) { return item.task.jobId == jobId; });
    d->wake.wakeAll();
}

void ComputeThread::setCpuPercent(int percent)
{
    QMutexLocker lock(&d->mutex);
    d->cpuPercent = std::clamp(percent, 10, 100);
    d->wake.wakeAll();
}

void ComputeThread::setMaxThreads(int threads)
{
    QMutexLocker lock(&d->mutex);
    d->maxThreads = std::max(1, threads);
}

void ComputeThread::setMaxMemoryMiB(std::int64_t mebibytes)
{
    QMutexLocker lock(&d->mutex);
    d->maxMemoryMiB = std::max<std::int64_t>(0, mebibytes);
}

ComputeThread::State ComputeThread::state() const
{
    QMutexLocker lock(&d->mutex);
    return d->state;
}

int ComputeThread::queuedCount() const
{
    QMutexLocker lock(&d->mutex);
    return int(d->queue.size());
}

void ComputeThread::Private::waitIfHeld(QMutexLocker<QMutex>& lock, const core::ShardTask& task, std::int64_t step)
{
    if (!hold || hold->jobId != task.jobId || hold->shard != task.shard || hold->step != step)
        return;
    hold.reset();
    holdReleased = false;
    lock.unlock();
    Q_EMIT q->held(task, step);
    lock.relock();
    while (!holdReleased && !stopRequested && !pauseRequested && !pauseAfterCurrent && cancelledJob != task.jobId)
        wake.wait(&mutex);
    holdReleased = false;
}

void ComputeThread::Private::loop()
{
    for (;;) {
        QueuedShard item;
        {
            QMutexLocker lock(&mutex);
            while (!stopRequested && stateRequests.empty() && (queue.empty() || pauseRequested || pauseAfterCurrent)) {
                const State waiting = (pauseRequested || pauseAfterCurrent) ? State::Paused : State::Idle;
                if (state != waiting) {
                    lock.unlock();
                    setState(waiting);
                    lock.relock();
                    continue;
                }
                wake.wait(&mutex);
            }
            if (stopRequested)
                break;
            if (!stateRequests.empty()) {
                lock.unlock();
                serveStateRequests();
                continue;
            }
            item = std::move(queue.front());
            queue.pop_front();
            cancelledJob.clear();
        }
        setState(State::Working);
        const core::ShardTask task = item.task;
        try {
            runShard(std::move(item));
        } catch (const std::exception& error) {
            // ShardRun reports errors as values; this is the last line of defence for the thread.
            Q_EMIT q->shardFinished(
                { failedResult(task, QStringLiteral("internal error: %1").arg(QString::fromUtf8(error.what()))), {}, {} });
        } catch (...) {
            Q_EMIT q->shardFinished({ failedResult(task, QStringLiteral("internal error")), {}, {} });
        }
    }
    setState(State::Stopped);
}

void ComputeThread::Private::runShard(QueuedShard item)
{
    const auto& task = item.task;
    QString refusal; // the node's own settings, not the job's fault: given back for another node, held against nobody
    {
        QMutexLocker lock(&mutex);
        if (task.threads > maxThreads && !task.portable) { // a portable shard computes with fewer (below)
            refusal = QStringLiteral("the shard needs %1 threads but this node allows %2 (Compute/MaxThreads)")
                          .arg(task.threads)
                          .arg(maxThreads);
        } else if (maxMemoryMiB > 0) {
            const auto needed = shardMemory(task, item.weights.size(), environment);
            if (needed.totalMiB() > maxMemoryMiB)
                refusal = QStringLiteral("the shard needs about %1 MiB (data %2, model %3, activations %4) but this node "
                                         "allows %5 MiB (Compute/MaxMemoryMiB)")
                              .arg(needed.totalMiB())
                              .arg(needed.dataset >> 20)
                              .arg(needed.model >> 20)
                              .arg(needed.activations >> 20)
                              .arg(maxMemoryMiB);
        }
    }
    if (!refusal.isEmpty()) {
        auto result = failedResult(task, refusal);
        result.outcome = core::ShardResult::Outcome::Returned;
        Q_EMIT q->shardFinished({ result, {}, {} });
        return;
    }
    auto here = environment;
    if (task.portable) {
        QMutexLocker lock(&mutex);
        here.portableThreads = int(std::min<std::int64_t>(task.threads, maxThreads));
    }
    auto started = item.suspended.isEmpty()
        ? ShardRun::start(task, item.weights, here)
        : ShardRun::resume(task, item.suspended, here, ShardRun::StateOrigin::Own, item.weights);
    if (!started) {
        Q_EMIT q->shardFinished({ failedResult(task, started.error().toString()), {}, {} });
        return;
    }
    auto run = std::move(*started);

    QElapsedTimer sinceProgress;
    sinceProgress.start();
    std::int64_t busyNs = 0;
    std::int64_t throttledNs = 0;
    const std::int64_t firstStep = run->completedSteps();

    while (!run->finished()) {
        serveStateRequests();
        {
            QMutexLocker lock(&mutex);
            waitIfHeld(lock, task, run->completedSteps());
            if (stopRequested || pauseRequested) {
                const bool stopping = stopRequested;
                lock.unlock();
                const QByteArray state = run->suspend();
                if (!stopping) {
                    QMutexLocker relock(&mutex);
                    queue.push_front({ task, item.weights, state }); // resume() continues it first
                }
                Q_EMIT q->shardPaused(task, state);
                return;
            }
            if (cancelledJob == task.jobId) {
                lock.unlock();
                Q_EMIT q->shardCancelled(task);
                return;
            }
        }

        QElapsedTimer stepTimer;
        stepTimer.start();
        if (auto status = run->step(); !status) {
            Q_EMIT q->shardFinished({ failedResult(task, status.error().toString()), {}, {} });
            return;
        }
        const std::int64_t stepNs = stepTimer.nsecsElapsed();
        busyNs += stepNs;

        if (sinceProgress.elapsed() >= ProgressIntervalMs || run->finished()) {
            sinceProgress.restart();
            const auto done = run->completedSteps();
            const double seconds = std::max<double>(double(busyNs + throttledNs) / 1e9, 1e-6);
            const double stepsPerSecond = double(done - firstStep) / seconds;
            Q_EMIT q->progress(ShardProgress { task.jobId, task.round, task.shard, done, task.localSteps, run->lastLoss(),
                stepsPerSecond * double(task.batchSize),
                stepsPerSecond > 0 ? std::int64_t(double(task.localSteps - done) / stepsPerSecond * 1000.0) : 0,
                busyNs / 1'000'000, throttledNs / 1'000'000 });
        }

        // Duty cycle: after computing for t, rest t * (100 - p) / p, waking early for pause or cancel.
        QMutexLocker lock(&mutex);
        if (cpuPercent < 100 && !run->finished()) {
            const QDeadlineTimer deadline(std::chrono::nanoseconds(stepNs * (100 - cpuPercent) / cpuPercent));
            QElapsedTimer restTimer;
            restTimer.start();
            while (!deadline.hasExpired() && !stopRequested && !pauseRequested && cancelledJob != task.jobId)
                wake.wait(&mutex, deadline);
            throttledNs += restTimer.nsecsElapsed();
        }
    }

    auto output = run->finish();
    bool pauseNow = false;
    {
        QMutexLocker lock(&mutex);
        pauseNow = pauseAfterCurrent;
    }
    Q_EMIT q->shardFinished(output);
    if (pauseNow)
        setState(State::Paused);
}

void ComputeThread::Private::serveStateRequests()
{
    for (;;) {
        StateRequest request;
        {
            QMutexLocker lock(&mutex);
            if (stateRequests.empty())
                return;
            request = std::move(stateRequests.front());
            stateRequests.pop_front();
        }
        auto read
            = [](const QString& path) { return path.isEmpty() ? core::Result<QByteArray>(QByteArray()) : core::readFile(path); };
        QString error;
        QByteArray state;
        try {
            auto start = read(request.startWeightsPath);
            auto kept = read(request.keptStatePath);
            if (!start || !kept) {
                error = (!start ? start.error() : kept.error()).toString();
            } else {
                using Want = core::DisputeQuestion::Want;
                const auto& question = request.question;
                auto made = question.want == Want::Trace
                    ? compute::traceInterval(request.task, *start, *kept, question.checkpoint, environment)
                    : question.want == Want::Operands
                    ? compute::operandsOf(request.task, *start, *kept, question.step, question.instruction, environment)
                    : compute::recreateState(request.task, *start, *kept, question.checkpoint, environment);
                if (made)
                    state = std::move(*made);
                else
                    error = made.error().toString();
            }
        } catch (const std::exception& caught) {
            error = QStringLiteral("internal error: %1").arg(QString::fromUtf8(caught.what()));
        }
        Q_EMIT q->stateRecreated(request.key, state, error);
    }
}

} // namespace tessera::compute
