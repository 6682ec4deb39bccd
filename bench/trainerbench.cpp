// make bench: the shard trainer against a bare LibTorch training loop on the same model, data and
// thread count, measured in the same run. The trainer adds seeded batch planning, checkpoint
// hashing and its own optimizer; the ratio says what that costs (goal: at least 0.97).

#include "record.h"

#include <compute/engine/detail/datasets.h>
#include <compute/engine/detail/models.h>
#include <compute/engine/detail/portablestep.h>
#include <compute/engine/detail/trace.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <compute/supervisor/computethread.h>
#include <core/decomposition.h>
#include <core/readfile.h>
#include <core/smalljobs.h>

#include <torch/torch.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QTemporaryDir>

#include <algorithm>
#include <cstdio>
#include <ctime>

using namespace tessera;

namespace {

struct Case {
    const char* name;
    core::ModelSpec model;
    std::int64_t steps;
};

// Interference (other processes, frequency changes) only ever slows a run down, so the fastest of
// several runs is the best estimate of what the code itself costs (as Python's timeit reports).
double best(const std::vector<double>& rates)
{
    return *std::max_element(rates.begin(), rates.end());
}

// The loop a LibTorch user writes by hand (pytorch/examples cpp/mnist): random batches by
// index_select, forward, cross-entropy (per token for a language model), backward, clipping when
// clipNorm > 0, the optimizer's step. Samples/s.
template<typename Net>
double timedLoop(Net& net, torch::optim::Optimizer& optimizer, const compute::detail::Dataset& data, std::int64_t steps,
    std::int64_t batch, double clipNorm = 0.0)
{
    QElapsedTimer timer;
    timer.start();
    for (std::int64_t step = 0; step < steps; ++step) {
        const auto index = torch::randint(0, data.size(), { batch }, torch::kInt64);
        const auto x = data.samples(index);
        const auto y = data.y.index_select(0, index);
        optimizer.zero_grad();
        const at::Tensor loss = compute::detail::lossOf(net->forward(x), y);
        loss.backward();
        if (clipNorm > 0.0)
            torch::nn::utils::clip_grad_norm_(net->parameters(), clipNorm);
        optimizer.step();
        (void)loss.item<double>();
    }
    return double(steps * batch) / (double(timer.nsecsElapsed()) / 1e9);
}

// The zoo mlp or cnn as torch::nn layers, with torch::optim::SGD.
double bareLoop(const core::JobSpec& spec, const compute::detail::Dataset& data, std::int64_t steps)
{
    torch::manual_seed(1);
    torch::nn::Sequential net;
    if (spec.model.zoo == u"mlp") {
        net->push_back(torch::nn::Flatten());
        net->push_back(torch::nn::Linear(784, 256));
        net->push_back(torch::nn::Functional(torch::relu));
        net->push_back(torch::nn::Linear(256, 128));
        net->push_back(torch::nn::Functional(torch::relu));
        net->push_back(torch::nn::Linear(128, 10));
    } else {
        net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
        net->push_back(torch::nn::Functional(torch::relu));
        net->push_back(torch::nn::MaxPool2d(2));
        net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
        net->push_back(torch::nn::Functional(torch::relu));
        net->push_back(torch::nn::MaxPool2d(2));
        net->push_back(torch::nn::Flatten());
        net->push_back(torch::nn::Linear(32 * 7 * 7, 128));
        net->push_back(torch::nn::Functional(torch::relu));
        net->push_back(torch::nn::Linear(128, 10));
    }
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(spec.optimizer.lr).momentum(spec.optimizer.momentum));
    return timedLoop(net, optimizer, data, steps, spec.training.batchSize);
}

// The same for a language model: the zoo gpt's module trained by hand on random windows of the
// fortunes text with clip_grad_norm_ and torch::optim::AdamW. Tokens/s.
double bareGptLoop(const core::JobSpec& spec, const compute::detail::Dataset& data, std::int64_t steps)
{
    torch::manual_seed(1);
    compute::detail::Gpt net(spec.model, 256);
    net->train();
    torch::optim::AdamW optimizer(
        net->parameters(), torch::optim::AdamWOptions(spec.optimizer.lr).weight_decay(spec.optimizer.weightDecay));
    return timedLoop(net, optimizer, data, steps, spec.training.batchSize, spec.optimizer.clipNorm) * double(spec.model.context);
}

