#include "pipelines.h"

#include <algorithm>

#include <QDir>
#include <QFile>
#include <QJsonObject>
#include <QTemporaryFile>

namespace tessera::core::broker {

void Pipelines::add(const ShardTask& task, std::vector<Stage> stages)
{
    auto pipeline = std::make_shared<Pipeline>();
    pipeline->task = task;
    pipeline->logs.resize(stages.size());
    pipeline->answered.assign(stages.size(), false);
    pipeline->inputs.resize(stages.size());
    pipeline->samples.resize(stages.size());
    const QString directory = m_recordingDirectory.isEmpty() ? QDir::tempPath() : m_recordingDirectory;
    for (auto& recording : pipeline->inputs) {
        QTemporaryFile file(QDir(directory).filePath(QStringLiteral("stage-inputs-XXXXXX.part")));
        recording.hash = std::make_unique<QCryptographicHash>(QCryptographicHash::Sha256);
        if (file.open()) {
            file.setAutoRemove(false);
            recording.file = file.fileName();
        }
        recording.write(StageInputs::Magic);
    }
    pipeline->stages = std::move(stages);
    m_pipelines.push_back(std::move(pipeline));
}

std::optional<Pipelines::Place> Pipelines::placeOf(const QString& assignment) const
{
    for (const auto& pipeline : m_pipelines) {
        for (std::size_t s = 0; s < pipeline->stages.size(); ++s) {
            if (pipeline->stages[s].assignment == assignment)
                return Place { pipeline, std::int64_t(s) };
        }
    }
    return std::nullopt;
}

Result<Pipelines::Forward> Pipelines::relay(const QString& node, const QString& assignment, const Part& part, qsizetype payload)
{
    auto refuse = [](const QString& field, const QString& why) { return Error { field, why }; };
    const auto place = placeOf(assignment);
    if (!place || place->pipeline->stages[std::size_t(place->stage)].node != node)
        return refuse(QStringLiteral("assignment"), QStringLiteral("no stage task of this node's has that assignment"));
    const auto& pipeline = *place->pipeline;
    const auto& task = pipeline.task;
    const auto S = std::int64_t(pipeline.stages.size()), s = place->stage;
    const bool neighbour = (part.kind == TensorKind::Activation && part.to == s + 1)
        || (part.kind == TensorKind::Gradient && part.to == s - 1)
        || (part.kind == TensorKind::Squares && part.to != s && task.optimizer.clipNorm > 0.0 && part.micro == 0);
    if (part.to < 0 || part.to >= S || !neighbour)
        return refuse(
            QStringLiteral("to"), QStringLiteral("stage %1 sends no %2 to stage %3").arg(s).arg(nameOf(part.kind)).arg(part.to));
    if (part.step >= task.localSteps || part.micro >= std::max<std::int64_t>(task.microBatches, 1))
        return refuse(
            QStringLiteral("step"), QStringLiteral("the shard has no step %1, micro-batch %2").arg(part.step).arg(part.micro));
    if (part.size > maxTensorBytes(task, part.kind))
        return refuse(QStringLiteral("size"), QStringLiteral("more bytes than a %1 of this model has").arg(nameOf(part.kind)));
    auto& shared = *place->pipeline;
    if (part.kind != TensorKind::Squares) { // one shape crosses every boundary: [b, length, width]
        if (shared.boundary == 0)
            shared.boundary = part.size;
        if (part.size != shared.boundary)
            return refuse(QStringLiteral("size"),
                QStringLiteral("every activation and gradient of the pipeline has %1 bytes").arg(shared.boundary));
    }
    const Key key { s, part.to, int(part.kind), part.step, part.micro };
    if (shared.relayed.count(key))
        return refuse(QStringLiteral("offset"), QStringLiteral("the tensor's bytes come once, in order"));
    // A stage sends a tensor's parts one after the other: the broker keeps at most two of a
    // stage's tensors part-way (their bytes wait for the receiver's record).
    if (!shared.arriving.count(key) && std::count_if(shared.arriving.begin(), shared.arriving.end(), [&](const auto& entry) {
            return std::get<0>(entry.first) == s;
        }) >= MaxArrivingPerStage)
        return refuse(QStringLiteral("offset"), QStringLiteral("a stage sends its tensors one at a time"));
    auto& arriving = shared.arriving[key];
    if (arriving.size == 0) {
        arriving.size = part.size;
        arriving.hash = std::make_shared<QCryptographicHash>(QCryptographicHash::Sha256);
    }
    if (part.size != arriving.size || part.offset != arriving.received || arriving.received >= arriving.size
        || part.offset + payload > part.size || payload <= 0)
        return refuse(QStringLiteral("offset"), QStringLiteral("the tensor's bytes come once, in order"));
    const auto& to = pipeline.stages[std::size_t(part.to)];
    return Forward { to.node, to.assignment, s };
}

void Pipelines::hash(const QString& assignment, const Part& part, const QByteArray& payload)
{
    const auto place = placeOf(assignment);
    if (!place)
        return;
    auto& pipeline = *place->pipeline;
    const auto s = place->stage;
    auto found = pipeline.arriving.find({ s, part.to, int(part.kind), part.step, part.micro });
    if (found == pipeline.arriving.end())
        return;
    auto& arriving = found->second;
    arriving.hash->addData(payload);
    arriving.bytes += payload;
    arriving.received += payload.size();
    if (arriving.received < arriving.size)
        return;
    const auto digest = *Digest::fromRaw(arriving.hash->result());
    pipeline.inputs[std::size_t(part.to)].write(StageInputs::record(s, part.kind, part.step, part.micro, arriving.bytes));
    pipeline.arriving.erase(found);
    pipeline.relayed.insert({ s, part.to, int(part.kind), part.step, part.micro });
    pipeline.logs[std::size_t(s)].append({ true, part.to, part.kind, part.step, part.micro, digest });
    pipeline.logs[std::size_t(part.to)].append({ false, s, part.kind, part.step, part.micro, digest });
}

std::optional<Digest> Pipelines::rootOf(const QString& assignment) const
{
    const auto place = placeOf(assignment);
    if (!place)
        return std::nullopt;
    return stageTensorsRoot(place->pipeline->logs[std::size_t(place->stage)]);
}

Pipelines::Pipeline::~Pipeline()
{
    for (const auto& recording : inputs) {
        if (!recording.file.isEmpty())
            QFile::remove(recording.file);
    }
}

void Pipelines::Recording::write(const QByteArray& bytes)
{
    if (file.isEmpty())
        return;
    QFile out(file);
    if (!out.open(QIODevice::WriteOnly | QIODevice::Append) || out.write(bytes) != bytes.size() || !out.flush()) {
        out.close();
        QFile::remove(file); // the disk is full: this stage cannot be re-executed
        file.clear();
        return;
    }
    hash->addData(bytes);
}

std::optional<Pipelines::Recorded> Pipelines::takeInputs(const QString& assignment)
{
    const auto place = placeOf(assignment);
    if (!place)
        return std::nullopt;
    auto& recording = place->pipeline->inputs[std::size_t(place->stage)];
    if (recording.file.isEmpty())
        return std::nullopt;
    Recorded recorded { std::exchange(recording.file, {}), *Digest::fromRaw(recording.hash->result()) };
    return recorded;
}

bool Pipelines::receivedAll(const QString& assignment) const
{
    const auto place = placeOf(assignment);
    if (!place)
        return false;
    const auto& pipeline = *place->pipeline;
    const auto& task = pipeline.task;
    const auto S = std::int64_t(pipeline.stages.size()), s = place->stage;
    const auto passes = task.localSteps * std::max<std::int64_t>(task.microBatches, 1);
    const auto owed
        = (s > 0 ? passes : 0) + (s < S - 1 ? passes : 0) + (task.optimizer.clipNorm > 0.0 ? (S - 1) * task.localSteps : 0);
    const auto& log = pipeline.logs[std::size_t(s)];
    return std::count_if(log.begin(), log.end(), [](const StageTensor& tensor) { return !tensor.sent; }) == owed;
}

void Pipelines::holdSample(const QString& assignment, Check check)
{
    if (const auto place = placeOf(assignment))
        place->pipeline->samples[std::size_t(place->stage)] = std::move(check);
}

std::optional<Check> Pipelines::sampleOf(const QString& assignment) const
{
    const auto place = placeOf(assignment);
    return place ? place->pipeline->samples[std::size_t(place->stage)] : std::nullopt;
}

std::vector<Pipelines::Stage> Pipelines::stagesOf(const QString& assignment) const
{
    const auto place = placeOf(assignment);
    return place ? place->pipeline->stages : std::vector<Stage> {};
}

void Pipelines::remove(const QString& assignment)
{
    const auto place = placeOf(assignment);
    if (place)
        std::erase(m_pipelines, place->pipeline);
}

bool Pipelines::answered(const QString& assignment)
{
    const auto place = placeOf(assignment);
    if (!place)
        return false;
    auto& answered = place->pipeline->answered;
    answered[std::size_t(place->stage)] = true;
    return std::all_of(answered.begin(), answered.end(), [](bool done) { return done; });
}

QList<QString> Pipelines::lateAssignments(std::int64_t now) const
{
    QList<QString> late;
    for (const auto& pipeline : m_pipelines) {
        for (std::size_t s = 0; s < pipeline->stages.size(); ++s) {
            if (!pipeline->answered[s] && pipeline->stages[s].deadline < now) {
                late.append(pipeline->stages[s].assignment);
                break;
            }
        }
    }
    return late;
}

QList<QString> Pipelines::assignmentsOf(const QString& node) const
{
    QList<QString> found;
    for (const auto& pipeline : m_pipelines) {
        for (std::size_t s = 0; s < pipeline->stages.size(); ++s) {
            if (pipeline->stages[s].node == node && !pipeline->answered[s])
                found.append(pipeline->stages[s].assignment);
        }
    }
    return found;
}

QJsonArray Pipelines::describe(const QString& jobId) const
{
    std::map<std::int64_t, QJsonObject> byShard;
    for (const auto& pipeline : m_pipelines) {
        if (pipeline->task.jobId != jobId)
            continue;
        QJsonArray stages;
        for (std::size_t s = 0; s < pipeline->stages.size(); ++s)
            stages.append(
                QJsonObject { { QStringLiteral("stage"), qint64(s) }, { QStringLiteral("node"), pipeline->stages[s].node },
                    { QStringLiteral("answered"), bool(pipeline->answered[s]) } });
        byShard[pipeline->task.shard]
            = QJsonObject { { QStringLiteral("shard"), qint64(pipeline->task.shard) }, { QStringLiteral("stages"), stages } };
    }
    QJsonArray list;
    for (const auto& [shard, entry] : byShard)
        list.append(entry);
    return list;
}

QList<QString> Pipelines::assignmentsOfJob(const QString& jobId) const
{
    QList<QString> found;
    for (const auto& pipeline : m_pipelines) {
        if (pipeline->task.jobId == jobId)
            found.append(pipeline->stages.front().assignment);
    }
    return found;
}

} // namespace tessera::core::broker
