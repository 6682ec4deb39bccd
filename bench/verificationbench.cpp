// make bench, verification part: a fast simulation (no torch) over thousands of shards of the
// sampling policy and the disputes. Goals: honest nodes are never slashed; a node cheating on 20%
// of its shards is caught with at least 99% probability within 50 shards; re-execution costs at
// most 10% of the training compute at steady state.

#include "record.h"

#include <core/verification/verification.h>

#include <cstdio>

using namespace tessera::core::verification;

int main()
{
    SimulationConfig config;
    const auto fresh = simulate(config);
    std::printf("Verification (sampling: every result of a node's first %lld, then %lld/streak, floor %.2f)\n",
        static_cast<long long>(config.policy.warmup), static_cast<long long>(config.policy.warmup), config.policy.floor);
    std::printf("  honest nodes: %lld shards, %lld slashed (goal 0)\n", static_cast<long long>(fresh.honestShards),
        static_cast<long long>(fresh.honestSlashed));
    std::printf(
        "  re-executed / trained: %.3f at steady state (after %lld shards of a node; goal <= 0.10), %.3f over %d-shard lives\n",
        fresh.steadyStateOverhead, static_cast<long long>(config.steadyStateFrom), fresh.lifetimeOverhead, config.shardsPerNode);
    std::printf("  a new node cheating on %.0f%% of its shards: caught within %d shards in %.2f%% of %d trials (goal >= 99%%)\n",
        config.cheatRate * 100.0, config.window, fresh.cheatersCaughtWithinWindow * 100.0, config.cheaterTrials);
    tessera::bench::record("verification.honestShards", double(fresh.honestShards));
    tessera::bench::record("verification.honestSlashed", double(fresh.honestSlashed));
    tessera::bench::record("verification.steadyOverhead", fresh.steadyStateOverhead);
    tessera::bench::record("verification.lifetimeOverhead", fresh.lifetimeOverhead);
    tessera::bench::record("verification.caughtNew", fresh.cheatersCaughtWithinWindow);
    for (const int patience : { 100, 1000 }) {
        config.honestShardsBeforeCheating = patience;
        config.honestNodes = 0;
        const auto patient = simulate(config);
        std::printf(
            "  a node honest for %d shards, then cheating on 20%%: caught within 50 in %.2f%% (stake must cover the rest)\n",
            patience, patient.cheatersCaughtWithinWindow * 100.0);
        tessera::bench::record(
            patience == 100 ? "verification.caughtAfter100" : "verification.caughtAfter1000", patient.cheatersCaughtWithinWindow);
    }
    return 0;
}
