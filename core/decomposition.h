#pragma once

#include "hash.h"
#include "jobspec.h"
#include "shardtask.h"

#include <QList>
#include <QString>

namespace tessera::core {

// The shards of one round: shard k of K reads positions [k*N/K, (k+1)*N/K) of the round's seeded
// permutation of the N training samples (integer division, so sizes differ by at most one), for
// the job's local steps, from the round's global weights. The broker and `tessera-node
// train-local` decompose the same way, which is why their results are bitwise equal.
QList<ShardTask> decomposeRound(const QString& jobId, const JobSpec& spec, std::int64_t round, const Digest& startWeights);
// One shard of decomposeRound(), without building the others.
ShardTask decomposeShard(
    const QString& jobId, const JobSpec& spec, std::int64_t round, std::int64_t shard, const Digest& startWeights);
// Stage `stage` of a pipeline job's shard (training.pipeline.stages of them): the shard's task,
// which names the stage.
ShardTask stageTaskOf(const ShardTask& shard, std::int64_t stage, std::int64_t stages);

} // namespace tessera::core
