#include "jobspec.h"

#include "jsonreader.h"

#include <QJsonArray>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::core {

namespace {

constexpr std::int64_t FashionMnistTrainSamples = 60000;
// The fortunes corpus's training stream, in bytes (tokens): docs/DETERMINISM.md, "Text".
constexpr std::int64_t FortunesTrainTokens = 2'445'380;
constexpr std::int64_t FashionMnistTestSamples = 10000;
constexpr std::int64_t FortunesTestTokens = 131'296;
constexpr std::int64_t MaxContext = 4096;
constexpr std::int64_t MaxVocabulary = 1 << 20;
constexpr std::int64_t MaxLayerWidth = 65536;
constexpr qsizetype MaxHiddenLayers = 8;
constexpr double MaxLearningRate = 100.0;

QJsonArray toJsonArray(const QList<std::int64_t>& values)
{
    QJsonArray array;
    for (auto value : values)
        array.append(static_cast<qint64>(value));
    return array;
}

} // namespace

namespace {

// "initialWeights": { "file": ... } or { "sha256": ... }, for zoo and TorchScript models alike.
void readInitialWeights(JsonReader& reader, ModelSpec& model)
{
    if (!reader.has(u"initialWeights"))
        return;
    auto initial = reader.object(u"initialWeights");
    initial.allowOnly({ QStringLiteral("file"), QStringLiteral("sha256") });
    model.initialWeightsFile = initial.string(u"file", Presence::Optional);
    model.initialWeightsSha256 = initial.digest(u"sha256", Presence::Optional);
    if (initial.ok() && model.initialWeightsFile.isEmpty() && model.initialWeightsSha256.isNull())
        initial.fail(u"file", QStringLiteral("initial weights need a file to upload or the sha256 of one already uploaded"));
}

void writeInitialWeights(const ModelSpec& model, QJsonObject& json)
{
    QJsonObject initial;
    if (!model.initialWeightsFile.isEmpty())
        initial.insert(QStringLiteral("file"), model.initialWeightsFile);
    if (!model.initialWeightsSha256.isNull())
        initial.insert(QStringLiteral("sha256"), model.initialWeightsSha256.toHex());
    if (!initial.isEmpty())
        json.insert(QStringLiteral("initialWeights"), initial);
}

} // namespace

ModelSpec readModelSpec(JsonReader reader)
{
    ModelSpec model;
    readInitialWeights(reader, model);
    if (reader.has(u"torchscript")) {
        reader.allowOnly({ QStringLiteral("torchscript"), QStringLiteral("context"), QStringLiteral("initialWeights") });
        model.source = ModelSpec::Source::TorchScript;
        // A language model's (forward(tokens [B, L]) -> logits [B, L, V]): the window length the
        // built-in text is cut to.
        model.context = reader.integer(u"context", 2, MaxContext, Presence::Optional, 0);
        auto script = reader.object(u"torchscript");
        script.allowOnly({ QStringLiteral("file"), QStringLiteral("sha256") });
        model.scriptFile = script.string(u"file", Presence::Optional);
        model.scriptSha256 = script.digest(u"sha256", Presence::Optional);
        if (script.ok() && model.scriptFile.isEmpty() && model.scriptSha256.isNull())
            script.fail(
                u"file", QStringLiteral("a TorchScript model needs a file to upload or the sha256 of one already uploaded"));
        return model;
    }

    model.source = ModelSpec::Source::Zoo;
    model.zoo = reader.string(u"zoo");
    if (reader.ok() && !ModelSpec::zooNames().contains(model.zoo)) {
        reader.fail(u"zoo",
            QStringLiteral("'%1' is not a zoo model (choose one of: %2), or give \"torchscript\" instead")
                .arg(model.zoo, ModelSpec::zooNames().join(QStringLiteral(", "))));
        return model;
    }
    if (model.zoo == u"gpt") {
        reader.allowOnly({ QStringLiteral("zoo"), QStringLiteral("layers"), QStringLiteral("heads"), QStringLiteral("width"),
            QStringLiteral("context"), QStringLiteral("vocabulary"), QStringLiteral("tied"), QStringLiteral("dropout"),
            QStringLiteral("initialWeights") });
        model.layers = reader.integer(u"layers", 1, 64, Presence::Optional, 4);
        model.heads = reader.integer(u"heads", 1, 64, Presence::Optional, 4);
        model.width = reader.integer(u"width", 1, MaxLayerWidth, Presence::Optional, 128);
        model.context = reader.integer(u"context", 2, MaxContext, Presence::Optional, 128);
        model.vocabulary = reader.integer(u"vocabulary", 0, MaxVocabulary, Presence::Optional, 0);
        model.tied = reader.boolean(u"tied", Presence::Optional, true);
        if (reader.ok() && model.width % model.heads != 0)
            reader.fail(
                u"width", QStringLiteral("the width (%1) must be a multiple of heads (%2)").arg(model.width).arg(model.heads));
    } else if (model.zoo == u"cnn") {
        reader.allowOnly({ QStringLiteral("zoo"), QStringLiteral("channels"), QStringLiteral("hidden"), QStringLiteral("dropout"),
            QStringLiteral("initialWeights") });
        model.channels = reader.integerList(u"channels", 1, 1024, 2, Presence::Optional);
        if (model.channels.isEmpty())
            model.channels = { 16, 32 };
        else if (model.channels.size() != 2)
            reader.fail(u"channels", QStringLiteral("must list the output channels of exactly 2 conv blocks"));
        model.hidden = reader.integerList(u"hidden", 1, MaxLayerWidth, 1, Presence::Optional);
        if (model.hidden.isEmpty())
            model.hidden = { 128 };
    } else {
        reader.allowOnly(
            { QStringLiteral("zoo"), QStringLiteral("hidden"), QStringLiteral("dropout"), QStringLiteral("initialWeights") });
        model.hidden = reader.integerList(u"hidden", 1, MaxLayerWidth, MaxHiddenLayers, Presence::Optional);
        if (!reader.has(u"hidden"))
            model.hidden = { 256, 128 };
    }
    model.dropout = reader.number(u"dropout", 0.0, 0.95, Presence::Optional, 0.0);
    return model;
}