double trainer(const core::ShardTask& task, const QByteArray& weights)
{
    auto run = compute::ShardRun::start(task, weights, {});
    if (!run)
        qFatal("%s", qPrintable(run.error().toString()));
    QElapsedTimer timer;
    timer.start();
    while (!(*run)->finished()) {
        if (!(*run)->step())
            qFatal("step failed");
    }
    const double seconds = double(timer.nsecsElapsed()) / 1e9;
    (void)(*run)->finish();
    return double(task.localSteps * task.batchSize) / seconds;
}

// Shards of one job through the compute thread, training in the thread itself or (sandbox) in its
// confined tessera-compute worker (docs/SECURITY.md, "The compute worker"): the seconds the first
// shard took (for the worker: its start and the data), and the best of the rest (the worker kept).
struct ThreadTimes {
    double first = 0.0;
    double kept = 0.0;
};
ThreadTimes shardsThroughTheThread(const QList<core::ShardTask>& tasks, const QByteArray& weights, bool sandboxed)
{
    compute::ComputeThread thread({}, compute::inThreadCompute());
    compute::ComputeThread::Sandbox sandbox;
    sandbox.enabled = sandboxed;
    sandbox.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
    sandbox.nice = 0; // the process boundary alone: at the default 19 any other work here comes first
    thread.setSandbox(sandbox);
    std::vector<double> seconds;
    for (const auto& task : tasks) {
        QEventLoop loop;
        compute::ShardOutput output;
        QObject::connect(&thread, &compute::ComputeThread::shardFinished, &loop, [&](const compute::ShardOutput& finished) {
            output = finished;
            loop.quit();
        });
        QElapsedTimer timer;
        timer.start();
        thread.submit(task, weights);
        loop.exec();
        seconds.push_back(double(timer.nsecsElapsed()) / 1e9);
        if (output.result.outcome != core::ShardResult::Outcome::Completed)
            qFatal("%s", qPrintable(output.result.failure));
    }
    return { seconds.front(), *std::min_element(seconds.begin() + 1, seconds.end()) };
}

} // namespace

