#include "computethread.h"

#include "sandbox/worker.h"

#include <core/datasetchunks.h>
#include <core/memoryestimate.h>
#include <core/readfile.h>

#include <QElapsedTimer>
#include <QFile>
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
    std::int64_t timeLimitMs = 0; // what is left of it when paused
    std::shared_ptr<StageLink> link = {}; // a stage task's (docs/PROTOCOL.md, "Stage tasks")
    QString weightsFile = {}; // where the start weights are when `weights` is empty (a stage task)
};

// A shard in a worker, driven in calls of as many steps as fill about CallNs (a progress report's
// interval: each round trip through the pipes costs about 0.5 ms here, mostly waking two processes
// on a VM, 0.5% of such a call; a pause waits for at most one call; ThrottledCallNs under a duty
// cycle, which rests after each call).
class WorkerSteps final : public ShardSteps {
public:
    explicit WorkerSteps(std::unique_ptr<sandbox::RemoteShardRun> run)
        : m_run(std::move(run))
    { }
    std::int64_t completedSteps() const override { return m_run->completedSteps(); }
    bool finished() const override { return m_run->finished(); }
    double lastLoss() const override { return m_run->lastLoss(); }
    core::Status step(std::int64_t steps) override { return m_run->step(steps); }
    core::Result<QByteArray> suspend() override { return m_run->suspend(); }
    ShardOutput finish() override { return m_run->finish(); }
    std::int64_t stepsPerCall(std::int64_t lastCallNs, std::int64_t lastCallSteps, std::int64_t targetNs) const override
    {
        if (lastCallSteps <= 0 || lastCallNs <= 0)
            return 1;
        const std::int64_t perStep = std::max<std::int64_t>(1, lastCallNs / lastCallSteps);
        return std::clamp<std::int64_t>(targetNs / perStep, 1, 1024);
    }

private:
    std::unique_ptr<sandbox::RemoteShardRun> m_run;
};

constexpr std::int64_t CallNs = 100'000'000;
constexpr std::int64_t ThrottledCallNs = 20'000'000;

// How long a sandboxed step may go on after a pause or stop was asked for before its worker is
// stopped: a boundary normally comes within a call (about 100 ms); a step that never ends (the job
// owner's code) must not keep the node from pausing.
constexpr std::int64_t StuckStepMs = 5000;

// The most a dispute's question may compute in a worker: an answer later than this is useless
// (Broker/DisputeTimeoutSeconds is 60 s by default), and a job whose code hangs must not hold
// the thread.
constexpr std::int64_t StateRequestLimitMs = 10 * 60 * 1000;

// Emitting progress for every step of a small model would flood the GUI's event queue.
constexpr std::int64_t ProgressIntervalMs = 100;

// The memory a chunk's stored byte takes once loaded (compute/engine's datasets.cpp): tokens become
// int64 inputs and targets, cut from an int64 copy (24 bytes for a uint8 token, the form tessera-job
// chunk writes); samples float32 with int64 labels, joined into one copy (about 2).
std::int64_t chunkExpansion(const core::ShardTask& task, const ComputeEnvironment& environment)
{
    const auto path = environment.blobPath ? environment.blobPath(task.dataset.manifestSha256) : std::nullopt;
    const auto text = path ? core::readFile(*path) : core::Result<QByteArray>(core::Error {});
    const auto manifest = text ? core::DatasetManifest::fromJson(*text) : core::Result<core::DatasetManifest>(text.error());
    return !manifest || manifest->kind == core::DatasetManifest::Kind::Tokens ? 24 : 2;
}

