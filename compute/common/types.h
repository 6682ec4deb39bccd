#pragma once

#include "stagelink.h"

#include <core/hash.h>
#include <core/shardresult.h>

#include <QByteArray>
#include <QList>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <functional>

namespace tessera::compute {

// The plain types that the LibTorch engine (compute/engine/) and the LibTorch-free supervisor
// (compute/supervisor/) both speak: what a shard's training, a replay, an evaluation and a
// benchmark give back and take. No torch here, nor anything that includes it.

// Where a shard is, for progress bars and the tray tooltip.
struct ShardProgress {
    QString jobId;
    std::int64_t round = 0;
    std::int64_t shard = 0;
    std::int64_t step = 0;
    std::int64_t steps = 0;
    double loss = 0.0;
    double samplesPerSecond = 0.0;
    std::int64_t etaMs = 0;
    std::int64_t busyMs = 0; // time spent computing this shard so far
    std::int64_t throttledMs = 0; // time spent idle to honour the CPU limit
    // An inference shard's task ("classify", "generate", "score"; its steps are batches or
    // prompts, its samples inputs); empty for training.
    QString inference = {};
    // A stage task's place in its pipeline (0-based stage of `stages`); stages 0: not a stage.
    std::int64_t stage = 0;
    std::int64_t stages = 0;

    // samplesPerSecond and etaMs at `stepsPerSecond`, for batches of `batchSize`.
    void setPace(double stepsPerSecond, std::int64_t batchSize)
    {
        samplesPerSecond = stepsPerSecond * double(batchSize);
        etaMs = stepsPerSecond > 0 ? std::int64_t(double(steps - step) / stepsPerSecond * 1000.0) : 0;
    }
};

// What a finished shard hands back: the result (hashes, losses, profile) and what the node reveals as
// a dict of tensors in PyTorch's pickle format (torch.load reads it): the final weights, or their
// int8 update from the round's weights (docs/DETERMINISM.md, "Revealed update"); result.finalHash
// is its canonical hash.
struct ShardOutput {
    core::ShardResult result;
    QByteArray weights;
    // The training state (suspend() bytes) at task.keptStateCheckpoint(), which a node keeps until
    // its result is settled: in a dispute the referee asks for the last checkpoint both sides agree
    // on, and recreateState() makes any other from this one or from the round's weights. Empty for
    // a failed shard, one without interior checkpoints, and one resumed after that checkpoint.
    QByteArray keptState;
    // Or (keptState empty) the file that holds it (a run that spilled it, ShardRun::spillTo; a
    // worker's): whoever receives the output takes the file (renames it) or reads it, and the
    // compute thread removes what is left of it once shardFinished has been delivered.
    QString keptStateFile = {};
    // A stage task's tensors, traded in order (result.tensorsRoot is their root), which the node
    // keeps for its verification.
    QList<StageTensor> stageTensors = {};
};

// A referee's re-execution of a shard (replayShard): the hashes of the checkpoints it reached and
// what the node would reveal at the last.
struct Replay {
    QList<core::Digest> checkpoints;
    QByteArray weights;
    core::Digest weightsHash;
    QString runtimeProfile;
    core::Digest tensorsRoot; // a stage task replayed whole: the root of what it sent and received
};

// Model weights as they travel: a dict of tensors in PyTorch's pickle format (torch.load reads it),
// and the canonical hash that names them in tasks, results and disputes.
struct Weights {
    QByteArray bytes;
    core::Digest canonicalHash;
};

// A model's loss and accuracy on its dataset's test split (evaluate).
struct Evaluation {
    double loss = 0.0; // mean cross-entropy
    double accuracy = 0.0; // share of correct top-1 predictions
    std::int64_t samples = 0;
};

// How sampleText draws a language model's text.
struct SampleOptions {
    QByteArray prompt = "%\n"; // the built-in text's separator: the start of a fortune
    std::int64_t tokens = 200;
    double temperature = 0.8;
    std::uint64_t seed = 0;
};

// How runBenchmark measures (compute/engine/benchmark.h).
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

} // namespace tessera::compute
