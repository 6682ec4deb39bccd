// A node's result log (node.sqlite): what it keeps of each result for disputes (one state by
// checkpoint, the task and its input blobs), which blobs stay pinned while results are unsettled,
// and each result's state as it moves.

#include <core/resultlog.h>
#include <core/storage/database.h>
#include <support/olderschema.h>

#include <QDateTime>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;

namespace {

std::unique_ptr<storage::Database> openAt(const QString& path, int version)
{
    return tessera::tests::openAtVersion(path, QStringLiteral(":/migrations/node"), version);
}

} // namespace

class ResultLogTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;

    static ShardResult completed(std::int64_t shard)
    {
        ShardResult result;
        result.jobId = QStringLiteral("job");
        result.shard = shard;
        result.outcome = ShardResult::Outcome::Completed;
        result.finalHash = Digest::ofBytes("final");
        return result;
    }

private Q_SLOTS:
    void keepsOneStateTheTaskAndItsInputs()
    {
        auto log = ResultLog::open(m_dir.filePath(QStringLiteral("kept.sqlite")));
        QVERIFY(log.ok());
        const auto state = Digest::ofBytes("state at 2");
        const auto weights = Digest::ofBytes("round weights");
        const auto data = Digest::ofBytes("data");
        ResultLog::Kept kept;
        kept.checkpoints = { Digest {}, state, Digest {} }; // checkpoints 1..3, only 2 kept
        kept.task = QJsonObject { { QStringLiteral("jobId"), QStringLiteral("job") } };
        kept.inputs = { weights, data };
        QVERIFY((*log)->computed(QStringLiteral("a"), QStringLiteral("broker"), completed(0), kept).ok());

        QCOMPARE(*(*log)->checkpoint(QStringLiteral("a"), 2), std::optional<Digest>(state));
        QCOMPARE(*(*log)->checkpoint(QStringLiteral("a"), 1), std::optional<Digest>());
        QCOMPARE(*(*log)->checkpoint(QStringLiteral("a"), 4), std::optional<Digest>());
        const auto back = *(*log)->kept(QStringLiteral("a"));
        QVERIFY(back.has_value());
        QCOMPARE(back->checkpoints, kept.checkpoints);
        QCOMPARE(back->task, kept.task);
        QCOMPARE(back->inputs, kept.inputs);
        QVERIFY(!(*(*log)->kept(QStringLiteral("unknown"))).has_value());
        // The blobs to keep pinned: the state and the inputs, while the result is unsettled.
        QCOMPARE(*(*log)->checkpoints(QStringLiteral("a")), (QList<Digest> { state, weights, data }));
        QCOMPARE(*(*log)->unsettledCheckpoints(QStringLiteral("broker")), (QList<Digest> { state, weights, data }));

        QCOMPARE(*(*log)->state(QStringLiteral("a")), std::optional(NodeResultState::Computed));
        QVERIFY((*log)->advance(QStringLiteral("a"), NodeResultState::Verified).ok());
        QCOMPARE(*(*log)->state(QStringLiteral("a")), std::optional(NodeResultState::Verified));
        QVERIFY(*(*log)->unsettledCheckpoints(QStringLiteral("broker")) == QList<Digest> {});
        QVERIFY(!(*(*log)->state(QStringLiteral("unknown"))).has_value());
    }

    // Every state of the enum goes in and comes back by name, with its history; the schema's CHECK
    // refuses any other name, so a state the code does not know never reaches the log.
    void theSchemaAdmitsExactlyTheStatesOfAResult()
    {
        const QString path = m_dir.filePath(QStringLiteral("states.sqlite"));
        auto log = ResultLog::open(path);
        QVERIFY(log.ok());
        QVERIFY((*log)->computed(QStringLiteral("s"), QStringLiteral("broker"), completed(0)).ok());
        const auto names = namesOf<NodeResultState>();
        QCOMPARE(names.size(), 13);
        for (const auto& name : names) {
            const auto state = fromName<NodeResultState>(name);
            QVERIFY(state);
            QCOMPARE(nameOf(*state), name);
            QVERIFY((*log)->advance(QStringLiteral("s"), *state, QStringLiteral("1.5")).ok());
            QCOMPARE(*(*log)->state(QStringLiteral("s")), state);
        }
        const auto entries = *(*log)->list();
        QCOMPARE(entries.size(), 1);
        QCOMPARE(entries.first().history.size(), names.size() + 1); // computed at first, then each
        for (qsizetype i = 0; i < names.size(); ++i)
            QCOMPARE(nameOf(entries.first().history[i + 1].state), names[i]);
        QCOMPARE(entries.first().toJson().value(QStringLiteral("state")).toString(), names.last());

        auto database = storage::Database::open(path);
        QVERIFY(database.ok());
        const auto refused = storage::execute(
            **database, QStringLiteral("UPDATE results SET state = 'pending' WHERE assignment = ?"), QStringLiteral("s"));
        QVERIFY(!refused.ok());
        QVERIFY2(
            refused.error().message.contains(QStringLiteral("CHECK constraint failed")), qPrintable(refused.error().message));
        QCOMPARE(*(*log)->state(QStringLiteral("s")), fromName<NodeResultState>(names.last()));
    }

    // Which states may still be disputed: a node keeps their blobs pinned.
    void unsettledStatesAreTheDisputableOnes()
    {
        QStringList open;
        for (const auto& name : namesOf<NodeResultState>()) {
            if (unsettled(*fromName<NodeResultState>(name)))
                open.append(name);
        }
        QCOMPARE(open,
            (QStringList { QStringLiteral("computed"), QStringLiteral("committed"), QStringLiteral("sampled"),
                QStringLiteral("disputed") }));
        // A verdict leads to the node's state of the same name.
        for (const auto& name : namesOf<CheckVerdict>())
            QCOMPARE(nameOf(stateAfter(*fromName<CheckVerdict>(name))), name);
    }

    // A node.sqlite of an older node (before migration 5) is carried over with every row; a state
    // that no version wrote becomes refused and its detail keeps what it was.
    void anOlderNodesLogIsCarriedOverWithEveryRow()
    {
        const QString path = m_dir.filePath(QStringLiteral("older.sqlite"));
        {
            auto old = openAt(path, 4);
            const QString insert = QStringLiteral(
                "INSERT INTO results (assignment, broker, job, round, shard, state, paid, detail, history, updated_at, "
                "checkpoints) VALUES (?, 'broker', 'job', 0, ?, ?, ?, ?, '[{\"state\":\"computed\",\"at\":1}]', ?, ?)");
            QVERIFY(storage::execute(*old, insert, QStringLiteral("p"), std::int64_t(0), QStringLiteral("paid"),
                QStringLiteral("2.5"), QString(), std::int64_t(10), QStringLiteral("[]"))
                        .ok());
            QVERIFY(storage::execute(*old, insert, QStringLiteral("q"), std::int64_t(1), QStringLiteral("sampled"),
                QStringLiteral("0"), QStringLiteral("another node re-executes it"),
                std::int64_t(QDateTime::currentMSecsSinceEpoch() - 1000),
                QStringLiteral("[\"%1\"]").arg(Digest::ofBytes("kept").toHex()))
                        .ok());
            QVERIFY(storage::execute(*old, insert, QStringLiteral("r"), std::int64_t(2), QStringLiteral("pondering"),
                QStringLiteral("0"), QStringLiteral("why"), std::int64_t(QDateTime::currentMSecsSinceEpoch()),
                QStringLiteral("[]"))
                        .ok());
        }
        auto log = ResultLog::open(path);
        QVERIFY(log.ok());
        const auto entries = *(*log)->list();
        QCOMPARE(entries.size(), 3);
        QCOMPARE(entries[2].assignment, QStringLiteral("p"));
        QCOMPARE(entries[2].state, NodeResultState::Paid);
        QCOMPARE(entries[2].paid, QStringLiteral("2.5"));
        QCOMPARE(entries[2].history.size(), 1);
        QCOMPARE(entries[1].state, NodeResultState::Sampled);
        QCOMPARE(entries[1].detail, QStringLiteral("another node re-executes it"));
        QCOMPARE(*(*log)->unsettledCheckpoints(QStringLiteral("broker")), QList<Digest> { Digest::ofBytes("kept") });
        QCOMPARE(entries[0].state, NodeResultState::Refused);
        QCOMPARE(entries[0].detail, QStringLiteral("the broker said \"pondering\", which is no state of a result: why"));
    }

    // A log written before states were kept sparsely (every checkpoint's state, no task) still reads.
    void aResultWithoutTaskOrInputsHasNothingToRecreateFrom()
    {
        auto log = ResultLog::open(m_dir.filePath(QStringLiteral("old.sqlite")));
        QVERIFY(log.ok());
        ResultLog::Kept kept;
        kept.checkpoints = { Digest::ofBytes("1"), Digest::ofBytes("2") };
        QVERIFY((*log)->computed(QStringLiteral("b"), QStringLiteral("broker"), completed(1), kept).ok());
        const auto back = *(*log)->kept(QStringLiteral("b"));
        QVERIFY(back.has_value());
        QVERIFY(back->task.isEmpty());
        QVERIFY(back->inputs.isEmpty());
        QCOMPARE(*(*log)->checkpoint(QStringLiteral("b"), 1), std::optional<Digest>(Digest::ofBytes("1")));
    }
};

QTEST_GUILESS_MAIN(ResultLogTest)
#include "tst_resultlog.moc"
