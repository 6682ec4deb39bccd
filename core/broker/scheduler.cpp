#include "scheduler.h"

#include "../pricing.h"

#include <algorithm>
#include <cmath>

namespace tessera::core::broker {

void Scheduler::add(Round round, const QList<std::int64_t>& answered)
{
    Job job;
    job.answered.assign(std::size_t(std::max<std::int64_t>(round.spec.unitsPerRound(), 0)), false);
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

const Scheduler::Job* Scheduler::job(const QString& jobId) const
{
    return const_cast<Scheduler*>(this)->job(jobId);
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

std::int64_t Scheduler::usualMs(const Job& job)
{
    constexpr std::size_t Enough = 3;
    if (job.durations.size() < Enough)
        return 0;
    std::vector<std::int64_t> sorted(job.durations.begin(), job.durations.end());
    std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(sorted.size() / 2), sorted.end());
    return sorted[sorted.size() / 2];
}

std::int64_t Scheduler::usualMs(const QString& jobId) const
{
    const auto* found = job(jobId);
    return found ? usualMs(*found) : 0;
}

bool Scheduler::isLate(const Job& job, const Out& out, std::int64_t now) const
{
    if (out.deadline < now)
        return true;
    const auto usual = usualMs(job);
    return usual > 0 && double(now - out.issued) > m_stragglerFactor * double(usual);
}

bool Scheduler::heldInTime(const Job& job, std::int64_t shard, std::int64_t now) const
{
    return std::any_of(
        job.out.cbegin(), job.out.cend(), [&](const Out& out) { return out.shard == shard && !isLate(job, out, now); });
}

bool Scheduler::heldBy(const Job& job, std::int64_t shard, const QString& nodeId)
{
    return std::any_of(
        job.out.cbegin(), job.out.cend(), [&](const Out& out) { return out.shard == shard && out.node == nodeId; });
}

void Scheduler::returnedBy(const QString& jobId, std::int64_t shard, const QString& nodeId, std::int64_t now)
{
    if (auto* found = job(jobId))
        found->returnedAt[shard].insert(nodeId, now);
}

bool Scheduler::failedBy(const Job& job, std::int64_t shard, const QString& nodeId)
{
    const auto it = job.failedBy.constFind(shard);
    return it != job.failedBy.constEnd() && it->contains(nodeId);
}

std::optional<std::int64_t> Scheduler::choose(Job& job, const QString& nodeId, std::int64_t now) const
{
    if (job.excluded.contains(nodeId))
        return std::nullopt;
    // A node that keeps failing this round's shards gets no more of them.
    const auto failures = std::count_if(
        job.failedBy.cbegin(), job.failedBy.cend(), [&](const QList<QString>& nodes) { return nodes.contains(nodeId); });
    if (failures >= MaxFailuresPerRound)
        return std::nullopt;
    const auto shards = std::int64_t(job.answered.size());
    // Shards to hand out again, in the order they came back; one this node failed waits for another.
    for (auto it = job.reissue.begin(); it != job.reissue.end();) {
        const auto shard = *it;
        if (job.answered[std::size_t(shard)] || heldByAnyone(job, shard)) {
            it = job.reissue.erase(it);
            continue;
        }
        const auto returned = job.returnedAt.constFind(shard);
        const bool gaveBack = returned != job.returnedAt.constEnd() && returned->contains(nodeId)
            && now - returned->value(nodeId) < ReturnedWaitMs;
        if (failedBy(job, shard, nodeId) || gaveBack) {
            ++it;
            continue;
        }
        job.reissue.erase(it);
        return shard;
    }
    while (job.cursor < shards) {
        const auto shard = job.cursor++;
        if (!job.answered[std::size_t(shard)])
            return shard;
    }
    // The latest (out the longest; the lower shard of two as old), whatever order the hash keeps.
    std::optional<std::pair<std::int64_t, std::int64_t>> latest; // (issued, shard)
    for (const auto& out : std::as_const(job.out)) {
        const std::pair candidate { out.issued, out.shard };
        if ((!latest || candidate < *latest) && isLate(job, out, now) && !job.answered[std::size_t(out.shard)]
            && out.node != nodeId && !heldInTime(job, out.shard, now) && !heldBy(job, out.shard, nodeId)
            && !failedBy(job, out.shard, nodeId))
            latest = candidate;
    }
    if (!latest)
        return std::nullopt;
    return latest->second;
}

std::optional<Scheduler::Pick> Scheduler::pick(const QString& nodeId, int maxThreads, std::int64_t now, std::int64_t maxMemoryMiB,
    const std::optional<QStringList>& capabilities)
{
    const QStringList declared = capabilities.value_or(ownCapabilities());
    for (auto& job : m_jobs) {
        if (job.round.spec.stagesPerShard() > 1 || !job.round.runsOn(maxThreads, maxMemoryMiB, declared))
            continue; // a pipeline's stages go out together (pickPipeline)
        if (auto shard = choose(job, nodeId, now))
            return Pick { &job.round, *shard };
    }
    return std::nullopt;
}

std::optional<Scheduler::PipelinePick> Scheduler::pickPipeline(const QList<Candidate>& given, std::int64_t now) const
{
    auto candidates = given;
    std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
        if ((a.roundTripMs < 0) != (b.roundTripMs < 0))
            return a.roundTripMs >= 0;
        return a.roundTripMs < b.roundTripMs;
    });
    for (const auto& job : m_jobs) {
        const auto S = job.round.spec.stagesPerShard();
        if (S < 2 || std::int64_t(candidates.size()) < S)
            continue;
        const auto shards = std::int64_t(job.answered.size()) / S;
        for (std::int64_t shard = 0; shard < shards; ++shard) {
            bool out = false, open = false;
            for (auto unit = shard * S; unit < shard * S + S; ++unit) {
                out = out || heldByAnyone(job, unit);
                open = open || !job.answered[std::size_t(unit)];
            }
            if (out || !open)
                continue;
            PipelinePick pick { &job.round, shard, {} };
            for (const auto& candidate : candidates) {
                bool failed = false;
                for (auto unit = shard * S; unit < shard * S + S; ++unit) {
                    const auto returned = job.returnedAt.constFind(unit);
                    failed = failed || failedBy(job, unit, candidate.nodeId)
                        || (returned != job.returnedAt.constEnd() && returned->contains(candidate.nodeId)
                            && now - returned->value(candidate.nodeId) < ReturnedWaitMs);
                }
                if (failed || job.excluded.contains(candidate.nodeId) || pick.nodes.contains(candidate.nodeId)
                    || !job.round.runsOn(candidate.maxThreads, candidate.maxMemoryMiB, candidate.capabilities))
                    continue;
                pick.nodes.append(candidate.nodeId);
                if (std::int64_t(pick.nodes.size()) == S)
                    return pick;
            }
        }
    }
    return std::nullopt;
}

