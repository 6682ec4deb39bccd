#include "worker.h"

#include "workerprocess.h"
#include "workerprotocol.h"

#include <compute/pickle/tensorfile.h>
#include <core/readfile.h>

#include <QDir>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStorageInfo>

// The one-shot tools of worker.h: a shard trained to its end, a dispute's answer, and the node's
// and the broker's LibTorch work, each in a tessera-compute process of its own.

namespace tessera::compute::sandbox {

using namespace detail;

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
    const QStringList extra { QStringLiteral("--want"), core::nameOf(question.want), QStringLiteral("--checkpoint"),
        QString::number(question.checkpoint), QStringLiteral("--step"), QString::number(question.step),
        QStringLiteral("--instruction"), QString::number(question.instruction) };
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
    // As for a shard: the weights' hash is the supervisor's own, not the worker's word. An inference
    // task's are lines, hashed as bytes, and a replay of some of its batches names none.
    auto hashed = task.inference
        ? core::Result<core::Digest>(weightsHash->isNull() ? core::Digest {} : core::Digest::ofBytes(*weights))
        : pickle::canonicalHash(*weights);
    if (!hashed || *hashed != *weightsHash)
        return core::Error { QStringLiteral("worker"),
            QStringLiteral("the compute worker's replayed weights do not have the hash it names") };
    replay.weightsHash = *hashed;
    replay.weights = std::move(*weights);
    replay.runtimeProfile = json.value(QStringLiteral("runtimeProfile")).toString();
    return replay;
}

} // namespace tessera::compute::sandbox
