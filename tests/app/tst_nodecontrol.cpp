// NodeControl (docs/CONTROL.md, "Actions" and "The state"), as the desktop app serves it: every
// action's arguments checked before its owner sees one, and the state's devices, earnings,
// results and log. Over real TCP, with the API on its own thread.

#include <app/common/nodecontrol.h>
#include <app/common/nodereport.h>
#include <compute/supervisor/computethread.h>
#include <control/controlclient.h>
#include <core/logtail.h>
#include <core/readfile.h>
#include <core/resultlog.h>
#include <core/settings/settings.h>

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QMutex>
#include <QSettings>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

using namespace tessera;
using app::NodeControl;

namespace {

// A JSON body written with single quotes.
QByteArray json(const char* text)
{
    return QByteArray(text).replace('\'', '"');
}

quint16 freePort()
{
    QTcpServer probe;
    probe.listen(QHostAddress::LocalHost, 0);
    return probe.serverPort();
}

core::DeviceInfo cpu()
{
    core::DeviceInfo device;
    device.name = QStringLiteral("Test CPU");
    device.usable = true;
    return device;
}

// The desktop app's side: the actions it was handed, from the control thread.
struct Owner {
    QMutex mutex;
    QList<NodeControl::Action> actions;
    NodeControl::Act act()
    {
        return [this](const NodeControl::Action& action) {
            const QMutexLocker lock(&mutex);
            actions.append(action);
        };
    }
    qsizetype count()
    {
        const QMutexLocker lock(&mutex);
        return actions.size();
    }
};

} // namespace

class NodeControlTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::unique_ptr<core::settings::Settings> m_settings;
    Owner m_owner;
    std::unique_ptr<NodeControl> m_control;
    QByteArray m_token;

    core::Result<QJsonObject> call(const QByteArray& method, const QByteArray& path, const QByteArray& body = {})
    {
        return control::callControl({ QStringLiteral("127.0.0.1"), m_control->port(), m_token, {} }, method, path, body);
    }

