#pragma once

#include <core/seeds.h>
#include <core/shardtask.h>

#include <QList>

#include <cstdint>
#include <vector>

namespace tessera::compute::detail {

// The sample indices of every step of a shard (docs/DETERMINISM.md, "Data order"):
// the round permutation P = perm(N, derive(seed, RoundPermutation, round)); the shard's slice is
// P[begin, end) of length L; the shard reads its slice in passes, pass k in the order
// perm(L, derive(seed, ShardPass, round, shard, k)); step s takes positions [s*B, (s+1)*B) of
// that endless stream.
class BatchPlan {
public:
    BatchPlan(const core::ShardTask& task, std::int64_t datasetSize);
    std::vector<std::int64_t> indicesOfStep(std::int64_t step);

private:
    const QList<std::int64_t>& passOrder(std::int64_t pass);

    core::ShardTask m_task;
    QList<std::int64_t> m_slice;
    std::int64_t m_cachedPass = -1;
    QList<std::int64_t> m_passOrder;
};

} // namespace tessera::compute::detail