QJsonObject modelSpecToJson(const ModelSpec& model)
{
    QJsonObject json;
    if (model.source == ModelSpec::Source::TorchScript) {
        QJsonObject script;
        if (!model.scriptFile.isEmpty())
            script.insert(QStringLiteral("file"), model.scriptFile);
        if (!model.scriptSha256.isNull())
            script.insert(QStringLiteral("sha256"), model.scriptSha256.toHex());
        json.insert(QStringLiteral("torchscript"), script);
        if (model.context > 0)
            json.insert(QStringLiteral("context"), static_cast<qint64>(model.context));
        writeInitialWeights(model, json);
        return json;
    }
    writeInitialWeights(model, json);
    json.insert(QStringLiteral("zoo"), model.zoo);
    if (model.zoo == u"gpt") {
        json.insert(QStringLiteral("layers"), static_cast<qint64>(model.layers));
        json.insert(QStringLiteral("heads"), static_cast<qint64>(model.heads));
        json.insert(QStringLiteral("width"), static_cast<qint64>(model.width));
        json.insert(QStringLiteral("context"), static_cast<qint64>(model.context));
        json.insert(QStringLiteral("vocabulary"), static_cast<qint64>(model.vocabulary));
        json.insert(QStringLiteral("tied"), model.tied);
        json.insert(QStringLiteral("dropout"), model.dropout);
        return json;
    }
    if (model.zoo == u"cnn")
        json.insert(QStringLiteral("channels"), toJsonArray(model.channels));
    json.insert(QStringLiteral("hidden"), toJsonArray(model.hidden));
    json.insert(QStringLiteral("dropout"), model.dropout);
    return json;
}

namespace {

// The fields of a dataset of files ("tensors", "chunks"): its training file (`train`: "train" or
// "manifest") and its test file, each a path to upload or the sha256 of an upload, and the
// training samples.
void readDatasetFiles(JsonReader& files, const QString& train, QString& trainFile, Digest& trainSha256, DatasetSpec& dataset)
{
    files.allowOnly({ train + QStringLiteral("File"), train + QStringLiteral("Sha256"), QStringLiteral("testFile"),
        QStringLiteral("testSha256"), QStringLiteral("trainSamples") });
    trainFile = files.string(QString(train + QStringLiteral("File")), Presence::Optional);
    trainSha256 = files.digest(QString(train + QStringLiteral("Sha256")), Presence::Optional);
    dataset.testFile = files.string(u"testFile", Presence::Optional);
    dataset.testSha256 = files.digest(u"testSha256", Presence::Optional);
    dataset.trainSamples = files.integer(u"trainSamples", 1, std::int64_t(1) << 40);
}

} // namespace

DatasetSpec readDatasetSpec(JsonReader reader)
{
    DatasetSpec dataset;
    if (reader.has(u"tensors")) {
        reader.allowOnly({ QStringLiteral("tensors") });
        dataset.source = DatasetSpec::Source::Tensors;
        auto tensors = reader.object(u"tensors");
        readDatasetFiles(tensors, QStringLiteral("train"), dataset.trainFile, dataset.trainSha256, dataset);
        if (tensors.ok() && dataset.trainFile.isEmpty() && dataset.trainSha256.isNull())
            tensors.fail(
                u"trainFile", QStringLiteral("a tensor dataset needs a file to upload or the sha256 of one already uploaded"));
        return dataset;
    }
    if (reader.has(u"chunks")) {
        reader.allowOnly({ QStringLiteral("chunks") });
        dataset.source = DatasetSpec::Source::Chunks;
        auto chunks = reader.object(u"chunks");
        readDatasetFiles(chunks, QStringLiteral("manifest"), dataset.manifestFile, dataset.manifestSha256, dataset);
        if (chunks.ok() && dataset.manifestFile.isEmpty() && dataset.manifestSha256.isNull())
            chunks.fail(u"manifestFile",
                QStringLiteral("a chunked dataset needs its manifest (tessera-job chunk writes one) or the sha256 of one "
                               "already uploaded"));
        if (chunks.ok() && dataset.testFile.isEmpty() && dataset.testSha256.isNull())
            chunks.fail(u"testFile",
                QStringLiteral("a chunked dataset needs a test file: the broker evaluates each round on it, not on the corpus"));
        return dataset;
    }
    reader.allowOnly({ QStringLiteral("builtin") });
    dataset.source = DatasetSpec::Source::Builtin;
    dataset.builtin = reader.string(u"builtin");
    if (reader.ok() && !DatasetSpec::builtinNames().contains(dataset.builtin))
        reader.fail(u"builtin",
            QStringLiteral("'%1' is not a built-in dataset (choose one of: %2), or give \"tensors\" or \"chunks\" instead")
                .arg(dataset.builtin, DatasetSpec::builtinNames().join(QStringLiteral(", "))));
    return dataset;
}

