#include "verification.h"

#include "../seeds.h"

#include <algorithm>
#include <cmath>

namespace tessera::core::verification {

double samplingProbability(const NodeRecord& record, const SamplingPolicy& policy)
{
    if (record.streak < policy.warmup)
        return 1.0;
    if (record.streak <= 0)
        return policy.floor; // no warm-up at all
    return std::max(policy.floor, double(policy.warmup) / double(record.streak));
}

bool drawSample(double probability, std::uint64_t seed)
{
    if (probability >= 1.0)
        return true;
    // The top 53 bits as a uniform double in [0, 1).
    const double uniform = double(SplitMix64(seed).next() >> 11) * 0x1.0p-53;
    return uniform < probability;
}

QList<qsizetype> implausibleUpdates(const QList<double>& norms, const QList<double>& reference, double factor)
{
    QList<double> pool;
    const auto take = [&pool](const QList<double>& from) {
        for (const double norm : from) {
            if (std::isfinite(norm))
                pool.append(norm);
        }
    };
    take(norms);
    if (pool.size() < 3)
        take(reference);
    QList<qsizetype> implausible;
    if (pool.size() < 3) {
        for (qsizetype i = 0; i < norms.size(); ++i)
            implausible.append(i);
        return implausible;
    }
    std::sort(pool.begin(), pool.end());
    const qsizetype middle = pool.size() / 2;
    const double median = pool.size() % 2 ? pool[middle] : 0.5 * (pool[middle - 1] + pool[middle]);
    for (qsizetype i = 0; i < norms.size(); ++i) {
        const double norm = norms[i];
        if (!std::isfinite(norm) || norm > median * factor || norm * factor < median)
            implausible.append(i);
    }
    return implausible;
}

std::optional<qsizetype> firstDivergence(const QList<Digest>& a, const QList<Digest>& b)
{
    const qsizetype common = std::min(a.size(), b.size());
    for (qsizetype i = 0; i < common; ++i) {
        if (a[i] != b[i])
            return i;
    }
    if (a.size() != b.size())
        return common;
    return std::nullopt;
}

Ruling referee(const Digest& first, const Digest& second, const Digest& refereeHash)
{
    if (first == refereeHash)
        return Ruling::FirstHonest;
    if (second == refereeHash)
        return Ruling::SecondHonest;
    return Ruling::BothWrong;
}

namespace {

// A stand-in for the hash of a shard's checkpoint: equal for equal (shard, step) when honest.
Digest truth(std::uint64_t shard, int step)
{
    const auto value = deriveSeed(shard, { std::uint64_t(step) });
    return Digest::ofBytes(QByteArray::number(qulonglong(value)));
}

QList<Digest> chain(std::uint64_t shard, int length, std::optional<int> forgedFrom)
{
    QList<Digest> hashes;
    for (int step = 0; step < length; ++step)
        hashes.append(
            forgedFrom && step >= *forgedFrom ? Digest::ofBytes("forged" + QByteArray::number(step)) : truth(shard, step));
    return hashes;
}

} // namespace

SimulationResult simulate(const SimulationConfig& config)
{
    SimulationResult result;
    std::uint64_t shardId = config.seed << 32;
    constexpr int ChainLength = 11;

    // Honest network: every re-execution agrees; count what verification costs.
    std::int64_t verifications = 0, steadyVerifications = 0, steadyShards = 0;
    for (int node = 0; node < config.honestNodes; ++node) {
        NodeRecord record;
        for (int i = 0; i < config.shardsPerNode; ++i) {
            const std::uint64_t shard = ++shardId;
            const bool sampled = drawSample(samplingProbability(record, config.policy), deriveSeed(config.seed, { 1, shard }));
            ++record.accepted;
            ++record.streak;
            ++result.honestShards;
            if (i >= config.steadyStateFrom)
                ++steadyShards;
            if (!sampled)
                continue;
            ++verifications;
            if (i >= config.steadyStateFrom)
                ++steadyVerifications;
            const auto mine = chain(shard, ChainLength, std::nullopt);
            const auto verifier = chain(shard, ChainLength, std::nullopt);
            if (auto j = firstDivergence(mine, verifier)) {
                if (referee(mine[*j], verifier[*j], truth(shard, int(*j))) != Ruling::FirstHonest) {
                    ++result.honestSlashed;
                    record.streak = 0;
                }
            } else {
                ++record.verified;
            }
        }
    }
    result.lifetimeOverhead = double(verifications) / double(std::max<std::int64_t>(1, result.honestShards));
    result.steadyStateOverhead = double(steadyVerifications) / double(std::max<std::int64_t>(1, steadyShards));

    // Cheaters, each followed for `window` shards once it starts cheating.
    int caught = 0;
    for (int trial = 0; trial < config.cheaterTrials; ++trial) {
        NodeRecord record;
        for (int i = 0; i < config.honestShardsBeforeCheating; ++i) {
            ++record.accepted;
            ++record.streak;
        }
        for (int i = 0; i < config.window; ++i) {
            const std::uint64_t shard = ++shardId;
            const bool cheats = drawSample(config.cheatRate, deriveSeed(config.seed, { 2, shard }));
            const bool sampled = drawSample(samplingProbability(record, config.policy), deriveSeed(config.seed, { 3, shard }));
            ++record.accepted;
            ++record.streak;
            if (!sampled)
                continue;
            const auto mine
                = chain(shard, ChainLength, cheats ? std::optional<int>(1 + int(shard % (ChainLength - 1))) : std::nullopt);
            const auto verifier = chain(shard, ChainLength, std::nullopt);
            const auto j = firstDivergence(mine, verifier);
            if (j && referee(mine[*j], verifier[*j], truth(shard, int(*j))) == Ruling::SecondHonest) {
                ++caught;
                break;
            }
        }
    }
    result.cheatersCaughtWithinWindow = double(caught) / double(std::max(1, config.cheaterTrials));
    return result;
}

} // namespace tessera::core::verification
