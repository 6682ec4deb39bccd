#pragma once

// Private to compute/supervisor/sandbox: a tessera-compute process as its supervisor starts it,
// gives it its scratch folder, watches it and reads back what it left. The one-shot tools
// (oneshottools.cpp) and the driven run (remoteshardrun.cpp) are built on it; worker.h is the API.

#include "worker.h"

#include <QDir>
#include <QStringList>
#include <QTemporaryDir>

#include <sys/types.h>

#include <functional>
#include <memory>

namespace tessera::compute::sandbox::detail {

QString programOf(const WorkerOptions& options); // options.program, or defaultWorkerProgram()
QString cannotStart(const QString& program, int error); // why a worker did not start (error: errno)
QString pastTimeLimit(std::int64_t limitMs); // why a worker past its time limit was stopped

bool writeFile(const QString& path, const QByteArray& bytes);
ShardOutput failed(const core::ShardTask& task, const QString& why);
// The task and inputs of one shard in a worker's scratch folder (suspended: only to resume), and
// nothing of the shard before it.
bool writeInputs(const QDir& folder, const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& suspended);
// The round's weights at `file` copied into the folder's weights.in (a copy-on-write clone where the
// file system has them); never a link, which the worker could write through.
bool placeWeights(const QDir& folder, const QString& file);
QString scratchRootOf(const WorkerOptions& options);
// A fresh, empty scratch folder for one worker (removed with the object; check isValid()).
std::unique_ptr<QTemporaryDir> makeScratch(const WorkerOptions& options);
// A fresh scratch folder for one worker, holding its first task and inputs.
core::Result<std::unique_ptr<QTemporaryDir>> prepareScratch(
    const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& suspended, const WorkerOptions& options);
// What a worker left in its scratch folder after a clean end, its weights hashed by the
// supervisor; kept.out moved to keptDestination when one is given.
ShardOutput collectOutput(const core::ShardTask& task, const QDir& folder, const QString& keptDestination = {});

// The worker's command line: `command` (train or serve) on the task in `scratch`.
QStringList workerArguments(const QString& command, const QString& scratch, const core::ShardTask& task,
    const ComputeEnvironment& environment, const WorkerOptions& options);
// Why a worker ended that its supervisor did not stop (status: waitpid's; said: its stderr's end).
QString endReason(int status, const QString& said);
// Starts the worker with its stdout and stderr (and, to be driven, its stdin) on pipes: 0 or errno.
int spawnWorker(
    const QString& program, const QStringList& arguments, bool withInput, pid_t& pid, int& input, int& output, int& error);

// How a one-shot worker (train, answer, a tool) ended.
struct OneShot {
    QString failure; // empty: it ended cleanly, saying "done"
    bool started = true; // false: the program could not be started
};
// Runs `command` on the task in `scratch` to its end: progress lines go to options.progress, other
// lines to otherLine, and the time limit or a cancel kills it.
OneShot runOneShot(const QString& command, const QStringList& extra, const QDir& scratch, const core::ShardTask& task,
    const ComputeEnvironment& environment, const WorkerOptions& options,
    const std::function<void(const QByteArray&)>& otherLine = {});

} // namespace tessera::compute::sandbox::detail
