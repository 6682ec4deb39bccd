// make bench: pipeline stages (docs/PERFORMANCE.md, "Pipeline stages"), each figure against a
// baseline measured in the same run.
//
// Throughput: a gpt's shard as S = 2 stage tasks of 1 thread each, run as train-local runs them
// (threads that trade their tensors as nodes do), against the same shard whole and micro-batched
// at 2 threads: the ratio of tokens/s (the goal is 0.75), with the 1F1B bubble and the bytes that
// cross each boundary a step.
//
// Memory: each stage of a larger gpt run alone in a process of its own, from what it received in
// a recorded run (core::StageInputs, as a verifier re-executes a stage), against the whole shard in
// a process of its own: the peak resident memory above that of a process that only loaded the
// engine, and the ratio.
//
// Usage: tessera-bench-pipeline (a child: --child idle|whole|S-STAGE DIR)

#include "record.h"

#include <compute/engine/localjob.h>
#include <compute/engine/pipelinerun.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <compute/supervisor/computethread.h>
#include <core/decomposition.h>
#include <core/memoryestimate.h>
#include <core/readfile.h>
#include <core/smalljobs.h>
#include <core/stagetensors.h>

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QJsonDocument>
#include <QProcess>
#include <QTemporaryDir>

#include <algorithm>
#include <cstdio>
#include <thread>

using namespace tessera;

namespace {

core::JobSpec pipelinedGpt(
    std::int64_t layers, std::int64_t width, std::int64_t context, std::int64_t batch, std::int64_t micro, std::int64_t steps)
{
    auto spec = core::smallGptJob(QStringLiteral("pipeline bench"), layers, 4, width, context);
    spec.model.tied = false;
    spec.optimizer = core::OptimizerSpec {};
    spec.optimizer.kind = core::OptimizerSpec::Kind::AdamW;
    spec.optimizer.lr = 0.001;
    spec.optimizer.clipNorm = 1.0;
    spec.aggregation.compression = core::Compression::None;
    spec.training.determinism = core::TrainingSpec::Determinism::Portable;
    spec.training.localSteps = steps;
    spec.training.checkpointInterval = steps;
    spec.training.batchSize = batch;
    spec.training.shardsPerRound = 1;
    spec.training.pipeline = { 2, micro };
    if (auto status = spec.validate(); !status)
        qFatal("%s", qPrintable(status.error().toString()));
    return spec;
}

// A job's round-0 weights and its first shard's task.
struct FirstShard {
    compute::Weights start;
    core::ShardTask task;
};
FirstShard firstShard(const core::JobSpec& spec)
{
    auto start = compute::initialWeights(spec, {});
    if (!start)
        qFatal("%s", qPrintable(start.error().toString()));
    auto task = core::decomposeRound(QStringLiteral("bench"), spec, 0, start->canonicalHash).first();
    return { std::move(*start), std::move(task) };
}

// The peak resident memory of this process so far, in bytes (VmHWM).
std::int64_t peakRss()
{
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly))
        return -1;
    for (const auto& line : status.readAll().split('\n')) {
        if (line.startsWith("VmHWM:"))
            return line.mid(6).trimmed().split(' ').first().toLongLong() * 1024;
    }
    return -1;
}

void writeFile(const QString& path, const QByteArray& bytes)
{
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size())
        qFatal("cannot write %s", qPrintable(path));
}

// What a child runs: nothing (the engine's own footprint), the whole shard from the weights in
// memory (as a worker does), or one stage from its recorded inputs and the weights' file (as a
// node starts a stage: its share alone); it prints its peak resident memory.
int child(const QString& what, const QString& directory)
{
    const QDir dir(directory);
    if (what != u"idle") {
        auto json = core::readFile(dir.filePath(what + QStringLiteral(".json")));
        auto task = json ? core::ShardTask::fromJson(QJsonDocument::fromJson(*json).object())
                         : core::Result<core::ShardTask>(json.error());
        if (!task)
            qFatal("the child has no task");
        compute::ComputeEnvironment environment;
        environment.blobPath = [dir](const core::Digest& digest) -> std::optional<QString> {
            const QString path = dir.filePath(digest.toHex());
            return QFile::exists(path) ? std::optional<QString>(path) : std::nullopt;
        };
        const QString start = dir.filePath(QStringLiteral("start.pt"));
        auto run = what == u"whole" ? compute::ShardRun::start(*task, core::readFile(start).value_or(QByteArray()), environment)
                                    : compute::ShardRun::startFromFile(*task, start, environment);
        if (!run)
            qFatal("%s", qPrintable(run.error().toString()));
        while (!(*run)->finished()) {
            if (auto status = (*run)->step(); !status)
                qFatal("%s", qPrintable(status.error().toString()));
        }
        const auto output = (*run)->finish();
        if (output.result.outcome != core::ShardResult::Outcome::Completed)
            qFatal("%s", qPrintable(output.result.failure));
    }
    std::printf("%lld\n", static_cast<long long>(peakRss()));
    return 0;
}

