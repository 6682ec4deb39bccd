// Inference jobs in core (docs/JOBS.md, "Inference jobs"; docs/DETERMINISM.md, "Inference"): the
// job file, its shards, the lines a node writes and the broker's check of what a node reveals.

#include <core/capabilities.h>
#include <core/decomposition.h>
#include <core/inference/outputs.h>
#include <core/inference/question.h>
#include <core/jobspec.h>
#include <core/pricing.h>
#include <core/shardtask.h>

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

#include <cstdio>
#include <cstdlib>

using namespace tessera::core;

namespace {

const QByteArray Weights = QByteArray(64, 'a');

QJsonObject classifyJob()
{
    return QJsonDocument::fromJson(R"({
        "name": "label", "kind": "inference",
        "model": { "zoo": "mlp", "initialWeights": { "sha256": "6161616161616161616161616161616161616161616161616161616161616161" } },
        "dataset": { "builtin": "fashion-mnist" },
        "inference": { "task": "classify" },
        "budget": "10"
    })")
        .object();
}

QJsonObject generateJob()
{
    return QJsonDocument::fromJson(R"({
        "name": "write", "kind": "inference",
        "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32,
                   "initialWeights": { "sha256": "6161616161616161616161616161616161616161616161616161616161616161" } },
        "dataset": { "builtin": "fortunes" },
        "inference": { "task": "generate", "prompts": { "text": "%\n", "count": 7 }, "maxTokens": 5, "stop": ["%\n"],
                       "samplesPerShard": 3 },
        "budget": "10"
    })")
        .object();
}

QJsonObject serveJob()
{
    auto job = generateJob();
    job.insert(QStringLiteral("inference"),
        QJsonObject { { QStringLiteral("task"), QStringLiteral("serve") }, { QStringLiteral("replicas"), 3 },
            { QStringLiteral("maxTokens"), 50 } });
    return job;
}

QJsonObject with(QJsonObject job, const QString& section, const QString& key, const QJsonValue& value)
{
    auto inner = job.value(section).toObject();
    if (value.isUndefined())
        inner.remove(key);
    else
        inner.insert(key, value);
    job.insert(section, inner);
    return job;
}

ShardTask classifyTask(std::int64_t begin, std::int64_t end)
{
    auto spec = JobSpec::fromJson(classifyJob());
    auto task = decomposeShard(QStringLiteral("0123456789abcdef"), *spec, 0, 0, Digest::ofBytes(Weights));
    task.sampleBegin = begin;
    task.sampleEnd = end;
    task.localSteps = (end - begin + task.batchSize - 1) / task.batchSize;
    return task;
}

QList<QByteArray> classifyLines(std::int64_t begin, std::int64_t end)
{
    QList<QByteArray> lines;
    const float p[3] = { 0.25f, 0.5f, 0.25f };
    for (auto i = begin; i < end; ++i)
        lines.append(inference::classifyLine(i, 1, p, 3, std::int64_t(2)));
    return lines;
}

} // namespace

class InferenceJobsTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aClassifyJobGetsItsDefaultsAndOneRoundOfShards()
    {
        auto spec = JobSpec::fromJson(classifyJob());
        QVERIFY2(spec, qPrintable(spec ? QString() : spec.error().toString()));
        QVERIFY(spec->isInference());
        QCOMPARE(spec->inference.batchSize, 100);
        QCOMPARE(spec->inference.samplesPerShard, 2000);
        QCOMPARE(spec->inferenceInputs(), 10000); // the test split
        QCOMPARE(spec->training.rounds, 1);
        QCOMPARE(spec->training.shardsPerRound, 5);
        QCOMPARE(spec->aggregation.compression, Compression::None);
        // It reads back as it was written, and a training job's fields stay out of it.
        const auto json = spec->toJson();
        QVERIFY(!json.contains(QStringLiteral("training")) && !json.contains(QStringLiteral("optimizer")));
        QCOMPARE(*JobSpec::fromJson(json), *spec);
        QVERIFY(capabilitiesNeededBy(*spec).contains(capability::Inference));
    }

    // inference.determinism portable: its tasks say so, a node needs portable-inference for them
    // (one from before it never gets them), and it reads back as written.
    void aPortableJobNeedsPortableInferenceAndItsTasksSaySo()
    {
        for (const auto& job : { classifyJob(), generateJob(), serveJob() }) {
            auto spec = JobSpec::fromJson(
                with(job, QStringLiteral("inference"), QStringLiteral("determinism"), QStringLiteral("portable")));
            QVERIFY2(spec, qPrintable(spec ? QString() : spec.error().toString()));
            QVERIFY(spec->inference.portable());
            QCOMPARE(*JobSpec::fromJson(spec->toJson()), *spec);
            QVERIFY(capabilitiesNeededBy(*spec).contains(capability::PortableInference));
            QVERIFY(!capabilitiesNeededBy(*spec).contains(capability::Portable)); // that is portable training's
            const QStringList older { capability::Inference, capability::Portable, capability::Serve };
            QCOMPARE(missingCapabilities(older, *spec), QStringList { capability::PortableInference });
            const auto task = decomposeShard(QStringLiteral("0123456789abcdef"), *spec, 0, 0, Digest::ofBytes(Weights));
            QVERIFY(task.portable);
            const auto read = ShardTask::fromJson(task.toJson());
            QVERIFY(read && read->portable && read->inference->portable());
            // A task whose two determinism fields disagree is refused (its lines would be labelled
            // other than they were computed).
            auto split = task;
            split.portable = false;
            const auto refused = ShardTask::fromJson(split.toJson());
            QVERIFY(!refused);
            QCOMPARE(refused.error().field, QStringLiteral("determinism"));
            // Fast, the default, is written as before: no field.
            auto fast = JobSpec::fromJson(job);
            QVERIFY(!fast->toJson().value(QStringLiteral("inference")).toObject().contains(QStringLiteral("determinism")));
            QVERIFY(!decomposeShard(QStringLiteral("0123456789abcdef"), *fast, 0, 0, Digest::ofBytes(Weights)).portable);
        }
    }

    void theExamplesAreValid_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<qint64>("shards");
        QTest::newRow("classify") << QStringLiteral("fashion-mnist-classify.json") << qint64(10);
        QTest::newRow("generate") << QStringLiteral("fortunes-generate.json") << qint64(20);
        QTest::newRow("serve") << QStringLiteral("fortunes-serve.json") << qint64(2); // its replicas
    }
    void theExamplesAreValid()
    {
        QFETCH(QString, file);
        QFETCH(qint64, shards);
        QFile json(QStringLiteral(TESSERA_SOURCE_DIR "/examples/jobs/") + file);
        QVERIFY(json.open(QIODevice::ReadOnly));
        const auto spec = JobSpec::fromJsonText(json.readAll());
        QVERIFY2(spec, qPrintable(spec ? QString() : spec.error().toString()));
        QVERIFY(spec->isInference());
        QVERIFY(spec->inference.portable()); // zoo models: portable, as the training examples
        QCOMPARE(spec->training.shardsPerRound, shards);
    }

    void aBadInferenceJobIsRefusedByField_data()
    {
        QTest::addColumn<QJsonObject>("job");
        QTest::addColumn<QString>("field");
        QTest::newRow("training fields") << with(classifyJob(), QStringLiteral("training"), QStringLiteral("rounds"), 1)
                                         << QStringLiteral("training");
        QTest::newRow("shards not of whole batches") << with(classifyJob(), QStringLiteral("inference"),
            QStringLiteral("samplesPerShard"), 150) << QStringLiteral("inference.samplesPerShard");
        QTest::newRow("no weights") << with(classifyJob(), QStringLiteral("model"), QStringLiteral("initialWeights"),
            QJsonValue()) << QStringLiteral("model.initialWeights");
        QTest::newRow("an unknown task") << with(classifyJob(), QStringLiteral("inference"), QStringLiteral("task"),
            QStringLiteral("translate")) << QStringLiteral("inference.task");
        QTest::newRow("a split for prompts") << with(generateJob(), QStringLiteral("inference"), QStringLiteral("split"),
            QStringLiteral("test")) << QStringLiteral("inference.split");
        QTest::newRow("generate without prompts") << with(generateJob(), QStringLiteral("inference"), QStringLiteral("prompts"),
            QJsonValue()) << QStringLiteral("inference.prompts");
        QTest::newRow("prompts for classify") << with(classifyJob(), QStringLiteral("inference"), QStringLiteral("maxTokens"), 5)
                                              << QStringLiteral("inference.maxTokens");
        QTest::newRow("a batch for generate") << with(generateJob(), QStringLiteral("inference"), QStringLiteral("batchSize"), 4)
                                              << QStringLiteral("inference.batchSize");
        QTest::newRow("too many tokens") << with(generateJob(), QStringLiteral("inference"), QStringLiteral("maxTokens"), 5000)
                                         << QStringLiteral("inference.maxTokens");
        QTest::newRow("a long stop") << with(
            generateJob(), QStringLiteral("inference"), QStringLiteral("stop"), QJsonArray { QString(33, u'x') })
                                     << QStringLiteral("inference.stop");
        QTest::newRow("a vocabulary beyond bytes") << with(generateJob(), QStringLiteral("model"), QStringLiteral("vocabulary"),
            1000) << QStringLiteral("model.vocabulary");
        auto classifyGpt = generateJob();
        classifyGpt.insert(QStringLiteral("inference"), QJsonObject { { QStringLiteral("task"), QStringLiteral("classify") } });
        QTest::newRow("classify with a gpt") << classifyGpt << QStringLiteral("inference.task");
        auto scoreMlp = with(classifyJob(), QStringLiteral("inference"), QStringLiteral("task"), QStringLiteral("score"));
        QTest::newRow("score with a classifier") << scoreMlp << QStringLiteral("inference.task");
        QTest::newRow("prompts for serve") << with(serveJob(), QStringLiteral("inference"), QStringLiteral("prompts"),
            QJsonObject { { QStringLiteral("text"), QStringLiteral("a") } })
                                           << QStringLiteral("inference");
        QTest::newRow("no replicas") << with(serveJob(), QStringLiteral("inference"), QStringLiteral("replicas"), 0)
                                     << QStringLiteral("inference.replicas");
        QTest::newRow("a blink of serving") << with(serveJob(), QStringLiteral("inference"), QStringLiteral("seconds"), 5)
                                            << QStringLiteral("inference.seconds");
        QTest::newRow("a check share above 1") << with(serveJob(), QStringLiteral("inference"), QStringLiteral("checkShare"), 1.5)
                                               << QStringLiteral("inference.checkShare");
        QTest::newRow("a served classifier") << with(classifyJob(), QStringLiteral("inference"), QStringLiteral("task"),
            QStringLiteral("serve")) << QStringLiteral("model");
        auto servedScript = serveJob();
        servedScript.insert(QStringLiteral("model"),
            QJsonObject { { QStringLiteral("torchscript"), QJsonObject { { QStringLiteral("sha256"), QString(64, u'a') } } },
                { QStringLiteral("context"), 32 } });
        QTest::newRow("a served TorchScript model") << servedScript << QStringLiteral("model");
        QTest::newRow("an unknown determinism") << with(classifyJob(), QStringLiteral("inference"), QStringLiteral("determinism"),
            QStringLiteral("exact")) << QStringLiteral("inference.determinism");
        auto portableScript = generateJob();
        portableScript.insert(QStringLiteral("model"),
            QJsonObject { { QStringLiteral("torchscript"), QJsonObject { { QStringLiteral("sha256"), QString(64, u'a') } } },
                { QStringLiteral("context"), 32 } });
        portableScript
            = with(portableScript, QStringLiteral("inference"), QStringLiteral("determinism"), QStringLiteral("portable"));
        QTest::newRow("a portable TorchScript model") << portableScript << QStringLiteral("inference.determinism");
        QTest::newRow("no prompts") << with(generateJob(), QStringLiteral("inference"), QStringLiteral("prompts"),
            QJsonObject { { QStringLiteral("text"), QStringLiteral("a") }, { QStringLiteral("count"), 0 } })
                                    << QStringLiteral("inference.prompts.count");
    }

    void aBadInferenceJobIsRefusedByField()
    {
        QFETCH(QJsonObject, job);
        QFETCH(QString, field);
        auto spec = JobSpec::fromJson(job);
        QVERIFY2(!spec, "the job was accepted");
        QVERIFY2(spec.error().field.startsWith(field), qPrintable(spec.error().toString()));
    }

    void shardsAreRangesOfWholeBatchesAndTheLastTakesTheRest()
    {
        auto spec = JobSpec::fromJson(generateJob());
        QVERIFY2(spec, qPrintable(spec ? QString() : spec.error().toString()));
        QCOMPARE(spec->training.shardsPerRound, 3);
        const auto tasks = decomposeRound(QStringLiteral("0123456789abcdef"), *spec, 0, Digest::ofBytes(Weights));
        QCOMPARE(tasks.size(), 3);
        QCOMPARE(tasks[2].sampleBegin, 6);
        QCOMPARE(tasks[2].sampleEnd, 7);
        QCOMPARE(tasks[2].localSteps, 1);
        QCOMPARE(tasks[0].checkpointCount(), 4); // the weights, then one per prompt
        QCOMPARE(tasks[0].keptStateCheckpoint(), 0);
        for (const auto& task : tasks) {
            QVERIFY2(task.validate(), qPrintable(task.validate() ? QString() : task.validate().error().toString()));
            auto again = ShardTask::fromJson(task.toJson());
            QVERIFY(again);
            QCOMPARE(*again, task);
        }
        // A task whose range does not start on a batch, or whose steps are not its batches, is refused.
        auto classify = classifyTask(50, 150);
        QCOMPARE(classify.validate().error().field, QStringLiteral("sampleBegin"));
        classify = classifyTask(100, 150);
        QVERIFY(classify.validate()); // the last shard may hold less than a batch
        classify.localSteps = 2;
        QCOMPARE(classify.validate().error().field, QStringLiteral("localSteps"));
    }

    void aPromptsFileTravelsOnlyAsItsHash()
    {
        auto job = with(generateJob(), QStringLiteral("inference"), QStringLiteral("prompts"),
            QJsonObject { { QStringLiteral("file"), QStringLiteral("/etc/passwd") }, { QStringLiteral("count"), 7 } });
        auto spec = JobSpec::fromJson(job);
        QVERIFY(spec);
        QCOMPARE(forgetLocalFiles(*spec).error().field, QStringLiteral("inference.prompts.sha256"));
        spec->inference.promptsSha256 = Digest::ofBytes("p");
        QVERIFY(forgetLocalFiles(*spec));
        QVERIFY(spec->inference.promptsFile.isEmpty());
        const auto task = decomposeShard(QStringLiteral("0123456789abcdef"), *spec, 0, 0, Digest::ofBytes(Weights));
        QVERIFY(task.inputBlobs().contains(Digest::ofBytes("p")));
    }

    void generateIsPricedPerPositionItReads()
    {
        auto spec = JobSpec::fromJson(generateJob());
        const auto parameters = zooParameterCount(*spec).value_or(0);
        QVERIFY(parameters > 0);
        // A prefill of the context and one position a token (5 tokens fit the context of 32), 2 x
        // parameters each and the attention; past the context, the context a token.
        QVERIFY(trainingFlopsPerSample(*spec, parameters) >= (32.0 + 5.0) * 2.0 * double(parameters));
        QVERIFY(trainingFlopsPerSample(*spec, parameters) < (32.0 + 6.0) * 2.0 * double(parameters) * 1.5);
        auto longer = *spec;
        longer.inference.maxTokens = 40;
        QVERIFY(trainingFlopsPerSample(longer, parameters) >= (32.0 + 32.0 + 8.0 * 32.0) * 2.0 * double(parameters));
        auto price = quote(*spec, parameters, Credits::fromMicro(1));
        QVERIFY(price);
        QCOMPARE(price->shards, 3);
    }

    // A served job (docs/JOBS.md, "Served models"): its replicas are its shards, each a task of
    // one input that a node hosts, and its price is per token, from one position's FLOPs.
    void aServedJobHasReplicasAndAPricePerToken()
    {
        auto spec = JobSpec::fromJson(serveJob());
        QVERIFY2(spec, qPrintable(spec ? QString() : spec.error().toString()));
        QVERIFY(spec->inference.serves());
        QCOMPARE(spec->inference.replicas, 3);
        QCOMPARE(spec->inference.seconds, 3600);
        QCOMPARE(spec->inference.checkShare, 0.05);
        QCOMPARE(spec->training.shardsPerRound, 3);
        QCOMPARE(*JobSpec::fromJson(spec->toJson()), *spec);
        QVERIFY(capabilitiesNeededBy(*spec).contains(capability::Serve));
        const auto parameters = zooParameterCount(*spec).value_or(0);
        const auto price = quote(*spec, parameters, Credits::fromMicro(10'000));
        QVERIFY(price);
        QVERIFY(price->pricePerToken.micro() >= 1);
        QCOMPARE(price->total, Credits {}); // it pays as it answers
        for (std::int64_t shard = 0; shard < 3; ++shard) {
            const auto task = decomposeShard(QStringLiteral("0123456789abcdef"), *spec, 0, shard, Digest::ofBytes(Weights));
            QVERIFY2(task.validate(), qPrintable(task.validate() ? QString() : task.validate().error().toString()));
            QCOMPARE(task.sampleBegin, 0);
            QCOMPARE(task.sampleEnd, 1);
            // An answer is the generate line of its one prompt.
            inference::Question question;
            question.prompt = "Tell me";
            question.maxTokens = 7;
            const auto answer = inference::answerTask(task, question);
            QVERIFY(answer.validate());
            QCOMPARE(answer.inference->task, InferenceSpec::Task::Generate);
            QCOMPARE(answer.inference->promptText, QByteArray("Tell me"));
            QVERIFY(inference::checkLines(answer, { inference::generateLine(0, { 1, 2, 3, 4, 5, 6, 7 }, false) }));
            QVERIFY(!inference::checkLines(answer, { inference::generateLine(0, { 1, 2 }, false) }));
        }
        // A question is read with the job's maxTokens as its bound, and its fields by name.
        QVERIFY(!inference::Question::read(
            { { QStringLiteral("prompt"), QStringLiteral("a") }, { QStringLiteral("maxTokens"), 51 } }, 50));
        QVERIFY(!inference::Question::read({ { QStringLiteral("prompt"), QString() } }, 50));
        QVERIFY(!inference::Question::read(
            { { QStringLiteral("prompt"), QStringLiteral("a") }, { QStringLiteral("tokens"), 5 } }, 50));
        const auto question = inference::Question::read({ { QStringLiteral("prompt"), QStringLiteral("a") } }, 50);
        QVERIFY(question);
        QCOMPARE(*inference::Question::read(question->toJson(), 50), *question);
    }

    void linesAreWrittenExactly()
    {
        const float p[2] = { 0.1f, 0.9f };
        QCOMPARE(inference::classifyLine(3, 1, p, 2, std::int64_t(1)),
            QByteArray(R"({"index":3,"class":1,"probabilities":[0.100000001,0.899999976],"label":1})"));
        QCOMPARE(inference::generateLine(0, { 72, 105 }, true), QByteArray(R"({"index":0,"tokens":[72,105],"finish":"stop"})"));
        QCOMPARE(inference::scoreLine(9, 2.5f, 32), QByteArray(R"({"index":9,"loss":2.5,"tokens":32})"));
        // It is printf("%.9g") exactly, which gives every float32 back.
        for (const float value : { 1e-45f, 3.14159274f, 0.1f, 1.0f / 3.0f, 123456789.0f, 1e-7f, 0.0f, 1.0f, 2.5e-5f, 1e30f }) {
            const auto text = inference::formatFloat(value);
            char printed[32];
            std::snprintf(printed, sizeof printed, "%.9g", double(value));
            QCOMPARE(text, QByteArray(printed));
            QCOMPARE(std::strtof(text.constData(), nullptr), value);
        }
    }

    void theBrokerAcceptsOnlyLinesThatAreTheTasksInputsAndItsChain()
    {
        const auto task = classifyTask(100, 250);
        const auto lines = classifyLines(100, 250);
        const auto chain = inference::chainOf(task.startWeights, lines, task.batchSize);
        QVERIFY(inference::checkRevealed(task, inference::blobOf(lines), chain));

        auto refused = [&](const QByteArray& blob, const QList<Digest>& signedChain, const QString& why) {
            const auto status = inference::checkRevealed(task, blob, signedChain);
            QVERIFY2(!status, qPrintable(why));
            QVERIFY2(status.error().message.contains(why), qPrintable(status.error().message));
        };
        auto changed = lines;
        changed[7].replace("\"class\":1", "\"class\":2");
        refused(inference::blobOf(changed), chain, QStringLiteral("batch 0 (inputs from 100) do not hash to the chain"));
        QCOMPARE(
            inference::checkRevealed(task, inference::blobOf(changed), chain).error().field, QStringLiteral("weightsSha256"));
        refused(inference::blobOf(lines.mid(1)), inference::chainOf(task.startWeights, lines.mid(1), task.batchSize),
            QStringLiteral("lines for"));
        refused(inference::blobOf(lines).chopped(1), chain, QStringLiteral("newline"));
        auto swapped = lines;
        swapped.swapItemsAt(0, 1);
        refused(inference::blobOf(swapped), inference::chainOf(task.startWeights, swapped, task.batchSize),
            QStringLiteral("not input 100"));
        // Lines that hash to a chain made for them, but are not lines of the task's kind.
        for (const auto& bad : { QByteArray(R"({"index":100,"class":3,"probabilities":[0.2,0.3,0.5]})"),
                 QByteArray(R"({"index":100,"class":0,"probabilities":[1.5,0.3,0.5]})"),
                 QByteArray(R"({"index":100,"class":0,"probabilities":[0.2,0.3]})"),
                 QByteArray(R"({"index":100,"tokens":[1],"finish":"stop"})"), QByteArray("not json"),
                 QByteArray(R"({"index":100,"class":0,"probabilities":[0.2,0.3,0.5],"extra":1})"),
                 QByteArray(R"({"index":100,"class":0,"probabilities":[0.2,0.3,0.5],"label":1})") }) {
            auto made = lines;
            made[0] = bad;
            const auto status = inference::checkRevealed(
                task, inference::blobOf(made), inference::chainOf(task.startWeights, made, task.batchSize));
            QVERIFY2(!status, bad.constData());
            // Refused as a line's form, which no honest node sends and which costs no stake.
            QCOMPARE(status.error().field, inference::FormField);
        }
    }

    void generateLinesMustEndAsTheirFinishSays()
    {
        auto spec = JobSpec::fromJson(generateJob());
        const auto task = decomposeShard(QStringLiteral("0123456789abcdef"), *spec, 0, 2, Digest::ofBytes(Weights));
        auto check = [&](const QByteArray& line) {
            return bool(inference::checkRevealed(task, line + '\n', inference::chainOf(task.startWeights, { line }, 1)));
        };
        QVERIFY(check(inference::generateLine(6, { 1, 2, 3, 4, 5 }, false)));
        QVERIFY(check(inference::generateLine(6, { 1, 2 }, true)));
        QVERIFY(!check(inference::generateLine(6, { 1, 2 }, false))); // length before maxTokens
        QVERIFY(!check(inference::generateLine(6, { 1, 2, 3, 4, 5 }, true))); // a stop that left no room for its bytes
        QVERIFY(!check(inference::generateLine(6, { 1, 300 }, true))); // not a byte
    }

    void summariesTextAndTolerance()
    {
        const float right[2] = { 0.2f, 0.8f }, wrong[2] = { 0.7f, 0.3f };
        const QByteArray blob = inference::blobOf({ inference::classifyLine(0, 1, right, 2, std::int64_t(1)),
            inference::classifyLine(1, 0, wrong, 2, std::int64_t(1)) });
        auto summary = inference::summarize(InferenceSpec::Task::Classify, blob);
        QVERIFY(summary);
        QCOMPARE(summary->labelled, 2);
        QCOMPARE(summary->accuracy(), 0.5);

        const auto generated = inference::blobOf({ inference::generateLine(0, { 72, 105, 0xC3 }, true) });
        const auto text = inference::withText(generated);
        QCOMPARE(text, QByteArray("{\"index\":0,\"tokens\":[72,105,195],\"finish\":\"stop\",\"text\":\"Hi\xEF\xBF\xBD\"}\n"));
        QCOMPARE(inference::withText(blob), blob); // classify lines are left alone

        const float near[2] = { 0.2005f, 0.7995f };
        QVERIFY(inference::agreeWithin(InferenceSpec::Task::Classify, inference::classifyLine(0, 1, right, 2, std::nullopt),
            inference::classifyLine(0, 1, near, 2, std::nullopt)));
        QVERIFY(!inference::agreeWithin(InferenceSpec::Task::Classify, inference::classifyLine(0, 1, right, 2, std::nullopt),
            inference::classifyLine(0, 0, near, 2, std::nullopt)));
        QCOMPARE(inference::firstDifferingToken(
                     inference::generateLine(0, { 1, 2, 3 }, false), inference::generateLine(0, { 1, 2, 4 }, false)),
            2);
        QCOMPARE(inference::firstDifferingToken(
                     inference::generateLine(0, { 1, 2 }, false), inference::generateLine(0, { 1, 2 }, false)),
            -1);
    }
};

QTEST_GUILESS_MAIN(InferenceJobsTest)
#include "tst_inferencejobs.moc"
