// What job owners bring from PyTorch: TorchScript models, tensor files and weights files made by
// Python, read and trained on; and what is hostile or broken in them, refused with a clear message.

#include "computetesting.h"

using namespace tessera;
using namespace tessera::computetests;

class PyTorchFilesTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_fixtures;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_fixtures.isValid());
        QVERIFY2(makeFixtures(m_fixtures.path()), "could not make the PyTorch fixtures");
    }

    void trainsATorchScriptModelFromPyTorch()
    {
        auto spec = smallJob();
        spec.model = core::ModelSpec {};
        spec.model.source = core::ModelSpec::Source::TorchScript;
        spec.model.scriptFile = m_fixtures.filePath(QStringLiteral("scripted.pt"));
        spec.training.localSteps = 40;
        spec.training.checkpointInterval = 10;
        const auto prepared = prepare(spec);
        const auto output = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
        QVERIFY2(output.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(output.result.failure));
        const auto& losses = output.result.losses;
        const double early = std::accumulate(losses.begin(), losses.begin() + 5, 0.0) / 5;
        const double late = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
        QVERIFY2(late < early * 0.8, qPrintable(QStringLiteral("loss %1 -> %2").arg(early).arg(late)));
        const auto names = unpickle(output.weights);
        QCOMPARE(names.front().first, std::string("head.bias"));
        QCOMPARE(compute::runShard(prepared.tasks[0], prepared.start.bytes, {}).result.finalHash, output.result.finalHash);
    }

    // A language model of the owner's own, in TorchScript with the sequence contract, trains on the
    // built-in text cut to its context and on a tokens file, its loss and test figures per token.
    void trainsATorchScriptLanguageModelFromPyTorch()
    {
        auto spec = smallGpt();
        spec.model = core::ModelSpec {};
        spec.model.source = core::ModelSpec::Source::TorchScript;
        spec.model.scriptFile = m_fixtures.filePath(QStringLiteral("scripted_lm.pt"));
        QCOMPARE(spec.validate().error().field, QStringLiteral("model.context"));
        spec.model.context = 32;
        QVERIFY(spec.validate().ok());
        QCOMPARE(spec.trainSamples(), 2'445'379 / 32);
        const auto prepared = prepare(spec);
        compute::ShardOutput output;
        const QString failed = learnsTheText(prepared, 0.5, output);
        QVERIFY2(failed.isEmpty(), qPrintable(failed));
        const auto& losses = output.result.losses;
        const auto evaluation = compute::evaluate(spec, output.weights, {}, 1);
        QVERIFY(evaluation.ok());
        QCOMPARE(evaluation->samples, 4'102); // the test stream's 131,296 bytes in windows of 32
        QVERIFY2(evaluation->loss < losses.first() - 1.0 && evaluation->accuracy > 0.1,
            qPrintable(QStringLiteral("test loss %1, token accuracy %2").arg(evaluation->loss).arg(evaluation->accuracy)));

        spec.dataset = core::DatasetSpec {};
        spec.dataset.source = core::DatasetSpec::Source::Tensors;
        spec.dataset.trainFile = m_fixtures.filePath(QStringLiteral("tokens.pt"));
        spec.dataset.trainSamples = 300;
        spec.model.context = 0;
        QVERIFY(spec.validate().ok());
        const auto onTokens = prepare(spec);
        const auto fromFile = compute::runShard(onTokens.tasks[0], onTokens.start.bytes, {});
        QVERIFY2(fromFile.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(fromFile.result.failure));
        QVERIFY2(fromFile.result.losses.last() < fromFile.result.losses.first() - 1.0,
            qPrintable(QStringLiteral("loss %1 -> %2").arg(fromFile.result.losses.first()).arg(fromFile.result.losses.last())));
    }

    void trainsOnATensorFileFromPyTorch()
    {
        auto spec = smallJob();
        spec.dataset = core::DatasetSpec {};
        spec.dataset.source = core::DatasetSpec::Source::Tensors;
        spec.dataset.trainFile = m_fixtures.filePath(QStringLiteral("tensors.pt"));
        spec.dataset.testFile = m_fixtures.filePath(QStringLiteral("tensors_test.pt"));
        spec.dataset.trainSamples = 600;
        spec.model.hidden = { 16 };
        spec.training.rounds = 3;
        spec.training.shardsPerRound = 2;
        spec.training.localSteps = 30;
        spec.training.checkpointInterval = 10;
        QVERIFY(spec.validate().ok());
        const auto output = compute::runJobLocally(spec, {});
        QVERIFY2(output.ok(), qPrintable(output.ok() ? QString() : output.error().toString()));
        QCOMPARE(output->rounds.size(), 3);
        QCOMPARE(output->rounds.last().evaluation.samples, 200);
        QVERIFY2(output->rounds.last().evaluation.accuracy > 0.9,
            qPrintable(QString::number(output->rounds.last().evaluation.accuracy)));
        // The same job again ends on the same bits.
        QCOMPARE(compute::runJobLocally(spec, {})->finalWeights.canonicalHash, output->finalWeights.canonicalHash);

        spec.dataset.trainSamples = 601;
        const auto wrongCount = compute::runJobLocally(spec, {});
        QVERIFY(!wrongCount.ok());
        QVERIFY2(wrongCount.error().message.contains(QStringLiteral("holds 600")), qPrintable(wrongCount.error().toString()));
    }

    // Model and data files from job owners are programs and pickles: the ones that would reach
    // outside their tensors are refused before any of their code runs (docs/SECURITY.md).
    // Weights saved by PyTorch in any mapping of names to tensors read the same: a plain dict,
    // state_dict()'s OrderedDict, nn.Parameters, protocol 4, views, every dtype. The expected hashes
    // were computed in Python from docs/DETERMINISM.md alone.
    void readsWeightsFromAnyPyTorchMapping()
    {
        const auto expected = QJsonDocument::fromJson(readAll(m_fixtures.filePath(QStringLiteral("weights.json")))).object();
        QCOMPARE(expected.size(), 6);
        for (auto it = expected.begin(); it != expected.end(); ++it) {
            const auto hash = compute::canonicalHashOf(readAll(m_fixtures.filePath(it.key())));
            QVERIFY2(hash, qPrintable(it.key() + QStringLiteral(": ") + (hash ? QString() : hash.error().toString())));
            QVERIFY2(hash->toHex() == it.value().toString(), qPrintable(it.key()));
            // The supervisor's reader, without LibTorch, agrees.
            const auto withoutTorch = compute::pickle::canonicalHash(readAll(m_fixtures.filePath(it.key())));
            QVERIFY2(withoutTorch && *withoutTorch == *hash, qPrintable(it.key()));
        }
        // A dataset saved as an OrderedDict is read too.
        auto spec = smallJob();
        auto prepared = prepare(spec);
        auto task = prepared.tasks[0];
        task.dataset = core::DatasetSpec {};
        task.dataset.source = core::DatasetSpec::Source::Tensors;
        task.dataset.trainFile = m_fixtures.filePath(QStringLiteral("tensors_ordered.pt"));
        task.dataset.trainSamples = 8;
        task.sampleBegin = 0;
        task.sampleEnd = 8;
        task.batchSize = 4;
        task.model.hidden = { 8 };
        task.startWeights = {};
        spec.dataset = task.dataset;
        spec.model = task.model;
        auto start = compute::initialWeights(spec, {});
        QVERIFY2(start, qPrintable(start ? QString() : start.error().toString()));
        task.startWeights = start->canonicalHash;
        const auto output = compute::runShard(task, start->bytes, {});
        QVERIFY2(output.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(output.result.failure));
    }

    // The broker bounds and prices zoo models from arithmetic (core::zooParameterCount): it must
    // count what compute builds.
    void theBrokersParameterCountIsTheBuiltModels()
    {
        for (const auto& [zoo, hidden, channels] :
            { std::tuple { "mlp", QList<std::int64_t> { 256, 128 }, QList<std::int64_t> {} },
                std::tuple { "mlp", QList<std::int64_t> { 7 }, QList<std::int64_t> {} },
                std::tuple { "mlp", QList<std::int64_t> { 5, 6, 7 }, QList<std::int64_t> {} },
                std::tuple { "cnn", QList<std::int64_t> { 128 }, QList<std::int64_t> { 16, 32 } },
                std::tuple { "cnn", QList<std::int64_t> { 20 }, QList<std::int64_t> { 4, 8 } } }) {
            core::JobSpec spec;
            spec.model.zoo = QString::fromLatin1(zoo);
            spec.model.hidden = hidden;
            spec.model.channels = channels;
            spec.dataset.builtin = QStringLiteral("fashion-mnist");
            auto built = compute::initialWeights(spec, {});
            QVERIFY2(built, qPrintable(built ? QString() : built.error().toString()));
            auto counted = compute::elementCount(built->bytes);
            QVERIFY(counted);
            QCOMPARE(core::zooParameterCount(spec), std::optional<std::int64_t>(*counted));
        }
        // A TorchScript file is sized from its zip directory, without loading it.
        core::JobSpec scripted = smallJob();
        scripted.model = core::ModelSpec {};
        scripted.model.source = core::ModelSpec::Source::TorchScript;
        scripted.model.scriptFile = m_fixtures.filePath(QStringLiteral("scripted.pt"));
        auto built = compute::initialWeights(scripted, {});
        QVERIFY2(built, qPrintable(built ? QString() : built.error().toString()));
        const auto archive = core::ModelArchive::read(scripted.model.scriptFile);
        QVERIFY2(archive, qPrintable(archive ? QString() : archive.error().toString()));
        QCOMPARE(archive->parameterEstimate(), *compute::elementCount(built->bytes));
        // Anything else is an error, not a count.
        QVERIFY(!core::ModelArchive::read(QStringLiteral(TESSERA_SOURCE_DIR "/examples/jobs/fashion-mnist-mlp.json")).ok());
    }

    void refusesWhatIsNotAMappingOfTensors_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("words");
        QTest::newRow("a list") << "refused_list.pt"
                                << "holds a list, not a dict of tensors";
        QTest::newRow("a dict of dicts") << "refused_nested.pt"
                                         << "'outer' is a dict, not a tensor";
        QTest::newRow("a key that is not a name") << "refused_key.pt"
                                                  << "a key is an int";
        QTest::newRow("a sparse tensor") << "refused_sparse.pt"
                                         << "_rebuild_sparse_tensor";
        QTest::newRow("os.system") << "system.pt"
                                   << "posix.system";
        QTest::newRow("not an archive") << "weights.json"
                                        << "zip archive";
    }

    void refusesWhatIsNotAMappingOfTensors()
    {
        QFETCH(QString, file);
        QFETCH(QString, words);
        const auto hash = compute::canonicalHashOf(readAll(m_fixtures.filePath(file)));
        QVERIFY(!hash);
        QVERIFY2(hash.error().message.contains(words), qPrintable(hash.error().toString()));
        const auto withoutTorch = compute::pickle::canonicalHash(readAll(m_fixtures.filePath(file)));
        QVERIFY(!withoutTorch);
        QVERIFY2(withoutTorch.error().message.contains(words), qPrintable(withoutTorch.error().toString()));
    }

    void refusesHostileModelAndTensorFiles_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("words");
        QTest::newRow("reads and writes files in forward()") << "reads_files.pt"
                                                             << "'from_file'";
        QTest::newRow("writes a file while it loads") << "writes_on_load.pt"
                                                      << "'save'";
        QTest::newRow("starts threads") << "forks.pt"
                                        << "'fork'";
        QTest::newRow("a pickle that calls os.system") << "system.pt"
                                                       << "system";
        QTest::newRow("a model file over 1 GiB") << "huge.pt"
                                                 << "larger than 1 GiB";
        QTest::newRow("a tensor file over 1 GiB") << "system-huge.pt"
                                                  << "larger than 1 GiB";
    }

    void refusesHostileModelAndTensorFiles()
    {
        QFETCH(QString, file);
        QFETCH(QString, words);
        auto spec = smallJob();
        auto prepared = prepare(spec);
        auto task = prepared.tasks[0];
        if (file.contains(u"huge")) { // sparse: the size is there, the bytes are not
            QFile huge(m_fixtures.filePath(file));
            QVERIFY(huge.open(QIODevice::WriteOnly) && huge.resize((qint64(1) << 30) + 1));
        }
        if (file.startsWith(u"system")) {
            task.dataset = core::DatasetSpec {};
            task.dataset.source = core::DatasetSpec::Source::Tensors;
            task.dataset.trainFile = m_fixtures.filePath(file);
            task.dataset.trainSamples = 4;
            task.sampleBegin = 0;
            task.sampleEnd = 4;
            task.batchSize = 2;
        } else {
            task.model = core::ModelSpec {};
            task.model.source = core::ModelSpec::Source::TorchScript;
            task.model.scriptFile = m_fixtures.filePath(file);
            task.startWeights = {};
        }
        const auto output = compute::runShard(task, prepared.start.bytes, {});
        QCOMPARE(output.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(output.result.failure.contains(words), qPrintable(output.result.failure));
        const auto touched = QDir(m_fixtures.path()).entryList({ QStringLiteral("touched-*") });
        QVERIFY2(touched.isEmpty(), qPrintable(touched.join(u' ')));
    }

    void badInputFailsTheShardWithAClearMessage_data()
    {
        QTest::addColumn<QString>("problem");
        QTest::addColumn<QString>("words");
        QTest::newRow("corrupt TorchScript") << "corrupt-script"
                                             << "not a TorchScript model";
        QTest::newRow("input shape mismatch") << "wrong-input"
                                              << "step 1";
        QTest::newRow("model without parameters") << "no-params"
                                                  << "no parameters";
        QTest::newRow("missing dataset") << "missing-dataset"
                                         << "dataset-fashion-mnist";
        QTest::newRow("NaN loss") << "nan"
                                  << "NaN";
        QTest::newRow("start weights of another model") << "wrong-weights"
                                                        << "do not hash";
        QTest::newRow("damaged start weights") << "damaged-weights"
                                               << "not a dict of tensors";
        QTest::newRow("tensor file without y") << "bad-tensors"
                                               << "\"y\"";
        QTest::newRow("CUDA on a CPU-only LibTorch") << "cuda"
                                                     << "this LibTorch build has no CUDA";
        QTest::newRow("unknown device") << "tpu"
                                        << "not a device";
    }

    void badInputFailsTheShardWithAClearMessage()
    {
        QFETCH(QString, problem);
        QFETCH(QString, words);
        auto spec = smallJob();
        ComputeEnvironment environment;
        auto prepared = prepare(spec);
        auto task = prepared.tasks[0];
        QByteArray weights = prepared.start.bytes;

        if (problem == u"corrupt-script" || problem == u"wrong-input" || problem == u"no-params") {
            QString file = m_fixtures.filePath(
                problem == u"wrong-input" ? QStringLiteral("wrong_input.pt") : QStringLiteral("no_params.pt"));
            if (problem == u"corrupt-script") {
                file = m_fixtures.filePath(QStringLiteral("corrupt.pt"));
                QFile corrupt(file);
                QVERIFY(corrupt.open(QIODevice::WriteOnly));
                QByteArray bytes = readAll(m_fixtures.filePath(QStringLiteral("scripted.pt")));
                for (qsizetype i = 100; i < bytes.size(); i += 7)
                    bytes[i] = char(bytes[i] ^ 0x5a);
                corrupt.write(bytes);
            }
            task.model = core::ModelSpec {};
            task.model.source = core::ModelSpec::Source::TorchScript;
            task.model.scriptFile = file;
            task.startWeights = {};
            if (problem == u"wrong-input")
                weights = compute::detail::pickleTensors(
                    { { "fc.bias", torch::zeros({ 10 }) }, { "fc.weight", torch::zeros({ 10, 100 }) } });
        } else if (problem == u"cuda" || problem == u"tpu") {
            environment.device = problem == u"cuda" ? QStringLiteral("cuda:0") : QStringLiteral("tpu");
        } else if (problem == u"missing-dataset") {
            environment.fashionMnistDirectory = QStringLiteral("/nonexistent/fashion-mnist");
        } else if (problem == u"nan") {
            task.optimizer.lr = 100.0;
            task.optimizer.momentum = 0.99;
            task.localSteps = 20;
        } else if (problem == u"wrong-weights") {
            task.startWeights = core::Digest::ofBytes("another model");
        } else if (problem == u"damaged-weights") {
            weights = weights.left(weights.size() / 2);
            task.startWeights = {};
        } else if (problem == u"bad-tensors") {
            c10::Dict<std::string, at::Tensor> onlyX;
            onlyX.insert("x", torch::zeros({ 10, 3 }));
            const auto bytes = torch::pickle_save(c10::IValue(onlyX));
            QFile file(m_fixtures.filePath(QStringLiteral("only_x.pt")));
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write(bytes.data(), qint64(bytes.size()));
            file.close();
            task.dataset = core::DatasetSpec {};
            task.dataset.source = core::DatasetSpec::Source::Tensors;
            task.dataset.trainFile = file.fileName();
            task.dataset.trainSamples = 10;
            task.sampleBegin = 0;
            task.sampleEnd = 10;
            task.batchSize = 5;
        }

        const auto output = compute::runShard(task, weights, environment);
        QCOMPARE(output.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(output.result.failure.contains(words), qPrintable(output.result.failure));
        QVERIFY(output.weights.isEmpty());

        // The engine keeps serving: a good shard right after trains normally.
        const auto good = compute::runShard(prepared.tasks[1], prepared.start.bytes, {});
        QCOMPARE(good.result.outcome, core::ShardResult::Outcome::Completed);
    }
};

QTEST_GUILESS_MAIN(PyTorchFilesTest)
#include "tst_pytorchfiles.moc"