QJsonObject datasetSpecToJson(const DatasetSpec& dataset)
{
    QJsonObject json;
    if (dataset.source == DatasetSpec::Source::Builtin) {
        json.insert(QStringLiteral("builtin"), dataset.builtin);
        return json;
    }
    QJsonObject tensors;
    if (!dataset.manifestFile.isEmpty())
        tensors.insert(QStringLiteral("manifestFile"), dataset.manifestFile);
    if (!dataset.manifestSha256.isNull())
        tensors.insert(QStringLiteral("manifestSha256"), dataset.manifestSha256.toHex());
    if (!dataset.trainFile.isEmpty())
        tensors.insert(QStringLiteral("trainFile"), dataset.trainFile);
    if (!dataset.trainSha256.isNull())
        tensors.insert(QStringLiteral("trainSha256"), dataset.trainSha256.toHex());
    if (!dataset.testFile.isEmpty())
        tensors.insert(QStringLiteral("testFile"), dataset.testFile);
    if (!dataset.testSha256.isNull())
        tensors.insert(QStringLiteral("testSha256"), dataset.testSha256.toHex());
    tensors.insert(QStringLiteral("trainSamples"), static_cast<qint64>(dataset.trainSamples));
    json.insert(dataset.source == DatasetSpec::Source::Chunks ? QStringLiteral("chunks") : QStringLiteral("tensors"), tensors);
    return json;
}

OptimizerSpec readOptimizerSpec(JsonReader reader)
{
    OptimizerSpec optimizer;
    const QString kind = reader.string(u"kind");
    if (kind == u"sgd") {
        reader.allowOnly({ QStringLiteral("kind"), QStringLiteral("lr"), QStringLiteral("momentum"), QStringLiteral("nesterov"),
            QStringLiteral("weightDecay"), QStringLiteral("clipNorm"), QStringLiteral("schedule") });
        optimizer.kind = OptimizerSpec::Kind::Sgd;
        optimizer.momentum = reader.number(u"momentum", 0.0, 0.999, Presence::Optional, 0.0);
        optimizer.nesterov = reader.boolean(u"nesterov", Presence::Optional, false);
        if (optimizer.nesterov && optimizer.momentum == 0.0)
            reader.fail(u"nesterov", QStringLiteral("Nesterov momentum needs a momentum above 0"));
    } else if (kind == u"adam" || kind == u"adamw") {
        reader.allowOnly({ QStringLiteral("kind"), QStringLiteral("lr"), QStringLiteral("beta1"), QStringLiteral("beta2"),
            QStringLiteral("eps"), QStringLiteral("weightDecay"), QStringLiteral("clipNorm"), QStringLiteral("schedule") });
        optimizer.kind = *fromName<OptimizerSpec::Kind>(kind);
        optimizer.beta1 = reader.number(u"beta1", 0.0, 0.9999, Presence::Optional, 0.9);
        optimizer.beta2 = reader.number(u"beta2", 0.0, 0.999999, Presence::Optional, 0.999);
        optimizer.eps = reader.number(u"eps", 1e-12, 1.0, Presence::Optional, 1e-8);
    } else if (reader.ok()) {
        reader.fail(u"kind",
            QStringLiteral("'%1' is not an optimizer (choose %2)")
                .arg(kind, JsonReader::alternatives(namesOf<OptimizerSpec::Kind>())));
    }
    optimizer.lr = reader.number(u"lr", 0.0, MaxLearningRate);
    if (reader.ok() && optimizer.lr <= 0.0)
        reader.fail(u"lr", QStringLiteral("the learning rate must be above 0"));
    optimizer.weightDecay = reader.number(u"weightDecay", 0.0, 1.0, Presence::Optional, 0.0);
    optimizer.clipNorm = reader.number(u"clipNorm", 0.0, 1e6, Presence::Optional, 0.0);
    if (reader.has(u"schedule")) {
        auto schedule = reader.object(u"schedule");
        schedule.allowOnly(
            { QStringLiteral("kind"), QStringLiteral("warmupSteps"), QStringLiteral("totalSteps"), QStringLiteral("minLr") });
        optimizer.schedule.kind
            = schedule.named(u"kind", QStringLiteral("a schedule"), Presence::Optional, ScheduleSpec::Kind::Cosine);
        optimizer.schedule.warmupSteps = schedule.integer(u"warmupSteps", 0, std::int64_t(1) << 40, Presence::Optional, 0);
        optimizer.schedule.totalSteps = schedule.integer(u"totalSteps", 0, std::int64_t(1) << 40, Presence::Optional, 0);
        optimizer.schedule.minLr = schedule.number(u"minLr", 0.0, MaxLearningRate, Presence::Optional, 0.0);
    }
    return optimizer;
}

QJsonObject optimizerSpecToJson(const OptimizerSpec& optimizer)
{
    QJsonObject json;
    json.insert(QStringLiteral("lr"), optimizer.lr);
    json.insert(QStringLiteral("weightDecay"), optimizer.weightDecay);
    // Written only when used, so that tasks without them read as before on older nodes.
    if (optimizer.clipNorm > 0.0)
        json.insert(QStringLiteral("clipNorm"), optimizer.clipNorm);
    if (optimizer.schedule.kind != ScheduleSpec::Kind::Constant)
        json.insert(QStringLiteral("schedule"),
            QJsonObject { { QStringLiteral("kind"), nameOf(optimizer.schedule.kind) },
                { QStringLiteral("warmupSteps"), static_cast<qint64>(optimizer.schedule.warmupSteps) },
                { QStringLiteral("totalSteps"), static_cast<qint64>(optimizer.schedule.totalSteps) },
                { QStringLiteral("minLr"), optimizer.schedule.minLr } });
    if (optimizer.kind == OptimizerSpec::Kind::Sgd) {
        json.insert(QStringLiteral("kind"), nameOf(optimizer.kind));
        json.insert(QStringLiteral("momentum"), optimizer.momentum);
        json.insert(QStringLiteral("nesterov"), optimizer.nesterov);
    } else {
        json.insert(QStringLiteral("kind"), nameOf(optimizer.kind));
        json.insert(QStringLiteral("beta1"), optimizer.beta1);
        json.insert(QStringLiteral("beta2"), optimizer.beta2);
        json.insert(QStringLiteral("eps"), optimizer.eps);
    }
    return json;
}