std::int64_t peakOf(const QString& what, const QString& directory)
{
    QProcess process;
    process.start(QCoreApplication::applicationFilePath(), { QStringLiteral("--child"), what, directory });
    if (!process.waitForFinished(-1) || process.exitCode() != 0)
        qFatal("the %s child failed: %s", qPrintable(what), process.readAllStandardError().constData());
    return process.readAllStandardOutput().trimmed().toLongLong();
}

void throughput()
{
    // The job of docs/PERFORMANCE.md's first pipeline figure: 8 blocks of width 128, 64 positions,
    // batch 16 in 8 micro-batches, AdamW with clipping, 10 steps.
    const auto spec = pipelinedGpt(8, 128, 64, 16, 8, 10);
    const auto [weights, task] = firstShard(spec);
    const auto* start = &weights;
    auto whole = task;
    whole.threads = 2;
    auto staged = task;
    staged.threads = 1;
    // Each twice, in turn (the first run also pays for loading the data): the faster of each.
    compute::ShardOutput alone, piped;
    double wholeSeconds = 1e9, stagedSeconds = 1e9;
    for (int run = 0; run < 2; ++run) {
        QElapsedTimer timer;
        timer.start();
        alone = compute::runShard(whole, start->bytes, {});
        wholeSeconds = std::min(wholeSeconds, double(timer.nsecsElapsed()) / 1e9);
        timer.restart();
        piped = compute::runPipelineShard(staged, 2, start->bytes, {});
        stagedSeconds = std::min(stagedSeconds, double(timer.nsecsElapsed()) / 1e9);
    }
    if (alone.result.outcome != core::ShardResult::Outcome::Completed
        || piped.result.outcome != core::ShardResult::Outcome::Completed || alone.result.finalHash != piped.result.finalHash)
        qFatal("the staged shard does not end on the whole shard's bits");
    const double tokens = double(task.localSteps * task.batchSize * spec.model.context);
    const double ratio = wholeSeconds / stagedSeconds;
    const auto M = spec.training.pipeline.microBatches;
    const std::int64_t boundaryBytes = 2 * task.batchSize * spec.model.context * spec.model.width * 4;
    std::printf("throughput: whole at 2 threads %.0f tokens/s (%.2f s), 2 stages x 1 thread %.0f tokens/s (%.2f s): %.2f "
                "(goal 0.75); 1F1B bubble 1/%lld of a step; %lld bytes a step cross the boundary\n",
        tokens / wholeSeconds, wholeSeconds, tokens / stagedSeconds, stagedSeconds, ratio, static_cast<long long>(M + 1),
        static_cast<long long>(boundaryBytes));
    bench::record("pipeline.throughput.ratio", ratio);
    bench::record("pipeline.throughput.wholeTokensPerSecond", tokens / wholeSeconds);
    bench::record("pipeline.throughput.stagedTokensPerSecond", tokens / stagedSeconds);
    bench::record("pipeline.bytesPerStepAndBoundary", double(boundaryBytes));
}

