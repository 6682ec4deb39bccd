#include "logwatch.h"

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QLockFile>
#include <QLoggingCategory>
#include <QSaveFile>

namespace tessera::core::ledger {

Q_LOGGING_CATEGORY(lcLogWatch, "tessera.node.log")

namespace {

constexpr int KeptPerNetwork = 64; // heads kept in memory per network, for requests in flight

} // namespace

LogWatch::LogWatch(QString directory)
    : m_directory(std::move(directory))
{
    load();
}

void LogWatch::load()
{
    if (m_directory.isEmpty())
        return;
    QFile file(QDir(m_directory).filePath(QStringLiteral("log-heads.json")));
    if (file.open(QIODevice::ReadOnly))
        merge(QJsonDocument::fromJson(file.readAll()).object());
}

void LogWatch::merge(const QJsonObject& kept)
{
    // log-heads.json: {"heads": {NETWORK: head}, "brokers": {ENDPOINT: {"network", "signer"}}}; what
    // this run knows wins over the file, a larger head over a smaller.
    const QJsonObject heads = kept.value(QStringLiteral("heads")).toObject();
    for (auto it = heads.begin(); it != heads.end(); ++it) {
        auto head = LogHead::read(it.value().toObject());
        if (!head || head->network != it.key()) {
            qCWarning(lcLogWatch).noquote() << "log-heads.json: the head kept for" << it.key() << "does not hold; ignored";
            continue;
        }
        auto& known = m_heads[head->network];
        if (known.isEmpty() || head->size > known.lastKey())
            known.insert(head->size, *head);
    }
    const QJsonObject brokers = kept.value(QStringLiteral("brokers")).toObject();
    for (auto it = brokers.begin(); it != brokers.end(); ++it) {
        if (!m_pins.contains(it.key()))
            m_pins.insert(it.key(),
                { it->toObject().value(QStringLiteral("network")).toString(),
                    it->toObject().value(QStringLiteral("signer")).toString() });
    }
}

void LogWatch::save()
{
    if (m_directory.isEmpty())
        return;
    // Another process of this data folder (the app beside tessera-node) may keep heads too: its
    // file is read again and merged under a lock, so that neither drops what the other kept.
    const QString path = QDir(m_directory).filePath(QStringLiteral("log-heads.json"));
    QLockFile lock(path + QStringLiteral(".lock"));
    if (!lock.tryLock(2'000)) {
        qCWarning(lcLogWatch).noquote() << "cannot lock" << lock.error() << path;
        return;
    }
    load();
    QJsonObject heads;
    for (auto it = m_heads.cbegin(); it != m_heads.cend(); ++it) {
        if (!it->isEmpty())
            heads.insert(it.key(), it->last().document);
    }
    QJsonObject brokers;
    for (auto it = m_pins.cbegin(); it != m_pins.cend(); ++it)
        brokers.insert(
            it.key(), QJsonObject { { QStringLiteral("network"), it->network }, { QStringLiteral("signer"), it->signer } });
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)
        || file.write(
               QJsonDocument(QJsonObject { { QStringLiteral("heads"), heads }, { QStringLiteral("brokers"), brokers } }).toJson())
            < 0
        || !file.commit())
        qCWarning(lcLogWatch).noquote() << "cannot write" << file.fileName();
}

Status LogWatch::announced(const QString& broker, const QString& network, bool logs)
{
    const std::lock_guard lock(m_mutex);
    const auto pin = m_pins.constFind(broker);
    if (pin == m_pins.cend()) {
        if (!network.isEmpty() && logs) {
            m_pins.insert(broker, { network, {} });
            save();
        }
        return {};
    }
    if (network != pin->network)
        return breakNetwork(pin->network, broker,
            QStringLiteral("it now names another network (%1) than the one whose log it signed (a fresh start hides a "
                           "rewritten history)")
                .arg(network.isEmpty() ? QStringLiteral("none") : network),
            {});
    if (!logs)
        return breakNetwork(pin->network, broker, QStringLiteral("it no longer publishes its ledger's log"), {});
    return {};
}

bool LogWatch::brokerBroken(const QString& broker) const
{
    const std::lock_guard lock(m_mutex);
    return m_brokenBrokers.contains(broker);
}

std::int64_t LogWatch::keptSize(const QString& network) const
{
    const std::lock_guard lock(m_mutex);
    const auto heads = m_heads.constFind(network);
    return heads == m_heads.cend() || heads->isEmpty() ? 0 : heads->lastKey();
}

std::optional<LogHead> LogWatch::kept(const QString& network) const
{
    const std::lock_guard lock(m_mutex);
    const auto heads = m_heads.constFind(network);
    if (heads == m_heads.cend() || heads->isEmpty())
        return std::nullopt;
    return heads->last();
}

