// tessera-compute: the confined worker process that trains a job owner's shard for its supervisor
// (compute/supervisor/sandbox/worker.h). It confines itself (confinement.h) before it reads a byte of the
// task, then trains, reporting progress on stdout, and leaves the result in its scratch folder.
// The node's keys, settings and the user's files are out of its reach; it holds no key and signs
// nothing: the supervisor hashes and signs what it returns.
//
//   tessera-compute train --scratch DIR [--memory-mib N] [--nice N] [--read PATH]... [--blob SHA256=PATH]...
//                         [--fashion-mnist DIR] [--fortunes DIR] [--device D] [--portable-threads N]
//     reads DIR/task.json (core::ShardTask) and DIR/weights.in, writes DIR/result.json,
//     DIR/weights.out and DIR/kept.out; prints "progress STEP STEPS LOSS BUSY_MS" lines and "done".
//   tessera-compute serve --scratch DIR [the options of train]
//     shards of one job one after another, each driven a few steps at a time over stdin and stdout (serve() below), so that
//     the supervisor's compute thread pauses, resumes and throttles it as it does its own runs.
//   tessera-compute answer --scratch DIR --want state|trace|operands [--checkpoint N] [--step S]
//                          [--instruction I] [the options of train]
//     a dispute's question about a shard the node trained, from DIR/task.json, DIR/weights.in and
//     DIR/kept.in: writes DIR/answer.out (or DIR/error.txt) and prints "done".
//   tessera-compute profile|benchmark|rebuild|sample --scratch DIR [options]
//     the node's own LibTorch work, for a supervisor that does not load LibTorch (the desktop app):
//     profile: this runtime (compute::currentRuntimeProfile, torchCapabilities) as JSON;
//     benchmark [--threads N] [--target-cv CV] [--min-repetitions N] [--repetitions MAX]
//       [--time-cap-ms MS] [--only NAME,...]: a
//       compute::runBenchmark record as JSON, printing "benchmark NAME REPETITION" as it goes;
//     rebuild: a round's weights from DIR/previous.in and DIR/change.in (roundWeightsFromChange);
//     sample [--tokens N] [--temperature T] [--seed S]: text from a language model, DIR/job.json's
//       model with DIR/weights.in, after DIR/prompt.in (sampleText).
//   tessera-compute initial|evaluate|replay --scratch DIR [options]
//     a broker's runs of a job owner's code, with a time limit:
//     initial: the job's initial weights (DIR/job.json; compute::initialWeights);
//     evaluate [--threads N]: DIR/job.json's loss and accuracy with DIR/weights.in, as JSON;
//     replay --from F --to T --expected SHA256: checkpoints F+1..T of DIR/task.json from
//       DIR/state.in (DIR/round.in: the round's weights): the weights at T into answer.out, the
//       checkpoint hashes and runtime profile into DIR/answer.json (compute::replayShard).
//     Each writes DIR/answer.out (or why not into DIR/error.txt) and prints "done".
//   tessera-compute probe --scratch DIR [--try-read FILE]
//     confines itself as train does, then tries what a hostile job would (read FILE, open sockets,
//     write outside DIR, start a process) and prints one line each: "NAME: allowed" or
//     "NAME: refused (REASON)". The sandbox's own test (tst_sandbox) reads it.

#include <compute/supervisor/inthread.h>
#include <compute/supervisor/sandbox/confinement.h>
#include <compute/supervisor/sandbox/workerprotocol.h>

#include <compute/engine/benchmark.h>
#include <compute/engine/runtimeprofile.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <core/disputequestion.h>
#include <core/inference/question.h>
#include <core/jobspec.h>
#include <core/readfile.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QHash>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <csignal>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>

using namespace tessera;
namespace protocol = tessera::compute::sandbox::protocol;