// A stage in the desktop app runs in its compute worker, which asks its supervisor for every tensor
// over its pipes (base64 lines, docs/SECURITY.md): the throughput job's 2 stages, each on a compute
// thread of its own, in the thread itself (tessera-node) and in a worker (the app). Each 4 times: the
// first pays the worker's start; the best of the others, which keep it, as a node's next shard of
// the job does.
struct StageTimes {
    double first = 0.0;
    double kept = 0.0;
    core::Digest finalHash;
};
StageTimes stagesOnComputeThreads(const core::ShardTask& task, const QString& weightsFile, bool inWorker)
{
    std::vector<std::unique_ptr<compute::ComputeThread>> threads;
    for (int s = 0; s < 2; ++s) {
        threads.push_back(std::make_unique<compute::ComputeThread>(
            compute::ComputeEnvironment {}, inWorker ? nullptr : compute::inThreadCompute()));
        compute::ComputeThread::Sandbox sandbox;
        sandbox.enabled = inWorker;
        sandbox.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
        sandbox.nice = 0;
        threads.back()->setSandbox(sandbox);
    }
    StageTimes times { 0.0, 1e9, {} };
    for (int run = 0; run < 4; ++run) {
        compute::LocalStageLinks links(2);
        QEventLoop loop;
        int done = 0;
        std::vector<QMetaObject::Connection> connections;
        for (int s = 0; s < 2; ++s) {
            connections.push_back(QObject::connect(threads[std::size_t(s)].get(), &compute::ComputeThread::shardFinished, &loop,
                [&, s](const compute::ShardOutput& output) {
                    if (output.result.outcome != core::ShardResult::Outcome::Completed)
                        qFatal("stage %d failed: %s", s + 1, qPrintable(output.result.failure));
                    if (s == 1)
                        times.finalHash = output.result.finalHash;
                    if (++done == 2)
                        loop.quit();
                }));
        }
        QElapsedTimer timer;
        timer.start();
        for (int s = 0; s < 2; ++s)
            threads[std::size_t(s)]->submit(core::stageTaskOf(task, s, 2), {}, 0,
                std::shared_ptr<compute::StageLink>(&links.of(s), [](compute::StageLink*) {}), weightsFile);
        loop.exec();
        const double seconds = double(timer.nsecsElapsed()) / 1e9;
        if (run == 0)
            times.first = seconds;
        else
            times.kept = std::min(times.kept, seconds);
        for (const auto& connection : connections)
            QObject::disconnect(connection);
    }
    return times;
}

void stagesInWorkers()
{
    const auto spec = pipelinedGpt(8, 128, 64, 16, 8, 10);
    const auto [weights, task] = firstShard(spec);
    auto staged = task;
    staged.threads = 1;
    QTemporaryDir temporary;
    const QString file = QDir(temporary.path()).filePath(QStringLiteral("round.pt"));
    writeFile(file, weights.bytes);
    const auto inThread = stagesOnComputeThreads(staged, file, false);
    const auto inWorker = stagesOnComputeThreads(staged, file, true);
    if (inThread.finalHash != inWorker.finalHash)
        qFatal("the stages in workers do not end on the stages' bits in the thread");
    std::printf("stages in workers (the desktop app): the throughput job's 2 stages %.2f s in the compute threads, %.2f s "
                "in workers (%.2f s with their start): %.2f of the threads' speed\n",
        inThread.kept, inWorker.kept, inWorker.first, inThread.kept / inWorker.kept);
    bench::record("pipeline.worker.speed", inThread.kept / inWorker.kept);
}

