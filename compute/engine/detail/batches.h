#pragma once

#include "datasets.h"

#include <core/datasetchunks.h>
#include <core/seeds.h>
#include <core/shardtask.h>

#include <QList>

#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::compute::detail {

// The sample indices of every step of a shard (docs/DETERMINISM.md, "Data order"):
// the round permutation P = perm(N, derive(seed, RoundPermutation, round)); the shard's slice is
// P[begin, end) of length L; the shard reads its slice in passes, pass k in the order
// perm(L, derive(seed, ShardPass, round, shard, k)); step s takes positions [s*B, (s+1)*B) of
// that endless stream.
// A chunked dataset has its own order (core::ChunkedOrder); the rows are then those of the
// training set that holds the task's chunks.
class BatchPlan {
public:
    BatchPlan(const core::ShardTask& task, const DatasetSplits& data);
    BatchPlan(const core::ShardTask& task, std::int64_t datasetSize); // of a dataset that is not chunked
    // Whether every chunk the task's steps read was loaded (a task that names too few is refused).
    core::Status check() const;
    std::vector<std::int64_t> indicesOfStep(std::int64_t step);

private:
    const QList<std::int64_t>& passOrder(std::int64_t pass);

    core::ShardTask m_task;
    std::optional<core::ChunkedOrder> m_chunked;
    std::shared_ptr<const ChunkRows> m_rows;
    QList<std::int64_t> m_slice;
    std::int64_t m_cachedPass = -1;
    QList<std::int64_t> m_passOrder;
};

} // namespace tessera::compute::detail