TrainingSpec readTrainingSpec(JsonReader reader)
{
    reader.allowOnly({ QStringLiteral("rounds"), QStringLiteral("shardsPerRound"), QStringLiteral("localSteps"),
        QStringLiteral("batchSize"), QStringLiteral("seed"), QStringLiteral("threads"), QStringLiteral("checkpointInterval"),
        QStringLiteral("determinism"), QStringLiteral("keepWeightsEvery"), QStringLiteral("evaluateEvery"),
        QStringLiteral("pipeline") });
    TrainingSpec training;
    training.rounds = reader.integer(u"rounds", 1, 100000);
    training.shardsPerRound = reader.integer(u"shardsPerRound", 1, 4096);
    training.localSteps = reader.integer(u"localSteps", 1, 1000000);
    training.batchSize = reader.integer(u"batchSize", 1, 65536);
    training.seed = reader.integer(u"seed", 0, (std::int64_t(1) << 53), Presence::Optional, 0);
    training.threads = reader.integer(u"threads", 1, 256, Presence::Optional, 1);
    training.checkpointInterval = reader.integer(
        u"checkpointInterval", 1, 1000000, Presence::Optional, std::max<std::int64_t>(1, training.localSteps / 10));
    training.determinism
        = reader.named(u"determinism", QStringLiteral("a determinism"), Presence::Optional, TrainingSpec::Determinism::Fast);
    training.keepWeightsEvery = reader.integer(u"keepWeightsEvery", 0, 100000, Presence::Optional, 0);
    training.evaluateEvery = reader.integer(u"evaluateEvery", 1, 100000, Presence::Optional, 1);
    if (reader.has(u"pipeline")) {
        auto pipeline = reader.object(u"pipeline");
        pipeline.allowOnly({ QStringLiteral("stages"), QStringLiteral("microBatches"), QStringLiteral("tensors") });
        training.pipeline.stages = pipeline.integer(u"stages", 1, TrainingSpec::Pipeline::MaxStages);
        training.pipeline.microBatches
            = pipeline.integer(u"microBatches", 1, TrainingSpec::Pipeline::MaxMicroBatches, Presence::Optional, 1);
        const QString tensors = pipeline.string(u"tensors", Presence::Optional, QStringLiteral("float32"));
        if (tensors != u"float32" && tensors != u"int8")
            pipeline.fail(u"tensors", QStringLiteral("must be \"float32\" or \"int8\", not \"%1\"").arg(tensors));
        training.pipeline.int8Tensors = tensors == u"int8";
    }
    return training;
}

QJsonObject trainingSpecToJson(const TrainingSpec& training)
{
    QJsonObject json {
        { QStringLiteral("rounds"), static_cast<qint64>(training.rounds) },
        { QStringLiteral("shardsPerRound"), static_cast<qint64>(training.shardsPerRound) },
        { QStringLiteral("localSteps"), static_cast<qint64>(training.localSteps) },
        { QStringLiteral("batchSize"), static_cast<qint64>(training.batchSize) },
        { QStringLiteral("seed"), static_cast<qint64>(training.seed) },
        { QStringLiteral("threads"), static_cast<qint64>(training.threads) },
        { QStringLiteral("checkpointInterval"), static_cast<qint64>(training.checkpointInterval) },
    };
    if (training.determinism == TrainingSpec::Determinism::Portable) // absent means fast, as before
        json.insert(QStringLiteral("determinism"), nameOf(training.determinism));
    if (training.keepWeightsEvery > 0) // absent means none, as before
        json.insert(QStringLiteral("keepWeightsEvery"), static_cast<qint64>(training.keepWeightsEvery));
    if (training.evaluateEvery > 1) // absent means every round, as before
        json.insert(QStringLiteral("evaluateEvery"), static_cast<qint64>(training.evaluateEvery));
    if (training.pipelined()) { // absent means none
        QJsonObject pipeline { { QStringLiteral("stages"), static_cast<qint64>(training.pipeline.stages) },
            { QStringLiteral("microBatches"), static_cast<qint64>(training.pipeline.microBatches) } };
        if (training.pipeline.int8Tensors) // absent means float32, as before
            pipeline.insert(QStringLiteral("tensors"), QStringLiteral("int8"));
        json.insert(QStringLiteral("pipeline"), pipeline);
    }
    return json;
}

AggregationSpec readAggregationSpec(JsonReader reader)
{
    reader.allowOnly({ QStringLiteral("method"), QStringLiteral("outerLr"), QStringLiteral("outerMomentum"),
        QStringLiteral("compression"), QStringLiteral("optimizerState") });
    AggregationSpec aggregation;
    aggregation.method
        = reader.named(u"method", QStringLiteral("an aggregation method"), Presence::Optional, AggregationSpec::Method::FedAvg);
    aggregation.outerLr = reader.number(u"outerLr", 0.0, 10.0, Presence::Optional, 1.0);
    if (reader.ok() && aggregation.outerLr <= 0.0)
        reader.fail(u"outerLr", QStringLiteral("the outer learning rate must be above 0"));
    aggregation.outerMomentum = reader.number(u"outerMomentum", 0.0, 0.999, Presence::Optional, 0.9);
    aggregation.compression
        = reader.named(u"compression", QStringLiteral("a compression"), Presence::Optional, Compression::Int8);
    aggregation.optimizerState = reader.named(
        u"optimizerState", QStringLiteral("an optimizer state"), Presence::Optional, AggregationSpec::OptimizerState::Reset);
    return aggregation;
}

QJsonObject aggregationSpecToJson(const AggregationSpec& aggregation)
{
    return QJsonObject {
        { QStringLiteral("method"), nameOf(aggregation.method) },
        { QStringLiteral("outerLr"), aggregation.outerLr },
        { QStringLiteral("outerMomentum"), aggregation.outerMomentum },
        { QStringLiteral("compression"), nameOf(aggregation.compression) },
        { QStringLiteral("optimizerState"), nameOf(aggregation.optimizerState) },
    };
}

