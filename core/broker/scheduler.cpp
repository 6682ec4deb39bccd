#include "scheduler.h"

#include <algorithm>

namespace tessera::core::broker {

void Scheduler::add(Round round, const QList<std::int64_t>& answered)
{
    Job job;
    job.answered.assign(std::size_t(std::max<std::int64_t>(round.spec.training.shardsPerRound, 0)), false);
    for (const auto shard : answered) {
        if (shard >= 0 && shard < std::int64_t(job.answered.size()))
            job.answered[std::size_t(shard)] = true;
    }
    job.round = std::move(round);
    m_jobs.push_back(std::move(job));
}

void Scheduler::remove(const QString& jobId)
{
    std::erase_if(m_jobs, [&](const Job& job) { return job.round.jobId == jobId; });
}

void Scheduler::clear()
{
    m_jobs.clear();
}

Scheduler::Job* Scheduler::job(const QString& jobId)
{
    for (auto& job : m_jobs) {
        if (job.round.jobId == jobId)
            return &job;
    }
    return nullptr;
}

const Scheduler::Round* Scheduler::find(const QString& jobId) const
{
    for (const auto& job : m_jobs) {
        if (job.round.jobId == jobId)
            return &job.round;
    }
    return nullptr;
}

bool Scheduler::heldByAnyone(const Job& job, std::int64_t shard)
{
    return std::any_of(job.out.cbegin(), job.out.cend(), [&](const Out& out) { return out.shard == shard; });
}

bool Scheduler::heldInTime(const Job& job, std::int64_t shard, std::int64_t now)
{
    return std::any_of(
        job.out.cbegin(), job.out.cend(), [&](const Out& out) { return out.shard == shard && out.deadline >= now; });
}

bool Scheduler::heldBy(const Job& job, std::int64_t shard, const QString& nodeId)
{
    return std::any_of(
        job.out.cbegin(), job.out.cend(), [&](const Out& out) { return out.shard == shard && out.node == nodeId; });
}

std::optional<std::int64_t> Scheduler::choose(Job& job, const QString& nodeId, std::int64_t now)
{
    const auto shards = std::int64_t(job.answered.size());
    while (!job.reissue.empty()) {
        const auto shard = job.reissue.front();
        job.reissue.pop_front();
        if (!job.answered[std::size_t(shard)] && !heldByAnyone(job, shard))
            return shard;
    }
    while (job.cursor < shards) {
        const auto shard = job.cursor++;
        if (!job.answered[std::size_t(shard)])
            return shard;
    }
    // The longest overdue (the lower shard of two as late), whatever order the hash keeps.
    std::optional<std::pair<std::int64_t, std::int64_t>> overdue; // (deadline, shard)
    for (const auto& out : std::as_const(job.out)) {
        const std::pair candidate { out.deadline, out.shard };
        if (out.deadline < now && (!overdue || candidate < *overdue) && !job.answered[std::size_t(out.shard)]
            && out.node != nodeId && !heldInTime(job, out.shard, now) && !heldBy(job, out.shard, nodeId))
            overdue = candidate;
    }
    if (!overdue)
        return std::nullopt;
    return overdue->second;
}

std::optional<Scheduler::Pick> Scheduler::pick(const QString& nodeId, int maxThreads, std::int64_t now)
{
    for (auto& job : m_jobs) {
        if (job.round.spec.training.threads > maxThreads)
            continue;
        if (auto shard = choose(job, nodeId, now))
            return Pick { &job.round, *shard };
    }
    return std::nullopt;
}

void Scheduler::handedOut(
    const QString& jobId, const QString& assignmentId, std::int64_t shard, const QString& nodeId, std::int64_t deadline)
{
    if (auto* found = job(jobId))
        found->out.insert(assignmentId, { shard, nodeId, deadline });
}

bool Scheduler::isOut(const QString& jobId, const QString& assignmentId) const
{
    for (const auto& job : m_jobs) {
        if (job.round.jobId == jobId)
            return job.out.contains(assignmentId);
    }
    return false;
}

void Scheduler::release(const QString& jobId, const QString& assignmentId)
{
    auto* found = job(jobId);
    if (!found)
        return;
    const auto it = found->out.find(assignmentId);
    if (it == found->out.end())
        return;
    const auto shard = it->shard;
    found->out.erase(it);
    if (!found->answered[std::size_t(shard)] && !heldByAnyone(*found, shard))
        found->reissue.push_back(shard);
}

void Scheduler::nodeLost(const QString& nodeId)
{
    for (auto& job : m_jobs) {
        // In shard order, so that the shards go out again in the order they went out first.
        QList<std::pair<std::int64_t, QString>> theirs;
        for (auto it = job.out.constBegin(); it != job.out.constEnd(); ++it) {
            if (it->node == nodeId)
                theirs.append({ it->shard, it.key() });
        }
        std::sort(theirs.begin(), theirs.end());
        for (const auto& [shard, id] : theirs)
            release(job.round.jobId, id);
    }
}

void Scheduler::answered(const QString& jobId, const QString& assignmentId, std::int64_t shard)
{
    auto* found = job(jobId);
    if (!found)
        return;
    if (shard >= 0 && shard < std::int64_t(found->answered.size()))
        found->answered[std::size_t(shard)] = true;
    found->out.remove(assignmentId);
}

void Scheduler::forget(const QString& jobId, const QString& assignmentId)
{
    if (auto* found = job(jobId))
        found->out.remove(assignmentId);
}

void Scheduler::advance(const QString& jobId, std::int64_t round, const Digest& weightsHash, const Digest& weightsBlob)
{
    auto* found = job(jobId);
    if (!found)
        return;
    found->round.round = round;
    found->round.weightsHash = weightsHash;
    found->round.weightsBlob = weightsBlob;
    found->answered.assign(found->answered.size(), false);
    found->out.clear();
    found->cursor = 0;
    found->reissue.clear();
}

void Scheduler::reopen(const QString& jobId, std::int64_t round, std::int64_t shard)
{
    auto* found = job(jobId);
    if (!found || found->round.round != round || shard < 0 || shard >= std::int64_t(found->answered.size()))
        return;
    found->answered[std::size_t(shard)] = false;
    found->reissue.push_back(shard);
}

double Scheduler::expectedSamplesPerSecond(const NodeInfo& node)
{
    return node.benchmarkSamplesPerSecond > 0 ? node.benchmarkSamplesPerSecond : 1000.0;
}

std::int64_t Scheduler::deadlineFor(const ShardTask& task, const NodeInfo& node, const BrokerOptions& options, std::int64_t now)
{
    const double seconds = double(task.localSteps * task.batchSize) / expectedSamplesPerSecond(node) * double(task.threads);
    return now + std::max<std::int64_t>(options.minDeadlineMs, std::int64_t(seconds * 1000.0 * options.deadlineSlack));
}

} // namespace tessera::core::broker
