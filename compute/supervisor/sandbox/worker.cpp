#include "worker.h"
#include "workerprotocol.h"

#include <compute/pickle/tensorfile.h>
#include <core/helperprogram.h>
#include <core/readfile.h>

#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStorageInfo>
#include <QTemporaryDir>
#include <QUuid>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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
    // Not QSaveFile: a scratch file is read once by the other side after a handshake and is worth
    // nothing after a crash, so it needs no fsync (which cost tens of ms a shard here).
    QFile file(path);
    return file.open(QIODevice::WriteOnly | QIODevice::Truncate) && file.write(bytes) == bytes.size() && file.flush();
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
ShardOutput collectOutput(const core::ShardTask& task, const QDir& folder, const QString& keptDestination = {})
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
    const auto hash = pickle::canonicalHash(output.weights);
    if (!hash || *hash != output.result.finalHash)
        return failed(task, QStringLiteral("the compute worker's weights do not have the hash its result names"));
    return output;
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

} // namespace

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

namespace {

// How a one-shot worker (train, answer) ended.
struct OneShot {
    QString failure; // empty: it ended cleanly, saying "done"
    bool started = true; // false: the program could not be started
};

// Runs `command` on the task in `scratch` to its end: progress lines go to options.progress, and
// the time limit or a cancel kills it.
OneShot runOneShot(const QString& command, const QStringList& extra, const QDir& scratch, const core::ShardTask& task,
    const ComputeEnvironment& environment, const WorkerOptions& options,
    const std::function<void(const QByteArray&)>& otherLine = {})
{
    const QString program = options.program.isEmpty() ? defaultWorkerProgram() : options.program;
    pid_t pid = 0;
    int unused = -1;
    int outFd = -1;
    int errFd = -1;
    if (const int spawned = spawnWorker(program, workerArguments(command, scratch.path(), task, environment, options) + extra,
            false, pid, unused, outFd, errFd);
        spawned != 0)
        return {
            QStringLiteral("cannot start the compute worker %1: %2").arg(program, QString::fromLocal8Bit(std::strerror(spawned))),
            false
        };

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
            if (fd.fd == outFd) {
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
            if (const auto said = protocol::lines::progressOf(line); said && options.progress) {
                ShardProgress progress;
                progress.jobId = task.jobId;
                progress.round = task.round;
                progress.shard = task.shard;
                progress.step = said->step;
                progress.steps = said->steps;
                progress.loss = said->loss;
                progress.busyMs = said->busyMs;
                const double seconds = std::max(1e-6, double(progress.busyMs) / 1000.0);
                const double stepsPerSecond = double(progress.step) / seconds;
                progress.samplesPerSecond = stepsPerSecond * double(task.batchSize);
                progress.etaMs
                    = stepsPerSecond > 0 ? std::int64_t(double(progress.steps - progress.step) / stepsPerSecond * 1000.0) : 0;
                options.progress(progress);
            } else if (line == protocol::lines::Done) {
                done = true;
            } else if (otherLine) {
                otherLine(line);
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

    if (!killedFor.isEmpty())
        return { killedFor };
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !done)
        return { endReason(status, QString::fromLocal8Bit(stderrTail).trimmed()) };
    return {};
}

} // namespace

ShardOutput runShardInWorker(const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment,
    const WorkerOptions& options)
{
    auto prepared = prepareScratch(task, startWeights, {}, options);
    if (!prepared)
        return failed(task, prepared.error().message);
    const QDir folder((*prepared)->path());
    const auto ended = runOneShot(protocol::commands::Train, {}, folder, task, environment, options);
    if (!ended.failure.isEmpty())
        return failed(task, ended.failure);
    if (!QFileInfo::exists(folder.filePath(protocol::files::Result)))
        return failed(task, QStringLiteral("crash: the compute worker ended without a result"));
    return collectOutput(task, folder);
}

namespace {

// A one-shot worker's command (a dispute's answer, a tool): `inputs` written into a scratch folder
// of its own, what it left in answer.out read back (error.txt: why not). Field "worker": the worker
// could not be started or given its inputs (the node's installation or disk); none: it ran.
core::Result<QByteArray> runTool(const QString& command, const QStringList& extra,
    const QList<std::pair<QString, QByteArray>>& inputs, const core::ShardTask& task, const ComputeEnvironment& environment,
    const WorkerOptions& options, const std::function<void(const QByteArray&)>& otherLine = {}, QByteArray* meta = nullptr)
{
    const QString root = scratchRootOf(options);
    const auto scratch = makeScratch(options);
    if (!scratch->isValid())
        return core::Error { QStringLiteral("worker"), QStringLiteral("cannot make a scratch folder in %1").arg(root) };
    const QDir folder(scratch->path());
    for (const auto& [name, bytes] : inputs) {
        if (!writeFile(folder.filePath(name), bytes)) {
            // A full disk is said as such (a broker answers "disk-full", not "invalid").
            const bool full = QStorageInfo(root).bytesAvailable() < bytes.size() + (1 << 20);
            return core::Error { QStringLiteral("worker"),
                QStringLiteral("cannot write %1 for the compute worker%2")
                    .arg(name, full ? QStringLiteral(": the disk is full") : QString()),
                full };
        }
    }
    const auto ended = runOneShot(command, extra, folder, task, environment, options, otherLine);
    if (!ended.failure.isEmpty())
        return core::Error { ended.started ? QString() : QStringLiteral("worker"), ended.failure };
    if (const auto why = core::readFile(folder.filePath(protocol::files::Error)); why && !why->isEmpty())
        return core::Error { {}, QString::fromUtf8(*why) };
    auto answer = core::readFile(folder.filePath(protocol::files::AnswerOut));
    if (!answer)
        return core::Error { {}, QStringLiteral("crash: the compute worker ended without an answer") };
    if (meta)
        *meta = core::readFile(folder.filePath(protocol::files::AnswerMeta)).value_or(QByteArray());
    return *answer;
}

// What a job names, for the worker's confinement (and its blobs' paths).
core::ShardTask filesOf(const core::JobSpec& spec)
{
    core::ShardTask files;
    files.model = spec.model;
    files.dataset = spec.dataset;
    return files;
}

} // namespace

core::Result<QByteArray> answerInWorker(const core::ShardTask& task, const core::DisputeQuestion& question,
    const QByteArray& startWeights, const QByteArray& keptState, const ComputeEnvironment& environment,
    const WorkerOptions& options)
{
    QList<std::pair<QString, QByteArray>> inputs { { protocol::files::Task,
                                                       QJsonDocument(task.toJson()).toJson(QJsonDocument::Compact) },
        { protocol::files::WeightsIn, startWeights } };
    if (!keptState.isEmpty())
        inputs.append({ protocol::files::KeptIn, keptState });
    const QStringList extra { QStringLiteral("--want"), core::DisputeQuestion::nameOf(question.want),
        QStringLiteral("--checkpoint"), QString::number(question.checkpoint), QStringLiteral("--step"),
        QString::number(question.step), QStringLiteral("--instruction"), QString::number(question.instruction) };
    return runTool(protocol::commands::Answer, extra, inputs, task, environment, options);
}

core::Result<RuntimeInfo> runtimeInWorker(int threads, const WorkerOptions& options)
{
    auto made
        = runTool(protocol::commands::Profile, { QStringLiteral("--threads"), QString::number(threads) }, {}, {}, {}, options);
    if (!made)
        return made.error();
    const auto json = QJsonDocument::fromJson(*made).object();
    RuntimeInfo info;
    info.runtimeProfile = json.value(QStringLiteral("runtimeProfile")).toString();
    info.torch.cuda = json.value(QStringLiteral("cuda")).toBool();
    info.torch.cudaDevices = json.value(QStringLiteral("cudaDevices")).toInt();
    if (info.runtimeProfile.isEmpty())
        return core::Error { QStringLiteral("worker"), QStringLiteral("the compute worker named no runtime profile") };
    return info;
}

core::Result<core::BenchmarkRecord> benchmarkInWorker(const BenchmarkOptions& benchmark, const WorkerOptions& options)
{
    QStringList extra { QStringLiteral("--threads"), QString::number(benchmark.threads), QStringLiteral("--target-cv"),
        QString::number(benchmark.targetCv, 'g', 17), QStringLiteral("--min-repetitions"),
        QString::number(benchmark.minRepetitions), QStringLiteral("--repetitions"), QString::number(benchmark.maxRepetitions),
        QStringLiteral("--time-cap-ms"), QString::number(benchmark.timeCapMs) };
    if (!benchmark.only.isEmpty())
        extra << QStringLiteral("--only") << benchmark.only.join(u',');
    auto made = runTool(protocol::commands::Benchmark, extra, {}, {}, {}, options, [&](const QByteArray& line) {
        if (const auto said = protocol::lines::benchmarkOf(line); said && benchmark.progress)
            benchmark.progress(said->name, said->repetition);
    });
    if (!made)
        return made.error();
    return core::BenchmarkRecord::fromJson(QJsonDocument::fromJson(*made).object());
}

core::Result<QByteArray> roundWeightsInWorker(const QByteArray& previous, const QByteArray& change, const WorkerOptions& options)
{
    return runTool(protocol::commands::Rebuild, {},
        { { protocol::files::PreviousIn, previous }, { protocol::files::ChangeIn, change } }, {}, {}, options);
}

core::Result<QByteArray> sampleInWorker(const core::JobSpec& spec, const QByteArray& weights, const SampleOptions& sample,
    const ComputeEnvironment& environment, const WorkerOptions& options)
{
    core::ShardTask files; // what the model names, for the worker's confinement
    files.model = spec.model;
    const QStringList extra { QStringLiteral("--tokens"), QString::number(sample.tokens), QStringLiteral("--temperature"),
        QString::number(sample.temperature, 'g', 17), QStringLiteral("--seed"), QString::number(sample.seed) };
    return runTool(protocol::commands::Sample, extra,
        { { protocol::files::Job, QJsonDocument(spec.toJson()).toJson(QJsonDocument::Compact) },
            { protocol::files::WeightsIn, weights }, { protocol::files::PromptIn, sample.prompt } },
        files, environment, options);
}

core::Result<QByteArray> initialWeightsInWorker(
    const core::JobSpec& spec, const ComputeEnvironment& environment, const WorkerOptions& options)
{
    return runTool(protocol::commands::Initial, {},
        { { protocol::files::Job, QJsonDocument(spec.toJson()).toJson(QJsonDocument::Compact) } }, filesOf(spec), environment,
        options);
}

core::Result<Evaluation> evaluateInWorker(const core::JobSpec& spec, const QByteArray& weights, int threads,
    const ComputeEnvironment& environment, const WorkerOptions& options)
{
    auto made = runTool(protocol::commands::Evaluate, { QStringLiteral("--threads"), QString::number(threads) },
        { { protocol::files::Job, QJsonDocument(spec.toJson()).toJson(QJsonDocument::Compact) },
            { protocol::files::WeightsIn, weights } },
        filesOf(spec), environment, options);
    if (!made)
        return made.error();
    const auto json = QJsonDocument::fromJson(*made).object();
    if (!json.value(QStringLiteral("loss")).isDouble())
        return core::Error { QStringLiteral("worker"), QStringLiteral("the compute worker's evaluation is unreadable") };
    return Evaluation { json.value(QStringLiteral("loss")).toDouble(), json.value(QStringLiteral("accuracy")).toDouble(),
        std::int64_t(json.value(QStringLiteral("samples")).toDouble()) };
}

core::Result<Replay> replayInWorker(const core::ShardTask& task, std::int64_t from, const QByteArray& state,
    const core::Digest& expected, std::int64_t to, const QByteArray& roundWeights, const ComputeEnvironment& environment,
    const WorkerOptions& options)
{
    QByteArray meta;
    auto weights = runTool(protocol::commands::Replay,
        { QStringLiteral("--from"), QString::number(from), QStringLiteral("--to"), QString::number(to),
            QStringLiteral("--expected"), expected.toHex() },
        { { protocol::files::Task, QJsonDocument(task.toJson()).toJson(QJsonDocument::Compact) },
            { protocol::files::StateIn, state }, { protocol::files::RoundIn, roundWeights } },
        task, environment, options, {}, &meta);
    if (!weights)
        return weights.error();
    const auto json = QJsonDocument::fromJson(meta).object();
    Replay replay;
    for (const auto& hex : json.value(QStringLiteral("checkpoints")).toArray()) {
        auto hash = core::Digest::fromHex(hex.toString());
        if (!hash)
            return core::Error { QStringLiteral("worker"), QStringLiteral("the compute worker's replay is unreadable") };
        replay.checkpoints.append(*hash);
    }
    auto weightsHash = core::Digest::fromHex(json.value(QStringLiteral("weightsHash")).toString());
    if (!weightsHash)
        return core::Error { QStringLiteral("worker"), QStringLiteral("the compute worker's replay is unreadable") };
    // As for a shard: the weights' hash is the supervisor's own, not the worker's word.
    auto hashed = pickle::canonicalHash(*weights);
    if (!hashed || *hashed != *weightsHash)
        return core::Error { QStringLiteral("worker"),
            QStringLiteral("the compute worker's replayed weights do not have the hash it names") };
    replay.weightsHash = *hashed;
    replay.weights = std::move(*weights);
    replay.runtimeProfile = json.value(QStringLiteral("runtimeProfile")).toString();
    return replay;
}

// How long a worker may take to start and confine itself (no job code runs before that).
constexpr std::int64_t StartLimitMs = 60'000;

struct Worker::Process {
    std::unique_ptr<QTemporaryDir> scratch;
    pid_t pid = 0;
    int input = -1;
    int output = -1;
    int error = -1;
    QByteArray pending; // stdout read but not yet a whole line
    QByteArray said; // the end of stderr
    bool ended = false;
    QString endedWhy;
    // The shard's: how long it may keep the worker busy, how long it has, and whether to stop it.
    std::int64_t budgetMs = 0; // 0: no limit
    std::int64_t spentMs = 0;
    std::function<bool()> cancelled;