QStringList ModelSpec::zooNames()
{
    return { QStringLiteral("mlp"), QStringLiteral("cnn"), QStringLiteral("gpt") };
}

QStringList DatasetSpec::builtinNames()
{
    return { QStringLiteral("fashion-mnist"), QStringLiteral("fortunes") };
}

void forgetLocalFiles(ModelSpec& model, DatasetSpec& dataset)
{
    model.scriptFile.clear();
    model.initialWeightsFile.clear();
    dataset.trainFile.clear();
    dataset.testFile.clear();
    dataset.manifestFile.clear();
}

Status forgetLocalFiles(JobSpec& spec)
{
    forgetLocalFiles(spec.model, spec.dataset);
    auto& inference = spec.inference;
    if (!inference.promptsFile.isEmpty() && inference.promptsSha256.isNull())
        return Error { QStringLiteral("inference.prompts.sha256"), QStringLiteral("upload the prompts file before submitting") };
    inference.promptsFile.clear();
    return {};
}

std::int64_t DatasetSpec::trainSampleCount(std::int64_t context) const
{
    if (source == Source::Builtin && builtin == u"fashion-mnist")
        return FashionMnistTrainSamples;
    if (source == Source::Builtin && builtin == u"fortunes")
        return context > 0 ? (FortunesTrainTokens - 1) / context : 0;
    return trainSamples;
}

bool DatasetSpec::isText() const
{
    // A tokens file is told from a samples file only when read: the model says which it is.
    return source == Source::Builtin && builtin == u"fortunes";
}

AggregationSpec JobSpec::aggregationOfRound(std::int64_t round) const
{
    AggregationSpec spec = aggregation;
    if (round + 1 >= training.rounds)
        spec.optimizerState = AggregationSpec::OptimizerState::Reset;
    return spec;
}

