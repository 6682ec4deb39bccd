// A shard's training against itself and PyTorch: the same bits twice, checkpoint chains and
// recreated states, the data a shard reads, pause and resume, optimizers and aggregation.

#include "computetesting.h"

using namespace tessera;
using namespace tessera::computetests;

class TrainingTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_scratch; // the workers' scratch folders

private Q_SLOTS:
    void sameTaskTwiceGivesTheSameBits()
    {
        const auto prepared = prepare(smallJob());
        const auto first = compute::runShard(prepared.tasks[1], prepared.start.bytes, {});
        const auto second = compute::runShard(prepared.tasks[1], prepared.start.bytes, {});
        QCOMPARE(first.result.outcome, core::ShardResult::Outcome::Completed);
        QCOMPARE(first.result.finalHash, second.result.finalHash);
        QCOMPARE(first.result.checkpointHashes, second.result.checkpointHashes);
        QCOMPARE(first.result.losses, second.result.losses);
        QCOMPARE(first.weights, second.weights);
        QCOMPARE(*compute::canonicalHashOf(first.weights), first.result.finalHash);
        QCOMPARE(*compute::pickle::canonicalHash(first.weights), first.result.finalHash); // without LibTorch
        QCOMPARE(*compute::pickle::canonicalHash(first.keptState), *compute::canonicalHashOf(first.keptState));
        QCOMPARE(first.result.weightsSha256, core::Digest::ofBytes(first.weights));
    }

    // Tessera writes weights and states as torch::pickle_save does, into the result's buffer
    // without pickle_save's extra copy: the same records, read back bit for bit (torch.load reads
    // them too: the cases below hand such files to Python).
    void weightsFilesAreWhatPickleSaveWrites()
    {
        const NamedTensors tensors { { "a.weight", torch::randn({ 300, 7 }) }, { "a.bias", torch::arange(7) },
            { "meta/step", torch::tensor(std::int64_t(3)) }, { "q", torch::ones({ 5 }, torch::kInt8) } };
        c10::Dict<std::string, at::Tensor> dict;
        for (const auto& [name, tensor] : tensors)
            dict.insert(name, tensor);
        const std::vector<char> theirs = torch::pickle_save(c10::IValue(dict));
        const QByteArray ours = compute::detail::pickleTensors(tensors);
        QVERIFY(std::abs(ours.size() - qsizetype(theirs.size())) < 64);
        auto back = unpickle(ours);
        compute::detail::sortByName(back);
        auto sorted = tensors;
        compute::detail::sortByName(sorted);
        QCOMPARE(back.size(), sorted.size());
        for (std::size_t i = 0; i < back.size(); ++i) {
            QCOMPARE(back[i].first, sorted[i].first);
            QVERIFY(back[i].second.dtype() == sorted[i].second.dtype() && torch::equal(back[i].second, sorted[i].second));
        }
    }

    void checkpointChainHasOneHashPerInterval()
    {
        auto spec = smallJob();
        spec.training.localSteps = 22;
        const auto prepared = prepare(spec);
        const auto output = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
        QCOMPARE(output.result.checkpointHashes.size(), 6); // steps 0, 5, 10, 15, 20, 22
        QCOMPARE(output.result.checkpointHashes.size(), prepared.tasks[0].checkpointCount());
        QCOMPARE(output.result.checkpointHashes.first(), prepared.start.canonicalHash);
        // Later checkpoints hash the whole training state (weights and momentum), not the weights alone.
        QVERIFY(output.result.checkpointHashes.last() != output.result.finalHash);
        // One state is kept for disputes, at the middle interior checkpoint (2 of 1..4).
        QCOMPARE(prepared.tasks[0].keptStateCheckpoint(), 2);
        QVERIFY(!output.keptState.isEmpty());
        QCOMPARE(QSet<core::Digest>(output.result.checkpointHashes.begin(), output.result.checkpointHashes.end()).size(), 6);
        QCOMPARE(output.result.losses.size(), 22);
        QCOMPARE(output.result.samplesProcessed, 22 * 32);
    }

    // A node keeps one state per result and re-creates the others for a dispute: each re-created
    // state is the one the chain committed to (the referee replays the next interval from it and
    // gets the next checkpoint), from the kept state or, without it, from the round's weights.
    void everyCheckpointStateIsRecreatedBitForBit()
    {
        auto spec = smallJob();
        spec.training.localSteps = 22;
        spec.aggregation.compression = core::Compression::Int8;
        const auto prepared = prepare(spec);
        const auto& task = prepared.tasks[0];
        const auto output = compute::runShard(task, prepared.start.bytes, {});
        const auto& chain = output.result.checkpointHashes;
        for (std::int64_t k = 1; k <= 4; ++k) {
            for (const auto& kept : { output.keptState, QByteArray() }) {
                const auto state = compute::recreateState(task, prepared.start.bytes, kept, k, {});
                QVERIFY2(state.ok(), qPrintable(state.ok() ? QString() : state.error().toString()));
                const auto next = compute::replayShard(task, k, *state, chain[k], k + 1, prepared.start.bytes, {});
                QVERIFY2(next.ok(),
                    qPrintable(QStringLiteral("checkpoint %1: %2").arg(k).arg(next.ok() ? QString() : next.error().toString())));
                QCOMPARE(next->checkpoints.first(), chain[k + 1]);
            }
        }
        QVERIFY(!compute::recreateState(task, prepared.start.bytes, output.keptState, 0, {}).ok());
        // The last state too (a dispute over the revealed result needs it), and revealing from it
        // gives what the node revealed.
        const auto last = compute::recreateState(task, prepared.start.bytes, output.keptState, 5, {});
        QVERIFY2(last.ok(), qPrintable(last.ok() ? QString() : last.error().toString()));
        const auto revealed = compute::replayShard(task, 5, *last, chain[5], 5, prepared.start.bytes, {});
        QVERIFY2(revealed.ok(), qPrintable(revealed.ok() ? QString() : revealed.error().toString()));
        QCOMPARE(revealed->weightsHash, output.result.finalHash);
        QVERIFY(!compute::recreateState(task, prepared.start.bytes, output.keptState, 6, {}).ok());
    }

    // The referee's arithmetic: from a kept checkpoint state it re-executes one interval and gets
    // the next checkpoint of the chain; a state that is not the agreed one is refused.
    void aRefereeReplaysOneIntervalFromAKeptCheckpoint()
    {
        auto spec = smallJob();
        spec.training.localSteps = 22;
        const auto prepared = prepare(spec);
        const auto& task = prepared.tasks[0];
        const auto output = compute::runShard(task, prepared.start.bytes, {});
        const auto& chain = output.result.checkpointHashes;

        QCOMPARE(task.keptStateCheckpoint(), 2);
        const auto first = compute::recreateState(task, prepared.start.bytes, output.keptState, 1, {});
        QVERIFY(first.ok());
        auto interval = compute::replayShard(task, 2, output.keptState, chain[2], 3, {}, {});
        QVERIFY2(interval.ok(), qPrintable(interval.ok() ? QString() : interval.error().toString()));
        QCOMPARE(interval->checkpoints, QList<core::Digest>({ chain[3] }));

        auto whole = compute::replayShard(task, 0, prepared.start.bytes, chain[0], 5, {}, {});
        QVERIFY(whole.ok());
        QCOMPARE(whole->checkpoints, chain.mid(1));
        QCOMPARE(whole->weightsHash, output.result.finalHash);
        QCOMPARE(whole->weights, output.weights);

        // The state of another checkpoint, or one that does not hash to the agreed checkpoint.
        QVERIFY(!compute::replayShard(task, 2, *first, chain[2], 3, {}, {}).ok());
        QVERIFY(!compute::replayShard(task, 2, output.keptState, chain[1], 3, {}, {}).ok());
        QVERIFY(!compute::replayShard(task, 2, QByteArray("not a state"), chain[2], 3, {}, {}).ok());
        // Right weights, doctored momentum: the checkpoint covers the optimizer state too.
        auto state = *compute::detail::unpickleTensors(output.keptState, {});
        bool doctored = false;
        for (auto& [name, tensor] : state) {
            if (name.rfind("optimizer/", 0) == 0 && !doctored) {
                tensor = tensor.clone().mul_(2.0);
                doctored = true;
            }
        }
        QVERIFY(doctored);
        const auto forged = compute::detail::pickleTensors(state);
        const auto refused = compute::replayShard(task, 2, forged, chain[2], 3, {}, {});
        QVERIFY(!refused.ok());
        QVERIFY(refused.error().message.contains(QStringLiteral("agreed checkpoint")));
    }

    // Fashion-MNIST stays uint8 in memory (47 MB, not 188 MB of float32); a batch is normalised as
    // it is taken, with the bits the whole set normalised at once would have.
    void builtInImagesStayCompactAndBatchesKeepTheirBits()
    {
        const auto data = compute::detail::loadFashionMnist(ComputeEnvironment {}.fashionMnistDirectoryOrDefault());
        QVERIFY(data.ok());
        const auto& train = *data->train;
        QCOMPARE(train.x.scalar_type(), torch::kUInt8);
        QCOMPARE(train.x.numel() * train.x.element_size(), 60000 * 28 * 28);
        const auto whole = (train.x.to(torch::kFloat32) / 255.0 - 0.2860) / 0.3530;
        const auto index = torch::tensor(std::vector<std::int64_t> { 59999, 0, 17, 4242, 17, 31337, 5 }, torch::kInt64);
        const auto batch = train.samples(index);
        QCOMPARE(batch.scalar_type(), torch::kFloat32);
        QVERIFY(torch::equal(batch, whole.index_select(0, index)));
        QVERIFY(torch::equal(train.slice(100, 1124), whole.slice(0, 100, 1124)));
    }

    void shardsOfARoundReadDifferentData()
    {
        const auto prepared = prepare(smallJob());
        const auto a = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
        const auto b = compute::runShard(prepared.tasks[1], prepared.start.bytes, {});
        QVERIFY(a.result.finalHash != b.result.finalHash);
        QCOMPARE(a.result.checkpointHashes.first(), b.result.checkpointHashes.first());
    }

    void batchesWalkTheSliceOncePerPass()
    {
        core::ShardTask task;
        task.jobId = QStringLiteral("j");
        task.seed = 5;
        task.round = 2;
        task.shard = 1;
        task.sampleBegin = 100;
        task.sampleEnd = 200;
        task.batchSize = 30;
        task.localSteps = 10;
        compute::detail::BatchPlan plan(task, 1000);
        const auto roundOrder = core::seededPermutation(1000, core::deriveSeed(5, { 1, 2 }));
        const QSet<std::int64_t> slice(roundOrder.begin() + 100, roundOrder.begin() + 200);
        std::vector<std::int64_t> stream;
        for (int step = 0; step < 7; ++step) {
            const auto batch = plan.indicesOfStep(step);
            QCOMPARE(batch.size(), std::size_t(30));
            stream.insert(stream.end(), batch.begin(), batch.end());
        }
        for (int pass = 0; pass < 2; ++pass) {
            const QSet<std::int64_t> seen(stream.begin() + pass * 100, stream.begin() + (pass + 1) * 100);
            QCOMPARE(seen, slice); // every sample of the slice once per pass
        }
        QVERIFY(!std::equal(stream.begin(), stream.begin() + 100, stream.begin() + 100)); // passes are reshuffled
    }

    // A chunked dataset (docs/JOBS.md, "Chunked datasets"): a shard loads the chunks its task
    // names and trains; a task that names too few, or a chunk that is not what its manifest says,
    // is refused by field.
    void aChunkedTaskLoadsOnlyItsChunks()
    {
        QTemporaryDir dir;
        core::DatasetManifest manifest;
        manifest.kind = core::DatasetManifest::Kind::Samples;
        manifest.sampleShape = { 4 };
        manifest.classes = 3;
        auto chunkOf = [](std::int64_t first, std::int64_t count) {
            const auto x = torch::arange(first * 4, (first + count) * 4, torch::kFloat32).reshape({ count, 4 }) / 100.0;
            const auto y = torch::arange(first, first + count, torch::kInt64).remainder(3);
            auto bytesOf
                = [](const at::Tensor& t) { return QByteArray(static_cast<const char*>(t.data_ptr()), qsizetype(t.nbytes())); };
            return compute::pickle::writeTensorFile(
                { { QStringLiteral("x"), compute::pickle::DType::Float32, { count, 4 }, bytesOf(x) },
                    { QStringLiteral("y"), compute::pickle::DType::Int64, { count }, bytesOf(y) } });
        };
        for (int i = 0; i < 8; ++i) {
            const QByteArray bytes = chunkOf(i * 50, 50);
            const QString name = QStringLiteral("c%1.pt").arg(i);
            QFile file(dir.filePath(name));
            QVERIFY(file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size());
            manifest.chunks.append({ core::Digest::ofBytes(bytes), 50, bytes.size(), name });
        }
        QFile(dir.filePath(QStringLiteral("c0.pt"))).copy(dir.filePath(QStringLiteral("test.pt")));
        QFile manifestFile(dir.filePath(QStringLiteral("manifest.json")));
        QVERIFY(manifestFile.open(QIODevice::WriteOnly) && manifestFile.write(manifest.toJson()) > 0);
        manifestFile.close();

        auto spec = smallJob();
        spec.model.hidden = { 8 };
        spec.dataset = core::DatasetSpec {};
        spec.dataset.source = core::DatasetSpec::Source::Chunks;
        spec.dataset.manifestFile = manifestFile.fileName();
        spec.dataset.testFile = dir.filePath(QStringLiteral("test.pt"));
        spec.dataset.trainSamples = 400;
        spec.training.batchSize = 8;
        spec.training.localSteps = 4;
        spec.training.checkpointInterval = 2;
        const auto prepared = prepare(spec);
        auto task = prepared.tasks[1];
        task.dataChunks = core::chunksOfTask(task, manifest);
        QVERIFY(task.dataChunks.size() >= 1 && task.dataChunks.size() <= 2); // 32 samples of a slice of 133
        const auto trained = compute::runShard(task, prepared.start.bytes, {});
        QVERIFY2(trained.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(trained.result.failure));

        // A task that reads several chunks holds each where ChunkRows says, with its own rows.
        auto wide = task;
        wide.localSteps = 4;
        wide.batchSize = 30;
        wide.checkpointInterval = 2;
        wide.dataChunks = core::chunksOfTask(wide, manifest);
        QVERIFY(wide.dataChunks.size() >= 2);
        const auto data = compute::detail::loadTaskData(wide, {});
        QVERIFY2(data.ok(), qPrintable(data.ok() ? QString() : data.error().toString()));
        QCOMPARE(data->train->size(), 50 * wide.dataChunks.size());
        for (auto it = data->chunked->start.constBegin(); it != data->chunked->start.constEnd(); ++it) {
            const std::int64_t chunk = it.key();
            const auto expected = torch::arange(chunk * 200, (chunk + 1) * 200, torch::kFloat32).reshape({ 50, 4 }) / 100.0;
            QVERIFY(torch::equal(data->train->x.slice(0, it.value(), it.value() + 50), expected));
            QVERIFY(torch::equal(data->train->y.slice(0, it.value(), it.value() + 50),
                torch::arange(chunk * 50, (chunk + 1) * 50, torch::kInt64).remainder(3)));
        }

        // A task (from a broker that lied) naming a chunk its steps do not read instead of theirs.
        auto unread = std::find_if(manifest.chunks.begin(), manifest.chunks.end(),
            [&](const core::DatasetManifest::Chunk& chunk) { return !task.dataChunks.contains(chunk.sha256); });
        auto wrong = task;
        wrong.dataChunks = { unread->sha256 };
        auto refused = compute::ShardRun::start(wrong, prepared.start.bytes, {});
        QVERIFY(!refused.ok());
        QCOMPARE(refused.error().field, QStringLiteral("dataChunks"));

        // No more than its steps read either: a broker that names more makes the node fetch for nothing.
        auto extra = task;
        extra.dataChunks.append(unread->sha256);
        std::sort(extra.dataChunks.begin(), extra.dataChunks.end(), [&](const core::Digest& x, const core::Digest& y) {
            return manifest.digests().indexOf(x) < manifest.digests().indexOf(y);
        });
        refused = compute::ShardRun::start(extra, prepared.start.bytes, {});
        QVERIFY(!refused.ok());
        QCOMPARE(refused.error().field, QStringLiteral("dataChunks"));

        // A chunk file changed after the manifest was made (train-local reads files, not the blob
        // store): its hash says so.
        const auto read = std::find_if(manifest.chunks.begin(), manifest.chunks.end(),
            [&](const core::DatasetManifest::Chunk& chunk) { return chunk.sha256 == task.dataChunks.first(); });
        QFile replaced(dir.filePath(read->file));
        const QByteArray shorter = chunkOf(0, 49);
        QVERIFY(replaced.open(QIODevice::ReadOnly));
        const QByteArray kept = replaced.readAll();
        replaced.close();
        QVERIFY(replaced.open(QIODevice::WriteOnly) && replaced.write(shorter) == shorter.size());
        replaced.close();
        auto changed = compute::ShardRun::start(task, prepared.start.bytes, {});
        QVERIFY(!changed.ok());
        QVERIFY2(changed.error().message.contains(QStringLiteral("SHA-256 differs")), qPrintable(changed.error().message));

        // A manifest that lies about a chunk's samples (its owner wrote it so): refused when loaded.
        QVERIFY(replaced.open(QIODevice::WriteOnly) && replaced.write(kept) == kept.size());
        replaced.close();
        auto lyingManifest = manifest;
        const qsizetype lied = manifest.digests().indexOf(task.dataChunks.first());
        lyingManifest.chunks[lied].samples = 51;
        lyingManifest.chunks[(lied + 1) % lyingManifest.chunks.size()].samples = 49; // the same corpus size
        QVERIFY(manifestFile.open(QIODevice::WriteOnly | QIODevice::Truncate) && manifestFile.write(lyingManifest.toJson()) > 0);
        manifestFile.close();
        auto lying = task;
        lying.dataChunks = core::chunksOfTask(task, lyingManifest);
        auto loaded = compute::ShardRun::start(lying, prepared.start.bytes, {});
        QVERIFY(!loaded.ok());
        QVERIFY2(
            loaded.error().message.contains(QStringLiteral("holds 50 samples, not the")), qPrintable(loaded.error().message));
    }

    void threadCountIsInTheProfile()
    {
        auto spec = smallJob();
        spec.training.localSteps = 2;
        spec.training.checkpointInterval = 1;
        const auto one = prepare(spec);
        spec.training.threads = 2;
        const auto two = prepare(spec);
        const auto a = compute::runShard(one.tasks[0], one.start.bytes, {});
        const auto b = compute::runShard(two.tasks[0], two.start.bytes, {});
        QVERIFY(a.result.runtimeProfile.contains(QStringLiteral("threads=1")));
        QVERIFY(b.result.runtimeProfile.contains(QStringLiteral("threads=2")));
        QVERIFY(a.result.runtimeProfile != b.result.runtimeProfile);
    }

    void pausedAndResumedShardEndsBitForBitTheSame_data()
    {
        QTest::addColumn<int>("pauseAfter");
        QTest::newRow("before the first step") << 0;
        QTest::newRow("between checkpoints") << 7;
        QTest::newRow("on a checkpoint") << 10;
        QTest::newRow("before the last step") << 19;
    }

    void pausedAndResumedShardEndsBitForBitTheSame()
    {
        QFETCH(int, pauseAfter);
        auto spec = smallJob();
        spec.model.dropout = 0.3; // dropout draws from the step's seed: resume must not disturb it
        spec.optimizer.kind = core::OptimizerSpec::Kind::Adam;
        spec.optimizer.lr = 0.001;
        const auto prepared = prepare(spec);
        const auto& task = prepared.tasks[2];
        const auto straight = compute::runShard(task, prepared.start.bytes, {});

        QByteArray saved;
        {
            auto run = compute::ShardRun::start(task, prepared.start.bytes, {});
            QVERIFY(run.ok());
            for (int i = 0; i < pauseAfter; ++i)
                QVERIFY((*run)->step().ok());
            saved = (*run)->suspend();
        } // the run is gone, as after a restart of the app
        auto resumed = compute::ShardRun::resume(task, saved, {}, compute::ShardRun::StateOrigin::Own, prepared.start.bytes);
        QVERIFY2(resumed.ok(), qPrintable(resumed.ok() ? QString() : resumed.error().toString()));
        QCOMPARE((*resumed)->completedSteps(), pauseAfter);
        while (!(*resumed)->finished())
            QVERIFY((*resumed)->step().ok());
        const auto output = (*resumed)->finish();
        QCOMPARE(output.result.finalHash, straight.result.finalHash);
        QCOMPARE(output.result.checkpointHashes, straight.result.checkpointHashes);
        QCOMPARE(output.result.losses, straight.result.losses);
    }

    void resumeRefusesTheStateOfAnotherShard()
    {
        const auto prepared = prepare(smallJob());
        auto run = compute::ShardRun::start(prepared.tasks[0], prepared.start.bytes, {});
        QVERIFY((*run)->step().ok());
        const auto saved = (*run)->suspend();
        const auto other = compute::ShardRun::resume(prepared.tasks[1], saved, {});
        QVERIFY(!other.ok());
        QVERIFY(other.error().message.contains(QStringLiteral("another shard")));
        QVERIFY(!compute::ShardRun::resume(prepared.tasks[0], QByteArray("garbage"), {}).ok());
    }

    void optimizerMatchesPyTorch_data()
    {
        QTest::addColumn<int>("kind");
        QTest::addColumn<double>("momentum");
        QTest::addColumn<bool>("nesterov");
        QTest::addColumn<double>("weightDecay");
        QTest::addColumn<bool>("cosine"); // warmup 2 of 12 steps, from round 1 (global steps 6..11)
        QTest::addColumn<double>("clip");
        using Kind = core::OptimizerSpec::Kind;
        QTest::newRow("sgd") << int(Kind::Sgd) << 0.0 << false << 0.0 << false << 0.0;
        QTest::newRow("sgd momentum") << int(Kind::Sgd) << 0.9 << false << 0.0 << false << 0.0;
        QTest::newRow("sgd nesterov weight decay") << int(Kind::Sgd) << 0.8 << true << 0.01 << false << 0.0;
        QTest::newRow("adam") << int(Kind::Adam) << 0.0 << false << 0.0 << false << 0.0;
        QTest::newRow("adam weight decay") << int(Kind::Adam) << 0.0 << false << 0.01 << false << 0.0;
        QTest::newRow("adamw") << int(Kind::AdamW) << 0.0 << false << 0.1 << false << 0.0;
        QTest::newRow("adamw cosine clipped") << int(Kind::AdamW) << 0.0 << false << 0.1 << true << 0.5;
        QTest::newRow("sgd cosine clipped") << int(Kind::Sgd) << 0.9 << false << 0.0 << true << 0.5;
    }

    void optimizerMatchesPyTorch()
    {
        QFETCH(int, kind);
        QFETCH(double, momentum);
        QFETCH(bool, nesterov);
        QFETCH(double, weightDecay);
        QFETCH(bool, cosine);
        QFETCH(double, clip);
        auto spec = smallJob();
        spec.training.localSteps = 6;
        spec.training.checkpointInterval = 6;
        spec.optimizer.kind = core::OptimizerSpec::Kind(kind);
        spec.optimizer.lr = kind != int(core::OptimizerSpec::Kind::Sgd) ? 0.002 : 0.05;
        spec.optimizer.momentum = momentum;
        spec.optimizer.nesterov = nesterov;
        spec.optimizer.weightDecay = weightDecay;
        spec.optimizer.clipNorm = clip;
        if (cosine)
            spec.optimizer.schedule = { core::ScheduleSpec::Kind::Cosine, 2, 12, spec.optimizer.lr * 0.1 };
        const auto prepared = prepare(spec);
        auto task = prepared.tasks[0];
        if (cosine)
            task.round = 1; // the schedule counts steps across the job: this shard's are 6..11
        const auto output = compute::runShard(task, prepared.start.bytes, {});
        QCOMPARE(output.result.outcome, core::ShardResult::Outcome::Completed);

        // The same batches and start weights, for PyTorch's own optimizers.
        const auto data = compute::detail::loadFashionMnist(ComputeEnvironment {}.fashionMnistDirectoryOrDefault());
        QVERIFY(data.ok());
        compute::detail::BatchPlan plan(task, data->train->size());
        c10::Dict<std::string, at::Tensor> caseDict;
        for (const auto& [name, tensor] : unpickle(prepared.start.bytes))
            caseDict.insert(key("w/", name), tensor);
        for (int step = 0; step < spec.training.localSteps; ++step) {
            const auto indices = plan.indicesOfStep(step);
            const auto index = torch::tensor(indices, torch::kInt64);
            caseDict.insert(key("x", std::to_string(step)), data->train->samples(index));
            caseDict.insert(key("y", std::to_string(step)), data->train->y.index_select(0, index));
        }
        const auto& o = spec.optimizer;
        const std::pair<const char*, double> settings[] = { { "adam", kind == int(core::OptimizerSpec::Kind::Adam) ? 1.0 : 0.0 },
            { "adamw", kind == int(core::OptimizerSpec::Kind::AdamW) ? 1.0 : 0.0 }, { "lr", o.lr }, { "momentum", o.momentum },
            { "nesterov", o.nesterov ? 1.0 : 0.0 }, { "weight_decay", o.weightDecay }, { "beta1", o.beta1 }, { "beta2", o.beta2 },
            { "eps", o.eps }, { "cosine", cosine ? 1.0 : 0.0 }, { "warmup", double(o.schedule.warmupSteps) },
            { "total", double(o.schedule.totalSteps) }, { "min_lr", o.schedule.minLr }, { "round", double(task.round) },
            { "clip", o.clipNorm } };
        for (const auto& [name, value] : settings)
            caseDict.insert(key("opt/", name), torch::tensor(value, torch::kFloat64));
        const auto bytes = torch::pickle_save(c10::IValue(caseDict));
        QTemporaryDir dir;
        QFile caseFile(dir.filePath(QStringLiteral("case.pt")));
        QVERIFY(caseFile.open(QIODevice::WriteOnly));
        caseFile.write(bytes.data(), qint64(bytes.size()));
        caseFile.close();
        QVERIFY(runPython({ scriptPath("reference_optimizer.py"), caseFile.fileName(), dir.filePath(QStringLiteral("out.pt")) }));

        const auto reference = unpickle(readAll(dir.filePath(QStringLiteral("out.pt"))));
        const auto ours = unpickle(output.weights);
        QCOMPARE(reference.size(), ours.size());
        const auto start = unpickle(prepared.start.bytes);
        for (std::size_t i = 0; i < ours.size(); ++i) {
            QCOMPARE(ours[i].first, reference[i].first);
            const double moved = (ours[i].second - start[i].second).abs().max().item<double>();
            const double difference = (ours[i].second - reference[i].second).abs().max().item<double>();
            QVERIFY2(moved > 1e-4, "the weights did not train");
            QVERIFY2(difference < 1e-5 + 1e-3 * moved,
                qPrintable(QStringLiteral("%1 differs from PyTorch by %2 (it moved %3)")
                               .arg(QString::fromStdString(ours[i].first))
                               .arg(difference)
                               .arg(moved)));
        }
    }

    void aggregationMatchesHandComputedValues()
    {
        auto blob = [](float a, float b) { return compute::detail::pickleTensors({ { "w", torch::tensor({ a, b }) } }); };
        auto values = [&](const QByteArray& bytes) {
            const auto t = unpickle(bytes).front().second;
            return std::pair { t[0].item<float>(), t[1].item<float>() };
        };
        const auto global = blob(1, 2);
        // Shard 7 (3 samples) is listed first: aggregation orders by shard id, weights by samples.
        const QList<compute::ShardUpdate> updates { { 7, 3, blob(1, 6), {} }, { 2, 1, blob(3, 2), {} } };
        // Weighted mean: (1*[3,2] + 3*[1,6]) / 4 = [1.5, 5]. (Without compression: with int8 the
        // step itself is quantised, aShardRevealsItsUpdateAsInt8AsPyTorchComputesIt.)
        core::AggregationSpec fedAvg;
        fedAvg.compression = core::Compression::None;
        auto out = compute::aggregate(fedAvg, global, updates, {});
        QVERIFY(out.ok());
        QCOMPARE(values(out->weights.bytes), (std::pair { 1.5f, 5.0f }));
        QVERIFY(out->outerState.isEmpty());
        // From files, read one shard at a time (the broker's way): the same bytes; a missing file
        // is an error.
        QTemporaryDir dir;
        QList<compute::ShardUpdate> byFile;
        for (const auto& update : updates) {
            QFile file(dir.filePath(QString::number(update.shard)));
            QVERIFY(file.open(QIODevice::WriteOnly) && file.write(update.weights) == update.weights.size());
            byFile.append({ update.shard, update.samples, {}, file.fileName() });
        }
        QCOMPARE(compute::aggregate(fedAvg, global, byFile, {})->weights.bytes, out->weights.bytes);
        byFile[0].weightsFile = dir.filePath(QStringLiteral("gone"));
        QVERIFY(!compute::aggregate(fedAvg, global, byFile, {}).ok());

        fedAvg.outerLr = 0.5; // W - 0.5 * (W - mean) = [1.25, 3.5]
        QCOMPARE(values(compute::aggregate(fedAvg, global, updates, {})->weights.bytes), (std::pair { 1.25f, 3.5f }));

        // Nesterov, mu = 0.9, lr = 1: g = W - mean = [-0.5, -3]; m = g; W' = W - (g + 0.9 m) = [1.95, 7.7].
        core::AggregationSpec nesterov { core::AggregationSpec::Method::Nesterov, 1.0, 0.9, core::Compression::None };
        auto first = compute::aggregate(nesterov, global, updates, {});
        QVERIFY(first.ok());
        const auto [a, b] = values(first->weights.bytes);
        QVERIFY(qAbs(a - 1.95f) < 1e-6f && qAbs(b - 7.7f) < 1e-5f);
        // Round 2 from W = [1.95, 7.7] with one shard at [2.95, 7.7]: g = [-1, 0]; m = 0.9*[-0.5,-3] + g = [-1.45, -2.7];
        // W' = W - (g + 0.9 m) = [1.95 + 1 + 1.305, 7.7 + 2.43] = [4.255, 10.13].
        auto second = compute::aggregate(nesterov, first->weights.bytes, { { 0, 10, blob(2.95f, 7.7f), {} } }, first->outerState);
        QVERIFY(second.ok());
        const auto [c, d] = values(second->weights.bytes);
        QVERIFY2(qAbs(c - 4.255f) < 1e-5f && qAbs(d - 10.13f) < 1e-5f, qPrintable(QStringLiteral("%1 %2").arg(c).arg(d)));

        QVERIFY(!compute::aggregate(fedAvg, global, {}, {}).ok());
        const auto misfit = compute::detail::pickleTensors({ { "w", torch::tensor({ 1.0f, 2.0f, 3.0f }) } });
        QVERIFY(!compute::aggregate(fedAvg, global, { { 0, 1, misfit, {} } }, {}).ok());
        QVERIFY(!compute::aggregate(fedAvg, global, { { 0, 1, QByteArray("junk"), {} } }, {}).ok());
    }

    // aggregation.optimizerState averaged: round 0 starts from an optimizer that has not stepped
    // (zero moments in the round's weights, and then exactly the fresh optimizer's training), each
    // shard reveals its final optimizer state whole beside its int8 update, the next round's weights
    // hold the samples-weighted mean of those states beside the model stepped as before, a shard of
    // that round starts from them, and a job's last round drops them.
    void anAveragedOptimizerStateCarriesIntoTheNextRound()
    {
        using State = core::AggregationSpec::OptimizerState;
        auto spec = smallGpt();
        spec.training.shardsPerRound = 2;
        spec.training.localSteps = 10;
        spec.training.checkpointInterval = 5;
        spec.aggregation.optimizerState = State::Averaged;
        spec.aggregation.compression = core::Compression::Int8;
        QVERIFY(spec.validate().ok());
        auto reset = spec;
        reset.aggregation.optimizerState = State::Reset;
        const auto carried = prepare(spec);
        const auto fresh = prepare(reset);
        QVERIFY(carried.tasks[0].carriesOptimizer && !fresh.tasks[0].carriesOptimizer);

        const auto start = unpickle(carried.start.bytes);
        const auto model = unpickle(fresh.start.bytes);
        std::size_t zeros = 0;
        for (const auto& [name, tensor] : start) {
            if (compute::detail::isCarried(name)) {
                ++zeros;
                QCOMPARE(tensor.count_nonzero().item<std::int64_t>(), std::int64_t(0));
            }
        }
        QCOMPARE(zeros, 2 * model.size() + 1); // exp_avg and exp_avg_sq of each parameter, adam_step

        QList<compute::ShardOutput> outputs, fresher;
        QList<compute::ShardUpdate> updates, freshUpdates;
        for (int shard = 0; shard < 2; ++shard) {
            outputs.append(compute::runShard(carried.tasks[shard], carried.start.bytes, {}));
            fresher.append(compute::runShard(fresh.tasks[shard], fresh.start.bytes, {}));
            QVERIFY2(outputs.last().result.outcome == core::ShardResult::Outcome::Completed,
                qPrintable(outputs.last().result.failure));
            QCOMPARE(outputs.last().result.checkpointHashes.first(), carried.start.canonicalHash);
            QCOMPARE(outputs.last().result.checkpointHashes.mid(1), fresher.last().result.checkpointHashes.mid(1));
            const auto samples = carried.tasks[shard].sampleEnd - carried.tasks[shard].sampleBegin;
            updates.append({ shard, samples, outputs.last().weights, {} });
            freshUpdates.append({ shard, samples, fresher.last().weights, {} });
        }
        std::map<std::string, at::Tensor> revealed[2];
        for (int shard = 0; shard < 2; ++shard) {
            for (const auto& [name, tensor] : unpickle(outputs[shard].weights))
                revealed[shard][name] = tensor;
        }
        QVERIFY(revealed[0].count("keep/optimizer/exp_avg/transformer.wte.weight"));
        QVERIFY(!revealed[0].count("update/optimizer/exp_avg/transformer.wte.weight"));
        QCOMPARE(revealed[0]["keep/optimizer/adam_step"].item<std::int64_t>(), std::int64_t(10));

        const auto aggregated = compute::aggregate(spec.aggregation, carried.start.bytes, updates, {});
        QVERIFY2(aggregated.ok(), qPrintable(aggregated.ok() ? QString() : aggregated.error().toString()));
        const auto plain = compute::aggregate(reset.aggregation, fresh.start.bytes, freshUpdates, {});
        QVERIFY(plain.ok());
        const auto next = unpickle(aggregated->weights.bytes);
        QCOMPARE(next.size(), start.size());
        const double share0 = double(updates[0].samples) / double(updates[0].samples + updates[1].samples);
        for (const auto& [name, tensor] : next) {
            if (!compute::detail::isCarried(name))
                continue;
            const auto& a = revealed[0][key("keep/", name)];
            const auto& b = revealed[1][key("keep/", name)];
            if (!tensor.is_floating_point()) {
                QCOMPARE(tensor.item<std::int64_t>(), std::int64_t(10));
                continue;
            }
            const auto mean = torch::zeros_like(a).add_(a, share0).add_(b, 1.0 - share0);
            QVERIFY2(torch::equal(tensor, mean), name.c_str());
        }
        // The model's part is the reset job's round, bit for bit.
        QCOMPARE(compute::detail::canonicalHash(compute::detail::modelPart(next)), plain->weights.canonicalHash);
        QCOMPARE(*compute::roundWeightsFromChange(carried.start.bytes, aggregated->change), aggregated->weights.bytes);
        // The same in a worker, for a node without LibTorch in its process (the desktop app).
        const auto rebuilt
            = compute::sandbox::roundWeightsInWorker(carried.start.bytes, aggregated->change, workerOptions(m_scratch));
        QVERIFY2(rebuilt, qPrintable(rebuilt ? QString() : rebuilt.error().toString()));
        QCOMPARE(*rebuilt, aggregated->weights.bytes);
        const auto garbled
            = compute::sandbox::roundWeightsInWorker(carried.start.bytes, "not a change", workerOptions(m_scratch));
        QVERIFY(!garbled);
        QVERIFY2(garbled.error().message.contains(QStringLiteral("change")), qPrintable(garbled.error().toString()));
        QCOMPARE(*compute::elementCount(aggregated->weights.bytes), *compute::elementCount(plain->weights.bytes));
        QVERIFY(compute::evaluate(spec, aggregated->weights.bytes, {}, 1).ok());

        // Round 1 starts from the mean; a task must say whether its weights carry a state.
        const auto round1 = core::decomposeRound(QStringLiteral("job"), spec, 1, aggregated->weights.canonicalHash);
        const auto next0 = compute::runShard(round1[0], aggregated->weights.bytes, {});
        QVERIFY2(next0.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(next0.result.failure));
        QCOMPARE(next0.result.checkpointHashes.first(), aggregated->weights.canonicalHash);
        auto unaware = round1[0];
        unaware.carriesOptimizer = false;
        const auto refused = compute::runShard(unaware, aggregated->weights.bytes, {});
        QCOMPARE(refused.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(refused.result.failure.contains(QStringLiteral("optimizer/")), qPrintable(refused.result.failure));
        auto expecting = fresh.tasks[0];
        expecting.carriesOptimizer = true;
        const auto missing = compute::runShard(expecting, fresh.start.bytes, {});
        QCOMPARE(missing.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(missing.result.failure.contains(QStringLiteral("carry no optimizer state")), qPrintable(missing.result.failure));

        // A job's last round (aggregated with reset, as the broker does): the model's tensors alone.
        const auto last = compute::aggregate(
            reset.aggregation, aggregated->weights.bytes, { { 0, updates[0].samples, next0.weights, {} } }, {});
        QVERIFY2(last.ok(), qPrintable(last.ok() ? QString() : last.error().toString()));
        QCOMPARE(unpickle(last->weights.bytes).size(), model.size());
    }

    // With compression int8 a shard trains exactly as without (the same chain) and reveals its
    // update W_shard - W_round as int8 with a float32 scale per block of 256: what PyTorch computes
    // from the same weights, bit for bit, and what FedAvg adds to W. About a quarter of the bytes.
    void aShardRevealsItsUpdateAsInt8AsPyTorchComputesIt()
    {
        auto spec = smallJob();
        spec.model.hidden = { 300 }; // 784 x 300: tensors that end in a partial block
        const auto plain = prepare(spec);
        spec.aggregation.compression = core::Compression::Int8;
        const auto compressed = prepare(spec);
        QCOMPARE(compressed.tasks[0].compression, core::Compression::Int8);
        const auto final = compute::runShard(plain.tasks[0], plain.start.bytes, {});
        const auto revealed = compute::runShard(compressed.tasks[0], compressed.start.bytes, {});
        QVERIFY2(revealed.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(revealed.result.failure));
        QCOMPARE(revealed.result.checkpointHashes, final.result.checkpointHashes);
        QCOMPARE(*compute::canonicalHashOf(revealed.weights), revealed.result.finalHash);
        QVERIFY(revealed.result.finalHash != final.result.finalHash);
        QVERIFY2(revealed.weights.size() * 10 < final.weights.size() * 3,
            qPrintable(
                QStringLiteral("%1 bytes revealed for %2 of weights").arg(revealed.weights.size()).arg(final.weights.size())));
        QCOMPARE(compute::runShard(compressed.tasks[0], compressed.start.bytes, {}).weights, revealed.weights);

        core::AggregationSpec fedAvg;
        fedAvg.compression = core::Compression::None;
        const auto aggregated = compute::aggregate(fedAvg, compressed.start.bytes, { { 0, 100, revealed.weights, {} } }, {});
        QVERIFY2(aggregated.ok(), qPrintable(aggregated.ok() ? QString() : aggregated.error().toString()));
        QVERIFY(aggregated->change.isEmpty());
        // With int8 the round's step travels as int8 too: W' = W + q * scale of the step, and a node
        // that holds W rebuilds W' from the change, byte for byte.
        core::AggregationSpec int8;
        const auto stepped = compute::aggregate(int8, compressed.start.bytes, { { 0, 100, revealed.weights, {} } }, {});
        QVERIFY2(stepped.ok(), qPrintable(stepped.ok() ? QString() : stepped.error().toString()));
        QVERIFY2(stepped->change.size() * 10 < stepped->weights.bytes.size() * 3,
            qPrintable(QStringLiteral("a change of %1 bytes for %2 of weights")
                           .arg(stepped->change.size())
                           .arg(stepped->weights.bytes.size())));
        QCOMPARE(*compute::roundWeightsFromChange(compressed.start.bytes, stepped->change), stepped->weights.bytes);
        QCOMPARE(*compute::canonicalHashOf(stepped->weights.bytes), stepped->weights.canonicalHash);
        // From the round's file (the broker's way: int8 updates are summed before W is read, whole
        // weights read W first; a round may mix both): the same bytes as from memory.
        {
            QTemporaryDir files;
            auto write = [&](const char* name, const QByteArray& bytes) {
                QFile file(files.filePath(QLatin1String(name)));
                return file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size() ? file.fileName() : QString();
            };
            const QString start = write("start.pt", compressed.start.bytes), update = write("update.pt", revealed.weights),
                          whole = write("whole.pt", final.weights);
            QVERIFY(!start.isEmpty() && !update.isEmpty() && !whole.isEmpty());
            for (const auto& how : { int8, fedAvg }) {
                const QList<compute::ShardUpdate> mixed { { 0, 100, {}, update }, { 1, 50, {}, whole } };
                const auto fromMemory = compute::aggregate(how, compressed.start.bytes, mixed, {});
                QVERIFY2(fromMemory.ok(), qPrintable(fromMemory.ok() ? QString() : fromMemory.error().toString()));
                for (const auto& updates : { QList<compute::ShardUpdate> { mixed[0] }, mixed, QList { mixed[1], mixed[0] } }) {
                    const auto inMemory = compute::aggregate(how, compressed.start.bytes, updates, {});
                    const auto fromFile = compute::aggregateFromFile(how, start, updates, {});
                    QVERIFY2(fromFile.ok(), qPrintable(fromFile.ok() ? QString() : fromFile.error().toString()));
                    QCOMPARE(fromFile->weights.bytes, inMemory->weights.bytes);
                    QCOMPARE(fromFile->change, inMemory->change);
                }
            }
            // W' written to a file: the same bytes there, none returned; a file that cannot be
            // written is the broker's disk ("blob"), not the job's fault.
            const QString out = files.filePath(QStringLiteral("out.pt"));
            const auto written = compute::aggregateFromFile(int8, start, { { 0, 100, {}, update } }, {}, out);
            QVERIFY(written.ok() && written->weights.bytes.isEmpty());
            QCOMPARE(*core::readFile(out), stepped->weights.bytes);
            QCOMPARE(written->weights.canonicalHash, stepped->weights.canonicalHash);
            const auto unwritable = compute::aggregateFromFile(
                int8, start, { { 0, 100, {}, update } }, {}, files.filePath(QStringLiteral("no/such/folder/out.pt")));
            QCOMPARE(unwritable.error().field, QStringLiteral("blob"));
            QVERIFY(!compute::aggregateFromFile(int8, files.filePath(QStringLiteral("gone.pt")), { { 0, 100, {}, update } }, {})
                         .ok());
            QVERIFY(!compute::aggregateFromFile(int8, update, { { 0, 100, {}, update } }, {}).ok()); // W is no update
        }
        QTemporaryDir dir;
        const QList<std::pair<const char*, QByteArray>> files { { "start.pt", plain.start.bytes }, { "final.pt", final.weights },
            { "revealed.pt", revealed.weights }, { "aggregated.pt", aggregated->weights.bytes }, { "change.pt", stepped->change },
            { "stepped.pt", stepped->weights.bytes } };
        QStringList arguments { scriptPath("reference_update.py") };
        for (const auto& [name, bytes] : files) {
            QFile file(dir.filePath(QLatin1String(name)));
            QVERIFY(file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size());
            arguments.append(file.fileName());
        }
        QString said;
        QVERIFY2(runPython(arguments, &said), qPrintable(said));

        // The aggregate of the update is within half a quantisation step of the uncompressed one.
        const auto exact = compute::aggregate(fedAvg, plain.start.bytes, { { 0, 100, final.weights, {} } }, {});
        QVERIFY(exact.ok());
        QVERIFY(*compute::relativeDistance(exact->weights.bytes, aggregated->weights.bytes, {}) < 0.01);

        // An update that is not the documented format is refused with its reason, not guessed at.
        auto tampered = unpickle(revealed.weights);
        for (auto& [name, tensor] : tampered) {
            if (name == "meta/compression")
                tensor = torch::tensor({ std::int64_t(2), std::int64_t(256) }, torch::kInt64);
        }
        const auto refused = compute::aggregate(
            fedAvg, compressed.start.bytes, { { 0, 100, compute::detail::pickleTensors(tampered), {} } }, {});
        QVERIFY(!refused.ok());
        QVERIFY2(refused.error().message.contains(QStringLiteral("meta/compression")), qPrintable(refused.error().message));
        auto wrongShape = unpickle(revealed.weights);
        wrongShape.erase(wrongShape.begin());
        QVERIFY(!compute::aggregate(
            fedAvg, compressed.start.bytes, { { 0, 100, compute::detail::pickleTensors(wrongShape), {} } }, {})
                     .ok());
    }
};

QTEST_GUILESS_MAIN(TrainingTest)
#include "tst_training.moc"
