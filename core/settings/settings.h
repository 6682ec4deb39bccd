#pragma once

#include "../error.h"
#include "settingskeys.h"

#include <QHash>
#include <QObject>
#include <QSettings>
#include <QString>
#include <QVariant>

#include <functional>

namespace tessera::core::settings {

// A value in the file that could not be used; the default stands in for it.
struct Problem {
    QString key;
    QString value;
    QString reason;

    QString toString() const;
};

// One step of the migration ladder: upgrades a file of layout fromVersion to fromVersion + 1.
struct MigrationStep {
    int fromVersion = 0;
    QString description;
    std::function<void(QSettings&)> apply;
};

// The production ladder, ending at CurrentVersion.
QList<MigrationStep> migrationLadder();

// Validates a value for a key (type, range, pattern) and returns it in its canonical type.
Result<QVariant> validate(const Key& key, const QVariant& value);

// The settings of one INI file, checked against the key table. A wrong value never stops Tessera:
// it is reported (problems()) and the default is used instead.
class Settings : public QObject {
    Q_OBJECT

public:
    explicit Settings(QString filePath, QObject* parent = nullptr);
    Settings(QString filePath, QList<MigrationStep> ladder, int currentVersion, QObject* parent = nullptr);

    // ~/.config/Tessera/tessera.ini (XDG_CONFIG_HOME is honoured).
    static QString defaultFilePath();

    QString filePath() const { return m_filePath; }

    // Reads the file, migrating an older layout first (and writing the upgrade back).
    // Returns the problems found; they stay available from problems().
    QList<Problem> load();
    const QList<Problem>& problems() const { return m_problems; }

    QVariant value(QStringView key) const;
    bool boolValue(QStringView key) const { return value(key).toBool(); }
    std::int64_t intValue(QStringView key) const { return value(key).toLongLong(); }
    QString stringValue(QStringView key) const { return value(key).toString(); }
    QStringList listValue(QStringView key) const { return value(key).toStringList(); }

    // Sets a value in memory after validating it; save() writes it.
    Status set(QStringView key, const QVariant& value);
    // Writes every key to the file (atomically: QSettings replaces the file through QSaveFile)
    // and emits changed() once.
    Status save();

Q_SIGNALS:
    void changed();

private:
    QString m_filePath;
    QList<MigrationStep> m_ladder;
    int m_currentVersion;
    QHash<QString, QVariant> m_values;
    QList<Problem> m_problems;
};

} // namespace tessera::core::settings
