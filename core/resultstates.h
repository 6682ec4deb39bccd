#pragma once

// What becomes of a result as its node sees it: the states its node.sqlite keeps, and the two
// answers a broker gives about a result (docs/PROTOCOL.md: RESULT's `verdict`, VERDICT's `state`).
// The names are what the database stores and the wire carries; the results table's CHECK
// constraint (resources/migrations/node/0005_states.sql) admits exactly NodeResultState's names,
// and tst_resultlog checks that the two agree.

#include "enumnames.h"

namespace tessera::core {

// computed (or failed, returned: what the compute thread made of the shard) -> committed ->
// accepted (paid nothing) or paid, sampled -> verified -> paid, or disputed -> verified, slashed or
// rejected; stale or refused when the broker would not count it.
enum class NodeResultState {
    Computed,
    Failed,
    Returned,
    Committed,
    Accepted,
    Paid,
    Sampled,
    Verified,
    Disputed,
    Slashed,
    Rejected,
    Stale,
    Refused,
};

// The broker's answer to RESULT: counted and paid now, counted and paid once a re-execution
// agrees, or a failed or returned result recorded.
enum class ResultVerdict { Accepted, Sampled, Failed };

// What a broker tells a node of a checked result (VERDICT).
enum class CheckVerdict { Disputed, Verified, Paid, Slashed, Rejected };

// Whether a result in this state can still be disputed (its node keeps what it needs to answer).
constexpr bool unsettled(NodeResultState state)
{
    return state == NodeResultState::Computed || state == NodeResultState::Committed || state == NodeResultState::Sampled
        || state == NodeResultState::Disputed;
}

// The node's state after a verdict: the one of the same name.
constexpr NodeResultState stateAfter(CheckVerdict verdict)
{
    switch (verdict) {
    case CheckVerdict::Disputed:
        return NodeResultState::Disputed;
    case CheckVerdict::Verified:
        return NodeResultState::Verified;
    case CheckVerdict::Paid:
        return NodeResultState::Paid;
    case CheckVerdict::Slashed:
        return NodeResultState::Slashed;
    case CheckVerdict::Rejected:
        break;
    }
    return NodeResultState::Rejected;
}

template<> struct EnumNames<NodeResultState> {
    static constexpr std::array names { "computed", "failed", "returned", "committed", "accepted", "paid", "sampled", "verified",
        "disputed", "slashed", "rejected", "stale", "refused" };
};
template<> struct EnumNames<ResultVerdict> {
    static constexpr std::array names { "accepted", "sampled", "failed" };
};
template<> struct EnumNames<CheckVerdict> {
    static constexpr std::array names { "disputed", "verified", "paid", "slashed", "rejected" };
};

} // namespace tessera::core
