#include "nodecontrol.h"

#include <compute/supervisor/computethread.h>
#include <control/controlserver.h>
#include <core/privatefile.h>
#include <core/settings/settings.h>
#include <core/settings/settingskeys.h>

#include <QDir>
#include <QFile>
#include <QJsonObject>
#include <QThread>

namespace tessera::app {

namespace {

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

// What the API says of the node (docs/CONTROL.md, "The state"): from the compute thread's signals
// (tessera-node), or as its owner publishes it (the desktop app). On the control thread.
struct Status {
    NodeControl::Identity identity;
    bool paused = false; // by the API, until its owner or the thread says otherwise
    compute::ComputeThread::State state = compute::ComputeThread::State::Idle;
    std::optional<compute::ShardProgress> shard;
    std::optional<NodeControl::Published> published;

    QJsonObject toJson() const
    {
        using State = compute::ComputeThread::State;
        const bool pausedNow = paused || (published ? published->paused : state == State::Paused);
        QString name, reason;
        if (paused && !(published && published->paused)) { // not yet confirmed
            name = QStringLiteral("paused");
            reason = QStringLiteral("paused through the control API");
        } else if (published) {
            name = published->state;
            reason = published->reason;
        } else if (pausedNow) {
            name = reason = QStringLiteral("paused");
        } else {
            name = state == State::Working ? QStringLiteral("working") : QStringLiteral("idle");
            reason = state == State::Working ? QStringLiteral("training a shard") : QStringLiteral("waiting for work");
        }
        return { { QStringLiteral("version"), 1 }, { QStringLiteral("node"), identity.nodeId },
            { QStringLiteral("name"), identity.name }, { QStringLiteral("state"), name }, { QStringLiteral("reason"), reason },
            { QStringLiteral("paused"), pausedNow },
            { QStringLiteral("shard"), shardJson(published ? published->shard : shard) } };
    }
};

} // namespace

struct NodeControl::Private {
    QThread thread;
    Status status;
    std::unique_ptr<control::ControlServer> server;
    quint16 port = 0;
    QString portFile; // removed when the API stops

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

void NodeControl::publish(const Published& published)
{
    auto* p = d.get();
    QMetaObject::invokeMethod(
        p->server.get(),
        [p, published] {
            // The owner's word replaces the API's own pause once it says the same.
            if (published.paused == p->status.paused)
                p->status.paused = false;
            p->status.published = published;
            p->server->stateChanged();
        },
        Qt::QueuedConnection);
}

core::Result<std::unique_ptr<NodeControl>> NodeControl::start(const core::settings::Settings& settings,
    const QString& dataDirectory, compute::ComputeThread& thread, const Identity& identity)
{
    auto control = serve(settings, dataDirectory, identity, [&thread](const QString& action) {
        if (action == u"pause")
            thread.pause();
        else
            thread.resume();
    });
    if (!control || !*control)
        return control;
    auto* p = (*control)->d.get();
    auto* server = p->server.get();
    // The compute thread's signals, queued to the control thread, where the status lives.
    QObject::connect(&thread, &compute::ComputeThread::stateChanged, server, [p, server](compute::ComputeThread::State state) {
        p->status.state = state;
        if (state != compute::ComputeThread::State::Paused)
            p->status.paused = false; // resumed
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
    return serve(settings, dataDirectory, identity, act);
}

core::Result<std::unique_ptr<NodeControl>> NodeControl::serve(
    const core::settings::Settings& settings, const QString& dataDirectory, const Identity& identity, const Act& act)
{
    namespace names = core::settings::names;
    if (!settings.boolValue(names::ControlEnabled))
        return std::unique_ptr<NodeControl>();
    auto token = control::loadOrCreateToken(dataDirectory);
    if (!token)
        return token.error();
    control::ControlServer::Options options;
    options.address = QHostAddress(settings.stringValue(names::ControlBind));
    options.port = quint16(settings.intValue(names::ControlPort));
    options.token = *token;
    auto d = std::make_unique<Private>();
    d->status.identity = identity;
    auto* p = d.get();
    d->server = std::make_unique<control::ControlServer>(
        options, [p] { return p->status.toJson(); },
        [p, act](const QString& action, const QJsonObject&) -> core::Status {
            // Said at once (the answer carries it), until the thread or the owner confirms it.
            p->status.paused = action == u"pause";
            if (!p->status.paused && p->status.state == compute::ComputeThread::State::Paused)
                p->status.state = p->status.shard ? compute::ComputeThread::State::Working : compute::ComputeThread::State::Idle;
            if (!p->status.paused && p->status.published)
                p->status.published->paused = false;
            act(action);
            return {};
        });
    auto* server = d->server.get();
    server->moveToThread(&d->thread);
    d->thread.setObjectName(QStringLiteral("control"));
    d->thread.start();
    core::Status listening;
    QMetaObject::invokeMethod(
        server, [&] { listening = server->listen(); }, Qt::BlockingQueuedConnection);
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
