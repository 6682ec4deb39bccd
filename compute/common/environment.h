#pragma once

#include <core/hash.h>

#include <QString>

#include <functional>
#include <optional>

namespace tessera::compute {

// Where the compute engine finds what a job refers to. Plain data, so that the node, the broker and
// the tests can each say where things are without the engine knowing about networks or settings.
struct ComputeEnvironment {
    // Folder with the four Fashion-MNIST .gz files; empty: /usr/share/datasets/fashion-mnist.
    QString fashionMnistDirectory;
    // Folder with the fortunes text files (Debian's fortunes); empty: /usr/share/games/fortunes.
    QString fortunesDirectory;
    // The file that holds a blob (a TorchScript model, a tensor dataset) with this SHA-256, if any.
    std::function<std::optional<QString>(const core::Digest&)> blobPath;
    // Where to train: "cpu", "cuda" or "cuda:N"; empty: the first CUDA device when this LibTorch
    // has CUDA, else the CPU. Results are comparable only between equal devices (the runtime
    // profile names it).
    QString device;
    // The threads a portable shard (training.determinism portable) computes with here; 0: the
    // task's. Any count gives the same bits, so a node may use fewer than the job names.
    int portableThreads = 0;

    // A file a job names: its blob when the store has it (by sha256), else the local file (before
    // upload, or on train-local), if it exists.
    std::optional<QString> locate(const core::Digest& digest, const QString& file) const;

    static QString defaultFashionMnistDirectory();
    QString fashionMnistDirectoryOrDefault() const;
    QString fortunesDirectoryOrDefault() const;
};

} // namespace tessera::compute
