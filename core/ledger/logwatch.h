#pragma once

#include "../error.h"
#include "loghead.h"

#include <QHash>
#include <QJsonObject>
#include <QMap>
#include <QSet>
#include <QString>

#include <cstdint>
#include <mutex>

namespace tessera::core::ledger {

// What a node keeps of each network's ledger log (docs/LEDGER.md, "Watching the log"): the newest
// head it checked (in DIR/log-heads.json, across restarts), shared by its sessions with the
// network's brokers so that their heads are compared with each other. A head that does not extend
// the kept one breaks the network's log: the evidence goes to DIR/log-evidence/ and the network
// stays broken for this run. Thread-safe: each session calls it from its own thread.
class LogWatch {
public:
    // An empty directory keeps nothing on disk (tests).
    explicit LogWatch(QString directory);

    // The size of the kept head (what a session asks LOG-HEAD `from`); 0 where none is kept.
    std::int64_t keptSize(const QString& network) const;
    std::optional<LogHead> kept(const QString& network) const;

    enum class Seen { Newer, Known, Unchecked, Broken };
    // A broker's LOG-HEAD reply (`head`, `consistency`) to a request `from` the size asked with:
    // Newer (kept now), Known (no larger than the kept head, and consistent with it), Unchecked
    // (the head asked from is no longer known: ask again), or Broken (the error says what broke).
    Result<Seen> observe(const QString& network, const QString& broker, const QJsonObject& reply, std::int64_t from);
    // A broker that says its log is shorter than the kept head (LOG-HEAD refused `from`).
    Status shorter(const QString& network, const QString& broker, const QString& why);

    // What a broker said at WELCOME: its network, and whether it publishes a log (logHeadMs). The
    // first is kept (with the key its heads are signed by); a broker that later names another
    // network, or stops publishing, breaks the network it named first.
    Status announced(const QString& broker, const QString& network, bool logs);

    bool broken(const QString& network) const;
    // Whether this broker showed a broken log (of whichever network).
    bool brokerBroken(const QString& broker) const;
    bool anyBroken() const;
    // Why a network's log broke, the first that did (empty while none did).
    QString whyBroken() const;

private:
    Status breakNetwork(const QString& network, const QString& broker, const QString& why, const QJsonObject& evidence);
    void load();
    void merge(const QJsonObject& kept);
    void save();

    QString m_directory;
    mutable std::mutex m_mutex;
    // Per network: the heads checked lately, by size (a session's request may name an older one).
    QHash<QString, QMap<std::int64_t, LogHead>> m_heads;
    QHash<QString, QString> m_broken;
    QSet<QString> m_brokenBrokers;
    struct Pin {
        QString network;
        QString signer; // empty until its first head
    };
    QHash<QString, Pin> m_pins; // by broker endpoint
};

} // namespace tessera::core::ledger