void Scheduler::handedOut(const QString& jobId, const QString& assignmentId, std::int64_t shard, const QString& nodeId,
    std::int64_t deadline, std::int64_t issued)
{
    if (auto* found = job(jobId))
        found->out.insert(assignmentId, { shard, nodeId, deadline, issued });
}

int Scheduler::heldBy(const QString& nodeId) const
{
    int held = 0;
    for (const auto& job : m_jobs)
        held += int(std::count_if(job.out.cbegin(), job.out.cend(), [&](const Out& out) { return out.node == nodeId; }));
    return held;
}

void Scheduler::exclude(const QString& jobId, const QString& nodeId)
{
    if (auto* found = job(jobId))
        found->excluded.insert(nodeId);
}

QList<QString> Scheduler::failedBy(const QString& jobId, std::int64_t shard) const
{
    const auto* found = job(jobId);
    return found ? found->failedBy.value(shard) : QList<QString> {};
}

bool Scheduler::isOut(const QString& jobId, const QString& assignmentId) const
{
    for (const auto& job : m_jobs) {
        if (job.round.jobId == jobId)
            return job.out.contains(assignmentId);
    }
    return false;
}

void Scheduler::release(const QString& jobId, const QString& assignmentId, Release why)
{
    auto* found = job(jobId);
    if (!found)
        return;
    const auto it = found->out.find(assignmentId);
    if (it == found->out.end())
        return;
    const auto shard = it->shard;
    if (why == Release::Failed && !failedBy(*found, shard, it->node))
        found->failedBy[shard].append(it->node);
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

void Scheduler::answered(const QString& jobId, const QString& assignmentId, std::int64_t shard, std::int64_t now)
{
    auto* found = job(jobId);
    if (!found)
        return;
    if (shard >= 0 && shard < std::int64_t(found->answered.size()))
        found->answered[std::size_t(shard)] = true;
    if (const auto it = found->out.constFind(assignmentId); it != found->out.constEnd() && now >= it->issued) {
        constexpr std::size_t Remembered = 31;
        found->durations.push_back(now - it->issued);
        if (found->durations.size() > Remembered)
            found->durations.pop_front();
        const auto& training = found->round.spec.training;
        if (found->round.flopsPerSample > 0) {
            const double work = double(training.localSteps) * double(training.batchSize) * found->round.flopsPerSample;
            const double rate = work / double(std::max<std::int64_t>(now - it->issued, 1));
            auto& observed = m_observedFlopsPerMs[observedKey(it->node, training.threads)];
            observed = observed > 0 ? 0.5 * observed + 0.5 * rate : rate;
        }
    }
    found->out.remove(assignmentId);
}

void Scheduler::forget(const QString& jobId, const QString& assignmentId)
{
    if (auto* found = job(jobId))
        found->out.remove(assignmentId);
}

void Scheduler::advance(const QString& jobId, std::int64_t round, const Digest& weightsHash, const Digest& weightsBlob,
    const std::optional<WeightsChange>& change)
{
    auto* found = job(jobId);
    if (!found)
        return;
    found->round.round = round;
    found->round.weightsHash = weightsHash;
    found->round.weightsBlob = weightsBlob;
    found->round.change = change;
    found->answered.assign(found->answered.size(), false);
    found->out.clear();
    found->cursor = 0;
    found->reissue.clear();
    found->failedBy.clear();
    found->returnedAt.clear();
}

void Scheduler::reopen(const QString& jobId, std::int64_t round, std::int64_t shard)
{
    auto* found = job(jobId);
    if (!found || found->round.round != round || shard < 0 || shard >= std::int64_t(found->answered.size()))
        return;
    found->answered[std::size_t(shard)] = false;
    found->reissue.push_back(shard);
}

double Scheduler::expectedSamplesPerSecond(const NodeInfo& node, const BrokerOptions& options)
{
    const double claimed = node.benchmarkSamplesPerSecond > 0 ? node.benchmarkSamplesPerSecond : 1000.0;
    return std::clamp(claimed, options.minClaimedSamplesPerSecond, options.maxClaimedSamplesPerSecond);
}

std::int64_t Scheduler::deadlineFor(const ShardTask& task, const NodeInfo& node, const BrokerOptions& options, std::int64_t now)
{
    // In doubles and clamped before any conversion: no claim and no task size overflows.
    const double samples = double(task.localSteps) * double(task.batchSize) * double(std::max<std::int64_t>(task.threads, 1));
    const double ms = samples / expectedSamplesPerSecond(node, options) * 1000.0 * options.deadlineSlack;
    const double floor = double(options.minDeadlineMs), ceiling = double(std::max(options.maxDeadlineMs, options.minDeadlineMs));
    return now + std::int64_t(std::isfinite(ms) ? std::clamp(ms, floor, ceiling) : ceiling);
}

double Scheduler::expectedMs(
    const ShardTask& task, double flopsPerSample, const NodeInfo& node, double observedFlopsPerMs, const BrokerOptions& options)
{
    const double work = double(task.localSteps) * double(task.batchSize) * flopsPerSample;
    // The claim: bounded, and per thread of the task as deadlineFor() has it.
    const double claimed = expectedSamplesPerSecond(node, options) * benchmarkFlopsPerSample() / 1000.0
        / double(std::max<std::int64_t>(task.threads, 1));
    double ms = work / claimed;
    if (observedFlopsPerMs > 0)
        ms = std::max(ms, work / observedFlopsPerMs);
    return ms * options.deadlineSlack;
}

std::int64_t Scheduler::deadline(
    const ShardTask& task, double flopsPerSample, const NodeInfo& node, const BrokerOptions& options, std::int64_t now) const
{
    if (!(flopsPerSample > 0) || !std::isfinite(flopsPerSample))
        return deadlineFor(task, node, options, now);
    const double ms = expectedMs(task, flopsPerSample, node, observedFlopsPerMs(node.nodeId, task.threads), options);
    const double floor = double(options.minDeadlineMs), ceiling = double(std::max(options.maxDeadlineMs, options.minDeadlineMs));
    return now + std::int64_t(std::isfinite(ms) ? std::clamp(ms, floor, ceiling) : ceiling);
}

} // namespace tessera::core::broker
