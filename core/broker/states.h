#pragma once

// The states the broker keeps in its database, one enum each with one name table (below).
// The names are what the database stores and what clients read; the schema's CHECK constraints
// (resources/migrations/broker/0007_states.sql) admit exactly these names, and tst_brokerstore
// checks that the two agree.

#include "../enumnames.h"

namespace tessera::core::broker {

// A job: running until its last round is aggregated, or it is cancelled, or it fails.
enum class JobState { Running, Finished, Cancelled, Failed };

// A shard handed to a node: active until it is answered, fails, is given back or runs out of time
// (or its round ends without it).
enum class AssignmentState { Active, Answered, Failed, Returned, Expired };

// What an assignment asks: a shard of a round, the re-execution of a sampled result, or a canary
// (a shard whose answer is known, handed out as if new).
enum class AssignmentKind { Train, Verify, Canary };

// A shard's accepted result: Accepted (not sampled, paid), Sampled (waits for its check, unpaid)
// or Verified (checked and paid).
enum class ResultState { Accepted, Sampled, Verified };

// A check re-executes a result: a sampled one, or a known answer (a canary).
enum class CheckKind { Sample, Canary };

// Waiting for a verifier, Running on one, Disputed (the referee waits for a checkpoint state),
// then decided: Verified, Rejected (the checked result lost), Closed (the verifier lost; the
// result goes to another check) or Cancelled (its job ended, or a canary's verifier went).
enum class CheckState { Waiting, Running, Disputed, Verified, Rejected, Closed, Cancelled };

// Who lost a check.
// Job: the referee agreed with neither side, or could not re-execute the job's code at all: the
// job's own code is blamed (it does not compute the same result twice), and nobody is slashed.
enum class Loser { None, Accused, Verifier, Both, Job };

// nameOf, fromName and namesOf (core/enumnames.h) for the enums above, as in broker code.
using core::fromName;
using core::nameOf;
using core::namesOf;

} // namespace tessera::core::broker

namespace tessera::core {

template<> struct EnumNames<broker::JobState> {
    static constexpr std::array names { "running", "finished", "cancelled", "failed" };
};
template<> struct EnumNames<broker::AssignmentState> {
    static constexpr std::array names { "active", "answered", "failed", "returned", "expired" };
};
template<> struct EnumNames<broker::AssignmentKind> {
    static constexpr std::array names { "train", "verify", "canary" };
};
template<> struct EnumNames<broker::ResultState> {
    static constexpr std::array names { "accepted", "sampled", "verified" };
};
template<> struct EnumNames<broker::CheckKind> {
    static constexpr std::array names { "sample", "canary" };
};
template<> struct EnumNames<broker::CheckState> {
    static constexpr std::array names { "waiting", "running", "disputed", "verified", "rejected", "closed", "cancelled" };
};
template<> struct EnumNames<broker::Loser> {
    static constexpr std::array names { "none", "accused", "verifier", "both", "job" };
};

} // namespace tessera::core