double OptimizerSpec::learningRateAt(std::int64_t t) const
{
    if (schedule.kind == ScheduleSpec::Kind::Constant)
        return lr;
    if (t < schedule.warmupSteps)
        return lr * double(t + 1) / double(schedule.warmupSteps);
    const double span = double(std::max<std::int64_t>(1, schedule.totalSteps - schedule.warmupSteps));
    const double progress = std::min(1.0, double(t - schedule.warmupSteps) / span);
    return schedule.minLr + (lr - schedule.minLr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

std::int64_t JobSpec::inferenceInputs() const
{
    if (inference.task == InferenceSpec::Task::Generate)
        return inference.promptCount;
    if (inference.serves())
        return 1; // one replica: requests come as the job serves
    if (inference.split == InferenceSpec::Split::Train)
        return dataset.trainSampleCount(model.context);
    if (dataset.source == DatasetSpec::Source::Builtin && dataset.builtin == u"fashion-mnist")
        return FashionMnistTestSamples;
    if (dataset.source == DatasetSpec::Source::Builtin && dataset.builtin == u"fortunes")
        return model.context > 0 ? (FortunesTestTokens - 1) / model.context : 0;
    return 0;
}

// The model against its data and the job's determinism.
Status JobSpec::validateModel() const
{
    auto fail = [](const char* field, const QString& message) { return Error { QString::fromLatin1(field), message }; };
    const bool gpt = model.source == ModelSpec::Source::Zoo && model.zoo == u"gpt";
    if (gpt && dataset.source == DatasetSpec::Source::Builtin && !dataset.isText())
        return fail("dataset.builtin", QStringLiteral("a gpt trains on text: choose \"fortunes\" or a tokens file"));
    if (dataset.isText() && !gpt && model.source == ModelSpec::Source::Zoo)
        return fail("model.zoo", QStringLiteral("the %1 text is for a language model: choose \"gpt\"").arg(dataset.builtin));
    if (dataset.isText() && model.source == ModelSpec::Source::TorchScript && model.context < 1)
        return fail("model.context",
            QStringLiteral("a TorchScript language model on the %1 text needs the context its windows are cut to")
                .arg(dataset.builtin));
    if (gpt && (model.heads < 1 || model.layers < 1 || model.context < 1))
        return fail("model", QStringLiteral("a gpt has at least one head, one layer and a context"));
    if (gpt && model.width % model.heads != 0)
        return fail("model.width", QStringLiteral("the width must be a multiple of heads"));
    if (training.determinism == TrainingSpec::Determinism::Portable
        && (model.source != ModelSpec::Source::Zoo || (gpt && model.dropout > 0.0)))
        return fail("training.determinism",
            QStringLiteral("the portable kernels cover the zoo mlp, cnn and gpt (without dropout) so far"));
    return {};
}

Status JobSpec::validatePipeline() const
{
    if (training.pipeline.int8Tensors && training.pipeline.stages < 2)
        return Error { QStringLiteral("training.pipeline.tensors"),
            QStringLiteral("int8 tensors are what stages trade: give stages") };
    if (!training.pipelined())
        return {};
    const auto& pipeline = training.pipeline;
    if (model.source != ModelSpec::Source::Zoo || model.zoo != u"gpt")
        return Error { QStringLiteral("training.pipeline"), QStringLiteral("stages cut the zoo gpt's blocks: a gpt only") };
    if (training.determinism != TrainingSpec::Determinism::Portable)
        return Error { QStringLiteral("training.determinism"),
            QStringLiteral("a pipeline job is portable: stages on different CPUs must compute the same bits") };
    if (pipeline.stages > model.layers)
        return Error { QStringLiteral("training.pipeline.stages"),
            QStringLiteral("each stage holds at least one of the %1 blocks").arg(model.layers) };
    if (pipeline.int8Tensors && model.width < 8)
        return Error { QStringLiteral("training.pipeline.tensors"),
            QStringLiteral("int8 tensors take 1 byte a value and 4 a position: they pay from a width of 8") };
    // A node estimates a stage's memory from the spec (core::estimateStageMemory): the embeddings
    // and the head are the vocabulary's, which a tokens file would otherwise decide.
    if (pipeline.stages > 1 && model.vocabulary <= 0 && dataset.source != DatasetSpec::Source::Builtin)
        return Error { QStringLiteral("model.vocabulary"),
            QStringLiteral("a pipeline job names its vocabulary: each node estimates its stage's memory from it") };
    if (pipeline.stages > 1 && model.tied)
        return Error { QStringLiteral("model.tied"),
            QStringLiteral("a head tied to the token embedding would span the first and the last stage: say \"tied\": false") };
    if (pipeline.microBatches > training.batchSize || training.batchSize % pipeline.microBatches != 0)
        return Error { QStringLiteral("training.pipeline.microBatches"),
            QStringLiteral("the batch of %1 does not split into %2 equal micro-batches")
                .arg(training.batchSize)
                .arg(pipeline.microBatches) };
    // What crosses a boundary a micro-batch (at most [b, context, width] float32) travels in TENSOR
    // messages of at most 1 GiB, and a shard's tensors are counted one by one by the broker.
    const auto boundaryBytes = training.batchSize / pipeline.microBatches * model.context * model.width * 4;
    if (pipeline.stages > 1 && boundaryBytes > (std::int64_t(1) << 30))
        return Error { QStringLiteral("training.pipeline.microBatches"),
            QStringLiteral("a micro-batch's activation would be %1 bytes, more than the 1 GiB a stage sends at once: more "
                           "micro-batches")
                .arg(boundaryBytes) };
    if (pipeline.stages > 1 && training.localSteps * pipeline.microBatches > TrainingSpec::Pipeline::MaxStageTensors)
        return Error { QStringLiteral("training.pipeline.microBatches"),
            QStringLiteral("%1 steps of %2 micro-batches are more than the %3 tensors a stage trades in a shard")
                .arg(training.localSteps)
                .arg(pipeline.microBatches)
                .arg(TrainingSpec::Pipeline::MaxStageTensors) };
    // What a middle stage receives in a shard (an activation and a gradient a step and sample) is
    // the record its re-execution reads, a blob of at most 1 GiB (docs/VERIFICATION.md, "Pipeline
    // stages"); the sums of squares take at most 64 KiB a step from each other stage.
    const auto recordBytes
        = double(training.localSteps) * double(training.batchSize) * double(model.context) * double(model.width) * 8.0
        + double(training.localSteps) * double(pipeline.stages) * 65536.0;
    if (pipeline.stages > 1 && recordBytes > double(std::int64_t(1) << 30))
        return Error { QStringLiteral("training.localSteps"),
            QStringLiteral("a stage would receive about %1 MiB in a shard, more than the 1 GiB record its re-execution "
                           "reads: fewer local steps, a smaller batch or more shards")
                .arg(std::int64_t(recordBytes) >> 20) };
    return {};
}

Status JobSpec::validateInference() const
{
    auto fail = [](const char* field, const QString& message) { return Error { QString::fromLatin1(field), message }; };
    const bool zoo = model.source == ModelSpec::Source::Zoo;
    if (zoo && !ModelSpec::zooNames().contains(model.zoo))
        return fail("model.zoo", QStringLiteral("'%1' is not a zoo model").arg(model.zoo));
    if (zoo && model.initialWeightsSha256.isNull() && model.initialWeightsFile.isEmpty())
        return fail("model.initialWeights",
            QStringLiteral("an inference job runs trained weights: give them (initialWeights) or a finished job (fromJob)"));
    if (inference.portable() && !zoo)
        return fail("inference.determinism",
            QStringLiteral("the portable kernels cover the zoo mlp, cnn and gpt, not TorchScript models"));
    const bool languageModel = model.context > 0;
    if (zoo && model.zoo == u"gpt" && model.width % std::max<std::int64_t>(model.heads, 1) != 0)
        return fail("model.width", QStringLiteral("the width must be a multiple of heads"));
    if (dataset.source == DatasetSpec::Source::Chunks)
        return fail("dataset.chunks", QStringLiteral("inference reads a built-in dataset or a tensor file, not chunks (yet)"));
    switch (inference.task) {
    case InferenceSpec::Task::Classify:
        if (languageModel || dataset.isText())
            return fail(
                "inference.task", QStringLiteral("a language model scores or generates text; classify is for classifiers"));
        break;
    case InferenceSpec::Task::Score:
        if (!languageModel)
            return fail("inference.task", QStringLiteral("score runs a language model (a gpt, or TorchScript with a context)"));
        break;
    case InferenceSpec::Task::Serve:
        // A served model runs outside the sandbox on its nodes (docs/SECURITY.md): Tessera's own
        // code only.
        if (!zoo || model.zoo != u"gpt")
            return fail("model", QStringLiteral("a served model is a zoo gpt (with initialWeights, or fromJob)"));
        [[fallthrough]];
    case InferenceSpec::Task::Generate: {
        if (!languageModel)
            return fail(
                "inference.task", QStringLiteral("generate runs a language model (a gpt, or TorchScript with a context)"));
        const bool bytes = model.vocabulary > 0 ? model.vocabulary <= 256 : dataset.isText();
        if (!bytes)
            return fail("model.vocabulary",
                QStringLiteral("prompts are bytes: generate needs a vocabulary of at most 256 (the fortunes text, or say "
                               "model.vocabulary)"));
        break;
    }
    }
    if (inference.task != InferenceSpec::Task::Generate && !inference.serves() && inference.split == InferenceSpec::Split::Test
        && dataset.source == DatasetSpec::Source::Tensors)
        return fail("inference.split", QStringLiteral("a tensor file's inputs are its trainFile: choose \"train\""));
    const auto inputs = inferenceInputs();
    if (inputs < 1)
        return fail("inference", QStringLiteral("there are no inputs"));
    // A generate line holds at most maxTokens tokens of 4 characters: the result must be fetchable.
    const double lineBytes = double(inference.maxTokens) * 4.0 + 64.0;
    if (inference.task == InferenceSpec::Task::Generate && double(inputs) * lineBytes > double(InferenceSpec::MaxResultBytes))
        return fail("inference.prompts.count",
            QStringLiteral("%1 completions of up to %2 tokens could be more than the 1 GiB a result may have")
                .arg(inputs)
                .arg(inference.maxTokens));
    if (training.shardsPerRound > 65536)
        return fail("inference.samplesPerShard",
            QStringLiteral("%1 inputs in shards of %2 are more than 65536 shards").arg(inputs).arg(inference.samplesPerShard));
    if (!(budget.micro() > 0))
        return fail("budget", QStringLiteral("the budget must be above 0 credits, not %1").arg(budget.toString()));
    if (!(verificationRate >= 0.0 && verificationRate <= 1.0))
        return fail("verification.rate", QStringLiteral("must be between 0 and 1"));
    return {};
}

std::int64_t JobSpec::samplesPerShard() const
{
    return training.shardsPerRound > 0 ? trainSamples() / training.shardsPerRound : 0;
}

Result<JobSpec> JobSpec::fromJsonText(const QByteArray& text)
{
    auto json = parseJsonObject(text);
    if (!json)
        return json.error();
    return fromJson(*json);
}

namespace {

// An inference job's training fields, from its inference section: one round of shards of
// samplesPerShard inputs (the last takes the rest), each step a batch.
void fillInTraining(JobSpec& spec)
{
    const auto& inference = spec.inference;
    const auto inputs = std::max<std::int64_t>(spec.inferenceInputs(), 1);
    spec.training = TrainingSpec {};
    spec.training.rounds = 1;
    // A served job's "shards" are its replicas (docs/JOBS.md, "Served models").
    spec.training.shardsPerRound
        = inference.serves() ? inference.replicas : (inputs + inference.samplesPerShard - 1) / inference.samplesPerShard;
    spec.training.batchSize = inference.batchSize;
    spec.training.localSteps = std::min(inference.samplesPerShard, inputs) / inference.batchSize;
    spec.training.localSteps = std::max<std::int64_t>(spec.training.localSteps, 1);
    spec.training.seed = inference.seed;
    spec.training.threads = inference.threads;
    spec.training.checkpointInterval = 1;
    spec.aggregation = AggregationSpec {};
    spec.aggregation.compression = Compression::None;
    spec.optimizer = OptimizerSpec {};
}

void readInferenceParts(JsonReader& reader, JobSpec& spec)
{
    reader.allowOnly({ QStringLiteral("version"), QStringLiteral("name"), QStringLiteral("kind"), QStringLiteral("model"),
        QStringLiteral("dataset"), QStringLiteral("inference"), QStringLiteral("budget"), QStringLiteral("verification") });
    spec.model = readModelSpec(reader.object(u"model"));
    spec.dataset = readDatasetSpec(reader.object(u"dataset"));
    spec.inference = readInferenceSpec(reader.object(u"inference"));
    if (reader.ok())
        fillInTraining(spec);
}

void readTrainingParts(JsonReader& reader, JobSpec& spec)
{
    reader.allowOnly({ QStringLiteral("version"), QStringLiteral("name"), QStringLiteral("kind"), QStringLiteral("model"),
        QStringLiteral("dataset"), QStringLiteral("optimizer"), QStringLiteral("training"), QStringLiteral("aggregation"),
        QStringLiteral("budget"), QStringLiteral("verification") });
    spec.model = readModelSpec(reader.object(u"model"));
    spec.dataset = readDatasetSpec(reader.object(u"dataset"));
    spec.optimizer = readOptimizerSpec(reader.object(u"optimizer"));
    spec.training = readTrainingSpec(reader.object(u"training"));
    spec.aggregation = readAggregationSpec(reader.object(u"aggregation", Presence::Optional));
    if (spec.optimizer.schedule.kind != ScheduleSpec::Kind::Constant && spec.optimizer.schedule.totalSteps == 0)
        spec.optimizer.schedule.totalSteps = spec.training.rounds * spec.training.localSteps;
}

} // namespace

Result<JobSpec> JobSpec::fromJson(const QJsonObject& json)
{
    JsonReader reader(json);
    const auto version = reader.integer(u"version", 1, std::numeric_limits<int>::max(), Presence::Optional, FormatVersion);
    if (reader.ok() && version > FormatVersion)
        reader.fail(u"version",
            QStringLiteral("this job file is format %1; this Tessera reads up to format %2").arg(version).arg(FormatVersion));

    JobSpec spec;
    spec.kind = reader.named(u"kind", QStringLiteral("a job kind"), Presence::Optional, Kind::Training);
    spec.name = reader.string(u"name");
    if (spec.isInference())
        readInferenceParts(reader, spec);
    else
        readTrainingParts(reader, spec);

    const QString budget = reader.string(u"budget");
    if (reader.ok()) {
        auto credits = Credits::parse(budget);
        if (!credits)
            reader.fail(u"budget", credits.error().message);
        else
            spec.budget = *credits;
    }
    auto verification = reader.object(u"verification", Presence::Optional);
    verification.allowOnly({ QStringLiteral("rate") });
    spec.verificationRate = verification.number(u"rate", 0.0, 1.0, Presence::Optional, 0.1);

    if (!reader.ok())
        return reader.status().error();
    if (auto status = spec.validate(); !status)
        return status.error();
    return spec;
}

QJsonObject JobSpec::toJson() const
{
    if (isInference())
        return QJsonObject {
            { QStringLiteral("version"), FormatVersion },
            { QStringLiteral("name"), name },
            { QStringLiteral("kind"), nameOf(kind) },
            { QStringLiteral("model"), modelSpecToJson(model) },
            { QStringLiteral("dataset"), datasetSpecToJson(dataset) },
            { QStringLiteral("inference"), inferenceSpecToJson(inference) },
            { QStringLiteral("budget"), budget.toString() },
            { QStringLiteral("verification"), QJsonObject { { QStringLiteral("rate"), verificationRate } } },
        };
    return QJsonObject {
        { QStringLiteral("version"), FormatVersion },
        { QStringLiteral("name"), name },
        { QStringLiteral("model"), modelSpecToJson(model) },
        { QStringLiteral("dataset"), datasetSpecToJson(dataset) },
        { QStringLiteral("optimizer"), optimizerSpecToJson(optimizer) },
        { QStringLiteral("training"), trainingSpecToJson(training) },
        { QStringLiteral("aggregation"), aggregationSpecToJson(aggregation) },
        { QStringLiteral("budget"), budget.toString() },
        { QStringLiteral("verification"), QJsonObject { { QStringLiteral("rate"), verificationRate } } },
    };
}

Status JobSpec::validate() const
{
    auto fail = [](const char* field, const QString& message) { return Error { QString::fromLatin1(field), message }; };

    if (name.trimmed().isEmpty())
        return fail("name", QStringLiteral("give the job a name"));
    if (name.size() > 200)
        return fail("name", QStringLiteral("at most 200 characters"));
    if (isInference())
        return validateInference();
    if (model.source == ModelSpec::Source::Zoo && !ModelSpec::zooNames().contains(model.zoo))
        return fail("model.zoo", QStringLiteral("'%1' is not a zoo model").arg(model.zoo));
    if (training.rounds < 1)
        return fail("training.rounds", QStringLiteral("a job needs at least 1 round"));
    if (training.shardsPerRound < 1)
        return fail("training.shardsPerRound", QStringLiteral("a round needs at least 1 shard"));
    if (training.localSteps < 1)
        return fail("training.localSteps", QStringLiteral("a shard needs at least 1 local step"));
    if (training.batchSize < 1)
        return fail("training.batchSize", QStringLiteral("the batch size must be at least 1"));
    if (training.threads < 1)
        return fail("training.threads", QStringLiteral("a shard needs at least 1 thread"));
    if (!(optimizer.lr > 0.0))
        return fail("optimizer.lr", QStringLiteral("the learning rate must be above 0"));
    if (optimizer.weightDecay < 0.0)
        return fail("optimizer.weightDecay", QStringLiteral("weight decay cannot be negative"));
    if (training.checkpointInterval < 1 || training.checkpointInterval > training.localSteps)
        return fail("training.checkpointInterval",
            QStringLiteral("must be between 1 and localSteps (%1), not %2")
                .arg(training.localSteps)
                .arg(training.checkpointInterval));

    if (auto status = validateModel(); !status)
        return status;
    if (auto pipeline = validatePipeline(); !pipeline)
        return pipeline;
    if (aggregation.optimizerState == AggregationSpec::OptimizerState::Averaged && !optimizer.isAdam()
        && optimizer.momentum == 0.0)
        return fail("aggregation.optimizerState", QStringLiteral("sgd without momentum keeps no optimizer state to average"));
    if (optimizer.schedule.kind != ScheduleSpec::Kind::Constant) {
        if (optimizer.schedule.minLr > optimizer.lr)
            return fail("optimizer.schedule.minLr", QStringLiteral("must not be above the learning rate"));
        if (optimizer.schedule.warmupSteps > optimizer.schedule.totalSteps)
            return fail("optimizer.schedule.warmupSteps",
                QStringLiteral("%1 warmup steps are more than the schedule's %2 steps")
                    .arg(optimizer.schedule.warmupSteps)
                    .arg(optimizer.schedule.totalSteps));
    }
    const auto samples = trainSamples();
    if (samples < 1)
        return fail("dataset", QStringLiteral("the dataset has no training samples"));
    if (training.shardsPerRound > samples)
        return fail("training.shardsPerRound",
            QStringLiteral("%1 shards cannot split %2 training samples").arg(training.shardsPerRound).arg(samples));
    if (training.batchSize > samplesPerShard())
        return fail("training.batchSize",
            QStringLiteral("a batch of %1 is larger than a shard's %2 samples (%3 training samples / %4 shards per round)")
                .arg(training.batchSize)
                .arg(samplesPerShard())
                .arg(samples)
                .arg(training.shardsPerRound));
    if (!(budget.micro() > 0))
        return fail("budget", QStringLiteral("the budget must be above 0 credits, not %1").arg(budget.toString()));
    if (!(verificationRate >= 0.0 && verificationRate <= 1.0))
        return fail("verification.rate", QStringLiteral("must be between 0 and 1"));
    return validateResultSize();
}

Status JobSpec::validateResultSize() const
{
    // A shard's RESULT carries a loss a step and a hash a checkpoint in its header, which brokers
    // take up to 64 KiB (docs/PROTOCOL.md, "Limits"): a job whose results could not fit would never
    // finish, its budget held in escrow. At worst 24 bytes a loss, 67 a checkpoint's hash, and the
    // rest of the result within 4 KiB.
    auto fail = [](const char* field, const QString& message) { return Error { QString::fromLatin1(field), message }; };
    const std::int64_t resultBytes = training.localSteps * 24 + (training.localSteps / training.checkpointInterval + 2) * 67;
    if (kind == Kind::Training && resultBytes > MaxResultLossesAndHashesBytes)
        return fail("training.localSteps",
            QStringLiteral("%1 local steps with a checkpoint every %2 make a result too large for a broker's message (about "
                           "%3 KiB of losses and checkpoint hashes, at most %4 KiB): use fewer local steps a round (about "
                           "2,400 at most) and more rounds")
                .arg(training.localSteps)
                .arg(training.checkpointInterval)
                .arg(resultBytes / 1024)
                .arg(MaxResultLossesAndHashesBytes / 1024));
    return {};
}

} // namespace tessera::core