namespace {

// Process CPU time in seconds: every thread's, the checkpoint hashing helper's too.
double cpuSeconds()
{
    return double(std::clock()) / CLOCKS_PER_SEC;
}

template<typename F> double cpuTimeOf(F&& work, int repetitions)
{
    std::vector<double> times;
    for (int i = 0; i < repetitions; ++i) {
        const double before = cpuSeconds();
        work();
        times.push_back(cpuSeconds() - before);
    }
    return *std::min_element(times.begin(), times.end());
}

// The referee's CPU time in a dispute over an mlp in portable mode (the example's 784-256-128-10,
// and one of 784-1024-1024-10; batch 64, SGD momentum, ten checkpoints a shard): replaying the
// differing interval from the agreed state (what it did before, and still does for fast jobs)
// against narrowing it to one instruction (comparing the two traces, then running that
// instruction from the operands). Two disputes: a cheater with twice the learning rate (the first
// update differs), and the costliest instruction of the program (fc0's weight gradient, about a
// third of a step's arithmetic). Goal: at most 1/100 for the first.
bool disputeCost(const QList<std::int64_t>& hidden, const char* key)
{
    auto spec = core::smallMlpJob(QStringLiteral("dispute"), hidden);
    spec.training.localSteps = 100;
    spec.training.batchSize = 64;
    spec.training.checkpointInterval = 10;
    spec.training.determinism = core::TrainingSpec::Determinism::Portable;
    spec.aggregation.compression = core::Compression::None;
    const auto start = compute::initialWeights(spec, {});
    if (!start)
        qFatal("%s", qPrintable(start.error().toString()));
    const auto task = core::decomposeRound(QStringLiteral("dispute"), spec, 0, start->canonicalHash).first();
    auto cheat = task;
    cheat.optimizer.lr *= 2.0;
    const auto honest = compute::runShard(task, start->bytes, {});
    const auto cheater = compute::runShard(cheat, start->bytes, {});
    const auto& h = honest.result.checkpointHashes;
    const auto& c = cheater.result.checkpointHashes;
    const std::int64_t j = 3; // an interval after the start: the referee begins from an agreed state
    const auto state = compute::recreateState(task, start->bytes, honest.keptState, j - 1, {});
    auto honestTrace = compute::traceInterval(task, start->bytes, honest.keptState, j, {});
    // The cheater's interval j from the agreed state: its trace of the same steps with its own rate.
    auto cheatFrom = compute::traceInterval(cheat, start->bytes, cheater.keptState, 1, {});
    if (!state || !honestTrace || !cheatFrom)
        qFatal("the dispute case cannot start");
    const auto firstTrace = compute::traceInterval(task, start->bytes, honest.keptState, 1, {});
    const auto compared = compute::compareTraces(task, 1, h[0], start->bytes, h[1], c[1], *firstTrace, *cheatFrom, {});
    if (!compared || compared->instruction < 0)
        qFatal("the traces do not narrow");
    const auto operands = compute::operandsOf(task, start->bytes, honest.keptState, compared->step, compared->instruction, {});
    // The costliest instruction: fc0's weight gradient of the interval's last step, with a trace
    // that differs there only.
    auto program = compute::detail::portableProgram(task, j * 10 - 1, { 1, 28, 28 }, 10);
    std::int64_t costly = -1;
    for (std::size_t i = 0; program && i < program->instructions.size(); ++i) {
        if (program->instructions[i].label == "fc0: gradient of the weight")
            costly = std::int64_t(i);
    }
    auto tampered = compute::detail::Trace::fromBytes(*honestTrace);
    if (costly < 0 || !tampered)
        qFatal("no costly instruction");
    const auto position = program->outputPositions()[std::size_t(program->instructions[std::size_t(costly)].outputs[0])];
    tampered->steps[j * 10][position] = core::Digest::ofBytes("another gradient");
    const auto otherTrace = tampered->toBytes();
    const auto costlyOperands = compute::operandsOf(task, start->bytes, honest.keptState, j * 10, costly, {});
    if (!operands || !costlyOperands)
        qFatal("no operands");

    const double replayFirst = cpuTimeOf([&] { (void)compute::replayShard(task, 0, start->bytes, h[0], 1, {}, {}); }, 5);
    const double replay = cpuTimeOf([&] { (void)compute::replayShard(task, j - 1, *state, h[j - 1], j, {}, {}); }, 5);
    const double narrowedUpdate = cpuTimeOf(
        [&] {
            (void)compute::compareTraces(task, 1, h[0], start->bytes, h[1], c[1], *firstTrace, *cheatFrom, {});
            (void)compute::refereeInstruction(
                task, compared->step, compared->instruction, *operands, *firstTrace, *cheatFrom, {});
        },
        20);
    const double narrowedCostly = cpuTimeOf(
        [&] {
            (void)compute::compareTraces(task, j, h[j - 1], {}, h[j], h[j], *honestTrace, *honestTrace, {});
            (void)compute::refereeInstruction(task, j * 10, costly, *costlyOperands, *honestTrace, otherTrace, {});
        },
        20);
    const double updateRatio = narrowedUpdate / replayFirst, costlyRatio = narrowedCostly / replay;
    QStringList widths;
    for (auto width : hidden)
        widths << QString::number(width);
    std::printf("  dispute over a portable mlp 784-%s-10, referee's CPU time: a cheater's first update (%s, interval 1) "
                "%.3f ms against %.2f ms to replay the interval, 1/%.0f (goal <= 1/100); fc0's weight gradient (interval "
                "%lld) %.3f ms against %.2f ms, 1/%.0f\n",
        qPrintable(widths.join(u'-')), qPrintable(compared->instructionName), narrowedUpdate * 1e3, replayFirst * 1e3,
        1.0 / updateRatio, static_cast<long long>(j), narrowedCostly * 1e3, replay * 1e3, 1.0 / costlyRatio);
    const std::string prefix = std::string("dispute.") + key;
    bench::record((prefix + ".replayFirstMs").c_str(), replayFirst * 1e3);
    bench::record((prefix + ".replayMs").c_str(), replay * 1e3);
    bench::record((prefix + ".updateMs").c_str(), narrowedUpdate * 1e3);
    bench::record((prefix + ".updateRatio").c_str(), updateRatio);
    bench::record((prefix + ".costlyMs").c_str(), narrowedCostly * 1e3);
    bench::record((prefix + ".costlyRatio").c_str(), costlyRatio);
    return updateRatio <= 0.01;
}

} // namespace

