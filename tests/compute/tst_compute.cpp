// The compute engine against itself (determinism, pause and resume), against PyTorch (optimizer
// updates, TorchScript and tensor files made by Python) and against bad input.

#include <compute/engine/brokermath.h>
#include <compute/engine/detail/batches.h>
#include <compute/engine/detail/datasets.h>
#include <compute/engine/detail/models.h>
#include <compute/engine/detail/tensors.h>
#include <compute/engine/localjob.h>
#include <compute/engine/runtimeprofile.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <compute/pickle/tensorfile.h>
#include <compute/portable/matmul.h>
#include <compute/supervisor/computethread.h>
#include <compute/supervisor/sandbox/worker.h>
#include <core/decomposition.h>
#include <core/modelarchive.h>
#include <core/nodeinfo.h>
#include <core/pricing.h>
#include <core/readfile.h>

#include <torch/serialize.h>
#include <torch/torch.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSet>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <map>

using namespace tessera;
using compute::ComputeEnvironment;
using compute::detail::NamedTensors;

namespace {

const QString Python = QStringLiteral("/usr/bin/python3");

core::JobSpec smallJob()
{
    core::JobSpec spec;
    spec.name = QStringLiteral("small");
    spec.model.zoo = QStringLiteral("mlp");
    spec.model.hidden = { 32 };
    spec.dataset.builtin = QStringLiteral("fashion-mnist");
    spec.optimizer.lr = 0.05;
    spec.optimizer.momentum = 0.9;
    spec.training.rounds = 1;
    spec.training.shardsPerRound = 3;
    spec.training.localSteps = 20;
    spec.training.batchSize = 32;
    spec.training.seed = 11;
    spec.training.threads = 1;
    spec.training.checkpointInterval = 5;
    spec.budget = core::Credits::fromMicro(1);
    // The cases read a shard's final weights; the int8 update it reveals by default has cases of its own.
    spec.aggregation.compression = core::Compression::None;
    return spec;
}

// A small gpt on the fortunes text (docs/JOBS.md, "Language models").
core::JobSpec smallGpt()
{
    auto spec = smallJob();
    spec.name = QStringLiteral("small gpt");
    spec.model = core::ModelSpec {};
    spec.model.zoo = QStringLiteral("gpt");
    spec.model.layers = 2;
    spec.model.heads = 2;
    spec.model.width = 32;
    spec.model.context = 32;
    spec.dataset.builtin = QStringLiteral("fortunes");
    spec.optimizer = core::OptimizerSpec {};
    spec.optimizer.kind = core::OptimizerSpec::Kind::AdamW;
    spec.optimizer.lr = 0.003;
    spec.optimizer.weightDecay = 0.1;
    spec.optimizer.clipNorm = 1.0;
    spec.optimizer.schedule = { core::ScheduleSpec::Kind::Cosine, 5, 40, 0.0003 };
    spec.training.localSteps = 40;
    spec.training.batchSize = 16;
    spec.training.checkpointInterval = 10;
    return spec;
}

struct Prepared {
    compute::Weights start;
    QList<core::ShardTask> tasks;
};

Prepared prepare(const core::JobSpec& spec, const ComputeEnvironment& environment = {})
{
    auto start = compute::initialWeights(spec, environment);
    if (!start)
        qFatal("initialWeights: %s", qPrintable(start.error().toString()));
    return { *start, core::decomposeRound(QStringLiteral("job"), spec, 0, start->canonicalHash) };
}

bool runPython(const QStringList& arguments, QString* output = nullptr)
{
    QProcess process;
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(Python, arguments);
    if (!process.waitForFinished(300'000)) {
        qWarning("python did not finish");
        return false;
    }
    const QString text = QString::fromUtf8(process.readAll());
    if (output)
        *output = text;
    if (process.exitStatus() != QProcess::NormalExit || process.exitCode() != 0) {
        qWarning("python failed: %s", qPrintable(text));
        return false;
    }
    return true;
}

QString scriptPath(const char* name)
{
    return QStringLiteral(TESSERA_SOURCE_DIR "/tests/compute/python/") + QLatin1String(name);
}

NamedTensors unpickle(const QByteArray& bytes)
{
    auto tensors = compute::detail::unpickleTensors(bytes, QStringLiteral("test"));
    if (!tensors)
        qFatal("%s", qPrintable(tensors.error().toString()));
    return *tensors;
}

// Concatenation that sidesteps GCC 12's false -Wrestrict on `"literal" + std::string`.
std::string key(std::string prefix, const std::string& name)
{
    prefix.append(name);
    return prefix;
}

// Trains task 0 of a language-model job twice. Empty when it learns the text (from ln 256 nats per
// byte, within `spread`, to more than a nat less over its last 5 steps) and ends on the same bits
// both times; else what went wrong.
QString learnsTheText(const Prepared& prepared, double spread, compute::ShardOutput& output)
{
    output = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
    if (output.result.outcome != core::ShardResult::Outcome::Completed)
        return output.result.failure;
    const auto& losses = output.result.losses;
    if (qAbs(losses.first() - std::log(256.0)) >= spread)
        return QStringLiteral("first loss %1").arg(losses.first());
    const double late = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
    if (late >= losses.first() - 1.0)
        return QStringLiteral("loss %1 -> %2").arg(losses.first()).arg(late);
    if (compute::runShard(prepared.tasks[0], prepared.start.bytes, {}).result.finalHash != output.result.finalHash)
        return QStringLiteral("a second run ended on other bits");
    return {};
}

QByteArray readAll(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", qPrintable(path));
    return file.readAll();
}

} // namespace

class ComputeTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_fixtures;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_fixtures.isValid());
        QVERIFY2(runPython({ scriptPath("make_fixtures.py"), m_fixtures.path() }), "could not make the PyTorch fixtures");
    }

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
        const auto rebuilt = compute::sandbox::roundWeightsInWorker(carried.start.bytes, aggregated->change, workerOptions());
        QVERIFY2(rebuilt, qPrintable(rebuilt ? QString() : rebuilt.error().toString()));
        QCOMPARE(*rebuilt, aggregated->weights.bytes);
        const auto garbled = compute::sandbox::roundWeightsInWorker(carried.start.bytes, "not a change", workerOptions());
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
        const auto there = compute::sandbox::sampleInWorker(spec, trained.weights, options, {}, workerOptions());
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

    // The sandboxed compute worker (tessera-compute; docs/SECURITY.md, "The compute worker").

    // A shard trained in the confined worker has the bits the node's own thread gives it, so
    // verification cannot tell where it ran; its progress comes through the pipe.
    // What a program without LibTorch (the desktop app, the node's set-up) asks a worker: the
    // runtime profile it registers with is the one its shards are computed under, and a benchmark
    // is measured there and comes back whole.
    void theRuntimeProfileAndBenchmarksComeFromAWorker()
    {
        const auto runtime = compute::sandbox::runtimeInWorker(1, workerOptions());
        QVERIFY2(runtime, qPrintable(runtime ? QString() : runtime.error().toString()));
        QCOMPARE(runtime->runtimeProfile, compute::currentRuntimeProfile(1).toString());
        QCOMPARE(runtime->torch.cuda, compute::torchCapabilities().cuda);
        const auto prepared = prepare(smallJob());
        QCOMPARE(runtime->runtimeProfile, compute::runShard(prepared.tasks[0], prepared.start.bytes, {}).result.runtimeProfile);

        auto benchmark = compute::BenchmarkOptions::firstStart(1);
        benchmark.minRepetitions = 1;
        benchmark.maxRepetitions = 2;
        int reported = 0;
        benchmark.progress = [&](const QString& name, int) {
            QCOMPARE(name, QStringLiteral("mlp"));
            ++reported;
        };
        const auto record = compute::sandbox::benchmarkInWorker(benchmark, workerOptions());
        QVERIFY2(record, qPrintable(record ? QString() : record.error().toString()));
        QVERIFY(record->measurement(u"mlp") && record->measurement(u"mlp")->value > 0.0);
        QVERIFY(!record->measurement(u"cnn"));
        QVERIFY(record->device.startsWith(QStringLiteral("cpu:0 ")));
        QVERIFY(reported >= 1);

        // A worker that is not there is the node's problem, said as such.
        auto missing = workerOptions();
        missing.program = m_scratch.filePath(QStringLiteral("no-such-worker"));
        const auto none = compute::sandbox::runtimeInWorker(1, missing);
        QVERIFY(!none);
        QCOMPARE(none.error().field, QStringLiteral("worker"));
    }

    void aShardTrainedInTheWorkerHasTheBitsOfOneTrainedInProcess()
    {
        const auto prepared = prepare(smallJob());
        const auto here = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
        QCOMPARE(here.result.outcome, core::ShardResult::Outcome::Completed);
        int progressed = 0;
        auto options = workerOptions();
        options.progress = [&](const compute::ShardProgress& progress) {
            QCOMPARE(progress.steps, prepared.tasks[0].localSteps);
            ++progressed;
        };
        const auto there = compute::sandbox::runShardInWorker(prepared.tasks[0], prepared.start.bytes, {}, options);
        QVERIFY2(there.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(there.result.failure));
        QCOMPARE(there.result.finalHash, here.result.finalHash);
        QCOMPARE(there.result.checkpointHashes, here.result.checkpointHashes);
        QCOMPARE(there.result.losses, here.result.losses);
        QCOMPARE(there.result.runtimeProfile, here.result.runtimeProfile);
        QCOMPARE(there.weights, here.weights);
        QCOMPARE(there.keptState.size(), here.keptState.size()); // it also holds the time it took
        QVERIFY(progressed >= 1);
        QVERIFY(QDir(m_scratch.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty()); // scratch removed
    }

    // What a hostile job's code would try first, tried by the worker itself once confined: each is
    // refused by the kernel (Landlock for files, seccomp for sockets, programs, other processes,
    // memfds and priorities), and the worker says why.
    void theWorkerCannotReadTheNodesKeysOpenSocketsOrStartPrograms()
    {
        QTemporaryDir data; // stands for the node's data folder
        QFile key(QDir(data.path()).filePath(QStringLiteral("node.key")));
        QVERIFY(key.open(QIODevice::WriteOnly));
        key.write("secret");
        key.close();
        QTemporaryDir scratch;
        QProcess worker;
        worker.start(QStringLiteral(TESSERA_COMPUTE_WORKER),
            { QStringLiteral("probe"), QStringLiteral("--scratch"), scratch.path(), QStringLiteral("--memory-mib"),
                QStringLiteral("512"), QStringLiteral("--try-read"), key.fileName() });
        QVERIFY(worker.waitForFinished(60'000));
        const QString said = QString::fromLocal8Bit(worker.readAllStandardOutput());
        qInfo("%s", qPrintable(said));
        QCOMPARE(worker.exitCode(), 0);
        QVERIFY2(said.contains(QStringLiteral("socket: refused (Operation not permitted)")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("unix socket: refused (Operation not permitted)")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("exec: refused (Operation not permitted)")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("write scratch: allowed")), qPrintable(said));
        // Native code in a hostile job (what a LibTorch memory bug would hand it): it cannot signal
        // its supervisor by any call, hold memory outside its address space in a memfd, or put
        // itself ahead of the computer's owner, even when the worker runs as root (CI does); it
        // still signals its own threads (abort() needs that) and reads its limits.
        for (const auto* refused : { "signal supervisor", "pidfd", "memfd", "raise priority", "real-time", "lift memory limit" })
            QVERIFY2(said.contains(QStringLiteral("%1: refused (").arg(QLatin1String(refused))), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("signal itself: allowed")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("read limits: allowed")), qPrintable(said));
        if (said.contains(QStringLiteral("landlock=0")))
            QSKIP("this kernel has no Landlock: the worker's files are not confined here (the worker warns)");
        QVERIFY2(said.contains(QStringLiteral("read: refused (Permission denied)")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("write outside: refused (Permission denied)")), qPrintable(said));
    }

    // forward() that never returns: the worker is killed at the shard's time limit, the result says
    // so, and the next shard trains.
    void anEndlessForwardIsStoppedAtTheTimeLimitAndTheNextShardTrains()
    {
        auto task = hostileTask(QStringLiteral("endless.pt"));
        auto options = workerOptions();
        options.timeLimitMs = 3000;
        const auto stopped = compute::sandbox::runShardInWorker(task.first, task.second, {}, options);
        QCOMPARE(stopped.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(stopped.result.failure.startsWith(QStringLiteral("time limit")), qPrintable(stopped.result.failure));
        nextShardTrains();
    }

    // forward() that allocates without end: the allocation past Compute/MaxMemoryMiB fails inside
    // the worker (its address space is limited), so the kernel's OOM killer never chooses among the
    // machine's processes; the result says out of memory, and the next shard trains.
    void anUnboundedAllocationStopsAtTheMemoryLimitAndTheNextShardTrains()
    {
        auto task = hostileTask(QStringLiteral("hoarder.pt"));
        auto options = workerOptions();
        options.memoryMiB = 1024;
        options.timeLimitMs = 120'000; // not what stops it; only a guard for the test
        const auto stopped = compute::sandbox::runShardInWorker(task.first, task.second, {}, options);
        QCOMPARE(stopped.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(stopped.result.failure.startsWith(QStringLiteral("out of memory")), qPrintable(stopped.result.failure));
        nextShardTrains();
    }

    // What a job's code prints (here lines that look like the worker's own answers: "done",
    // "progress ...") goes to the worker's log, never onto its answers: a driven worker and a
    // one-shot one both train the shard to the bits of a run here.
    void whatAJobsCodePrintsNeverReachesTheSupervisor()
    {
        const auto [task, start] = hostileTask(QStringLiteral("printer.pt"));
        const auto here = compute::runShard(task, start, {});
        QVERIFY2(here.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(here.result.failure));
        const auto once = compute::sandbox::runShardInWorker(task, start, {}, workerOptions());
        QVERIFY2(once.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(once.result.failure));
        QCOMPARE(once.result.checkpointHashes, here.result.checkpointHashes);
        auto driven = compute::sandbox::RemoteShardRun::start(task, start, {}, workerOptions());
        QVERIFY2(driven.ok(), qPrintable(driven.ok() ? QString() : driven.error().toString()));
        while (!(*driven)->finished())
            QVERIFY((*driven)->step(3).ok());
        const auto there = (*driven)->finish();
        QVERIFY2(there.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(there.result.failure));
        QCOMPARE(there.result.checkpointHashes, here.result.checkpointHashes);
        QCOMPARE(there.weights, here.weights);
    }

    // A long-lived worker driven a few steps at a time, as the compute thread drives its runs:
    // paused in one worker after 7 steps, resumed in another, it ends with the bits of one
    // uninterrupted run here.
    void aShardPausedInOneWorkerAndResumedInAnotherEndsWithTheSameBits()
    {
        const auto prepared = prepare(smallJob());
        const auto& task = prepared.tasks[2];
        const auto here = compute::runShard(task, prepared.start.bytes, {});
        QByteArray state;
        {
            auto first = compute::sandbox::RemoteShardRun::start(task, prepared.start.bytes, {}, workerOptions());
            QVERIFY2(first.ok(), qPrintable(first.ok() ? QString() : first.error().toString()));
            QVERIFY((*first)->step(7).ok());
            QCOMPARE((*first)->completedSteps(), 7);
            auto suspended = (*first)->suspend();
            QVERIFY2(suspended.ok(), qPrintable(suspended.ok() ? QString() : suspended.error().toString()));
            state = *suspended;
        } // that worker ends here
        auto second = compute::sandbox::RemoteShardRun::resume(task, state, {}, workerOptions(), prepared.start.bytes);
        QVERIFY2(second.ok(), qPrintable(second.ok() ? QString() : second.error().toString()));
        QCOMPARE((*second)->completedSteps(), 7);
        while (!(*second)->finished())
            QVERIFY((*second)->step(5).ok());
        const auto there = (*second)->finish();
        QVERIFY2(there.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(there.result.failure));
        QCOMPARE(there.result.finalHash, here.result.finalHash);
        QCOMPARE(there.result.checkpointHashes, here.result.checkpointHashes);
        QCOMPARE(there.weights, here.weights);

        // An endless forward() in a driven worker: the worker ends at the time limit, counted from
        // the shard's start (on a busy machine the limit may already pass while the worker loads the
        // job's data; then start() says so), without taking this process with it.
        auto endless = hostileTask(QStringLiteral("endless.pt"));
        auto options = workerOptions();
        options.timeLimitMs = 3000;
        auto stuck = compute::sandbox::RemoteShardRun::start(endless.first, endless.second, {}, options);
        QString why = stuck.ok() ? QString() : stuck.error().message;
        if (stuck.ok()) {
            const auto stepped = (*stuck)->step(1);
            QVERIFY(!stepped.ok());
            why = stepped.error().message;
            QVERIFY(!(*stuck)->step(1).ok()); // and it stays ended
        }
        QVERIFY2(why.startsWith(QStringLiteral("time limit")), qPrintable(why));
    }

    // The compute thread with Compute/Sandbox: a shard whose forward() never returns is stopped
    // at its time limit and fails with the reason; a stuck one of a cancelled job is stopped at once;
    // the thread goes on to train the next shard either way.
    // Broker/Sandbox: the broker's runs of a job's code (initial weights, evaluation, replays) in
    // workers give what they give in its process, bit for bit; and a forward() that never returns
    // ends at the time limit as an error for that job, while the next call works.
    void theBrokersRunsOfAJobsCodeRunInWorkersWithTheSameBits()
    {
        const auto spec = smallJob();
        compute::BrokerMath here({});
        compute::BrokerMath there({});
        auto options = workerOptions();
        options.memoryMiB = 0;
        options.timeLimitMs = 120'000;
        there.setSandbox(options, true); // the zoo model too: the bits are the test

        const auto initial = here.initialWeights(spec);
        const auto initialThere = there.initialWeights(spec);
        QVERIFY2(initialThere, qPrintable(initialThere ? QString() : initialThere.error().toString()));
        QCOMPARE(initialThere->bytes, initial->bytes);
        QCOMPARE(initialThere->canonicalHash, initial->canonicalHash);
        QCOMPARE(initialThere->parameters, initial->parameters);

        const auto task = core::decomposeRound(QStringLiteral("job"), spec, 0, initial->canonicalHash)[0];
        const auto last = task.checkpointCount() - 1;
        QElapsedTimer clock;
        clock.start();
        const auto replayed = here.replay(task, 0, initial->bytes, initial->canonicalHash, last, initial->bytes);
        const auto replayHereMs = clock.restart();
        const auto replayedThere = there.replay(task, 0, initial->bytes, initial->canonicalHash, last, initial->bytes);
        const auto replayThereMs = clock.restart();
        QVERIFY2(replayedThere, qPrintable(replayedThere ? QString() : replayedThere.error().toString()));
        QCOMPARE(replayedThere->checkpoints, replayed->checkpoints);
        QCOMPARE(replayedThere->weightsHash, replayed->weightsHash);
        QCOMPARE(replayedThere->weights, replayed->weights);
        QCOMPARE(replayedThere->runtimeProfile, replayed->runtimeProfile);
        // A state that does not hash to what both sides agree on is refused there too.
        const auto wrong = there.replay(task, 0, initial->bytes, replayed->weightsHash, last, initial->bytes);
        QVERIFY(!wrong);

        clock.restart();
        const auto evaluation = here.evaluate(spec, replayed->weights);
        const auto evaluateHereMs = clock.restart();
        const auto evaluationThere = there.evaluate(spec, replayed->weights);
        const auto evaluateThereMs = clock.restart();
        // What a worker costs the broker (logged for docs/PERFORMANCE.md, not asserted).
        qInfo("replay of a shard: %lld ms here, %lld ms in a worker; evaluation: %lld ms here, %lld ms in a worker",
            static_cast<long long>(replayHereMs), static_cast<long long>(replayThereMs), static_cast<long long>(evaluateHereMs),
            static_cast<long long>(evaluateThereMs));
        QVERIFY2(evaluationThere, qPrintable(evaluationThere ? QString() : evaluationThere.error().toString()));
        QCOMPARE(evaluationThere->loss, evaluation->loss);
        QCOMPARE(evaluationThere->accuracy, evaluation->accuracy);

        options.timeLimitMs = 3000;
        there.setSandbox(options); // TorchScript models only, as tessera-broker runs it
        const auto [endless, start] = hostileTask(QStringLiteral("endless.pt"));
        const auto startHash = *compute::canonicalHashOf(start);
        const auto stopped = there.replay(endless, 0, start, startHash, endless.checkpointCount() - 1, start);
        QVERIFY(!stopped);
        QVERIFY2(stopped.error().message.contains(QStringLiteral("time limit")), qPrintable(stopped.error().toString()));
        // The next TorchScript model's replay, in a worker again, works and has the bits of one here
        // (with room for the worker's start however slow the machine: the limit is not the test).
        options.timeLimitMs = 120'000;
        there.setSandbox(options);
        const auto [scripted, scriptedStart] = hostileTask(QStringLiteral("scripted.pt"));
        const auto scriptedHash = *compute::canonicalHashOf(scriptedStart);
        const auto again = there.replay(scripted, 0, scriptedStart, scriptedHash, 1, scriptedStart);
        QVERIFY2(again, qPrintable(again ? QString() : again.error().toString()));
        QCOMPARE(again->checkpoints, here.replay(scripted, 0, scriptedStart, scriptedHash, 1, scriptedStart)->checkpoints);
    }

    // A compute thread without LibTorch of its own (the desktop app's) trains in a worker even with
    // the sandbox off: one that is not confined (for a GPU), to the same bits.
    void aThreadWithoutLibTorchTrainsInAnUnconfinedWorkerWithTheSandboxOff()
    {
        compute::ComputeThread thread({});
        compute::ComputeThread::Sandbox sandbox;
        sandbox.enabled = false;
        sandbox.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
        sandbox.scratchRoot = m_scratch.filePath(QStringLiteral("unconfined"));
        sandbox.nice = 0;
        thread.setSandbox(sandbox);
        QSignalSpy finished(&thread, &compute::ComputeThread::shardFinished);
        const auto good = prepare(smallJob());
        thread.submit(good.tasks[0], good.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 240'000));
        const auto output = finished.at(0).at(0).value<compute::ShardOutput>();
        QVERIFY2(output.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(output.result.failure));
        const auto here = compute::runShard(good.tasks[0], good.start.bytes, {});
        QCOMPARE(output.result.finalHash, here.result.finalHash);
        QCOMPARE(output.weights, here.weights);
        // It ran in a worker: only a worker's start makes the scratch root (whether the worker is
        // still kept for the job depends on time, so that is not asked).
        QVERIFY(QDir(sandbox.scratchRoot).exists());
    }

    void aSandboxedComputeThreadStopsHungShardsAndTrainsTheNext()
    {
        compute::ComputeThread thread({}, compute::inThreadCompute());
        compute::ComputeThread::Sandbox sandbox;
        sandbox.enabled = true;
        sandbox.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
        sandbox.scratchRoot = m_scratch.path();
        sandbox.nice = 0; // not the priority's test: a busy machine must not starve it
        thread.setSandbox(sandbox);
        QSignalSpy finished(&thread, &compute::ComputeThread::shardFinished);
        QSignalSpy cancelled(&thread, &compute::ComputeThread::shardCancelled);
        const auto endless = hostileTask(QStringLiteral("endless.pt"));
        const auto good = prepare(smallJob());

        thread.submit(endless.first, endless.second, 3000);
        thread.submit(good.tasks[1], good.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 240'000));
        const auto stopped = finished.at(0).at(0).value<compute::ShardOutput>().result;
        QCOMPARE(stopped.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(stopped.failure.startsWith(QStringLiteral("time limit")), qPrintable(stopped.failure));
        const auto next = finished.at(1).at(0).value<compute::ShardOutput>().result;
        QVERIFY2(next.outcome == core::ShardResult::Outcome::Completed, qPrintable(next.failure));
        QCOMPARE(next.finalHash, compute::runShard(good.tasks[1], good.start.bytes, {}).result.finalHash);

        // No time limit: only the cancel ends it (asked while its step runs, here almost always).
        auto stuck = endless.first;
        stuck.jobId = QStringLiteral("stuck-job");
        thread.submit(stuck, endless.second);
        QVERIFY(QTest::qWaitFor([&] { return thread.state() == compute::ComputeThread::State::Working; }, 60'000));
        QTest::qWait(1000);
        thread.cancelJob(stuck.jobId);
        QVERIFY(QTest::qWaitFor([&] { return cancelled.count() == 1; }, 60'000));
        // Cancelled at once, most likely while its worker still starts: cancelled all the same.
        stuck.jobId = QStringLiteral("stuck-job-2");
        thread.submit(stuck, endless.second);
        QVERIFY(QTest::qWaitFor([&] { return thread.state() == compute::ComputeThread::State::Working; }, 60'000));
        thread.cancelJob(stuck.jobId);
        QVERIFY(QTest::qWaitFor([&] { return cancelled.count() == 2; }, 60'000));
        QCOMPARE(finished.count(), 2);
        thread.submit(good.tasks[2], good.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 3; }, 240'000));
        QCOMPARE(finished.at(2).at(0).value<compute::ShardOutput>().result.outcome, core::ShardResult::Outcome::Completed);
    }

private:
    QTemporaryDir m_scratch;

    compute::sandbox::WorkerOptions workerOptions() const
    {
        compute::sandbox::WorkerOptions options;
        options.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
        options.scratchRoot = m_scratch.path();
        options.memoryMiB = 2048;
        options.nice = 0; // not the priority's test: a busy machine must not starve it
        return options;
    }

    // A task of the small job whose model is a hostile TorchScript file of the fixtures.
    std::pair<core::ShardTask, QByteArray> hostileTask(const QString& script)
    {
        auto spec = smallJob();
        spec.model = core::ModelSpec {};
        spec.model.source = core::ModelSpec::Source::TorchScript;
        spec.model.scriptFile = m_fixtures.filePath(script);
        const auto prepared = prepare(spec);
        return { prepared.tasks[0], prepared.start.bytes };
    }

    void nextShardTrains()
    {
        const auto prepared = prepare(smallJob());
        const auto next = compute::sandbox::runShardInWorker(prepared.tasks[1], prepared.start.bytes, {}, workerOptions());
        QVERIFY2(next.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(next.result.failure));
    }
};

QTEST_GUILESS_MAIN(ComputeTest)
#include "tst_compute.moc"