private Q_SLOTS:
    void initTestCase()
    {
        // A paid result in the node's log, for the earnings and results.
        const QString data = m_dir.filePath(QStringLiteral("data"));
        QDir().mkpath(data);
        auto log = core::ResultLog::open(QDir(data).filePath(QStringLiteral("node.sqlite")));
        QVERIFY(log);
        core::ShardResult result;
        result.jobId = QStringLiteral("job-a");
        result.round = 2;
        result.shard = 1;
        result.outcome = core::ShardResult::Outcome::Completed;
        QVERIFY((*log)->computed(QStringLiteral("as-1"), QStringLiteral("tcp://b:1"), result));
        QVERIFY((*log)->advance(QStringLiteral("as-1"), core::NodeResultState::Committed));
        QVERIFY((*log)->advance(QStringLiteral("as-1"), core::NodeResultState::Paid, QStringLiteral("1.25")));
        // A hostile broker's: a long job id, and many long verdicts.
        result.jobId = QString(5000, u'j');
        QVERIFY((*log)->computed(QStringLiteral("as-2"), QStringLiteral("tcp://b:1"), result));
        for (int i = 0; i < 30; ++i)
            QVERIFY((*log)->advance(QStringLiteral("as-2"), core::NodeResultState::Disputed, {}, QString(10000, u'x')));

        m_settings = std::make_unique<core::settings::Settings>(m_dir.filePath(QStringLiteral("node.ini")));
        QVERIFY(m_settings->set(QStringLiteral("Control/Port"), freePort()));
        auto control = NodeControl::start(
            *m_settings, data, { QStringLiteral("node-id"), QStringLiteral("garage"), { cpu() } }, m_owner.act());
        QVERIFY2(control && *control, control ? "off" : qPrintable(control.error().toString()));
        m_control = std::move(*control);
        auto token = core::readFile(QDir(data).filePath(QStringLiteral("control.token")));
        QVERIFY(token);
        m_token = token->trimmed();
    }

    // Each refusal is a 400 with the reason, and the owner never hears of it.
    void badArgumentsAreRefusedBeforeTheOwnerSeesThem()
    {
        const QList<std::pair<QByteArray, QByteArray>> refused {
            { "snooze", "{}" },
            { "snooze", json("{'minutes': 0}") },
            { "snooze", json("{'minutes': 1.5}") },
            { "snooze", json("{'minutes': 20000}") },
            { "snooze", json("{'minutes': 5, 'until': 1}") },
            { "snooze", json("{'until': 1000}") }, // in the past
            { "device", json("{'device': 'cuda:7', 'paused': true}") },
            { "device", json("{'device': 'cpu:0'}") },
            { "limits", "{}" },
            { "limits", json("{'Compute/CpuPercent': 5}") },
            { "limits", json("{'Compute/CpuPercent': 'lots'}") },
            { "limits", json("{'Compute/Schedule': 'tea time'}") },
            { "limits", json("{'Node/Brokers': 'tcp://evil:1'}") },
            { "limits", json("{'Compute/CpuPercent': [50]}") },
            { "limits", json("{'Compute/CpuPercent': 50, 'Control/Bind': '0.0.0.0'}") }, // all or nothing
            { "pause", json("{'why': 'no'}") },
        };
        for (const auto& [action, body] : refused) {
            const auto answer = call("POST", "/api/v1/" + action, body);
            QVERIFY2(!answer && answer.error().message.contains(QStringLiteral(" 400: ")),
                (action + ' ' + body + ": " + (answer ? QByteArray("200") : answer.error().message.toUtf8())).constData());
        }
        QCOMPARE(m_owner.count(), 0);
    }

    // A taken action is handed on checked, and the answer says it at once.
    void actionsReachTheOwnerCheckedAndTheStateSaysThem()
    {
        const auto snoozed = call("POST", "/api/v1/snooze", json("{'minutes': 30}"));
        QVERIFY2(snoozed, snoozed ? "" : qPrintable(snoozed.error().message));
        QCOMPARE(snoozed->value(QStringLiteral("state")).toString(), QStringLiteral("snoozed"));
        QCOMPARE(snoozed->value(QStringLiteral("paused")).toBool(), true);
        const auto limits = call("POST", "/api/v1/limits", json("{'Compute/CpuPercent': 50, 'Compute/Schedule': '22:00-07:00'}"));
        QVERIFY(limits);
        QCOMPARE(limits->value(QStringLiteral("limits")).toObject().value(QStringLiteral("Compute/CpuPercent")).toInt(), 50);
        const auto device = call("POST", "/api/v1/device", json("{'device': 'cpu:0', 'paused': true}"));
        QVERIFY(device);
        QCOMPARE(m_owner.count(), 3);
        const QMutexLocker lock(&m_owner.mutex);
        const auto& actions = m_owner.actions;
        QCOMPARE(actions[0].name, QStringLiteral("snooze"));
        const qint64 minutes = QDateTime::currentDateTime().secsTo(actions[0].until) / 60;
        QVERIFY2(minutes >= 28 && minutes <= 30, qPrintable(QString::number(minutes)));
        QCOMPARE(actions[1].name, QStringLiteral("limits"));
        QCOMPARE(actions[1].limits.size(), 2);
        QCOMPARE(actions[1].limits[0].second.toLongLong(), 50); // as the settings file would take it
        QCOMPARE(actions[2].device, QStringLiteral("cpu:0"));
        QCOMPARE(actions[2].paused, true);
        QCOMPARE(actions[2].sequence, std::uint64_t(3));
    }

    void theStateCarriesDevicesEarningsResultsAndLog()
    {
        core::LogTail::process().append(QStringLiteral("warning"), QStringLiteral("a line for the tail"));
        const auto state = call("GET", "/api/v1/state");
        QVERIFY(state);
        QCOMPARE(state->value(QStringLiteral("name")).toString(), QStringLiteral("garage"));
        const auto devices = state->value(QStringLiteral("devices")).toArray();
        QCOMPARE(devices.size(), 1);
        QCOMPARE(devices[0][QStringLiteral("id")].toString(), QStringLiteral("cpu:0"));
        QVERIFY(devices[0].toObject().contains(QStringLiteral("temperatureC"))); // null where no sensor
        const auto earnings = state->value(QStringLiteral("earnings")).toObject();
        QCOMPARE(earnings.value(QStringLiteral("today")).toString(), QStringLiteral("1.25"));
        QCOMPARE(earnings.value(QStringLiteral("week")).toString(), QStringLiteral("1.25"));
        QCOMPARE(earnings.value(QStringLiteral("days")).toArray().size(), 7);
        const auto results = state->value(QStringLiteral("results")).toArray();
        QCOMPARE(results.size(), 2);
        QCOMPARE(results[1][QStringLiteral("state")].toString(), QStringLiteral("paid"));
        // A broker's words are cut, and only a result's newest steps are said.
        QVERIFY(results[0][QStringLiteral("jobId")].toString().size() <= app::NodeReport::MaxText / 4 + 1);
        QVERIFY(results[0][QStringLiteral("detail")].toString().size() <= app::NodeReport::MaxText + 1);
        QCOMPARE(results[0][QStringLiteral("history")].toArray().size(), app::NodeReport::MaxSteps);
        QVERIFY(QJsonDocument(*state).toJson().size() < 64 * 1024);
        const auto log = state->value(QStringLiteral("log")).toArray();
        QVERIFY(!log.isEmpty());
        QCOMPARE(log.last()[QStringLiteral("text")].toString(), QStringLiteral("a line for the tail"));
        QCOMPARE(log.last()[QStringLiteral("level")].toString(), QStringLiteral("warning"));
        QCOMPARE(log[log.size() - 2][QStringLiteral("text")].toString(), QStringLiteral("control API: cpu:0 paused"));
    }

    // Earnings: each paid result once, on the day it was paid, and by job.
    void earningsCountEachPaidResultOnceByDayAndJob()
    {
        const QDateTime now(QDate(2026, 12, 6), QTime(12, 0));
        const auto at = [&](int daysAgo) { return now.addDays(-daysAgo).toMSecsSinceEpoch(); };
        const auto paid = [&](const QString& job, const QString& credits, int daysAgo) {
            core::ResultEntry entry;
            entry.jobId = job;
            entry.state = core::NodeResultState::Paid;
            entry.paid = credits;
            entry.history = { { core::NodeResultState::Computed, at(daysAgo) }, { core::NodeResultState::Paid, at(daysAgo) } };
            return entry;
        };
        core::ResultEntry slashed = paid(QStringLiteral("a"), QStringLiteral("0"), 0);
        slashed.state = core::NodeResultState::Slashed;
        const auto earnings = app::NodeReport::earningsOf(
            { paid(QStringLiteral("a"), QStringLiteral("1.5"), 0), paid(QStringLiteral("a"), QStringLiteral("0.25"), 1),
                paid(QStringLiteral("b"), QStringLiteral("2"), 6),
                paid(QStringLiteral("b"), QStringLiteral("9"), 7), // a week ago
                paid(QStringLiteral("c"), QStringLiteral("junk"), 0), slashed },
            now);
        QCOMPARE(earnings.value(QStringLiteral("today")).toString(), QStringLiteral("1.5"));
        QCOMPARE(earnings.value(QStringLiteral("week")).toString(), QStringLiteral("3.75"));
        const auto days = earnings.value(QStringLiteral("days")).toArray();
        QCOMPARE(days.first()[QStringLiteral("day")].toString(), QStringLiteral("2026-11-30"));
        QCOMPARE(days.first()[QStringLiteral("credits")].toString(), QStringLiteral("2"));
        QCOMPARE(days.last()[QStringLiteral("credits")].toString(), QStringLiteral("1.5"));
        const auto jobs = earnings.value(QStringLiteral("jobs")).toArray();
        QCOMPARE(jobs.size(), 2);
        QCOMPARE(jobs[0][QStringLiteral("job")].toString(), QStringLiteral("b")); // most first
        QCOMPARE(jobs[0][QStringLiteral("credits")].toString(), QStringLiteral("11"));
    }

    // tessera-node's own actions on a real (idle) compute thread: a snooze that ends by itself, a
    // finish with nothing to finish, every device paused, and limits written to the settings file
    // with nothing else in it touched.
    void tessera_nodeHoldsAndLetsGoOfItsComputeThread()
    {
        const QString data = m_dir.filePath(QStringLiteral("node"));
        const QString ini = m_dir.filePath(QStringLiteral("node-only.ini"));
        {
            QFile file(ini);
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write("[Node]\nName=kept\n[Compute]\nCpuPercent=banana\n");
        }
        core::settings::Settings settings(ini);
        (void)settings.load();
        QVERIFY(settings.set(QStringLiteral("Control/Port"), freePort()));
        compute::ComputeThread thread(compute::ComputeEnvironment {});
        QList<std::pair<QString, QVariant>> applied;
        QMutex mutex;
        auto control = NodeControl::start(settings, data, thread, { QStringLiteral("n"), QStringLiteral("n"), { cpu() } },
            [&](const QString& key, const QVariant& value) {
                const QMutexLocker lock(&mutex);
                applied.append({ key, value });
            });
        QVERIFY(control && *control);
        const auto token = core::readFile(QDir(data).filePath(QStringLiteral("control.token")));
        QVERIFY(token);
        const auto call = [&](const QByteArray& method, const QByteArray& path, const QByteArray& body = {}) {
            return control::callControl(
                { QStringLiteral("127.0.0.1"), (*control)->port(), token->trimmed(), {} }, method, path, body);
        };
        const auto stateIs = [&](const QString& name) {
            QThread::msleep(100); // within the API's rate, which a refusal would say
            const auto state = call("GET", "/api/v1/state");
            return state && state->value(QStringLiteral("state")).toString() == name;
        };
        const auto threadIs = [&](compute::ComputeThread::State state) { return thread.state() == state; };

        // A snooze of 1.5 s: held, then let go by itself (a timer that fires early waits again).
        const qint64 until = QDateTime::currentMSecsSinceEpoch() + 1500;
        const auto snoozed = call("POST", "/api/v1/snooze", "{\"until\": " + QByteArray::number(until) + '}');
        QVERIFY(snoozed);
        QCOMPARE(snoozed->value(QStringLiteral("state")).toString(), QStringLiteral("snoozed"));
        QCOMPARE(snoozed->value(QStringLiteral("snoozedUntil")).toInteger(), until);
        QVERIFY(QTest::qWaitFor([&] { return threadIs(compute::ComputeThread::State::Paused); }, 30'000));
        QVERIFY(QTest::qWaitFor([&] { return stateIs(QStringLiteral("idle")); }, 30'000));
        QVERIFY(QTest::qWaitFor([&] { return threadIs(compute::ComputeThread::State::Idle); }, 30'000));
        QVERIFY(QDateTime::currentMSecsSinceEpoch() >= until);

        // Nothing to finish: paused at once, until resumed.
        const auto finished = call("POST", "/api/v1/finish");
        QVERIFY(finished);
        QCOMPARE(finished->value(QStringLiteral("state")).toString(), QStringLiteral("paused"));
        QVERIFY(QTest::qWaitFor([&] { return threadIs(compute::ComputeThread::State::Paused); }, 30'000));
        QVERIFY(call("POST", "/api/v1/resume"));
        QVERIFY(QTest::qWaitFor([&] { return threadIs(compute::ComputeThread::State::Idle); }, 30'000));

        // Its only device paused: the node is.
        const auto device = call("POST", "/api/v1/device", json("{'device': 'cpu:0', 'paused': true}"));
        QVERIFY(device);
        QCOMPARE(device->value(QStringLiteral("reason")).toString(), QStringLiteral("every device is paused"));
        QVERIFY(QTest::qWaitFor([&] { return threadIs(compute::ComputeThread::State::Paused); }, 30'000));
        QVERIFY(call("POST", "/api/v1/device", json("{'device': 'cpu:0', 'paused': false}")));
        QVERIFY(QTest::qWaitFor([&] { return threadIs(compute::ComputeThread::State::Idle); }, 30'000));

        // A limit: written, applied, and nothing else in the file rewritten; one it does not take
        // here (the desktop app's) refused.
        QVERIFY(call("POST", "/api/v1/limits", json("{'Compute/CpuPercent': 40}")));
        QVERIFY(!call("POST", "/api/v1/limits", json("{'Compute/Schedule': '22:00-07:00'}")));
        {
            const QMutexLocker lock(&mutex);
            QCOMPARE(applied.size(), 1);
            QCOMPARE(applied[0].first, QStringLiteral("Compute/CpuPercent"));
        }
        QSettings file(ini, QSettings::IniFormat);
        QCOMPARE(file.value(QStringLiteral("Compute/CpuPercent")).toInt(), 40);
        QCOMPARE(file.value(QStringLiteral("Node/Name")).toString(), QStringLiteral("kept"));
        QVERIFY(!file.contains(QStringLiteral("Compute/Schedule")));
        control->reset();
    }

    void cleanupTestCase() { m_control.reset(); }
};

QTEST_GUILESS_MAIN(NodeControlTest)
#include "tst_nodecontrol.moc"
