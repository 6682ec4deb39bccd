// An inference shard's arithmetic (docs/DETERMINISM.md, "Inference"): each input's line depends
// on the model's weights and that input alone, so shards of any size, a resumed run and the
// referee's one input all give the same bytes, and one changed line is found where it is.

#include "computetesting.h"

#include <compute/engine/detail/portablestep.h>
#include <compute/supervisor/inthread.h>
#include <core/inference/outputs.h>
#include <core/inference/question.h>
#include <core/smalljobs.h>

using namespace tessera;
using namespace tessera::computetests;

namespace {

core::JobSpec inferenceOf(const core::JobSpec& trained, const QString& weightsFile, const core::InferenceSpec& inference)
{
    auto spec = core::inferenceJobOf(trained, weightsFile, inference);
    if (!spec)
        qFatal("not a valid inference job");
    return *spec;
}

struct Lines {
    QByteArray blob;
    QList<core::Digest> chain;
};

Lines runAll(const core::JobSpec& spec, const compute::Weights& weights)
{
    Lines all;
    for (const auto& task : core::decomposeRound(QStringLiteral("0123456789abcdef"), spec, 0, weights.canonicalHash)) {
        const auto output = compute::runShard(task, weights.bytes, {});
        if (output.result.outcome != core::ShardResult::Outcome::Completed)
            qFatal("%s", qPrintable(output.result.failure));
        all.blob += output.weights;
        all.chain += output.result.checkpointHashes.mid(1);
        if (output.result.finalHash != core::Digest::ofBytes(output.weights)
            || output.result.checkpointHashes.first() != weights.canonicalHash)
            qFatal("the result does not name its lines");
    }
    return all;
}

} // namespace

class InferenceRunTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;

    // A byte gpt of context 32, seeded, in evaluation mode; and 32 tokens of a seeded draw.
    static std::unique_ptr<compute::detail::Model> evaluated(const core::ModelSpec& spec)
    {
        auto model = compute::detail::buildModel(spec, { 32 }, 256, 7, {});
        if (!model)
            qFatal("%s", qPrintable(model.error().toString()));
        (*model)->setTraining(false);
        return std::move(*model);
    }
    static at::Tensor someTokens()
    {
        torch::manual_seed(3);
        return torch::randint(0, 256, { 1, 32 }, torch::kLong);
    }

    std::pair<core::JobSpec, compute::Weights> prepared(const core::JobSpec& trained, const core::InferenceSpec& inference)
    {
        auto initial = compute::initialWeights(trained, {});
        if (!initial)
            qFatal("%s", qPrintable(initial.error().toString()));
        const QString file = m_dir.filePath(trained.name + QStringLiteral(".pt"));
        QFile out(file);
        out.open(QIODevice::WriteOnly);
        out.write(initial->bytes);
        out.close();
        auto spec = inferenceOf(trained, file, inference);
        auto weights = compute::initialWeights(spec, {});
        if (!weights || weights->canonicalHash != initial->canonicalHash)
            qFatal("the inference job does not load its weights");
        return { spec, *weights };
    }