// What the shard would hold in memory here (core::estimateShardMemory): the model from the round's
// weights as received, the data as this node holds it; a stage task's part (core::estimateStageMemory).
core::ShardMemory shardMemory(const core::ShardTask& task, std::int64_t weightBytes, const ComputeEnvironment& environment)
{
    auto fileSize = [&](const core::Digest& digest) -> std::optional<std::int64_t> {
        const auto path = environment.blobPath ? environment.blobPath(digest) : std::nullopt;
        return path ? std::optional<std::int64_t>(QFileInfo(*path).size()) : std::nullopt;
    };
    auto data = core::datasetBytes(task.dataset, fileSize);
    if (!task.dataChunks.isEmpty()) {
        std::int64_t chunks = 0;
        for (const auto& chunk : task.dataChunks)
            chunks += fileSize(chunk).value_or(0);
        data += chunkExpansion(task, environment) * chunks;
    }
    if (task.isStage()) // by the model's parts, not by the file's size (which the file's layout decides)
        return core::estimateStageMemory(
            task.model, task.optimizer, task.batchSize, task.microBatches, task.stage, task.stages, task.carriesOptimizer, data);
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
    Sandbox sandbox;
    std::shared_ptr<InThreadCompute> inThread; // training on this thread when the sandbox is off; null: none
    QElapsedTimer interruptAsked; // since a pause or stop was asked for (invalid: none)
    State state = State::Idle;
    struct Hold {
        QString jobId;
        std::int64_t shard = 0;
        std::int64_t step = 0;
    };
    std::optional<Hold> hold;
    bool holdReleased = false;

    std::unique_ptr<QThread> thread;
    std::shared_ptr<sandbox::Worker> worker; // the compute thread's only: the last job's, kept for its next shard
    bool scratchSwept = false;

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
    // The pieces of runShard. A shard's time and pace so far.
    struct Pace {
        QElapsedTimer sinceProgress;
        std::int64_t busyNs = 0;
        std::int64_t throttledNs = 0;
        std::int64_t lastCallNs = 0;
        std::int64_t lastCallSteps = 0;
        std::int64_t firstStep = 0;
    };
    // Why this node's settings refuse the shard (empty: they do not).
    QString refusalOf(const QueuedShard& item) const;
    // The shard's run; null when it could not start, after saying why (finished, returned or cancelled).
    std::unique_ptr<ShardSteps> openOrReport(const QueuedShard& item);
    // At a step boundary: pause, stop, cancel and holds; `steps` for the next call. False: the
    // shard left this thread (paused, cancelled or failed), which has been said.
    bool atBoundary(const QueuedShard& item, ShardSteps& run, const Pace& pace, std::int64_t& steps);
    // The next call's steps; false: the shard failed or was cancelled, which has been said.
    bool stepOrReport(const core::ShardTask& task, ShardSteps& run, std::int64_t steps, Pace& pace);
    void reportProgress(const core::ShardTask& task, const ShardSteps& run, const Pace& pace);
    // The duty cycle's rest after a call (Compute/CpuPercent).
    void rest(const core::ShardTask& task, const ShardSteps& run, Pace& pace);
    // Whether the sandbox is on, and a worker's options from the settings (without `cancelled`).
    std::pair<bool, sandbox::WorkerOptions> workerOptions(std::int64_t timeLimitMs) const
    {
        QMutexLocker lock(&mutex);
        sandbox::WorkerOptions options;
        options.program = sandbox.program;
        options.scratchRoot = sandbox.scratchRoot;
        options.nice = sandbox.nice;
        options.memoryMiB = maxMemoryMiB;
        options.timeLimitMs = timeLimitMs;
        options.confined = sandbox.enabled; // off without an in-thread backend: a worker all the same
        return { sandbox.enabled, options };
    }
    // The shard's run, on this thread or in a worker (sandbox), or why it cannot start.
    core::Result<std::unique_ptr<ShardSteps>> open(const QueuedShard& item, const ComputeEnvironment& here);
    // Answers every waiting StateRequest (without the mutex held on entry).
    void serveStateRequests();
    // With the mutex held: waits at a hold placed on this step, if any, until something ends it.
    void waitIfHeld(QMutexLocker<QMutex>& lock, const core::ShardTask& task, std::int64_t step);
};

ComputeThread::ComputeThread(ComputeEnvironment environment, std::shared_ptr<InThreadCompute> inThread, QObject* parent)
    : QObject(parent)
    , d(std::make_unique<Private>())
{
    d->inThread = std::move(inThread);
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
        if (!d->interruptAsked.isValid())
            d->interruptAsked.start();
        d->wake.wakeAll();
    }
    d->thread->wait();
}

