#include "settings.h"

#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QStandardPaths>

#include <algorithm>

namespace tessera::core::settings {

QString Problem::toString() const
{
    return QStringLiteral("%1 = '%2': %3; using the default").arg(key, value, reason);
}

QList<MigrationStep> migrationLadder()
{
    return {
        { 0, QStringLiteral("stamp files written before Meta/Version existed (by hand) with version 1"), [](QSettings&) {} },
    };
}

namespace {

QString displayValue(const QVariant& value)
{
    if (value.typeId() == QMetaType::QStringList)
        return value.toStringList().join(QStringLiteral(", "));
    return value.toString();
}

bool matchesFully(const QString& pattern, const QString& text)
{
    const QRegularExpression expression(QRegularExpression::anchoredPattern(pattern));
    return expression.match(text).hasMatch();
}

} // namespace

Result<QVariant> validate(const Key& key, const QVariant& value)
{
    auto fail = [&](const QString& reason) { return Error { key.name, reason }; };
    switch (key.type) {
    case Type::Bool: {
        if (value.typeId() == QMetaType::Bool)
            return value;
        const QString text = value.toString().trimmed().toLower();
        if (text == u"true" || text == u"1" || text == u"yes" || text == u"on")
            return QVariant(true);
        if (text == u"false" || text == u"0" || text == u"no" || text == u"off")
            return QVariant(false);
        return fail(QStringLiteral("must be true or false"));
    }
    case Type::Int: {
        bool ok = false;
        const qint64 number = value.toString().trimmed().toLongLong(&ok);
        if (!ok)
            return fail(QStringLiteral("must be a whole number from %1 to %2").arg(key.min).arg(key.max));
        if (number < key.min || number > key.max)
            return fail(QStringLiteral("must be from %1 to %2").arg(key.min).arg(key.max));
        return QVariant::fromValue<qint64>(number);
    }
    case Type::String: {
        if (value.typeId() == QMetaType::QStringList)
            return fail(QStringLiteral("must be one value, not a list (quote it if it has commas)"));
        const QString text = value.toString();
        if (!text.isEmpty() && !key.pattern.isEmpty() && !matchesFully(key.pattern, text))
            return fail(QStringLiteral("must be %1").arg(key.patternText));
        return QVariant(text);
    }
    case Type::StringList: {
        QStringList list = value.typeId() == QMetaType::QStringList ? value.toStringList() : QStringList { value.toString() };
        list.removeAll(QString());
        for (auto& item : list) {
            item = item.trimmed();
            if (!key.pattern.isEmpty() && !matchesFully(key.pattern, item))
                return fail(QStringLiteral("'%1' is not %2").arg(item, key.patternText));
        }
        return QVariant(list);
    }
    case Type::Choice: {
        const QString text = value.toString().trimmed();
        if (!key.choices.contains(text))
            return fail(QStringLiteral("must be one of %1").arg(key.choices.join(QStringLiteral(", "))));
        return QVariant(text);
    }
    }
    return fail(QStringLiteral("unknown type"));
}

Settings::Settings(QString filePath, QObject* parent)
    : Settings(std::move(filePath), migrationLadder(), CurrentVersion, parent)
{ }

Settings::Settings(QString filePath, QList<MigrationStep> ladder, int currentVersion, QObject* parent)
    : QObject(parent)
    , m_filePath(std::move(filePath))
    , m_ladder(std::move(ladder))
    , m_currentVersion(currentVersion)
{
    std::sort(m_ladder.begin(), m_ladder.end(),
        [](const MigrationStep& a, const MigrationStep& b) { return a.fromVersion < b.fromVersion; });
    for (const auto& key : keys())
        m_values.insert(key.name, key.defaultValue);
    m_values.insert(names::MetaVersion, QVariant::fromValue<qint64>(m_currentVersion));
}

QString Settings::defaultFilePath()
{
    return QStandardPaths::writableLocation(QStandardPaths::GenericConfigLocation) + QStringLiteral("/Tessera/tessera.ini");
}

QList<Problem> Settings::load()
{
    m_problems.clear();
    QSettings file(m_filePath, QSettings::IniFormat);
    if (file.status() == QSettings::FormatError)
        m_problems.append({ m_filePath, {}, QStringLiteral("the file is not valid INI; every setting is at its default") });

    // Only a regular file is read as settings and upgraded in place (never /dev/null or a fifo).
    if (QFileInfo(m_filePath).isFile()) {
        bool versionOk = false;
        const int version = file.value(names::MetaVersion, 0).toInt(&versionOk);
        if (!versionOk) {
            m_problems.append({ names::MetaVersion, file.value(names::MetaVersion).toString(),
                QStringLiteral("must be a whole number; treating the file as version 0") });
        }
        const int fileVersion = versionOk ? version : 0;
        if (fileVersion > m_currentVersion) {
            m_problems.append({ names::MetaVersion, QString::number(fileVersion),
                QStringLiteral("written by a newer Tessera (this one knows version %1); reading what it understands")
                    .arg(m_currentVersion) });
        } else if (fileVersion < m_currentVersion) {
            for (const auto& step : m_ladder) {
                if (step.fromVersion >= fileVersion && step.fromVersion < m_currentVersion)
                    step.apply(file);
            }
            file.setValue(names::MetaVersion, m_currentVersion);
            file.sync();
        }
    }

    for (const auto& key : keys()) {
        if (key.name == names::MetaVersion)
            continue;
        if (!file.contains(key.name)) {
            m_values.insert(key.name, key.defaultValue);
            continue;
        }
        const QVariant raw = file.value(key.name);
        auto checked = validate(key, raw);
        if (checked) {
            m_values.insert(key.name, *checked);
        } else {
            m_values.insert(key.name, key.defaultValue);
            m_problems.append({ key.name, displayValue(raw), checked.error().message });
        }
    }
    for (const auto& name : file.allKeys()) {
        if (!findKey(name))
            m_problems.append({ name, displayValue(file.value(name)), QStringLiteral("is not a Tessera setting (a typo?)") });
    }
    return m_problems;
}

QVariant Settings::value(QStringView key) const
{
    const auto it = m_values.constFind(key.toString());
    Q_ASSERT_X(it != m_values.constEnd(), "Settings::value", "key is not in the settings table");
    return it != m_values.constEnd() ? *it : QVariant();
}

Status Settings::set(QStringView name, const QVariant& value)
{
    const Key* key = findKey(name);
    if (!key)
        return Error { name.toString(), QStringLiteral("is not a Tessera setting") };
    auto checked = validate(*key, value);
    if (!checked)
        return checked.error();
    m_values.insert(key->name, *checked);
    return {};
}

Status Settings::save()
{
    const QFileInfo info(m_filePath);
    if (!QDir().mkpath(info.absolutePath()))
        return Error { m_filePath, QStringLiteral("cannot create the folder %1").arg(info.absolutePath()) };

    QSettings file(m_filePath, QSettings::IniFormat);
    file.setValue(names::MetaVersion, m_currentVersion);
    for (const auto& key : keys()) {
        if (key.name != names::MetaVersion)
            file.setValue(key.name, m_values.value(key.name));
    }
    file.sync();
    if (file.status() != QSettings::NoError)
        return Error { m_filePath,
            QStringLiteral("could not write the settings file (is the disk full or the file read-only?)") };
    Q_EMIT changed();
    return {};
}

} // namespace tessera::core::settings