private Q_SLOTS:
    void shardsOfAnySizeGiveTheSameLinesAndTheRefereeFindsAChangedOne()
    {
        core::InferenceSpec inference;
        inference.task = core::InferenceSpec::Task::Classify;
        inference.batchSize = 50;
        inference.samplesPerShard = 1000;
        auto [big, weights] = prepared(smallJob(), inference);
        inference.samplesPerShard = 150;
        const auto small = inferenceOf(smallJob(), big.model.initialWeightsFile, inference);
        const auto whole = runAll(big, weights), cut = runAll(small, weights);
        QCOMPARE(cut.blob.count('\n'), 10000);
        QVERIFY(cut.blob == whole.blob);
        QCOMPARE(cut.chain, whole.chain);

        // The referee's one input (its batch computed whole) is the shard's line.
        const auto task = core::decomposeShard(QStringLiteral("0123456789abcdef"), small, 0, 3, weights.canonicalHash);
        const auto output = compute::runShard(task, weights.bytes, {});
        QCOMPARE(task.checkpointCount(), 4); // 150 inputs in batches of 50
        for (const std::int64_t j : { 1, 2, 3 }) {
            auto replay = compute::replayShard(task, j - 1, weights.bytes, {}, j, {}, {});
            QVERIFY2(replay, qPrintable(replay ? QString() : replay.error().toString()));
            QCOMPARE(replay->checkpoints, QList<core::Digest> { output.result.checkpointHashes[j] });
        }
        auto full = compute::replayShard(task, 0, weights.bytes, {}, task.checkpointCount() - 1, {}, {});
        QVERIFY(full);
        QCOMPARE(full->weightsHash, output.result.finalHash);
        // Weights that are not the task's are refused, by field.
        auto other = compute::initialWeights(smallGpt(), {});
        QVERIFY(!compute::replayShard(task, 0, other->bytes, {}, 1, {}, {}));

        // One changed line: the chains part at its batch.
        auto lines = *core::inference::linesOf(output.weights);
        lines[91].replace("\"class\":", "\"class\":1");
        const auto cheat = core::inference::chainOf(task.startWeights, lines, task.batchSize);
        QCOMPARE(core::verification::firstDivergence(output.result.checkpointHashes, cheat), std::optional<qsizetype>(2));
    }

    void aSuspendedShardResumesToTheSameLines()
    {
        core::InferenceSpec inference;
        inference.task = core::InferenceSpec::Task::Generate;
        inference.batchSize = 1;
        inference.samplesPerShard = 5;
        inference.promptText = "%\n";
        inference.promptCount = 5;
        inference.maxTokens = 12;
        inference.temperature = 0.8;
        inference.seed = 4;
        inference.stop = { "\n" };
        auto [spec, weights] = prepared(smallGpt(), inference);
        const auto task = core::decomposeShard(QStringLiteral("0123456789abcdef"), spec, 0, 0, weights.canonicalHash);
        const auto straight = compute::runShard(task, weights.bytes, {});
        QCOMPARE(straight.result.outcome, core::ShardResult::Outcome::Completed);
        QCOMPARE(straight.weights.count('\n'), 5);

        auto run = compute::ShardRun::start(task, weights.bytes, {});
        QVERIFY(run);
        QVERIFY((*run)->step());
        QVERIFY((*run)->step());
        const auto suspended = (*run)->suspend();
        run->reset();
        auto resumed = compute::ShardRun::resume(task, suspended, {}, compute::ShardRun::StateOrigin::Own, weights.bytes);
        QVERIFY2(resumed, qPrintable(resumed ? QString() : resumed.error().toString()));
        QCOMPARE((*resumed)->completedSteps(), 2);
        while (!(*resumed)->finished())
            QVERIFY((*resumed)->step());
        const auto output = (*resumed)->finish();
        QVERIFY(output.weights == straight.weights);
        QCOMPARE(output.result.checkpointHashes, straight.result.checkpointHashes);

        // Each prompt draws from its own seed: the referee's prompt 3 alone is the shard's line.
        auto replay = compute::replayShard(task, 3, weights.bytes, {}, 4, {}, {});
        QVERIFY(replay);
        QCOMPARE(replay->checkpoints.first(), straight.result.checkpointHashes[4]);
        // A state that is not of this task is refused.
        auto otherTask = task;
        otherTask.inference->seed = 5;
        QVERIFY(!compute::ShardRun::resume(otherTask, suspended, {}, compute::ShardRun::StateOrigin::Own, weights.bytes));
        // No dispute asks an inference node for a state.
        QVERIFY(!compute::recreateState(task, weights.bytes, {}, 1, {}));
    }

    // The gpt's KV cache (the prompt in one pass, then a position at a time) gives the full
    // forward's logits, to rounding.
    void theKvCacheGivesTheFullForwardsLogits()
    {
        auto spec = smallGpt();
        auto model = evaluated(spec.model);
        torch::NoGradGuard noGrad;
        const auto tokens = someTokens();
        const auto full = model->forward(tokens)[0];
        compute::detail::Model::KvCache cache;
        auto last = model->decode(tokens.slice(1, 0, 12), 0, cache);
        QVERIFY(last.defined());
        QVERIFY(torch::allclose(last, full[11], 1e-4, 1e-5));
        for (std::int64_t position = 12; position < 32; ++position) {
            last = model->decode(tokens.slice(1, position, position + 1), position, cache);
            QVERIFY2(torch::allclose(last, full[position], 1e-4, 1e-5), qPrintable(QString::number(position)));
        }
        // Past the context it refuses rather than read positions the model has no embedding for.
        QVERIFY_THROWS_EXCEPTION(std::exception, model->decode(tokens.slice(1, 0, 1), 32, cache));
    }

    // The portable decoder's logits are the bits of the portable forward program's last row over the
    // whole sequence at every length (docs/DETERMINISM.md, "Inference in portable mode"), with the
    // head tied or not, on one thread or two; it refuses a token beyond the vocabulary and a position
    // beyond the context.
    void thePortableDecoderGivesTheForwardProgramsLastRowBitForBit()
    {
        for (const bool tied : { true, false }) {
            auto spec = smallGpt();
            spec.model.tied = tied;
            auto model = evaluated(spec.model);
            torch::NoGradGuard noGrad;
            const auto tokens = someTokens();
            compute::detail::PortableForward forward(spec.model, *model, 256, 1);
            auto decoder = forward.decoder();
            QVERIFY2(decoder, qPrintable(decoder ? QString() : decoder.error().toString()));
            compute::detail::PortableForward twoThreads(spec.model, *model, 256, 2);
            auto other = twoThreads.decoder();
            QVERIFY(other);
            for (std::int64_t length = 1; length <= 32; ++length) {
                const auto* pushed = (*decoder)->push(tokens[0][length - 1].item<std::int64_t>());
                const auto* again = (*other)->push(tokens[0][length - 1].item<std::int64_t>());
                QVERIFY(pushed && again);
                auto logits = forward.logits(tokens.slice(1, 0, length));
                QVERIFY(logits);
                const auto row = (*logits)[0][length - 1].contiguous();
                QVERIFY2(std::memcmp(row.data_ptr<float>(), pushed->data(), 256 * sizeof(float)) == 0,
                    qPrintable(QStringLiteral("length %1").arg(length)));
                QVERIFY(*again == *pushed);
            }
            QVERIFY(!(*decoder)->push(1)); // past the context
            (*decoder)->reset();
            QVERIFY(!(*decoder)->push(256));
            QVERIFY(!(*decoder)->push(-1));
            QVERIFY((*decoder)->push(255));
        }
    }

    // A served model's answer (docs/PROTOCOL.md, "Serving") is the line of a generate shard of its
    // one prompt at index 0, and what it streams on the way is that line's tokens, each once: none
    // is taken back by a stop sequence.
    void aServedAnswerIsItsOnePromptsGenerateLineStreamedOnce()
    {
        core::InferenceSpec serve;
        serve.task = core::InferenceSpec::Task::Serve;
        serve.batchSize = serve.samplesPerShard = serve.threads = serve.replicas = 1;
        serve.seconds = 60;
        serve.maxTokens = 40;
        auto [served, weights] = prepared(smallGpt(), serve);
        const auto replica = core::decomposeShard(QStringLiteral("0123456789abcdef"), served, 0, 0, weights.canonicalHash);
        auto hosted = compute::inThreadCompute()->host(replica, weights.bytes, {});
        QVERIFY2(hosted, qPrintable(hosted ? QString() : hosted.error().toString()));
        auto answer = [&](const core::inference::Question& question, QList<std::int64_t>& streamed) {
            streamed.clear();
            auto line = (*hosted)->answer(question, [&](std::int64_t from, const QList<std::int64_t>& tokens) {
                QCOMPARE(from, streamed.size()); // in order, each once
                streamed += tokens;
            });
            return line ? *line : QByteArray();
        };
        core::inference::Question question;
        question.prompt = QByteArrayLiteral("Tell me ");
        question.maxTokens = 40;
        QList<std::int64_t> streamed;
        const auto free = answer(question, streamed);
        auto completion = core::inference::completionOf(free);
        QVERIFY(completion && completion->tokens.size() == 40);
        QCOMPARE(streamed, completion->tokens);
        // A stop sequence made of two of its tokens ends it there, and nothing streamed is taken back.
        for (const auto temperature : { 0.0, 0.8 }) {
            question.temperature = temperature;
            question.seed = 9;
            question.stop.clear();
            const auto unstopped = core::inference::completionOf(answer(question, streamed));
            QVERIFY(unstopped);
            question.stop
                = { QByteArray(1, char(unstopped->tokens[20])) + char(unstopped->tokens[21]), QByteArrayLiteral("\x01") };
            const auto line = answer(question, streamed);
            const auto stopped = core::inference::completionOf(line);
            QVERIFY(stopped && stopped->stopped && stopped->tokens.size() <= 20);
            QCOMPARE(streamed, stopped->tokens);
            // The generate shard of that one prompt writes the same line.
            core::InferenceSpec generate;
            generate.task = core::InferenceSpec::Task::Generate;
            generate.batchSize = generate.samplesPerShard = generate.promptCount = 1;
            generate.promptText = question.prompt;
            generate.maxTokens = question.maxTokens;
            generate.temperature = question.temperature;
            generate.seed = question.seed;
            generate.stop = question.stop;
            auto [job, same] = prepared(smallGpt(), generate);
            QCOMPARE(runAll(job, same).blob, line + '\n');
        }
    }

    // Portable mode (docs/DETERMINISM.md, "Inference in portable mode"): the portable kernels give
    // the same lines on any thread count, and lines that agree with fast mode's within the
    // tolerance across runtime profiles; a model they do not cover is refused by field.
    void portableModeGivesTheSameLinesOnAnyThreadCountAndAgreesWithFastMode()
    {
        auto cnn = smallJob();
        cnn.name = QStringLiteral("small cnn");
        cnn.model = core::ModelSpec {};
        cnn.model.zoo = QStringLiteral("cnn");
        cnn.model.channels = { 4, 8 };
        cnn.model.hidden = { 16 };
        core::InferenceSpec classify;
        classify.task = core::InferenceSpec::Task::Classify;
        classify.batchSize = 25;
        classify.samplesPerShard = 100;
        core::InferenceSpec score;
        score.task = core::InferenceSpec::Task::Score;
        score.batchSize = 5;
        score.samplesPerShard = 10;
        core::InferenceSpec generate;
        generate.task = core::InferenceSpec::Task::Generate;
        generate.batchSize = 1;
        generate.samplesPerShard = 3;
        generate.promptText = "Fortune favours ";
        generate.promptCount = 6;
        generate.maxTokens = 40; // past the context of 32: the window slides
        generate.temperature = 0.8;
        generate.seed = 9;
        const std::vector<std::pair<core::JobSpec, core::InferenceSpec>> cases { { smallJob(), classify }, { cnn, classify },
            { smallGpt(), score }, { smallGpt(), generate } };
        for (const auto& [trained, inference] : cases) {
            auto [fast, weights] = prepared(trained, inference);
            auto portable = fast;
            portable.inference.determinism = core::InferenceSpec::Determinism::Portable;
            auto task = core::decomposeShard(QStringLiteral("0123456789abcdef"), portable, 0, 1, weights.canonicalHash);
            QVERIFY(task.portable);
            const auto one = compute::runShard(task, weights.bytes, {});
            QVERIFY2(one.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(one.result.failure));
            QCOMPARE(one.result.runtimeProfile, core::PortableProfile);
            task.threads = 2;
            task.inference->threads = 2;
            const auto two = compute::runShard(task, weights.bytes, {});
            QVERIFY2(two.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(two.result.failure));
            QVERIFY(two.weights == one.weights);
            QCOMPARE(two.result.checkpointHashes, one.result.checkpointHashes);
            const auto fastTask = core::decomposeShard(QStringLiteral("0123456789abcdef"), fast, 0, 1, weights.canonicalHash);
            const auto reference = compute::runShard(fastTask, weights.bytes, {});
            const auto a = *core::inference::linesOf(one.weights), b = *core::inference::linesOf(reference.weights);
            QCOMPARE(a.size(), b.size());
            for (qsizetype k = 0; k < a.size(); ++k) {
                QString why;
                QVERIFY2(core::inference::agreeWithin(inference.task, a[k], b[k], &why),
                    qPrintable(trained.name + QStringLiteral(": ") + why));
            }
            // The referee's one batch in portable mode is the shard's.
            auto replay = compute::replayShard(task, 1, weights.bytes, {}, 2, {}, {});
            QVERIFY(replay);
            QCOMPARE(replay->checkpoints.first(), one.result.checkpointHashes[2]);
        }
        // A model the portable kernels do not cover fails the shard, naming the field.
        auto [dropped, weights] = prepared(smallGpt(), generate);
        dropped.model.dropout = 0.1; // off in inference: still covered
        dropped.inference.determinism = core::InferenceSpec::Determinism::Portable;
        auto task = core::decomposeShard(QStringLiteral("0123456789abcdef"), dropped, 0, 0, weights.canonicalHash);
        QCOMPARE(compute::runShard(task, weights.bytes, {}).result.outcome, core::ShardResult::Outcome::Completed);
        task.model.heads = 3; // not what the weights are
        QVERIFY(compute::runShard(task, weights.bytes, {}).result.outcome != core::ShardResult::Outcome::Completed);
    }

    // Memory the node lacks is said as its resources' ("out of memory"), which the broker never
    // holds against a node, whatever the profile.
    void runningOutOfMemoryIsSaidSo()
    {
        const auto failed = compute::detail::guarded(QStringLiteral("prompt 3"), []() -> int { throw std::bad_alloc(); });
        QVERIFY(!failed);
        QVERIFY2(failed.error().message.startsWith(QStringLiteral("out of memory")), qPrintable(failed.error().message));
        QVERIFY(core::ShardResult::isSandboxFailure(failed.error().message));
    }

    void scoringGivesEachWindowsMeanLoss()
    {
        core::InferenceSpec inference;
        inference.task = core::InferenceSpec::Task::Score;
        inference.batchSize = 10;
        inference.samplesPerShard = 20;
        auto [spec, weights] = prepared(smallGpt(), inference);
        const auto task = core::decomposeShard(QStringLiteral("0123456789abcdef"), spec, 0, 1, weights.canonicalHash);
        const auto output = compute::runShard(task, weights.bytes, {});
        QCOMPARE(output.result.outcome, core::ShardResult::Outcome::Completed);
        QVERIFY(core::inference::checkRevealed(task, output.weights, output.result.checkpointHashes));
        auto summary = core::inference::summarize(core::InferenceSpec::Task::Score, output.weights);
        QVERIFY(summary);
        // An untrained byte model: about ln(256) per token.
        QVERIFY2(std::abs(summary->meanLoss - std::log(256.0)) < 0.5, qPrintable(QString::number(summary->meanLoss)));
    }
};

QTEST_GUILESS_MAIN(InferenceRunTest)
#include "tst_inferencerun.moc"
