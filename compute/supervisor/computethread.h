#pragma once

#include <compute/common/environment.h>
#include <compute/common/stagelink.h>
#include <compute/common/types.h>
#include <compute/supervisor/inthread.h>

#include <core/disputequestion.h>
#include <core/shardresult.h>
#include <core/shardtask.h>

#include <QByteArray>
#include <QMetaType>
#include <QObject>
#include <QString>

#include <memory>

namespace tessera::compute {

// The compute thread: owns every torch object, runs one shard at a time from a queue, and between
// two steps honours pause, cancel and the CPU duty cycle. Its methods are thread-safe and return at
// once; what happens is reported by signals (queued to receivers in other threads).
class ComputeThread : public QObject {
    Q_OBJECT

public:
    enum class State { Idle, Working, Paused, Stopped };
    Q_ENUM(State)

    // inThread: how shards train on this thread when the sandbox is off (compute::inThreadCompute(),
    // LibTorch's); without one (a program that does not load LibTorch) they train in a worker then
    // too, not confined.
    explicit ComputeThread(
        ComputeEnvironment environment, std::shared_ptr<InThreadCompute> inThread = {}, QObject* parent = nullptr);
    ~ComputeThread() override; // stops the thread at the next step boundary and joins it

    // timeLimitMs: how long the shard may compute before a sandboxed worker is stopped (the
    // assignment's deadline and a grace; time paused or throttled does not count); 0: no limit.
    // A stage task (task.isStage()) trades its tensors over `link`; pausing gives it back (its
    // partners cannot wait): it finishes as a returned result.
    // startWeights empty: startWeightsFile holds them (a stage task reads its share alone).
    void submit(const core::ShardTask& task, const QByteArray& startWeights, std::int64_t timeLimitMs = 0,
        std::shared_ptr<StageLink> link = {}, const QString& startWeightsFile = {});
    // A shard paused earlier (perhaps by another run of the app), from the state paused() gave, and
    // the round's weights (needed at the end for a compressed update, task.compression).
    void submitSuspended(const core::ShardTask& task, const QByteArray& suspendedState, const QByteArray& startWeights = {});

    // At the next step boundary: save the shard's state (paused() carries it) and wait.
    void pause();
    // Let the current shard finish, then pause before the next.
    void finishCurrentThenPause();
    void resume();
    // Drop the running shard at the next step boundary (cancelled() is emitted) and every queued
    // shard of the same job.
    void cancelJob(const QString& jobId);

    // A dispute's question about a shard this node trained: its training state at a checkpoint
    // (recreateState), or a portable job's trace of an interval or operands of an instruction
    // (traceInterval, operandsOf), from the files of the round's weights and of the kept state
    // (empty: none). Served before any queued shard and between two steps of the running one, whose bits
    // it does not change, and while paused too: the node's stake depends on the answer.
    // stateRecreated() carries it.
    struct StateRequest {
        QString key; // the caller's, given back with the answer
        core::ShardTask task;
        core::DisputeQuestion question;
        QString startWeightsPath;
        QString keptStatePath;
    };
    void recreateState(const StateRequest& request);

    // Share of wall time the thread may compute, 10 to 100 percent.
    void setCpuPercent(int percent);
    // Most threads a shard may use here; a shard that needs more is given back (its thread count is
    // fixed by its job, for reproducibility, so it cannot be lowered).
    void setMaxThreads(int threads);
    int maxThreads() const;
    // Compute/MaxMemoryMiB: a shard whose estimated memory (core::estimateShardMemory) is larger is
    // given back (outcome returned) with the reason, before it trains. 0: no limit.
    void setMaxMemoryMiB(std::int64_t mebibytes);

    // Compute/Sandbox: where shards train. Enabled: in a confined tessera-compute worker process
    // (compute/supervisor/sandbox/worker.h), one per job, kept between its shards and ended when the thread
    // pauses or has had nothing to do for IdleWorkerMs; the job owner's code runs there, away from
    // the node's keys, and a worker that hangs, crashes or passes Compute/MaxMemoryMiB fails its shard
    // with the reason while the thread carries on. Disabled: on this thread (with an InThreadCompute),
    // else in a worker that is not confined (for a GPU, which the confinement keeps out). Takes
    // effect from the next shard.
    struct Sandbox {
        bool enabled = false;
        QString program; // empty: compute::sandbox::defaultWorkerProgram()
        QString scratchRoot; // empty: the system's temporary folder
        int nice = 19; // the worker's CPU priority (sandbox::WorkerOptions::nice)
    };
    void setSandbox(const Sandbox& sandbox);
    static constexpr std::int64_t IdleWorkerMs = 60'000;

    State state() const;
    int queuedCount() const;

    // Test seam: hold the shard (jobId, shard) at the boundary before step `step` (0 is before the
    // first) and emit held() there. The hold ends with releaseHold(), pause(),
    // finishCurrentThenPause(), cancelJob(jobId) or destruction, whichever comes first; so a test can
    // act on a shard that is known to be running, however fast the machine is. One hold at a time.
    void holdAt(const QString& jobId, std::int64_t shard, std::int64_t step);
    void releaseHold();

Q_SIGNALS:
    void stateChanged(tessera::compute::ComputeThread::State state);
    void progress(const tessera::compute::ShardProgress& progress);
    void shardFinished(const tessera::compute::ShardOutput& output); // completed or failed
    void shardPaused(const tessera::core::ShardTask& task, const QByteArray& suspendedState);
    void shardCancelled(const tessera::core::ShardTask& task);
    void held(const tessera::core::ShardTask& task, std::int64_t step); // emitted on the compute thread
    // The state a recreateState() asked for, or why there is none (error non-empty).
    void stateRecreated(const QString& key, const QByteArray& state, const QString& error);

private:
    struct Private;
    std::unique_ptr<Private> d;
};

} // namespace tessera::compute

Q_DECLARE_METATYPE(tessera::compute::ShardProgress)
Q_DECLARE_METATYPE(tessera::compute::ShardOutput)
