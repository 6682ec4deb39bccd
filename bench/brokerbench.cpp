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
#include <core/ledger/merkle.h>
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
        // What Ledger::transfer appends: the transfer's leaf.
        if (!log.appendLeaf(core::ledger::LedgerLog::transferLeaf(owner, QStringLiteral("balance:node-%1").arg(i % 100), 1000,
                QStringLiteral("more:%1").arg(i), QStringLiteral("shard"), 2 + i)))
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

// Issue 39's goal: in a log of ten million entries, a proof is at most 1 KB and verifies in at most
// 1 ms. Builds a log of `size` small entries in the broker's tables (tiles included), then reads
// inclusion proofs of spread-out leaves and consistency proofs from spread-out sizes, as LOG-PROOF
// and LOG-CONSISTENCY do, and verifies each.
void logProofCost(const QString& path, std::int64_t size)
{
    auto database = core::storage::openMigrated(path, QStringLiteral(":/migrations/broker"),
        core::storage::DatabaseOptions { 5000, core::storage::DatabaseOptions::Synchronous::Normal });
    if (!database)
        qFatal("%s", qPrintable(database.error().message));
    core::ledger::LedgerLog log(**database);
    QElapsedTimer timer;
    timer.start();
    for (std::int64_t done = 0; done < size;) {
        auto transaction = (*database)->begin();
        if (!transaction)
            qFatal("no transaction");
        for (const std::int64_t end = std::min(size, done + 1'000'000); done < end; ++done) {
            if (!log.appendLeaf("{\"i\":" + QByteArray::number(qint64(done)) + "}"))
                qFatal("append failed");
        }
        if (!transaction->commit())
            qFatal("commit failed");
    }
    const double buildSeconds = double(timer.nsecsElapsed()) / 1e9;
    const auto root = *core::ledger::merkle::root(log, size);
    int samples = 0;
    qsizetype maxBytes = 0;
    double readSeconds = 0;
    double verifySeconds = 0;
    for (std::int64_t index = 7; index < size; index += size / 50 + 1, ++samples) {
        timer.restart();
        const auto proof = *core::ledger::merkle::inclusionProof(log, index, size);
        readSeconds += double(timer.nsecsElapsed()) / 1e9;
        maxBytes = std::max(maxBytes, proof.size() * core::Digest::Size);
        const auto leaf = core::ledger::merkle::leafHash("{\"i\":" + QByteArray::number(qint64(index)) + "}");
        timer.restart();
        if (!core::ledger::merkle::verifyInclusion(leaf, index, size, proof, root))
            qFatal("an inclusion proof does not hold");
        verifySeconds += double(timer.nsecsElapsed()) / 1e9;
    }
    qsizetype maxConsistencyBytes = 0;
    double consistencySeconds = 0;
    int consistencies = 0;
    for (std::int64_t from = 3; from < size; from += size / 20 + 1, ++consistencies) {
        const auto proof = *core::ledger::merkle::consistencyProof(log, from, size);
        const auto fromRoot = *core::ledger::merkle::root(log, from);
        timer.restart();
        if (!core::ledger::merkle::verifyConsistency(from, size, fromRoot, root, proof))
            qFatal("a consistency proof does not hold");
        consistencySeconds += double(timer.nsecsElapsed()) / 1e9;
        maxConsistencyBytes = std::max(maxConsistencyBytes, proof.size() * core::Digest::Size);
    }
    const double verifyMicros = verifySeconds / samples * 1e6;
    std::printf(
        "Ledger log of %lld entries (built in %.0f s): an inclusion proof is at most %lld bytes (%lld as LOG-PROOF's hex), "
        "read from the database in %.2f ms and verified in %.1f us on average; a consistency proof at most %lld bytes, "
        "verified in %.1f us (goals: at most 1 KB and 1 ms, %s)\n",
        static_cast<long long>(size), buildSeconds, static_cast<long long>(maxBytes), static_cast<long long>(maxBytes / 32 * 67),
        readSeconds / samples * 1e3, verifyMicros, static_cast<long long>(maxConsistencyBytes),
        consistencySeconds / consistencies * 1e6,
        maxBytes <= 1024 && maxConsistencyBytes <= 1024 && verifyMicros <= 1000 ? "met" : "NOT met");
    bench::record("ledger.proofLogEntries", double(size));
    bench::record("ledger.inclusionProofBytes", double(maxBytes));
    bench::record("ledger.consistencyProofBytes", double(maxConsistencyBytes));
    bench::record("ledger.inclusionReadMs", readSeconds / samples * 1e3);
    bench::record("ledger.inclusionVerifyMicros", verifyMicros);
    bench::record("ledger.consistencyVerifyMicros", consistencySeconds / consistencies * 1e6);
}

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QTemporaryDir dir;
    ledgerLogCost(dir.filePath(QStringLiteral("ledger.sqlite")), 5000);
    // TESSERA_BENCH_LOG_ENTRIES: the proofs' log (10 million by default; about a minute and 1 GB).
    const std::int64_t logEntries = qEnvironmentVariableIsSet("TESSERA_BENCH_LOG_ENTRIES")
        ? qEnvironmentVariable("TESSERA_BENCH_LOG_ENTRIES").toLongLong()
        : 10'000'000;
    if (logEntries > 0) {
        logProofCost(dir.filePath(QStringLiteral("log.sqlite")), logEntries);
        QFile::remove(dir.filePath(QStringLiteral("log.sqlite")));
    }
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
