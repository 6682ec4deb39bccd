#include "batches.h"

namespace tessera::compute::detail {

using core::SeedPurpose;

BatchPlan::BatchPlan(const core::ShardTask& task, const DatasetSplits& data)
    : m_task(task)
    , m_rows(data.chunked)
{
    if (m_rows)
        m_chunked.emplace(task, m_rows->chunkSamples);
    else
        *this = BatchPlan(task, data.train->size());
}

BatchPlan::BatchPlan(const core::ShardTask& task, std::int64_t datasetSize)
    : m_task(task)
{
    const auto roundOrder = core::seededPermutation(datasetSize,
        core::deriveSeed(std::uint64_t(task.seed), { std::uint64_t(SeedPurpose::RoundPermutation), std::uint64_t(task.round) }));
    m_slice = roundOrder.mid(task.sampleBegin, task.sampleEnd - task.sampleBegin);
}

const QList<std::int64_t>& BatchPlan::passOrder(std::int64_t pass)
{
    if (pass != m_cachedPass) {
        m_passOrder = core::seededPermutation(m_slice.size(),
            core::deriveSeed(std::uint64_t(m_task.seed),
                { std::uint64_t(SeedPurpose::ShardPass), std::uint64_t(m_task.round), std::uint64_t(m_task.shard),
                    std::uint64_t(pass) }));
        m_cachedPass = pass;
    }
    return m_passOrder;
}

core::Status BatchPlan::check() const
{
    if (!m_chunked)
        return {};
    // Exactly the chunks the steps read: no fewer (a batch would read what is not here), no more
    // (fetched and loaded for nothing).
    QList<core::Digest> read;
    for (const auto chunk : m_chunked->chunksRead(m_task.localSteps)) {
        if (!m_rows->start.contains(chunk))
            return core::Error { QStringLiteral("dataChunks"),
                QStringLiteral("the task's steps read chunk %1 of the dataset, which the task does not name").arg(chunk) };
        read.append(m_rows->digests.value(chunk));
    }
    if (read != m_task.dataChunks)
        return core::Error {
            QStringLiteral("dataChunks"),
            QStringLiteral("the task names %1 chunks, not the %2 its steps read").arg(m_task.dataChunks.size()).arg(read.size())
        };
    return {};
}

std::vector<std::int64_t> BatchPlan::indicesOfStep(std::int64_t step)
{
    std::vector<std::int64_t> indices;
    indices.reserve(std::size_t(m_task.batchSize));
    if (m_chunked) {
        for (const auto& row : m_chunked->rowsOfStep(step))
            indices.push_back(m_rows->start.value(row.chunk) + row.index);
        return indices;
    }
    const std::int64_t length = m_slice.size();
    for (std::int64_t position = step * m_task.batchSize; position < (step + 1) * m_task.batchSize; ++position) {
        const auto& order = passOrder(position / length);
        indices.push_back(m_slice[order[position % length]]);
    }
    return indices;
}

} // namespace tessera::compute::detail