// int8 tensors (training.pipeline.tensors): the same job's stages trading int8 rows against float32,
// trained longer: the bytes a boundary carries a step, and what they cost in loss (the mean of the
// last 10 steps' training losses, the same batches for both) and in time.
void int8Tensors()
{
    auto spec = pipelinedGpt(8, 128, 64, 16, 8, 60);
    const auto [weights, task] = firstShard(spec);
    spec.training.pipeline.int8Tensors = true;
    const auto narrow = core::decomposeRound(QStringLiteral("bench"), spec, 0, weights.canonicalHash).first();
    auto staged = task;
    staged.threads = 1;
    auto narrowStaged = narrow;
    narrowStaged.threads = 1;
    QElapsedTimer timer;
    timer.start();
    const auto full = compute::runPipelineShard(staged, 2, weights.bytes, {});
    const double fullSeconds = double(timer.nsecsElapsed()) / 1e9;
    timer.restart();
    const auto small = compute::runPipelineShard(narrowStaged, 2, weights.bytes, {});
    const double smallSeconds = double(timer.nsecsElapsed()) / 1e9;
    if (full.result.outcome != core::ShardResult::Outcome::Completed
        || small.result.outcome != core::ShardResult::Outcome::Completed)
        qFatal("a pipeline shard failed: %s %s", qPrintable(full.result.failure), qPrintable(small.result.failure));
    auto tail = [](const QList<double>& losses) {
        double sum = 0;
        for (qsizetype i = losses.size() - 10; i < losses.size(); ++i)
            sum += losses[i];
        return sum / 10.0;
    };
    const double fullLoss = tail(full.result.losses), smallLoss = tail(small.result.losses);
    const std::int64_t elements = task.batchSize * spec.model.context * spec.model.width;
    const std::int64_t fullBytes = 2 * elements * 4, smallBytes = 2 * (elements + elements / spec.model.width * 4);
    std::printf("int8 tensors: %lld bytes a step cross the boundary (float32: %lld, %.3f); 60 steps' last 10 losses %.4f "
                "(float32 %.4f, %+.2f%%); %.2f s (float32 %.2f s, %.2f)\n",
        static_cast<long long>(smallBytes), static_cast<long long>(fullBytes), double(smallBytes) / double(fullBytes), smallLoss,
        fullLoss, 100.0 * (smallLoss - fullLoss) / fullLoss, smallSeconds, fullSeconds, fullSeconds / smallSeconds);
    bench::record("pipeline.int8.bytesRatio", double(smallBytes) / double(fullBytes));
    bench::record("pipeline.int8.lossChange", (smallLoss - fullLoss) / fullLoss);
    bench::record("pipeline.int8.speed", fullSeconds / smallSeconds);
}

// A recorded run of the shard as S stages in this process (as train-local runs them): what each
// stage received, written beside its task ("S-s.json") for a child to re-execute it from.
void recordStages(const core::ShardTask& task, const QByteArray& start, std::int64_t stages, const QDir& dir)
{
    compute::LocalStageLinks links(stages);
    std::vector<std::unique_ptr<compute::RecordingStageLink>> taps;
    for (std::int64_t s = 0; s < stages; ++s)
        taps.push_back(std::make_unique<compute::RecordingStageLink>(links.of(s)));
    std::vector<std::thread> threads;
    for (std::int64_t s = 0; s < stages; ++s) {
        threads.emplace_back([&, s] {
            auto run = compute::ShardRun::start(core::stageTaskOf(task, s, stages), start, {});
            if (!run)
                return links.close(run.error().message);
            (*run)->setKeepsCheckpointState(false);
            (*run)->setStageLink(taps[std::size_t(s)].get());
            while (!(*run)->finished()) {
                if (!(*run)->step())
                    return links.close(QStringLiteral("a stage failed"));
            }
        });
    }
    for (auto& thread : threads)
        thread.join();
    for (std::int64_t s = 0; s < stages; ++s) {
        auto stage = core::stageTaskOf(task, s, stages);
        stage.stageInputs = core::Digest::ofBytes(taps[std::size_t(s)]->record);
        writeFile(dir.filePath(stage.stageInputs.toHex()), taps[std::size_t(s)]->record);
        writeFile(dir.filePath(QStringLiteral("%1-%2.json").arg(stages).arg(s)), QJsonDocument(stage.toJson()).toJson());
    }
}

