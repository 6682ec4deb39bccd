#pragma once

#include <core/datasetchunks.h>
#include <core/error.h>

#include <QString>

#include <cstdint>

namespace tessera::app {

// What `tessera-job chunk` made: the manifest (written as manifest.json in the output folder,
// beside its chunks) and, for text, the held-out windows (test.pt).
struct ChunkedCorpus {
    core::DatasetManifest manifest;
    QString manifestFile;
    QString testFile; // empty when the input was a tensor file (the job names its own test file)
    std::int64_t testSamples = 0;
    std::int64_t inputBytes = 0;
};

struct ChunkOptions {
    std::int64_t chunkBytes = std::int64_t(64) << 20; // a chunk holds at most this much (at least one sample)
    std::int64_t context = 128; // text: windows of context + 1 bytes with stride context
    std::int64_t testWindows = 1024; // text: the first windows are the test set
};

// A folder of text files (every regular file below it, in byte order of their relative paths, one
// after the other) as byte tokens, vocabulary 256: cut into windows as docs/DETERMINISM.md ("Text")
// cuts a stream, the first testWindows to test.pt, the rest into chunks of uint8 {"tokens"} files.
// Reads the corpus once, a block at a time, so a corpus larger than memory is fine.
core::Result<ChunkedCorpus> chunkTextFolder(const QString& folder, const QString& output, const ChunkOptions& options);

// A torch.save file of {"x": X, "y": Y} or {"tokens": T} cut by rows into chunks of the same
// tensors (and dtypes).
core::Result<ChunkedCorpus> chunkTensorFile(const QString& file, const QString& output, const ChunkOptions& options);

} // namespace tessera::app