    ~Process()
    {
        if (input >= 0)
            ::close(input); // the pipe's end: the worker quits
        if (!ended && pid > 0) {
            ::kill(pid, SIGKILL);
            int status = 0;
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) { }
        }
        for (int fd : { output, error })
            if (fd >= 0)
                ::close(fd);
    }

    // Ends the worker (killed when `why` is ours) and keeps the reason.
    void end(const QString& why)
    {
        if (ended)
            return;
        if (!why.isEmpty())
            ::kill(pid, SIGKILL);
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) { }
        ended = true;
        endedWhy = why.isEmpty() ? endReason(status, QString::fromLocal8Bit(said).trimmed()) : why;
    }

    // The worker's next line on stdout; its death, the time limit or a cancel as an error.
    core::Result<QString> readLine()
    {
        QElapsedTimer waited;
        waited.start();
        const std::int64_t spentBefore = spentMs;
        for (;;) {
            spentMs = spentBefore + waited.elapsed();
            if (const qsizetype newline = pending.indexOf('\n'); newline >= 0) {
                const QString line = QString::fromUtf8(pending.left(newline));
                pending.remove(0, newline + 1);
                return line;
            }
            if (ended)
                return core::Error { {}, endedWhy };
            pollfd fds[2] = { { output, POLLIN, 0 }, { error, POLLIN, 0 } };
            if (::poll(fds, 2, 100) < 0 && errno != EINTR)
                return core::Error { QStringLiteral("worker"), QStringLiteral("cannot read the compute worker's answer") };
            for (auto& fd : fds) {
                if (fd.fd < 0 || !(fd.revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                char chunk[4096];
                const ssize_t got = ::read(fd.fd, chunk, sizeof chunk);
                if (got > 0 && fd.fd == output) {
                    pending.append(chunk, got);
                } else if (got > 0) {
                    said.append(chunk, got);
                    said = said.right(4096);
                } else if (fd.fd == output) {
                    end({}); // stdout closed: the worker is gone
                } else {
                    ::close(error);
                    error = -1;
                }
            }
            if (ended || pending.contains('\n'))
                continue;
            if (budgetMs > 0 && spentBefore + waited.elapsed() > budgetMs)
                end(QStringLiteral("time limit: the shard ran past its %1 s and its worker was stopped")
                        .arg(double(budgetMs) / 1000.0, 0, 'f', 1));
            else if (cancelled && cancelled())
                end(QStringLiteral("cancelled"));
        }
    }
};

Worker::Worker(std::unique_ptr<Process> process, QStringList arguments)
    : m_process(std::move(process))
    , m_arguments(std::move(arguments))
{ }

Worker::~Worker() = default;

bool Worker::ended() const
{
    return m_process->ended;
}

bool Worker::serves(const core::ShardTask& task, const ComputeEnvironment& environment, const WorkerOptions& options) const
{
    const QString program = options.program.isEmpty() ? defaultWorkerProgram() : options.program;
    return !m_process->ended
        && QStringList { program } + workerArguments(protocol::commands::Serve, {}, task, environment, options) == m_arguments;
}

core::Result<std::shared_ptr<Worker>> Worker::spawn(
    const core::ShardTask& task, const ComputeEnvironment& environment, const WorkerOptions& options)
{
    auto scratch = prepareScratch(task, {}, {}, options);
    if (!scratch)
        return scratch.error();
    auto process = std::make_unique<Process>();
    process->scratch = std::move(*scratch);
    const QString program = options.program.isEmpty() ? defaultWorkerProgram() : options.program;
    if (const int spawned
        = spawnWorker(program, workerArguments(protocol::commands::Serve, process->scratch->path(), task, environment, options),
            true, process->pid, process->input, process->output, process->error);
        spawned != 0)
        return core::Error {
            QStringLiteral("worker"),
            QStringLiteral("cannot start the compute worker %1: %2").arg(program, QString::fromLocal8Bit(std::strerror(spawned)))
        };
    QStringList arguments = workerArguments(protocol::commands::Serve, {}, task, environment, options);
    arguments.prepend(program);
    std::shared_ptr<Worker> worker(new Worker(std::move(process), std::move(arguments)));
    // Its start (LibTorch's libraries, the confinement) is not the job's: a limit of its own.
    worker->m_process->budgetMs = StartLimitMs;
    worker->m_process->cancelled = options.cancelled;
    // "confined landlock=N memory=M". Until then no job code has run: a worker that does not get
    // there (a broken installation, a kernel that refuses the confinement) is this node's problem.
    auto confined = worker->m_process->readLine();
    if (!confined && confined.error().message == u"cancelled")
        return confined.error(); // its job was cancelled meanwhile
    if (!confined || !confined->startsWith(QStringLiteral("confined ")))
        return core::Error { QStringLiteral("worker"),
            QStringLiteral("the compute worker %1 did not start: %2")
                .arg(program, confined ? QStringLiteral("it said %1").arg(confined->left(200)) : confined.error().message) };
    return worker;
}

RemoteShardRun::RemoteShardRun(core::ShardTask task, std::shared_ptr<Worker> worker)
    : m_task(std::move(task))
    , m_worker(std::move(worker))
{ }

RemoteShardRun::~RemoteShardRun()
{
    if (m_worker) {
        m_worker->process().cancelled = nullptr; // it may outlive what the predicate refers to
        m_worker->process().budgetMs = 0;
    }
}

core::Result<std::unique_ptr<RemoteShardRun>> RemoteShardRun::start(const core::ShardTask& task, const QByteArray& startWeights,
    const ComputeEnvironment& environment, const WorkerOptions& options)
{
    auto worker = Worker::spawn(task, environment, options);
    if (!worker)
        return worker.error();
    return open(task, startWeights, {}, std::move(*worker), options);
}

core::Result<std::unique_ptr<RemoteShardRun>> RemoteShardRun::resume(const core::ShardTask& task, const QByteArray& suspended,
    const ComputeEnvironment& environment, const WorkerOptions& options, const QByteArray& startWeights)
{
    auto worker = Worker::spawn(task, environment, options);
    if (!worker)
        return worker.error();
    return open(task, startWeights, suspended, std::move(*worker), options);
}

core::Result<std::unique_ptr<RemoteShardRun>> RemoteShardRun::open(const core::ShardTask& task, const QByteArray& startWeights,
    const QByteArray& suspended, std::shared_ptr<Worker> worker, const WorkerOptions& options)
{
    auto& process = worker->process();
    if (process.ended)
        return core::Error { {}, process.endedWhy };
    if (!writeInputs(QDir(process.scratch->path()), task, startWeights, suspended))
        return core::Error { QStringLiteral("worker"),
            QStringLiteral("cannot write the compute worker's task into %1").arg(process.scratch->path()) };
    process.spentMs = 0;
    process.budgetMs = options.timeLimitMs;
    process.cancelled = options.cancelled;
    std::unique_ptr<RemoteShardRun> run(new RemoteShardRun(task, std::move(worker)));
    auto opened = run->ask(suspended.isEmpty() ? protocol::requests::Start : protocol::requests::Resume);
    if (!opened)
        return opened.error();
    run->m_completed = opened->section(u' ', 1, 1).toLongLong();
    // The worker holds the training state now; the round's weights stay on disk, where the worker
    // reads them again when it reveals its update rather than hold them in memory while it trains
    // (ShardRun::spillTo: disk is the cheaper place for 1 x the model).
    const QDir folder(run->m_worker->process().scratch->path());
    QFile::remove(folder.filePath(protocol::files::SuspendedIn));
    return run;
}

core::Result<QString> RemoteShardRun::ask(const QString& command)
{
    auto& process = m_worker->process();
    const QByteArray line = command.toUtf8() + '\n';
    // A worker that died closes the pipe: the write fails with EPIPE, and its SIGPIPE, which would
    // end this process, is held back and taken here instead.
    sigset_t pipe;
    sigset_t before;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &before);
    const bool written = !process.ended && ::write(process.input, line.constData(), size_t(line.size())) == line.size();
    if (!written && errno == EPIPE) {
        const timespec now { 0, 0 };
        sigtimedwait(&pipe, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    if (!written) {
        process.end({});
        return core::Error { {}, process.endedWhy };
    }
    auto answer = process.readLine();
    if (!answer)
        return answer.error();
    if (const auto error = protocol::answers::errorOf(*answer))
        return core::Error { {}, *error };
    return *answer;
}

core::Status RemoteShardRun::step(std::int64_t steps)
{
    auto answer = ask(protocol::requests::step(steps));
    if (!answer)
        return answer.error();
    const auto stepped = protocol::answers::steppedOf(*answer);
    if (!stepped)
        return core::Error { QStringLiteral("worker"), QStringLiteral("the compute worker answered %1").arg(*answer) };
    m_completed = stepped->completed;
    m_loss = stepped->loss;
    return {};
}

core::Result<QByteArray> RemoteShardRun::suspend()
{
    if (auto answer = ask(protocol::requests::Suspend); !answer)
        return answer.error();
    const QString path = QDir(m_worker->process().scratch->path()).filePath(protocol::files::SuspendedOut);
    auto state = core::readFile(path);
    QFile::remove(path);
    if (!state)
        return core::Error { QStringLiteral("worker"), QStringLiteral("the compute worker left no training state") };
    return *state;
}

ShardOutput RemoteShardRun::finish()
{
    if (auto answer = ask(protocol::requests::Finish); !answer)
        return failed(m_task, answer.error().message);
    const QDir folder(m_worker->process().scratch->path());
    // The kept state (up to 3 x the model) moves beside the scratch folder rather than through
    // this process's memory.
    QDir root(folder);
    root.cdUp();
    auto output = collectOutput(
        m_task, folder, root.filePath(QStringLiteral("kept-%1.state").arg(QUuid::createUuid().toString(QUuid::Id128))));
    for (const QString& done : { protocol::files::Result, protocol::files::WeightsOut, protocol::files::KeptOut })
        QFile::remove(folder.filePath(done));
    return output;
}

} // namespace tessera::compute::sandbox