void ComputeThread::submit(const core::ShardTask& task, const QByteArray& startWeights, std::int64_t timeLimitMs,
    std::shared_ptr<StageLink> link, const QString& startWeightsFile)
{
    QMutexLocker lock(&d->mutex);
    d->queue.push_back({ task, startWeights, {}, std::max<std::int64_t>(0, timeLimitMs), std::move(link), startWeightsFile });
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
    if (!d->interruptAsked.isValid())
        d->interruptAsked.start();
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
    d->interruptAsked.invalidate();
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

int ComputeThread::maxThreads() const
{
    QMutexLocker lock(&d->mutex);
    return d->maxThreads;
}

void ComputeThread::setSandbox(const Sandbox& sandbox)
{
    QMutexLocker lock(&d->mutex);
    d->sandbox = sandbox;
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
                // A worker gives its memory back when the node pauses, or after a while with nothing to do.
                if (worker && waiting == State::Paused) {
                    lock.unlock();
                    worker.reset();
                    lock.relock();
                    continue;
                }
                if (worker) {
                    if (!wake.wait(&mutex, QDeadlineTimer(IdleWorkerMs))) {
                        lock.unlock();
                        worker.reset();
                        lock.relock();
                    }
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
        } catch (const std::bad_alloc&) {
            Q_EMIT q->shardFinished(
                { core::ShardResult::failedOf(task, QStringLiteral("out of memory: the shard's allocation failed")), {}, {} });
        } catch (const std::exception& error) {
            // ShardRun reports errors as values; this is the last line of defence for the thread.
            Q_EMIT q->shardFinished(
                { core::ShardResult::failedOf(task, QStringLiteral("internal error: %1").arg(QString::fromUtf8(error.what()))),
                    {}, {} });
        } catch (...) {
            Q_EMIT q->shardFinished({ core::ShardResult::failedOf(task, QStringLiteral("internal error")), {}, {} });
        }
    }
    worker.reset();
    setState(State::Stopped);
}

void ComputeThread::Private::runShard(QueuedShard item)
{
    const auto& task = item.task;
    auto run = openOrReport(item);
    if (!run)
        return;
    Pace pace;
    pace.sinceProgress.start();
    pace.firstStep = run->completedSteps();
    while (!run->finished()) {
        std::int64_t steps = 0;
        if (!atBoundary(item, *run, pace, steps))
            return;
        // A dispute's question, even one asked while this boundary was held, is answered before the
        // next step (the node's stake depends on it); it changes none of this shard's bits.
        serveStateRequests();
        if (!stepOrReport(task, *run, steps, pace))
            return;
        if (pace.sinceProgress.elapsed() >= ProgressIntervalMs || run->finished()) {
            pace.sinceProgress.restart();
            reportProgress(task, *run, pace);
        }
        rest(task, *run, pace);
    }

    auto output = run->finish();
    bool pauseNow = false;
    {
        QMutexLocker lock(&mutex);
        pauseNow = pauseAfterCurrent;
    }
    Q_EMIT q->shardFinished(output);
    if (!output.keptStateFile.isEmpty())
        QFile::remove(output.keptStateFile); // not taken by a receiver (ShardOutput::keptStateFile)
    if (pauseNow)
        setState(State::Paused);
}

QString ComputeThread::Private::refusalOf(const QueuedShard& item) const
{
    const auto& task = item.task;
    QMutexLocker lock(&mutex);
    if (task.threads > maxThreads && !task.portable) // a portable shard computes with fewer (below)
        return QStringLiteral("the shard needs %1 threads but this node allows %2 (Compute/MaxThreads)")
            .arg(task.threads)
            .arg(maxThreads);
    if (maxMemoryMiB > 0) {
        const auto weightBytes
            = item.weights.isEmpty() && !item.weightsFile.isEmpty() ? QFileInfo(item.weightsFile).size() : item.weights.size();
        const auto needed = shardMemory(task, weightBytes, environment);
        if (needed.totalMiB() > maxMemoryMiB)
            return QStringLiteral("the shard needs about %1 MiB (data %2, model %3, activations %4) but this node "
                                  "allows %5 MiB (Compute/MaxMemoryMiB)")
                .arg(needed.totalMiB())
                .arg(needed.dataset >> 20)
                .arg(needed.model >> 20)
                .arg(needed.activations >> 20)
                .arg(maxMemoryMiB);
    }
    return {};
}

