#pragma once

#include <compute/common/environment.h>
#include <compute/common/types.h>
#include <compute/devices/devices.h>
#include <compute/supervisor/inthread.h>
#include <core/benchmark.h>
#include <core/disputequestion.h>
#include <core/error.h>
#include <core/jobspec.h>
#include <core/shardtask.h>

#include <compute/supervisor/sandbox/workerprotocol.h>

#include <QString>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <tuple>

namespace tessera::compute::sandbox {

// The supervisor's side of a compute worker (docs/SECURITY.md, "The compute worker"): trains one
// shard in a confined tessera-compute process and turns whatever becomes of that process into a
// ShardOutput. A worker that runs past its time limit, is cancelled, crashes, makes a forbidden
// call or is killed for memory gives a failed result with that reason, and the caller carries on:
// the job owner's code failed, not the node. Thread-safe (each call has its own process and
// scratch folder); blocks until the worker ends. A worker dies with the thread that started it
// (PR_SET_PDEATHSIG): a driven worker must be used from the thread that started it, or one that
// outlives it, so that a supervisor killed or crashed never leaves a job's code running.
struct WorkerOptions {
    QString program; // empty: defaultWorkerProgram()
    QString scratchRoot; // where the worker's scratch folder goes; empty: the system's temporary folder
    std::int64_t memoryMiB = 4096; // Compute/MaxMemoryMiB: address space the shard may add
    // The worker's CPU priority (nice): 19, the lowest, as BOINC runs its applications, so that the
    // computer's owner and the node's own threads come first; 0 to compete evenly (benchmarks).
    int nice = 19;
    // Compute/Sandbox: false starts the worker without its confinement (no Landlock, seccomp or
    // memory limit), for what the confinement keeps out (a GPU's device files); the time limit holds.
    bool confined = true;
    std::int64_t timeLimitMs = 0; // 0: none; else the worker is killed after it (the shard's deadline)
    std::function<void(const ShardProgress&)> progress; // on the calling thread, about every 100 ms
    std::function<bool()> cancelled; // asked about every 100 ms; true: the worker is killed
};

// Removes the scratch folders of workers under `root` (empty: the system's temporary folder) not
// touched for `olderThanMs`: a supervisor that crashed leaves its worker's folder behind, with a
// model's weights in it. A live worker's folder changes with each shard, and no shard computes for
// as long as a day (Broker/MaxDeadlineSeconds). Returns how many it removed.
int removeStaleScratch(const QString& root, std::int64_t olderThanMs = 24LL * 3600 * 1000);

// The environment's TESSERA_COMPUTE_WORKER when set (a program that embeds the node outside the
// build's app folder: the desktop app's test), else beside the running program (the build tree),
// else the installed libexec folder.
QString defaultWorkerProgram();

ShardOutput runShardInWorker(const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment,
    const WorkerOptions& options);

// A dispute's question about a shard this node trained (compute::recreateState, traceInterval,
// operandsOf from the round's weights and the kept state), answered in a confined worker of its
// own: it runs the job owner's code as training does.
core::Result<QByteArray> answerInWorker(const core::ShardTask& task, const core::DisputeQuestion& question,
    const QByteArray& startWeights, const QByteArray& keptState, const ComputeEnvironment& environment,
    const WorkerOptions& options);

// The node's own LibTorch work, for a program that does not load LibTorch (the desktop app, the
// node's set-up): each in a one-shot worker of its own, confined unless options.confined is false,
// with what the in-process function (named with each) returns. A worker that cannot start is an
// error with field "worker".
struct RuntimeInfo {
    QString runtimeProfile; // compute::currentRuntimeProfile(threads).toString()
    TorchCapabilities torch; // compute::torchCapabilities()
};
core::Result<RuntimeInfo> runtimeInWorker(int threads, const WorkerOptions& options);
// compute::runBenchmark; benchmark.progress is called on the calling thread.
core::Result<core::BenchmarkRecord> benchmarkInWorker(const BenchmarkOptions& benchmark, const WorkerOptions& options);
// compute::roundWeightsFromChange.
core::Result<QByteArray> roundWeightsInWorker(const QByteArray& previous, const QByteArray& change, const WorkerOptions& options);
// compute::sampleText with spec's model (a job owner's code: confined as its training is).
// A served model's replica (docs/PROTOCOL.md, "Serving") in a confined worker of its own, for a
// program that does not load LibTorch (the desktop app): the model is loaded there once, and each
// answer's tokens come back over the pipe as the worker draws them. Use it from the thread that
// made it (the worker dies with that thread); an error with field "worker" when it did not start.
// options.cancelled is asked every 100 ms while it loads or answers: true kills the worker (the
// call and every later one fail).
core::Result<std::unique_ptr<HostedModel>> hostInWorker(const core::ShardTask& replica, const QByteArray& weights,
    const ComputeEnvironment& environment, const WorkerOptions& options);
core::Result<QByteArray> sampleInWorker(const core::JobSpec& spec, const QByteArray& weights, const SampleOptions& sample,
    const ComputeEnvironment& environment, const WorkerOptions& options);

// A broker's runs of a job owner's code (BrokerMath::setSandbox): compute::initialWeights (its
// bytes), compute::evaluate and compute::replayShard, each in a confined one-shot worker stopped
// at options.timeLimitMs, so that a model whose forward() never returns cannot hold the broker's
// arithmetic. The files the job names are read through environment.blobPath.
core::Result<QByteArray> initialWeightsInWorker(
    const core::JobSpec& spec, const ComputeEnvironment& environment, const WorkerOptions& options);
core::Result<Evaluation> evaluateInWorker(const core::JobSpec& spec, const QByteArray& weights, int threads,
    const ComputeEnvironment& environment, const WorkerOptions& options);
core::Result<Replay> replayInWorker(const core::ShardTask& task, std::int64_t from, const QByteArray& state,
    const core::Digest& expected, std::int64_t to, const QByteArray& roundWeights, const ComputeEnvironment& environment,
    const WorkerOptions& options);

// A long-lived confined worker (`tessera-compute serve`) that trains one job's shards one after
// another, so that LibTorch's start and the job's data are paid once per job rather than once per
// shard. It is confined to the files of the task it was started for: a shard of another job, or
// one with other options, needs a worker of its own (serves()). Not thread-safe; the destructor
// ends the process.
class Worker {
public:
    // An error with field "worker" when it could not start or confine itself (the node's
    // installation or kernel; no job code ran).
    static core::Result<std::shared_ptr<Worker>> spawn(
        const core::ShardTask& task, const ComputeEnvironment& environment, const WorkerOptions& options);
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    // Whether a shard of `task` can run here: the same job files and options, and the process alive.
    bool serves(const core::ShardTask& task, const ComputeEnvironment& environment, const WorkerOptions& options) const;
    bool ended() const;

