#pragma once

#include <core/stagetensors.h>

#include <QByteArray>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <cstdint>
#include <optional>

// The compute worker's protocol, named once: `tessera-compute COMMAND --scratch DIR ...`
// (app/compute/main.cpp) as the supervisor drives it (compute/supervisor/sandbox/worker.cpp).
// The supervisor leaves a command's inputs in the scratch folder and reads its outputs from there;
// the worker prints lines on its answer pipe. tests/compute/tst_workerprotocol.cpp holds the
// spelling, as tst_messages holds the network protocol's. LibTorch-free.
namespace tessera::compute::sandbox::protocol {

// The worker's first argument.
namespace commands {
inline const QString Train = QStringLiteral("train"); // one shard, start to end
inline const QString Serve = QStringLiteral("serve"); // shards driven a few steps at a time (requests below)
inline const QString Probe = QStringLiteral("probe"); // what the confinement allows (tests)
inline const QString Profile = QStringLiteral("profile");
inline const QString Benchmark = QStringLiteral("benchmark");
inline const QString Rebuild = QStringLiteral("rebuild");
inline const QString Replay = QStringLiteral("replay");
inline const QString Initial = QStringLiteral("initial");
inline const QString Evaluate = QStringLiteral("evaluate");
inline const QString Sample = QStringLiteral("sample");
inline const QString Answer = QStringLiteral("answer");
} // namespace commands

// Files in the scratch folder: ".in" the supervisor writes, ".out" the worker does.
namespace files {
inline const QString Task = QStringLiteral("task.json"); // the shard's task
inline const QString Job = QStringLiteral("job.json"); // a job spec, for the commands of a job's code
inline const QString WeightsIn = QStringLiteral("weights.in"); // the round's weights
inline const QString WeightsOut = QStringLiteral("weights.out"); // the shard's revealed result
inline const QString KeptIn = QStringLiteral("kept.in"); // a kept training state, for a dispute's answer
inline const QString KeptOut = QStringLiteral("kept.out"); // the training state kept for disputes
inline const QString SuspendedIn = QStringLiteral("suspended.in"); // a suspended shard's state, to resume
inline const QString SuspendedOut = QStringLiteral("suspended.out");
inline const QString StateIn = QStringLiteral("state.in"); // a replay's starting state
inline const QString RoundIn = QStringLiteral("round.in"); // a replay's round weights
inline const QString PreviousIn = QStringLiteral("previous.in"); // rebuild: the previous round's weights
inline const QString ChangeIn = QStringLiteral("change.in"); // rebuild: the round's int8 change
inline const QString PromptIn = QStringLiteral("prompt.in"); // sample: the prompt's bytes
inline const QString Result = QStringLiteral("result.json"); // train and finish: the ShardResult
inline const QString AnswerOut = QStringLiteral("answer.out"); // a one-shot command's answer
inline const QString AnswerMeta = QStringLiteral("answer.json"); // beside it, where the command says more
inline const QString Error = QStringLiteral("error.txt"); // why a one-shot command has no answer
inline const QString Probe = QStringLiteral("probe.txt");
} // namespace files

// A served worker's requests, one a line, and its answers: "ok COMPLETED" to start and resume,
// "stepped COMPLETED LOSS BUSY_NS" to step, "suspended", "finished", or "error MESSAGE".
namespace requests {
inline const QString Start = QStringLiteral("start");
inline const QString Resume = QStringLiteral("resume");
inline const QString Suspend = QStringLiteral("suspend");
inline const QString Finish = QStringLiteral("finish");
inline const QString Quit = QStringLiteral("quit");
// A served model's replica (docs/PROTOCOL.md, "Serving"): "host" loads the task's model from its
// weights ("hosted"), then "ask QUESTION" (its compact JSON) answers with "tokens FROM T1,T2,..."
// lines as the tokens may be streamed and "answered LINE" (or "error MESSAGE").
inline const QString Host = QStringLiteral("host");
QString ask(const QJsonObject& question); // "ask {...}"
std::optional<QJsonObject> questionOf(const QString& request);
QString step(std::int64_t steps); // "step N"
std::optional<std::int64_t> stepsOf(const QString& request); // N of "step N"
} // namespace requests

namespace answers {
inline const QString Suspended = QStringLiteral("suspended");
inline const QString Finished = QStringLiteral("finished");
inline const QString Hosted = QStringLiteral("hosted");
QString tokens(std::int64_t from, const QList<std::int64_t>& tokens); // "tokens FROM T1,T2,..."
std::optional<std::pair<std::int64_t, QList<std::int64_t>>> tokensOf(const QString& answer);
QString answered(const QByteArray& line); // "answered LINE"
std::optional<QByteArray> answeredOf(const QString& answer);
QString ok(std::int64_t completed);
QString error(const QString& message); // on one line
std::optional<QString> errorOf(const QString& answer); // MESSAGE of "error MESSAGE"
struct Stepped {
    std::int64_t completed = 0;
    double loss = 0.0;
    std::int64_t busyNs = 0;
};
QString stepped(const Stepped& stepped);
std::optional<Stepped> steppedOf(const QString& answer);
} // namespace answers

// A stage task's tensors (compute::StageLink, docs/PROTOCOL.md "Stage tasks") while it steps in a
// served worker: the worker asks, a line each, and its supervisor, which holds the link, answers.
//   send TO KIND STEP MICRO BASE64   a tensor for stage TO; not answered
//   receive FROM KIND STEP MICRO     the tensor stage FROM sent: "tensor BASE64"
// A receive is answered "error MESSAGE" when the link (or an earlier send) failed; the step then
// ends "link-error MESSAGE" (the stage gives its task back, as one in the supervisor's own thread
// does). KIND is core::nameOf(TensorKind); STEP is 0-based; BASE64 is the tensor's bytes in
// standard base64.
namespace links {
struct Address {
    std::int64_t peer = 0; // TO or FROM
    core::TensorKind kind = core::TensorKind::Activation;
    std::int64_t step = 0;
    std::int64_t micro = 0;
    bool operator==(const Address&) const = default;
};
// The lines as bytes (without the newline): a tensor's line is as long as 4/3 of the tensor, and
// is never widened to UTF-16.
QByteArray send(const Address& to, const QByteArray& bytes);
std::optional<std::pair<Address, QByteArray>> sendOf(const QByteArray& line);
QByteArray receive(const Address& from);
std::optional<Address> receiveOf(const QByteArray& line);
bool isLinkRequest(const QByteArray& line); // a send or a receive (well formed or not)
QByteArray tensor(const QByteArray& bytes);
std::optional<QByteArray> tensorOf(const QByteArray& line);
QString failed(const QString& message); // "link-error MESSAGE", the step's answer
std::optional<QString> failedOf(const QString& line);
} // namespace links

// What a one-shot command prints: progress of `train`, progress of `benchmark`, and "done" last.
namespace lines {
inline const QByteArray Done = QByteArrayLiteral("done");
struct Progress {
    std::int64_t step = 0;
    std::int64_t steps = 0;
    double loss = 0.0;
    std::int64_t busyMs = 0;
};
QByteArray progress(const Progress& progress); // "progress STEP STEPS LOSS BUSY_MS"
std::optional<Progress> progressOf(const QByteArray& line);
struct BenchmarkProgress {
    QString name;
    int repetition = 0;
};
QByteArray benchmark(const BenchmarkProgress& progress); // "benchmark NAME REPETITION"
std::optional<BenchmarkProgress> benchmarkOf(const QByteArray& line);
} // namespace lines

} // namespace tessera::compute::sandbox::protocol