std::unique_ptr<ShardSteps> ComputeThread::Private::openOrReport(const QueuedShard& item)
{
    const auto& task = item.task;
    // The node's own settings, not the job's fault: given back for another node, held against nobody.
    if (const QString refusal = refusalOf(item); !refusal.isEmpty()) {
        auto result = core::ShardResult::failedOf(task, refusal);
        result.outcome = core::ShardResult::Outcome::Returned;
        Q_EMIT q->shardFinished({ result, {}, {} });
        return nullptr;
    }
    auto here = environment;
    if (task.portable) {
        QMutexLocker lock(&mutex);
        here.portableThreads = int(std::min<std::int64_t>(task.threads, maxThreads));
    }
    auto opened = open(item, here);
    if (opened)
        return std::move(*opened);
    if (opened.error().message == u"cancelled") {
        Q_EMIT q->shardCancelled(task);
        return nullptr;
    }
    auto result = core::ShardResult::failedOf(task, opened.error().message);
    if (opened.error().field == u"sandbox") { // this node cannot start its worker: not the job's fault
        result.outcome = core::ShardResult::Outcome::Returned;
        qWarning("tessera: %s", qPrintable(opened.error().message));
    }
    Q_EMIT q->shardFinished({ result, {}, {} });
    return nullptr;
}

bool ComputeThread::Private::atBoundary(const QueuedShard& item, ShardSteps& run, const Pace& pace, std::int64_t& steps)
{
    const auto& task = item.task;
    QMutexLocker lock(&mutex);
    steps = run.stepsPerCall(pace.lastCallNs, pace.lastCallSteps, cpuPercent < 100 ? ThrottledCallNs : CallNs);
    waitIfHeld(lock, task, run.completedSteps());
    if ((stopRequested || pauseRequested) && task.isStage()) {
        lock.unlock();
        auto given = core::ShardResult::failedOf(task, QStringLiteral("the node paused: a stage task is given back"));
        given.outcome = core::ShardResult::Outcome::Returned;
        Q_EMIT q->shardFinished({ given, {}, {} });
        return false;
    }
    if (stopRequested || pauseRequested) {
        const bool stopping = stopRequested;
        lock.unlock();
        auto state = run.suspend();
        if (!state) {
            Q_EMIT q->shardFinished({ core::ShardResult::failedOf(task, state.error().toString()), {}, {} });
            return false;
        }
        if (!stopping) {
            QMutexLocker relock(&mutex);
            const std::int64_t left
                = item.timeLimitMs > 0 ? std::max<std::int64_t>(1, item.timeLimitMs - (pace.busyNs / 1'000'000)) : 0;
            queue.push_front({ task, item.weights, *state, left }); // resume() continues it first
        }
        Q_EMIT q->shardPaused(task, *state);
        return false;
    }
    if (cancelledJob == task.jobId) {
        lock.unlock();
        Q_EMIT q->shardCancelled(task);
        return false;
    }
    // Never past a hold (the test seam): it is a boundary the caller waits for.
    if (hold && hold->jobId == task.jobId && hold->shard == task.shard && hold->step > run.completedSteps())
        steps = std::min(steps, hold->step - run.completedSteps());
    return true;
}

bool ComputeThread::Private::stepOrReport(const core::ShardTask& task, ShardSteps& run, std::int64_t steps, Pace& pace)
{
    // A step that fails in a worker stopped for a pause or stop: given back, not the job's fault.
    auto stoppedWhileStuck = [&](const QString& why) {
        QMutexLocker lock(&mutex);
        return why == u"cancelled" && (stopRequested || pauseRequested) && cancelledJob != task.jobId;
    };
    QElapsedTimer stepTimer;
    stepTimer.start();
    const std::int64_t before = run.completedSteps();
    if (auto status = run.step(steps); !status) {
        if (status.error().message == u"cancelled" && !stoppedWhileStuck(status.error().message)) {
            Q_EMIT q->shardCancelled(task);
            return false;
        }
        auto failed = core::ShardResult::failedOf(task, status.error().toString());
        // A stage whose link broke (a partner sent what the schedule does not, went, or the broker
        // stopped the pipeline) gives its task back: the failure is not its own.
        if (task.isStage() && status.error().field == u"link")
            failed.outcome = core::ShardResult::Outcome::Returned;
        if (stoppedWhileStuck(status.error().message)) {
            failed.outcome = core::ShardResult::Outcome::Returned;
            failed.failure = QStringLiteral("a step ran on for %1 s after the node was asked to pause; its worker was "
                                            "stopped and the shard given back")
                                 .arg(StuckStepMs / 1000);
        }
        Q_EMIT q->shardFinished({ failed, {}, {} });
        return false;
    }
    pace.lastCallNs = stepTimer.nsecsElapsed();
    pace.busyNs += pace.lastCallNs;
    pace.lastCallSteps = run.completedSteps() - before;
    return true;
}

