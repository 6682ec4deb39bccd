// make bench: how fast the broker hands out shards (goal: 5,000 assignments a second), against the
// plain SQLite inserts the same database can do, measured in the same run.

#include "record.h"

#include <compute/engine/brokermath.h>
#include <core/broker/broker.h>
#include <core/capabilities.h>
#include <core/smalljobs.h>
#include <core/storage/database.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QTemporaryDir>

#include <cstdio>

using namespace tessera;

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QTemporaryDir dir;
    auto blobs = std::move(core::broker::Broker::openBlobs(dir.filePath(QStringLiteral("broker")))).value();
    compute::BrokerMath math({}, *blobs);
    core::SystemClock clock;
    // A faucet funds the owner's escrow and bonds each node's stake, as on a local broker.
    core::broker::Broker::Options options;
    options.faucet = true;
    auto broker = core::broker::Broker::open(dir.filePath(QStringLiteral("broker")), *blobs, math, clock, options);
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
    int assigned = 0;
    for (int i = 0; i < spec.training.shardsPerRound; ++i) {
        auto assignment = (*broker)->assign(QStringLiteral("node-%1").arg(i % Nodes));
        if (!assignment.ok())
            qFatal("assign failed: %s", qPrintable(assignment.error().toString()));
        if (assignment->has_value())
            ++assigned;
    }
    if (assigned == 0)
        qFatal("no shard was handed out");
    const double assignRate = assigned / (double(timer.nsecsElapsed()) / 1e9);

    // Baseline: the same number of single-row inserts into a table like the assignments table, in
    // a database opened the same way.
    auto raw = core::storage::Database::open(dir.filePath(QStringLiteral("raw.sqlite")),
        core::storage::DatabaseOptions { 5000, core::storage::DatabaseOptions::Synchronous::Normal });
    (void)(*raw)->execute(
        QStringLiteral("CREATE TABLE a (id TEXT PRIMARY KEY, job TEXT, round INTEGER, shard INTEGER, node TEXT, "
                       "issued_at INTEGER, deadline INTEGER, state TEXT)"));
    auto insert = *(*raw)->prepare(QStringLiteral("INSERT INTO a VALUES (?, 'job', 0, ?, 'node', 0, 0, 'active')"));
    timer.restart();
    for (int i = 0; i < assigned; ++i) {
        insert.bind(1, QStringLiteral("%1").arg(i, 16, 16, QLatin1Char('0'))).bind(2, std::int64_t(i));
        (void)insert.run();
    }
    const double insertRate = assigned / (double(timer.nsecsElapsed()) / 1e9);

    std::printf("Broker scheduling: %d shards handed to %d nodes\n", assigned, Nodes);
    std::printf("  assignments %9.0f /s   plain SQLite inserts %9.0f /s   ratio %.3f   (goal: 5,000 assignments/s, %s)\n",
        assignRate, insertRate, assignRate / insertRate, assignRate >= 5000 ? "met" : "NOT met");
    bench::record("broker.assignmentsPerSecond", assignRate);
    bench::record("broker.insertsPerSecond", insertRate);
    bench::record("broker.ratio", assignRate / insertRate);
    return 0;
}
