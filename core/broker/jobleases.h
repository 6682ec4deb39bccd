#pragma once

#include "../clock.h"
#include "../error.h"
#include "networklease.h"

#include <QSet>
#include <QString>
#include <QStringList>

#include <cstdint>

namespace tessera::core::broker {

class BrokerStore;

// The jobs' leases (docs/STORE.md, "Several brokers"). Of the brokers that share one PostgreSQL
// database, each holds the leases of some running jobs: those submitted through it and those it
// took over when their broker's lease lapsed. Only a job's holder hands out its shards and checks,
// takes their results, aggregates its rounds and pays for them; every broker answers reads, takes
// submits, uploads and stake, and serves every node. On SQLite every job is the one broker's,
// with no writes (one broker to a file).
class JobLeases {
public:
    JobLeases(BrokerStore& store, const Clock& clock, NetworkLease::Identity identity, std::int64_t leaseMs, bool shared);

    static QString scopeOf(const QString& jobId);
    bool shared() const { return m_shared; }
    // Whether this broker holds the job (always on SQLite).
    bool holds(const QString& jobId) const { return !m_shared || m_jobs.contains(jobId); }
    // Takes a job's lease where it is free (a new job: inside the submit's transaction) or lapsed
    // (its broker is gone): whether this broker holds it now.
    Result<bool> take(const QString& jobId);
    // The job ended: its lease goes, inside the caller's transaction (this broker holds it until
    // renew() sees the row gone: a transaction that rolled back leaves the job as it was).
    Status end(const QString& jobId);
    // A job that is not running: its lease goes now (no transaction).
    Status drop(const QString& jobId);
    // Gives a job back (a takeover that failed): another broker may take it at once.
    void release(const QString& jobId);

    struct Renewal {
        QStringList lost; // held here, and another broker took it since (this one lapsed)
        QStringList found; // this broker's in the database, not known here: it restarted on its data folder
    };
    // Renews every job lease of this broker in one statement (each tick; during long work once a
    // third of the lease has passed: due()).
    Result<Renewal> renew();
    // Renews them without learning what changed hands (long work: the next renew() sorts it out,
    // and meanwhile a job taken from this broker fences its transactions).
    Status extend();
    bool due() const { return m_shared && m_clock.nowMs() - m_renewedAt >= m_leaseMs / 3; }
    // Running jobs that no broker holds (a lapsed lease, or none: a network moved from SQLite),
    // oldest first.
    Result<QStringList> unheld(int limit);
    // Where the broker that holds a job is reached ("" when none or unknown), for refusals.
    QString holderEndpoint(const QString& jobId);

private:
    BrokerStore& m_store;
    const Clock& m_clock;
    NetworkLease::Identity m_identity;
    std::int64_t m_leaseMs;
    bool m_shared;
    std::int64_t m_renewedAt = 0;
    QSet<QString> m_jobs; // the jobs this broker holds
    QSet<QString> m_ending; // of those, the ones whose lease end() deleted, until renew() sees it
};

} // namespace tessera::core::broker
