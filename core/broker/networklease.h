#pragma once

#include "../clock.h"
#include "../error.h"

#include <QString>

#include <cstdint>

namespace tessera::core::broker {

class BrokerStore;

// The network lease (docs/STORE.md, "Several brokers"). Of the brokers that share one PostgreSQL
// database, the one that holds it does the network's chores (unbondings that are due); jobs have
// leases of their own (JobLeases). A broker that died or lost the database lets it lapse after
// leaseMs, and another takes it. A broker on SQLite holds it always, with no writes (one broker to
// a file).
class NetworkLease {
public:
    struct Identity {
        QString holder; // this broker's id (DIR/broker.id)
        QString endpoint; // where its clients reach it (Broker/Bind)
    };
    NetworkLease(BrokerStore& store, const Clock& clock, Identity identity, std::int64_t leaseMs, bool shared);

    // This broker's id from `path` (DIR/broker.id), made on first use: a broker restarted on its
    // data folder takes its own lease back at once; one whose folder is gone waits for it to lapse.
    static Result<QString> loadOrCreateId(const QString& path);
    // 32 random hex digits: a broker's id, a network's (BrokerStore::networkId).
    static QString newId();

    // Takes or renews the lease (a broker's tick, about once a second, and whoever finds it lapsed).
    // A database that does not answer keeps what was held until it would have lapsed.
    enum class Renewal {
        Kept, // held before and since, by this broker alone
        Taken, // held now, and another broker may have held it since this one last did
        Elsewhere, // another broker holds it
    };
    Result<Renewal> renew();
    // Whether a renewal is due: held, and a third of the lease has passed since the last.
    bool due() const;
    // Whether this broker holds it: renewed within leaseMs (always, on SQLite).
    bool held() const;
    const QString& holder() const { return m_identity.holder; }

    static constexpr std::int64_t DefaultMs = 6'000;
    static constexpr const char* Scope = "network";

private:
    BrokerStore& m_store;
    const Clock& m_clock;
    Identity m_identity;
    std::int64_t m_leaseMs;
    bool m_shared;
    std::int64_t m_heldUntil = 0;
    std::int64_t m_generation = 0; // of the lease this broker held last
};

} // namespace tessera::core::broker
