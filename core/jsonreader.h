#pragma once

#include "enumnames.h"
#include "error.h"
#include "hash.h"

#include <QJsonArray>
#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <optional>

namespace tessera::core {

enum class Presence { Required, Optional };

// Reads fields of a JSON object with type and range checks. The first problem is kept with the
// dotted path of the field ("training.batchSize"), so a job owner sees exactly what to fix.
// Later reads after an error return fallbacks and keep the first error.
class JsonReader {
public:
    explicit JsonReader(QJsonObject object, QString path = {});

    // Every string is at most MaxStringLength characters (docs/PROTOCOL.md, "Limits"), a list of
    // strings at most MaxListLength long; text() reads one with a tighter limit.
    static constexpr qsizetype MaxStringLength = 4096;
    static constexpr qsizetype MaxListLength = 1024;
    QString string(QStringView key, Presence presence = Presence::Required, const QString& fallback = {});
    QString text(QStringView key, qsizetype maxLength, Presence presence = Presence::Required);
    std::int64_t integer(
        QStringView key, std::int64_t min, std::int64_t max, Presence presence = Presence::Required, std::int64_t fallback = 0);
    double number(QStringView key, double min, double max, Presence presence = Presence::Required, double fallback = 0.0);
    bool boolean(QStringView key, Presence presence = Presence::Required, bool fallback = false);
    // A string that names a value of an enum with a name table (core/enumnames.h): the value, or
    // `fallback` and a failure that lists the names ("'zip' is not a compression (choose none or
    // int8)"); an absent optional one reads as `fallback`.
    template<NamedEnum Enum>
    Enum named(QStringView key, const QString& what, Presence presence = Presence::Required, Enum fallback = Enum {})
    {
        const QString name = string(key, presence, nameOf(fallback));
        if (const auto value = fromName<Enum>(name))
            return *value;
        if (ok())
            fail(key, QStringLiteral("'%1' is not %2 (choose %3)").arg(name, what, alternatives(namesOf<Enum>())));
        return fallback;
    }
    // "a, b or c".
    static QString alternatives(const QStringList& names);
    // A SHA-256 digest written as 64 hex digits; an absent optional one reads as the null digest.
    Digest digest(QStringView key, Presence presence = Presence::Required);
    QStringList stringList(QStringView key, Presence presence = Presence::Required);
    QList<std::int64_t> integerList(
        QStringView key, std::int64_t min, std::int64_t max, qsizetype maxCount, Presence presence = Presence::Required);
    QList<double> numberList(QStringView key, qsizetype maxCount, Presence presence = Presence::Required);
    QList<Digest> digestList(QStringView key, qsizetype maxCount, Presence presence = Presence::Required);
    QList<JsonReader> objectList(QStringView key, qsizetype maxCount, Presence presence = Presence::Required);
    // A nested object; an absent optional object reads as empty.
    JsonReader object(QStringView key, Presence presence = Presence::Required);

    bool has(QStringView key) const { return m_object.contains(key); }
    // Unknown keys are usually typos ("learningRate" for "lr"); say so rather than ignore them.
    void allowOnly(const QStringList& known);
    // Records a problem found by the caller (a cross-field rule) against a field of this object.
    void fail(QStringView key, const QString& message);

    QString pathOf(QStringView key) const;
    bool ok() const { return !m_error->has_value(); }
    Status status() const;

private:
    JsonReader(QJsonObject object, QString path, std::shared_ptr<std::optional<Error>> error);
    bool present(QStringView key, Presence presence);
    // The array under key, checked for its length; the elements are held as fields named "key[i]"
    // of a scratch object so that element errors carry their index in the path.
    std::optional<JsonReader> elements(
        QStringView key, qsizetype maxCount, Presence presence, const QString& what, QStringList* itemKeys);

    QJsonObject m_object;
    QString m_path;
    // Shared with nested readers so that the first error anywhere in the document wins.
    std::shared_ptr<std::optional<Error>> m_error;
};

// Parses text as one JSON object, or says where the syntax is broken.
Result<QJsonObject> parseJsonObject(const QByteArray& text);

} // namespace tessera::core
