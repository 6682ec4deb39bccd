#pragma once

#include "../credits.h"
#include "../verification/verification.h"

#include <QString>

#include <cstdint>

namespace tessera::core::broker {

// How a broker runs: deadlines, prices, stake, sampling and disputes (docs/BROKER.md lists the
// settings that set them). Broker::Options.
struct BrokerOptions {
    // Where the broker's records live (Broker/Database): empty, broker.sqlite in its data folder;
    // or a PostgreSQL connection URI (postgresql://...), which several brokers may share
    // (docs/STORE.md).
    QString database;
    // Several brokers on one database (docs/STORE.md, "Several brokers"): where this broker's
    // clients reach it (shown by a standby broker to those it refuses), and how long its network
    // lease lasts unrenewed (a standby takes over that long after the holder died).
    QString endpoint;
    std::int64_t leaseMs = 6'000;
    // How often the broker signs a new head of the ledger's log while entries arrive, and how often
    // nodes ask for it (docs/LEDGER.md, "Asking for the log"; WELCOME's logHeadMs).
    std::int64_t logHeadMs = 5'000;
    // Portable records (docs/LEDGER.md): the networks whose records it credits ("NETWORK:KEY"), and
    // the most results a record starts a node's sampling streak from.
    QStringList trustedNetworks;
    std::int64_t recordCreditMax = 12;
    std::int64_t minDeadlineMs = 30'000; // a shard's deadline is at least this
    std::int64_t maxDeadlineMs = 3'600'000; // and at most this, whatever the node claims
    double deadlineSlack = 4.0; // times the node's expected time
    // A node's benchmark is a claim: it counts only between these (samples/s of the reference MLP).
    double minClaimedSamplesPerSecond = 50.0;
    double maxClaimedSamplesPerSecond = 200'000.0;
    // A shard out this many times as long as the job's shards usually take goes to a second node.
    double stragglerFactor = 4.0;
    int maxAssignmentsPerNode = 2; // shards and checks one node may hold at once
    // Distinct nodes that must fail a shard before the job fails. Before that, once every connected
    // node that could run it has failed it, the broker re-executes it: if it trains, the failures
    // were false (their nodes are slashed); if it fails there too, the job fails.
    int maxShardFailures = 3;
    std::int64_t maxParameters = 100'000'000; // a job's model, counted before anything is built
    Credits pricePerUnit = Credits::fromMicro(100'000); // per GFLOP of training
    Credits minStake = Credits::fromMicro(10'000'000); // a node bonds this much to take work
    bool faucet = false; // mint what owners and nodes lack (local and demo brokers only)
    verification::SamplingPolicy sampling; // how often a node's results are re-executed
    double canaryRate = 0.0; // share of handed-out work that re-checks an already verified shard
    double slashFraction = 0.5; // of its stake, a node loses per lost dispute or proven lie
    std::int64_t disputeTimeoutMs = 60'000; // to deliver a checkpoint state in a dispute
    std::int64_t selfVerifyAfterMs = 120'000; // a sample no other node can check: the broker re-executes it
    // A sample that no connected node could check (none with its runtime profile, threads and
    // stake) is re-executed by the broker at once, once the broker has run this long (its nodes
    // come back after a restart); negative: only after selfVerifyAfterMs.
    std::int64_t selfVerifyAloneAfterMs = 5'000;
    std::int64_t unbondingDelayMs = 24LL * 3600 * 1000; // unbonded stake stays slashable this long
    // Share of checks where the verifier agreed that the broker re-executes itself too (both sides
    // are slashed when it gets other bits), for shards of at most auditMaxShardGflop of training
    // whose answer it can compute exactly (a portable job, or its own runtime profile), and at
    // most auditGflopPerSecond on average (bursts of two shards), whatever the jobs ask.
    double auditRate = 0.05;
    static constexpr double auditMaxShardGflop = 100.0;
    static constexpr double auditGflopPerSecond = 1.0;
    double crossProfileTolerance = 1e-3; // relative L2 distance, results of different runtime profiles
    // An unchecked result whose update norm is this many times above or below the median of its
    // round's is re-executed before the round aggregates.
    double updateNormFactor = 4.0;
    std::uint64_t randomSeed = 0; // 0: sample draws from the system's random source
    std::int64_t maxRunningJobsPerOwner = 20; // more running jobs of one owner are refused
    // Uploads no job names: at most this many bytes an uploader (a PUT of a new blob past it is
    // refused), each removed once it has stayed unnamed this long.
    std::int64_t maxUnnamedUploadBytes = 4LL << 30;
    std::int64_t unnamedUploadMs = 3600LL * 1000;
    // Rounds' weights kept on disk: the newest this many (at least 2: a round's start and the one
    // its change was made from), beside the initial and the final weights and the rounds a job
    // asks for (training.keepWeightsEvery); older ones are collected (docs/BROKER.md, "Disk").
    std::int64_t keepRounds = 3;
    // What LIST and NODES show unless asked for all: the latest ended jobs, nodes seen this recently.
    static constexpr qsizetype listedEndedJobs = 50;
    static constexpr std::int64_t listedForMs = 7LL * 24 * 3600 * 1000;
};

} // namespace tessera::core::broker
