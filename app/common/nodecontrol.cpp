#include "nodecontrol.h"

#include "nodereport.h"

#include <compute/supervisor/computethread.h>
#include <control/controlclient.h>
#include <control/controlserver.h>
#include <core/logtail.h>
#include <core/privatefile.h>
#include <core/settings/settings.h>
#include <core/settings/settingskeys.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QHostInfo>
#include <QJsonArray>
#include <QJsonObject>
#include <QSettings>
#include <QThread>
#include <QTimer>

namespace tessera::app {

namespace {

namespace names = core::settings::names;
using ThreadState = compute::ComputeThread::State;
constexpr qint64 MaxSnoozeMinutes = 7 * 24 * 60;

QJsonValue shardJson(const std::optional<compute::ShardProgress>& shard)
{
    if (!shard)
        return QJsonValue::Null;
    QJsonObject object { { QStringLiteral("job"), shard->jobId }, { QStringLiteral("round"), qint64(shard->round) },
        { QStringLiteral("shard"), qint64(shard->shard) }, { QStringLiteral("step"), qint64(shard->step) },
        { QStringLiteral("steps"), qint64(shard->steps) }, { QStringLiteral("loss"), shard->loss },
        { QStringLiteral("etaMs"), qint64(shard->etaMs) } };
    if (shard->stages > 0) {
        object.insert(QStringLiteral("stage"), qint64(shard->stage));
        object.insert(QStringLiteral("stages"), qint64(shard->stages));
    }
    return object;
}

QJsonValue whenJson(const std::optional<QDateTime>& at)
{
    return at ? QJsonValue(at->toMSecsSinceEpoch()) : QJsonValue(QJsonValue::Null);
}

QString snoozedReason(const QDateTime& until)
{
    return QStringLiteral("snoozed until %1").arg(until.toString(QStringLiteral("yyyy-MM-dd HH:mm")));
}

core::Result<QDateTime> snoozeUntil(const QJsonObject& body, const QDateTime& now)
{
    const auto why = core::Error { QStringLiteral("snooze"),
        QStringLiteral("give {\"minutes\": 1 to %1} or {\"until\": ms since the epoch, within 7 days}").arg(MaxSnoozeMinutes) };
    if (body.contains(QStringLiteral("minutes")) == body.contains(QStringLiteral("until")))
        return why;
    if (body.contains(QStringLiteral("minutes"))) {
        const double minutes = body.value(QStringLiteral("minutes")).toDouble(-1);
        if (minutes < 1 || minutes > MaxSnoozeMinutes || minutes != std::floor(minutes))
            return why;
        return now.addSecs(qint64(minutes) * 60);
    }
    const double at = body.value(QStringLiteral("until")).toDouble(-1);
    const double nowMs = double(now.toMSecsSinceEpoch());
    if (at != std::floor(at) || at <= nowMs || at > nowMs + double(MaxSnoozeMinutes) * 60'000.0)
        return why; // checked as a double first: a huge one must not reach qint64
    return QDateTime::fromMSecsSinceEpoch(qint64(at));
}

core::Status checkLimits(const QJsonObject& body, bool desktop, NodeControl::Action& action)
{
    const QStringList& allowed = NodeControl::limitKeys(desktop);
    if (body.isEmpty())
        return core::Error { QStringLiteral("limits"),
            QStringLiteral("give one or more of %1 with their values").arg(allowed.join(QStringLiteral(", "))) };
    for (auto it = body.begin(); it != body.end(); ++it) {
        if (!allowed.contains(it.key()))
            return core::Error { it.key().left(100),
                QStringLiteral("is not a limit the control API sets here (it sets %1)").arg(allowed.join(QStringLiteral(", "))) };
        if (!it.value().isDouble() && !it.value().isString() && !it.value().isBool())
            return core::Error { it.key(), QStringLiteral("must be a number, a string or true or false") };
        auto valid = core::settings::validate(*core::settings::findKey(it.key()), it.value().toVariant());
        if (!valid)
            return valid.error();
        action.limits.append({ it.key(), *valid });
    }
    return {};
}

// A request's action, checked (docs/CONTROL.md, "Actions").
core::Result<NodeControl::Action> parseAction(
    const QString& name, const QJsonObject& body, const NodeControl::Identity& identity, bool desktop)
{
    NodeControl::Action action;
    action.name = name;
    if (name == u"snooze") {
        auto until = snoozeUntil(body, QDateTime::currentDateTime());
        if (!until)
            return until.error();
        action.until = *until;
    } else if (name == u"device") {
        action.device = body.value(QStringLiteral("device")).toString();
        const bool known = std::any_of(identity.devices.begin(), identity.devices.end(),
            [&](const core::DeviceInfo& device) { return device.usable && core::deviceIdOf(device) == action.device; });
        if (!known || !body.value(QStringLiteral("paused")).isBool())
            return core::Error { QStringLiteral("device"),
                QStringLiteral("give {\"device\": one of this node's usable devices (as cpu:0), \"paused\": true or false}") };
        action.paused = body.value(QStringLiteral("paused")).toBool();
    } else if (name == u"limits") {
        if (auto checked = checkLimits(body, desktop, action); !checked)
            return checked.error();
    } else if (!body.isEmpty()) {
        return core::Error { name, QStringLiteral("takes no arguments") };
    }
    return action;
}

// What the API says of the node (docs/CONTROL.md, "The state"). For tessera-node it is the API's own
// word (paused, snoozed, finishing, devices) and the compute thread's signals; for the desktop app,
// what its owner publishes, with the last action said at once until the owner has carried it out.
// On the control thread.
struct Status {
    NodeControl::Identity identity;
    bool desktop = false;
    // tessera-node's own
    bool paused = false;
    std::optional<QDateTime> snoozedUntil;
    bool finishThenPause = false;
    QStringList pausedDevices;
    QJsonObject limits;
    ThreadState thread = ThreadState::Idle;
    std::optional<compute::ShardProgress> shard;
    // the desktop app's
    std::optional<NodeControl::Published> published;
    std::optional<NodeControl::Action> pending; // taken, not yet published
    std::uint64_t actions = 0;

    bool allDevicesPaused() const
    {
        int usable = 0, paused = 0;
        for (const auto& device : identity.devices) {
            usable += device.usable ? 1 : 0;
            paused += device.usable && pausedDevices.contains(core::deviceIdOf(device)) ? 1 : 0;
        }
        return usable > 0 && paused == usable;
    }
    bool snoozed(const QDateTime& now) const { return snoozedUntil && *snoozedUntil > now; }
    // tessera-node: whether the compute thread must hold.
    bool holds(const QDateTime& now) const { return paused || snoozed(now) || allDevicesPaused(); }

    // tessera-node's state, in words.
    std::pair<QString, QString> nodeState(const QDateTime& now) const
    {
        if (snoozed(now))
            return { QStringLiteral("snoozed"), snoozedReason(*snoozedUntil) };
        if (paused)
            return { QStringLiteral("paused"), QStringLiteral("paused through the control API") };
        if (allDevicesPaused())
            return { QStringLiteral("paused"), QStringLiteral("every device is paused") };
        if (thread == ThreadState::Paused)
            return { QStringLiteral("paused"), QStringLiteral("paused") };
        if (thread == ThreadState::Working)
            return { QStringLiteral("working"),
                finishThenPause ? QStringLiteral("finishing this shard, then pausing") : QStringLiteral("training a shard") };
        return { QStringLiteral("idle"), QStringLiteral("waiting for work") };
    }
    NodeControl::Published current(const QDateTime& now) const;
    QJsonObject toJson(const NodeReport& report) const;
};

// The desktop app's last word, with an action it has not yet carried out said as it will be.
NodeControl::Published pendingOver(NodeControl::Published state, const NodeControl::Action& action)
{
    if (action.name == u"pause") {
        state.state = QStringLiteral("paused");
        state.reason = QStringLiteral("paused through the control API");
        state.paused = true;
    } else if (action.name == u"resume") {
        if (state.paused) {
            state.state = QStringLiteral("waiting");
            state.reason = QStringLiteral("resuming");
        }
        state.paused = false;
        state.snoozedUntil.reset();
        state.finishThenPause = false;
    } else if (action.name == u"snooze") {
        state.state = QStringLiteral("snoozed");
        state.reason = snoozedReason(action.until);
        state.paused = true;
        state.snoozedUntil = action.until;
    } else if (action.name == u"finish") {
        state.finishThenPause = true;
    } else if (action.name == u"device") {
        state.pausedDevices.removeAll(action.device);
        if (action.paused)
            state.pausedDevices.append(action.device);
    } else if (action.name == u"limits") {
        for (const auto& [key, value] : action.limits)
            state.limits.insert(key, QJsonValue::fromVariant(value));
    }
    return state;
}

NodeControl::Published Status::current(const QDateTime& now) const
{
    if (desktop) {
        NodeControl::Published state;
        if (published)
            state = *published;
        else
            std::tie(state.state, state.reason) = std::pair { QStringLiteral("waiting"), QStringLiteral("starting") };
        return pending && state.actionsTaken < pending->sequence ? pendingOver(state, *pending) : state;
    }
    const auto [name, reason] = nodeState(now);
    NodeControl::Published state;
    state.state = name;
    state.reason = reason;
    state.paused = holds(now);
    state.shard = shard;
    state.snoozedUntil = snoozed(now) ? snoozedUntil : std::nullopt;
    state.finishThenPause = finishThenPause;
    state.pausedDevices = pausedDevices;
    state.limits = limits;
    state.stake = QJsonValue::Null;
    return state;
}

QJsonObject Status::toJson(const NodeReport& report) const
{
    const auto state = current(QDateTime::currentDateTime());
    QJsonArray devices = report.devices();
    for (auto&& device : devices) {
        auto object = device.toObject();
        object.insert(QStringLiteral("paused"), state.pausedDevices.contains(object.value(QStringLiteral("id")).toString()));
        device = object;
    }
    return { { QStringLiteral("version"), 1 }, { QStringLiteral("node"), identity.nodeId },
        { QStringLiteral("name"), identity.name }, { QStringLiteral("state"), state.state },
        { QStringLiteral("reason"), state.reason }, { QStringLiteral("paused"), state.paused },
        { QStringLiteral("snoozedUntil"), whenJson(state.snoozedUntil) },
        { QStringLiteral("finishThenPause"), state.finishThenPause }, { QStringLiteral("shard"), shardJson(state.shard) },
        { QStringLiteral("devices"), devices }, { QStringLiteral("limits"), state.limits },
        { QStringLiteral("earnings"), report.earnings() }, { QStringLiteral("stake"), state.stake },
        { QStringLiteral("results"), report.results() }, { QStringLiteral("log"), report.log() } };
}

} // namespace

const QStringList& NodeControl::limitKeys(bool desktop)
{
    static const QStringList node { names::ComputeMaxThreads, names::ComputeCpuPercent, names::ComputeMaxTemperatureC };
    static const QStringList app = node
        + QStringList { names::ComputeCpuPercentWhileInUse, names::ComputeSchedule, names::ComputeRunOnlyWhenIdle,
              names::ComputeIdleMinutes, names::ComputePauseOnBattery };
    return desktop ? app : node;
}

struct NodeControl::Private {
    QThread thread;
    Status status;
    std::unique_ptr<NodeReport> report;
    QElapsedTimer sinceStart;
    qint64 refreshedAt = -1;
    std::unique_ptr<control::ControlServer> server;
    quint16 port = 0;
    QHostAddress bind;
    QByteArray fingerprint; // of its TLS certificate; empty without TLS
    QString portFile; // removed when the API stops