Result<LogWatch::Seen> LogWatch::observe(
    const QString& network, const QString& broker, const QJsonObject& reply, std::int64_t from)
{
    const std::lock_guard lock(m_mutex);
    if (m_broken.contains(network))
        return Seen::Broken;
    auto head = LogHead::read(reply.value(QStringLiteral("head")).toObject());
    if (!head) {
        if (auto status
            = breakNetwork(network, broker, QStringLiteral("its head does not hold (%1)").arg(head.error().message), reply);
            !status)
            return status.error();
        return Seen::Broken;
    }
    // A broker signs its heads with one key: another key's head is no word of its own.
    if (auto pin = m_pins.find(broker); pin != m_pins.end()) {
        if (pin->signer.isEmpty())
            pin->signer = head->signer;
        else if (pin->signer != head->signer) {
            if (auto status = breakNetwork(network, broker,
                    QStringLiteral("its head is signed by %1, not by its key %2").arg(head->signer, pin->signer), reply);
                !status)
                return status.error();
            return Seen::Broken;
        }
    }
    auto& heads = m_heads[network];
    const LogHead* base = nullptr;
    if (from == 0 && !heads.isEmpty())
        return Seen::Unchecked; // asked before a head was kept: nothing to check it against
    if (from > 0) {
        const auto asked = heads.constFind(from);
        if (asked == heads.cend())
            return Seen::Unchecked;
        base = &*asked;
    }
    auto proof = proofFromJson(reply.value(QStringLiteral("consistency")));
    Status extends = !proof ? Status(proof.error()) : base ? checkExtends(*base, *head, *proof) : Status {};
    if (extends && head->network != network)
        extends
            = Error { QStringLiteral("head"), QStringLiteral("of network %1, not the session's %2").arg(head->network, network) };
    // Two heads of one size the network signed must be one (a split view is shown to some only).
    if (const auto same = heads.constFind(head->size); extends && same != heads.cend() && same->root != head->root)
        extends = Error { QStringLiteral("head"),
            QStringLiteral("two heads of %1 entries with different roots (a split view)").arg(head->size) };
    if (!extends) {
        QJsonObject evidence { { QStringLiteral("shown"), reply } };
        if (base)
            evidence.insert(QStringLiteral("kept"), base->document);
        if (auto status = breakNetwork(network, broker, extends.error().message, evidence); !status)
            return status.error();
        return Seen::Broken;
    }
    const bool newer = heads.isEmpty() || head->size > heads.lastKey();
    heads.insert(head->size, *head);
    while (heads.size() > KeptPerNetwork)
        heads.erase(heads.begin());
    if (newer)
        save();
    return newer ? Seen::Newer : Seen::Known;
}

Status LogWatch::shorter(const QString& network, const QString& broker, const QString& why)
{
    const std::lock_guard lock(m_mutex);
    if (m_broken.contains(network))
        return {};
    const auto heads = m_heads.constFind(network);
    QJsonObject evidence { { QStringLiteral("refusal"), why } };
    if (heads != m_heads.cend() && !heads->isEmpty())
        evidence.insert(QStringLiteral("kept"), heads->last().document);
    return breakNetwork(
        network, broker, QStringLiteral("its log is shorter than a head the network signed (%1)").arg(why), evidence);
}

Status LogWatch::breakNetwork(const QString& network, const QString& broker, const QString& why, const QJsonObject& evidence)
{
    m_broken.insert(network, QStringLiteral("%1: %2").arg(broker, why));
    m_brokenBrokers.insert(broker);
    // Said once the evidence is on disk: whoever reads the line finds the file.
    auto say = [&] {
        qCCritical(lcLogWatch).noquote() << "LEDGER LOG BROKEN: network" << network << "broker" << broker << why
                                         << "- no more work for this network; evidence in log-evidence/";
    };
    if (m_directory.isEmpty()) {
        say();
        return {};
    }
    QDir folder(QDir(m_directory).filePath(QStringLiteral("log-evidence")));
    if (!folder.mkpath(QStringLiteral("."))) {
        say();
        return Error { folder.path(), QStringLiteral("cannot make the evidence folder") };
    }
    QJsonObject document = evidence;
    document.insert(QStringLiteral("network"), network);
    document.insert(QStringLiteral("broker"), broker);
    document.insert(QStringLiteral("why"), why);
    document.insert(QStringLiteral("at"), QDateTime::currentDateTimeUtc().toString(Qt::ISODateWithMs));
    QSaveFile file(folder.filePath(QStringLiteral("%1-%2.json").arg(network).arg(QDateTime::currentMSecsSinceEpoch())));
    const bool written = file.open(QIODevice::WriteOnly) && file.write(QJsonDocument(document).toJson()) >= 0 && file.commit();
    say();
    if (!written)
        return Error { file.fileName(), QStringLiteral("cannot write the evidence") };
    return {};
}

bool LogWatch::broken(const QString& network) const
{
    const std::lock_guard lock(m_mutex);
    return m_broken.contains(network);
}

bool LogWatch::anyBroken() const
{
    const std::lock_guard lock(m_mutex);
    return !m_broken.isEmpty();
}

QString LogWatch::whyBroken() const
{
    const std::lock_guard lock(m_mutex);
    return m_broken.isEmpty() ? QString()
                              : QStringLiteral("network %1, broker %2").arg(m_broken.cbegin().key(), m_broken.cbegin().value());
}

} // namespace tessera::core::ledger
