// The broker's store: the schema admits exactly the names of the state enums (and refuses any
// other), and migration 7 (CHECK constraints, `verifications` renamed `checks`) carries a
// database of an older broker over with every row.

#include <core/broker/brokerstore.h>
#include <core/storage/database.h>
#include <support/olderschema.h>
#include <support/teststore.h>

#include <QJsonDocument>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;
using namespace tessera::core::broker;

namespace {

std::unique_ptr<storage::Database> openAt(const QString& path, int version)
{
    return tessera::tests::openAtVersion(
        tessera::tests::TestStore::location(path), QStringLiteral(":/migrations/broker"), version);
}

JobRow job(const QString& id)
{
    JobRow row;
    row.id = id;
    row.specJson = { { QStringLiteral("name"), QStringLiteral("test") } };
    row.weightsHash = Digest::ofBytes("w");
    row.weightsBlob = Digest::ofBytes("b");
    row.owner = QStringLiteral("owner");
    row.createdAt = 1;
    return row;
}

Check sample(const QString& id)
{
    Check check;
    check.id = id;
    check.jobId = QStringLiteral("j");
    check.startHash = Digest::ofBytes("w");
    check.startBlob = Digest::ofBytes("b");
    check.accused = QStringLiteral("n");
    check.accusedAssignment = QStringLiteral("a");
    check.accusedResult.jobId = QStringLiteral("j");
    return check;
}

bool refused(const Status& status)
{
    // SQLite's words, or PostgreSQL's
    return !status.ok()
        && (status.error().message.contains(QStringLiteral("CHECK constraint failed"))
            || status.error().message.contains(QStringLiteral("violates check constraint")));
}

} // namespace

class BrokerStoreTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;

