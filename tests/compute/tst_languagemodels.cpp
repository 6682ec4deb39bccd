// Language models: a gpt learns the fortunes text as PyTorch's would, fine-tuning starts from the
// owner's weights, and sampled text depends only on the seed.

#include "computetesting.h"

using namespace tessera;
using namespace tessera::computetests;

class LanguageModelTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_fixtures;
    QTemporaryDir m_scratch; // the workers' scratch folders

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_fixtures.isValid());
        QVERIFY2(makeFixtures(m_fixtures.path()), "could not make the PyTorch fixtures");
    }

    // The zoo gpt learns the fortunes text (from ln 256 = 5.55 nats per byte at the start), the same
    // way every time, and is the transformer a PyTorch user writes: its state dict loads into a
    // nanoGPT-style module that computes the same logits. The text is cut as documented.
    void aGptLearnsTheFortunesTextAndIsPyTorchs()
    {
        const auto spec = smallGpt();
        QVERIFY(spec.validate().ok());
        const auto prepared = prepare(spec);
        compute::ShardOutput output;
        const QString failed = learnsTheText(prepared, 0.3, output);
        QVERIFY2(failed.isEmpty(), qPrintable(failed));
        const auto& losses = output.result.losses;

        const auto evaluation = compute::evaluate(spec, output.weights, {}, 1);
        QVERIFY(evaluation.ok());
        QVERIFY2(evaluation->loss < losses.first() && evaluation->accuracy > 0.1,
            qPrintable(QStringLiteral("test loss %1, token accuracy %2").arg(evaluation->loss).arg(evaluation->accuracy)));

        // PyTorch's own gpt on the same weights and tokens.
        auto data = compute::detail::loadDataset(spec.dataset, {}, spec.model.context);
        QVERIFY(data.ok());
        const auto tokens = data->test->x.slice(0, 0, 4);
        auto model = compute::detail::buildModel(spec.model, { spec.model.context }, 256, 0, {});
        QVERIFY(model.ok());
        QVERIFY((*model)->loadState(unpickle(output.weights)).ok());
        (*model)->setTraining(false);
        at::Tensor logits;
        {
            torch::NoGradGuard noGrad;
            logits = (*model)->forward(tokens);
        }
        const auto streams = compute::detail::fortunesStreams(ComputeEnvironment {}.fortunesDirectoryOrDefault());
        QVERIFY(streams.ok());
        auto bytesOf = [](const QByteArray& bytes) {
            return torch::from_blob(const_cast<char*>(bytes.constData()), { bytes.size() }, torch::kUInt8).clone();
        };
        QTemporaryDir dir;
        auto save = [&](const char* name, const c10::Dict<std::string, at::Tensor>& dict) {
            const auto bytes = torch::pickle_save(c10::IValue(dict));
            QFile file(dir.filePath(QLatin1String(name)));
            if (!file.open(QIODevice::WriteOnly))
                return QString();
            file.write(bytes.data(), qint64(bytes.size()));
            return file.fileName();
        };
        auto one = [](const char* key, const at::Tensor& tensor) {
            c10::Dict<std::string, at::Tensor> dict;
            dict.insert(key, tensor);
            return dict;
        };
        c10::Dict<std::string, at::Tensor> streamDict;
        streamDict.insert("train", bytesOf(streams->first));
        streamDict.insert("test", bytesOf(streams->second));
        QFile weightsFile(dir.filePath(QStringLiteral("weights.pt")));
        QVERIFY(weightsFile.open(QIODevice::WriteOnly) && weightsFile.write(output.weights) == output.weights.size());
        weightsFile.close();
        const QString script = dir.filePath(QStringLiteral("gpt.torchscript.pt"));
        QVERIFY(compute::exportTorchScript(spec.model, output.weights, script).ok());
        QString said;
        QVERIFY2(runPython({ scriptPath("reference_gpt.py"), QString::number(spec.model.heads), weightsFile.fileName(),
                               save("tokens.pt", one("tokens", tokens)), save("logits.pt", one("logits", logits)),
                               ComputeEnvironment {}.fortunesDirectoryOrDefault(), save("streams.pt", streamDict), script },
                     &said),
            qPrintable(said));
        QCOMPARE(data->train->size(), spec.trainSamples());
    }

    // model.initialWeights: a job starts from the owner's state dict (zoo and TorchScript models
    // alike); one that does not fit the model is refused with the tensor and the shapes named.
    void fineTuningStartsFromTheOwnersWeights()
    {
        QTemporaryDir dir;
        auto write = [&](const QString& name, const QByteArray& bytes) {
            QFile file(dir.filePath(name));
            if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size())
                qFatal("cannot write %s", qPrintable(name));
            return file.fileName();
        };
        auto spec = smallGpt();
        const auto prepared = prepare(spec);
        const auto trained = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
        QCOMPARE(trained.result.outcome, core::ShardResult::Outcome::Completed);
        spec.model.initialWeightsFile = write(QStringLiteral("trained.pt"), trained.weights);
        const auto started = compute::initialWeights(spec, {});
        QVERIFY2(started.ok(), qPrintable(started.ok() ? QString() : started.error().toString()));
        QCOMPARE(started->canonicalHash, *compute::canonicalHashOf(trained.weights));
        QVERIFY(started->canonicalHash != prepared.start.canonicalHash);

        auto tensors = unpickle(trained.weights);
        auto wider = tensors;
        for (auto& [name, tensor] : wider) {
            if (name == "transformer.wpe.weight")
                tensor = torch::zeros({ 16, 32 });
        }
        auto fewer = tensors;
        fewer.erase(fewer.begin());
        auto more = tensors;
        more.emplace_back("lm_head.weight", torch::zeros({ 256, 32 }));
        const QList<std::pair<NamedTensors, QString>> refused {
            { wider, QStringLiteral("'transformer.wpe.weight' is [16, 32] in the initial weights but [32, 32] in the model") },
            { fewer, QStringLiteral("have no '%1'").arg(QString::fromStdString(tensors.front().first)) },
            { more, QStringLiteral("have 'lm_head.weight', which the model does not") },
        };
        for (const auto& [state, words] : refused) {
            spec.model.initialWeightsFile = write(QStringLiteral("bad.pt"), compute::detail::pickleTensors(state));
            const auto result = compute::initialWeights(spec, {});
            QVERIFY(!result.ok());
            QCOMPARE(result.error().field, QStringLiteral("model.initialWeights"));
            QVERIFY2(result.error().message.contains(words), qPrintable(result.error().message));
        }

        // A TorchScript model starts from the given weights, not from those in its file.
        core::JobSpec scripted = smallJob();
        scripted.model = core::ModelSpec {};
        scripted.model.source = core::ModelSpec::Source::TorchScript;
        scripted.model.scriptFile = m_fixtures.filePath(QStringLiteral("scripted.pt"));
        const auto own = compute::initialWeights(scripted, {});
        QVERIFY(own.ok());
        auto doubled = unpickle(own->bytes);
        for (auto& [name, tensor] : doubled)
            tensor = tensor * 2;
        const auto doubledBytes = compute::detail::pickleTensors(doubled);
        scripted.model.initialWeightsFile = write(QStringLiteral("doubled.pt"), doubledBytes);
        QCOMPARE(compute::initialWeights(scripted, {})->canonicalHash, *compute::canonicalHashOf(doubledBytes));
    }

    // Text from a gpt's weights is the same for the same seed, another for another seed; only a
    // language model writes any.
    void sampledTextDependsOnlyOnTheSeed()
    {
        const auto spec = smallGpt();
        const auto prepared = prepare(spec);
        const auto trained = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
        compute::SampleOptions options;
        options.tokens = 40;
        options.seed = 3;
        const auto first = compute::sampleText(spec.model, trained.weights, options);
        QVERIFY2(first.ok(), qPrintable(first.ok() ? QString() : first.error().toString()));
        QCOMPARE(first->size(), 40);
        QCOMPARE(*compute::sampleText(spec.model, trained.weights, options), *first);
        // In a worker (the desktop app's samples): the same text.
        const auto there = compute::sandbox::sampleInWorker(spec, trained.weights, options, {}, workerOptions(m_scratch));
        QVERIFY2(there, qPrintable(there ? QString() : there.error().toString()));
        QCOMPARE(*there, *first);
        options.seed = 4;
        QVERIFY(*compute::sampleText(spec.model, trained.weights, options) != *first);
        options.temperature = 0.0; // the likeliest token each time: no seed in it
        const auto greedy = compute::sampleText(spec.model, trained.weights, options);
        options.seed = 5;
        QCOMPARE(*compute::sampleText(spec.model, trained.weights, options), *greedy);
        QVERIFY(!compute::sampleText(smallJob().model, trained.weights, options).ok());
    }
};

QTEST_GUILESS_MAIN(LanguageModelTest)
#include "tst_languagemodels.moc"
