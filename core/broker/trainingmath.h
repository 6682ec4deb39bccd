#pragma once

#include "../clock.h"

#include "../error.h"
#include "../hash.h"
#include "../jobspec.h"
#include "../readfile.h"
#include "../shardtask.h"
#include "../verification/verification.h"

#include <QByteArray>
#include <QList>
#include <QStringList>

namespace tessera::core::broker {

// The arithmetic of training that the broker needs (it lives in compute/, with LibTorch): the
// broker itself sees only bytes and digests. app/ hands a compute-backed implementation in.
class TrainingMath {
public:
    struct Weights {
        QByteArray bytes;
        Digest canonicalHash;
        std::int64_t parameters = 0; // number of elements, for pricing models the broker cannot analyse
        Digest sha256; // of bytes, where the arithmetic computed it (null: not computed)
    };
    struct Update {
        std::int64_t shard = 0;
        std::int64_t samples = 0;
        QByteArray weights; // or, when empty,
        QString weightsFile; // the blob's file, read when the aggregation reaches this shard
    };
    struct Aggregated {
        Weights weights;
        QByteArray outerState;
        // With int8 compression, W_{r+1} - W_r as an int8 update, which nodes that hold W_r
        // download instead of W_{r+1} (empty: none), and its SHA-256 (null: not computed).
        QByteArray change;
        Digest changeSha256;
    };
    struct Evaluation {
        double loss = 0.0;
        double accuracy = 0.0;
    };
    // The referee's re-execution of checkpoints from+1..to of a shard (compute::replayShard).
    struct Replay {
        QList<Digest> checkpoints;
        Digest weightsHash; // of the weights at `to`: at the last checkpoint, of what a node reveals
        QByteArray weights; // (the final weights, or their compressed update: ShardTask::compression)
        QString runtimeProfile;
        Digest tensorsRoot; // a stage task replayed from the start to its end (ShardResult::tensorsRoot)
    };

    virtual ~TrainingMath() = default;
    virtual Result<Weights> initialWeights(const JobSpec& spec) = 0;
    virtual Result<Digest> canonicalHash(const QByteArray& weights) = 0;
    // The same for weights in a file (a stored blob), read by whoever computes: a worker thread
    // reads a large model's weights, not the caller's network loop.
    virtual Result<Digest> canonicalHashOfFile(const QString& path)
    {
        auto bytes = readFile(path);
        if (!bytes)
            return Error { QStringLiteral("weights"), bytes.error().message };
        return canonicalHash(*bytes);
    }
    // A node's revealed result (final weights or a compressed update, in a file) against the
    // round's weights it started from (a file): its canonical hash; `unfit` says why it is not a
    // finite update of the model (wrong tensors, shapes or types; NaN or infinite changes, weights or
    // optimizer state; negative second moments), empty when it is one; updateNorm is the L2 norm of
    // its change to the model's float tensors (negative: not measured). An error when the file is
    // not a dict of tensors at all.
    struct Inspection {
        Digest canonicalHash;
        QString unfit;
        double updateNorm = -1.0;
        std::optional<Compression> form; // an int8 update or whole weights; none: not told
    };
    // part: a stage task's reveal (docs/PROTOCOL.md, "Stage tasks"), which must be exactly its
    // stage's share of the model: its blocks' tensors (stage 0 also the embeddings, the last the
    // final LayerNorm and the head) and their carried optimizer state; `unfit` says when not.
    struct StagePart {
        std::int64_t stage = 0;
        std::int64_t stages = 1;
        std::int64_t layers = 0;
    };
    virtual Result<Inspection> inspectResult(
        const QString& revealedPath, const QString& roundWeightsPath, const std::optional<StagePart>& part = std::nullopt)
    {
        Q_UNUSED(roundWeightsPath);
        Q_UNUSED(part);
        auto hash = canonicalHashOfFile(revealedPath);
        if (!hash)
            return hash.error();
        return Inspection { *hash, {}, -1.0, std::nullopt };
    }
    // A pipeline shard's stage reveals (files, in stage order) merged into the shard's, written to
    // `out` (a file in the blob store's staging folder): its canonical hash.
    virtual Result<Digest> mergeStages(const QStringList& parts, const QString& out)
    {
        Q_UNUSED(parts);
        Q_UNUSED(out);
        return Error { QStringLiteral("training.pipeline"), QStringLiteral("this broker's arithmetic does not merge stages") };
    }
    // globalFile: the round's weights (a blob's file), read record by record, never whole in memory.
    // W_{r+1} is written to weightsOut (a file in the blob store's staging folder), not returned:
    // weights.bytes stays empty, weights.sha256 is the file's. An error of field "blob" is the
    // broker's own (its disk), not the job's.
    virtual Result<Aggregated> aggregate(const AggregationSpec& spec, const QString& globalFile, const QList<Update>& updates,
        const QByteArray& outerState, const QString& weightsOut)
        = 0;
    // weights by value: let go of once read.
    virtual Result<Evaluation> evaluate(const JobSpec& spec, QByteArray weights) = 0;
    // From checkpoint `from` (state: the round's weights at 0, else a node's checkpoint state that
    // must hash to `expected`) to checkpoint `to`. roundWeights: the round's weights, which a
    // compressed update is taken from. from == to == the last checkpoint only reveals (a dispute
    // over the revealed form when the chains agree).
    virtual Result<Replay> replay(const ShardTask& task, std::int64_t from, const QByteArray& state, const Digest& expected,
        std::int64_t to, const QByteArray& roundWeights)
        = 0;
    // ||A - B|| / ||B|| over all tensors, where A and B are the weights two revealed results stand
    // for (a compressed update is added to roundWeights): results of different runtime profiles are
    // compared with it.
    virtual Result<double> distance(const QByteArray& a, const QByteArray& b, const QByteArray& roundWeights) = 0;

    // A portable job's dispute narrowed to one instruction (compute::compareTraces and
    // compute::refereeInstruction; docs/VERIFICATION.md, "Disputes over portable jobs"): the two
    // sides' traces of interval `checkpoint` compared (agreed: the checkpoint j-1 both signed;
    // roundWeights: the round's weights, read at j = 1), and the one differing instruction run
    // from the operands a side sends. An arithmetic without them says so.
    virtual Result<verification::TraceComparison> compareTraces(const ShardTask& task, std::int64_t checkpoint,
        const Digest& agreed, const QByteArray& roundWeights, const Digest& firstClaim, const Digest& secondClaim,
        const QByteArray& firstTrace, const QByteArray& secondTrace);
    virtual Result<verification::Ruling> refereeInstruction(const ShardTask& task, std::int64_t step, std::int64_t instruction,
        const QByteArray& operands, const QByteArray& firstTrace, const QByteArray& secondTrace);
    // The most bytes an honest trace of interval `checkpoint` can have, from the program's known
    // size (a larger one is unusable without being read); -1: no bound known.
    virtual Result<std::int64_t> traceBytesBound(const ShardTask& task, std::int64_t checkpoint);
};

using core::Clock;
using core::SystemClock;

} // namespace tessera::core::broker