// Each stage of one shard alone against the whole shard, on a node whose Compute/MaxMemoryMiB is
// the largest stage's estimate (what a broker offers it): the whole shard is refused there, every
// stage taken. A stage holds min(S - s, M) micro-batches in flight (1F1B), so with more
// micro-batches than stages its activations shrink faster than its share of the blocks; the data
// it holds whole.
void memoryAt(std::int64_t stages, std::int64_t batch, std::int64_t micro, std::int64_t idle)
{
    const auto spec = pipelinedGpt(8, 384, 64, batch, micro, 2);
    const auto [weights, task] = firstShard(spec);
    const auto* start = &weights;
    QTemporaryDir temporary;
    const QDir dir(temporary.path());
    writeFile(dir.filePath(QStringLiteral("start.pt")), start->bytes);
    writeFile(dir.filePath(QStringLiteral("whole.json")), QJsonDocument(task.toJson()).toJson());
    const double mib = 1024.0 * 1024.0;
    const auto whole = peakOf(QStringLiteral("whole"), dir.path()) - idle;
    const auto data = core::builtinDatasetBytes(spec.dataset.builtin);
    // What a node estimates before it accepts a task (core::estimateShardMemory,
    // estimateStageMemory), which it compares with Compute/MaxMemoryMiB.
    const auto estimate
        = core::estimateShardMemory(spec.model, spec.optimizer, spec.training.batchSize, start->bytes.size(), data);
    std::printf("memory: S = %lld, batch %lld in %lld micro-batches: %.1f M parameters; the whole shard %.0f MiB above an "
                "idle engine (estimated %lld MiB: model %lld, activations %lld, data %lld)\n",
        static_cast<long long>(stages), static_cast<long long>(batch), static_cast<long long>(micro),
        double(start->bytes.size()) / 4e6, double(whole) / mib, static_cast<long long>(estimate.totalMiB()),
        static_cast<long long>(estimate.model >> 20), static_cast<long long>(estimate.activations >> 20),
        static_cast<long long>(estimate.dataset >> 20));
    const QByteArray key = stages == 2 ? "pipeline.memory.s2." : "pipeline.memory.s4.";
    if (stages == 2)
        bench::record("pipeline.memory.wholeMiB", double(whole) / mib);
    recordStages(task, start->bytes, stages, dir);
    const auto largestStage
        = core::estimateLargestStage(spec.model, spec.optimizer, spec.training.batchSize, micro, stages, false, data);
    const auto limit = largestStage.totalMiB();
    const double modelPart
        = double(estimate.model + estimate.activations) / double(largestStage.model + largestStage.activations);
    std::printf("memory: S = %lld: Compute/MaxMemoryMiB %lld (the largest stage's estimate) is %.2f x below the whole "
                "shard's estimate (%.2f x without the data, which each stage holds whole)\n",
        static_cast<long long>(stages), static_cast<long long>(limit), double(estimate.totalMiB()) / double(limit), modelPart);
    bench::record((key + "wholeOverLimit").constData(), double(estimate.totalMiB()) / double(limit));
    double largest = 0;
    for (std::int64_t s = 0; s < stages; ++s) {
        const auto peak = peakOf(QStringLiteral("%1-%2").arg(stages).arg(s), dir.path()) - idle;
        const double ratio = double(peak) / mib / double(limit);
        const auto own
            = core::estimateStageMemory(spec.model, spec.optimizer, spec.training.batchSize, micro, s, stages, false, data);
        largest = std::max(largest, ratio);
        std::printf("memory: S = %lld, stage %lld alone %.0f MiB: %.2f of its estimate (%lld MiB), %.2f of "
                    "Compute/MaxMemoryMiB, %.2f of the whole shard's\n",
            static_cast<long long>(stages), static_cast<long long>(s + 1), double(peak) / mib, double(peak) / double(own.total()),
            static_cast<long long>(own.totalMiB()), ratio, double(peak) / double(whole));
        if (stages == 2)
            bench::record(s == 0 ? "pipeline.memory.stage1Ratio" : "pipeline.memory.stage2Ratio", double(peak) / double(whole));
    }
    bench::record((key + "largestStageOfLimit").constData(), largest);
}

void memory()
{
    // 8 blocks of width 384 (about 15 M parameters), 64 positions: S = 2 with batch 8 in 4
    // micro-batches; S = 4 with batch 16 in 8 (twice as many micro-batches as stages, as 1F1B
    // wants for its bubble too).
    QTemporaryDir temporary;
    const auto idle = peakOf(QStringLiteral("idle"), temporary.path());
    std::printf("memory: an idle engine's peak %.0f MiB\n", double(idle) / (1024.0 * 1024.0));
    memoryAt(2, 8, 4, idle);
    memoryAt(4, 16, 8, idle);
}

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    const auto arguments = app.arguments();
    if (arguments.size() == 4 && arguments[1] == u"--child")
        return child(arguments[2], arguments[3]);
    throughput();
    stagesInWorkers();
    int8Tensors();
    memory();
    return 0;
}
