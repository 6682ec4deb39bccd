#include "jsonreader.h"

#include <QJsonDocument>
#include <QJsonParseError>

#include <cmath>
#include <limits>

namespace tessera::core {

namespace {

// JSON numbers are doubles: integers beyond 2^53 cannot be represented exactly.
constexpr double MaxExactInteger = 9007199254740992.0;

QString typeName(const QJsonValue& value)
{
    switch (value.type()) {
    case QJsonValue::Null:
        return QStringLiteral("null");
    case QJsonValue::Bool:
        return QStringLiteral("a boolean");
    case QJsonValue::Double:
        return QStringLiteral("a number");
    case QJsonValue::String:
        return QStringLiteral("a string");
    case QJsonValue::Array:
        return QStringLiteral("an array");
    case QJsonValue::Object:
        return QStringLiteral("an object");
    case QJsonValue::Undefined:
        break;
    }
    return QStringLiteral("missing");
}

} // namespace

JsonReader::JsonReader(QJsonObject object, QString path)
    : JsonReader(std::move(object), std::move(path), std::make_shared<std::optional<Error>>())
{ }

JsonReader::JsonReader(QJsonObject object, QString path, std::shared_ptr<std::optional<Error>> error)
    : m_object(std::move(object))
    , m_path(std::move(path))
    , m_error(std::move(error))
{ }

QString JsonReader::pathOf(QStringView key) const
{
    return m_path.isEmpty() ? key.toString() : m_path + u'.' + key.toString();
}

void JsonReader::fail(QStringView key, const QString& message)
{
    if (!m_error->has_value())
        *m_error = Error { pathOf(key), message };
}

Status JsonReader::status() const
{
    if (m_error->has_value())
        return **m_error;
    return {};
}

bool JsonReader::present(QStringView key, Presence presence)
{
    if (!ok())
        return false;
    const auto value = m_object.value(key);
    if (value.isUndefined() || value.isNull()) {
        if (presence == Presence::Required)
            fail(key, QStringLiteral("is required"));
        return false;
    }
    return true;
}

QString JsonReader::alternatives(const QStringList& names)
{
    if (names.size() < 2)
        return names.join(QString());
    return names.mid(0, names.size() - 1).join(QStringLiteral(", ")) + QStringLiteral(" or ") + names.last();
}

QString JsonReader::string(QStringView key, Presence presence, const QString& fallback)
{
    if (!present(key, presence))
        return fallback;
    const auto value = m_object.value(key);
    if (!value.isString()) {
        fail(key, QStringLiteral("must be a string, not %1").arg(typeName(value)));
        return fallback;
    }
    auto text = value.toString();
    if (text.size() > MaxStringLength) {
        fail(key, QStringLiteral("at most %1 characters, not %2").arg(MaxStringLength).arg(text.size()));
        return fallback;
    }
    return text;
}

QString JsonReader::text(QStringView key, qsizetype maxLength, Presence presence)
{
    auto text = string(key, presence);
    if (text.size() > maxLength) {
        fail(key, QStringLiteral("at most %1 characters, not %2").arg(maxLength).arg(text.size()));
        return {};
    }
    return text;
}

std::int64_t JsonReader::integer(QStringView key, std::int64_t min, std::int64_t max, Presence presence, std::int64_t fallback)
{
    if (!present(key, presence))
        return fallback;
    const auto value = m_object.value(key);
    const double number = value.toDouble();
    if (!value.isDouble() || std::trunc(number) != number || std::fabs(number) > MaxExactInteger) {
        fail(key,
            QStringLiteral("must be a whole number, not %1")
                .arg(value.isDouble() ? QString::number(number, 'g', 17) : typeName(value)));
        return fallback;
    }
    const auto integer = static_cast<std::int64_t>(number);
    if (integer < min || integer > max) {
        fail(key, QStringLiteral("must be between %1 and %2, not %3").arg(min).arg(max).arg(integer));
        return fallback;
    }
    return integer;
}

double JsonReader::number(QStringView key, double min, double max, Presence presence, double fallback)
{
    if (!present(key, presence))
        return fallback;
    const auto value = m_object.value(key);
    if (!value.isDouble()) {
        fail(key, QStringLiteral("must be a number, not %1").arg(typeName(value)));
        return fallback;
    }
    const double number = value.toDouble();
    if (!std::isfinite(number) || number < min || number > max) {
        fail(key, QStringLiteral("must be between %1 and %2, not %3").arg(min).arg(max).arg(number));
        return fallback;
    }
    return number;
}

bool JsonReader::boolean(QStringView key, Presence presence, bool fallback)
{
    if (!present(key, presence))
        return fallback;
    const auto value = m_object.value(key);
    if (!value.isBool()) {
        fail(key, QStringLiteral("must be true or false, not %1").arg(typeName(value)));
        return fallback;
    }
    return value.toBool();
}

Digest JsonReader::digest(QStringView key, Presence presence)
{
    const QString hex = string(key, presence);
    if (hex.isEmpty()) {
        if (ok() && presence == Presence::Required)
            fail(key, QStringLiteral("is required"));
        return {};
    }
    auto parsed = Digest::fromHex(hex);
    if (!parsed) {
        fail(key, parsed.error().message);
        return {};
    }
    return *parsed;
}

QStringList JsonReader::stringList(QStringView key, Presence presence)
{
    QStringList list;
    if (!present(key, presence))
        return list;
    const auto value = m_object.value(key);
    if (!value.isArray()) {
        fail(key, QStringLiteral("must be an array of strings, not %1").arg(typeName(value)));
        return list;
    }
    const auto array = value.toArray();
    if (array.size() > MaxListLength) {
        fail(key, QStringLiteral("at most %1 items, not %2").arg(MaxListLength).arg(array.size()));
        return list;
    }
    for (qsizetype i = 0; i < array.size(); ++i) {
        if (array.at(i).isString() && array.at(i).toString().size() > MaxStringLength) {
            fail(QStringLiteral("%1[%2]").arg(key).arg(i), QStringLiteral("at most %1 characters").arg(MaxStringLength));
            return {};
        }
        if (!array.at(i).isString()) {
            fail(QStringLiteral("%1[%2]").arg(key).arg(i), QStringLiteral("must be a string, not %1").arg(typeName(array.at(i))));
            return {};
        }
        list.append(array.at(i).toString());
    }
    return list;
}

std::optional<JsonReader> JsonReader::elements(
    QStringView key, qsizetype maxCount, Presence presence, const QString& what, QStringList* itemKeys)
{
    if (!present(key, presence))
        return std::nullopt;
    const auto value = m_object.value(key);
    if (!value.isArray()) {
        fail(key, QStringLiteral("must be an array of %1, not %2").arg(what, typeName(value)));
        return std::nullopt;
    }
    const auto array = value.toArray();
    if (array.size() > maxCount) {
        fail(key, QStringLiteral("may have at most %1 entries, not %2").arg(maxCount).arg(array.size()));
        return std::nullopt;
    }
    QJsonObject holder;
    for (qsizetype i = 0; i < array.size(); ++i) {
        const QString itemKey = QStringLiteral("%1[%2]").arg(key).arg(i);
        holder.insert(itemKey, array.at(i));
        itemKeys->append(itemKey);
    }
    return JsonReader(holder, m_path, m_error);
}

QList<std::int64_t> JsonReader::integerList(
    QStringView key, std::int64_t min, std::int64_t max, qsizetype maxCount, Presence presence)
{
    QList<std::int64_t> list;
    QStringList keys;
    auto items = elements(key, maxCount, presence, QStringLiteral("whole numbers"), &keys);
    for (const auto& itemKey : keys)
        list.append(items->integer(itemKey, min, max));
    return ok() ? list : QList<std::int64_t> {};
}

QList<double> JsonReader::numberList(QStringView key, qsizetype maxCount, Presence presence)
{
    QList<double> list;
    QStringList keys;
    auto items = elements(key, maxCount, presence, QStringLiteral("numbers"), &keys);
    for (const auto& itemKey : keys)
        list.append(items->number(itemKey, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max()));
    return ok() ? list : QList<double> {};
}

QList<Digest> JsonReader::digestList(QStringView key, qsizetype maxCount, Presence presence)
{
    QList<Digest> list;
    QStringList keys;
    auto items = elements(key, maxCount, presence, QStringLiteral("SHA-256 digests"), &keys);
    for (const auto& itemKey : keys)
        list.append(items->digest(itemKey));
    return ok() ? list : QList<Digest> {};
}

QList<JsonReader> JsonReader::objectList(QStringView key, qsizetype maxCount, Presence presence)
{
    QList<JsonReader> list;
    QStringList keys;
    auto items = elements(key, maxCount, presence, QStringLiteral("objects"), &keys);
    for (const auto& itemKey : keys)
        list.append(items->object(itemKey));
    return ok() ? list : QList<JsonReader> {};
}

JsonReader JsonReader::object(QStringView key, Presence presence)
{
    if (!present(key, presence))
        return JsonReader(QJsonObject {}, pathOf(key), m_error);
    const auto value = m_object.value(key);
    if (!value.isObject()) {
        fail(key, QStringLiteral("must be an object, not %1").arg(typeName(value)));
        return JsonReader(QJsonObject {}, pathOf(key), m_error);
    }
    return JsonReader(value.toObject(), pathOf(key), m_error);
}

void JsonReader::allowOnly(const QStringList& known)
{
    for (auto it = m_object.constBegin(); it != m_object.constEnd(); ++it) {
        if (!known.contains(it.key())) {
            fail(it.key(), QStringLiteral("is not a known field (known here: %1)").arg(known.join(QStringLiteral(", "))));
            return;
        }
    }
}

Result<QJsonObject> parseJsonObject(const QByteArray& text)
{
    QJsonParseError parseError;
    const auto document = QJsonDocument::fromJson(text, &parseError);
    if (parseError.error != QJsonParseError::NoError) {
        const auto upTo = text.left(parseError.offset);
        const auto line = upTo.count('\n') + 1;
        const auto column = parseError.offset - (upTo.lastIndexOf('\n') + 1) + 1;
        return Error { {},
            QStringLiteral("invalid JSON at line %1, column %2: %3").arg(line).arg(column).arg(parseError.errorString()) };
    }
    if (!document.isObject())
        return Error { {}, QStringLiteral("the document must be a JSON object") };
    return document.object();
}

} // namespace tessera::core
