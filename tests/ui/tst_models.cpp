// The dashboard's table models: consistent for Qt's model tester, and a refresh emits only the
// cells that changed.

#include <ui/models/tablemodels.h>

#include <QAbstractItemModelTester>
#include <QJsonArray>
#include <QSignalSpy>
#include <QTest>

using namespace tessera;
using namespace tessera::ui;

namespace {

core::ResultEntry result(const QString& assignment, const QString& state, const QString& paid = QStringLiteral("0"))
{
    core::ResultEntry entry;
    entry.assignment = assignment;
    entry.jobId = QStringLiteral("job");
    entry.round = 1;
    entry.shard = 2;
    entry.state = core::fromName<core::NodeResultState>(state).value();
    entry.paid = paid;
    entry.history = { { core::NodeResultState::Computed, 1000 }, { entry.state, 2000 } };
    return entry;
}

core::DeviceInfo device(int index, bool usable)
{
    core::DeviceInfo info;
    info.kind = index == 0 ? core::DeviceInfo::Kind::Cpu : core::DeviceInfo::Kind::Cuda;
    info.index = index;
    info.name = QStringLiteral("device %1").arg(index);
    info.usable = usable;
    info.unusableReason = usable ? QString() : QStringLiteral("no CUDA in this LibTorch");
    return info;
}

} // namespace

class ModelsTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void resultsEmitOnlyChangedCells()
    {
        ResultsModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setResults(
            { result(QStringLiteral("a"), QStringLiteral("sampled")), result(QStringLiteral("b"), QStringLiteral("paid")) });
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(model.data(model.index(0, int(ResultsModel::Column::State))).toString(), QStringLiteral("sampled"));
        QCOMPARE(model.data(model.index(0, int(ResultsModel::Column::History))).toString(), QStringLiteral("computed → sampled"));

        QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
        QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
        QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
        // The same rows: nothing is emitted.
        model.setResults(
            { result(QStringLiteral("a"), QStringLiteral("sampled")), result(QStringLiteral("b"), QStringLiteral("paid")) });
        QCOMPARE(changed.count(), 0);
        // a was verified and paid: its state, paid and lifecycle cells change, and nothing else.
        model.setResults({ result(QStringLiteral("a"), QStringLiteral("paid"), QStringLiteral("0.9")),
            result(QStringLiteral("b"), QStringLiteral("paid")) });
        QCOMPARE(model.lastChangedCells(), 3);
        QCOMPARE(changed.count(), 3);
        for (const auto& signal : changed) {
            const auto index = signal[0].value<QModelIndex>();
            QCOMPARE(index.row(), 0);
            QVERIFY(index.column() == int(ResultsModel::Column::State) || index.column() == int(ResultsModel::Column::Paid)
                || index.column() == int(ResultsModel::Column::History));
        }
        // A new result on top is one inserted row, not a reset.
        model.setResults({ result(QStringLiteral("c"), QStringLiteral("computed")),
            result(QStringLiteral("a"), QStringLiteral("paid"), QStringLiteral("0.9")),
            result(QStringLiteral("b"), QStringLiteral("paid")) });
        QCOMPARE(inserted.count(), 1);
        QCOMPARE(reset.count(), 0);
        QCOMPARE(model.rowAt(0).key, QStringLiteral("c"));
        // One gone, another reordered: still consistent.
        model.setResults(
            { result(QStringLiteral("b"), QStringLiteral("paid")), result(QStringLiteral("c"), QStringLiteral("computed")) });
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(model.indexOfKey(QStringLiteral("a")), -1);
    }

    void devicesCanBeLeftOut()
    {
        DevicesModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QHash<QString, DevicesModel::Benchmark> benchmarks { { QStringLiteral("cpu:0"), { 23599.0, 3467.0, 32.3 } } };
        model.setDevices({ device(0, true), device(1, false) }, benchmarks, {});
        QCOMPARE(model.rowCount(), 2);
        const auto enabled = model.index(0, int(DevicesModel::Column::Enabled));
        QCOMPARE(model.data(enabled, Qt::CheckStateRole).toInt(), int(Qt::Checked));
        QVERIFY(model.data(model.index(0, int(DevicesModel::Column::Benchmark))).toString().contains(QStringLiteral("23,599")));
        QCOMPARE(model.data(model.index(1, int(DevicesModel::Column::Usable))).toString(), QStringLiteral("no"));
        QCOMPARE(
            model.data(model.index(1, int(DevicesModel::Column::Why))).toString(), QStringLiteral("no CUDA in this LibTorch"));
        QSignalSpy toggled(&model, &DevicesModel::enabledChanged);
        QVERIFY(model.setData(enabled, Qt::Unchecked, Qt::CheckStateRole));
        QCOMPARE(toggled.count(), 1);
        QCOMPARE(toggled[0][0].toString(), QStringLiteral("cpu:0"));
        QCOMPARE(toggled[0][1].toBool(), false);
        QCOMPARE(model.data(enabled, Qt::CheckStateRole).toInt(), int(Qt::Unchecked));
        // An unusable device cannot be switched on.
        QVERIFY(!(model.flags(model.index(1, int(DevicesModel::Column::Enabled))) & Qt::ItemIsUserCheckable));
        QVERIFY(!model.setData(model.index(1, int(DevicesModel::Column::Enabled)), Qt::Checked, Qt::CheckStateRole));
    }

    void devicesShowTheirLoadTemperatureAndPower()
    {
        DevicesModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setDevices({ device(0, true), device(1, false) }, {}, { QStringLiteral("cpu:0") });
        const auto cell = [&](int row, DevicesModel::Column column, int role = Qt::DisplayRole) {
            return model.data(model.index(row, int(column)), role).toString();
        };
        // Nothing read yet: a dash, and the tip says why.
        QCOMPARE(cell(0, DevicesModel::Column::Temperature), QStringLiteral("\u2014"));
        QVERIFY(cell(0, DevicesModel::Column::Power, Qt::ToolTipRole).contains(QStringLiteral("No power meter")));
        DevicesModel::Reading cpu;
        cpu.loadPercent = 63;
        cpu.temperatureC = 74.6;
        cpu.temperatureSource = QStringLiteral("hwmon k10temp");
        cpu.watts = 20.0;
        cpu.wattsEstimated = true;
        DevicesModel::Reading gpu;
        gpu.temperatureC = 61.0;
        gpu.temperatureSource = QStringLiteral("NVML");
        gpu.watts = 170.0;
        model.setReadings({ { QStringLiteral("cpu:0"), cpu }, { QStringLiteral("cuda:1"), gpu } });
        QCOMPARE(cell(0, DevicesModel::Column::Load), QStringLiteral("63%"));
        QCOMPARE(cell(0, DevicesModel::Column::Temperature), QStringLiteral("75 \u00b0C"));
        QVERIFY(cell(0, DevicesModel::Column::Temperature, Qt::ToolTipRole).contains(QStringLiteral("k10temp")));
        QCOMPARE(cell(0, DevicesModel::Column::Power), QStringLiteral("~20 W")); // an estimate says so
        QVERIFY(cell(0, DevicesModel::Column::Power, Qt::ToolTipRole).contains(QStringLiteral("Estimated")));
        QCOMPARE(cell(1, DevicesModel::Column::Temperature), QStringLiteral("61 \u00b0C"));
        QCOMPARE(cell(1, DevicesModel::Column::Power), QStringLiteral("170 W"));
        // New readings change those cells only, and the user's choice stays.
        cpu.temperatureC = 76.0;
        model.setReadings({ { QStringLiteral("cpu:0"), cpu }, { QStringLiteral("cuda:1"), gpu } });
        QCOMPARE(model.lastChangedCells(), 1);
        QCOMPARE(model.data(model.index(0, int(DevicesModel::Column::Enabled)), Qt::CheckStateRole).toInt(), int(Qt::Unchecked));
    }

    void jobsShowProgressAndAccuracy()
    {
        JobsModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        const QJsonObject job { { QStringLiteral("jobId"), QStringLiteral("j1") },
            { QStringLiteral("name"), QStringLiteral("MLP") }, { QStringLiteral("state"), QStringLiteral("running") },
            { QStringLiteral("round"), 2 }, { QStringLiteral("rounds"), 15 }, { QStringLiteral("escrow"), QStringLiteral("80") },
            { QStringLiteral("history"), QJsonArray { QJsonObject { { QStringLiteral("testAccuracy"), 0.8123 } } } } };
        model.setJobs({ core::broker::JobStatus::fromJson(job) });
        QCOMPARE(model.data(model.index(0, int(JobsModel::Column::Progress))).toString(), QStringLiteral("2 / 15 rounds"));
        QCOMPARE(model.data(model.index(0, int(JobsModel::Column::Accuracy))).toString(), QStringLiteral("81.23%"));
        auto later = job;
        later.insert(QStringLiteral("round"), 3);
        model.setJobs({ core::broker::JobStatus::fromJson(later) });
        QCOMPARE(model.lastChangedCells(), 1);

        // An inference job: its shards are its progress; its figure once finished (none for generate).
        QJsonObject labelling { { QStringLiteral("jobId"), QStringLiteral("j2") },
            { QStringLiteral("name"), QStringLiteral("labels") }, { QStringLiteral("state"), QStringLiteral("running") },
            { QStringLiteral("inference"), QStringLiteral("classify") }, { QStringLiteral("shards"), 10 },
            { QStringLiteral("shardsDone"), 4 } };
        model.setJobs({ core::broker::JobStatus::fromJson(labelling) });
        QCOMPARE(model.data(model.index(0, int(JobsModel::Column::Progress))).toString(), QStringLiteral("4 / 10 shards"));
        QVERIFY(model.data(model.index(0, int(JobsModel::Column::Accuracy))).toString().isEmpty());
        labelling.insert(QStringLiteral("state"), QStringLiteral("finished"));
        labelling.insert(QStringLiteral("shardsDone"), 10);
        labelling.insert(QStringLiteral("history"), QJsonArray { QJsonObject { { QStringLiteral("testAccuracy"), 0.8684 } } });
        model.setJobs({ core::broker::JobStatus::fromJson(labelling) });
        QCOMPARE(model.data(model.index(0, int(JobsModel::Column::Accuracy))).toString(), QStringLiteral("86.84%"));
        labelling.insert(QStringLiteral("inference"), QStringLiteral("generate"));
        model.setJobs({ core::broker::JobStatus::fromJson(labelling) });
        QVERIFY(model.data(model.index(0, int(JobsModel::Column::Accuracy))).toString().isEmpty());
        // A served job: its replicas up and its answers.
        QJsonObject serving { { QStringLiteral("jobId"), QStringLiteral("j3") },
            { QStringLiteral("name"), QStringLiteral("ask") }, { QStringLiteral("state"), QStringLiteral("running") },
            { QStringLiteral("inference"), QStringLiteral("serve") }, { QStringLiteral("shards"), 2 },
            { QStringLiteral("serving"),
                QJsonObject { { QStringLiteral("replicas"), 1 }, { QStringLiteral("answered"), 12 } } } };
        model.setJobs({ core::broker::JobStatus::fromJson(serving) });
        QCOMPARE(model.data(model.index(0, int(JobsModel::Column::Progress))).toString(),
            QStringLiteral("1 / 2 replicas, 12 answered"));
    }

    void logKeepsItsNewestEntries()
    {
        LogModel model(nullptr, 3);
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        for (int i = 0; i < 5; ++i)
            model.append(QDateTime::currentDateTime(), QStringLiteral("info"), QStringLiteral("test"), QString::number(i));
        QCOMPARE(model.rowCount(), 3);
        QCOMPARE(model.data(model.index(0, int(LogModel::Column::Message))).toString(), QStringLiteral("2"));
        QCOMPARE(model.data(model.index(2, int(LogModel::Column::Message))).toString(), QStringLiteral("4"));
    }

    void stakeEvents()
    {
        StakeEventsModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setEvents({ { QStringLiteral("x"), QDateTime::currentDateTime(), QStringLiteral("slashed"), QStringLiteral("5"),
            QStringLiteral("the referee re-executed checkpoint 1") } });
        QCOMPARE(model.data(model.index(0, int(StakeEventsModel::Column::Event))).toString(), QStringLiteral("slashed"));
    }
};

QTEST_MAIN(ModelsTest)
#include "tst_models.moc"
