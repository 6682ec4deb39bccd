#pragma once

#include "../clock.h"
#include "../credits.h"
#include "../error.h"
#include "../ledger/ledger.h"
#include "../signing.h"
#include "brokerstore.h"
#include "options.h"

#include <QJsonObject>
#include <QSet>
#include <QString>

namespace tessera::core::broker {

// The broker's money, on its ledger: job budgets in escrow and what they pay, nodes' stake (bond,
// unbond after a delay, slash), accounts and signed receipts. Each method that moves money says
// whether it runs inside the caller's transaction.
class Stakes {
public:
    Stakes(
        BrokerStore& store, ledger::Ledger& ledger, const SigningKeys& signing, const Clock& clock, const BrokerOptions& options);

    // Escrow. The job's budget moves from the owner's balance (minted first by a faucet broker);
    // inside the caller's transaction.
    Status escrowBudget(const QString& jobId, const QString& owner, Credits budget);
    // Pays a node from a job's escrow: price, or what is left if less; what was paid comes back.
    // Inside the caller's transaction.
    Result<Credits> payFromEscrow(
        const QString& jobId, const QString& node, Credits price, const QString& cause, const QString& memo);
    Result<Credits> escrow(const QString& jobId);
    // What is left of a job's budget goes back to its owner. Inside the caller's transaction.
    Status refund(const QString& jobId, const QString& owner);

    // Stake. A faucet broker bonds the minimum for a new node.
    Status faucetStake(const QString& nodeId);
    // An error that says how much the node lacks to take work.
    // A node's stake read as enough is taken as enough until forgetStakes() (each tick) or until
    // this broker moves it (bond, unbond, slash): another broker's slash shows within a tick.
    Status requireStake(const QString& nodeId);
    void forgetStakes() { m_staked.clear(); }
    bool hasStake(const QString& nodeId);
    // A request signed with the node's registered key to bond or unbond (docs/PROTOCOL.md, STAKE),
    // naming this broker's signing key and when it expires (at most MaxRequestLifeMs ahead).
    // A node that has not registered yet may bond (only bond) when it sends the request itself
    // (caller: the sender's account equals the request's node), signed with the key it names: its
    // own balance into its own stake, so that "credit, stake bond, run" works on a fresh node.
    static constexpr std::int64_t MaxRequestLifeMs = 24LL * 3600 * 1000;
    Result<QJsonObject> stake(const QJsonObject& signedRequest, const QString& caller = {});
    // A fraction of what the node has at stake (bonded first, then unbonding): half to the honest
    // party, if any, the rest burned (never to a job's owner). Inside the caller's transaction.
    Status slash(const QString& nodeId, const QString& honest, const QString& cause, const QString& why);
    // Unbonded stake that has waited long enough returns to its node's balance.
    void releaseDueUnbondings();

    // An owner's or node's money: balance and stake.
    Result<QJsonObject> account(const QString& id);
    // The broker's signed receipt for the transfer with this cause.
    Result<QJsonObject> receipt(const QString& cause);
    // Whether the transfer with this cause moved money of this principal's: its balance, stake or
    // unbonding stake, or the escrow of one of its jobs.
    Result<bool> isPartyTo(const QString& principal, const QString& cause);

private:
    Result<QJsonObject> bond(const QString& nodeId, const QString& action, Credits amount, const QString& cause);
    QSet<QString> m_staked; // nodes whose stake was enough when last read (requireStake)

    BrokerStore& m_store;
    ledger::Ledger& m_ledger;
    const SigningKeys& m_signing;
    const Clock& m_clock;
    const BrokerOptions& m_options;
};

} // namespace tessera::core::broker