private Q_SLOTS:
    void initTestCase()
    {
        if (QString why; !tessera::tests::TestStore::ready(why))
            QSKIP(qPrintable(why));
    }
    void cleanupTestCase() { tessera::tests::TestStore::shutdown(); }

    void theSchemaAdmitsExactlyTheNamesOfEachState()
    {
        BrokerStore store(openAt(m_dir.filePath(QStringLiteral("states.sqlite")), 1000));
        QVERIFY(store.insertJob(job(QStringLiteral("j"))).ok());
        for (const auto& name : namesOf<JobState>()) {
            const auto state = fromName<JobState>(name);
            QVERIFY(state);
            QVERIFY(store.endJob(QStringLiteral("j"), *state).ok());
            QCOMPARE((*store.job(QStringLiteral("j")))->state, *state);
        }
        QVERIFY(store
                    .insertAssignment({ QStringLiteral("a"), QStringLiteral("j"), 0, 0, QStringLiteral("n"), 0, 1,
                        AssignmentState::Active, AssignmentKind::Train, {} })
                    .ok());
        for (const auto& name : namesOf<AssignmentState>()) {
            QVERIFY(store.setAssignmentState(QStringLiteral("a"), *fromName<AssignmentState>(name)).ok());
            QCOMPARE(nameOf((*store.assignment(QStringLiteral("a")))->state), name);
        }
        for (const auto& name : namesOf<AssignmentKind>()) {
            const auto kind = *fromName<AssignmentKind>(name);
            QVERIFY(store
                        .insertAssignment({ QStringLiteral("k-") + name, QStringLiteral("j"), 0, 0, QStringLiteral("n"), 0, 1,
                            AssignmentState::Active, kind, kind == AssignmentKind::Train ? QString() : QStringLiteral("c") })
                        .ok());
            QCOMPARE((*store.assignment(QStringLiteral("k-") + name))->kind, kind);
        }
        QVERIFY(store.insertShardResult(QStringLiteral("j"), { 0, 0, QStringLiteral("n"), {}, ResultState::Sampled, {} }).ok());
        for (const auto& name : namesOf<ResultState>()) {
            QVERIFY(store.setResultState(QStringLiteral("j"), 0, 0, *fromName<ResultState>(name)).ok());
            QCOMPARE(nameOf((*store.shardResults(QStringLiteral("j"), 0)).first().state), name);
        }
        auto canary = sample(QStringLiteral("canary"));
        canary.kind = CheckKind::Canary;
        canary.accused.clear();
        canary.accusedAssignment.clear();
        QVERIFY(store.insertCheck(canary, 1).ok());
        QVERIFY(store.insertCheck(sample(QStringLiteral("c")), 1).ok());
        for (const auto& name : namesOf<CheckState>()) {
            for (const auto& loser : namesOf<Loser>()) {
                QVERIFY(store
                            .decideCheck(sample(QStringLiteral("c")), *fromName<CheckState>(name), *fromName<Loser>(loser),
                                QStringLiteral("why"), 2)
                            .ok());
                const auto record = (*store.checkRecords(QStringLiteral("j"), 10));
                QCOMPARE(record.first().id, QStringLiteral("c"));
                QCOMPARE(record.first().state, name);
                QCOMPARE(record.first().outcome, loser);
            }
        }
        // Any other name is refused by the schema itself.
        auto& db = store.database();
        QVERIFY(refused(storage::execute(db, QStringLiteral("UPDATE jobs SET state = 'paused'"))));
        QVERIFY(refused(storage::execute(db, QStringLiteral("UPDATE assignments SET state = 'lost'"))));
        QVERIFY(refused(storage::execute(db, QStringLiteral("UPDATE assignments SET kind = 'audit'"))));
        QVERIFY(refused(storage::execute(db, QStringLiteral("UPDATE shard_results SET state = 'paid'"))));
        QVERIFY(refused(storage::execute(db, QStringLiteral("UPDATE checks SET state = 'pending'"))));
        QVERIFY(refused(storage::execute(db, QStringLiteral("UPDATE checks SET kind = 'spot'"))));
        QVERIFY(refused(storage::execute(db, QStringLiteral("UPDATE checks SET outcome = 'owner'"))));
        // A sample names whose result it checks; a canary names none.
        QVERIFY(refused(storage::execute(db, QStringLiteral("UPDATE checks SET accused = NULL WHERE id = 'c'"))));
        // A re-execution names its check; a training assignment none.
        QVERIFY(
            refused(storage::execute(db, QStringLiteral("UPDATE assignments SET verification = NULL WHERE kind <> 'train'"))));
    }

    // The network lease (NetworkLease): one holder at a time; another takes it only once it
    // lapsed, and the generation says that it changed hands.
    void aLeaseHasOneHolderUntilItLapses()
    {
        const QString path = m_dir.filePath(QStringLiteral("lease.sqlite"));
        BrokerStore first(openAt(path, 1000));
        BrokerStore second(openAt(path, 1000));
        const QString scope = QStringLiteral("network");
        QCOMPARE(*first.takeLease(scope, { QStringLiteral("one"), QStringLiteral("tcp://one:1"), 2000, 0 }, 1000),
            std::optional<std::int64_t>(1));
        QCOMPARE(*second.takeLease(scope, { QStringLiteral("two"), QStringLiteral("tcp://two:2"), 2500, 0 }, 1500),
            std::optional<std::int64_t>());
        QCOMPARE(*first.takeLease(scope, { QStringLiteral("one"), QStringLiteral("tcp://one:1"), 3000, 0 }, 2000),
            std::optional<std::int64_t>(1)); // renewed: the same generation
        QCOMPARE((*second.lease(scope))->endpoint, QStringLiteral("tcp://one:1"));
        QCOMPARE(*second.takeLease(scope, { QStringLiteral("two"), QStringLiteral("tcp://two:2"), 4000, 0 }, 3001),
            std::optional<std::int64_t>(2)); // lapsed: taken, a new generation
        QCOMPARE(*first.takeLease(scope, { QStringLiteral("one"), QStringLiteral("tcp://one:1"), 4100, 0 }, 3100),
            std::optional<std::int64_t>());
        const auto held = *first.lease(scope);
        QCOMPARE(held->holder, QStringLiteral("two"));
        QCOMPARE(held->expiresAt, std::int64_t(4000));
    }

    void anOlderBrokersDatabaseIsCarriedOverWithEveryRow()
    {
        const QString path = m_dir.filePath(QStringLiteral("old.sqlite"));
        {
            auto old = openAt(path, 6);
            for (const auto& sql : {
                     "INSERT INTO jobs (id, spec, state, round, weights_hash, weights_blob, created_at, owner, price_per_shard) "
                     "VALUES ('j', '{}', 'running', 1, 'aa', 'bb', 5, 'owner', 900000)",
                     "INSERT INTO rounds VALUES ('j', 0, 0.5, 0.8, 0.6, 'aa', 'bb', 6)",
                     "INSERT INTO assignments (id, job, round, shard, node, issued_at, deadline, state) "
                     "VALUES ('a', 'j', 1, 0, 'n', 7, 8, 'answered')",
                     "INSERT INTO assignments (id, job, round, shard, node, issued_at, deadline, state, kind, verification) "
                     "VALUES ('v', 'j', 1, 0, 'm', 7, 8, 'active', 'verify', 'c')",
                     "INSERT INTO commitments VALUES ('a', 'n', 'f', 'r', '{}', 9)",
                     "INSERT INTO shard_results (job, round, shard, node, result, state, assignment) "
                     "VALUES ('j', 1, 0, 'n', '{}', 'sampled', 'a')",
                 })
                QVERIFY2(storage::execute(*old, QString::fromLatin1(sql)).ok(), sql);
            ShardResult checked;
            checked.jobId = QStringLiteral("j");
            checked.round = 1;
            checked.checkpointHashes = { Digest::ofBytes("w") };
            QVERIFY(storage::execute(*old,
                QStringLiteral("INSERT INTO verifications (id, kind, job, round, shard, start_hash, start_blob, accused, "
                               "accused_assignment, accused_result, verifier, verifier_assignment, state, created_at) "
                               "VALUES ('c', 'sample', 'j', 1, 0, 'aa', 'bb', 'n', 'a', ?, 'm', 'v', 'running', 10)"),
                QString::fromUtf8(QJsonDocument(checked.toJson()).toJson(QJsonDocument::Compact)))
                        .ok());
        }
        BrokerStore store(openAt(path, 1000));
        QCOMPARE(*store.database().schemaVersion(), int(storage::loadMigrations(QStringLiteral(":/migrations/broker"))->size()));
        const auto carried = *store.job(QStringLiteral("j"));
        QVERIFY(carried);
        QVERIFY(!carried->change); // its round's weights come whole
        // A job from before compression was a setting was uncompressed, and says so now.
        QCOMPARE(
            carried->specJson.value(QStringLiteral("aggregation")).toObject().value(QStringLiteral("compression")).toString(),
            QStringLiteral("none"));
        QCOMPARE(carried->state, JobState::Running);
        QCOMPARE(carried->pricePerShard, Credits::fromMicro(900'000));
        QCOMPARE(store.rounds(QStringLiteral("j"))->size(), 1);
        QVERIFY(store.rounds(QStringLiteral("j"))->first().evaluated); // a round of before was evaluated with it
        QCOMPARE((*store.assignment(QStringLiteral("v")))->kind, AssignmentKind::Verify);
        QVERIFY(*store.commitment(QStringLiteral("a")));
        QCOMPARE(store.shardResultsIn(QStringLiteral("j"), ResultState::Sampled)->size(), 1);
        const auto loaded = store.check(QStringLiteral("c"));
        QVERIFY2(loaded.ok(), loaded.ok() ? "" : qPrintable(loaded.error().toString()));
        const auto& check = *loaded;
        QVERIFY(check);
        QCOMPARE(check->state, CheckState::Running);
        QCOMPARE(check->verifierAssignment, QStringLiteral("v"));
        QVERIFY(check->narrowing.stage == Narrowing::Stage::None); // a dispute of before: asked for states
        // The references follow the renamed tables: a row of no job is still refused.
        QVERIFY(
            !storage::execute(store.database(), QStringLiteral("INSERT INTO rounds VALUES ('nobody', 0, 0, 0, 0, 'a', 'b', 1)"))
                 .ok());
        QVERIFY(
            !storage::execute(store.database(), QStringLiteral("INSERT INTO commitments VALUES ('none', 'n', 'f', 'r', '{}', 9)"))
                 .ok());
    }
};

QTEST_GUILESS_MAIN(BrokerStoreTest)
#include "tst_brokerstore.moc"
