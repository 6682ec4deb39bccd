#pragma once

#include "enumnames.h"
#include "error.h"
#include "hash.h"

#include <QJsonObject>
#include <QList>
#include <QMetaType>
#include <QString>

#include <cstdint>

namespace tessera::core {

struct ShardTask;

// What a node commits to before it reveals its weights: the hash of its final weights and the
// root of its checkpoint hash chain. Disputes bisect over the chain (docs/PROTOCOL.md).
struct Commitment {
    Digest finalHash;
    Digest chainRoot;

    // SHA-256 over the raw chain digests in order.
    static Digest chainRootOf(const QList<Digest>& chain);
    bool operator==(const Commitment&) const = default;
};

struct ShardResult {
    // Failed: the shard could not be trained (it goes to a different node; a job fails when
    // distinct nodes, or the broker's own run, agree). Returned: the node gives the shard back for a reason of its own, such as a
    // full disk; it goes to another node and counts against nobody.
    enum class Outcome { Completed, Failed, Returned };
    static constexpr qsizetype MaxFailureLength = 2000; // characters of `failure` on the wire

    QString jobId;
    std::int64_t round = 0;
    std::int64_t shard = 0;
    Outcome outcome = Outcome::Completed;
    QString failure; // why, when Failed or Returned: shown to the node's owner and the job owner
    Digest finalHash; // SHA-256 of the canonical bytes of the final weights
    QList<Digest> checkpointHashes; // at step 0 (the round's weights), c, 2c, ..., H (training states)
    Digest weightsSha256; // the weights blob in the content-addressed store
    QList<double> losses; // training loss of each step
    std::int64_t samplesProcessed = 0;
    std::int64_t wallTimeMs = 0;
    QString runtimeProfile; // hashes are comparable only between equal profiles
    // A stage task's: the root of the tensors it sent and received (compute::stageTensorsRoot;
    // docs/PROTOCOL.md, "Stage tasks"), which its commitment covers too. Null for other tasks.
    Digest tensorsRoot;

    static constexpr qsizetype MaxCheckpoints = 100001;
    static constexpr qsizetype MaxLosses = 1000000;
    static constexpr qsizetype MaxSteps = 1000000; // training.localSteps
    static constexpr qsizetype MaxInstructions = 1000000; // of one step's portable program

    Commitment commitment() const;
    // The document a node signs before it reveals this result (docs/PROTOCOL.md, "Commitment"):
    // kind tessera-commitment, assignment, jobId, round, shard, finalHash, chainRoot.
    QJsonObject commitmentDocument(const QString& assignment) const;
    static constexpr auto CommitmentKind = "tessera-commitment";
    static Result<ShardResult> fromJson(const QJsonObject& json);
    // Whether a failed result says the job owner's code failed in the node's sandbox (the failure
    // starts "time limit:", "out of memory", "forbidden call:" or "crash:", docs/PROTOCOL.md): it
    // counts against the shard, whose job fails when distinct nodes agree, not in the node's record.
    bool failedInSandbox() const;
    // A failure reason that says the job's code ran out of time or memory in the sandbox.
    static bool isSandboxFailure(const QString& failure);
    // A failed result of `task` for `why`, without a runtime profile unless the task is portable
    // (whose profile is fixed): what a node's supervisor says of a shard its worker did not finish.
    static ShardResult failedOf(const ShardTask& task, const QString& why);
    QJsonObject toJson() const;

    bool operator==(const ShardResult&) const = default;
};

template<> struct EnumNames<ShardResult::Outcome> { // as on the wire
    static constexpr std::array names { "completed", "failed", "returned" };
};

} // namespace tessera::core

Q_DECLARE_METATYPE(tessera::core::ShardResult)
