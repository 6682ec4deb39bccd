#pragma once

#include <compute/computethread.h>
#include <compute/environment.h>
#include <compute/shardrun.h>

#include <QString>

#include <cstdint>
#include <functional>
#include <memory>

namespace tessera::compute::sandbox {

// The supervisor's side of a compute worker (docs/SECURITY.md, "The compute worker"): trains one
// shard in a confined tessera-compute process and turns whatever becomes of that process into a
// ShardOutput. A worker that runs past its time limit, is cancelled, crashes, makes a forbidden
// call or is killed for memory gives a failed result with that reason, and the caller carries on:
// the job owner's code failed, not the node. Thread-safe (each call has its own process and
// scratch folder); blocks until the worker ends.
struct WorkerOptions {
    QString program; // empty: defaultWorkerProgram()
    QString scratchRoot; // where the worker's scratch folder goes; empty: the system's temporary folder
    std::int64_t memoryMiB = 4096; // Compute/MaxMemoryMiB: address space the shard may add
    std::int64_t timeLimitMs = 0; // 0: none; else the worker is killed after it (the shard's deadline)
    std::function<void(const ShardProgress&)> progress; // on the calling thread, about every 100 ms
    std::function<bool()> cancelled; // asked about every 100 ms; true: the worker is killed
};

// Beside the running program (the build tree), else the installed libexec folder.
QString defaultWorkerProgram();

ShardOutput runShardInWorker(const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment,
    const WorkerOptions& options);

// A shard in a long-lived confined worker, driven from the caller's thread a few steps at a time,
// as the compute thread drives its own ShardRun: it pauses (suspend() gives the same bytes a
// ShardRun's would, and resume() continues from them in any worker, to the same bits), throttles
// between calls and cancels by dropping the run. A worker that dies or runs past the time limit
// turns the next call into an error with the reason (the ones runShardInWorker gives). Not
// thread-safe; the destructor ends the worker.
class RemoteShardRun {
public:
    static core::Result<std::unique_ptr<RemoteShardRun>> start(const core::ShardTask& task, const QByteArray& startWeights,
        const ComputeEnvironment& environment, const WorkerOptions& options);
    static core::Result<std::unique_ptr<RemoteShardRun>> resume(const core::ShardTask& task, const QByteArray& suspended,
        const ComputeEnvironment& environment, const WorkerOptions& options, const QByteArray& startWeights = {});
    ~RemoteShardRun();
    RemoteShardRun(const RemoteShardRun&) = delete;
    RemoteShardRun& operator=(const RemoteShardRun&) = delete;

    std::int64_t completedSteps() const { return m_completed; }
    bool finished() const { return m_completed >= m_task.localSteps; }
    double lastLoss() const { return m_loss; }
    // Up to `steps` optimizer steps in the worker (fewer at the shard's end).
    core::Status step(std::int64_t steps = 1);
    core::Result<QByteArray> suspend();
    ShardOutput finish();

    struct Process; // the worker: its pid and pipes

private:
    RemoteShardRun(core::ShardTask task, std::unique_ptr<Process> process);
    static core::Result<std::unique_ptr<RemoteShardRun>> open(const core::ShardTask& task, const QByteArray& startWeights,
        const QByteArray& suspended, const ComputeEnvironment& environment, const WorkerOptions& options);
    core::Result<QString> ask(const QString& command);

    core::ShardTask m_task;
    std::unique_ptr<Process> m_process;
    std::int64_t m_completed = 0;
    double m_loss = 0.0;
};

} // namespace tessera::compute::sandbox
