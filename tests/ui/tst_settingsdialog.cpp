// The settings dialog over the same INI file as the headless node: a round trip through the file,
// and wrong values named without anything saved.

#include <core/settings/settings.h>
#include <ui/widgets/settingsdialog.h>

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QLineEdit>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera;
namespace names = core::settings::names;

class SettingsDialogTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;

    QString write(const QString& name, const QByteArray& text)
    {
        const QString path = m_dir.filePath(name);
        QFile file(path);
        file.open(QIODevice::WriteOnly);
        file.write(text);
        return path;
    }

private Q_SLOTS:
    void everyKeyHasAnEditor()
    {
        core::settings::Settings settings(m_dir.filePath(QStringLiteral("empty.ini")));
        settings.load();
        ui::SettingsDialog dialog(settings);
        for (const auto& key : core::settings::keys()) {
            if (key.name != names::MetaVersion)
                QVERIFY2(dialog.editor(key.name), qPrintable(key.name));
        }
        QVERIFY(qobject_cast<QCheckBox*>(dialog.editor(names::ComputeRunOnlyWhenIdle)));
        QVERIFY(qobject_cast<QComboBox*>(dialog.editor(names::LogLevel)));
    }

    void valuesRoundTripThroughTheFile()
    {
        const QString path = write(QStringLiteral("roundtrip.ini"),
            "[Compute]\nMaxThreads=3\nRunOnlyWhenIdle=true\n[Node]\nBrokers=tcp://a.example:5555\n");
        core::settings::Settings settings(path);
        QVERIFY(settings.load().isEmpty());
        ui::SettingsDialog dialog(settings);
        QCOMPARE(qobject_cast<QLineEdit*>(dialog.editor(names::ComputeMaxThreads))->text(), QStringLiteral("3"));
        QVERIFY(qobject_cast<QCheckBox*>(dialog.editor(names::ComputeRunOnlyWhenIdle))->isChecked());
        QCOMPARE(qobject_cast<QLineEdit*>(dialog.editor(names::NodeBrokers))->text(), QStringLiteral("tcp://a.example:5555"));

        dialog.setEditorText(names::ComputeMaxThreads, QStringLiteral("6"));
        dialog.setEditorText(names::ComputePauseOnBattery, QStringLiteral("false"));
        dialog.setEditorText(names::NodeBrokers, QStringLiteral("tcp://a.example:5555, tcp://b.example:6000"));
        dialog.setEditorText(names::LogLevel, QStringLiteral("debug"));
        QCOMPARE(dialog.apply(), QStringList());

        // What the headless node would read from the file now.
        core::settings::Settings reread(path);
        QVERIFY(reread.load().isEmpty());
        QCOMPARE(reread.intValue(names::ComputeMaxThreads), 6);
        QCOMPARE(reread.boolValue(names::ComputePauseOnBattery), false);
        QCOMPARE(reread.boolValue(names::ComputeRunOnlyWhenIdle), true);
        QCOMPARE(reread.listValue(names::NodeBrokers),
            QStringList({ QStringLiteral("tcp://a.example:5555"), QStringLiteral("tcp://b.example:6000") }));
        QCOMPARE(reread.stringValue(names::LogLevel), QStringLiteral("debug"));
    }

    void wrongValuesAreNamedAndNothingIsSaved()
    {
        const QString path = write(QStringLiteral("wrong.ini"), "[Compute]\nMaxThreads=2\n");
        core::settings::Settings settings(path);
        settings.load();
        ui::SettingsDialog dialog(settings);
        dialog.setEditorText(names::ComputeMaxThreads, QStringLiteral("many"));
        dialog.setEditorText(names::ComputeCpuPercent, QStringLiteral("250"));
        dialog.setEditorText(names::NodeBrokers, QStringLiteral("not an address"));
        dialog.setEditorText(names::LogLevel, QStringLiteral("debug"));
        const auto problems = dialog.apply();
        QCOMPARE(problems.size(), 3);
        QVERIFY(problems.join(u'\n').contains(names::ComputeMaxThreads));
        QVERIFY(problems.join(u'\n').contains(names::ComputeCpuPercent));
        QVERIFY(problems.join(u'\n').contains(names::NodeBrokers));
        core::settings::Settings reread(path);
        reread.load();
        QCOMPARE(reread.intValue(names::ComputeMaxThreads), 2);
        QCOMPARE(reread.stringValue(names::LogLevel), QStringLiteral("info"));
    }
};

QTEST_MAIN(SettingsDialogTest)
#include "tst_settingsdialog.moc"
