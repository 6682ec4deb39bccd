#include "nodecontrol.h"

#include <compute/supervisor/computethread.h>
#include <control/controlserver.h>
#include <core/settings/settings.h>
#include <core/settings/settingskeys.h>

#include <core/privatefile.h>

#include <QDir>
#include <QFile>
#include <QJsonObject>
#include <QMutex>
#include <QThread>

#include <optional>

namespace tessera::app {

namespace {

// What the API says of the node (docs/CONTROL.md, "The state"), kept from the compute thread's
// signals and read by the server: both on the control thread.
struct Status {
    NodeControl::Identity identity;
    bool paused = false; // by the API
    compute::ComputeThread::State state = compute::ComputeThread::State::Idle;
    std::optional<compute::ShardProgress> shard;

    QJsonObject toJson() const
    {
        using State = compute::ComputeThread::State;
        const bool pausedNow = paused || state == State::Paused;
        const QString name = pausedNow ? QStringLiteral("paused")
            : state == State::Working  ? QStringLiteral("working")
                                       : QStringLiteral("idle");
        const QString reason = paused ? QStringLiteral("paused through the control API")
            : state == State::Paused  ? QStringLiteral("paused")
            : state == State::Working ? QStringLiteral("training a shard")
                                      : QStringLiteral("waiting for work");
        QJsonValue shardJson = QJsonValue::Null;
        if (shard) {
            QJsonObject object { { QStringLiteral("job"), shard->jobId }, { QStringLiteral("round"), qint64(shard->round) },
                { QStringLiteral("shard"), qint64(shard->shard) }, { QStringLiteral("step"), qint64(shard->step) },
                { QStringLiteral("steps"), qint64(shard->steps) }, { QStringLiteral("loss"), shard->loss },
                { QStringLiteral("etaMs"), qint64(shard->etaMs) } };
            if (shard->stages > 0) {
                object.insert(QStringLiteral("stage"), qint64(shard->stage));
                object.insert(QStringLiteral("stages"), qint64(shard->stages));
            }
            shardJson = object;
        }
        return { { QStringLiteral("version"), 1 }, { QStringLiteral("node"), identity.nodeId },
            { QStringLiteral("name"), identity.name }, { QStringLiteral("state"), name }, { QStringLiteral("reason"), reason },
            { QStringLiteral("paused"), pausedNow }, { QStringLiteral("shard"), shardJson } };
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
        if (server)
            QMetaObject::invokeMethod(
                server.get(), [this] { server.reset(); }, Qt::BlockingQueuedConnection);
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

core::Result<std::unique_ptr<NodeControl>> NodeControl::start(const core::settings::Settings& settings,
    const QString& dataDirectory, compute::ComputeThread& thread, const Identity& identity)
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
        [p, &thread](const QString& action, const QJsonObject&) -> core::Status {
            p->status.paused = action == u"pause";
            if (p->status.paused) {
                thread.pause();
            } else {
                thread.resume();
                if (p->status.state == compute::ComputeThread::State::Paused) // until the thread says what it does now
                    p->status.state
                        = p->status.shard ? compute::ComputeThread::State::Working : compute::ComputeThread::State::Idle;
            }
            return {};
        });
    auto* server = d->server.get();
    // The compute thread's signals, queued to the control thread, where the status lives.
    QObject::connect(&thread, &compute::ComputeThread::stateChanged, server, [p, server](compute::ComputeThread::State state) {
        p->status.state = state;
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
