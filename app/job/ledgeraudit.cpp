#include "ledgeraudit.h"

#include <app/common/cli.h>
#include <core/credits.h>
#include <core/ledger/ledger.h>
#include <core/ledger/loghead.h>
#include <core/ledger/logreplay.h>
#include <net/messages.h>

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>

namespace tessera::app::job {

namespace {

using app::cli::fail;
using app::cli::out;
using app::cli::printJson;
namespace accounts = core::ledger::accounts;

// A figure the broker reports next to what the log's replay gives.
struct Figure {
    QString what;
    core::Credits reported;
    core::Credits replayed;
};

// A head of the broker's LOG-HEAD reply, its signature checked, of at least `atLeast` entries.
std::optional<core::ledger::LogHead> headOf(const QJsonObject& reply, std::int64_t atLeast, int& status)
{
    auto head = core::ledger::LogHead::read(reply.value(net::fields::Head).toObject());
    if (!head || head->size < atLeast) {
        status = fail(QStringLiteral("LOG BROKEN: the broker's head does not hold: %1")
                          .arg(head ? QStringLiteral("it is older than the log") : head.error().toString()));
        return std::nullopt;
    }
    return *head;
}

// Whether `head` extends `kept` by the proof (hex hashes); a failure is printed as the status.
bool extends(const core::ledger::LogHead& kept, const core::ledger::LogHead& head, const QJsonValue& proof, int& status)
{
    auto hashes = core::ledger::proofFromJson(proof);
    auto extended = hashes ? core::ledger::checkExtends(kept, head, *hashes) : core::Status(hashes.error());
    if (!extended)
        status = fail(QStringLiteral("LOG BROKEN: %1").arg(extended.error().toString()));
    return extended.ok();
}

// The log's size now (LOG-ENTRIES says it with any page).
std::optional<std::int64_t> logSizeNow(const Ask& ask, std::int64_t from, int& status)
{
    net::LogEntriesRequest probe;
    probe.from = from;
    probe.limit = 1;
    auto reply = ask(net::Command::LogEntries, probe.toHeader(), status);
    if (!reply)
        return std::nullopt;
    return reply->value(net::fields::Size).toInteger();
}

// The broker's newest head, checked: its signature, and (holding an older one) that it extends it.
std::optional<core::ledger::LogHead> newestHead(const Ask& ask, const std::optional<core::ledger::LogHead>& kept, int& status)
{
    net::LogHeadRequest request;
    if (kept)
        request.from = kept->size;
    auto reply = ask(net::Command::LogHead, request.toHeader(), status);
    if (!reply)
        return std::nullopt;
    auto head = headOf(*reply, 0, status);
    if (!head || (kept && !extends(*kept, *head, reply->value(net::fields::Consistency), status)))
        return std::nullopt;
    return head;
}

// A head of the whole log as it is now: the broker signs one at once when asked `from` its size
// (its newest may be up to Broker/LogHeadMs old). Holding an earlier one, the new one must extend it.
std::optional<core::ledger::LogHead> currentHead(
    const Ask& ask, const std::optional<core::ledger::LogHead>& previous, int& status)
{
    const auto size = logSizeNow(ask, 0, status);
    if (!size)
        return std::nullopt;
    net::LogHeadRequest request;
    request.from = std::max<std::int64_t>(*size, previous ? previous->size : 0);
    auto reply = ask(net::Command::LogHead, request.toHeader(), status);
    if (!reply)
        return std::nullopt;
    auto head = headOf(*reply, *request.from, status);
    if (!head || !previous)
        return head;
    auto consistency
        = ask(net::Command::LogConsistency, net::LogConsistencyRequest { previous->size, head->size }.toHeader(), status);
    if (!consistency || !extends(*previous, *head, consistency->value(net::fields::Proof), status))
        return std::nullopt;
    return head;
}

// Entries up to the head's size, into the replay; then the replay's root must be the head's.
bool readUpTo(const Ask& ask, const core::ledger::LogHead& head, core::ledger::LogReplay& replay, int& status)
{
    while (replay.size() < head.size) {
        net::LogEntriesRequest request;
        request.from = replay.size();
        request.limit = int(std::min<std::int64_t>(256, head.size - replay.size()));
        auto reply = ask(net::Command::LogEntries, request.toHeader(), status);
        if (!reply)
            return false;
        const QJsonArray entries = reply->value(net::fields::Entries).toArray();
        if (entries.isEmpty() || entries.size() > request.limit) {
            status = fail(QStringLiteral("LOG BROKEN: the broker sent %1 entries from %2 of a head of %3")
                              .arg(entries.size())
                              .arg(request.from)
                              .arg(head.size));
            return false;
        }
        for (const auto& entry : entries)
            replay.add(entry.toString());
    }
    if (replay.root() != head.root) {
        status = fail(QStringLiteral("LOG BROKEN: the log's %1 entries hash to %2, not to the head's root %3")
                          .arg(head.size)
                          .arg(replay.root().toHex(), head.root.toHex()));
        return false;
    }
    return true;
}

core::Credits credits(const QJsonObject& object, const QString& key)
{
    return core::Credits::parse(object.value(key).toString()).value_or(core::Credits::fromMicro(-1));
}

// Pages of a listing (LIST, NODES) with `all`.
std::optional<QJsonArray> listAll(const Ask& ask, net::Command command, const QString& rows, int& status)
{
    QJsonArray all;
    net::PageRequest page;
    page.all = true;
    page.limit = net::PageRequest::MaxLimit;
    for (;;) {
        auto reply = ask(command, page.toHeader(), status);
        if (!reply)
            return std::nullopt;
        for (const auto& row : reply->value(rows).toArray())
            all.append(row);
        const auto next = reply->value(net::fields::Next);
        if (!next.isDouble() || next.toInteger() <= page.offset)
            return all;
        page.offset = next.toInteger();
    }
}

// What the broker reports about accounts it lets the caller see, next to the replay's figures.
std::optional<QList<Figure>> reportedFigures(const Ask& ask, const core::ledger::LogReplay& replay, int& status)
{
    QList<Figure> figures;
    auto ledger = ask(net::Command::Ledger, {}, status);
    if (!ledger)
        return std::nullopt;
    figures.append({ QStringLiteral("minted"), credits(*ledger, net::fields::Minted),
        core::Credits::fromMicro(-replay.balanceOf(accounts::Mint)) });
    auto mine = ask(net::Command::Balance, {}, status);
    if (!mine)
        return std::nullopt;
    const QString me = mine->value(net::fields::Account).toString();
    figures.append({ QStringLiteral("your balance"), credits(*mine, QStringLiteral("balance")),
        core::Credits::fromMicro(replay.balanceOf(accounts::balance(me))) });
    auto nodes = listAll(ask, net::Command::Nodes, net::fields::Nodes, status);
    if (!nodes)
        return std::nullopt;
    for (const auto& value : *nodes) {
        const auto node = value.toObject();
        const QString id = node.value(net::fields::NodeId).toString();
        figures.append({ QStringLiteral("stake of node %1").arg(id), credits(node, QStringLiteral("stake")),
            core::Credits::fromMicro(replay.balanceOf(accounts::stake(id))) });
        if (node.contains(QStringLiteral("balance")))
            figures.append({ QStringLiteral("balance of node %1").arg(id), credits(node, QStringLiteral("balance")),
                core::Credits::fromMicro(replay.balanceOf(accounts::balance(id))) });
    }
    auto jobs = listAll(ask, net::Command::List, net::fields::Jobs, status);
    if (!jobs)
        return std::nullopt;
    for (const auto& value : *jobs) {
        const auto job = value.toObject();
        if (!job.contains(QStringLiteral("escrow")))
            continue;
        const QString id = job.value(net::fields::JobId).toString();
        figures.append({ QStringLiteral("escrow of job %1").arg(id), credits(job, QStringLiteral("escrow")),
            core::Credits::fromMicro(replay.balanceOf(accounts::escrow(id))) });
    }
    return figures;
}

QStringList differences(const QList<Figure>& figures)
{
    QStringList found;
    for (const auto& figure : figures) {
        if (figure.reported != figure.replayed)
            found << QStringLiteral("%1: the broker says %2, the log %3")
                         .arg(figure.what, figure.reported.toString(), figure.replayed.toString());
    }
    return found;
}

} // namespace

int audit(const Ask& ask, bool json)
{
    int status = 0;
    core::ledger::LogReplay replay;
    std::optional<core::ledger::LogHead> head;
    QList<Figure> figures;
    QStringList differ;
    // Entries arrive while it reads: a figure that moved meanwhile is asked for again, up to 3 times.
    for (int attempt = 0; attempt < 3; ++attempt) {
        head = currentHead(ask, head, status);
        if (!head || !readUpTo(ask, *head, replay, status))
            return status;
        auto reported = reportedFigures(ask, replay, status);
        if (!reported)
            return status;
        figures = *reported;
        differ = differences(figures);
        if (differ.isEmpty())
            break;
        const auto later = logSizeNow(ask, head->size, status);
        if (!later)
            return status;
        if (*later <= head->size)
            break; // nothing moved: the differences stand
    }
    const QStringList problems = replay.problems();
    if (json) {
        printJson(QJsonDocument(QJsonObject { { QStringLiteral("entries"), qint64(replay.size()) },
            { QStringLiteral("transfers"), replay.transfers() }, { QStringLiteral("rulings"), replay.verdicts() },
            { QStringLiteral("head"), head->document }, { QStringLiteral("compared"), qint64(figures.size()) },
            { QStringLiteral("problems"), QJsonArray::fromStringList(problems) },
            { QStringLiteral("differences"), QJsonArray::fromStringList(differ) },
            { QStringLiteral("agrees"), problems.isEmpty() && differ.isEmpty() } }));
    } else {
        out() << "audited " << replay.size() << " entries (" << replay.transfers() << " transfers, " << replay.verdicts()
              << " rulings): they hash to the root " << head->root.toHex() << " of the head signed by " << head->signer << "\n";
        for (const auto& problem : problems)
            out() << "BOOKS BROKEN: " << problem << "\n";
        for (const auto& difference : differ)
            out() << "DIFFERS: " << difference << "\n";
        out() << "compared " << figures.size()
              << " figures the broker reports with the log's: " << (differ.isEmpty() ? "all agree" : "some differ") << "\n"
              << Qt::flush;
    }
    return problems.isEmpty() && differ.isEmpty() ? 0 : 1;
}

int checkHead(const Ask& ask, const QString& path, bool json)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1").arg(path));
    auto kept = core::ledger::LogHead::read(QJsonDocument::fromJson(file.readAll()).object());
    if (!kept)
        return fail(QStringLiteral("%1: %2").arg(path, kept.error().toString()));
    int status = 0;
    auto newest = newestHead(ask, *kept, status);
    if (!newest)
        return status;
    if (json)
        return printJson(
            QJsonDocument(QJsonObject { { QStringLiteral("consistent"), true }, { QStringLiteral("head"), newest->document } }));
    out() << "consistent: the broker's head of " << newest->size << " entries extends the head of " << kept->size
          << " entries in " << path << Qt::endl;
    return 0;
}

} // namespace tessera::app::job
