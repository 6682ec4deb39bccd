#pragma once

#include <core/benchmark.h>
#include <core/error.h>

#include <QString>
#include <QStringList>

#include <functional>

namespace tessera::compute {

struct BenchmarkOptions {
    int threads = 1;
    double targetCv = 0.05; // stop once the last minRepetitions vary less than this
    int minRepetitions = 5;
    int maxRepetitions = 40;
    std::int64_t timeCapMs = 20000; // per measurement
    QStringList only; // the measurements to take ("mlp", "cnn", "matmul"); empty: all
    std::function<void(const QString& name, int repetition)> progress;

    // What a node measures by itself on its first start, when no benchmark of its CPU is stored:
    // the zoo mlp alone (the figure brokers schedule by), a few repetitions, about 2 s here.
    static BenchmarkOptions firstStart(int threads)
    {
        BenchmarkOptions options;
        options.threads = threads;
        options.only = { QStringLiteral("mlp") };
        options.minRepetitions = 3;
        options.maxRepetitions = 8;
        options.timeCapMs = 2000;
        return options;
    }
};

// Reference throughput of this machine's CPU for the broker's scheduler and the app's Devices tab:
// training samples/s of the zoo mlp (784-256-128-10) and cnn (16/32 channels) on Fashion-MNIST
// shaped batches of 64, and float32 matrix multiply GFLOPS (1024 x 1024). Each is repeated (after
// one warm-up) until its coefficient of variation is at most targetCv, or the time cap.
core::BenchmarkRecord runBenchmark(const BenchmarkOptions& options);

} // namespace tessera::compute
