#pragma once

#include "../hash.h"
#include "../jobspec.h"
#include "../shardtask.h"

#include <QList>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core::broker {

// A round's weights as a node that holds the previous round's can fetch them: the round's change,
// an int8 update (blob) that turns the previous round's weights (base) into them bit for bit
// (docs/DETERMINISM.md, "Round weights"). Jobs with int8 compression have one from round 1 on.
struct WeightsChange {
    Digest blob;
    Digest base;
    bool operator==(const WeightsChange&) const = default;
};

// A shard handed to a node: a shard of a round to train, or one to re-execute for a check.
struct Assignment {
    QString id;
    ShardTask task;
    Digest startWeightsBlob;
    std::int64_t deadlineMs = 0; // absolute, on the broker's clock
    std::optional<WeightsChange> startChange; // another way to startWeightsBlob
};

// How the broker took a node's result. Accepted: counted and paid; Held: counted, paid once a
// re-execution confirms it (a sampled result, or a verifier's re-execution); Stale: the shard was
// already answered; Failed: recorded, the shard goes to another node. (What later becomes of a
// result is its verdict, told to the node in a VERDICT.)
enum class Acceptance { Accepted, Held, Stale, Failed };

// The blobs a job names: its TorchScript model and its tensor files.
QList<Digest> blobsNamedBy(const JobSpec& spec);

} // namespace tessera::core::broker
