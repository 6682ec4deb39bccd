#include "workerprocess.h"

#include "workerprotocol.h"

#include <compute/pickle/tensorfile.h>
#include <core/helperprogram.h>
#include <core/readfile.h>

#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>

#include <fcntl.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

extern char** environ;

namespace tessera::compute::sandbox {

namespace detail {

namespace {

// A new file at `path` (whatever was there removed first), never through a link: the worker, which
// may run a hostile job's code, can write its scratch folder, and could leave a symbolic link where
// the supervisor is about to write. -1 when it cannot be made.
int createFresh(const QString& path)
{
    const QByteArray name = QFile::encodeName(path);
    ::unlink(name.constData());
    return ::open(name.constData(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

bool writeAll(int fd, const char* data, qsizetype size)
{
    while (size > 0) {
        const ssize_t written = ::write(fd, data, std::size_t(size));
        if (written < 0 && errno == EINTR)
            continue;
        if (written <= 0)
            return false;
        data += written;
        size -= written;
    }
    return true;
}

} // namespace

bool writeFile(const QString& path, const QByteArray& bytes)
{
    // Not QSaveFile: a scratch file is read once by the other side after a handshake and is worth
    // nothing after a crash, so it needs no fsync (which cost tens of ms a shard here).
    const int fd = createFresh(path);
    if (fd < 0)
        return false;
    const bool written = writeAll(fd, bytes.constData(), bytes.size());
    return ::close(fd) == 0 && written;
}

QString programOf(const WorkerOptions& options)
{
    return options.program.isEmpty() ? defaultWorkerProgram() : options.program;
}

QString cannotStart(const QString& program, int error)
{
    return QStringLiteral("cannot start the compute worker %1: %2").arg(program, QString::fromLocal8Bit(std::strerror(error)));
}

QString pastTimeLimit(std::int64_t limitMs)
{
    return QStringLiteral("time limit: the shard ran past its %1 s and its worker was stopped")
        .arg(double(limitMs) / 1000.0, 0, 'f', 1);
}

ShardOutput failed(const core::ShardTask& task, const QString& why)
{
    return { core::ShardResult::failedOf(task, why), {}, {} };
}

// The task and inputs of one shard in a worker's scratch folder (suspended: only to resume), and
// nothing of the shard before it.
bool writeInputs(const QDir& folder, const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& suspended)
{
    for (const QString& stale : { protocol::files::Result, protocol::files::WeightsOut, protocol::files::KeptOut,
             protocol::files::SuspendedOut, protocol::files::SuspendedIn })
        QFile::remove(folder.filePath(stale));
    return writeFile(folder.filePath(protocol::files::Task), QJsonDocument(task.toJson()).toJson(QJsonDocument::Compact))
        && writeFile(folder.filePath(protocol::files::WeightsIn), startWeights)
        && (suspended.isEmpty() || writeFile(folder.filePath(protocol::files::SuspendedIn), suspended));
}

bool placeWeights(const QDir& folder, const QString& file)
{
    // A copy, never a hard link: the worker may write its scratch folder, and a write through a link
    // would change the node's cache. A copy-on-write clone where the file system has them (btrfs,
    // XFS), else the kernel's own copy, else read and write.
    const int from = ::open(QFile::encodeName(file).constData(), O_RDONLY | O_CLOEXEC);
    if (from < 0)
        return false;
    const int to = createFresh(folder.filePath(protocol::files::WeightsIn));
    bool copied = to >= 0 && ::ioctl(to, FICLONE, from) == 0;
    if (to >= 0 && !copied) {
        for (;;) {
            const ssize_t moved = ::copy_file_range(from, nullptr, to, nullptr, std::size_t(1) << 30, 0);
            if (moved < 0 && errno == EINTR)
                continue;
            copied = moved == 0;
            if (moved <= 0)
                break;
        }
    }
    if (to >= 0 && !copied && ::lseek(from, 0, SEEK_SET) == 0 && ::ftruncate(to, 0) == 0 && ::lseek(to, 0, SEEK_SET) == 0) {
        char chunk[65536];
        ssize_t got = 0;
        while ((got = ::read(from, chunk, sizeof chunk)) > 0 && writeAll(to, chunk, got)) { }
        copied = got == 0;
    }
    ::close(from);
    return to >= 0 && ::close(to) == 0 && copied;
}

QString scratchRootOf(const WorkerOptions& options)
{
    return options.scratchRoot.isEmpty() ? QDir::tempPath() : options.scratchRoot;
}

// A fresh, empty scratch folder for one worker (removed with the object; check isValid()).
std::unique_ptr<QTemporaryDir> makeScratch(const WorkerOptions& options)
{
    const QString root = scratchRootOf(options);
    QDir().mkpath(root);
    return std::make_unique<QTemporaryDir>(QDir(root).filePath(QStringLiteral("tessera-worker-XXXXXX")));
}

// A fresh scratch folder for one worker, holding its first task and inputs.
core::Result<std::unique_ptr<QTemporaryDir>> prepareScratch(
    const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& suspended, const WorkerOptions& options)
{
    const QString root = scratchRootOf(options);
    auto scratch = makeScratch(options);
    if (!scratch->isValid() || !writeInputs(QDir(scratch->path()), task, startWeights, suspended))
        return core::Error { QStringLiteral("worker"),
            QStringLiteral("cannot write the compute worker's task into %1").arg(root) };
    return scratch;
}

// What a worker left in its scratch folder after a clean end. The worker ran the job owner's
// code: the supervisor, which signs the result, hashes the weights itself rather than take the
// worker's word for it.
// keptDestination: where kept.out is moved instead of read (ShardOutput::keptStateFile), outside the
// scratch folder that the next shard reuses; empty: it is read into memory.
ShardOutput collectOutput(const core::ShardTask& task, const QDir& folder, const QString& keptDestination)
{
    auto parsed = core::ShardResult::fromJson(
        QJsonDocument::fromJson(core::readFile(folder.filePath(protocol::files::Result)).value_or(QByteArray())).object());
    if (!parsed)
        return failed(task, QStringLiteral("the compute worker's result is unreadable: %1").arg(parsed.error().toString()));
    ShardOutput output { *parsed, {}, {} };
    if (output.result.outcome == core::ShardResult::Outcome::Failed)
        return output;
    output.weights = core::readFile(folder.filePath(protocol::files::WeightsOut)).value_or(QByteArray());
    const QString kept = folder.filePath(protocol::files::KeptOut);
    if (!keptDestination.isEmpty() && QFileInfo(kept).size() > 0 && QFile::rename(kept, keptDestination))
        output.keptStateFile = keptDestination;
    else
        output.keptState = core::readFile(kept).value_or(QByteArray());
    // An inference task's lines are hashed as bytes (docs/DETERMINISM.md, "Inference").
    const auto hash = task.inference ? core::Result<core::Digest>(core::Digest::ofBytes(output.weights))
                                     : pickle::canonicalHash(output.weights);
    if (!hash || *hash != output.result.finalHash)
        return failed(task, QStringLiteral("the compute worker's weights do not have the hash its result names"));
    return output;
}

// The files a task names, as the worker will find them: by content address, or (before upload,
// train-local) at their own paths.
void namedFiles(const core::ShardTask& task, const ComputeEnvironment& environment, QStringList& arguments)
{
    QList<std::pair<core::Digest, QString>> files = { { task.model.scriptSha256, task.model.scriptFile },
        { task.model.initialWeightsSha256, task.model.initialWeightsFile }, { task.dataset.trainSha256, task.dataset.trainFile },
        { task.dataset.testSha256, task.dataset.testFile }, { task.dataset.manifestSha256, task.dataset.manifestFile } };
    for (const auto& chunk : task.dataChunks)
        files.append({ chunk, QString() });
    if (!task.stageInputs.isNull()) // a re-executed stage's record of what it received
        files.append({ task.stageInputs, QString() });
    if (task.inference)
        files.append({ task.inference->promptsSha256, task.inference->promptsFile });
    for (const auto& [digest, file] : files) {
        if (!digest.isNull() && environment.blobPath) {
            if (const auto path = environment.blobPath(digest))
                arguments << QStringLiteral("--blob") << digest.toHex() + u'=' + QFileInfo(*path).absoluteFilePath();
        }
        if (!file.isEmpty() && QFileInfo::exists(file))
            arguments << QStringLiteral("--read") << QFileInfo(file).absoluteFilePath();
    }
}

QString signalName(int signal)
{
    return QStringLiteral("signal %1, %2").arg(signal).arg(QString::fromLocal8Bit(strsignal(signal)));
}

// The worker's command line: `command` (train or serve) on the task in `scratch`.
QStringList workerArguments(const QString& command, const QString& scratch, const core::ShardTask& task,
    const ComputeEnvironment& environment, const WorkerOptions& options)
{
    QStringList arguments { command, QStringLiteral("--scratch"), scratch, QStringLiteral("--memory-mib"),
        QString::number(options.memoryMiB), QStringLiteral("--nice"), QString::number(options.nice),
        QStringLiteral("--fashion-mnist"), environment.fashionMnistDirectoryOrDefault(), QStringLiteral("--fortunes"),
        environment.fortunesDirectoryOrDefault() };
    if (!options.confined)
        arguments << QStringLiteral("--confine") << QStringLiteral("0");
    if (!environment.device.isEmpty())
        arguments << QStringLiteral("--device") << environment.device;
    if (environment.portableThreads > 0)
        arguments << QStringLiteral("--portable-threads") << QString::number(environment.portableThreads);
    namedFiles(task, environment, arguments);
    return arguments;
}

// Why a worker ended that its supervisor did not stop (status: waitpid's).
QString endReason(int status, const QString& said)
{
    const QString tail = said.isEmpty() ? QString() : QStringLiteral(": ") + said.right(500);
    if (WIFSIGNALED(status)) {
        const int signal = WTERMSIG(status);
        if (signal == SIGKILL) // not ours: the kernel's, for memory
            return QStringLiteral("out of memory: the kernel stopped the compute worker (%1)").arg(signalName(signal));
        if (signal == SIGSYS)
            return QStringLiteral("forbidden call: the compute worker made a system call the sandbox refuses (%1)")
                .arg(signalName(signal));
        return QStringLiteral("crash: the compute worker died (%1)%2").arg(signalName(signal), tail);
    }
    return QStringLiteral("crash: the compute worker ended (exit code %1) without a result%2")
        .arg(WIFEXITED(status) ? WEXITSTATUS(status) : -1)
        .arg(tail);
}

// Starts the worker with its stdout and stderr (and, to be driven, its stdin) on pipes: 0 or errno.
int spawnWorker(
    const QString& program, const QStringList& arguments, bool withInput, pid_t& pid, int& input, int& output, int& error)
{
    std::vector<QByteArray> bytes { QFile::encodeName(program) };
    for (const auto& argument : arguments)
        bytes.push_back(QFile::encodeName(argument));
    std::vector<char*> argv;
    for (auto& argument : bytes)
        argv.push_back(argument.data());
    argv.push_back(nullptr);
    int in[2] = { -1, -1 };
    int out[2] = { -1, -1 };
    int err[2] = { -1, -1 };
    auto closeAll = [&] {
        for (int fd : { in[0], in[1], out[0], out[1], err[0], err[1] })
            if (fd >= 0)
                ::close(fd);
    };
    if ((withInput && pipe2(in, O_CLOEXEC) != 0) || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        const int failure = errno;
        closeAll();
        return failure;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (withInput)
        posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    else
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    for (int* fd : { &in[0], &out[1], &err[1] }) {
        if (*fd >= 0)
            ::close(*fd);
        *fd = -1;
    }
    if (spawned != 0) {
        closeAll();
        return spawned;
    }
    input = in[1];
    output = out[0];
    error = err[0];
    return 0;
}

// A progress line of a worker's shard as the compute thread reports it.
ShardProgress progressOf(const core::ShardTask& task, const protocol::lines::Progress& said)
{
    ShardProgress progress;
    progress.jobId = task.jobId;
    progress.round = task.round;
    progress.shard = task.shard;
    progress.step = said.step;
    progress.steps = said.steps;
    progress.loss = said.loss;
    progress.busyMs = said.busyMs;
    const double seconds = std::max(1e-6, double(progress.busyMs) / 1000.0);
    progress.setPace(double(progress.step) / seconds, task.batchSize);
    if (task.inference)
        progress.inference = core::nameOf(task.inference->task);
    return progress;
}

// Appends what one read of `fd` gives to `into`, keeping its last `keep` bytes (-1: all); false
// at the pipe's end.
bool readChunk(int fd, QByteArray& into, qsizetype keep)
{
    char chunk[4096];
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got <= 0)
        return false;
    into.append(chunk, got);
    if (keep >= 0 && into.size() > keep)
        into = into.right(keep);
    return true;
}

// Runs `command` on the task in `scratch` to its end: progress lines go to options.progress, and
// the time limit or a cancel kills it.
OneShot runOneShot(const QString& command, const QStringList& extra, const QDir& scratch, const core::ShardTask& task,
    const ComputeEnvironment& environment, const WorkerOptions& options, const std::function<void(const QByteArray&)>& otherLine)
{
    const QString program = programOf(options);
    pid_t pid = 0;
    int unused = -1;
    int outFd = -1;
    int errFd = -1;
    if (const int spawned = spawnWorker(program, workerArguments(command, scratch.path(), task, environment, options) + extra,
            false, pid, unused, outFd, errFd);
        spawned != 0)
        return { cannotStart(program, spawned), false };

    QByteArray stdoutBuffer;
    QByteArray stderrTail;
    QString killedFor;
    bool done = false;
    QElapsedTimer clock;
    clock.start();
    pollfd fds[2] = { { outFd, POLLIN, 0 }, { errFd, POLLIN, 0 } };
    int open = 2;
    while (open > 0) {
        const int ready = ::poll(fds, 2, 100);
        if (ready < 0 && errno != EINTR)
            break;
        for (auto& fd : fds) {
            if (fd.fd >= 0 && (fd.revents & (POLLIN | POLLHUP | POLLERR))
                && !readChunk(fd.fd, fd.fd == outFd ? stdoutBuffer : stderrTail, fd.fd == outFd ? -1 : 4096)) {
                ::close(fd.fd);
                fd.fd = -1;
                --open;
            }
        }
        // Whole lines of progress.
        for (qsizetype newline; (newline = stdoutBuffer.indexOf('\n')) >= 0;) {
            const QByteArray line = stdoutBuffer.left(newline);
            stdoutBuffer.remove(0, newline + 1);
            if (const auto said = protocol::lines::progressOf(line); said && options.progress) {
                options.progress(progressOf(task, *said));
            } else if (line == protocol::lines::Done) {
                done = true;
            } else if (otherLine) {
                otherLine(line);
            }
        }
        if (killedFor.isEmpty()) {
            if (options.timeLimitMs > 0 && clock.elapsed() > options.timeLimitMs)
                killedFor = pastTimeLimit(options.timeLimitMs);
            else if (options.cancelled && options.cancelled())
                killedFor = QStringLiteral("cancelled");
            if (!killedFor.isEmpty())
                ::kill(pid, SIGKILL);
        }
    }
    for (const auto& fd : fds)
        if (fd.fd >= 0)
            ::close(fd.fd);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) { }

    if (!killedFor.isEmpty())
        return { killedFor };
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !done)
        return { endReason(status, QString::fromLocal8Bit(stderrTail).trimmed()) };
    return {};
}

} // namespace detail

int removeStaleScratch(const QString& root, std::int64_t olderThanMs)
{
    const QDir folder(root.isEmpty() ? QDir::tempPath() : root);
    const QDateTime before = QDateTime::currentDateTimeUtc().addMSecs(-olderThanMs);
    int removed = 0;
    for (const auto& entry : folder.entryInfoList({ QStringLiteral("tessera-worker-*") }, QDir::Dirs | QDir::NoDotAndDotDot)) {
        if (entry.lastModified().toUTC() < before && QDir(entry.absoluteFilePath()).removeRecursively())
            ++removed;
    }
    return removed;
}

QString defaultWorkerProgram()
{
    return core::helperProgram("TESSERA_COMPUTE_WORKER", QStringLiteral("tessera-compute"), QStringLiteral(TESSERA_LIBEXEC_DIR));
}

} // namespace tessera::compute::sandbox
