// A node's result log (node.sqlite): what it keeps of each result for disputes (one state by
// checkpoint, the task and its input blobs), which blobs stay pinned while results are unsettled,
// and each result's state as it moves.

#include <core/resultlog.h>

#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;

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

        QCOMPARE(*(*log)->state(QStringLiteral("a")), std::optional<QString>(QStringLiteral("computed")));
        QVERIFY((*log)->advance(QStringLiteral("a"), QStringLiteral("verified")).ok());
        QCOMPARE(*(*log)->state(QStringLiteral("a")), std::optional<QString>(QStringLiteral("verified")));
        QVERIFY(*(*log)->unsettledCheckpoints(QStringLiteral("broker")) == QList<Digest> {});
        QVERIFY(!(*(*log)->state(QStringLiteral("unknown"))).has_value());
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
