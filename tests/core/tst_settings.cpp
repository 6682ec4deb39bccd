#include <core/settings/settings.h>

#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core::settings;

namespace {

void writeFile(const QString& path, const QByteArray& text)
{
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    file.write(text);
}

bool hasProblem(const QList<Problem>& problems, const QString& key)
{
    return std::any_of(problems.begin(), problems.end(), [&](const Problem& p) { return p.key == key; });
}

} // namespace

class SettingsTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void everyKeyHasAValidDefault()
    {
        QVERIFY(keys().size() > 10);
        QSet<QString> seen;
        for (const auto& key : keys()) {
            QVERIFY2(!seen.contains(key.name), qPrintable(key.name + QStringLiteral(" is declared twice")));
            seen.insert(key.name);
            QVERIFY2(key.name.count(u'/') == 1, qPrintable(key.name));
            QVERIFY2(!key.doc.isEmpty(), qPrintable(key.name));
            const auto checked = validate(key, key.defaultValue);
            QVERIFY2(
                checked.ok(), qPrintable(key.name + QStringLiteral(": ") + (checked.ok() ? QString() : checked.error().message)));
        }
    }

    void missingFileGivesDefaults()
    {
        QTemporaryDir dir;
        Settings settings(dir.filePath(QStringLiteral("tessera.ini")));
        QVERIFY(settings.load().isEmpty());
        QCOMPARE(settings.intValue(names::ComputeCpuPercent), 100);
        QCOMPARE(settings.boolValue(names::ComputePauseOnBattery), true);
        QCOMPARE(settings.stringValue(names::LogLevel), QStringLiteral("info"));
        QCOMPARE(settings.listValue(names::NodeBrokers), QStringList {});
        QCOMPARE(settings.stringValue(names::BrokerBind), QStringLiteral("tcp://127.0.0.1:5555"));
    }

    void badValuesAreReportedAndReplacedByDefaults()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("tessera.ini"));
        writeFile(path,
            "[Meta]\nVersion=1\n"
            "[Compute]\nCpuPercent=250\nMaxThreads=lots\nPauseOnBattery=maybe\nSchedule=25:00-07:00\nIdleMinutes=10\n"
            "[Log]\nLevel=chatty\n"
            "[Node]\nBrokers=tcp://broker.example:5555, http://wrong\n"
            "[Compte]\nTypo=1\n");
        Settings settings(path);
        const auto problems = settings.load();
        QVERIFY(hasProblem(problems, names::ComputeCpuPercent));
        QVERIFY(hasProblem(problems, names::ComputeMaxThreads));
        QVERIFY(hasProblem(problems, names::ComputePauseOnBattery));
        QVERIFY(hasProblem(problems, names::ComputeSchedule));
        QVERIFY(hasProblem(problems, names::LogLevel));
        QVERIFY(hasProblem(problems, names::NodeBrokers));
        QVERIFY(hasProblem(problems, QStringLiteral("Compte/Typo")));
        QCOMPARE(problems.size(), 7);
        QCOMPARE(settings.intValue(names::ComputeCpuPercent), 100);
        QCOMPARE(settings.intValue(names::ComputeMaxThreads), 0);
        QCOMPARE(settings.stringValue(names::LogLevel), QStringLiteral("info"));
        QCOMPARE(settings.intValue(names::ComputeIdleMinutes), 10); // the good value next to bad ones is kept
        for (const auto& problem : problems)
            QVERIFY(problem.toString().contains(QStringLiteral("using the default")));
    }

    void garbageFileDoesNotCrash()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("tessera.ini"));
        QByteArray garbage(4096, '\0');
        for (int i = 0; i < garbage.size(); ++i)
            garbage[i] = char((i * 7919) % 256);
        writeFile(path, garbage);
        Settings settings(path);
        settings.load();
        QCOMPARE(settings.intValue(names::ComputeCpuPercent), 100);
    }

    void iniRoundTrip()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("sub/tessera.ini"));
        Settings settings(path);
        QSignalSpy changed(&settings, &Settings::changed);
        QVERIFY(settings.set(names::ComputeCpuPercent, 50).ok());
        QVERIFY(settings
                    .set(names::NodeBrokers,
                        QStringList { QStringLiteral("tcp://a.example:5555"), QStringLiteral("tcp://b.example:6000") })
                    .ok());
        QVERIFY(settings.set(names::ComputeSchedule, QStringLiteral("22:00-07:00,12:00-13:00")).ok());
        QVERIFY(settings.set(names::NodeName, QStringLiteral("garage, left shelf")).ok());
        QVERIFY(settings.set(names::ComputeRunOnlyWhenIdle, true).ok());
        QVERIFY(settings.save().ok());
        QCOMPARE(changed.count(), 1);

        Settings reread(path);
        QVERIFY(reread.load().isEmpty());
        QCOMPARE(reread.intValue(names::ComputeCpuPercent), 50);
        QCOMPARE(reread.listValue(names::NodeBrokers).size(), 2);
        QCOMPARE(reread.stringValue(names::ComputeSchedule), QStringLiteral("22:00-07:00,12:00-13:00"));
        QCOMPARE(reread.stringValue(names::NodeName), QStringLiteral("garage, left shelf"));
        QCOMPARE(reread.boolValue(names::ComputeRunOnlyWhenIdle), true);
        QCOMPARE(reread.intValue(names::MetaVersion), CurrentVersion);
    }

    void setRejectsInvalidValues()
    {
        QTemporaryDir dir;
        Settings settings(dir.filePath(QStringLiteral("tessera.ini")));
        QVERIFY(!settings.set(names::ComputeCpuPercent, 5).ok());
        QVERIFY(!settings.set(QStringLiteral("Compute/Nope"), 1).ok());
        QVERIFY(!settings.set(names::ComputeDisabledDevices, QStringList { QStringLiteral("gpu0") }).ok());
        QCOMPARE(settings.intValue(names::ComputeCpuPercent), 100);
    }

    void migrationLadderRunsMissingStepsInOrder()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("tessera.ini"));
        writeFile(path, "[Meta]\nVersion=1\n[Compute]\nThreads=3\n");

        QStringList applied;
        QList<MigrationStep> ladder {
            { 2, QStringLiteral("three"), [&](QSettings&) { applied << QStringLiteral("2->3"); } },
            { 0, QStringLiteral("one"), [&](QSettings&) { applied << QStringLiteral("0->1"); } },
            { 1, QStringLiteral("two: Compute/Threads became Compute/MaxThreads"),
                [&](QSettings& file) {
                    applied << QStringLiteral("1->2");
                    file.setValue(names::ComputeMaxThreads, file.value(QStringLiteral("Compute/Threads")));
                    file.remove(QStringLiteral("Compute/Threads"));
                } },
        };
        Settings settings(path, ladder, 3);
        QVERIFY(settings.load().isEmpty());
        QCOMPARE(applied, (QStringList { QStringLiteral("1->2"), QStringLiteral("2->3") }));
        QCOMPARE(settings.intValue(names::ComputeMaxThreads), 3);

        // The upgrade was written back: a second load runs nothing.
        applied.clear();
        Settings again(path, ladder, 3);
        QVERIFY(again.load().isEmpty());
        QVERIFY(applied.isEmpty());
        QSettings file(path, QSettings::IniFormat);
        QCOMPARE(file.value(names::MetaVersion).toInt(), 3);
    }

    void fileFromANewerTesseraIsReadNotDowngraded()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("tessera.ini"));
        writeFile(path, "[Meta]\nVersion=7\n[Compute]\nCpuPercent=40\n");
        Settings settings(path);
        const auto problems = settings.load();
        QCOMPARE(problems.size(), 1);
        QVERIFY(problems.first().reason.contains(QStringLiteral("newer Tessera")));
        QCOMPARE(settings.intValue(names::ComputeCpuPercent), 40);
    }

    void handWrittenFileWithoutVersionIsStamped()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("tessera.ini"));
        writeFile(path, "[Compute]\nCpuPercent=40\n");
        Settings settings(path);
        QVERIFY(settings.load().isEmpty());
        QSettings file(path, QSettings::IniFormat);
        QCOMPARE(file.value(names::MetaVersion).toInt(), CurrentVersion);
    }

    void docsListEveryKey()
    {
        QFile doc(QStringLiteral(TESSERA_SOURCE_DIR "/docs/SETTINGS.md"));
        QVERIFY(doc.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(doc.readAll());
        const QString table = markdownTable();
        if (!text.contains(table)) {
            // Leave the expected table where a developer can paste it from.
            const QString expected = QStringLiteral(TESSERA_BINARY_DIR "/SETTINGS.table.md");
            QFile out(expected);
            if (out.open(QIODevice::WriteOnly))
                out.write(table.toUtf8());
            QFAIL(qPrintable(QStringLiteral("docs/SETTINGS.md is out of date with core/settings/settingskeys.cpp; "
                                            "the table it must contain is in ")
                + expected));
        }
    }
};

QTEST_GUILESS_MAIN(SettingsTest)
#include "tst_settings.moc"
