#pragma once

#include <core/benchmark.h>
#include <core/error.h>

#include <QString>

#include <functional>

namespace tessera::compute {

struct BenchmarkOptions {
    int threads = 1;
    double targetCv = 0.05; // stop once the last minRepetitions vary less than this
    int minRepetitions = 5;
    int maxRepetitions = 40;
    std::int64_t timeCapMs = 20000; // per measurement
    std::function<void(const QString& name, int repetition)> progress;
};

// Reference throughput of this machine's CPU for the broker's scheduler and the app's Devices tab:
// training samples/s of the zoo mlp (784-256-128-10) and cnn (16/32 channels) on Fashion-MNIST
// shaped batches of 64, and float32 matrix multiply GFLOPS (1024 x 1024). Each is repeated (after
// one warm-up) until its coefficient of variation is at most targetCv, or the time cap.
core::BenchmarkRecord runBenchmark(const BenchmarkOptions& options);

} // namespace tessera::compute
