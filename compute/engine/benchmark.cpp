#include "benchmark.h"

#include "detail/models.h"
#include "detail/optimizer.h"
#include "runtimeprofile.h"
#include <compute/devices/devices.h>

#include <torch/torch.h>

#include <QElapsedTimer>

namespace tessera::compute {

using namespace detail;

namespace {

constexpr std::int64_t Batch = 64;

// One repetition: `steps` training steps; returns samples per second.
template<typename Net> double trainingRate(Net& net, Optimizer& optimizer, const at::Tensor& x, const at::Tensor& y, int steps)
{
    QElapsedTimer timer;
    timer.start();
    for (int i = 0; i < steps; ++i) {
        optimizer.zeroGrad();
        const auto loss = torch::cross_entropy_loss(net->forward(x), y);
        loss.backward();
        optimizer.step();
    }
    return double(steps * Batch) / (double(timer.nsecsElapsed()) / 1e9);
}

NamedTensors parametersOf(const torch::nn::Module& module)
{
    NamedTensors tensors;
    for (const auto& item : module.named_parameters())
        tensors.emplace_back(item.key(), item.value());
    sortByName(tensors);
    return tensors;
}

core::BenchmarkMeasurement measure(
    const QString& name, const QString& unit, const BenchmarkOptions& options, const std::function<double()>& once)
{
    once(); // warm-up: allocations, thread pool start, caches
    QList<double> values;
    QElapsedTimer timer;
    timer.start();
    core::Spread spread;
    while (int(values.size()) < options.maxRepetitions) {
        values.append(once());
        if (options.progress)
            options.progress(name, int(values.size()));
        if (values.size() >= options.minRepetitions) {
            spread = core::spreadOf(values.mid(values.size() - options.minRepetitions));
            if (spread.cv <= options.targetCv || timer.elapsed() > options.timeCapMs)
                break;
        }
    }
    if (values.size() < options.minRepetitions)
        spread = core::spreadOf(values);
    return { name, spread.mean, unit, spread.cv, int(values.size()) };
}

} // namespace

core::BenchmarkRecord runBenchmark(const BenchmarkOptions& options)
{
    at::set_num_threads(options.threads);
    torch::manual_seed(1);
    const auto x = torch::randn({ Batch, 1, 28, 28 });
    const auto y = torch::randint(0, 10, { Batch }, torch::kInt64);
    core::OptimizerSpec sgd;
    sgd.lr = 0.01;
    sgd.momentum = 0.9;

    core::BenchmarkRecord record;
    const auto cpu = detectCpu();
    record.device = QStringLiteral("cpu:0 ") + cpu.name;
    record.runtimeProfile = currentRuntimeProfile(options.threads).toString();
    record.measuredAt = QDateTime::currentDateTimeUtc();

    const auto wanted = [&](const char* name) { return options.only.isEmpty() || options.only.contains(QLatin1String(name)); };
    if (wanted("mlp")) {
        Mlp mlp(784, QList<std::int64_t> { 256, 128 }, 10, 0.0);
        Optimizer mlpOptimizer(sgd, parametersOf(*mlp));
        record.measurements.append(measure(QStringLiteral("mlp"), QStringLiteral("samples/s"), options,
            [&] { return trainingRate(mlp, mlpOptimizer, x, y, 40); }));
    }
    if (wanted("cnn")) {
        Cnn cnn(1, 28, 28, QList<std::int64_t> { 16, 32 }, 128, 10, 0.0);
        Optimizer cnnOptimizer(sgd, parametersOf(*cnn));
        record.measurements.append(measure(QStringLiteral("cnn"), QStringLiteral("samples/s"), options,
            [&] { return trainingRate(cnn, cnnOptimizer, x, y, 4); }));
    }
    if (wanted("matmul")) {
        constexpr std::int64_t N = 1024;
        const auto a = torch::randn({ N, N });
        const auto b = torch::randn({ N, N });
        record.measurements.append(measure(QStringLiteral("matmul"), QStringLiteral("GFLOPS"), options, [&] {
            QElapsedTimer timer;
            timer.start();
            constexpr int Repeats = 4;
            for (int i = 0; i < Repeats; ++i)
                (void)torch::mm(a, b);
            return double(Repeats) * 2.0 * double(N * N * N) / double(timer.nsecsElapsed());
        }));
    }
    return record;
}

} // namespace tessera::compute
