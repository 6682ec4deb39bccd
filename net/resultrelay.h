#pragma once

#include "shardexecutor.h"

#include <core/hash.h>

#include <QList>
#include <QString>

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace tessera::net {

// Results that one of a node's sessions could not report, handed to another session of the same
// network (docs/PROTOCOL.md, "Several brokers of one network"): its broker went silent for longer
// than a job's lease (the job is another broker's by then), or refused the result because another
// broker of the network holds the job now (`ERROR standby`). Exactly one session holds a result at
// a time: the relay's own, or the one that took it. Thread-safe: each session runs on a thread of
// its own. Kept in memory (a node restarted in between trains the shard again).
class ResultRelay {
public:
    // staging: a folder on the sessions' caches' filesystem, where a handed result's kept states
    // and inputs wait (copies) until the session that takes it adopts them into its cache.
    explicit ResultRelay(QString staging);
    ~ResultRelay();
    ResultRelay(const ResultRelay&) = delete;
    ResultRelay& operator=(const ResultRelay&) = delete;

    struct Handed {
        QString network; // WELCOME's network of the session that handed it
        QString from; // that session's broker, for the log
        ShardExecutor::Finished finished; // weights included (the taker's cache lacks them)
        QList<std::pair<core::Digest, QString>> blobs; // kept states and inputs: digest, staged file
        int attempts = 0; // refusals (standby) so far
        std::int64_t notBefore = 0; // not taken before (ms, the sessions' clock)
        QString refusedBy; // the broker that refused it last: tried again there only after the others
    };
    // Stages one blob file for a result about to be handed on: a hard link where the filesystem
    // allows (no copy of large inputs), a copy otherwise. The staged path, or none when neither
    // worked (the result is then not handed on: its session keeps it, with what it pinned).
    std::optional<QString> stage(const QString& file);
    // Onto the relay. One refused MaxAttempts times is kept for the session it came from (`from`),
    // which delivers it once its broker is back.
    void hand(Handed handed);
    // The oldest result of the network that the session with `broker` may take at `now`, if any:
    // one its broker refused last waits another RetryMs for the other sessions to take it.
    std::optional<Handed> take(const QString& network, const QString& broker, std::int64_t now);
    QString staging() const { return m_staging; }
    int size() const;

    static constexpr int MaxAttempts = 30; // then only its own session takes it
    static constexpr std::int64_t RetryMs = 2'000; // after a refusal, before another session tries

private:
    QString m_staging;
    mutable std::mutex m_mutex;
    std::deque<Handed> m_items;
    std::uint64_t m_staged = 0; // staged files' serial numbers
};

} // namespace tessera::net
