// make bench: how fast the broker hands out shards (goal: 5,000 assignments a second), against the
// plain SQLite inserts the same database can do, measured in the same run; and, where bench/run.sh
// started a PostgreSQL server (TESSERA_BENCH_POSTGRES: its URI), the same on PostgreSQL against
// SQLite (goal: at least 0.5 times SQLite's rate; docs/STORE.md).

#include "record.h"

#include <compute/engine/brokermath.h>
#include <core/broker/broker.h>
#include <core/capabilities.h>
#include <core/ledger/ledger.h>
#include <core/ledger/ledgerlog.h>
#include <core/smalljobs.h>
#include <core/storage/database.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QTemporaryDir>

#include <cstdio>

using namespace tessera;

namespace {

// Assignments a second of a broker on `database` (empty: SQLite in `folder`): 4,096 shards of one
// job handed to 1,000 nodes.
double assignmentsPerSecond(const QString& folder, const QString& database, int& assigned)
{
    auto blobs = std::move(core::broker::Broker::openBlobs(folder)).value();
    compute::BrokerMath math({}, *blobs);
    core::SystemClock clock;
    // A faucet funds the owner's escrow and bonds each node's stake, as on a local broker.
    core::broker::Broker::Options options;
    options.faucet = true;
    options.database = database;
    auto broker = core::broker::Broker::open(folder, *blobs, math, clock, options);
    if (!broker)
        qFatal("%s", qPrintable(broker.error().toString()));

    auto spec = core::smallMlpJob(QStringLiteral("many shards"));
    spec.training.shardsPerRound = 4096;
    spec.training.localSteps = 10;
    spec.training.batchSize = 8;
    spec.training.checkpointInterval = 5;
    spec.budget = core::Credits::fromMicro(1'000'000'000); // 1,000 credits: more than its 4,096 shards cost
    if (auto submitted = (*broker)->submit(spec, QStringLiteral("bench")); !submitted)
        qFatal("submit failed: %s", qPrintable(submitted.error().toString()));
    constexpr int Nodes = 1000;
    for (int i = 0; i < Nodes; ++i) {
        core::NodeInfo node;
        node.nodeId = QStringLiteral("node-%1").arg(i);
        node.softwareVersion = QStringLiteral("bench");
        node.runtimeProfile = QStringLiteral("p");
        node.maxThreads = 2;
        node.capabilities = core::ownCapabilities(); // what a node of this build declares at REGISTER
        if (auto registered = (*broker)->registerNode(node); !registered)
            qFatal("register failed: %s", qPrintable(registered.error().toString()));
    }

    QElapsedTimer timer;
    timer.start();
    assigned = 0;
    for (int i = 0; i < spec.training.shardsPerRound; ++i) {
        auto assignment = (*broker)->assign(QStringLiteral("node-%1").arg(i % Nodes));
        if (!assignment.ok())
            qFatal("assign failed: %s", qPrintable(assignment.error().toString()));
        if (assignment->has_value())
            ++assigned;
    }
    if (assigned == 0)
        qFatal("no shard was handed out");
    return assigned / (double(timer.nsecsElapsed()) / 1e9);
}

// Issue 39's goal: appending a transfer's entry to the ledger's log costs at most 10% of the
// transfer. Times `count` transfers (each its own transaction, the log's append included), then
// `count` appends of entries of the same shape inside one transaction: the append's share of a
// transfer's time, on a database opened as the broker opens its own.
void ledgerLogCost(const QString& path, int count)
{
    auto database = core::storage::openMigrated(path, QStringLiteral(":/migrations/broker"),
        core::storage::DatabaseOptions { 5000, core::storage::DatabaseOptions::Synchronous::Normal });
    if (!database)
        qFatal("%s", qPrintable(database.error().message));
    core::ledger::Ledger ledger(**database);
    const QString owner = core::ledger::accounts::balance(QStringLiteral("owner"));
    if (!ledger.mint(owner, core::Credits::fromMicro(std::int64_t(count) * 1000), QStringLiteral("faucet"), 1))
        qFatal("mint failed");
    QElapsedTimer timer;
    timer.start();
    for (int i = 0; i < count; ++i) {
        if (!ledger.transfer(owner, core::ledger::accounts::balance(QStringLiteral("node-%1").arg(i % 100)),
                core::Credits::fromMicro(1000), QStringLiteral("pay:job/%1/0").arg(i), QStringLiteral("shard"), 2 + i))
            qFatal("transfer failed");
    }
    const double transferSeconds = double(timer.nsecsElapsed()) / 1e9;
    core::ledger::LedgerLog log(**database);
    auto transaction = (*database)->begin();
    if (!transaction)
        qFatal("no transaction");
    timer.restart();
    for (int i = 0; i < count; ++i) {
        const QJsonObject entry { { QStringLiteral("kind"), QStringLiteral("transfer") }, { QStringLiteral("debit"), owner },
            { QStringLiteral("credit"), QStringLiteral("balance:node-%1").arg(i % 100) },
            { QStringLiteral("amount"), QStringLiteral("1000") }, { QStringLiteral("cause"), QStringLiteral("more:%1").arg(i) },
            { QStringLiteral("memo"), QStringLiteral("shard") }, { QStringLiteral("at"), qint64(2 + i) } };
        if (!log.append(entry))
            qFatal("append failed");
    }
    const double appendSeconds = double(timer.nsecsElapsed()) / 1e9;
    (void)transaction->commit();
    const double share = appendSeconds / transferSeconds;
    std::printf("Ledger log: %d transfers %9.0f /s (each with its log entry); the entries' appends alone %9.0f /s: "
                "%.1f%% of a transfer (goal at most 10%%, %s)\n",
        count, count / transferSeconds, count / appendSeconds, share * 100.0, share <= 0.10 ? "met" : "NOT met");
    bench::record("ledger.transfersPerSecond", count / transferSeconds);
    bench::record("ledger.appendsPerSecond", count / appendSeconds);
    bench::record("ledger.logShare", share);
}

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QTemporaryDir dir;
    ledgerLogCost(dir.filePath(QStringLiteral("ledger.sqlite")), 5000);
    int assigned = 0;
    const double assignRate = assignmentsPerSecond(dir.filePath(QStringLiteral("broker")), {}, assigned);

    // Baseline: the same number of single-row inserts into a table like the assignments table, in
    // a database opened the same way.
    auto raw = core::storage::Database::open(dir.filePath(QStringLiteral("raw.sqlite")),
        core::storage::DatabaseOptions { 5000, core::storage::DatabaseOptions::Synchronous::Normal });
    (void)(*raw)->execute(
        QStringLiteral("CREATE TABLE a (id TEXT PRIMARY KEY, job TEXT, round INTEGER, shard INTEGER, node TEXT, "
                       "issued_at INTEGER, deadline INTEGER, state TEXT)"));
    auto insert = *(*raw)->prepare(QStringLiteral("INSERT INTO a VALUES (?, 'job', 0, ?, 'node', 0, 0, 'active')"));
    QElapsedTimer timer;
    timer.start();
    for (int i = 0; i < assigned; ++i) {
        insert.bind(1, QStringLiteral("%1").arg(i, 16, 16, QLatin1Char('0'))).bind(2, std::int64_t(i));
        (void)insert.run();
    }
    const double insertRate = assigned / (double(timer.nsecsElapsed()) / 1e9);

    std::printf("Broker scheduling: %d shards handed to 1000 nodes\n", assigned);
    std::printf("  assignments %9.0f /s   plain SQLite inserts %9.0f /s   ratio %.3f   (goal: 5,000 assignments/s, %s)\n",
        assignRate, insertRate, assignRate / insertRate, assignRate >= 5000 ? "met" : "NOT met");
    bench::record("broker.assignmentsPerSecond", assignRate);
    bench::record("broker.insertsPerSecond", insertRate);
    bench::record("broker.ratio", assignRate / insertRate);

    const QString postgres = qEnvironmentVariable("TESSERA_BENCH_POSTGRES");
    if (postgres.isEmpty()) {
        std::printf("  on PostgreSQL: not measured (bench/run.sh starts a server where postgresql-15 is installed)\n");
        return 0;
    }
    int onPostgres = 0;
    const double postgresRate = assignmentsPerSecond(dir.filePath(QStringLiteral("postgres")), postgres, onPostgres);
    std::printf("  on PostgreSQL: assignments %9.0f /s   ratio to SQLite %.3f   (goal: at least 0.5, %s)\n", postgresRate,
        postgresRate / assignRate, postgresRate >= 0.5 * assignRate ? "met" : "NOT met");
    bench::record("broker.postgresAssignmentsPerSecond", postgresRate);
    bench::record("broker.postgresRatio", postgresRate / assignRate);
    return 0;
}
