#pragma once

#include "../hash.h"

#include <QList>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core::verification {

// How often a node's results are re-executed by another node: every result while the node is new
// (its first `warmup` results since its last failure), then warmup / streak, never below `floor`.
// Any failed verification starts the node over (BOINC's adaptive replication is the model).
struct SamplingPolicy {
    std::int64_t warmup = 25;
    double floor = 0.05;
};

struct NodeRecord {
    std::int64_t streak = 0; // results accepted since the node's last failed verification
    std::int64_t accepted = 0;
    std::int64_t verified = 0;
    std::int64_t caught = 0;
};

double samplingProbability(const NodeRecord& record, const SamplingPolicy& policy);
// A draw that anyone can recompute from the seed (a shard's identity): true with probability p.
bool drawSample(double probability, std::uint64_t seed);

// Robust plausibility of a round's unchecked results (docs/VERIFICATION.md, "Unchecked results"):
// the indices of `norms` (each result's L2 update norm) that lie more than `factor` from the median
// of the round's norms, above (median * factor) or below (median / factor). With fewer than 3 norms
// in the round, the median is taken together with `reference` (the latest rounds' norms); with
// fewer than 3 in all there is nothing to compare with, and every index is returned.
QList<qsizetype> implausibleUpdates(const QList<double>& norms, const QList<double>& reference, double factor);

// Two checkpoint chains of the same shard: the index of the first hash that differs, or nullopt
// when they are equal. Chains of different lengths differ at the first missing index.
std::optional<qsizetype> firstDivergence(const QList<Digest>& a, const QList<Digest>& b);

// The referee re-executed the one interval that leads to checkpoint j and got refereeHash; its
// ruling says which side agrees with it.
enum class Ruling { FirstHonest, SecondHonest, BothWrong };
Ruling referee(const Digest& first, const Digest& second, const Digest& refereeHash);

// A dispute over a portable job narrowed by the two sides' traces of the differing interval
// (docs/VERIFICATION.md, "Disputes over portable jobs"): a trace that cannot be used names its
// fault; with both usable, the first differing instruction of the first differing step, and the
// referee's ruling where it needed no operands to rule (the step's batch, which it reads itself).
struct TraceComparison {
    QString firstFault; // empty: usable
    QString secondFault;
    std::int64_t step = 0; // 1-based shard step
    std::int64_t instruction = -1;
    QString instructionName; // "Linear (fc1: forward)"
    std::optional<Ruling> ruling;
};

// A fast model of a network, for make bench and the tests: honest nodes and cheaters submit
// shards; sampled results are re-executed; a sampled cheat is caught (disputes decide by
// re-execution, so an honest node, whose results re-execute to the same bits, never loses one).
struct SimulationConfig {
    int honestNodes = 50;
    int shardsPerNode = 2000;
    double cheatRate = 0.2; // of a cheater's shards
    int cheaterTrials = 2000; // fresh cheaters, each followed for `window` shards
    int window = 50;
    int honestShardsBeforeCheating = 0; // a patient cheater builds a streak first
    std::int64_t steadyStateFrom = 1000; // overhead is measured on shards after this many
    SamplingPolicy policy;
    std::uint64_t seed = 1;
};

struct SimulationResult {
    std::int64_t honestShards = 0;
    std::int64_t honestSlashed = 0;
    double cheatersCaughtWithinWindow = 0.0; // share of cheaters caught within `window` shards
    double steadyStateOverhead = 0.0; // re-executed shards / trained shards, honest network
    double lifetimeOverhead = 0.0; // the same over each node's whole life
};

SimulationResult simulate(const SimulationConfig& config);

} // namespace tessera::core::verification
