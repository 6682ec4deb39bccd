#pragma once

#include <compute/common/types.h>
#include <core/benchmark.h>
#include <core/error.h>

#include <QString>
#include <QStringList>

#include <functional>

namespace tessera::compute {

// Reference throughput of this machine's CPU for the broker's scheduler and the app's Devices tab:
// training samples/s of the zoo mlp (784-256-128-10) and cnn (16/32 channels) on Fashion-MNIST
// shaped batches of 64, and float32 matrix multiply GFLOPS (1024 x 1024). Each is repeated (after
// one warm-up) until its coefficient of variation is at most targetCv, or the time cap.
core::BenchmarkRecord runBenchmark(const BenchmarkOptions& options);

} // namespace tessera::compute
