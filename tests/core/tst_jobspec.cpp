#include <core/capabilities.h>
#include <core/decomposition.h>
#include <core/jobspec.h>
#include <core/memoryestimate.h>

#include <QFile>
#include <QJsonDocument>
#include <QTest>

using namespace tessera::core;

namespace {

QJsonObject minimalJob()
{
    return QJsonDocument::fromJson(R"({
        "name": "t",
        "model": { "zoo": "mlp" },
        "dataset": { "builtin": "fashion-mnist" },
        "optimizer": { "kind": "sgd", "lr": 0.1 },
        "training": { "rounds": 2, "shardsPerRound": 3, "localSteps": 20, "batchSize": 32 },
        "budget": "10"
    })")
        .object();
}

// Sets a value at a dotted path ("training.batchSize"), creating objects on the way.
void setPath(QJsonObject& object, QStringView path, const QJsonValue& value)
{
    const auto dot = path.indexOf(u'.');
    if (dot < 0) {
        if (value.isUndefined())
            object.remove(path.toString());
        else
            object.insert(path.toString(), value);
        return;
    }
    const QString head = path.left(dot).toString();
    QJsonObject child = object.value(head).toObject();
    setPath(child, path.mid(dot + 1), value);
    object.insert(head, child);
}

QByteArray readFile(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", qPrintable(path));
    return file.readAll();
}

} // namespace

class JobSpecTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void examplesAreValid_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("mlp") << QStringLiteral("fashion-mnist-mlp.json");
        QTest::newRow("cnn") << QStringLiteral("fashion-mnist-cnn.json");
        QTest::newRow("gpt") << QStringLiteral("fortunes-gpt.json");
    }
    void examplesAreValid()
    {
        QFETCH(QString, file);
        const auto spec = JobSpec::fromJsonText(readFile(QStringLiteral(TESSERA_SOURCE_DIR "/examples/jobs/") + file));
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        QVERIFY(spec->validate().ok());
        // The examples lead with portable mode: any node checks any other (docs/DETERMINISM.md).
        QCOMPARE(spec->training.determinism, TrainingSpec::Determinism::Portable);
    }

    // make bench's time-to-loss job (bench/lm.sh) is a job the broker takes.
    void theBenchsTimeJobIsValid()
    {
        const auto spec = JobSpec::fromJsonText(readFile(QStringLiteral(TESSERA_SOURCE_DIR "/bench/fortunes-gpt-time.json")));
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        QVERIFY(spec->validate().ok());
        QVERIFY(spec->training.evaluateEvery > 1);
    }

    void defaultsAreFilledIn()
    {
        const auto spec = JobSpec::fromJson(minimalJob());
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        QCOMPARE(spec->model.hidden, (QList<std::int64_t> { 256, 128 }));
        QCOMPARE(spec->training.threads, 1);
        QCOMPARE(spec->training.checkpointInterval, 2); // localSteps / 10
        QCOMPARE(spec->aggregation.method, AggregationSpec::Method::FedAvg);
        QCOMPARE(spec->budget, *Credits::fromCredits(10));
        QCOMPARE(spec->samplesPerShard(), 20000);
        QCOMPARE(spec->training.evaluateEvery, 1); // every round, and the spec says nothing of it
        QVERIFY(!spec->toJson().value(QStringLiteral("training")).toObject().contains(QStringLiteral("evaluateEvery")));
    }

    void roundTripsThroughJson()
    {
        for (const auto& name : { "fashion-mnist-mlp.json", "fashion-mnist-cnn.json" }) {
            const auto spec
                = JobSpec::fromJsonText(readFile(QStringLiteral(TESSERA_SOURCE_DIR "/examples/jobs/") + QLatin1String(name)));
            QVERIFY(spec.ok());
            const auto again = JobSpec::fromJson(spec->toJson());
            QVERIFY2(again.ok(), qPrintable(again.ok() ? QString() : again.error().toString()));
            QCOMPARE(*again, *spec);
        }

        // A TorchScript model on an uploaded tensor dataset.
        JobSpec spec = *JobSpec::fromJson(minimalJob());
        spec.model = ModelSpec {};
        spec.model.source = ModelSpec::Source::TorchScript;
        spec.model.scriptSha256 = Digest::ofBytes("model");
        spec.dataset = DatasetSpec {};
        spec.dataset.source = DatasetSpec::Source::Tensors;
        spec.dataset.trainSha256 = Digest::ofBytes("train");
        spec.dataset.testSha256 = Digest::ofBytes("test");
        spec.dataset.trainSamples = 5000;
        spec.optimizer.kind = OptimizerSpec::Kind::Adam;
        spec.optimizer.lr = 0.001;
        spec.budget = Credits::fromMicro(1);
        spec.training.evaluateEvery = 4;
        const auto again = JobSpec::fromJson(spec.toJson());
        QVERIFY2(again.ok(), qPrintable(again.ok() ? QString() : again.error().toString()));
        QCOMPARE(*again, spec);
    }

    void rejectsWhatCannotRun_data()
    {
        QTest::addColumn<QString>("path");
        QTest::addColumn<QJsonValue>("value");
        QTest::addColumn<QString>("field");
        QTest::addColumn<QString>("words");

        QTest::newRow("zero shards") << "training.shardsPerRound" << QJsonValue(0) << "training.shardsPerRound"
                                     << "between 1";
        QTest::newRow("negative lr") << "optimizer.lr" << QJsonValue(-0.1) << "optimizer.lr"
                                     << "between 0";
        QTest::newRow("zero lr") << "optimizer.lr" << QJsonValue(0) << "optimizer.lr"
                                 << "above 0";
        QTest::newRow("batch larger than a shard") << "training.batchSize" << QJsonValue(30000) << "training.batchSize"
                                                   << "larger than a shard's 20000 samples";
        QTest::newRow("fractional steps") << "training.localSteps" << QJsonValue(2.5) << "training.localSteps"
                                          << "whole number";
        QTest::newRow("string rounds") << "training.rounds" << QJsonValue(QStringLiteral("3")) << "training.rounds"
                                       << "not a string";
        QTest::newRow("missing rounds") << "training.rounds" << QJsonValue(QJsonValue::Undefined) << "training.rounds"
                                        << "required";
        QTest::newRow("unknown model") << "model.zoo" << QJsonValue(QStringLiteral("resnet")) << "model.zoo"
                                       << "not a zoo model";
        QTest::newRow("unknown dataset") << "dataset.builtin" << QJsonValue(QStringLiteral("cifar")) << "dataset.builtin"
                                         << "not a built-in dataset";
        QTest::newRow("typo") << "optimizer.learningRate" << QJsonValue(0.1) << "optimizer.learningRate"
                              << "not a known field";
        QTest::newRow("unknown optimizer") << "optimizer.kind" << QJsonValue(QStringLiteral("lbfgs")) << "optimizer.kind"
                                           << "sgd, adam or adamw";
        QTest::newRow("checkpoint beyond steps")
            << "training.checkpointInterval" << QJsonValue(21) << "training.checkpointInterval"
            << "between 1 and localSteps";
        // A result whose losses and checkpoint hashes could not fit in a broker's message header.
        QTest::newRow("result too large") << "training.localSteps" << QJsonValue(5000) << "training.localSteps"
                                          << "too large for a broker's message";
        QTest::newRow("budget float") << "budget" << QJsonValue(10.5) << "budget"
                                      << "must be a string";
        QTest::newRow("budget zero") << "budget" << QJsonValue(QStringLiteral("0")) << "budget"
                                     << "above 0";
        QTest::newRow("budget precision") << "budget" << QJsonValue(QStringLiteral("0.0000001")) << "budget"
                                          << "6 decimal places";
        QTest::newRow("verification rate") << "verification.rate" << QJsonValue(1.5) << "verification.rate"
                                           << "between 0 and 1";
        QTest::newRow("bad hidden width") << "model.hidden" << QJsonValue(QJsonArray { 64, 0 }) << "model.hidden[1]"
                                          << "between 1";
        QTest::newRow("threads") << "training.threads" << QJsonValue(0) << "training.threads"
                                 << "between 1";
        QTest::newRow("evaluate never") << "training.evaluateEvery" << QJsonValue(0) << "training.evaluateEvery"
                                        << "between 1";
        QTest::newRow("newer format") << "version" << QJsonValue(99) << "version"
                                      << "reads up to format 1";
        QTest::newRow("empty name") << "name" << QJsonValue(QStringLiteral("  ")) << "name"
                                    << "give the job a name";
        QTest::newRow("nesterov without momentum") << "optimizer.nesterov" << QJsonValue(true) << "optimizer.nesterov"
                                                   << "momentum";
        QTest::newRow("script without file or hash")
            << "model.torchscript" << QJsonValue(QJsonObject {}) << "model.torchscript.file"
            << "needs a file";
        QTest::newRow("bad digest") << "model.torchscript.sha256" << QJsonValue(QStringLiteral("abc"))
                                    << "model.torchscript.sha256"
                                    << "64 hex digits";
    }
    void rejectsWhatCannotRun()
    {
        QFETCH(QString, path);
        QFETCH(QJsonValue, value);
        QFETCH(QString, field);
        QFETCH(QString, words);

        QJsonObject json = minimalJob();
        if (path.startsWith(u"model.torchscript"))
            json.insert(QStringLiteral("model"), QJsonObject {});
        setPath(json, path, value);
        const auto spec = JobSpec::fromJson(json);
        QVERIFY2(!spec.ok(), "an invalid job was accepted");
        QCOMPARE(spec.error().field, field);
        QVERIFY2(spec.error().message.contains(words), qPrintable(spec.error().toString()));
    }

    // training.pipeline: a portable, untied zoo gpt whose batch splits into the micro-batches, with
    // at most a stage per block; it reads back as written, its tasks carry the micro-batches, and
    // a broker refuses it (the stages' protocol is not there yet).
    void pipelineJobs()
    {
        const auto json = QJsonDocument::fromJson(R"({
            "name": "lm", "model": { "zoo": "gpt", "context": 64, "tied": false }, "dataset": { "builtin": "fortunes" },
            "optimizer": { "kind": "adamw", "lr": 0.002 },
            "training": { "rounds": 2, "shardsPerRound": 2, "localSteps": 20, "batchSize": 16, "determinism": "portable",
                          "pipeline": { "stages": 2, "microBatches": 4 } },
            "budget": "10"
        })")
                              .object();
        auto spec = JobSpec::fromJson(json);
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        QVERIFY(spec->training.pipelined());
        QCOMPARE(spec->training.pipeline.stages, 2);
        QCOMPARE(*JobSpec::fromJson(spec->toJson()), *spec);
        // What a stage receives in a shard is the record a re-execution reads: at most 1 GiB.
        auto huge = *spec;
        huge.model.context = 1024;
        huge.model.width = 1024;
        huge.training.batchSize = 32;
        QCOMPARE(huge.validate().error().field, QStringLiteral("training.localSteps"));
        huge.training.pipeline.stages = 1; // one node: nothing is recorded
        QVERIFY(huge.validate().ok() || huge.validate().error().field != QStringLiteral("training.localSteps"));
        const auto task = decomposeShard(QStringLiteral("0123456789abcdef"), *spec, 0, 0, Digest::ofBytes("w"));
        QCOMPARE(task.microBatches, 4);
        const auto again = ShardTask::fromJson(task.toJson());
        QVERIFY2(again, qPrintable(again ? QString() : again.error().toString()));
        QCOMPARE(again->microBatches, 4);
        // Its stage tasks: the shard's task naming the stage, read back; a stage past the stages,
        // or stages of a task that is not a portable gpt's, refused.
        const auto stage = stageTaskOf(task, 1, 2);
        QCOMPARE(ShardTask::fromJson(stage.toJson()).value(), stage);
        QCOMPARE(spec->stagesPerShard(), 2);
        QCOMPARE(spec->unitsPerRound(), 4);
        QCOMPARE(ShardTask::fromJson(stageTaskOf(task, 2, 2).toJson()).error().field, QStringLiteral("stage"));
        // A stage re-executed from its recorded inputs names their blob, which it fetches; a task
        // that is no stage has no inputs.
        auto recorded = stage;
        recorded.stageInputs = Digest::ofBytes("inputs");
        QCOMPARE(ShardTask::fromJson(recorded.toJson()).value(), recorded);
        QVERIFY(recorded.inputBlobs().contains(recorded.stageInputs));
        QVERIFY(stage.isLiveStage() && !recorded.isLiveStage());
        auto whole = task;
        whole.stageInputs = recorded.stageInputs;
        QCOMPARE(ShardTask::fromJson(whole.toJson()).error().field, QStringLiteral("stageInputs"));
        // int8 tensors: the job says "tensors": "int8", its stage tasks "stageTensors": "int8"; absent
        // for float32, as before; a job without stages has none to trade.
        auto narrow = *spec;
        narrow.training.pipeline.int8Tensors = true;
        QCOMPARE(narrow.toJson()
                     .value(QStringLiteral("training"))
                     .toObject()
                     .value(QStringLiteral("pipeline"))
                     .toObject()
                     .value(QStringLiteral("tensors")),
            QJsonValue(QStringLiteral("int8")));
        QVERIFY(!spec->toJson()
                     .value(QStringLiteral("training"))
                     .toObject()
                     .value(QStringLiteral("pipeline"))
                     .toObject()
                     .contains(QStringLiteral("tensors")));
        QCOMPARE(*JobSpec::fromJson(narrow.toJson()), narrow);
        const auto narrowStage
            = stageTaskOf(decomposeShard(QStringLiteral("0123456789abcdef"), narrow, 0, 0, Digest::ofBytes("w")), 0, 2);
        QVERIFY(narrowStage.int8StageTensors && !stage.int8StageTensors);
        QCOMPARE(narrowStage.toJson().value(QStringLiteral("stageTensors")), QJsonValue(QStringLiteral("int8")));
        QVERIFY(!stage.toJson().contains(QStringLiteral("stageTensors")));
        QCOMPARE(ShardTask::fromJson(narrowStage.toJson()).value(), narrowStage);
        auto oddTask = narrowStage.toJson();
        oddTask.insert(QStringLiteral("stageTensors"), QStringLiteral("int4"));
        QCOMPARE(ShardTask::fromJson(oddTask).error().field, QStringLiteral("stageTensors"));
        auto thin = narrow; // 4 bytes a position would not pay
        thin.model.width = 4;
        thin.model.heads = 1;
        QCOMPARE(thin.validate().error().field, QStringLiteral("training.pipeline.tensors"));
        narrow.training.pipeline.stages = 1;
        QCOMPARE(narrow.validate().error().field, QStringLiteral("training.pipeline.tensors"));
        narrow.training.pipeline.microBatches = 1; // not pipelined at all: still refused
        QCOMPARE(narrow.validate().error().field, QStringLiteral("training.pipeline.tensors"));
        // Capability pipeline-int8: a node from before int8 tensors is never given such a stage.
        QVERIFY(capabilitiesNeededBy(*spec).contains(capability::Pipeline));
        QVERIFY(!capabilitiesNeededBy(*spec).contains(capability::PipelineInt8));
        auto needsInt8 = *spec;
        needsInt8.training.pipeline.int8Tensors = true;
        QVERIFY(capabilitiesNeededBy(needsInt8).contains(capability::PipelineInt8));
        // A tokens file's vocabulary would decide the embeddings' and the head's memory: named.
        auto tokens = *spec;
        tokens.dataset = DatasetSpec {};
        tokens.dataset.source = DatasetSpec::Source::Tensors;
        tokens.dataset.trainSha256 = Digest::ofBytes("train");
        tokens.dataset.testSha256 = Digest::ofBytes("test");
        QCOMPARE(tokens.validate().error().field, QStringLiteral("model.vocabulary"));
        tokens.model.vocabulary = 512;
        QVERIFY(tokens.validate().ok() || tokens.validate().error().field != QStringLiteral("model.vocabulary"));
        auto tiedStage = stage; // a tied head would span the first and the last stage
        tiedStage.model.tied = true;
        QCOMPARE(tiedStage.validate().error().field, QStringLiteral("stages"));
        auto fast = task;
        fast.portable = false;
        QCOMPARE(fast.validate().error().field, QStringLiteral("microBatches"));
        auto dropped = task; // dropout's streams are a step's: they would repeat in each micro-batch
        dropped.model.dropout = 0.1;
        QCOMPARE(dropped.validate().error().field, QStringLiteral("microBatches"));
        // An unpipelined job writes no field, as before.
        auto plain = json;
        auto training = plain.value(QStringLiteral("training")).toObject();
        training.remove(QStringLiteral("pipeline"));
        plain.insert(QStringLiteral("training"), training);
        QVERIFY(!JobSpec::fromJson(plain)
                     ->toJson()
                     .value(QStringLiteral("training"))
                     .toObject()
                     .contains(QStringLiteral("pipeline")));

        const QList<std::tuple<QString, QJsonValue, QString>> refused {
            { QStringLiteral("training.pipeline.stages"), 5, QStringLiteral("training.pipeline.stages") }, // 4 blocks
            { QStringLiteral("training.pipeline.stages"), 0, QStringLiteral("training.pipeline.stages") },
            { QStringLiteral("training.pipeline.microBatches"), 3, QStringLiteral("training.pipeline.microBatches") },
            { QStringLiteral("training.pipeline.microBatches"), 32, QStringLiteral("training.pipeline.microBatches") },
            { QStringLiteral("training.pipeline.depth"), 2, QStringLiteral("training.pipeline.depth") },
            { QStringLiteral("training.pipeline.tensors"), QStringLiteral("int4"), QStringLiteral("training.pipeline.tensors") },
            { QStringLiteral("training.pipeline.tensors"), 8, QStringLiteral("training.pipeline.tensors") },
            { QStringLiteral("training.determinism"), QStringLiteral("fast"), QStringLiteral("training.determinism") },
            { QStringLiteral("model.tied"), true, QStringLiteral("model.tied") },
            { QStringLiteral("model.zoo"), QStringLiteral("mlp"), QStringLiteral("training.pipeline") },
            // More tensors a shard than the broker counts (20 steps of 16 micro-batches is fine; 10^5 steps are not).
            { QStringLiteral("training.localSteps"), 100000, QStringLiteral("training.pipeline.microBatches") },
        };
        for (const auto& [path, value, field] : refused) {
            auto bad = json;
            setPath(bad, path, value);
            if (path == u"model.zoo") { // an mlp on images
                bad.insert(QStringLiteral("model"), QJsonObject { { QStringLiteral("zoo"), QStringLiteral("mlp") } });
                setPath(bad, u"dataset.builtin", QStringLiteral("fashion-mnist"));
            }
            const auto read = JobSpec::fromJson(bad);
            QVERIFY2(!read, qPrintable(path));
            QVERIFY2(read.error().field == field, qPrintable(read.error().toString()));
        }
    }

    // A stage task's memory (core::estimateStageMemory) is its own parts': a large vocabulary puts
    // the embeddings on the first stage and the head on the last, which hold far more than 1/S of
    // the model; the blocks split as the program is cut; the first stage has the most micro-batches
    // in flight; a carried optimizer state counts the whole model; and no stage counts less than
    // the whole model's weights, which it builds before it lets the others' go.
    void aStageIsEstimatedByItsOwnParts()
    {
        ModelSpec model;
        model.zoo = QStringLiteral("gpt");
        model.vocabulary = 1 << 20;
        model.width = 256;
        model.layers = 16;
        model.context = 64;
        model.heads = 4;
        model.tied = false;
        OptimizerSpec adamw;
        adamw.kind = OptimizerSpec::Kind::AdamW;
        const double width = 256, vocabulary = 1 << 20, block = 12.0 * width * width + 13.0 * width;
        const double all = 16 * block + (vocabulary + 64) * width + 2 * width + vocabulary * width;
        auto stage = [&](std::int64_t s, std::int64_t stages, bool carried = false) {
            return estimateStageMemory(model, adamw, 8, 4, s, stages, carried, 1000);
        };
        const auto whole = estimateShardMemory(model, adamw, 8, std::int64_t(4 * all), 1000);
        QCOMPARE(stage(0, 1).total(), whole.total());
        const auto first = stage(0, 16), middle = stage(7, 16), last = stage(15, 16);
        QVERIFY(first.model >= std::int64_t(32 * (vocabulary + 64) * width)); // the embeddings, AdamW's 8 x 4 bytes
        QVERIFY(last.model >= std::int64_t(32 * vocabulary * width)); // the head
        QCOMPARE(middle.model, std::int64_t(4 * all)); // one block's share is less than the model built whole
        QVERIFY(first.model > 5 * whole.model / 16);
        QCOMPARE(first.dataset, 1000);
        QVERIFY(last.activations > middle.activations); // the logits, 2 x 2^20 floats a position
        QCOMPARE(stage(3, 16, true).model, whole.model);
        const auto largest = estimateLargestStage(model, adamw, 8, 4, 16, false, 1000);
        QCOMPARE(largest.total(), std::max(first.total(), last.total()));
        // Blocks: the earlier stages take one more where they do not divide, as the program is cut.
        QCOMPARE(stageBlocksOf(3, 0, 2), std::make_pair(std::int64_t(0), std::int64_t(2)));
        QCOMPARE(stageBlocksOf(3, 1, 2), std::make_pair(std::int64_t(2), std::int64_t(3)));
        QCOMPARE(stageBlocksOf(16, 15, 16), std::make_pair(std::int64_t(15), std::int64_t(16)));
        // A small vocabulary: two stages' model terms add up to the whole's, and the first stage
        // holds its micro-batches' activations for two in flight, the last for one.
        model.vocabulary = 256;
        const double small = 16 * block + (256 + 64) * width + 2 * width + 256 * width;
        const auto two = estimateShardMemory(model, adamw, 8, std::int64_t(4 * small), 0);
        QVERIFY(std::abs(stage(0, 2).model + stage(1, 2).model - two.model) < 64);
        QVERIFY(stage(0, 2).activations > stage(1, 2).activations);
    }

    // A gpt on the built-in text: defaults, the sample count from the context, the schedule's
    // length from the job, a round trip; what cannot run is refused by field.
    void languageModelJobs()
    {
        auto json = QJsonDocument::fromJson(R"({
            "name": "lm", "model": { "zoo": "gpt", "context": 64 }, "dataset": { "builtin": "fortunes" },
            "optimizer": { "kind": "adamw", "lr": 0.002, "weightDecay": 0.1, "clipNorm": 1.0,
                           "schedule": { "warmupSteps": 10, "minLr": 0.0002 } },
            "training": { "rounds": 5, "shardsPerRound": 2, "localSteps": 20, "batchSize": 16 },
            "aggregation": { "optimizerState": "averaged" }, "budget": "10"
        })")
                        .object();
        auto spec = JobSpec::fromJson(json);
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        QCOMPARE(spec->model.layers, 4);
        QCOMPARE(spec->model.width, 128);
        QVERIFY(spec->model.tied);
        QCOMPARE(spec->trainSamples(), (2'445'380 - 1) / 64);
        QCOMPARE(spec->optimizer.kind, OptimizerSpec::Kind::AdamW);
        QCOMPARE(spec->optimizer.schedule.kind, ScheduleSpec::Kind::Cosine);
        QCOMPARE(spec->optimizer.schedule.totalSteps, 100);
        QCOMPARE(spec->aggregation.optimizerState, AggregationSpec::OptimizerState::Averaged);
        QCOMPARE(*JobSpec::fromJson(spec->toJson()), *spec);
        // Warmup from lr / 10 up to lr, then half way down at the middle of the decay, minLr at the end.
        const auto& o = spec->optimizer;
        QCOMPARE(o.learningRateAt(0), 0.0002);
        QCOMPARE(o.learningRateAt(9), 0.002);
        QVERIFY(qAbs(o.learningRateAt(55) - (0.0002 + 0.0018 / 2)) < 1e-12);
        QCOMPARE(o.learningRateAt(100), 0.0002);
        QCOMPARE(OptimizerSpec {}.learningRateAt(7), OptimizerSpec {}.lr);

        const QList<std::tuple<QString, QJsonValue, QString>> refused {
            { QStringLiteral("dataset.builtin"), QStringLiteral("fashion-mnist"), QStringLiteral("dataset.builtin") },
            { QStringLiteral("model.width"), 102, QStringLiteral("model.width") },
            { QStringLiteral("optimizer.schedule.warmupSteps"), 500, QStringLiteral("optimizer.schedule.warmupSteps") },
            { QStringLiteral("optimizer.schedule.kind"), QStringLiteral("step"), QStringLiteral("optimizer.schedule.kind") },
            { QStringLiteral("model.context"), 1, QStringLiteral("model.context") },
            { QStringLiteral("aggregation.optimizerState"), QStringLiteral("kept"),
                QStringLiteral("aggregation.optimizerState") },
        };
        for (const auto& [path, value, field] : refused) {
            auto bad = json;
            setPath(bad, path, value);
            const auto result = JobSpec::fromJson(bad);
            QVERIFY2(!result.ok(), qPrintable(path));
            QCOMPARE(result.error().field, field);
        }
        auto classifier = minimalJob();
        setPath(classifier, u"dataset.builtin", QStringLiteral("fortunes"));
        QCOMPARE(JobSpec::fromJson(classifier).error().field, QStringLiteral("model.zoo"));
        auto portable = minimalJob(); // the portable kernels: the zoo mlp, cnn and gpt without dropout so far
        setPath(portable, u"training.determinism", QStringLiteral("portable"));
        const auto portableSpec = JobSpec::fromJson(portable);
        QVERIFY2(portableSpec.ok(), qPrintable(portableSpec.ok() ? QString() : portableSpec.error().toString()));
        QCOMPARE(portableSpec->training.determinism, TrainingSpec::Determinism::Portable);
        QCOMPARE(*JobSpec::fromJson(portableSpec->toJson()), *portableSpec);
        setPath(portable, u"model.zoo", QStringLiteral("gpt"));
        setPath(portable, u"model.layers", 1);
        setPath(portable, u"model.heads", 1);
        setPath(portable, u"model.width", 8);
        setPath(portable, u"model.context", 8);
        setPath(portable, u"dataset.builtin", QStringLiteral("fortunes"));
        QVERIFY(JobSpec::fromJson(portable).ok());
        setPath(portable, u"model.dropout", 0.1);
        QCOMPARE(JobSpec::fromJson(portable).error().field, QStringLiteral("training.determinism"));
        setPath(portable, u"training.determinism", QStringLiteral("exact"));
        QCOMPARE(JobSpec::fromJson(portable).error().field, QStringLiteral("training.determinism"));
        auto stateless = minimalJob(); // plain sgd: nothing to average
        setPath(stateless, u"aggregation.optimizerState", QStringLiteral("averaged"));
        QCOMPARE(JobSpec::fromJson(stateless).error().field, QStringLiteral("aggregation.optimizerState"));

        // A TorchScript language model on the text names the context its windows are cut to.
        auto scripted = json;
        scripted.insert(QStringLiteral("model"),
            QJsonObject {
                { QStringLiteral("torchscript"), QJsonObject { { QStringLiteral("file"), QStringLiteral("lm.pt") } } } });
        QCOMPARE(JobSpec::fromJson(scripted).error().field, QStringLiteral("model.context"));
        setPath(scripted, u"model.context", 48);
        const auto withContext = JobSpec::fromJson(scripted);
        QVERIFY2(withContext.ok(), qPrintable(withContext.ok() ? QString() : withContext.error().toString()));
        QCOMPARE(withContext->trainSamples(), (2'445'380 - 1) / 48);
        QCOMPARE(*JobSpec::fromJson(withContext->toJson()), *withContext);
    }

    void reportsJsonSyntaxErrorsWithPosition()
    {
        const auto spec = JobSpec::fromJsonText("{\n  \"name\": \"x\",\n  oops\n}");
        QVERIFY(!spec.ok());
        QVERIFY2(spec.error().message.contains(QStringLiteral("line 3")), qPrintable(spec.error().message));
        QVERIFY(!JobSpec::fromJsonText("[1, 2]").ok());
    }

    void tensorDatasetSizeBoundsTheBatch()
    {
        QJsonObject json = minimalJob();
        json.insert(QStringLiteral("dataset"),
            QJsonObject { { QStringLiteral("tensors"),
                QJsonObject {
                    { QStringLiteral("trainFile"), QStringLiteral("data.pt") }, { QStringLiteral("trainSamples"), 90 } } } });
        const auto spec = JobSpec::fromJson(json);
        QVERIFY(!spec.ok());
        QCOMPARE(spec.error().field, QStringLiteral("training.batchSize"));
        QVERIFY2(
            spec.error().message.contains(QStringLiteral("90 training samples / 3 shards")), qPrintable(spec.error().message));
    }
};

QTEST_GUILESS_MAIN(JobSpecTest)
#include "tst_jobspec.moc"