namespace {

struct Arguments {
    QString command;
    QString scratch;
    std::int64_t memoryMiB = 0;
    QStringList readable;
    QHash<QString, QString> blobs; // sha256 (hex) -> path
    QString fashionMnist;
    QString fortunes;
    QString device;
    int portableThreads = 0;
    int nice = 19;
    QString tryRead;
    core::DisputeQuestion question; // answer
    bool confine = true; // --confine 0: Compute/Sandbox is off
    // The tools' options.
    int threads = 1;
    compute::BenchmarkOptions benchmark;
    compute::SampleOptions sample;
    std::int64_t from = 0; // replay
    std::int64_t to = 0;
    QString expected;
};

// Address space kept back for the way out of a failed allocation: LibTorch's error (with its
// TorchScript traceback) and the failed result need memory of their own, and at the limit there
// may be none. The first operator new that fails gets this back, once.
// Where the supervisor reads this process's lines (progress, answers, "done"): its stdout as the
// worker started, moved away from descriptor 1 before any job code runs. A job's code may print
// (TorchScript's print() writes to std::cout): descriptor 1 then goes to stderr, of which the
// supervisor keeps only the end, for a failure's reason, so nothing the job prints is ever read as
// an answer.
FILE* answers = stdout;

// Moves the answers' pipe off descriptor 1 and points 1 at stderr; false when it cannot.
bool separateAnswersFromPrints()
{
    const int pipe = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (pipe < 0)
        return false;
    FILE* stream = ::fdopen(pipe, "w");
    if (!stream || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
        return false;
    answers = stream;
    return true;
}

constexpr std::size_t ReserveBytes = std::size_t(64) << 20;
void* reserve = nullptr;

void releaseReserve()
{
    if (reserve)
        ::munmap(reserve, ReserveBytes);
    reserve = nullptr;
    std::set_new_handler(nullptr); // next time: std::bad_alloc
}

int usage(const char* why)
{
    std::fprintf(stderr, "tessera-compute: %s\nusage: tessera-compute train|probe --scratch DIR [options]\n", why);
    return 2;
}

bool writeFile(const QString& path, const QByteArray& bytes)
{
    // Not QSaveFile: a scratch file is read once by the other side after a handshake and is worth
    // nothing after a crash, so it needs no fsync (which cost tens of ms a shard here).
    QFile file(path);
    return file.open(QIODevice::WriteOnly | QIODevice::Truncate) && file.write(bytes) == bytes.size() && file.flush();
}

void say(const char* name, bool allowed, int error = 0)
{
    if (allowed)
        std::fprintf(answers, "%s: allowed\n", name);
    else
        std::fprintf(answers, "%s: refused (%s)\n", name, std::strerror(error));
    std::fflush(answers);
}

int probe(const Arguments& arguments)
{
    if (!arguments.tryRead.isEmpty()) {
        const int fd = ::open(QFile::encodeName(arguments.tryRead).constData(), O_RDONLY | O_CLOEXEC);
        const int error = errno;
        say("read", fd >= 0, error);
        if (fd >= 0)
            ::close(fd);
    }
    {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        const int error = errno;
        say("socket", fd >= 0, error);
        if (fd >= 0)
            ::close(fd);
    }
    {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        const int error = errno;
        say("unix socket", fd >= 0, error);
        if (fd >= 0)
            ::close(fd);
    }
    {
        const QByteArray inside = QFile::encodeName(QDir(arguments.scratch).filePath(protocol::files::Probe));
        const int fd = ::open(inside.constData(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        const int error = errno;
        say("write scratch", fd >= 0, error);
        if (fd >= 0)
            ::close(fd);
        const QByteArray outside = QFile::encodeName(QDir(arguments.scratch).filePath(QStringLiteral("../outside.txt")));
        const int out = ::open(outside.constData(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        const int outError = errno;
        say("write outside", out >= 0, outError);
        if (out >= 0)
            ::close(out);
    }
    // What native code in a hostile job would do to its supervisor (the node) or to the machine.
    {
        const pid_t parent = ::getppid();
        errno = 0;
        const long signalled = ::syscall(SYS_tgkill, parent, parent, 0); // signal 0: only asks whether it may
        say("signal supervisor", signalled == 0, errno);
        const long own = ::syscall(SYS_tgkill, ::getpid(), ::gettid(), 0);
        say("signal itself", own == 0, errno);
        const long pidfd = ::syscall(SYS_pidfd_open, parent, 0);
        say("pidfd", pidfd >= 0, errno);
        if (pidfd >= 0)
            ::close(int(pidfd));
        const int memfd = int(::syscall(SYS_memfd_create, "hoard", 0));
        say("memfd", memfd >= 0, errno);
        if (memfd >= 0)
            ::close(memfd);
        const int raised = ::setpriority(PRIO_PROCESS, 0, -20);
        say("raise priority", raised == 0, errno);
        sched_param realtime {};
        realtime.sched_priority = 1;
        const int fifo = ::sched_setscheduler(0, SCHED_FIFO, &realtime);
        say("real-time", fifo == 0, errno);
        rlimit memory {};
        ::getrlimit(RLIMIT_AS, &memory);
        say("read limits", true);
        memory.rlim_max = RLIM_INFINITY;
        const int lifted = ::setrlimit(RLIMIT_AS, &memory);
        say("lift memory limit", lifted == 0, errno);
    }
    // Last: if it were allowed, this process would be /bin/true from here on and print nothing more.
    char program[] = "/bin/true";
    char* argv[] = { program, nullptr };
    ::execv(program, argv);
    say("exec", false, errno);
    return 0;
}

// The reason a failed step gives, with the sandbox's word for a memory limit.
QString reasonOf(const QString& failure, std::int64_t memoryMiB)
{
    if (failure.contains(QStringLiteral("can't allocate memory")) || failure.contains(QStringLiteral("bad_alloc"))
        || failure.contains(QStringLiteral("std::bad_alloc")))
        return QStringLiteral("out of memory: the shard passed its %1 MiB (Compute/MaxMemoryMiB): %2")
            .arg(memoryMiB)
            .arg(failure);
    return failure;
}

// The task in the scratch folder.
core::Result<core::ShardTask> loadTask(const QDir& scratch)
{
    auto text = core::readFile(scratch.filePath(protocol::files::Task));
    if (!text)
        return text.error();
    return core::ShardTask::fromJson(QJsonDocument::fromJson(*text).object());
}

// The node's environment as the supervisor passed it: the datasets, and the task's blobs by hash.
compute::ComputeEnvironment environmentOf(const Arguments& arguments)
{
    compute::ComputeEnvironment environment;
    environment.fashionMnistDirectory = arguments.fashionMnist;
    environment.fortunesDirectory = arguments.fortunes;
    environment.device = arguments.device;
    environment.portableThreads = arguments.portableThreads;
    const auto blobs = arguments.blobs;
    environment.blobPath = [blobs](const core::Digest& digest) -> std::optional<QString> {
        const auto it = blobs.constFind(digest.toHex());
        return it == blobs.constEnd() ? std::nullopt : std::optional<QString>(*it);
    };
    return environment;
}

// A finished shard's result, weights and kept state, where the supervisor collects them.
bool writeOutput(const QDir& scratch, const compute::ShardOutput& output)
{
    // A run that spilled its kept state (ShardRun::spillTo) wrote kept.out itself.
    return writeFile(scratch.filePath(protocol::files::WeightsOut), output.weights)
        && (!output.keptStateFile.isEmpty() || writeFile(scratch.filePath(protocol::files::KeptOut), output.keptState))
        && writeFile(
            scratch.filePath(protocol::files::Result), QJsonDocument(output.result.toJson()).toJson(QJsonDocument::Compact));
}

int train(const Arguments& arguments)
{
    const QDir scratch(arguments.scratch);
    auto task = loadTask(scratch);
    if (!task)
        return usage(qPrintable(task.error().toString()));
    const auto weights = core::readFile(scratch.filePath(protocol::files::WeightsIn));
    if (!weights)
        return usage("the scratch folder holds no weights.in");
    const auto environment = environmentOf(arguments);

    auto fail = [&](const QString& why) {
        const auto result = compute::failedResult(*task, reasonOf(why, arguments.memoryMiB));
        writeFile(scratch.filePath(protocol::files::Result), QJsonDocument(result.toJson()).toJson(QJsonDocument::Compact));
        std::fprintf(answers, "%s\n", protocol::lines::Done.constData());
        return 0;
    };
    try {
        auto run = compute::ShardRun::start(*task, *weights, environment);
        if (!run)
            return fail(run.error().toString());
        QElapsedTimer sinceProgress;
        sinceProgress.start();
        std::int64_t busyNs = 0;
        while (!(*run)->finished()) {
            QElapsedTimer stepTimer;
            stepTimer.start();
            if (auto status = (*run)->step(); !status)
                return fail(status.error().toString());
            busyNs += stepTimer.nsecsElapsed();
            if (sinceProgress.elapsed() >= 100 || (*run)->finished()) {
                sinceProgress.restart();
                std::fprintf(answers, "%s\n",
                    protocol::lines::progress(
                        { (*run)->completedSteps(), task->localSteps, (*run)->lastLoss(), busyNs / 1'000'000 })
                        .constData());
                std::fflush(answers);
            }
        }
        const auto output = (*run)->finish();
        if (output.result.outcome == core::ShardResult::Outcome::Failed)
            return fail(output.result.failure);
        if (!writeOutput(scratch, output))
            return usage("cannot write the result into the scratch folder");
        std::fprintf(answers, "%s\n", protocol::lines::Done.constData());
        return 0;
    } catch (const std::bad_alloc&) {
        return fail(QStringLiteral("std::bad_alloc"));
    } catch (const std::exception& error) {
        return fail(QStringLiteral("internal error: %1").arg(QString::fromUtf8(error.what())));
    }
}

// One line from the supervisor (without its newline); nullopt at the end of the pipe. getline, not
// a character at a time: a stage's tensor comes as one line of base64 (megabytes for a large model).
std::optional<QByteArray> readLineBytes()
{
    char* buffer = nullptr;
    std::size_t capacity = 0;
    const ssize_t got = ::getline(&buffer, &capacity, stdin);
    std::optional<QByteArray> line;
    if (got > 0)
        line = QByteArray(buffer, qsizetype(buffer[got - 1] == '\n' ? got - 1 : got));
    std::free(buffer);
    return line;
}

void answerBytes(const QByteArray& line)
{
    std::fwrite(line.constData(), 1, std::size_t(line.size()), answers);
    std::fputc('\n', answers);
    std::fflush(answers);
}

void answer(const QString& line)
{
    answerBytes(line.toUtf8());
}

// A live stage task's link (compute::StageLink) through the supervisor, which holds the real one
// (protocol::links): each tensor is a request line on the answers' pipe and a reply on stdin.
class PipeStageLink final : public compute::StageLink {
public:
    core::Status send(std::int64_t to, Kind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes) override
    {
        // Not answered (a round trip saved each tensor): a send that fails fails the next receive,
        // or the step.
        answerBytes(protocol::links::send({ to, kind, step, micro }, bytes));
        return {};
    }
    core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) override
    {
        answerBytes(protocol::links::receive({ from, kind, step, micro }));
        auto reply = replied();
        if (!reply)
            return reply.error();
        if (auto bytes = protocol::links::tensorOf(*reply))
            return *bytes;
        return unexpected(*reply);
    }

private:
    // The supervisor's reply; its "error MESSAGE" (the link failed) as the error.
    static core::Result<QByteArray> replied()
    {
        auto line = readLineBytes();
        if (!line)
            return core::Error { QStringLiteral("stage"), QStringLiteral("the supervisor closed the pipe") };
        if (line->startsWith("error ")) {
            if (const auto why = protocol::answers::errorOf(QString::fromUtf8(*line)))
                return core::Error { QStringLiteral("stage"), *why };
        }
        return std::move(*line);
    }
    static core::Error unexpected(const QByteArray& reply)
    {
        return core::Error { QStringLiteral("stage"),
            QStringLiteral("the supervisor answered %1").arg(QString::fromUtf8(reply.left(80))) };
    }
};

// Shards driven a few steps at a time by the supervisor's compute thread, which keeps pausing,
// cancelling and the duty cycle on its side (RemoteShardRun in worker.h), one after another: each
// start or resume reads the task the supervisor left in the scratch folder (shards of one job: the
// files it may read were fixed when it confined itself). Commands, one a line:
//   start | resume          task.json, and ShardRun::start from weights.in or resume from suspended.in
//   step N                  up to N steps: "stepped COMPLETED LOSS BUSY_NS"
//   suspend                 the training state into suspended.out: "suspended"
//   finish                  result.json, weights.out, kept.out: "finished"
//   quit (or the pipe's end)
// Every failure answers "error MESSAGE" (on one line), and the run is over.
// "host" and "ask" of a served model's replica: its model loaded once, then each question
// answered with its tokens as they may be streamed.
void serveReplica(const QString& line, const QDir& scratch, const compute::ComputeEnvironment& environment,
    std::unique_ptr<compute::HostedModel>& hosted, const std::function<void(const QString&)>& error)
{
    if (line == protocol::requests::Host) {
        hosted.reset();
        auto task = loadTask(scratch);
        auto weights = core::readFile(scratch.filePath(protocol::files::WeightsIn));
        auto loaded = !task ? core::Result<std::unique_ptr<compute::HostedModel>>(task.error())
            : !weights      ? core::Result<std::unique_ptr<compute::HostedModel>>(weights.error())
                            : compute::inThreadCompute()->host(*task, *weights, environment);
        if (!loaded)
            return error(loaded.error().toString());
        hosted = std::move(*loaded);
        return answer(protocol::answers::Hosted);
    }
    auto question = core::inference::Question::read(*protocol::requests::questionOf(line), core::InferenceSpec::MaxTokens);
    if (!hosted || !question)
        return error(hosted ? question.error().toString() : QStringLiteral("no model is hosted"));
    auto answered = hosted->answer(
        *question, [](std::int64_t from, const QList<std::int64_t>& tokens) { answer(protocol::answers::tokens(from, tokens)); });
    if (!answered)
        return error(answered.error().toString());
    answer(protocol::answers::answered(*answered));
}

// The shard of the task the supervisor left in the scratch folder with its inputs, started (or
// resumed from suspended.in); a live stage trades its tensors over `link`.
core::Result<std::unique_ptr<compute::ShardRun>> startShard(
    bool resume, const QDir& scratch, const compute::ComputeEnvironment& environment, compute::StageLink& link)
{
    auto read = [&](const QString& name) { return core::readFile(scratch.filePath(name)).value_or(QByteArray()); };
    auto task = loadTask(scratch);
    if (!task)
        return task.error();
    // A stage reads its share of the round's weights from the file, never the whole.
    auto started = resume ? compute::ShardRun::resume(*task, read(protocol::files::SuspendedIn), environment,
                       compute::ShardRun::StateOrigin::Own, read(protocol::files::WeightsIn))
        : task->isStage() ? compute::ShardRun::startFromFile(*task, scratch.filePath(protocol::files::WeightsIn), environment)
                          : compute::ShardRun::start(*task, read(protocol::files::WeightsIn), environment);
    if (started && task->isLiveStage())
        (*started)->setStageLink(&link);
    return started;
}

int serve(const Arguments& arguments)
{
    const QDir scratch(arguments.scratch);
    const auto environment = environmentOf(arguments);
    auto error = [&](const QString& why) { answer(protocol::answers::error(reasonOf(why, arguments.memoryMiB))); };

    std::unique_ptr<compute::ShardRun> run;
    PipeStageLink link; // a live stage task's
    std::unique_ptr<compute::HostedModel> hosted; // a served model's replica
    try {
        while (const auto command = readLineBytes()) {
            const QString line = QString::fromUtf8(*command);
            if (line == protocol::requests::Quit)
                return 0;
            if (line == protocol::requests::Host || protocol::requests::questionOf(line)) {
                serveReplica(line, scratch, environment, hosted, error);
                continue;
            }
            if (line == protocol::requests::Start || line == protocol::requests::Resume) {
                run.reset();
                auto started = startShard(line == protocol::requests::Resume, scratch, environment, link);
                if (!started) {
                    error(started.error().toString());
                    continue;
                }
                run = std::move(*started);
                // The round's weights stay in weights.in and the kept state goes to kept.out as soon
                // as it is made: neither is held in memory while the shard trains.
                run->spillTo(scratch.filePath(protocol::files::WeightsIn), scratch.filePath(protocol::files::KeptOut));
                answer(protocol::answers::ok(run->completedSteps()));
            } else if (!run) {
                error(QStringLiteral("no shard was started"));
            } else if (const auto asked = protocol::requests::stepsOf(line)) {
                const std::int64_t steps = *asked;
                QElapsedTimer timer;
                timer.start();
                core::Status status;
                for (std::int64_t i = 0; i < steps && status && !run->finished(); ++i)
                    status = run->step();
                if (!status && status.error().field == u"link") // its partners' fault, or the link's: given back
                    answer(protocol::links::failed(status.error().message));
                else if (!status)
                    error(status.error().toString());
                else
                    answer(protocol::answers::stepped({ run->completedSteps(), run->lastLoss(), timer.nsecsElapsed() }));
            } else if (line == protocol::requests::Suspend) {
                if (writeFile(scratch.filePath(protocol::files::SuspendedOut), run->suspend()))
                    answer(protocol::answers::Suspended);
                else
                    error(QStringLiteral("cannot write the training state into the scratch folder"));
            } else if (line == protocol::requests::Finish) {
                const auto output = run->finish();
                run.reset();
                if (!writeOutput(scratch, output))
                    error(QStringLiteral("cannot write the result into the scratch folder"));
                else
                    answer(protocol::answers::Finished);
            } else {
                error(QStringLiteral("unknown command"));
            }
        }
    } catch (const std::bad_alloc&) {
        error(QStringLiteral("std::bad_alloc"));
    } catch (const std::exception& failure) {
        error(QStringLiteral("internal error: %1").arg(QString::fromUtf8(failure.what())));
    }
    return 0;
}

// Leaves what `make` gives in the scratch folder's answer.out, or why not in error.txt (an
// exception too), and prints "done": the end of every one-shot command but train.
int writeAnswer(const Arguments& arguments, const std::function<core::Result<QByteArray>()>& make)
{
    core::Result<QByteArray> made = core::Error { {}, QStringLiteral("no answer") };
    try {
        made = make();
    } catch (const std::bad_alloc&) {
        made = core::Error { {}, reasonOf(QStringLiteral("std::bad_alloc"), arguments.memoryMiB) };
    } catch (const std::exception& failure) {
        made = core::Error { {}, QStringLiteral("internal error: %1").arg(QString::fromUtf8(failure.what())) };
    }
    const QDir scratch(arguments.scratch);
    const bool written = made ? writeFile(scratch.filePath(protocol::files::AnswerOut), *made)
                              : writeFile(scratch.filePath(protocol::files::Error), made.error().toString().toUtf8());
    if (!written)
        return usage("cannot write the answer into the scratch folder");
    std::fprintf(answers, "%s\n", protocol::lines::Done.constData());
    return 0;
}

// A dispute's question about a shard the node trained: the state at a checkpoint, or a portable
// job's trace or operands, from weights.in and kept.in (absent: none).
int answerQuestion(const Arguments& arguments)
{
    const QDir scratch(arguments.scratch);
    auto task = loadTask(scratch);
    if (!task)
        return usage(qPrintable(task.error().toString()));
    auto read = [&](const QString& name) { return core::readFile(scratch.filePath(name)).value_or(QByteArray()); };
    return writeAnswer(arguments, [&]() -> core::Result<QByteArray> {
        const auto environment = environmentOf(arguments);
        const auto start = read(protocol::files::WeightsIn);
        const auto kept = read(protocol::files::KeptIn);
        const auto& question = arguments.question;
        using Want = core::DisputeQuestion::Want;
        return question.want == Want::Trace ? compute::traceInterval(*task, start, kept, question.checkpoint, environment)
            : question.want == Want::Operands
            ? compute::operandsOf(*task, start, kept, question.step, question.instruction, environment)
            : compute::recreateState(*task, start, kept, question.checkpoint, environment);
    });
}

// The node's own work with LibTorch for a supervisor without it, and a broker's runs of a job's
// code (the commands at the top).
core::Result<QByteArray> toolOutput(const Arguments& arguments)
{
    const QDir scratch(arguments.scratch);
    auto read = [&](const QString& name) { return core::readFile(scratch.filePath(name)).value_or(QByteArray()); };
    const QString& command = arguments.command;
    if (command == protocol::commands::Profile) {
        const auto torch = compute::torchCapabilities();
        return QJsonDocument(
            QJsonObject { { QStringLiteral("runtimeProfile"), compute::currentRuntimeProfile(arguments.threads).toString() },
                { QStringLiteral("cuda"), torch.cuda }, { QStringLiteral("cudaDevices"), torch.cudaDevices } })
            .toJson(QJsonDocument::Compact);
    }
    if (command == protocol::commands::Benchmark) {
        auto options = arguments.benchmark;
        options.threads = arguments.threads;
        options.progress = [](const QString& name, int repetition) {
            std::fprintf(answers, "%s\n", protocol::lines::benchmark({ name, repetition }).constData());
            std::fflush(answers);
        };
        return QJsonDocument(compute::runBenchmark(options).toJson()).toJson(QJsonDocument::Compact);
    }
    if (command == protocol::commands::Rebuild)
        return compute::roundWeightsFromChange(read(protocol::files::PreviousIn), read(protocol::files::ChangeIn));
    if (command == protocol::commands::Replay) {
        auto task = loadTask(scratch);
        if (!task)
            return task.error();
        auto expected = core::Digest::fromHex(arguments.expected);
        if (!expected)
            return expected.error();
        auto replayed = compute::replayShard(*task, arguments.from, read(protocol::files::StateIn), *expected, arguments.to,
            read(protocol::files::RoundIn), environmentOf(arguments));
        if (!replayed)
            return replayed.error();
        QJsonArray checkpoints;
        for (const auto& hash : replayed->checkpoints)
            checkpoints.append(hash.toHex());
        const QJsonObject meta { { QStringLiteral("checkpoints"), checkpoints },
            { QStringLiteral("weightsHash"), replayed->weightsHash.toHex() },
            { QStringLiteral("runtimeProfile"), replayed->runtimeProfile } };
        if (!writeFile(scratch.filePath(protocol::files::AnswerMeta), QJsonDocument(meta).toJson(QJsonDocument::Compact)))
            return core::Error { {}, QStringLiteral("cannot write the replay's hashes into the scratch folder") };
        return std::move(replayed->weights);
    }
    // The rest run the model of the job in job.json.
    auto spec = core::JobSpec::fromJson(QJsonDocument::fromJson(read(protocol::files::Job)).object());
    if (!spec)
        return spec.error();
    const auto environment = environmentOf(arguments);
    if (command == protocol::commands::Initial) {
        auto weights = compute::initialWeights(*spec, environment);
        if (!weights)
            return weights.error();
        return weights->bytes;
    }
    if (command == protocol::commands::Evaluate) {
        auto evaluation = compute::evaluate(*spec, read(protocol::files::WeightsIn), environment, arguments.threads);
        if (!evaluation)
            return evaluation.error();
        return QJsonDocument(
            QJsonObject { { QStringLiteral("loss"), evaluation->loss }, { QStringLiteral("accuracy"), evaluation->accuracy },
                { QStringLiteral("samples"), double(evaluation->samples) } })
            .toJson(QJsonDocument::Compact);
    }
    auto options = arguments.sample; // sample
    options.prompt = read(protocol::files::PromptIn);
    return compute::sampleText(spec->model, read(protocol::files::WeightsIn), options, environment);
}

// One option of the command line into `arguments`; false: not an option tessera-compute knows.
bool takeOption(const QByteArray& option, const QString& value, Arguments& arguments)
{
    if (option == "--scratch")
        arguments.scratch = value;
    else if (option == "--memory-mib")
        arguments.memoryMiB = value.toLongLong();
    else if (option == "--read")
        arguments.readable << value;
    else if (option == "--blob" && value.contains(u'='))
        arguments.blobs.insert(value.section(u'=', 0, 0), value.section(u'=', 1));
    else if (option == "--fashion-mnist")
        arguments.fashionMnist = value;
    else if (option == "--fortunes")
        arguments.fortunes = value;
    else if (option == "--device")
        arguments.device = value;
    else if (option == "--nice")
        arguments.nice = std::clamp(value.toInt(), 0, 19);
    else if (option == "--portable-threads")
        arguments.portableThreads = value.toInt();
    else if (option == "--try-read")
        arguments.tryRead = value;
    else if (option == "--want" && core::fromName<core::DisputeQuestion::Want>(value))
        arguments.question.want = *core::fromName<core::DisputeQuestion::Want>(value);
    else if (option == "--checkpoint")
        arguments.question.checkpoint = value.toLongLong();
    else if (option == "--step")
        arguments.question.step = value.toLongLong();
    else if (option == "--instruction")
        arguments.question.instruction = value.toLongLong();
    else if (option == "--confine")
        arguments.confine = value != u"0";
    else if (option == "--threads")
        arguments.threads = std::clamp(value.toInt(), 1, 1024);
    else if (option == "--target-cv")
        arguments.benchmark.targetCv = value.toDouble();
    else if (option == "--min-repetitions")
        arguments.benchmark.minRepetitions = std::max(1, value.toInt());
    else if (option == "--repetitions")
        arguments.benchmark.maxRepetitions = std::max(1, value.toInt());
    else if (option == "--time-cap-ms")
        arguments.benchmark.timeCapMs = value.toLongLong();
    else if (option == "--only")
        arguments.benchmark.only = value.split(u',', Qt::SkipEmptyParts);
    else if (option == "--tokens")
        arguments.sample.tokens = value.toLongLong();
    else if (option == "--temperature")
        arguments.sample.temperature = value.toDouble();
    else if (option == "--seed")
        arguments.sample.seed = value.toULongLong();
    else if (option == "--from")
        arguments.from = value.toLongLong();
    else if (option == "--to")
        arguments.to = value.toLongLong();
    else if (option == "--expected")
        arguments.expected = value;
    else
        return false;
    return true;
}

// Before any job code: the worker's priority, its place in line for the OOM killer, the memory it
// keeps for saying it ran out, and its confinement, which it announces on its answer pipe. 0, or
// the exit status when it cannot confine itself.
int prepare(const Arguments& arguments)
{
    // Its CPU priority (by default the lowest, as BOINC gives its science applications: the
    // computer's owner and the node's own threads come first), set before LibTorch's and OpenMP's
    // threads start so that they inherit it. It changes the timing, never the bits.
    ::setpriority(PRIO_PROCESS, 0, arguments.nice);

    // First in line for the kernel's OOM killer, should the machine run out of memory (a limit the
    // worker cannot lower again): the job's process, not the node's, the broker's or the user's.
    if (QFile adjust(QStringLiteral("/proc/self/oom_score_adj")); adjust.open(QIODevice::WriteOnly))
        adjust.write("1000");

    // Mapped before the limit is set, so that it does not come out of the job's allowance.
    reserve = ::mmap(nullptr, ReserveBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserve == MAP_FAILED)
        reserve = nullptr;
    std::set_new_handler(releaseReserve);

    compute::sandbox::Confinement confinement;
    confinement.readable = arguments.readable;
    for (const auto& path : std::as_const(arguments.blobs))
        confinement.readable << path;
    for (const auto& folder : { arguments.fashionMnist, arguments.fortunes })
        if (!folder.isEmpty())
            confinement.readable << folder;
    confinement.writable = { arguments.scratch };
    confinement.memoryBytes = arguments.memoryMiB * 1024 * 1024;
    if (!arguments.confine) {
        // Compute/Sandbox is off: the node's owner chose to run job code unconfined (a GPU).
        std::fprintf(answers, "confined none (Compute/Sandbox is off)\n");
    } else {
        const auto confined = compute::sandbox::confine(confinement);
        if (!confined) {
            std::fprintf(stderr, "tessera-compute: %s\n", qPrintable(confined.error().toString()));
            return 3;
        }
        for (const auto& warning : confined->warnings)
            std::fprintf(stderr, "tessera-compute: warning: %s\n", qPrintable(warning));
        std::fprintf(answers, "confined landlock=%d memory=%lld\n", confined->landlockAbi,
            static_cast<long long>(confined->addressSpaceLimit));
    }
    std::fflush(answers);
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    // A worker ends with what supervises it: a node or broker that dies (kill -9, a crash) must not
    // leave a job's code running for ever (its time limit is the supervisor's to enforce). The
    // signal comes when the thread that started the worker ends, which outlives the worker in
    // every supervisor here (compute/supervisor/sandbox/worker.h). A parent gone already: reparented.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() == 1)
        return 3;
    if (!separateAnswersFromPrints()) {
        std::fprintf(stderr, "tessera-compute: cannot separate its answers from what a job prints: %s\n", std::strerror(errno));
        return 3;
    }
    Arguments arguments;
    if (argc < 2)
        return usage("no command");
    arguments.command = QString::fromLocal8Bit(argv[1]);
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc)
            return usage("an option without its value");
        if (!takeOption(argv[i], QString::fromLocal8Bit(argv[i + 1]), arguments))
            return usage("an unknown option");
    }
    if (arguments.scratch.isEmpty() || !QDir(arguments.scratch).exists())
        return usage("--scratch must name an existing folder");
    if (const int status = prepare(arguments); status != 0)
        return status;

    if (arguments.command == protocol::commands::Probe)
        return probe(arguments);
    if (arguments.command == protocol::commands::Train)
        return train(arguments);
    if (arguments.command == protocol::commands::Serve)
        return serve(arguments);
    if (arguments.command == protocol::commands::Answer)
        return answerQuestion(arguments);
    if (QStringList { protocol::commands::Profile, protocol::commands::Benchmark, protocol::commands::Rebuild,
            protocol::commands::Sample, protocol::commands::Initial, protocol::commands::Evaluate, protocol::commands::Replay }
            .contains(arguments.command))
        return writeAnswer(arguments, [&] { return toolOutput(arguments); });
    return usage("an unknown command");
}
