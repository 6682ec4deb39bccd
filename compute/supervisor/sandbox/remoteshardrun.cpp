#include "worker.h"

#include "workerprocess.h"
#include "workerprotocol.h"

#include <core/readfile.h>

#include <QDir>
#include <QElapsedTimer>
#include <QJsonDocument>
#include <QJsonObject>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

// worker.h's long-lived worker (Worker) and the shard driven in it a few steps at a time
// (RemoteShardRun): the worker's stdin takes commands, its stdout answers a line each
// (workerprotocol.h).

namespace tessera::compute::sandbox {

using namespace detail;

// How long a worker may take to start and confine itself (no job code runs before that).
constexpr std::int64_t StartLimitMs = 60'000;
// The longest line a worker may write (a stage task's is base64 of its largest tensor, if longer),
// and how long it may leave a request unread.
constexpr qsizetype DefaultMaxLine = qsizetype(16) << 20;
constexpr std::int64_t WriteStallMs = 30'000;
constexpr qsizetype MaxReason = 2000; // of a worker's error, passed on as a failure's reason

struct Worker::Process {
    std::unique_ptr<QTemporaryDir> scratch;
    pid_t pid = 0;
    int input = -1;
    int output = -1;
    int error = -1;
    QByteArray pending; // stdout read but not yet a whole line
    qsizetype scanned = 0; // of pending, the bytes known to hold no newline (a stage's tensor is a long line)
    qsizetype maxLine = DefaultMaxLine; // past it without a newline, the worker is stopped
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
        auto line = readBytes();
        if (!line)
            return line.error();
        return QString::fromUtf8(*line);
    }