void ComputeThread::Private::reportProgress(const core::ShardTask& task, const ShardSteps& run, const Pace& pace)
{
    const auto done = run.completedSteps();
    const double seconds = std::max<double>(double(pace.busyNs + pace.throttledNs) / 1e9, 1e-6);
    ShardProgress progress { task.jobId, task.round, task.shard, done, task.localSteps, run.lastLoss(), 0.0, 0,
        pace.busyNs / 1'000'000, pace.throttledNs / 1'000'000 };
    progress.setPace(double(done - pace.firstStep) / seconds, task.batchSize);
    if (task.inference)
        progress.inference = core::nameOf(task.inference->task);
    if (task.isStage()) {
        progress.stage = task.stage;
        progress.stages = task.stages;
    }
    Q_EMIT q->progress(progress);
}

void ComputeThread::Private::rest(const core::ShardTask& task, const ShardSteps& run, Pace& pace)
{
    // Duty cycle: after computing for t, rest t * (100 - p) / p, waking early for pause or cancel.
    QMutexLocker lock(&mutex);
    if (cpuPercent >= 100 || run.finished())
        return;
    const QDeadlineTimer deadline(std::chrono::nanoseconds(pace.lastCallNs * (100 - cpuPercent) / cpuPercent));
    QElapsedTimer restTimer;
    restTimer.start();
    while (!deadline.hasExpired() && !stopRequested && !pauseRequested && cancelledJob != task.jobId)
        wake.wait(&mutex, deadline);
    pace.throttledNs += restTimer.nsecsElapsed();
}

core::Result<std::unique_ptr<ShardSteps>> ComputeThread::Private::open(const QueuedShard& item, const ComputeEnvironment& here)
{
    const auto& task = item.task;
    auto [enabled, options] = workerOptions(item.timeLimitMs);
    // A stage task runs Tessera's own gpt (no job code) and trades tensors as it steps: on this
    // thread in a program that links LibTorch, else in a worker that asks for its tensors over its
    // pipes (the desktop app). A live stage over its link, a re-executed one from its recorded inputs.
    if (task.isLiveStage() && !item.link)
        return core::Error { QStringLiteral("sandbox"), QStringLiteral("this node runs no stage tasks") };
    if (task.isStage() && inThread) {
        worker.reset();
        return inThread->open(task, item.weights, item.suspended, here, item.link.get(), item.weightsFile);
    }
    if (!enabled && inThread) {
        worker.reset();
        return inThread->open(task, item.weights, item.suspended, here);
    }
    // Asked every 100 ms while the worker computes: a cancel stops it at once; a pause or stop
    // waits for the boundary, unless the step has gone on long after it was asked for.
    options.cancelled = [this, jobId = task.jobId] {
        QMutexLocker lock(&mutex);
        return cancelledJob == jobId
            || ((stopRequested || pauseRequested) && interruptAsked.isValid() && interruptAsked.elapsed() > StuckStepMs);
    };
    if (!worker || !worker->serves(task, here, options)) {
        worker.reset(); // one worker at a time
        if (!scratchSwept) { // what a crashed run of the node left behind
            scratchSwept = true;
            sandbox::removeStaleScratch(options.scratchRoot);
        }
        auto spawned = sandbox::Worker::spawn(task, here, options);
        if (!spawned) {
            if (spawned.error().field == u"worker") // the node's installation, not the job: given back
                return core::Error { QStringLiteral("sandbox"), spawned.error().message };
            return spawned.error();
        }
        worker = std::move(*spawned);
    }
    auto opened
        = sandbox::RemoteShardRun::open(task, item.weights, item.suspended, worker, options, item.link.get(), item.weightsFile);
    if (!opened || worker->ended())
        worker.reset();
    if (!opened)
        return opened.error();
    return std::unique_ptr<ShardSteps>(std::make_unique<WorkerSteps>(std::move(*opened)));
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
                const auto& question = request.question;
                auto [enabled, options] = workerOptions(StateRequestLimitMs);
                options.cancelled = [this] {
                    QMutexLocker lock(&mutex);
                    return stopRequested;
                };
                auto made = !enabled && inThread
                    ? inThread->answer(request.task, question, *start, *kept, environment)
                    : sandbox::answerInWorker(request.task, question, *start, *kept, environment, options);
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
