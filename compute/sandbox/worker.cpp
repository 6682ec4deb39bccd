#include "worker.h"

#include <compute/weights.h>

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QSaveFile>
#include <QTemporaryDir>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

extern char** environ;

namespace tessera::compute::sandbox {

namespace {

bool writeFile(const QString& path, const QByteArray& bytes)
{
    QSaveFile file(path);
    return file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size() && file.commit();
}

std::optional<QByteArray> readFile(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return std::nullopt;
    return file.readAll();
}

ShardOutput failed(const core::ShardTask& task, const QString& why)
{
    return { failedResult(task, why), {}, {} };
}

// The files a task names, as the worker will find them: by content address, or (before upload,
// train-local) at their own paths.
void namedFiles(const core::ShardTask& task, const ComputeEnvironment& environment, QStringList& arguments)
{
    const std::pair<core::Digest, QString> files[] = { { task.model.scriptSha256, task.model.scriptFile },
        { task.model.initialWeightsSha256, task.model.initialWeightsFile }, { task.dataset.trainSha256, task.dataset.trainFile },
        { task.dataset.testSha256, task.dataset.testFile } };
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

} // namespace

QString defaultWorkerProgram()
{
    const QString beside = QCoreApplication::applicationDirPath() + QStringLiteral("/tessera-compute");
    if (QFileInfo(beside).isExecutable())
        return beside;
    return QStringLiteral(TESSERA_LIBEXEC_DIR "/tessera-compute");
}

ShardOutput runShardInWorker(const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment,
    const WorkerOptions& options)
{
    const QString root = options.scratchRoot.isEmpty() ? QDir::tempPath() : options.scratchRoot;
    QDir().mkpath(root);
    QTemporaryDir scratch(QDir(root).filePath(QStringLiteral("tessera-worker-XXXXXX")));
    if (!scratch.isValid())
        return failed(task, QStringLiteral("cannot make the compute worker's scratch folder in %1").arg(root));
    const QDir folder(scratch.path());
    if (!writeFile(folder.filePath(QStringLiteral("task.json")), QJsonDocument(task.toJson()).toJson(QJsonDocument::Compact))
        || !writeFile(folder.filePath(QStringLiteral("weights.in")), startWeights))
        return failed(task, QStringLiteral("cannot write the compute worker's task into %1").arg(scratch.path()));

    QStringList arguments { QStringLiteral("train"), QStringLiteral("--scratch"), scratch.path(), QStringLiteral("--memory-mib"),
        QString::number(options.memoryMiB), QStringLiteral("--fashion-mnist"), environment.fashionMnistDirectoryOrDefault(),
        QStringLiteral("--fortunes"), environment.fortunesDirectoryOrDefault() };
    if (!environment.device.isEmpty())
        arguments << QStringLiteral("--device") << environment.device;
    if (environment.portableThreads > 0)
        arguments << QStringLiteral("--portable-threads") << QString::number(environment.portableThreads);
    namedFiles(task, environment, arguments);

    const QString program = options.program.isEmpty() ? defaultWorkerProgram() : options.program;
    std::vector<QByteArray> bytes { QFile::encodeName(program) };
    for (const auto& argument : std::as_const(arguments))
        bytes.push_back(QFile::encodeName(argument));
    std::vector<char*> argv;
    for (auto& argument : bytes)
        argv.push_back(argument.data());
    argv.push_back(nullptr);

    // stdout (progress) and stderr (why it failed) through pipes; stdin from /dev/null.
    int out[2];
    int err[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return failed(
            task, QStringLiteral("cannot start the compute worker: %1").arg(QString::fromLocal8Bit(std::strerror(errno))));
    if (pipe2(err, O_CLOEXEC) != 0) {
        ::close(out[0]);
        ::close(out[1]);
        return failed(
            task, QStringLiteral("cannot start the compute worker: %1").arg(QString::fromLocal8Bit(std::strerror(errno))));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    if (spawned != 0) {
        ::close(out[0]);
        ::close(err[0]);
        return failed(task,
            QStringLiteral("cannot start the compute worker %1: %2")
                .arg(program, QString::fromLocal8Bit(std::strerror(spawned))));
    }

    QByteArray stdoutBuffer;
    QByteArray stderrTail;
    QString killedFor;
    bool done = false;
    QElapsedTimer clock;
    clock.start();
    pollfd fds[2] = { { out[0], POLLIN, 0 }, { err[0], POLLIN, 0 } };
    int open = 2;
    while (open > 0) {
        const int ready = ::poll(fds, 2, 100);
        if (ready < 0 && errno != EINTR)
            break;
        for (auto& fd : fds) {
            if (fd.fd < 0 || !(fd.revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char chunk[4096];
            const ssize_t got = ::read(fd.fd, chunk, sizeof chunk);
            if (got <= 0) {
                ::close(fd.fd);
                fd.fd = -1;
                --open;
                continue;
            }
            if (fd.fd == out[0]) {
                stdoutBuffer.append(chunk, got);
            } else {
                stderrTail.append(chunk, got);
                if (stderrTail.size() > 4096)
                    stderrTail = stderrTail.right(4096);
            }
        }
        // Whole lines of progress.
        for (qsizetype newline; (newline = stdoutBuffer.indexOf('\n')) >= 0;) {
            const QByteArray line = stdoutBuffer.left(newline);
            stdoutBuffer.remove(0, newline + 1);
            const auto fields = line.split(' ');
            if (fields.size() == 5 && fields[0] == "progress" && options.progress) {
                ShardProgress progress;
                progress.jobId = task.jobId;
                progress.round = task.round;
                progress.shard = task.shard;
                progress.step = fields[1].toLongLong();
                progress.steps = fields[2].toLongLong();
                progress.loss = fields[3].toDouble();
                progress.busyMs = fields[4].toLongLong();
                const double seconds = std::max(1e-6, double(progress.busyMs) / 1000.0);
                const double stepsPerSecond = double(progress.step) / seconds;
                progress.samplesPerSecond = stepsPerSecond * double(task.batchSize);
                progress.etaMs
                    = stepsPerSecond > 0 ? std::int64_t(double(progress.steps - progress.step) / stepsPerSecond * 1000.0) : 0;
                options.progress(progress);
            } else if (line == "done") {
                done = true;
            }
        }
        if (killedFor.isEmpty()) {
            if (options.timeLimitMs > 0 && clock.elapsed() > options.timeLimitMs)
                killedFor = QStringLiteral("time limit: the shard ran past its %1 s and its worker was stopped")
                                .arg(double(options.timeLimitMs) / 1000.0, 0, 'f', 1);
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

    const QString said = QString::fromLocal8Bit(stderrTail).trimmed();
    if (!killedFor.isEmpty())
        return failed(task, killedFor);
    if (WIFSIGNALED(status)) {
        const int signal = WTERMSIG(status);
        if (signal == SIGKILL) // not ours: the kernel's, for memory
            return failed(
                task, QStringLiteral("out of memory: the kernel stopped the compute worker (%1)").arg(signalName(signal)));
        if (signal == SIGSYS)
            return failed(task,
                QStringLiteral("forbidden call: the compute worker made a system call the sandbox refuses (%1)")
                    .arg(signalName(signal)));
        return failed(task,
            QStringLiteral("crash: the compute worker died (%1)%2")
                .arg(signalName(signal), said.isEmpty() ? QString() : QStringLiteral(": ") + said.right(500)));
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    const auto result = readFile(folder.filePath(QStringLiteral("result.json")));
    if (code != 0 || !done || !result)
        return failed(task,
            QStringLiteral("crash: the compute worker ended (exit code %1) without a result%2")
                .arg(code)
                .arg(said.isEmpty() ? QString() : QStringLiteral(": ") + said.right(500)));
    auto parsed = core::ShardResult::fromJson(QJsonDocument::fromJson(*result).object());
    if (!parsed)
        return failed(task, QStringLiteral("the compute worker's result is unreadable: %1").arg(parsed.error().toString()));
    ShardOutput output { *parsed, {}, {} };
    if (output.result.outcome != core::ShardResult::Outcome::Failed) {
        output.weights = readFile(folder.filePath(QStringLiteral("weights.out"))).value_or(QByteArray());
        output.keptState = readFile(folder.filePath(QStringLiteral("kept.out"))).value_or(QByteArray());
        // The worker ran the job owner's code: the supervisor, which signs the result, hashes what
        // it returned itself rather than take the worker's word for it.
        const auto hash = canonicalHashOf(output.weights);
        if (!hash || *hash != output.result.finalHash)
            return failed(task, QStringLiteral("the compute worker's weights do not have the hash its result names"));
    }
    return output;
}

} // namespace tessera::compute::sandbox
