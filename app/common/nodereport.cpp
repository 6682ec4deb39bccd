#include "nodereport.h"

#include <core/credits.h>
#include <core/logtail.h>
#include <core/readfile.h>

#include <QDir>
#include <QMap>
#include <QTimeZone>

#include <algorithm>
#include <limits>

namespace tessera::app {

namespace {

// A broker's words, cut: a hostile one must not make the state (pushed 4 times a second) large.
QString cut(const QString& text, qsizetype most)
{
    return text.size() > most ? text.left(most) + QChar(0x2026) : text;
}

// A result as the state lists it: its broker's strings cut, and its newest steps only.
QJsonObject resultJson(const core::ResultEntry& entry)
{
    auto shown = entry;
    shown.jobId = cut(entry.jobId, NodeReport::MaxText / 4);
    shown.detail = cut(entry.detail, NodeReport::MaxText);
    shown.paid = cut(entry.paid, 32);
    shown.history = entry.history.mid(std::max<qsizetype>(0, entry.history.size() - NodeReport::MaxSteps));
    return shown.toJson();
}

// Adds micro-credits, saturating: a broker's "paid" is its own claim, and must not overflow a sum.
void add(std::int64_t& sum, std::int64_t micro)
{
    const auto added = core::Credits::fromMicro(sum).checkedAdd(core::Credits::fromMicro(micro));
    sum = added ? added->micro() : std::numeric_limits<std::int64_t>::max();
}

QJsonValue orNull(const std::optional<double>& value)
{
    return value ? QJsonValue(std::round(*value * 10.0) / 10.0) : QJsonValue(QJsonValue::Null);
}

// The first line of /proc/stat: ticks the machine's CPUs spent busy, and in all.
std::optional<std::pair<std::uint64_t, std::uint64_t>> cpuTicks(const QString& root)
{
    const auto text = core::readFile(QDir(root).filePath(QStringLiteral("proc/stat")));
    if (!text)
        return std::nullopt;
    const QList<QByteArray> fields = text->left(text->indexOf('\n')).simplified().split(' ');
    if (fields.size() < 5 || fields[0] != "cpu")
        return std::nullopt;
    std::uint64_t all = 0, idle = 0;
    for (qsizetype i = 1; i < fields.size() && i <= 8; ++i) {
        const std::uint64_t ticks = fields[i].toULongLong();
        all += ticks;
        if (i == 4 || i == 5) // idle, iowait
            idle += ticks;
    }
    return std::pair { all - idle, all };
}

} // namespace

NodeReport::NodeReport(QString dataDirectory, QList<core::DeviceInfo> devices, QString root)
    : m_dataDirectory(std::move(dataDirectory))
    , m_devices(std::move(devices))
    , m_root(root)
    , m_sensors(std::move(root))
{ }

void NodeReport::refresh(const QDateTime& now, std::int64_t monotonicMs)
{
    m_readings = m_sensors.read(monotonicMs);
    readLoad();
    readResults(now);
}

void NodeReport::readLoad()
{
    const auto ticks = cpuTicks(m_root);
    if (ticks && m_lastTicks && ticks->second > m_lastTicks->second)
        m_load = double(ticks->first - m_lastTicks->first) / double(ticks->second - m_lastTicks->second);
    m_lastTicks = ticks;
}

void NodeReport::readResults(const QDateTime& now)
{
    if (!m_log) {
        auto opened = core::ResultLog::open(QDir(m_dataDirectory).filePath(QStringLiteral("node.sqlite")));
        if (!opened) {
            if (m_resultsError.isEmpty())
                core::LogTail::process().append(QStringLiteral("warning"),
                    QStringLiteral("the control API cannot read the results: %1").arg(opened.error().toString()));
            m_resultsError = opened.error().toString();
            return;
        }
        m_log = std::move(*opened);
    }
    // Earnings count every result kept (the log keeps 1000); the state lists the newest.
    const auto list = m_log->list();
    if (!list) {
        m_resultsError = list.error().toString();
        return;
    }
    m_resultsError.clear();
    m_earnings = earningsOf(*list, now);
    QJsonArray results;
    for (const auto& entry : list->mid(0, Results))
        results.append(resultJson(entry));
    m_results = results;
}

QJsonObject NodeReport::earningsOf(const QList<core::ResultEntry>& results, const QDateTime& now)
{
    const QDate today = now.date();
    QMap<QDate, std::int64_t> byDay; // micro-credits
    QMap<QString, std::int64_t> byJob;
    for (const auto& result : results) {
        const auto paid = core::Credits::parse(result.paid);
        if (!paid || paid->micro() <= 0)
            continue;
        for (const auto& step : result.history) {
            if (step.state != core::NodeResultState::Paid)
                continue;
            add(byJob[result.jobId], paid->micro());
            const QDate day = QDateTime::fromMSecsSinceEpoch(step.at, now.timeZone()).date();
            if (day > today.addDays(-7) && day <= today)
                add(byDay[day], paid->micro());
            break; // paid once
        }
    }
    const auto credits = [](std::int64_t micro) { return core::Credits::fromMicro(micro).toString(); };
    QJsonArray days;
    std::int64_t week = 0;
    for (int back = 6; back >= 0; --back) {
        const QDate day = today.addDays(-back);
        add(week, byDay.value(day));
        days.append(QJsonObject {
            { QStringLiteral("day"), day.toString(Qt::ISODate) }, { QStringLiteral("credits"), credits(byDay.value(day)) } });
    }
    // The jobs that paid most, most first.
    QList<std::pair<std::int64_t, QString>> ranked;
    for (auto it = byJob.cbegin(); it != byJob.cend(); ++it)
        ranked.append({ it.value(), it.key() });
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    QJsonArray jobs;
    for (const auto& [micro, job] : ranked.mid(0, Jobs))
        jobs.append(
            QJsonObject { { QStringLiteral("job"), cut(job, MaxText / 4) }, { QStringLiteral("credits"), credits(micro) } });
    return { { QStringLiteral("today"), credits(byDay.value(today)) }, { QStringLiteral("week"), credits(week) },
        { QStringLiteral("days"), days }, { QStringLiteral("jobs"), jobs } };
}

QJsonArray NodeReport::devices() const
{
    QJsonArray devices;
    for (const auto& device : m_devices) {
        QJsonObject object { { QStringLiteral("id"), core::deviceIdOf(device) },
            { QStringLiteral("kind"), core::nameOf(device.kind) }, { QStringLiteral("name"), device.name },
            { QStringLiteral("usable"), device.usable } };
        if (!device.usable)
            object.insert(QStringLiteral("why"), device.unusableReason);
        const bool cpu = device.kind == core::DeviceInfo::Kind::Cpu;
        object.insert(QStringLiteral("load"), cpu && m_load ? orNull(*m_load * 100.0) : QJsonValue(QJsonValue::Null));
        object.insert(QStringLiteral("temperatureC"),
            cpu ? orNull(m_readings.cpuTemperatureC)
                : orNull(device.temperatureCelsius >= 0 ? std::optional<double>(device.temperatureCelsius) : std::nullopt));
        object.insert(QStringLiteral("watts"),
            cpu ? orNull(m_readings.cpuWatts)
                : orNull(device.powerWatts >= 0 ? std::optional<double>(device.powerWatts) : std::nullopt));
        devices.append(object);
    }
    return devices;
}

QJsonArray NodeReport::log() const
{
    QJsonArray lines;
    for (const auto& line : core::LogTail::process().last(LogLines))
        lines.append(QJsonObject { { QStringLiteral("at"), qint64(line.at) }, { QStringLiteral("level"), line.level },
            { QStringLiteral("text"), line.text } });
    return lines;
}

} // namespace tessera::app