// What the broker does with each revealed result at RESULT: it used to hash it (canonical hash);
// now it inspects it too (compute::inspectRevealed: every change finite, the weights it leads to
// finite, its norm; docs/VERIFICATION.md, "Unchecked results"). The ratio is the inspection's cost
// over the hash alone, on the same reveal, in the same run.
static void inspectionVersusHash()
{
    core::JobSpec spec;
    spec.name = QStringLiteral("bench");
    spec.model.zoo = QStringLiteral("mlp");
    spec.model.hidden = { 2048, 2048 }; // 5.8 M parameters, 23 MB of float32 weights
    spec.dataset.builtin = QStringLiteral("fashion-mnist");
    const auto round = compute::initialWeights(spec, {});
    spec.training.seed = 2;
    const auto revealed = compute::initialWeights(spec, {}); // another model of the same shape: a whole change
    if (!round || !revealed)
        qFatal("cannot build the weights");
    auto timed = [](auto&& work) {
        double least = 1e30;
        for (int i = 0; i < 5; ++i) {
            QElapsedTimer clock;
            clock.start();
            work();
            least = std::min(least, double(clock.nsecsElapsed()) / 1e6);
        }
        return least;
    };
    // Both from files, as the broker has them (its blob store): the hash reads the file whole, the
    // inspection reads both files record by record.
    QTemporaryDir folder;
    const QString revealedPath = folder.filePath(QStringLiteral("revealed.pt")),
                  roundPath = folder.filePath(QStringLiteral("round.pt"));
    for (const auto& [path, bytes] : { std::pair { revealedPath, revealed->bytes }, std::pair { roundPath, round->bytes } }) {
        QFile file(path);
        if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size())
            qFatal("cannot write the weights");
    }
    const double hashMs = timed([&] { (void)compute::canonicalHashOf(*core::readFile(revealedPath)); });
    const double inspectMs = timed([&] { (void)compute::inspectRevealed(revealedPath, roundPath); });
    std::printf("A reveal at RESULT (mlp 784-2048-2048-10, %.0f MB): canonical hash %.1f ms, inspection (hash, finiteness, "
                "norm) %.1f ms, ratio %.2f\n",
        double(revealed->bytes.size()) / 1e6, hashMs, inspectMs, inspectMs / hashMs);
    bench::record("trainer.inspect.mb", double(revealed->bytes.size()) / 1e6);
    bench::record("trainer.inspect.hashMs", hashMs);
    bench::record("trainer.inspect.inspectMs", inspectMs);
    bench::record("trainer.inspect.ratio", inspectMs / hashMs);
}

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    // --worker-only: just the compute worker's figures (to look at the process boundary alone);
    // --inspect-only: just what inspecting a reveal costs.
    if (argc > 1 && QByteArray(argv[1]) == "--inspect-only") {
        at::set_num_threads(1);
        inspectionVersusHash();
        return 0;
    }
    const bool workerOnly = argc > 1 && QByteArray(argv[1]) == "--worker-only";
    const int threads = 1;
    at::set_num_threads(threads);
    const auto data = compute::detail::loadFashionMnist(compute::ComputeEnvironment {}.fashionMnistDirectoryOrDefault());
    if (!data)
        qFatal("%s", qPrintable(data.error().toString()));

    core::ModelSpec mlp;
    mlp.zoo = QStringLiteral("mlp");
    mlp.hidden = { 256, 128 };
    core::ModelSpec cnn;
    cnn.zoo = QStringLiteral("cnn");
    cnn.channels = { 16, 32 };
    cnn.hidden = { 128 };

    std::printf(
        "Shard trainer vs bare LibTorch loop (Fashion-MNIST, batch 64, SGD momentum 0.9, %d thread, 10 checkpoints a shard)\n",
        threads);
    bool met = true;
    for (const Case& c : { Case { "mlp", mlp, 500 }, Case { "cnn", cnn, 100 } }) {
        core::JobSpec spec;
        spec.name = QStringLiteral("bench");
        spec.model = c.model;
        spec.dataset.builtin = QStringLiteral("fashion-mnist");
        spec.optimizer.lr = 0.01;
        spec.optimizer.momentum = 0.9;
        spec.training.shardsPerRound = 1;
        spec.training.localSteps = c.steps;
        spec.training.batchSize = 64;
        spec.training.threads = threads;
        spec.training.checkpointInterval = c.steps / 10; // the default for a job: ten checkpoints a shard
        const auto start = compute::initialWeights(spec, {});
        if (!start)
            qFatal("%s", qPrintable(start.error().toString()));
        const auto task = core::decomposeRound(QStringLiteral("bench"), spec, 0, start->canonicalHash).first();
        auto unhashed = task; // the same shard with only the final checkpoint, to show what hashing costs
        unhashed.checkpointInterval = unhashed.localSteps;
        auto portable = task; // through the portable kernels (training.determinism portable)
        portable.portable = true;
        const bool portableToo = true;
        const std::string key = std::string("trainer.") + c.name;

        if (!workerOnly) {
            bareLoop(spec, *data->train, c.steps / 4); // warm-up
            trainer(task, start->bytes);
            std::vector<double> bare, ours, oursUnhashed, portables;
            for (int repetition = 0; repetition < 7; ++repetition) { // interleaved, so drift hits all alike
                bare.push_back(bareLoop(spec, *data->train, c.steps));
                ours.push_back(trainer(task, start->bytes));
                oursUnhashed.push_back(trainer(unhashed, start->bytes));
                if (portableToo)
                    portables.push_back(trainer(portable, start->bytes));
            }
            const double ratio = best(ours) / best(bare);
            met = met && ratio >= 0.97;
            std::printf("  %-4s trainer %9.0f samples/s   bare loop %9.0f samples/s   ratio %.3f (goal >= 0.97);"
                        " without intermediate checkpoints %.3f\n",
                c.name, best(ours), best(bare), ratio, best(oursUnhashed) / best(bare));
            bench::record((key + ".trainer").c_str(), best(ours));
            bench::record((key + ".bare").c_str(), best(bare));
            bench::record((key + ".ratio").c_str(), ratio);
            bench::record((key + ".ratioUnhashed").c_str(), best(oursUnhashed) / best(bare));
            if (portableToo) {
                const double portableRatio = best(portables) / best(ours);
                met = met && portableRatio >= 0.7;
                std::printf("  %-4s portable kernels %9.0f samples/s: %.3f of the trainer's LibTorch path (goal >= 0.7)\n",
                    c.name, best(portables), portableRatio);
                bench::record((key + ".portable").c_str(), best(portables));
                bench::record((key + ".portableRatio").c_str(), portableRatio);
            }
        }
        // The process boundary (Compute/Sandbox): shards of one job through the compute thread, in
        // the thread and in its kept worker, interleaved; the goal is for a shard once the job's
        // worker runs (the first pays LibTorch's start and the data).
        auto several = spec;
        several.training.shardsPerRound = 6;
        const auto shards = core::decomposeRound(QStringLiteral("bench"), several, 0, start->canonicalHash);
        std::vector<ThreadTimes> here, there;
        for (int repetition = 0; repetition < 3; ++repetition) {
            here.push_back(shardsThroughTheThread(shards, start->bytes, false));
            there.push_back(shardsThroughTheThread(shards, start->bytes, true));
        }
        auto bestOf = [](const std::vector<ThreadTimes>& times, double ThreadTimes::*field) {
            double least = times.front().*field;
            for (const auto& time : times)
                least = std::min(least, time.*field);
            return least;
        };
        const double keptHere = bestOf(here, &ThreadTimes::kept);
        const double keptThere = bestOf(there, &ThreadTimes::kept);
        const double workerRatio = keptHere / keptThere;
        met = met && workerRatio >= 0.98;
        std::printf("  %-4s a shard through the compute thread: %.3f s in the thread, %.3f s in its sandboxed worker: "
                    "ratio %.3f (goal >= 0.98); a job's first shard %.2f s vs %.2f s (the worker's start and data)\n",
            c.name, keptHere, keptThere, workerRatio, bestOf(here, &ThreadTimes::first), bestOf(there, &ThreadTimes::first));
        bench::record((key + ".shardHereS").c_str(), keptHere);
        bench::record((key + ".shardWorkerS").c_str(), keptThere);
        bench::record((key + ".workerRatio").c_str(), workerRatio);
        bench::record((key + ".firstShardHereS").c_str(), bestOf(here, &ThreadTimes::first));
        bench::record((key + ".firstShardWorkerS").c_str(), bestOf(there, &ThreadTimes::first));
    }

    if (workerOnly)
        return met ? 0 : 1;
    met = disputeCost({ 256, 128 }, "mlp") && met;
    met = disputeCost({ 1024, 1024 }, "mlp1024") && met;

    // The example language model (examples/jobs/fortunes-gpt.json's gpt), tokens/s; goal 0.95.
    core::JobSpec gpt;
    gpt.name = QStringLiteral("bench gpt");
    gpt.model.zoo = QStringLiteral("gpt");
    gpt.model.layers = 4;
    gpt.model.heads = 4;
    gpt.model.width = 160;
    gpt.model.context = 128;
    gpt.dataset.builtin = QStringLiteral("fortunes");
    gpt.optimizer.kind = core::OptimizerSpec::Kind::AdamW;
    gpt.optimizer.lr = 0.003;
    gpt.optimizer.weightDecay = 0.1;
    gpt.optimizer.clipNorm = 1.0;
    gpt.optimizer.schedule = { core::ScheduleSpec::Kind::Cosine, 5, 20, 0.0003 };
    gpt.training.shardsPerRound = 1;
    gpt.training.localSteps = 20;
    gpt.training.batchSize = 16;
    gpt.training.threads = threads;
    gpt.training.checkpointInterval = 2; // ten checkpoints a shard, as for a job
    const auto text = compute::detail::loadDataset(gpt.dataset, {}, gpt.model.context);
    const auto start = compute::initialWeights(gpt, {});
    if (!text || !start)
        qFatal("the gpt case cannot start");
    const auto task = core::decomposeRound(QStringLiteral("bench"), gpt, 0, start->canonicalHash).first();
    auto unhashed = task;
    unhashed.checkpointInterval = unhashed.localSteps;
    auto portableGpt = task; // through the portable kernels
    portableGpt.portable = true;
    const double tokens = double(gpt.model.context);
    bareGptLoop(gpt, *text->train, 5);
    std::vector<double> bare, ours, oursUnhashed, portables;
    for (int repetition = 0; repetition < 5; ++repetition) {
        bare.push_back(bareGptLoop(gpt, *text->train, gpt.training.localSteps));
        ours.push_back(trainer(task, start->bytes) * tokens);
        portables.push_back(trainer(portableGpt, start->bytes) * tokens);
        oursUnhashed.push_back(trainer(unhashed, start->bytes) * tokens);
    }
    const double ratio = best(ours) / best(bare);
    met = met && ratio >= 0.95;
    std::printf("  gpt  trainer %9.0f tokens/s    bare loop %9.0f tokens/s    ratio %.3f (goal >= 0.95);"
                " without intermediate checkpoints %.3f\n",
        best(ours), best(bare), ratio, best(oursUnhashed) / best(bare));
    bench::record("trainer.gpt.trainer", best(ours));
    bench::record("trainer.gpt.bare", best(bare));
    bench::record("trainer.gpt.ratio", ratio);
    bench::record("trainer.gpt.ratioUnhashed", best(oursUnhashed) / best(bare));
    const double portableRatio = best(portables) / best(ours);
    met = met && portableRatio >= 0.7;
    std::printf("  gpt  portable kernels %9.0f tokens/s: %.3f of the trainer's LibTorch path (goal >= 0.7)\n", best(portables),
        portableRatio);
    bench::record("trainer.gpt.portable", best(portables));
    bench::record("trainer.gpt.portableRatio", portableRatio);
    inspectionVersusHash();
    std::printf("%s\n", met ? "goal met" : "goal NOT met");
    return 0;
}
