// The broker's relay between a pipeline's stages (core/broker/pipelines.h; docs/PROTOCOL.md,
// "Stage tasks") against hostile stages, and the scheduler's hand-out of a shard's stages together.

#include <core/broker/pipelines.h>
#include <core/broker/scheduler.h>
#include <core/decomposition.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;
using namespace tessera::core::broker;

namespace {

JobSpec pipelineJob(std::int64_t stages)
{
    JobSpec spec;
    spec.name = QStringLiteral("pipelined");
    spec.model.source = ModelSpec::Source::Zoo;
    spec.model.zoo = QStringLiteral("gpt");
    spec.model.layers = 4;
    spec.model.heads = 2;
    spec.model.width = 32;
    spec.model.context = 32;
    spec.model.tied = false;
    spec.dataset.source = DatasetSpec::Source::Builtin;
    spec.dataset.builtin = QStringLiteral("fortunes");
    spec.optimizer.clipNorm = 1.0;
    spec.training.rounds = 1;
    spec.training.shardsPerRound = 2;
    spec.training.localSteps = 3;
    spec.training.batchSize = 8;
    spec.training.determinism = TrainingSpec::Determinism::Portable;
    spec.training.pipeline = { stages, 4 };
    return spec;
}

constexpr std::int64_t ActivationBytes = 2 * 32 * 32 * 4; // micro-batch of 2, 32 positions, width 32

} // namespace

class PipelinesTest : public QObject {
    Q_OBJECT

private:
    Pipelines m_pipelines;
    ShardTask m_task;

    void addPipeline()
    {
        m_task = stageTaskOf(decomposeShard(QStringLiteral("j"), pipelineJob(3), 0, 0, {}), 0, 3);
        m_pipelines.add(m_task,
            { { QStringLiteral("a0"), QStringLiteral("n0"), 100 }, { QStringLiteral("a1"), QStringLiteral("n1"), 100 },
                { QStringLiteral("a2"), QStringLiteral("n2"), 100 } });
    }

private Q_SLOTS:
    void init()
    {
        m_pipelines = Pipelines {};
        addPipeline();
    }

