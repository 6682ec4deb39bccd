#pragma once

#include <compute/computethread.h>
#include <compute/environment.h>
#include <compute/shardrun.h>

#include <QString>

#include <cstdint>
#include <functional>

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

} // namespace tessera::compute::sandbox