    // The report, read again when it is older than NodeReport::RefreshMs.
    const NodeReport& freshReport()
    {
        if (refreshedAt < 0 || sinceStart.elapsed() - refreshedAt >= NodeReport::RefreshMs / 2) {
            refreshedAt = sinceStart.elapsed();
            report->refresh(QDateTime::currentDateTime(), refreshedAt);
        }
        return *report;
    }

    ~Private()
    {
        if (!portFile.isEmpty())
            QFile::remove(portFile);
        // Deleted on its own thread as that thread ends (Qt deletes there what deleteLater() left),
        // never from inside one of its own events, which Qt would return into.
        if (server)
            server.release()->deleteLater();
        thread.quit();
        thread.wait();
    }
};

NodeControl::NodeControl(std::unique_ptr<Private> d)
    : d(std::move(d))
{ }

NodeControl::~NodeControl() = default;

quint16 NodeControl::port() const
{
    return d->port;
}

QString NodeControl::address() const
{
    const QString host
        = d->bind.protocol() == QAbstractSocket::IPv6Protocol ? u'[' + d->bind.toString() + u']' : d->bind.toString();
    if (d->fingerprint.isEmpty())
        return QStringLiteral("http://%1:%2/").arg(host).arg(d->port);
    return QStringLiteral("https://%1:%2/ (certificate SHA-256 %3)")
        .arg(host)
        .arg(d->port)
        .arg(QString::fromLatin1(d->fingerprint));
}

QByteArray NodeControl::fingerprint() const
{
    return d->fingerprint;
}

void NodeControl::publish(const Published& published)
{
    auto* p = d.get();
    QMetaObject::invokeMethod(
        p->server.get(),
        [p, published] {
            p->status.published = published;
            p->server->stateChanged();
        },
        Qt::QueuedConnection);
}

namespace {

// The names a node's certificate is for: this machine, and the address it listens on.
QStringList certificateNames(const QHostAddress& bind)
{
    QStringList names { QStringLiteral("DNS:localhost"), QStringLiteral("IP:127.0.0.1") };
    if (const QString host = QHostInfo::localHostName(); !host.isEmpty() && !host.contains(u','))
        names << QStringLiteral("DNS:") + host;
    if (!bind.isNull() && !control::isEveryAddress(bind))
        names << QStringLiteral("IP:") + bind.toString();
    return names;
}

// What an action did, for the log's tail.
QString describe(const NodeControl::Action& action)
{
    if (action.name == u"snooze")
        return QStringLiteral("control API: %1").arg(snoozedReason(action.until));
    if (action.name == u"finish")
        return QStringLiteral("control API: finish this shard, then pause");
    if (action.name == u"device")
        return QStringLiteral("control API: %1 %2").arg(action.device, action.paused ? u"paused" : u"resumed");
    if (action.name == u"limits") {
        QStringList set;
        for (const auto& [key, value] : action.limits)
            set << QStringLiteral("%1=%2").arg(key, value.toString());
        return QStringLiteral("control API: set %1").arg(set.join(QStringLiteral(", ")));
    }
    return QStringLiteral("control API: %1").arg(action.name == u"pause" ? u"paused" : u"resumed");
}

// tessera-node: the compute thread held while the API's word says so, and let go once it no longer
// does; a pending finish-then-pause is the thread's own (it pauses before the next shard).
void holdOrRun(Status& status, compute::ComputeThread& thread, bool resumeAnyway)
{
    const bool hold = status.holds(QDateTime::currentDateTime());
    if (hold)
        thread.pause();
    else if (status.finishThenPause)
        thread.finishCurrentThenPause();
    else if (resumeAnyway || status.thread == ThreadState::Paused) {
        thread.resume();
        if (status.thread == ThreadState::Paused) // said at once; the thread's own word follows
            status.thread = status.shard ? ThreadState::Working : ThreadState::Idle;
    }
}

// tessera-node: the snooze ends when due. A timer may fire early (Qt rounds long ones to the
// second), so it looks at the clock and waits again for what is left.
void endSnoozeWhenDue(Status& status, compute::ComputeThread& thread, control::ControlServer* server)
{
    if (!status.snoozedUntil)
        return; // resumed meanwhile
    if (const qint64 left = QDateTime::currentDateTime().msecsTo(*status.snoozedUntil); left > 0) {
        QTimer::singleShot(std::chrono::milliseconds(left + 20), Qt::PreciseTimer, server,
            [&status, &thread, server] { endSnoozeWhenDue(status, thread, server); });
        return;
    }
    status.snoozedUntil.reset();
    holdOrRun(status, thread, true);
    server->stateChanged();
}

// tessera-node: the limits written to its settings file, and only they: whatever else the file
// says stays as written.
core::Status saveLimits(const QString& settingsFile, const NodeControl::Action& action)
{
    QSettings file(settingsFile, QSettings::IniFormat);
    for (const auto& [key, value] : action.limits)
        file.setValue(key, value);
    file.sync();
    if (file.status() != QSettings::NoError)
        return core::Error { settingsFile,
            QStringLiteral("could not write the settings file (is the disk full or the file read-only?)") };
    return {};
}

} // namespace

core::Result<std::unique_ptr<NodeControl>> NodeControl::start(const core::settings::Settings& settings,
    const QString& dataDirectory, compute::ComputeThread& thread, const Identity& identity, const ApplyLimit& applyLimit)
{
    const QString settingsFile = settings.filePath();
    auto carry = [&thread, applyLimit, settingsFile](Private& p, const Action& action) -> core::Status {
        auto& status = p.status;
        if (action.name == u"limits") {
            if (auto saved = saveLimits(settingsFile, action); !saved)
                return saved;
            for (const auto& [key, value] : action.limits) {
                status.limits.insert(key, QJsonValue::fromVariant(value));
                applyLimit(key, value);
            }
        } else if (action.name == u"pause") {
            status.paused = true;
        } else if (action.name == u"resume") {
            status.paused = false;
            status.snoozedUntil.reset();
            status.finishThenPause = false;
        } else if (action.name == u"snooze") {
            status.snoozedUntil = action.until;
            endSnoozeWhenDue(status, thread, p.server.get());
        } else if (action.name == u"finish") {
            // With no shard in training there is nothing to finish: it pauses now.
            (status.thread == ThreadState::Working ? status.finishThenPause : status.paused) = true;
        } else if (action.name == u"device") {
            status.pausedDevices.removeAll(action.device);
            if (action.paused)
                status.pausedDevices.append(action.device);
        }
        holdOrRun(status, thread, action.name == u"resume" || action.name == u"device");
        return {};
    };
    auto control = serve(settings, dataDirectory, identity, carry, false);
    if (!control || !*control)
        return control;
    auto* p = (*control)->d.get();
    auto* server = p->server.get();
    // The compute thread's signals, queued to the control thread, where the status lives.
    QObject::connect(&thread, &compute::ComputeThread::stateChanged, server, [p, server](ThreadState state) {
        p->status.thread = state;
        if (state == ThreadState::Paused && std::exchange(p->status.finishThenPause, false))
            p->status.paused = true; // the shard finished, and the thread paused before the next
        server->stateChanged();
    });
    QObject::connect(&thread, &compute::ComputeThread::progress, server, [p, server](const compute::ShardProgress& progress) {
        p->status.shard = progress;
        server->stateChanged();
    });
    const auto ended = [p, server] {
        p->status.shard.reset();
        server->stateChanged();
    };
    QObject::connect(&thread, &compute::ComputeThread::shardCancelled, server, ended);
    QObject::connect(&thread, &compute::ComputeThread::shardFinished, server, ended);
    return control;
}

core::Result<std::unique_ptr<NodeControl>> NodeControl::start(
    const core::settings::Settings& settings, const QString& dataDirectory, const Identity& identity, const Act& act)
{
    return serve(
        settings, dataDirectory, identity,
        [act](Private&, const Action& action) -> core::Status {
            act(action);
            return {};
        },
        true);
}

core::Result<std::unique_ptr<NodeControl>> NodeControl::serve(const core::settings::Settings& settings,
    const QString& dataDirectory, const Identity& identity, const Carry& carry, bool desktop)
{
    if (!settings.boolValue(names::ControlEnabled))
        return std::unique_ptr<NodeControl>();
    auto token = control::loadOrCreateToken(dataDirectory);
    if (!token)
        return token.error();
    control::ControlServer::Options options;
    options.address = QHostAddress(settings.stringValue(names::ControlBind));
    options.port = quint16(settings.intValue(names::ControlPort));
    options.token = *token;
    if (options.address.isNull()) // would listen everywhere
        return core::Error { names::ControlBind,
            QStringLiteral("%1 is not an address").arg(settings.stringValue(names::ControlBind)) };
    auto d = std::make_unique<Private>();
    d->bind = options.address;
    if (!options.address.isLoopback()) { // beyond this machine: over TLS only
        auto tls = control::loadOrCreateCertificate(dataDirectory, certificateNames(options.address));
        if (!tls)
            return tls.error();
        options.tls = *tls;
        d->fingerprint = control::fingerprintOf(tls->certificatePem);
    }
    d->status.identity = identity;
    d->status.desktop = desktop;
    for (const auto& key : limitKeys(desktop)) // before its thread starts
        d->status.limits.insert(key, QJsonValue::fromVariant(settings.value(key)));
    d->report = std::make_unique<NodeReport>(dataDirectory, identity.devices);
    d->sinceStart.start();
    auto* p = d.get();
    d->server = std::make_unique<control::ControlServer>(
        options, [p] { return p->status.toJson(p->freshReport()); },
        [p, carry, desktop](const QString& name, const QJsonObject& body) -> core::Status {
            auto action = parseAction(name, body, p->status.identity, desktop);
            if (!action)
                return action.error();
            action->sequence = ++p->status.actions;
            if (auto done = carry(*p, *action); !done)
                return done;
            core::LogTail::process().append(QStringLiteral("info"), describe(*action));
            if (desktop)
                p->status.pending = *action;
            return {};
        });
    auto* server = d->server.get();
    // While a dashboard watches, the devices, results and log are read again and pushed when changed.
    auto* refresh = new QTimer(server);
    QObject::connect(refresh, &QTimer::timeout, server, [p, server] {
        if (server->webSockets() > 0) {
            p->freshReport();
            server->stateChanged();
        }
    });
    server->moveToThread(&d->thread);
    d->thread.setObjectName(QStringLiteral("control"));
    d->thread.start();
    core::Status listening;
    QMetaObject::invokeMethod(
        server,
        [&] {
            listening = server->listen();
            refresh->start(NodeReport::RefreshMs);
        },
        Qt::BlockingQueuedConnection);
    // Where this node listens, beside its token: `tessera-node ctl` sends the token only there, never
    // to whatever holds Control/Port when this node could not take it.
    const QString portFile = QDir(dataDirectory).filePath(QStringLiteral("control.port"));
    QFile::remove(portFile);
    if (!listening)
        return listening.error();
    d->port = server->port();
    d->portFile = portFile;
    if (auto written = core::writePrivateFile(portFile, QByteArray::number(d->port) + '\n', QStringLiteral("the control port"));
        !written)
        return written.error();
    return std::unique_ptr<NodeControl>(new NodeControl(std::move(d)));
}

} // namespace tessera::app
