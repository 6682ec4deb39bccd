#include "stakes.h"

#include "../jsonreader.h"

#include <QDateTime>
#include <QLoggingCategory>
#include <QTimeZone>

Q_LOGGING_CATEGORY(lcStakes, "tessera.verification")

namespace tessera::core::broker {

namespace accounts = ledger::accounts;

Stakes::Stakes(
    BrokerStore& store, ledger::Ledger& ledger, const SigningKeys& signing, const Clock& clock, const BrokerOptions& options)
    : m_store(store)
    , m_ledger(ledger)
    , m_signing(signing)
    , m_clock(clock)
    , m_options(options)
{ }

// --- escrow --------------------------------------------------------------------------------------

Status Stakes::escrowBudget(const QString& jobId, const QString& owner, Credits budget)
{
    const auto now = m_clock.nowMs();
    const QString ownerAccount = accounts::balance(owner);
    if (m_options.faucet) {
        auto held = m_ledger.balance(ownerAccount);
        if (!held)
            return held.error();
        if (*held < budget) {
            auto minted = m_ledger.mint(ownerAccount, *budget.checkedSubtract(*held), QStringLiteral("faucet:job:") + jobId, now);
            if (!minted)
                return minted.error();
        }
    }
    auto escrowed = m_ledger.transfer(ownerAccount, accounts::escrow(jobId), budget, QStringLiteral("escrow:") + jobId,
        QStringLiteral("budget of job %1").arg(jobId), now);
    if (!escrowed)
        return Error { QStringLiteral("budget"),
            QStringLiteral("the budget cannot be escrowed: %1").arg(escrowed.error().message) };
    return {};
}

Result<Credits> Stakes::payFromEscrow(
    const QString& jobId, const QString& node, Credits price, const QString& cause, const QString& memo)
{
    auto left = m_ledger.balance(accounts::escrow(jobId));
    if (!left)
        return left.error();
    const auto amount = std::min(price, *left);
    if (amount.micro() <= 0)
        return Credits {};
    auto paid = m_ledger.transfer(accounts::escrow(jobId), accounts::balance(node), amount, cause, memo, m_clock.nowMs());
    if (!paid)
        return paid.error();
    return amount;
}

Result<Credits> Stakes::escrow(const QString& jobId)
{
    return m_ledger.balance(accounts::escrow(jobId));
}

Status Stakes::refund(const QString& jobId, const QString& owner)
{
    auto left = m_ledger.balance(accounts::escrow(jobId));
    if (!left)
        return left.error();
    if (left->micro() <= 0)
        return {};
    auto moved = m_ledger.transfer(accounts::escrow(jobId), accounts::balance(owner), *left, QStringLiteral("refund:") + jobId,
        QStringLiteral("unspent budget of job %1").arg(jobId), m_clock.nowMs());
    if (!moved)
        return moved.error();
    return {};
}

// --- stake ---------------------------------------------------------------------------------------

Status Stakes::faucetStake(const QString& nodeId)
{
    if (!m_options.faucet || m_options.minStake.micro() <= 0)
        return {};
    // Read and minted under the writer lock: brokers of one network that a node registers with at
    // once fund it once.
    auto transaction = m_store.begin();
    if (!transaction)
        return transaction.error();
    auto staked = m_ledger.balance(accounts::stake(nodeId));
    if (!staked)
        return staked.error();
    if (*staked >= m_options.minStake)
        return {};
    const auto now = m_clock.nowMs();
    auto minted = m_ledger.mint(accounts::stake(nodeId), *m_options.minStake.checkedSubtract(*staked),
        QStringLiteral("faucet:stake:%1:%2").arg(nodeId, QString::number(now)), now);
    if (!minted)
        return minted.error();
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    return {};
}

Status Stakes::requireStake(const QString& nodeId)
{
    if (m_options.minStake.micro() <= 0 || m_staked.contains(nodeId))
        return {};
    auto staked = m_ledger.balance(accounts::stake(nodeId));
    if (!staked)
        return staked.error();
    if (*staked < m_options.minStake)
        return Error { QStringLiteral("stake"),
            QStringLiteral("the node has %1 credits bonded; taking work needs %2")
                .arg(staked->toString(), m_options.minStake.toString()) };
    m_staked.insert(nodeId);
    return {};
}

bool Stakes::hasStake(const QString& nodeId)
{
    return requireStake(nodeId).ok();
}

Result<QJsonObject> Stakes::stake(const QJsonObject& signedRequest, const QString& caller)
{
    if (auto status = verifyDocument(signedRequest); !status)
        return Error { QStringLiteral("request.") + status.error().field, status.error().message };
    JsonReader reader(signedRequest, QStringLiteral("request"));
    const QString kind = reader.string(u"kind");
    const QString nodeId = reader.string(u"node");
    const QString action = reader.string(u"action");
    const QString amountText = reader.string(u"amount");
    const QString nonce = reader.string(u"nonce");
    const QString broker = reader.string(u"broker");
    const std::int64_t expires = reader.integer(u"expires", 0, std::int64_t(1) << 52);
    if (!reader.ok())
        return reader.status().error();
    if (kind != u"tessera-stake")
        return Error { QStringLiteral("request.kind"), QStringLiteral("must be tessera-stake") };
    // Bound to this broker and to a time: another broker's operator cannot replay it, nor anyone later.
    if (broker != QString::fromLatin1(m_signing.publicKey.toBase64()))
        return Error { QStringLiteral("request.broker"),
            QStringLiteral("the request names another broker; this broker's signing key is %1 (LEDGER tells it)")
                .arg(QString::fromLatin1(m_signing.publicKey.toBase64())) };
    const auto now = m_clock.nowMs();
    if (expires <= now || expires > now + MaxRequestLifeMs)
        return Error { QStringLiteral("request.expires"),
            QStringLiteral("the request expired or expires more than a day from now (the broker's time is %1 ms)").arg(now) };
    if (action != u"bond" && action != u"unbond")
        return Error { QStringLiteral("request.action"), QStringLiteral("must be bond or unbond") };
    auto amount = Credits::parse(amountText);
    if (!amount || amount->micro() <= 0)
        return Error { QStringLiteral("request.amount"), QStringLiteral("must be a positive amount of credits") };
    auto node = m_store.node(nodeId);
    if (!node)
        return node.error();
    if (!*node) {
        // Before its first REGISTER: its own money into its own stake, asked by itself (the
        // document's signature was verified above against the key it names).
        if (action == u"bond" && !caller.isEmpty() && caller == nodeId)
            return bond(nodeId, action, *amount, QStringLiteral("%1:%2:%3").arg(action, nodeId, nonce));
        return Error { QStringLiteral("request.node"),
            QStringLiteral("no node %1 has registered here (a node may bond before it registers only by asking "
                           "itself; unbonding needs its registered key)")
                .arg(nodeId) };
    }
    const auto signingKey = (*node)->info.value(QStringLiteral("signingKey")).toString();
    if (signingKey.isEmpty() || signedRequest.value(QStringLiteral("signer")).toString() != signingKey)
        return Error { QStringLiteral("request.signer"), QStringLiteral("the request is not signed with the node's key") };
    return bond(nodeId, action, *amount, QStringLiteral("%1:%2:%3").arg(action, nodeId, nonce));
}

Result<QJsonObject> Stakes::bond(const QString& nodeId, const QString& action, Credits amount, const QString& cause)
{
    m_staked.remove(nodeId);
    const auto now = m_clock.nowMs();
    auto transaction = m_store.begin();
    if (!transaction)
        return transaction.error();
    auto already = m_ledger.hasCause(cause); // a request is carried out once, however often it is sent
    if (!already)
        return already.error();
    if (!*already && action == u"bond") {
        auto moved = m_ledger.transfer(
            accounts::balance(nodeId), accounts::stake(nodeId), amount, cause, QStringLiteral("stake bonded"), now);
        if (!moved)
            return Error { QStringLiteral("request.amount"), moved.error().message };
    } else if (!*already) {
        const auto releaseAt = now + m_options.unbondingDelayMs;
        auto moved = m_ledger.transfer(accounts::stake(nodeId), accounts::unbonding(nodeId), amount, cause,
            QStringLiteral("stake unbonding until %1").arg(releaseAt), now);
        if (!moved)
            return Error { QStringLiteral("request.amount"), moved.error().message };
        if (auto status = m_store.insertUnbonding(nodeId, amount, releaseAt); !status)
            return status.error();
    }
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    auto held = account(nodeId);
    if (!held)
        return held.error();
    if (auto unbonding = m_ledger.balance(accounts::unbonding(nodeId)))
        held->insert(QStringLiteral("unbonding"), unbonding->toString());
    return held;
}

Status Stakes::slash(const QString& nodeId, const QString& honest, const QString& cause, const QString& why)
{
    // Half to the honest side of a dispute, the rest (all of it when nobody won) burned: a job's
    // owner never receives stake slashed over its job, so no owner can profit from a slash its
    // own code might cause (docs/VERIFICATION.md, "Money").
    m_staked.remove(nodeId);
    const auto now = m_clock.nowMs();
    Credits total;
    for (const auto& account : { accounts::stake(nodeId), accounts::unbonding(nodeId) }) {
        auto held = m_ledger.balance(account);
        if (!held)
            return held.error();
        const auto amount = held->checkedScale(std::int64_t(m_options.slashFraction * 1'000'000), 1'000'000).value_or(Credits {});
        if (amount.micro() <= 0)
            continue;
        const auto toHonest = honest.isEmpty() ? Credits {} : Credits::fromMicro(amount.micro() / 2);
        const auto burned = Credits::fromMicro(amount.micro() - toHonest.micro());
        const QString suffix = account.startsWith(u"stake:") ? QString() : QStringLiteral(":unbonding");
        const QString memo = QStringLiteral("slashed %1: %2").arg(nodeId.left(12), why);
        for (const auto& [to, share, tag] : { std::tuple { accounts::balance(honest), toHonest, QStringLiteral(":honest") },
                 std::tuple { accounts::Burned, burned, QStringLiteral(":burned") } }) {
            if (share.micro() <= 0)
                continue;
            if (auto paid = m_ledger.transfer(account, to, share, cause + suffix + tag, memo, now); !paid)
                return paid.error();
        }
        total = amount;
        break; // one slash takes from one account
    }
    qCWarning(lcStakes).noquote() << "slashed node" << nodeId.left(12) << total.toString() << "credits:" << why;
    return m_store.countSlash(nodeId, total);
}

void Stakes::releaseDueUnbondings()
{
    const auto now = m_clock.nowMs();
    auto due = m_store.dueUnbondings(now);
    if (!due)
        return;
    for (const auto& unbonding : *due) {
        auto transaction = m_store.begin();
        if (!transaction)
            return;
        auto held = m_ledger.balance(accounts::unbonding(unbonding.node));
        const auto release = std::min(unbonding.amount, held ? *held : Credits {});
        if (release.micro() > 0) {
            auto moved = m_ledger.transfer(accounts::unbonding(unbonding.node), accounts::balance(unbonding.node), release,
                QStringLiteral("unbonded:%1").arg(unbonding.id), QStringLiteral("stake unbonded"), now);
            if (!moved)
                continue; // rolls back
        }
        if (!m_store.markReleased(unbonding.id))
            continue;
        if (auto committed = transaction->commit(); !committed)
            qCWarning(lcStakes).noquote() << "unbonding" << unbonding.id << ":" << committed.error().message;
    }
}

// --- accounts ------------------------------------------------------------------------------------

Result<QJsonObject> Stakes::account(const QString& id)
{
    auto held = m_ledger.balance(accounts::balance(id));
    if (!held)
        return held.error();
    auto staked = m_ledger.balance(accounts::stake(id));
    if (!staked)
        return staked.error();
    return AccountRecord { id, *held, *staked, std::nullopt }.toJson();
}

Result<QJsonObject> Stakes::receipt(const QString& cause)
{
    auto transfer = m_ledger.transferByCause(cause);
    if (!transfer)
        return transfer.error();
    if (!transfer->has_value())
        return Error { QStringLiteral("cause"), QStringLiteral("no transfer has the cause '%1'").arg(cause) };
    const auto& t = **transfer;
    return signDocument(
        QJsonObject {
            { QStringLiteral("kind"), QStringLiteral("tessera-receipt") },
            { QStringLiteral("version"), 1 },
            { QStringLiteral("transfer"), static_cast<qint64>(t.id) },
            { QStringLiteral("debit"), t.debit },
            { QStringLiteral("credit"), t.credit },
            { QStringLiteral("amount"), t.amount.toString() },
            { QStringLiteral("cause"), t.cause },
            { QStringLiteral("memo"), t.memo },
            { QStringLiteral("at"), QDateTime::fromMSecsSinceEpoch(t.at, QTimeZone::utc()).toString(Qt::ISODateWithMs) },
        },
        m_signing);
}

Result<bool> Stakes::isPartyTo(const QString& principal, const QString& cause)
{
    auto transfer = m_ledger.transferByCause(cause);
    if (!transfer)
        return transfer.error();
    if (!transfer->has_value())
        return false;
    for (const auto& account : { (*transfer)->debit, (*transfer)->credit }) {
        for (const auto& own : { accounts::balance(principal), accounts::stake(principal), accounts::unbonding(principal) }) {
            if (account == own)
                return true;
        }
        if (account.startsWith(QStringLiteral("escrow:"))) {
            auto owns = m_store.owns(principal, account.mid(7));
            if (!owns)
                return owns.error();
            if (*owns)
                return true;
        }
    }
    return false;
}

} // namespace tessera::core::broker
