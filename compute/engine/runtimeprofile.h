#pragma once

#include <QString>

#include <compute/devices/devices.h>

namespace tessera::compute {

// What decides whether two machines compute bit-identical weights: the LibTorch version, the BLAS
// library actually loaded, the thread count and the CPU kernels LibTorch dispatches to.
// Checkpoint hashes are comparable only between equal profiles.
struct RuntimeProfile {
    QString libtorchVersion; // "1.13.0"
    QString blas; // the shared object that provides sgemm_, e.g. "openblas-openmp"
    int threads = 1;
    QString cpuCapability; // "default", "avx2", "avx512"
    QString device = QStringLiteral("cpu"); // or "cuda:sm<compute capability>"

    // "libtorch=1.13.0;blas=openblas-openmp;threads=1;cpu=avx2;device=cpu"
    QString toString() const;
    bool operator==(const RuntimeProfile&) const = default;
};

RuntimeProfile currentRuntimeProfile(int threads, const QString& device = QStringLiteral("cpu"));

// Whether this LibTorch can train on CUDA, and on how many devices.
TorchCapabilities torchCapabilities();

} // namespace tessera::compute
