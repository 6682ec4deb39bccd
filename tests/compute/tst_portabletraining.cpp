// Jobs in portable mode through the engine: the same bits on every kernel and thread count,
// LibTorch's step computed by the portable programs, and a dispute narrowed to one instruction.

#include "computetesting.h"

using namespace tessera;
using namespace tessera::computetests;

namespace {

// A stage's link to the other, with what it received recorded as the broker records it, and what
// really crossed it, whose root is the only one the broker takes from a stage.
struct Tap final : compute::StageLink {
    compute::StageLink& inner;
    QByteArray record = core::StageInputs::Magic;
    QList<core::StageTensor> crossed;
    bool lies = false;
    explicit Tap(compute::StageLink& link)
        : inner(link)
    { }
    core::Status send(std::int64_t to, Kind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes) override
    {
        auto sent = bytes;
        if (lies && kind == Kind::Activation && step == 1 && micro == 0)
            sent[0] = char(sent[0] ^ 0x40);
        crossed.append({ true, to, kind, step, micro, core::Digest::ofBytes(sent) });
        return inner.send(to, kind, step, micro, sent);
    }
    core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) override
    {
        auto bytes = inner.receive(from, kind, step, micro);
        if (bytes) {
            record += core::StageInputs::record(from, kind, step, micro, *bytes);
            crossed.append({ false, from, kind, step, micro, core::Digest::ofBytes(*bytes) });
        }
        return bytes;
    }
};

// The small gpt, untied and portable: `layers` blocks, `steps` steps of `batch` samples with a
// checkpoint every `interval`, and `pipeline`'s stages and micro-batches.
core::JobSpec portableGpt(std::int64_t layers, std::int64_t steps, std::int64_t interval, std::int64_t batch,
    core::TrainingSpec::Pipeline pipeline = {})
{
    auto spec = smallGpt();
    spec.model.tied = false;
    spec.model.layers = layers;
    spec.training.determinism = core::TrainingSpec::Determinism::Portable;
    spec.training.localSteps = steps;
    spec.training.checkpointInterval = interval;
    spec.training.batchSize = batch;
    spec.training.pipeline = pipeline;
    return spec;
}

// Both stages of a shard trained live over recording links (stage 0 lies when `lies`).
std::vector<compute::ShardOutput> trainStages(
    const core::ShardTask& shard, const QByteArray& start, std::vector<std::unique_ptr<Tap>>& taps, bool lies)
{
    compute::LocalStageLinks links(2);
    for (std::int64_t s = 0; s < 2; ++s)
        taps.push_back(std::make_unique<Tap>(links.of(s)));
    taps[0]->lies = lies;
    std::vector<compute::ShardOutput> outputs(2);
    std::vector<std::thread> threads;
    for (std::int64_t s = 0; s < 2; ++s) {
        threads.emplace_back([&, s] {
            auto run = compute::ShardRun::start(core::stageTaskOf(shard, s, 2), start, {});
            if (!run)
                return links.close(run.error().message);
            (*run)->setStageLink(taps[std::size_t(s)].get());
            while (!(*run)->finished()) {
                if (!(*run)->step())
                    return links.close(QStringLiteral("stage failed"));
            }
            outputs[std::size_t(s)] = (*run)->finish();
        });
    }
    for (auto& thread : threads)
        thread.join();
    return outputs;
}

} // namespace

class PortableTrainingTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // training.determinism portable: a shard trained by its program ends on the same chain and
    // weights with every SIMD kernel and thread count; the program steps in place on the model's and
    // the optimizer's own tensors, so pausing and resuming changes nothing either.
    void aPortableShardHasTheSameBitsOnEveryKernelAndThreadCount()
    {
        auto spec = smallJob();
        spec.training.determinism = core::TrainingSpec::Determinism::Portable;
        spec.optimizer.kind = core::OptimizerSpec::Kind::AdamW;
        spec.optimizer.lr = 0.002;
        spec.optimizer.weightDecay = 0.01;
        spec.optimizer.clipNorm = 1.0;
        const auto prepared = prepare(spec);
        const auto reference = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
        QCOMPARE(reference.result.outcome, core::ShardResult::Outcome::Completed);
        QCOMPARE(reference.result.runtimeProfile, core::PortableProfile);
        QVERIFY(reference.result.losses.last() < reference.result.losses.first());
        for (const auto isa : { compute::portable::Isa::Generic, compute::portable::Isa::Avx2, compute::portable::Isa::Avx512 }) {
            if (!compute::portable::forceIsa(isa))
                continue;
            for (const std::int64_t threads : { 1, 3 }) {
                auto task = prepared.tasks[0];
                task.threads = threads;
                const auto output = compute::runShard(task, prepared.start.bytes, {});
                QCOMPARE(output.result.checkpointHashes, reference.result.checkpointHashes);
                QCOMPARE(output.result.finalHash, reference.result.finalHash);
            }
        }
        compute::portable::forceIsa(compute::portable::Isa::Auto);
        // Suspended after 7 steps and resumed: the same bits.
        auto run = compute::ShardRun::start(prepared.tasks[0], prepared.start.bytes, {});
        QVERIFY(run.ok());
        for (int i = 0; i < 7; ++i)
            QVERIFY((*run)->step().ok());
        auto resumed = compute::ShardRun::resume(prepared.tasks[0], (*run)->suspend(), {});
        QVERIFY(resumed.ok());
        while (!(*resumed)->finished())
            QVERIFY((*resumed)->step().ok());
        QCOMPARE((*resumed)->finish().result.finalHash, reference.result.finalHash);
        // A model the portable kernels do not cover is refused by field.
        auto gpt = prepared.tasks[0];
        gpt.model = smallGpt().model;
        gpt.model.dropout = 0.1;
        gpt.dataset = smallGpt().dataset;
        const auto refused = compute::runShard(gpt, {}, {});
        QCOMPARE(refused.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(refused.result.failure.contains(QStringLiteral("training.determinism")), qPrintable(refused.result.failure));
    }

    // training.pipeline (docs/DETERMINISM.md, "Micro-batches"): a step of M micro-batches averages
    // their gradients. train-local runs each micro-batch through the whole program; the stage cut
    // changes no bit (tst_pipelinestages), so a pipeline shard's task is the same for 2 and 4
    // stages. One micro-batch is the unpipelined step, and the micro-batched shard still has the
    // same bits on every kernel and thread count.
    void aMicroBatchedShardAveragesItsMicroBatchesGradients()
    {
        const auto spec = portableGpt(4, 6, 3, 8);
        const auto plain = prepare(spec);
        const auto whole = compute::runShard(plain.tasks[0], plain.start.bytes, {});
        QCOMPARE(whole.result.outcome, core::ShardResult::Outcome::Completed);
        auto taskOf = [&](std::int64_t stages, std::int64_t microBatches) {
            auto pipelined = spec;
            pipelined.training.pipeline = { stages, microBatches };
            const auto valid = pipelined.validate();
            if (!valid)
                qFatal("%s", qPrintable(valid.error().toString()));
            return prepare(pipelined).tasks[0];
        };
        QCOMPARE(taskOf(4, 4).toJson(), taskOf(2, 4).toJson()); // the stages are placement, not arithmetic
        QCOMPARE(taskOf(2, 4).microBatches, 4);
        const auto one = compute::runShard(taskOf(2, 1), plain.start.bytes, {});
        QCOMPARE(one.result.finalHash, whole.result.finalHash);
        const auto two = compute::runShard(taskOf(2, 4), plain.start.bytes, {});
        QVERIFY2(two.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(two.result.failure));
        QVERIFY(two.result.finalHash != whole.result.finalHash); // four averages of two, not one mean of eight
        // The same gradient to rounding: the losses agree closely step by step.
        for (qsizetype i = 0; i < whole.result.losses.size(); ++i)
            QVERIFY2(std::abs(two.result.losses[i] - whole.result.losses[i]) < 1e-3,
                qPrintable(QStringLiteral("step %1: %2 and %3").arg(i).arg(two.result.losses[i]).arg(whole.result.losses[i])));
        auto pipelined = spec;
        pipelined.training.pipeline = { 2, 4 };
        auto task = prepare(pipelined).tasks[0];
        task.threads = 3;
        for (const auto isa : { compute::portable::Isa::Generic, compute::portable::Isa::Avx2 }) {
            if (!compute::portable::forceIsa(isa))
                continue;
            QCOMPARE(compute::runShard(task, plain.start.bytes, {}).result.finalHash, two.result.finalHash);
        }
        compute::portable::forceIsa(compute::portable::Isa::Auto);
    }

    // Stage tasks (docs/DETERMINISM.md, "Pipeline stages"): a pipeline shard run as S stage tasks on
    // threads, trading tensors, each stepping its own parameters and optimizer state, ends on the
    // micro-batched shard's weights bit for bit, for 2 and 4 stages, AdamW with clipping (the
    // stages trade their sums) and SGD with momentum; each stage reveals only its own part, and
    // commits to the tensors it traded.
    void aPipelineShardAcrossStagesEndsOnTheWholeShardsBits()
    {
        for (const auto kind : { core::OptimizerSpec::Kind::AdamW, core::OptimizerSpec::Kind::Sgd }) {
            auto spec = portableGpt(4, 4, 2, 8, { 2, 4 });
            spec.optimizer.kind = kind;
            spec.optimizer.momentum = kind == core::OptimizerSpec::Kind::Sgd ? 0.9 : 0.0;
            spec.optimizer.clipNorm = kind == core::OptimizerSpec::Kind::AdamW ? 0.5 : 0.0;
            QVERIFY(spec.validate().ok());
            const auto prepared = prepare(spec);
            const auto& task = prepared.tasks[0];
            const auto whole = compute::runShard(task, prepared.start.bytes, {});
            QVERIFY2(whole.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(whole.result.failure));
            for (const std::int64_t stages : { 2, 4 }) {
                const auto piped = compute::runPipelineShard(task, stages, prepared.start.bytes, {});
                QVERIFY2(piped.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(piped.result.failure));
                QCOMPARE(piped.result.finalHash, whole.result.finalHash);
                QCOMPARE(piped.result.losses.size(), whole.result.losses.size());
                for (qsizetype i = 0; i < whole.result.losses.size(); ++i)
                    QCOMPARE(float(piped.result.losses[i]), float(whole.result.losses[i]));
            }
            // What the broker takes of a stage: exactly its share of the model. Stage 0's part of
            // the merged weights is fit for stage 0 and for no other; the whole shard is no stage's.
            QTemporaryDir dir;
            const QString round = dir.filePath(QStringLiteral("round.pt")), part = dir.filePath(QStringLiteral("part.pt")),
                          all = dir.filePath(QStringLiteral("all.pt"));
            QVERIFY(
                compute::detail::pickleTensorsToFile(*compute::detail::unpickleTensors(prepared.start.bytes, {}), round).ok());
            auto tensors = *compute::detail::unpickleTensors(whole.weights, {});
            QVERIFY(compute::detail::pickleTensorsToFile(tensors, all).ok());
            std::erase_if(tensors, [](const auto& entry) {
                return entry.first.rfind("transformer.wte.", 0) != 0 && entry.first.rfind("transformer.wpe.", 0) != 0
                    && entry.first.rfind("transformer.h.0.", 0) != 0 && entry.first.rfind("transformer.h.1.", 0) != 0;
            });
            QVERIFY(compute::detail::pickleTensorsToFile(tensors, part).ok());
            const compute::RevealedStage first { 0, 2, 4 }, second { 1, 2, 4 };
            QVERIFY(compute::inspectRevealed(part, round, first)->unfit.isEmpty());
            QVERIFY(!compute::inspectRevealed(part, round, second)->unfit.isEmpty());
            QVERIFY(!compute::inspectRevealed(all, round, first)->unfit.isEmpty());
            QVERIFY(compute::inspectRevealed(all, round)->unfit.isEmpty());
        }
    }

    // docs/VERIFICATION.md, "Pipeline stages": a stage re-executed from what it received (the
    // broker's record, core::StageInputs) gives its bits again: its chain, its revealed part and the
    // root of what it sent and received. Stage 0 here sends one wrong activation. Its partner, which
    // computed honestly on it, is re-executed to its own bits. The liar's re-execution sends the
    // right activation, so its root differs, though its own chain does not.
    void aStageReExecutedFromWhatItReceivedGivesItsBitsUnlessItLied()
    {
        auto spec = portableGpt(2, 3, 2, 4, { 2, 2 });
        spec.optimizer.clipNorm = 0.5; // the stages' sums travel too
        QVERIFY(spec.validate().ok());
        const auto prepared = prepare(spec);
        // Each stage's link to the other, with what it received recorded as the broker records it,
        // and what really crossed it, whose root is the only one the broker takes from a stage.
        std::vector<std::unique_ptr<Tap>> taps;
        const auto outputs = trainStages(prepared.tasks[0], prepared.start.bytes, taps, true);
        QTemporaryDir dir;
        QHash<core::Digest, QString> files;
        for (std::int64_t s = 0; s < 2; ++s) {
            const auto& live = outputs[std::size_t(s)].result;
            QVERIFY2(live.outcome == core::ShardResult::Outcome::Completed, qPrintable(live.failure));
            const auto& record = taps[std::size_t(s)]->record;
            QVERIFY(core::StageInputs::parse(record)->size() > 0);
            const QString file = dir.filePath(QString::number(s));
            QFile out(file);
            QVERIFY(out.open(QIODevice::WriteOnly) && out.write(record) == record.size());
            out.close();
            files.insert(core::Digest::ofBytes(record), file);
            auto task = core::stageTaskOf(prepared.tasks[0], s, 2);
            task.stageInputs = core::Digest::ofBytes(record);
            QVERIFY(core::ShardTask::fromJson(task.toJson()).value() == task);
            compute::ComputeEnvironment environment;
            environment.blobPath = [&](const core::Digest& digest) -> std::optional<QString> {
                return files.contains(digest) ? std::optional<QString>(files.value(digest)) : std::nullopt;
            };
            auto replay = compute::replayShard(task, 0, prepared.start.bytes, live.checkpointHashes.first(),
                task.checkpointCount() - 1, prepared.start.bytes, environment);
            QVERIFY2(replay, qPrintable(replay ? QString() : replay.error().toString()));
            QCOMPARE(replay->checkpoints, live.checkpointHashes.mid(1));
            QCOMPARE(replay->weightsHash, live.finalHash);
            const auto relayed = core::stageTensorsRoot(taps[std::size_t(s)]->crossed);
            QCOMPARE(live.tensorsRoot == relayed, s == 1); // the liar's own log is not what it sent
            QCOMPARE(replay->tensorsRoot == relayed, s == 1);
            // A record that lacks a tensor the stage needs fails it; a damaged one is refused.
            auto cut = record;
            cut.chop(5);
            QVERIFY(!core::StageInputs::parse(cut));
            const auto twice = core::StageInputs::record(
                1 - s, s == 0 ? core::TensorKind::Gradient : core::TensorKind::Activation, 0, 0, QByteArray(4, 'x'));
            QVERIFY(!core::StageInputs::parse(record + twice)); // a tensor it already received
        }
    }

    // A stage started from the file of the round's weights (ShardRun::startFromFile, as a node
    // starts one: docs/PERFORMANCE.md, "Pipeline stages") reads its share alone, one tensor at a
    // time, and ends on the bits of a stage started from the weights in memory, with the update
    // compressed or not. A file that is not the round's weights, or not whole, is refused by name.
    void aStageStartedFromTheWeightsFileGivesTheSameBits()
    {
        using Variant = std::pair<core::Compression, bool>; // the update's compression, int8 stage tensors
        for (const auto& [compression, int8Tensors] : { Variant { core::Compression::Int8, false },
                 Variant { core::Compression::None, false }, Variant { core::Compression::None, true } }) {
            auto spec = portableGpt(2, 2, 1, 4, { 2, 2 });
            spec.aggregation.compression = compression;
            spec.training.pipeline.int8Tensors = int8Tensors;
            QVERIFY(spec.validate().ok());
            const auto prepared = prepare(spec);
            QCOMPARE(prepared.tasks[0].int8StageTensors, int8Tensors);
            std::vector<std::unique_ptr<Tap>> taps;
            const auto outputs = trainStages(prepared.tasks[0], prepared.start.bytes, taps, false);
            QTemporaryDir dir;
            const QString round = dir.filePath(QStringLiteral("round.pt"));
            auto write = [](const QString& path, const QByteArray& bytes) {
                QFile file(path);
                return file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size();
            };
            QVERIFY(write(round, prepared.start.bytes));
            QHash<core::Digest, QString> files;
            compute::ComputeEnvironment environment;
            environment.blobPath = [&](const core::Digest& digest) -> std::optional<QString> {
                return files.contains(digest) ? std::optional<QString>(files.value(digest)) : std::nullopt;
            };
            for (std::int64_t s = 0; s < 2; ++s) {
                const auto& live = outputs[std::size_t(s)];
                QVERIFY2(live.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(live.result.failure));
                const auto& record = taps[std::size_t(s)]->record;
                files.insert(core::Digest::ofBytes(record), dir.filePath(QString::number(s)));
                QVERIFY(write(files.value(core::Digest::ofBytes(record)), record));
                auto task = core::stageTaskOf(prepared.tasks[0], s, 2);
                task.stageInputs = core::Digest::ofBytes(record);
                auto run = compute::ShardRun::startFromFile(task, round, environment);
                QVERIFY2(run, qPrintable(run ? QString() : run.error().toString()));
                while (!(*run)->finished())
                    QVERIFY((*run)->step().ok());
                const auto again = (*run)->finish();
                QVERIFY2(again.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(again.result.failure));
                QCOMPARE(again.result.checkpointHashes, live.result.checkpointHashes);
                QCOMPARE(again.result.finalHash, live.result.finalHash);
                QCOMPARE(again.result.tensorsRoot, live.result.tensorsRoot);
                QCOMPARE(again.weights, live.weights);
            }
            if (compression == core::Compression::None)
                continue;
            // Not the round's weights: one more tensor, one fewer, other values, a damaged file.
            auto task = core::stageTaskOf(prepared.tasks[0], 1, 2);
            task.stageInputs = files.keys().first();
            auto tensors = *compute::detail::unpickleTensors(prepared.start.bytes, {});
            auto refusal = [&](const compute::detail::NamedTensors& given) {
                const QString path = dir.filePath(QStringLiteral("other.pt"));
                if (auto written = compute::detail::pickleTensorsToFile(given, path); !written)
                    return QStringLiteral("not written: ") + written.error().toString();
                auto run = compute::ShardRun::startFromFile(task, path, environment);
                return run ? QStringLiteral("started") : run.error().toString();
            };
            auto more = tensors;
            more.emplace_back("zz.extra", torch::zeros({ 2 }));
            QVERIFY2(refusal(more).contains(QStringLiteral("'zz.extra', which the model does not")), qPrintable(refusal(more)));
            auto fewer = tensors;
            fewer.pop_back();
            QVERIFY2(refusal(fewer).contains(QStringLiteral("lack 1 of the model's")), qPrintable(refusal(fewer)));
            auto other = tensors;
            other.back().second = other.back().second + 1.0;
            QVERIFY2(
                refusal(other).contains(QStringLiteral("do not hash to the task's startWeights")), qPrintable(refusal(other)));
            auto bent = tensors;
            bent.front().second = bent.front().second.reshape({ -1 });
            QVERIFY2(refusal(bent).contains(QStringLiteral("in the start weights but")), qPrintable(refusal(bent)));
            QVERIFY(write(dir.filePath(QStringLiteral("cut.pt")), prepared.start.bytes.left(prepared.start.bytes.size() / 2)));
            auto cut = compute::ShardRun::startFromFile(task, dir.filePath(QStringLiteral("cut.pt")), environment);
            QVERIFY(!cut && cut.error().field == u"startWeights");
            auto missing = compute::ShardRun::startFromFile(task, dir.filePath(QStringLiteral("nowhere.pt")), environment);
            QVERIFY(!missing && missing.error().field == u"sandbox"); // this node's trouble
            // Tensors that share a storage (as tied weights would) are refused before anything is read.
            auto shared = tensors;
            shared.back().second
                = shared.front().second.flatten().narrow(0, 0, shared.back().second.numel()).view(shared.back().second.sizes());
            QVERIFY2(
                refusal(shared).contains(QStringLiteral("not the whole of a storage of its own")), qPrintable(refusal(shared)));
        }
    }

    // training.pipeline.tensors "int8": the stages trade int8 rows with a scale each (about a
    // quarter of the bytes at this width), train-local quantises as the nodes do, the job ends on one
    // hash on every kernel (the matrix products' choice), and trains about as the float32 job does.
    void aPipelineOfInt8TensorsTradesAQuarterOfTheBytes()
    {
        auto spec = portableGpt(2, 20, 10, 8, { 2, 4 });
        const auto prepared = prepare(spec);
        spec.training.pipeline.int8Tensors = true;
        QVERIFY(spec.validate().ok());
        const auto int8 = prepare(spec);
        QCOMPARE(int8.start.canonicalHash, prepared.start.canonicalHash);
        std::vector<std::unique_ptr<Tap>> wide, narrow;
        const auto full = trainStages(prepared.tasks[0], prepared.start.bytes, wide, false);
        const auto small = trainStages(int8.tasks[0], int8.start.bytes, narrow, false);
        for (const auto* outputs : { &full, &small }) {
            for (const auto& output : *outputs)
                QVERIFY2(output.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(output.result.failure));
        }
        const double ratio = double(narrow[0]->record.size() + narrow[1]->record.size())
            / double(wide[0]->record.size() + wide[1]->record.size());
        const double rows = double(4 + spec.model.width) / double(4 * spec.model.width); // 36 of 128 bytes a row
        // The records' lines and the clipping sums (float64, not quantised) add a little.
        QVERIFY2(ratio >= rows && ratio < rows + 0.03, qPrintable(QString::number(ratio)));
        const double first = full[1].result.losses.last(), second = small[1].result.losses.last();
        QVERIFY2(std::fabs(first - second) < 0.02 * first, qPrintable(QStringLiteral("%1 %2").arg(first).arg(second)));
        QVERIFY(full[1].result.finalHash != small[1].result.finalHash);
        // train-local's stages (runPipelineShard) quantise as the nodes' do: the last stage's losses
        // are the live int8 stages', not the float32 ones'.
        const auto reference = compute::runPipelineShard(int8.tasks[0], 2, int8.start.bytes, {});
        QVERIFY2(reference.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(reference.result.failure));
        QCOMPARE(reference.result.losses, small[1].result.losses);
        QVERIFY(reference.result.losses != full[1].result.losses);
        QVERIFY(reference.result.finalHash
            != compute::runPipelineShard(prepared.tasks[0], 2, prepared.start.bytes, {}).result.finalHash);
        for (const auto isa : { compute::portable::Isa::Generic, compute::portable::Isa::Avx2, compute::portable::Isa::Avx512 }) {
            if (!compute::portable::forceIsa(isa))
                continue;
            QCOMPARE(
                compute::runPipelineShard(int8.tasks[0], 2, int8.start.bytes, {}).result.finalHash, reference.result.finalHash);
        }
        compute::portable::forceIsa(compute::portable::Isa::Auto);
    }

    // The portable cnn and mlp with dropout, and the gpt (AdamW, clipping, a cosine schedule,
    // carried moments): the same bits with every SIMD kernel and thread count.
    void aPortableCnnWithDropoutHasTheSameBitsEverywhere()
    {
        for (const auto* zoo : { "cnn", "mlp", "gpt" }) {
            auto spec = smallJob();
            spec.training.determinism = core::TrainingSpec::Determinism::Portable;
            spec.model.zoo = QLatin1String(zoo);
            spec.model.hidden = { 24 };
            spec.model.dropout = 0.25;
            if (spec.model.zoo == u"cnn")
                spec.model.channels = { 4, 8 };
            if (spec.model.zoo == u"gpt") { // the gpt without dropout, with its optimizer
                spec.model = smallGpt().model;
                spec.dataset = smallGpt().dataset;
                spec.optimizer = smallGpt().optimizer;
                spec.aggregation.optimizerState = core::AggregationSpec::OptimizerState::Averaged;
            }
            spec.optimizer.kind = core::OptimizerSpec::Kind::Adam;
            spec.optimizer.lr = 0.003;
            spec.training.localSteps = 10;
            const auto prepared = prepare(spec);
            const auto reference = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
            QCOMPARE(reference.result.outcome, core::ShardResult::Outcome::Completed);
            for (const auto isa : { compute::portable::Isa::Generic, compute::portable::Isa::Avx512 }) {
                if (!compute::portable::forceIsa(isa))
                    continue;
                auto task = prepared.tasks[0];
                task.threads = 2;
                const auto output = compute::runShard(task, prepared.start.bytes, {});
                QCOMPARE(output.result.checkpointHashes, reference.result.checkpointHashes);
                QCOMPARE(output.result.finalHash, reference.result.finalHash);
            }
            compute::portable::forceIsa(compute::portable::Isa::Auto);
        }
    }

    // The portable cnn and mlp compute LibTorch's step (up to float32 rounding): one SGD step of
    // rate 1 from the same weights and batch leaves W - g, so the weights compare the gradients.
    // With dropout the portable masks are Tessera's own stream, so only its mask rate is compared.
    void thePortableModelsComputeLibTorchsStep()
    {
        for (const auto* zoo : { "cnn", "mlp", "gpt" }) {
            auto spec = smallJob();
            spec.model.zoo = QLatin1String(zoo);
            spec.model.hidden = { 24 };
            if (spec.model.zoo == u"cnn")
                spec.model.channels = { 4, 8 };
            if (spec.model.zoo == u"gpt") {
                spec.model = smallGpt().model;
                spec.dataset = smallGpt().dataset;
            }
            spec.optimizer.lr = 1.0;
            spec.optimizer.momentum = 0.0;
            spec.training.localSteps = 1;
            spec.training.batchSize = 16;
            spec.training.checkpointInterval = 1;
            const auto prepared = prepare(spec);
            auto portable = prepared.tasks[0];
            portable.portable = true;
            const auto fast = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
            const auto ours = compute::runShard(portable, prepared.start.bytes, {});
            QCOMPARE(ours.result.outcome, core::ShardResult::Outcome::Completed);
            QVERIFY2(std::fabs(ours.result.losses[0] - fast.result.losses[0]) < 1e-5,
                qPrintable(
                    QStringLiteral("%1: %2 %3").arg(QLatin1String(zoo)).arg(ours.result.losses[0]).arg(fast.result.losses[0])));
            const auto a = *compute::detail::unpickleTensors(fast.weights, {});
            const auto b = *compute::detail::unpickleTensors(ours.weights, {});
            QCOMPARE(a.size(), b.size());
            for (std::size_t i = 0; i < a.size(); ++i) {
                QCOMPARE(a[i].first, b[i].first);
                const bool close = torch::allclose(a[i].second, b[i].second, 1e-4, 1e-5);
                if (!close)
                    qWarning("%s %s: largest difference %g", zoo, a[i].first.c_str(),
                        (a[i].second - b[i].second).abs().max().item<double>());
                QVERIFY2(close, a[i].first.c_str());
            }
        }
    }

    // A dispute over a portable job (docs/VERIFICATION.md, "Disputes over portable jobs"): the two
    // sides' traces of the differing interval point at the first instruction whose output differs,
    // and the referee runs that instruction alone from the operands either side sends.
    void aPortableDisputeIsNarrowedToOneInstruction()
    {
        using Ruling = core::verification::Ruling;
        auto spec = smallJob();
        spec.training.determinism = core::TrainingSpec::Determinism::Portable;
        const auto prepared = prepare(spec);
        const auto& start = prepared.start.bytes;
        const auto& task = prepared.tasks[0];
        auto cheat = task; // twice the learning rate: the same forward and backward, another update
        cheat.optimizer.lr *= 2.0;
        const auto honest = compute::runShard(task, start, {});
        const auto cheater = compute::runShard(cheat, start, {});
        const auto& h = honest.result.checkpointHashes;
        const auto& c = cheater.result.checkpointHashes;
        QCOMPARE(h[0], c[0]);
        QVERIFY(h[1] != c[1]);

        const auto honestTrace = compute::traceInterval(task, start, honest.keptState, 1, {});
        const auto cheaterTrace = compute::traceInterval(cheat, start, cheater.keptState, 1, {});
        QVERIFY2(honestTrace.ok(), qPrintable(honestTrace.ok() ? QString() : honestTrace.error().toString()));
        QVERIFY(cheaterTrace.ok());
        // The broker reads no trace larger than the program's own size allows: an honest one fits.
        const auto bound = compute::traceBytesBound(task, 1, {});
        QVERIFY2(bound.ok(), qPrintable(bound.ok() ? QString() : bound.error().toString()));
        QVERIFY2(honestTrace->size() <= *bound && *bound < 64 * honestTrace->size() + (1 << 20),
            qPrintable(QStringLiteral("a trace of %1 bytes, bound %2").arg(honestTrace->size()).arg(*bound)));
        const auto compared = compute::compareTraces(task, 1, h[0], start, h[1], c[1], *honestTrace, *cheaterTrace, {});
        QVERIFY2(compared.ok(), qPrintable(compared.ok() ? QString() : compared.error().toString()));
        QVERIFY2(compared->firstFault.isEmpty() && compared->secondFault.isEmpty(),
            qPrintable(compared->firstFault + compared->secondFault));
        QCOMPARE(compared->step, 1);
        QVERIFY2(compared->instructionName.startsWith(QStringLiteral("Sgd")), qPrintable(compared->instructionName));
        QVERIFY(!compared->ruling);
        // Operands from either side are the same values (they agree up to there); the referee's
        // update is the honest one. Doctored operands are refused.
        for (const core::ShardTask* side : { &task, static_cast<const core::ShardTask*>(&cheat) }) {
            const auto operands = compute::operandsOf(
                *side, start, side == &task ? honest.keptState : cheater.keptState, compared->step, compared->instruction, {});
            QVERIFY(operands.ok());
            const auto ruling = compute::refereeInstruction(
                task, compared->step, compared->instruction, *operands, *honestTrace, *cheaterTrace, {});
            QVERIFY2(ruling.ok(), qPrintable(ruling.ok() ? QString() : ruling.error().toString()));
            QVERIFY(*ruling == Ruling::FirstHonest);
            QVERIFY(*compute::refereeInstruction(
                        task, compared->step, compared->instruction, *operands, *cheaterTrace, *honestTrace, {})
                == Ruling::SecondHonest);
            auto doctored = *compute::detail::unpickleTensors(*operands, {});
            doctored.front().second = doctored.front().second.clone().mul_(1.5);
            const auto refused = compute::refereeInstruction(task, compared->step, compared->instruction,
                compute::detail::pickleTensors(doctored), *honestTrace, *cheaterTrace, {});
            QVERIFY(!refused.ok());
            QVERIFY(refused.error().message.contains(QStringLiteral("both traces agree on")));
        }
        // A trace that does not end where its node signed, or of another interval, is not used.
        const auto misclaimed = compute::compareTraces(task, 1, h[0], start, c[1], c[1], *honestTrace, *cheaterTrace, {});
        QVERIFY(misclaimed.ok());
        QVERIFY2(misclaimed->firstFault.contains(QStringLiteral("own checkpoint 1")), qPrintable(misclaimed->firstFault));
        QVERIFY(misclaimed->secondFault.isEmpty());
        const auto honestSecond = compute::traceInterval(task, start, honest.keptState, 2, {});
        QVERIFY(honestSecond.ok());
        const auto wrongInterval = compute::compareTraces(task, 1, h[0], start, h[1], c[1], *honestSecond, {}, {});
        QVERIFY(wrongInterval.ok());
        QVERIFY(!wrongInterval->firstFault.isEmpty());
        QCOMPARE(wrongInterval->secondFault, QStringLiteral("no trace came"));
        // After the start the trace starts at the agreed checkpoint (here both agree throughout).
        const auto same = compute::compareTraces(task, 2, h[1], {}, h[2], h[2], *honestSecond, *honestSecond, {});
        QVERIFY(!same.ok());

        // Another data order: the batch differs, and the referee reads the batch itself.
        auto reordered = task;
        reordered.seed = task.seed + 1;
        const auto other = compute::runShard(reordered, start, {});
        const auto otherTrace = compute::traceInterval(reordered, start, other.keptState, 1, {});
        QVERIFY(otherTrace.ok());
        const auto batch
            = compute::compareTraces(task, 1, h[0], start, other.result.checkpointHashes[1], h[1], *otherTrace, *honestTrace, {});
        QVERIFY(batch.ok());
        QCOMPARE(batch->instruction, 0);
        QVERIFY(batch->ruling && *batch->ruling == Ruling::SecondHonest);
    }
};

QTEST_GUILESS_MAIN(PortableTrainingTest)
#include "tst_portabletraining.moc"
