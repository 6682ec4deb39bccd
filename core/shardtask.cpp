#include "shardtask.h"

#include <QJsonArray>

#include "jsonreader.h"

namespace tessera::core {

std::int64_t ShardTask::checkpointCount() const
{
    if (checkpointInterval < 1)
        return 0;
    // step 0, every multiple of c below H, and H itself
    return 1 + (localSteps + checkpointInterval - 1) / checkpointInterval;
}

std::int64_t ShardTask::keptStateCheckpoint() const
{
    if (inference)
        return 0; // a batch is computed from the weights alone: no state to keep
    const auto count = checkpointCount();
    return count >= 3 ? (count - 1) / 2 : 0;
}

QList<Digest> ShardTask::inputBlobs() const
{
    QList<Digest> blobs;
    if (model.source == ModelSpec::Source::TorchScript)
        blobs.append(model.scriptSha256);
    if (dataset.source == DatasetSpec::Source::Tensors)
        blobs.append(dataset.trainSha256);
    if (dataset.source == DatasetSpec::Source::Chunks)
        blobs.append(dataset.manifestSha256);
    if (dataset.source != DatasetSpec::Source::Builtin && !dataset.testSha256.isNull())
        blobs.append(dataset.testSha256);
    blobs.append(dataChunks);
    if (!stageInputs.isNull())
        blobs.append(stageInputs);
    if (inference && !inference->promptsSha256.isNull())
        blobs.append(inference->promptsSha256);
    return blobs;
}

Result<ShardTask> ShardTask::fromJson(const QJsonObject& json)
{
    JsonReader reader(json);
    reader.allowOnly({ QStringLiteral("jobId"), QStringLiteral("round"), QStringLiteral("shard"), QStringLiteral("sampleBegin"),
        QStringLiteral("sampleEnd"), QStringLiteral("localSteps"), QStringLiteral("batchSize"), QStringLiteral("seed"),
        QStringLiteral("threads"), QStringLiteral("checkpointInterval"), QStringLiteral("model"), QStringLiteral("dataset"),
        QStringLiteral("optimizer"), QStringLiteral("startWeights"), QStringLiteral("compression"),
        QStringLiteral("optimizerState"), QStringLiteral("determinism"), QStringLiteral("dataChunks"),
        QStringLiteral("microBatches"), QStringLiteral("stage"), QStringLiteral("stages"), QStringLiteral("stageInputs"),
        QStringLiteral("stageTensors"), QStringLiteral("inference") });
    constexpr std::int64_t MaxIndex = std::int64_t(1) << 40;
    ShardTask task;
    task.jobId = reader.string(u"jobId");
    task.round = reader.integer(u"round", 0, MaxIndex);
    task.shard = reader.integer(u"shard", 0, MaxIndex);
    task.sampleBegin = reader.integer(u"sampleBegin", 0, MaxIndex);
    task.sampleEnd = reader.integer(u"sampleEnd", 0, MaxIndex);
    task.localSteps = reader.integer(u"localSteps", 1, 1000000);
    task.batchSize = reader.integer(u"batchSize", 1, 65536);
    task.seed = reader.integer(u"seed", 0, std::int64_t(1) << 53);
    task.threads = reader.integer(u"threads", 1, 256);
    task.checkpointInterval = reader.integer(u"checkpointInterval", 1, 1000000);
    task.model = readModelSpec(reader.object(u"model"));
    task.dataset = readDatasetSpec(reader.object(u"dataset"));
    task.optimizer = readOptimizerSpec(reader.object(u"optimizer"));
    task.startWeights = reader.digest(u"startWeights", Presence::Optional);
    task.compression = reader.named(u"compression", QStringLiteral("a compression"), Presence::Optional, Compression::None);
    task.carriesOptimizer = reader.named(u"optimizerState", QStringLiteral("an optimizer state"), Presence::Optional,
                                AggregationSpec::OptimizerState::Reset)
        == AggregationSpec::OptimizerState::Averaged;
    task.portable
        = reader.named(u"determinism", QStringLiteral("a determinism"), Presence::Optional, TrainingSpec::Determinism::Fast)
        == TrainingSpec::Determinism::Portable;
    task.microBatches = reader.integer(u"microBatches", 1, TrainingSpec::Pipeline::MaxMicroBatches, Presence::Optional, 1);
    task.stages = reader.integer(u"stages", 1, TrainingSpec::Pipeline::MaxStages, Presence::Optional, 1);
    task.stage = reader.integer(u"stage", 0, TrainingSpec::Pipeline::MaxStages - 1, Presence::Optional, 0);
    task.stageInputs = reader.digest(u"stageInputs", Presence::Optional);
    const QString stageTensors = reader.string(u"stageTensors", Presence::Optional, QStringLiteral("float32"));
    if (stageTensors != u"float32" && stageTensors != u"int8")
        reader.fail(u"stageTensors", QStringLiteral("must be \"float32\" or \"int8\""));
    task.int8StageTensors = stageTensors == u"int8"; // read by stage tasks alone
    task.dataChunks = reader.digestList(u"dataChunks", JsonReader::MaxListLength, Presence::Optional);
    if (reader.ok() && !task.dataChunks.isEmpty() && task.dataset.source != DatasetSpec::Source::Chunks)
        reader.fail(u"dataChunks", QStringLiteral("only a chunked dataset has chunks"));
    if (reader.has(u"inference"))
        task.inference = readInferenceSpec(reader.object(u"inference"));
    if (!reader.ok())
        return reader.status().error();
    if (auto status = task.validate(); !status)
        return status.error();
    return task;
}

QJsonObject ShardTask::toJson() const
{
    QJsonObject json {
        { QStringLiteral("jobId"), jobId },
        { QStringLiteral("round"), static_cast<qint64>(round) },
        { QStringLiteral("shard"), static_cast<qint64>(shard) },
        { QStringLiteral("sampleBegin"), static_cast<qint64>(sampleBegin) },
        { QStringLiteral("sampleEnd"), static_cast<qint64>(sampleEnd) },
        { QStringLiteral("localSteps"), static_cast<qint64>(localSteps) },
        { QStringLiteral("batchSize"), static_cast<qint64>(batchSize) },
        { QStringLiteral("seed"), static_cast<qint64>(seed) },
        { QStringLiteral("threads"), static_cast<qint64>(threads) },
        { QStringLiteral("checkpointInterval"), static_cast<qint64>(checkpointInterval) },
        { QStringLiteral("model"), modelSpecToJson(model) },
        { QStringLiteral("dataset"), datasetSpecToJson(dataset) },
        { QStringLiteral("optimizer"), optimizerSpecToJson(optimizer) },
    };
    if (!startWeights.isNull())
        json.insert(QStringLiteral("startWeights"), startWeights.toHex());
    if (compression != Compression::None) // absent means none: tasks of uncompressed jobs read as before
        json.insert(QStringLiteral("compression"), nameOf(compression));
    if (carriesOptimizer) // absent means reset, as before
        json.insert(QStringLiteral("optimizerState"), nameOf(AggregationSpec::OptimizerState::Averaged));
    if (portable) // absent means fast, as before
        json.insert(QStringLiteral("determinism"), nameOf(TrainingSpec::Determinism::Portable));
    if (microBatches > 1) // absent means one, as before
        json.insert(QStringLiteral("microBatches"), static_cast<qint64>(microBatches));
    if (isStage()) { // absent means the whole model, as before
        json.insert(QStringLiteral("stage"), static_cast<qint64>(stage));
        json.insert(QStringLiteral("stages"), static_cast<qint64>(stages));
    }
    if (!stageInputs.isNull())
        json.insert(QStringLiteral("stageInputs"), stageInputs.toHex());
    if (int8StageTensors) // absent means float32, as before
        json.insert(QStringLiteral("stageTensors"), QStringLiteral("int8"));
    if (!dataChunks.isEmpty()) {
        QJsonArray chunks;
        for (const auto& chunk : dataChunks)
            chunks.append(chunk.toHex());
        json.insert(QStringLiteral("dataChunks"), chunks);
    }
    if (inference)
        json.insert(QStringLiteral("inference"), inferenceSpecToJson(*inference));
    return json;
}

Status ShardTask::validate() const
{
    if (jobId.isEmpty())
        return Error { QStringLiteral("jobId"), QStringLiteral("is required") };
    if (sampleEnd <= sampleBegin)
        return Error { QStringLiteral("sampleEnd"),
            QStringLiteral("the sample range [%1, %2) is empty").arg(sampleBegin).arg(sampleEnd) };
    if (!stageInputs.isNull() && !isStage())
        return Error { QStringLiteral("stageInputs"), QStringLiteral("only a stage task has inputs") };
    if (inference)
        return validateInference();
    // Micro-batches are the pipeline's: a portable zoo gpt without dropout (dropout's streams are a
    // step's, and would repeat in every micro-batch).
    if (microBatches > 1
        && (!portable || batchSize % microBatches != 0 || model.source != ModelSpec::Source::Zoo || model.zoo != u"gpt"
            || model.dropout > 0.0))
        return Error { QStringLiteral("microBatches"),
            QStringLiteral("micro-batches split a portable gpt's batch (without dropout) into equal parts") };
    if (stage >= stages)
        return Error { QStringLiteral("stage"), QStringLiteral("stage %1 of %2 (they count from 0)").arg(stage).arg(stages) };
    if (isStage()
        && (!portable || model.source != ModelSpec::Source::Zoo || model.zoo != u"gpt" || model.dropout > 0.0 || model.tied
            || stages > model.layers))
        return Error { QStringLiteral("stages"),
            QStringLiteral("stages cut a portable gpt's blocks (untied, without dropout, a block a stage at least)") };
    if (batchSize > sampleEnd - sampleBegin)
        return Error { QStringLiteral("batchSize"),
            QStringLiteral("a batch of %1 is larger than the shard's %2 samples").arg(batchSize).arg(sampleEnd - sampleBegin) };
    if (checkpointInterval > localSteps)
        return Error { QStringLiteral("checkpointInterval"),
            QStringLiteral("must be at most localSteps (%1), not %2").arg(localSteps).arg(checkpointInterval) };
    return {};
}

Status ShardTask::validateInference() const
{
    if (microBatches != 1 || isStage())
        return Error { QStringLiteral("microBatches"), QStringLiteral("an inference task has no micro-batches or stages") };
    const auto inputs = sampleEnd - sampleBegin;
    if (inputs > InferenceSpec::MaxSamplesPerShard)
        return Error { QStringLiteral("sampleEnd"),
            QStringLiteral("%1 inputs, more than a shard has (%2)").arg(inputs).arg(InferenceSpec::MaxSamplesPerShard) };
    if (batchSize != inference->batchSize || threads != inference->threads)
        return Error { QStringLiteral("batchSize"), QStringLiteral("the task's batch size and threads are its inference's") };
    if (portable != inference->portable())
        return Error { QStringLiteral("determinism"), QStringLiteral("the task's determinism is its inference's") };
    if (sampleBegin % batchSize != 0)
        return Error { QStringLiteral("sampleBegin"),
            QStringLiteral("an inference shard starts on a batch's first input (a multiple of %1)").arg(batchSize) };
    if (localSteps != (inputs + batchSize - 1) / batchSize || checkpointInterval != 1
        || localSteps > InferenceSpec::MaxStepsPerShard)
        return Error { QStringLiteral("localSteps"),
            QStringLiteral("an inference shard's steps are its batches, at most %1").arg(InferenceSpec::MaxStepsPerShard) };
    if (inference->task == InferenceSpec::Task::Generate && sampleEnd > inference->promptCount)
        return Error { QStringLiteral("sampleEnd"),
            QStringLiteral("the shard reads prompts up to %1 of %2").arg(sampleEnd).arg(inference->promptCount) };
    return {};
}

} // namespace tessera::core