    // The same line as bytes (a stage's tensor is never widened to UTF-16).
    core::Result<QByteArray> readBytes()
    {
        QElapsedTimer waited;
        waited.start();
        const std::int64_t spentBefore = spentMs;
        for (;;) {
            spentMs = spentBefore + waited.elapsed();
            if (const qsizetype newline = pending.indexOf('\n', scanned); newline >= 0) {
                QByteArray line = pending.left(newline);
                pending.remove(0, newline + 1);
                scanned = 0;
                return line;
            }
            scanned = pending.size();
            if (pending.size() > maxLine && !ended)
                end(QStringLiteral("the compute worker wrote a line of more than %1 bytes").arg(maxLine));
            if (ended)
                return core::Error { {}, endedWhy };
            pollfd fds[2] = { { output, POLLIN, 0 }, { error, POLLIN, 0 } };
            if (::poll(fds, 2, 100) < 0 && errno != EINTR)
                return core::Error { QStringLiteral("worker"), QStringLiteral("cannot read the compute worker's answer") };
            for (auto& fd : fds) {
                if (fd.fd < 0 || !(fd.revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                char chunk[65536];
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
            if (ended || pending.indexOf('\n', scanned) >= 0)
                continue;
            if (budgetMs > 0 && spentBefore + waited.elapsed() > budgetMs)
                end(pastTimeLimit(budgetMs));
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
    const QString program = programOf(options);
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
    const QString program = programOf(options);
    if (const int spawned
        = spawnWorker(program, workerArguments(protocol::commands::Serve, process->scratch->path(), task, environment, options),
            true, process->pid, process->input, process->output, process->error);
        spawned != 0)
        return core::Error { QStringLiteral("worker"), cannotStart(program, spawned) };
    // Requests are written without blocking (tell): a worker that stops reading cannot hold the
    // compute thread.
    ::fcntl(process->input, F_SETFL, ::fcntl(process->input, F_GETFL) | O_NONBLOCK);
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

RemoteShardRun::RemoteShardRun(core::ShardTask task, std::shared_ptr<Worker> worker, StageLink* link)
    : m_task(std::move(task))
    , m_worker(std::move(worker))
    , m_link(link)
{
    const auto largest = core::maxTensorBytes(m_task, core::TensorKind::Activation);
    m_worker->process().maxLine = m_task.isStage()
        ? std::max(DefaultMaxLine, qsizetype(std::min<std::int64_t>(largest, qsizetype(1) << 40) / 3 * 4 + 4096))
        : DefaultMaxLine;
}

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
    const QByteArray& suspended, std::shared_ptr<Worker> worker, const WorkerOptions& options, StageLink* link,
    const QString& startWeightsFile)
{
    auto& process = worker->process();
    if (process.ended)
        return core::Error { {}, process.endedWhy };
    if (!writeInputs(QDir(process.scratch->path()), task, startWeights, suspended))
        return core::Error { QStringLiteral("worker"),
            QStringLiteral("cannot write the compute worker's task into %1").arg(process.scratch->path()) };
    if (startWeights.isEmpty() && !startWeightsFile.isEmpty() && !placeWeights(QDir(process.scratch->path()), startWeightsFile))
        return core::Error { QStringLiteral("sandbox"), // the node's own file: given back, not the job's fault
            QStringLiteral("cannot place the round's weights %1 in the compute worker's scratch folder").arg(startWeightsFile) };
    process.spentMs = 0;
    process.budgetMs = options.timeLimitMs;
    process.cancelled = options.cancelled;
    std::unique_ptr<RemoteShardRun> run(new RemoteShardRun(task, std::move(worker), link));
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

namespace {

// Writes all of `bytes` to the worker's input, which does not block: a worker that stops reading
// is stopped after WriteStallMs without progress, or at once when the shard is cancelled.
bool writeAll(Worker::Process& process, const char* data, qsizetype size)
{
    QElapsedTimer stalled;
    stalled.start();
    while (size > 0 && !process.ended) {
        const ssize_t written = ::write(process.input, data, std::size_t(size));
        if (written > 0) {
            data += written;
            size -= written;
            stalled.restart();
            continue;
        }
        if (written < 0 && errno == EINTR)
            continue;
        if (written < 0 && errno != EAGAIN)
            return false;
        if (stalled.elapsed() > WriteStallMs)
            process.end(QStringLiteral("the compute worker stopped reading its requests"));
        else if (process.cancelled && process.cancelled())
            process.end(QStringLiteral("cancelled"));
        pollfd fd { process.input, POLLOUT, 0 };
        ::poll(&fd, 1, 100);
    }
    return size == 0;
}

// Writes one request line to the worker (`line` without its newline); a worker that died is an
// error with its reason.
core::Status tell(Worker::Process& process, const QByteArray& line)
{
    // A worker that died closes the pipe: the write fails with EPIPE, and its SIGPIPE, which would
    // end this process, is held back and taken here instead.
    sigset_t pipe;
    sigset_t before;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &before);
    const bool written = !process.ended && writeAll(process, line.constData(), line.size()) && writeAll(process, "\n", 1);
    const bool broken = !written && errno == EPIPE;
    if (broken) {
        const timespec now { 0, 0 };
        sigtimedwait(&pipe, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    if (!written) {
        // A closed pipe: the worker is gone, and its end says why. Anything else: it is stopped.
        process.end(broken || process.ended ? QString() : QStringLiteral("cannot write to the compute worker"));
        return core::Error { {}, process.endedWhy };
    }
    return {};
}

core::Status tell(Worker::Process& process, const QString& command)
{
    return tell(process, command.toUtf8());
}

// A replica's model in a worker: one question at a time, its tokens read back line by line.
class WorkerHosted final : public HostedModel {
public:
    explicit WorkerHosted(std::shared_ptr<Worker> worker)
        : m_worker(std::move(worker))
    { }
    core::Result<QByteArray> answer(const core::inference::Question& question, const OnTokens& onTokens) override
    {
        auto& process = m_worker->process();
        if (auto told = tell(process, protocol::requests::ask(question.toJson())); !told)
            return told.error();
        for (;;) {
            auto line = process.readLine();
            if (!line)
                return line.error();
            if (const auto error = protocol::answers::errorOf(*line))
                return core::Error { {}, *error };
            if (const auto answered = protocol::answers::answeredOf(*line))
                return *answered;
            if (const auto tokens = protocol::answers::tokensOf(*line); tokens && onTokens)
                onTokens(tokens->first, tokens->second);
        }
    }

private:
    std::shared_ptr<Worker> m_worker;
};

} // namespace

core::Result<std::unique_ptr<HostedModel>> hostInWorker(const core::ShardTask& replica, const QByteArray& weights,
    const ComputeEnvironment& environment, const WorkerOptions& options)
{
    auto worker = Worker::spawn(replica, environment, options);
    if (!worker)
        return worker.error();
    auto& process = (*worker)->process();
    if (!writeInputs(QDir(process.scratch->path()), replica, weights, {}))
        return core::Error { QStringLiteral("worker"),
            QStringLiteral("cannot write the model into the worker's scratch folder") };
    process.budgetMs = 0; // a replica serves for as long as its job does
    process.spentMs = 0;
    if (auto told = tell(process, protocol::requests::Host); !told)
        return told.error();
    auto hosted = process.readLine();
    if (!hosted)
        return hosted.error();
    if (const auto error = protocol::answers::errorOf(*hosted))
        return core::Error { QStringLiteral("model"), *error };
    if (*hosted != protocol::answers::Hosted)
        return core::Error { QStringLiteral("worker"), QStringLiteral("the compute worker said %1").arg(hosted->left(200)) };
    return std::unique_ptr<HostedModel>(std::make_unique<WorkerHosted>(std::move(*worker)));
}

core::Result<QString> RemoteShardRun::ask(const QString& command)
{
    auto& process = m_worker->process();
    if (auto told = tell(process, command); !told)
        return told.error();
    for (;;) {
        auto line = process.readBytes();
        if (!line)
            return line.error();
        if (m_task.isStage() && protocol::links::isLinkRequest(*line)) {
            carry(*line); // a stage's tensor, mid-step
            continue;
        }
        const QString answer = QString::fromUtf8(*line);
        // A request of the worker's own that its supervisor refused: the worker is at fault,
        // whatever it answers. Else a link that failed gives the stage back.
        if (!m_refused.isEmpty())
            return core::Error { {}, m_refused };
        if (const auto error = protocol::answers::errorOf(answer))
            return core::Error { {}, error->left(MaxReason) };
        if (const auto why = protocol::links::failedOf(answer); why && m_task.isStage())
            return core::Error { QStringLiteral("link"), why->left(MaxReason) };
        if (!m_linkFailed.isEmpty())
            return core::Error { QStringLiteral("link"), m_linkFailed };
        return answer;
    }
}

QString RemoteShardRun::refusalOf(bool sent, const protocol::links::Address& address, qsizetype bytes)
{
    using Kind = core::TensorKind;
    const auto s = m_task.stage;
    // Activations go forward, gradients back, the sums (of micro-batch 0) to and from every other stage.
    const bool direction = address.kind == Kind::Activation ? address.peer == (sent ? s + 1 : s - 1)
        : address.kind == Kind::Gradient                    ? address.peer == (sent ? s - 1 : s + 1)
                                                            : address.micro == 0;
    if (!m_link)
        return QStringLiteral("the compute worker asked for a tensor in a stage that has no link");
    if (address.peer >= m_task.stages || address.peer == s || address.step >= m_task.localSteps
        || address.micro >= m_task.microBatches || !direction)
        return QStringLiteral("the compute worker named a tensor outside the stage's schedule");
    if (bytes > core::maxTensorBytes(m_task, address.kind))
        return QStringLiteral("the compute worker sent a tensor of %1 bytes, more than its stage's micro-batch holds").arg(bytes);
    if (!m_carried.insert({ sent, address.peer, int(address.kind), address.step, address.micro }).second)
        return QStringLiteral("the compute worker named the same tensor twice");
    return {};
}

void RemoteShardRun::carry(const QByteArray& line)
{
    namespace links = protocol::links;
    const auto sent = links::sendOf(line);
    const auto asked = sent ? std::nullopt : links::receiveOf(line);
    // The worker's word is checked as a partner's would be (refusalOf), and any refusal is its fault.
    QString refused = !sent && !asked ? QStringLiteral("the compute worker's request for a tensor is malformed")
        : sent                        ? refusalOf(true, sent->first, sent->second.size())
                                      : refusalOf(false, *asked, 0);
    if (!refused.isEmpty() && m_refused.isEmpty())
        m_refused = refused;
    if (sent) { // not answered: a failure fails the next receive, or the step
        const auto& [to, bytes] = *sent;
        if (const auto status = refused.isEmpty() && m_linkFailed.isEmpty()
                ? m_link->send(to.peer, to.kind, to.step, to.micro, bytes)
                : core::Status();
            !status)
            m_linkFailed = status.error().message;
        return;
    }
    QByteArray reply;
    if (!m_refused.isEmpty() || !m_linkFailed.isEmpty()) {
        reply = protocol::answers::error(m_refused.isEmpty() ? m_linkFailed : m_refused).toUtf8();
    } else {
        const auto bytes = m_link->receive(asked->peer, asked->kind, asked->step, asked->micro);
        reply = bytes ? links::tensor(*bytes) : protocol::answers::error(bytes.error().message).toUtf8();
    }
    static_cast<void>(tell(m_worker->process(), reply)); // a worker that died: the next line read says so
}

core::Status RemoteShardRun::step(std::int64_t steps)
{
    auto answer = ask(protocol::requests::step(steps));
    if (!answer)
        return answer.error();
    const auto stepped = protocol::answers::steppedOf(*answer);
    if (!stepped)
        return core::Error { QStringLiteral("worker"), QStringLiteral("the compute worker answered %1").arg(answer->left(200)) };
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