    // An activation goes to the next stage, a gradient to the one before, sums to any other; each
    // part is forwarded to the node that holds that stage, and the tensor is logged on both sides.
    void aTensorGoesToItsNeighbourAndIsLoggedOnBothSides()
    {
        const Pipelines::Part part { 1, TensorKind::Activation, 0, 0, 0, ActivationBytes };
        auto forward = m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), part, ActivationBytes);
        QVERIFY(forward);
        QCOMPARE(forward->node, QStringLiteral("n1"));
        QCOMPARE(forward->assignment, QStringLiteral("a1"));
        QCOMPARE(forward->from, 0);
        const QByteArray bytes(ActivationBytes, 'x');
        m_pipelines.hash(QStringLiteral("a0"), part, bytes);
        const auto digest = Digest::ofBytes(bytes);
        QCOMPARE(*m_pipelines.rootOf(QStringLiteral("a0")),
            stageTensorsRoot({ StageTensor { true, 1, TensorKind::Activation, 0, 0, digest } }));
        QCOMPARE(*m_pipelines.rootOf(QStringLiteral("a1")),
            stageTensorsRoot({ StageTensor { false, 0, TensorKind::Activation, 0, 0, digest } }));
        QCOMPARE(*m_pipelines.rootOf(QStringLiteral("a2")), stageTensorsRoot({}));
        // The root does not depend on the order the tensors were traded in.
        const StageTensor x { true, 1, TensorKind::Activation, 0, 0, digest }, y { false, 2, TensorKind::Gradient, 0, 0, digest };
        QCOMPARE(stageTensorsRoot({ x, y }), stageTensorsRoot({ y, x }));
        QVERIFY(stageTensorsRoot({ x }) != stageTensorsRoot({ y }));
        QVERIFY(m_pipelines.relay(QStringLiteral("n2"), QStringLiteral("a2"), { 0, TensorKind::Squares, 2, 0, 0, 100 }, 100));
        // Every activation and gradient of a pipeline has the first one's size.
        const auto other = m_pipelines.relay(
            QStringLiteral("n2"), QStringLiteral("a2"), { 1, TensorKind::Gradient, 0, 0, 0, ActivationBytes - 4 }, 8);
        QVERIFY(!other);
        QCOMPARE(other.error().field, QStringLiteral("size"));
    }

    // What a hostile stage may try, each refused before a byte is forwarded.
    void aHostileStageIsRefused_data()
    {
        QTest::addColumn<QString>("node");
        QTest::addColumn<QString>("assignment");
        QTest::addColumn<int>("to");
        QTest::addColumn<int>("kind");
        QTest::addColumn<int>("step");
        QTest::addColumn<int>("micro");
        QTest::addColumn<qint64>("size");
        QTest::addColumn<QString>("field");
        const int activation = int(TensorKind::Activation), gradient = int(TensorKind::Gradient),
                  squares = int(TensorKind::Squares);
        const qint64 bytes = ActivationBytes;
        QTest::newRow("another node's stage")
            << QStringLiteral("n1") << QStringLiteral("a0") << 1 << activation << 0 << 0 << bytes << QStringLiteral("assignment");
        QTest::newRow("no such assignment") << QStringLiteral("n0") << QStringLiteral("zz") << 1 << activation << 0 << 0 << bytes
                                            << QStringLiteral("assignment");
        QTest::newRow("an activation backwards")
            << QStringLiteral("n1") << QStringLiteral("a1") << 0 << activation << 0 << 0 << bytes << QStringLiteral("to");
        QTest::newRow("a gradient forwards")
            << QStringLiteral("n1") << QStringLiteral("a1") << 2 << gradient << 0 << 0 << bytes << QStringLiteral("to");
        QTest::newRow("past a neighbour") << QStringLiteral("n0") << QStringLiteral("a0") << 2 << activation << 0 << 0 << bytes
                                          << QStringLiteral("to");
        QTest::newRow("to itself") << QStringLiteral("n0") << QStringLiteral("a0") << 0 << squares << 0 << 0 << qint64(10)
                                   << QStringLiteral("to");
        QTest::newRow("to no stage") << QStringLiteral("n2") << QStringLiteral("a2") << 3 << activation << 0 << 0 << bytes
                                     << QStringLiteral("to");
        QTest::newRow("sums of a micro-batch")
            << QStringLiteral("n0") << QStringLiteral("a0") << 1 << squares << 0 << 1 << qint64(10) << QStringLiteral("to");
        QTest::newRow("a step past the shard")
            << QStringLiteral("n0") << QStringLiteral("a0") << 1 << activation << 3 << 0 << bytes << QStringLiteral("step");
        QTest::newRow("a micro-batch past the step")
            << QStringLiteral("n0") << QStringLiteral("a0") << 1 << activation << 0 << 4 << bytes << QStringLiteral("step");
        QTest::newRow("larger than the model's")
            << QStringLiteral("n0") << QStringLiteral("a0") << 1 << activation << 0 << 0 << bytes + 4 << QStringLiteral("size");
        QTest::newRow("sums of a gigabyte") << QStringLiteral("n0") << QStringLiteral("a0") << 1 << squares << 0 << 0
                                            << qint64(1LL << 30) << QStringLiteral("size");
    }
    void aHostileStageIsRefused()
    {
        QFETCH(QString, node);
        QFETCH(QString, assignment);
        QFETCH(int, to);
        QFETCH(int, kind);
        QFETCH(int, step);
        QFETCH(int, micro);
        QFETCH(qint64, size);
        QFETCH(QString, field);
        const Pipelines::Part part { to, TensorKind(kind), step, micro, 0, size };
        const auto refused = m_pipelines.relay(node, assignment, part, qsizetype(std::min<qint64>(size, 1024)));
        QVERIFY(!refused);
        QCOMPARE(refused.error().field, field);
    }

    // A tensor's parts come once, in order, within its size: a repeat, a gap, a part past the
    // end, a second copy of a whole tensor are refused.
    void aTensorsPartsComeOnceInOrder()
    {
        const auto half = ActivationBytes / 2;
        Pipelines::Part part { 1, TensorKind::Activation, 0, 0, 0, ActivationBytes };
        QVERIFY(m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), part, qsizetype(half)));
        m_pipelines.hash(QStringLiteral("a0"), part, QByteArray(half, 'x'));
        QCOMPARE(m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), part, qsizetype(half)).error().field,
            QStringLiteral("offset")); // the first half again
        part.offset = half + 1;
        QVERIFY(!m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), part, qsizetype(half - 1))); // a gap
        part.offset = half;
        QVERIFY(!m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), part, qsizetype(half + 1))); // past the end
        part.size = ActivationBytes - 4;
        QVERIFY(!m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), part, qsizetype(half))); // another size
        part.size = ActivationBytes;
        QVERIFY(m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), part, qsizetype(half)));
        m_pipelines.hash(QStringLiteral("a0"), part, QByteArray(half, 'y'));
        part.offset = 0;
        QVERIFY(!m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), part, qsizetype(half))); // sent again
        QCOMPARE(*m_pipelines.rootOf(QStringLiteral("a1")),
            stageTensorsRoot({ StageTensor {
                false, 0, TensorKind::Activation, 0, 0, Digest::ofBytes(QByteArray(half, 'x') + QByteArray(half, 'y')) } }));
    }

    // docs/VERIFICATION.md, "Pipeline stages": what a stage received is recorded, in a file that
    // becomes the caller's (a blob) once the stage has received all its schedule sends it; a stage
    // sends its tensors one at a time; a record nobody took goes with its pipeline.
    void whatAStageReceivedIsRecordedForItsReExecution()
    {
        QTemporaryDir dir;
        Pipelines pipelines;
        pipelines.setRecordingDirectory(dir.path());
        pipelines.add(m_task,
            { { QStringLiteral("a0"), QStringLiteral("n0"), 100 }, { QStringLiteral("a1"), QStringLiteral("n1"), 100 },
                { QStringLiteral("a2"), QStringLiteral("n2"), 100 } });
        QCOMPARE(QDir(dir.path()).entryList({ QStringLiteral("stage-inputs-*.part") }, QDir::Files).size(), 3);
        auto send = [&](const QString& node, const QString& assignment, const Pipelines::Part& part, const QByteArray& bytes) {
            if (!pipelines.relay(node, assignment, part, bytes.size()))
                return false;
            pipelines.hash(assignment, part, bytes);
            return true;
        };
        // Stage 1 is owed 3 steps x 4 micro-batches of activations (from 0) and gradients (from 2),
        // and each step both others' sums.
        for (std::int64_t step = 0; step < 3; ++step) {
            for (std::int64_t micro = 0; micro < 4; ++micro) {
                const QByteArray activation(ActivationBytes, char('a' + micro)), gradient(ActivationBytes, char('A' + micro));
                QVERIFY(send(QStringLiteral("n0"), QStringLiteral("a0"),
                    { 1, TensorKind::Activation, step, micro, 0, ActivationBytes }, activation));
                QVERIFY(send(QStringLiteral("n2"), QStringLiteral("a2"),
                    { 1, TensorKind::Gradient, step, micro, 0, ActivationBytes }, gradient));
            }
            QVERIFY(send(
                QStringLiteral("n0"), QStringLiteral("a0"), { 1, TensorKind::Squares, step, 0, 0, 16 }, QByteArray(16, 's')));
            QVERIFY(!pipelines.receivedAll(QStringLiteral("a1")));
            QVERIFY(send(
                QStringLiteral("n2"), QStringLiteral("a2"), { 1, TensorKind::Squares, step, 0, 0, 16 }, QByteArray(16, 't')));
        }
        QVERIFY(pipelines.receivedAll(QStringLiteral("a1")));
        QVERIFY(!pipelines.receivedAll(QStringLiteral("a0")));
        // A stage starts at most two tensors part-way.
        const auto half = ActivationBytes / 2;
        QVERIFY(
            pipelines.relay(QStringLiteral("n2"), QStringLiteral("a2"), { 1, TensorKind::Squares, 9, 0, 0, 16 }, 8).error().field
            == QStringLiteral("step"));
        QVERIFY(send(QStringLiteral("n1"), QStringLiteral("a1"), { 2, TensorKind::Activation, 0, 0, 0, ActivationBytes },
            QByteArray(half, 'x')));
        QVERIFY(send(QStringLiteral("n1"), QStringLiteral("a1"), { 2, TensorKind::Activation, 0, 1, 0, ActivationBytes },
            QByteArray(half, 'x')));
        QCOMPARE(
            pipelines
                .relay(QStringLiteral("n1"), QStringLiteral("a1"), { 2, TensorKind::Activation, 0, 2, 0, ActivationBytes }, half)
                .error()
                .field,
            QStringLiteral("offset"));
        // The record: its digest, every tensor as it came.
        const auto recorded = pipelines.takeInputs(QStringLiteral("a1"));
        QVERIFY(recorded);
        QFile file(recorded->file);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const auto bytes = file.readAll();
        QCOMPARE(Digest::ofBytes(bytes), recorded->digest);
        const auto inputs = StageInputs::parse(bytes);
        QVERIFY2(inputs, qPrintable(inputs ? QString() : inputs.error().toString()));
        QCOMPARE(inputs->size(), 30);
        QCOMPARE(*inputs->find(0, TensorKind::Activation, 2, 3), QByteArray(ActivationBytes, 'd'));
        QCOMPARE(*inputs->find(2, TensorKind::Squares, 1, 0), QByteArray(16, 't'));
        QVERIFY(!inputs->find(2, TensorKind::Activation, 0, 0));
        QVERIFY(!pipelines.takeInputs(QStringLiteral("a1"))); // once
        // The records nobody took go with the pipeline; the one taken is the caller's.
        pipelines.remove(QStringLiteral("a0"));
        QCOMPARE(QDir(dir.path()).entryList({ QStringLiteral("stage-inputs-*.part") }, QDir::Files),
            QStringList { QFileInfo(recorded->file).fileName() });
    }

    // A pipeline is forgotten once every stage answered (or one failed); a late stage is found.
    void aPipelineEndsWhenEveryStageAnswered()
    {
        QVERIFY(!m_pipelines.answered(QStringLiteral("a0")));
        QVERIFY(!m_pipelines.answered(QStringLiteral("a2")));
        QCOMPARE(m_pipelines.lateAssignments(101), QList<QString> { QStringLiteral("a1") });
        // A node that answered its stage holds nothing of the pipeline any more (it may go).
        QCOMPARE(m_pipelines.assignmentsOf(QStringLiteral("n1")), QList<QString> { QStringLiteral("a1") });
        QVERIFY(m_pipelines.assignmentsOf(QStringLiteral("n0")).isEmpty());
        QCOMPARE(m_pipelines.assignmentsOfJob(QStringLiteral("j")), QList<QString> { QStringLiteral("a0") });
        QVERIFY(m_pipelines.answered(QStringLiteral("a1")));
        m_pipelines.remove(QStringLiteral("a1"));
        QVERIFY(m_pipelines.empty());
        QVERIFY(!m_pipelines.rootOf(QStringLiteral("a0")));
        QVERIFY(!m_pipelines.relay(QStringLiteral("n0"), QStringLiteral("a0"), { 1, TensorKind::Activation, 0, 0, 0, 8 }, 8));
    }

    // The scheduler hands a pipeline shard's S stages out only to S distinct waiting nodes that can
    // run them, never through pick(), and never a shard with a stage out.
    void theStagesOfAShardGoOutTogether()
    {
        Scheduler scheduler;
        Scheduler::Round round;
        round.jobId = QStringLiteral("j");
        round.spec = pipelineJob(2);
        scheduler.add(round);
        QVERIFY(!scheduler.pick(QStringLiteral("n0"), 4, 0)); // a unit alone: never
        const QStringList all = ownCapabilities() + QStringList { capability::Pipeline };
        QVERIFY(!scheduler.pickPipeline({ { QStringLiteral("n0"), 4, 0, all } }, 0)); // one node of two
        QVERIFY(!scheduler.pickPipeline(
            { { QStringLiteral("n0"), 4, 0, all }, { QStringLiteral("n1"), 4, 0, ownCapabilities() } }, 0));
        auto pick = scheduler.pickPipeline(
            { { QStringLiteral("n0"), 4, 0, all }, { QStringLiteral("n0"), 4, 0, all }, { QStringLiteral("n1"), 4, 0, all } }, 0);
        QVERIFY(pick);
        QCOMPARE(pick->shard, 0);
        QCOMPARE(pick->nodes, (QList<QString> { QStringLiteral("n0"), QStringLiteral("n1") }));
        scheduler.handedOut(QStringLiteral("j"), QStringLiteral("a0"), 0, QStringLiteral("n0"), 100, 0);
        scheduler.handedOut(QStringLiteral("j"), QStringLiteral("a1"), 1, QStringLiteral("n1"), 100, 0);
        pick = scheduler.pickPipeline({ { QStringLiteral("n2"), 4, 0, all }, { QStringLiteral("n3"), 4, 0, all } }, 0);
        QVERIFY(pick);
        QCOMPARE(pick->shard, 1); // shard 0's stages are out
        // A stage given back frees the shard; its node does not get that shard again for a while.
        scheduler.release(QStringLiteral("j"), QStringLiteral("a0"));
        scheduler.returnedBy(QStringLiteral("j"), 0, QStringLiteral("n0"), 0);
        scheduler.release(QStringLiteral("j"), QStringLiteral("a1"));
        pick = scheduler.pickPipeline(
            { { QStringLiteral("n0"), 4, 0, all }, { QStringLiteral("n1"), 4, 0, all }, { QStringLiteral("n2"), 4, 0, all } },
            1000);
        QVERIFY(pick);
        QCOMPARE(pick->shard, 0);
        QCOMPARE(pick->nodes, (QList<QString> { QStringLiteral("n1"), QStringLiteral("n2") }));
        // docs/PROTOCOL.md, "Round trips": the stages go to the shortest measured round trips
        // (stage 0 the shortest), then to nodes not measured, in their order.
        scheduler.release(QStringLiteral("j"), QStringLiteral("a0"));
        Scheduler fresh;
        fresh.add(round);
        pick = fresh.pickPipeline({ { QStringLiteral("far"), 4, 0, all, 80 }, { QStringLiteral("unmeasured"), 4, 0, all },
                                      { QStringLiteral("near"), 4, 0, all, 5 }, { QStringLiteral("middle"), 4, 0, all, 20 } },
            0);
        QVERIFY(pick);
        QCOMPARE(pick->nodes, (QList<QString> { QStringLiteral("near"), QStringLiteral("middle") }));
        pick = fresh.pickPipeline({ { QStringLiteral("unmeasured"), 4, 0, all }, { QStringLiteral("other"), 4, 0, all },
                                      { QStringLiteral("far"), 4, 0, all, 80 } },
            0);
        QCOMPARE(pick->nodes, (QList<QString> { QStringLiteral("far"), QStringLiteral("unmeasured") }));
    }
};

QTEST_GUILESS_MAIN(PipelinesTest)
#include "tst_pipelines.moc"