    struct Process; // its pid, pipes and scratch folder
    Process& process() { return *m_process; }

private:
    Worker(std::unique_ptr<Process> process, QStringList arguments);
    std::unique_ptr<Process> m_process;
    QStringList m_arguments; // what it was started with, less its scratch folder
};

// A shard in a long-lived confined worker, driven from the caller's thread a few steps at a time,
// as the compute thread drives its own ShardRun: it pauses (suspend() gives the same bytes a
// ShardRun's would, and resume() continues from them in any worker, to the same bits), throttles
// between calls and cancels by dropping the run. options.timeLimitMs is the time the shard may
// keep its worker busy from the shard's start (time between calls, paused or throttled, does not
// count, nor a fresh worker's own start);
// options.cancelled is asked about every 100 ms while the worker computes. A worker that dies, runs
// past the limit or is cancelled turns the call into an error with the reason (the ones
// runShardInWorker gives) and is not used again. Not thread-safe.
class RemoteShardRun {
public:
    // In a worker of its own, which ends with the run.
    static core::Result<std::unique_ptr<RemoteShardRun>> start(const core::ShardTask& task, const QByteArray& startWeights,
        const ComputeEnvironment& environment, const WorkerOptions& options);
    static core::Result<std::unique_ptr<RemoteShardRun>> resume(const core::ShardTask& task, const QByteArray& suspended,
        const ComputeEnvironment& environment, const WorkerOptions& options, const QByteArray& startWeights = {});
    // In `worker` (which must serve the task), kept for the next shard after this one. A stage task
    // trades its tensors over `link` (which must outlive the run; protocol::links) and, with
    // startWeights empty, reads its share of the round's weights from startWeightsFile, which is
    // copied into the scratch folder (placeWeights), never read here.
    static core::Result<std::unique_ptr<RemoteShardRun>> open(const core::ShardTask& task, const QByteArray& startWeights,
        const QByteArray& suspended, std::shared_ptr<Worker> worker, const WorkerOptions& options, StageLink* link = nullptr,
        const QString& startWeightsFile = {});
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

private:
    RemoteShardRun(core::ShardTask task, std::shared_ptr<Worker> worker, StageLink* link);
    core::Result<QString> ask(const QString& command);
    // A stage worker's request for a tensor (protocol::links), carried over m_link and answered.
    void carry(const QByteArray& line);
    // Why the request is not the stage's to make (empty: it is, and it is counted as made); bytes:
    // a sent tensor's size.
    QString refusalOf(bool sent, const protocol::links::Address& address, qsizetype bytes);

    core::ShardTask m_task;
    std::shared_ptr<Worker> m_worker;
    StageLink* m_link = nullptr;
    // The tensors carried so far (sent, peer, kind, step, micro): each at most once.
    std::set<std::tuple<bool, std::int64_t, int, std::int64_t, std::int64_t>> m_carried;
    QString m_refused; // the first request refused: the stage's failure is the worker's
    QString m_linkFailed; // why a send failed: the stage gives its task back
    std::int64_t m_completed = 0;
    double m_loss = 0.0;
};

} // namespace tessera::compute::sandbox
