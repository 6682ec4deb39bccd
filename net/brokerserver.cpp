#include "brokerserver.h"

#include <core/jobspec.h>

#include <QDateTime>
#include <QJsonArray>
#include <QLoggingCategory>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>

Q_LOGGING_CATEGORY(lcBroker, "tessera.broker")

namespace tessera::net {

namespace {

std::int64_t nowMs()
{
    return QDateTime::currentMSecsSinceEpoch();
}

QByteArray toBytes(const zmq::message_t& message)
{
    return QByteArray(static_cast<const char*>(message.data()), qsizetype(message.size()));
}

QString shortId(const QString& id)
{
    return id.left(12);
}

// A node the broker may not give work (too little stake bonded) is asked again this often.
constexpr std::int64_t RefusedRetryMs = 10'000;

} // namespace

struct BrokerServer::Private {
    struct Peer {
        QString nodeId; // empty until REGISTER (job owners' clients never register)
        bool waiting = false; // sent READY and has no task yet
        std::int64_t refusedUntil = 0; // the broker may not give it work (stake too low); asked again then
        double score = 0.0;
        std::int64_t lastSeen = 0;
        std::int64_t lastSent = 0;
        double tokens = -1.0; // the rate limit's bucket; < 0 until the first message
        std::int64_t lastRefill = 0;
        // Since when the peer has been over the limit: refused at least once a second (a flood
        // still gets a message through now and then, as the bucket refills; that does not end it).
        std::int64_t floodingSince = 0;
        std::int64_t lastRefused = 0;
    };

    core::broker::Broker& broker;
    BrokerServerOptions options;
    zmq::context_t context;
    zmq::socket_t router { context, zmq::socket_type::router };
    std::unique_ptr<zmq::socket_t> zap;
    QString endpoint;
    QHash<QByteArray, Peer> peers;
    QHash<QByteArray, std::int64_t> banned; // routing id -> until (ms)
    Counters counters;

    Private(core::broker::Broker& b, BrokerServerOptions o)
        : broker(b)
        , options(std::move(o))
    { }

    void send(const QByteArray& routingId, const Message& message)
    {
        auto frames = encode(message);
        router.send(zmq::buffer(routingId.constData(), std::size_t(routingId.size())), zmq::send_flags::sndmore);
        for (qsizetype i = 0; i < frames.size(); ++i) {
            const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
            if (frames[i].size() < 4096) {
                router.send(zmq::buffer(frames[i].constData(), std::size_t(frames[i].size())), flags);
                continue;
            }
            // Large frames (blob chunks) go without a copy: the message keeps the bytes alive.
            auto* held = new QByteArray(frames[i]);
            zmq::message_t frame(
                held->data(), std::size_t(held->size()), [](void*, void* hint) { delete static_cast<QByteArray*>(hint); }, held);
            router.send(frame, flags);
        }
        if (auto it = peers.find(routingId); it != peers.end())
            it->lastSent = nowMs();
    }

    void sendError(const QByteArray& routingId, const QString& code, const QString& text, int re, const QJsonValue& id)
    {
        ++counters.errors;
        qCWarning(lcBroker).noquote() << "refused a message:" << code << text;
        send(routingId, errorMessage(code, text, re, id));
    }

    void handleZap();
    void handle(const QByteArray& routingId, const QList<QByteArray>& frames, const QString& userId);
    void dispatchWork();
    void keepAlive();
    // Sends what the broker has to tell nodes (dispute checkpoint requests, verdicts) to those
    // connected; a node that is away misses its verdicts (its dispute then times out).
    void sendNotices()
    {
        for (auto& notice : broker.takeNotices()) {
            for (auto it = peers.constBegin(); it != peers.constEnd(); ++it) {
                if (it->nodeId != notice.nodeId)
                    continue;
                send(it.key(),
                    { notice.kind == core::broker::Notice::Kind::CheckpointRequest ? Command::Checkpoint : Command::Verdict,
                        notice.body, {} });
                break;
            }
        }
    }
};

BrokerServer::BrokerServer(core::broker::Broker& broker, BrokerServerOptions options)
    : d(std::make_unique<Private>(broker, std::move(options)))
{ }

BrokerServer::~BrokerServer() = default;

namespace {

bool isLoopback(const QString& endpoint)
{
    // tcp://HOST:PORT
    const QString host = endpoint.mid(6).section(u':', 0, -2);
    return host == u"localhost" || host.startsWith(u"127.") || host == u"[::1]" || host == u"::1";
}

} // namespace

core::Status BrokerServer::bind()
{
    if (!d->options.keys && !d->options.insecurePlaintext && !isLoopback(d->options.bind))
        return core::Error { QStringLiteral("bind"),
            QStringLiteral("refusing to listen on %1 without CURVE: on a plaintext broker anyone who reaches it can "
                           "claim any account and spend its credits. Give it a key file (--keys FILE, Broker/KeyFile), "
                           "bind 127.0.0.1, or start it with --insecure-plaintext if this network is yours alone")
                .arg(d->options.bind) };
    try {
        d->router.set(zmq::sockopt::maxmsgsize, std::int64_t(MaxMessageBytes) * 2); // hard limit; above MaxMessageBytes: an ERROR
        d->router.set(zmq::sockopt::router_mandatory, 0);
        d->router.set(zmq::sockopt::linger, 0);
        if (d->options.keys) {
            // The ZAP handler must exist before a CURVE socket binds.
            d->zap = std::make_unique<zmq::socket_t>(d->context, zmq::socket_type::router);
            d->zap->set(zmq::sockopt::linger, 0);
            d->zap->bind("inproc://zeromq.zap.01");
            d->router.set(zmq::sockopt::curve_server, 1);
            d->router.set(zmq::sockopt::curve_secretkey, d->options.keys->secretKey.toStdString());
            d->router.set(zmq::sockopt::zap_domain, std::string("tessera"));
        }
        d->router.bind(d->options.bind.toStdString());
        d->endpoint = QString::fromStdString(d->router.get(zmq::sockopt::last_endpoint));
    } catch (const zmq::error_t& error) {
        return core::Error { QStringLiteral("bind"),
            QStringLiteral("cannot listen on %1: %2").arg(d->options.bind, QString::fromUtf8(error.what())) };
    }
    return {};
}

QString BrokerServer::address() const
{
    return d->options.keys ? d->endpoint + u'#' + d->options.keys->publicKey : d->endpoint;
}

BrokerServer::Counters BrokerServer::counters() const
{
    return d->counters;
}

void BrokerServer::run(const std::atomic<bool>& stop)
{
    std::int64_t nextKeepAlive = nowMs() + d->options.heartbeatMs;
    while (!stop.load()) {
        std::vector<zmq::pollitem_t> items { { d->router.handle(), 0, ZMQ_POLLIN, 0 } };
        if (d->zap)
            items.push_back({ d->zap->handle(), 0, ZMQ_POLLIN, 0 });
        const auto timeout = std::clamp<std::int64_t>(nextKeepAlive - nowMs(), 0, d->options.heartbeatMs);
        try {
            zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout));
        } catch (const zmq::error_t& error) {
            if (error.num() == EINTR)
                continue;
            throw;
        }
        if (d->zap && (items[1].revents & ZMQ_POLLIN))
            d->handleZap();
        if (items[0].revents & ZMQ_POLLIN) {
            // Drain what is there, then look after heartbeats.
            for (int i = 0; i < 1000; ++i) {
                std::vector<zmq::message_t> parts;
                const auto received = zmq::recv_multipart(d->router, std::back_inserter(parts), zmq::recv_flags::dontwait);
                if (!received)
                    break;
                QString userId;
                if (parts.size() > 1) {
                    try {
                        userId = QString::fromLatin1(parts[1].gets("User-Id"));
                    } catch (const zmq::error_t&) { }
                }
                QList<QByteArray> frames;
                for (std::size_t p = 1; p < parts.size(); ++p)
                    frames.append(toBytes(parts[p]));
                d->handle(toBytes(parts[0]), frames, userId);
            }
            d->sendNotices();
        }
        if (nowMs() >= nextKeepAlive) {
            d->keepAlive();
            d->broker.tick();
            d->sendNotices();
            d->dispatchWork();
            nextKeepAlive = nowMs() + d->options.heartbeatMs;
        }
    }
    for (auto it = d->peers.constBegin(); it != d->peers.constEnd(); ++it) {
        if (!it->nodeId.isEmpty())
            d->send(it.key(), { Command::Bye, {}, {} });
    }
}

void BrokerServer::Private::handleZap()
{
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(*zap, std::back_inserter(request), zmq::recv_flags::dontwait))
        return;
    // [routing id, empty, version, request id, domain, address, identity, mechanism, credentials...]
    if (request.size() < 8)
        return;
    const std::string mechanism = request[7].to_string();
    QString status = QStringLiteral("200");
    QString statusText = QStringLiteral("OK");
    QString userId;
    if (mechanism != "CURVE" || request.size() < 9 || request[8].size() != 32) {
        status = QStringLiteral("400");
        statusText = QStringLiteral("this broker accepts CURVE connections only");
    } else {
        char z85[41] = {};
        zmq_z85_encode(z85, static_cast<const std::uint8_t*>(request[8].data()), 32);
        userId = QString::fromLatin1(z85);
        if (!options.allowList.isEmpty() && !options.allowList.contains(userId)) {
            status = QStringLiteral("400");
            statusText = QStringLiteral("this key is not on the broker's allow list");
        }
    }
    if (status != u"200")
        qCWarning(lcBroker).noquote() << "refused a connection:" << statusText;
    const std::string statusBytes = status.toStdString(), textBytes = statusText.toStdString(), userBytes = userId.toStdString();
    const std::array<zmq::const_buffer, 8> reply {
        zmq::buffer(request[0].data(), request[0].size()),
        zmq::const_buffer(),
        zmq::str_buffer("1.0"),
        zmq::buffer(request[3].data(), request[3].size()),
        zmq::buffer(statusBytes),
        zmq::buffer(textBytes),
        zmq::buffer(userBytes),
        zmq::const_buffer(),
    };
    zmq::send_multipart(*zap, reply);
}

void BrokerServer::Private::keepAlive()
{
    const auto now = nowMs();
    QList<QByteArray> gone;
    for (auto it = peers.begin(); it != peers.end(); ++it) {
        const bool node = !it->nodeId.isEmpty();
        const std::int64_t silence = now - it->lastSeen;
        if (node && silence > std::int64_t(options.heartbeatMs) * options.liveness) {
            qCInfo(lcBroker).noquote() << "node" << shortId(it->nodeId) << "went silent; its shards go to others";
            broker.nodeLost(it->nodeId);
            gone.append(it.key());
        } else if (!node && silence > 60'000) {
            gone.append(it.key()); // a client that went away
        } else if (node && now - it->lastSent >= options.heartbeatMs) {
            send(it.key(), { Command::Heartbeat, {}, {} });
        }
    }
    for (const auto& id : gone)
        peers.remove(id);
}

void BrokerServer::Private::dispatchWork()
{
    QList<QByteArray> waiting;
    for (auto it = peers.constBegin(); it != peers.constEnd(); ++it) {
        if (it->waiting)
            waiting.append(it.key());
    }
    if (waiting.isEmpty() || !broker.hasWork())
        return;
    // The fastest nodes first: the last shards of a round should not wait on the slowest.
    std::sort(waiting.begin(), waiting.end(),
        [&](const QByteArray& a, const QByteArray& b) { return peers[a].score > peers[b].score; });
    const auto now = nowMs();
    for (const auto& id : waiting) {
        auto& peer = peers[id];
        if (now < peer.refusedUntil)
            continue;
        auto assignment = broker.assign(peer.nodeId);
        if (!assignment) {
            // Told once why (the node logs it), asked again in a while or as soon as it bonds stake.
            qCWarning(lcBroker).noquote() << "no work for node" << shortId(peer.nodeId) << ":" << assignment.error().toString();
            if (peer.refusedUntil == 0)
                sendError(id, errors::Invalid, assignment.error().toString(), int(Command::Ready), {});
            peer.refusedUntil = now + RefusedRetryMs;
            continue;
        }
        peer.refusedUntil = 0;
        if (!assignment->has_value())
            continue;
        const auto& a = **assignment;
        peer.waiting = false;
        ++counters.tasksSent;
        send(id,
            { Command::Task,
                QJsonObject {
                    { QStringLiteral("assignment"), a.id },
                    { QStringLiteral("deadlineMs"), static_cast<qint64>(a.deadlineMs - nowMs()) },
                    { QStringLiteral("task"), a.task.toJson() },
                    { QStringLiteral("startWeightsBlob"), a.startWeightsBlob.toHex() },
                },
                {} });
    }
}

void BrokerServer::Private::handle(const QByteArray& routingId, const QList<QByteArray>& frames, const QString& userId)
{
    ++counters.messages;
    const auto now = nowMs();
    if (auto ban = banned.find(routingId); ban != banned.end()) {
        if (now < *ban)
            return; // dropped for flooding: not even an answer
        banned.erase(ban);
    }
    auto& peer = peers[routingId];
    peer.lastSeen = now;
    // A token bucket per peer: a flood is refused, and a long one gets the peer dropped.
    if (options.maxRequestsPerSecond > 0) {
        const double burst = 2.0 * options.maxRequestsPerSecond;
        if (peer.tokens < 0) {
            peer.tokens = burst;
            peer.lastRefill = now;
        }
        peer.tokens = std::min(burst, peer.tokens + double(now - peer.lastRefill) * options.maxRequestsPerSecond / 1000.0);
        peer.lastRefill = now;
        // A blob range (GET, PUT) counts a quarter: a download on a fast link is 1 MiB ranges as fast
        // as the link carries them (about 600 a second on this machine's loopback), not a flood.
        const bool range = frames.size() > 1 && frames[1].size() == 1
            && (quint8(frames[1][0]) == quint8(Command::Get) || quint8(frames[1][0]) == quint8(Command::Put));
        const double cost = range ? 0.25 : 1.0;
        if (peer.tokens < cost) {
            if (peer.floodingSince == 0 || now - peer.lastRefused > 1'000)
                peer.floodingSince = now;
            peer.lastRefused = now;
            if (now - peer.floodingSince > 5'000) {
                qCWarning(lcBroker).noquote()
                    << "dropped a peer that sent more than" << options.maxRequestsPerSecond << "messages a second for 5 s"
                    << (peer.nodeId.isEmpty() ? QString() : shortId(peer.nodeId));
                if (!peer.nodeId.isEmpty())
                    broker.nodeLost(peer.nodeId);
                peers.remove(routingId);
                banned.insert(routingId, now + 60'000);
                ++counters.errors;
                return;
            }
            ++counters.errors;
            send(routingId,
                errorMessage(errors::TooManyRequests,
                    QStringLiteral("more than %1 messages a second; slow down").arg(options.maxRequestsPerSecond), -1, {}));
            return;
        }
        peer.tokens -= cost;
    }
    auto decoded = decode(frames);
    if (!decoded) {
        sendError(routingId, decoded.error().code, decoded.error().message, decoded.error().command, {});
        return;
    }
    const Message& message = *decoded;
    const auto id = message.header.value(QStringLiteral("id"));
    const int re = int(message.command);
    // Who asks (docs/PROTOCOL.md, "Who may do what"): under CURVE the client's key, the operator
    // when the key is one of Broker/OperatorKeys; on a plaintext broker (loopback only) every caller
    // is the operator, acting for the account it names ("owner").
    const bool curve = !userId.isEmpty();
    const QString caller = curve ? userId : message.header.value(QStringLiteral("owner")).toString(QStringLiteral("local"));
    const bool operatorCaller = !curve || options.operatorKeys.contains(userId);
    auto forbidden = [&](const QString& why) { sendError(routingId, errors::Forbidden, why, re, id); };
    // A full disk is the broker's trouble, not the request's: the peer hears disk-full (without the
    // broker's paths), the operator reads the whole error in the log.
    auto refuse = [&](const QString& code, const core::Error& error, const QString& prefix = {}) {
        if (error.diskFull) {
            qCWarning(lcBroker).noquote() << commandName(message.command) << "refused:" << error.toString();
            sendError(routingId, errors::DiskFull,
                QStringLiteral("the broker's disk is full; nothing was stored (try again later)"), re, id);
            return;
        }
        sendError(routingId, code, prefix + error.toString(), re, id);
    };
    auto invalid = [&](const core::Error& error) { refuse(errors::Invalid, error); };
    auto requireNode = [&]() {
        if (peer.nodeId.isEmpty()) {
            sendError(routingId, errors::NotRegistered, QStringLiteral("send REGISTER first"), re, id);
            return false;
        }
        return true;
    };

    switch (message.command) {
    case Command::Register: {
        auto node = core::NodeInfo::fromJson(message.header.value(QStringLiteral("node")).toObject());
        if (!node) {
            sendError(routingId, errors::Invalid, QStringLiteral("node.") + node.error().toString(), re, id);
            return;
        }
        // With CURVE, a node is who its key says it is, whatever it claims.
        if (!userId.isEmpty())
            node->nodeId = userId;
        if (node->nodeId.isEmpty()) {
            sendError(routingId, errors::Invalid, QStringLiteral("node.nodeId: is required"), re, id);
            return;
        }
        // The same node on a new connection (it reconnected, or restarted): what was in flight on the
        // old one is void, a TASK sent there may never have arrived, so its shards go back to the
        // queue (and to it again, if nobody else takes them).
        bool replaced = false;
        for (auto it = peers.begin(); it != peers.end();) {
            if (it.key() != routingId && it->nodeId == node->nodeId) {
                it = peers.erase(it);
                replaced = true;
            } else {
                ++it;
            }
        }
        if (replaced)
            broker.nodeLost(node->nodeId);
        auto& self = peers[routingId];
        if (auto status = broker.registerNode(*node); !status) {
            refuse(errors::Internal, status.error());
            return;
        }
        self.nodeId = node->nodeId;
        self.score = broker.schedulingScore(node->nodeId);
        qCDebug(lcBroker).noquote() << "node" << shortId(node->nodeId) << "registered:" << node->name << node->runtimeProfile;
        QJsonObject welcome { { QStringLiteral("nodeId"), node->nodeId }, { QStringLiteral("heartbeatMs"), options.heartbeatMs },
            { QStringLiteral("brokerVersion"), QStringLiteral("1") } };
        if (!id.isUndefined())
            welcome.insert(QStringLiteral("id"), id);
        send(routingId, { Command::Welcome, welcome, {} });
        return;
    }
    case Command::Heartbeat:
        return;
    case Command::Bye:
        if (!peer.nodeId.isEmpty())
            broker.nodeLost(peer.nodeId);
        peers.remove(routingId);
        return;
    case Command::Ready:
        if (!requireNode())
            return;
        peer.waiting = true;
        dispatchWork();
        return;
    case Command::Result: {
        if (!requireNode())
            return;
        const QString assignment = message.header.value(QStringLiteral("assignment")).toString();
        auto result = core::ShardResult::fromJson(message.header.value(QStringLiteral("result")).toObject());
        if (assignment.isEmpty() || !result) {
            sendError(routingId, errors::Invalid,
                assignment.isEmpty() ? QStringLiteral("assignment: is required")
                                     : QStringLiteral("result.") + result.error().toString(),
                re, id);
            return;
        }
        auto verdict = broker.acceptResult(peer.nodeId, assignment, *result);
        if (!verdict) {
            invalid(verdict.error());
            return;
        }
        if (*verdict == core::broker::Verdict::Stale) {
            sendError(
                routingId, errors::Stale, QStringLiteral("the shard was already answered; this result is not counted"), re, id);
            return;
        }
        peer.score = broker.schedulingScore(peer.nodeId);
        const QString said = *verdict == core::broker::Verdict::Accepted ? QStringLiteral("accepted")
            : *verdict == core::broker::Verdict::Held                    ? QStringLiteral("sampled")
                                                                         : QStringLiteral("failed");
        QJsonObject answer { { QStringLiteral("verdict"), said } };
        if (*verdict == core::broker::Verdict::Accepted) {
            if (auto job = broker.status(result->jobId))
                answer.insert(QStringLiteral("paid"), job->pricePerShard.toString());
        }
        send(routingId, okMessage(id, answer));
        dispatchWork();
        return;
    }
    case Command::Get: {
        auto digest = core::Digest::fromHex(message.header.value(QStringLiteral("sha256")).toString());
        const auto offset = message.header.value(QStringLiteral("offset")).toInteger(-1);
        const auto length = message.header.value(QStringLiteral("length")).toInteger(-1);
        if (!digest || offset < 0 || length < 0 || length > MaxChunkBytes) {
            sendError(routingId, errors::Invalid, QStringLiteral("GET needs sha256, offset and length (at most 1 MiB)"), re, id);
            return;
        }
        const auto size = broker.blobs().sizeOf(*digest);
        if (!size) {
            sendError(routingId, errors::UnknownBlob, QStringLiteral("no blob %1").arg(digest->toHex()), re, id);
            return;
        }
        if (!operatorCaller && !broker.mayRead(caller, *digest).value_or(false)) {
            forbidden(QStringLiteral("blob %1 is not yours to read: only its uploader, the owner of a job that uses it and "
                                     "nodes given work that needs it may")
                          .arg(digest->toHex()));
            return;
        }
        auto bytes = broker.blobs().readRange(*digest, offset, length);
        if (!bytes) {
            invalid(bytes.error());
            return;
        }
        QJsonObject header { { QStringLiteral("sha256"), digest->toHex() }, { QStringLiteral("offset"), offset },
            { QStringLiteral("size"), static_cast<qint64>(*size) } };
        if (!id.isUndefined())
            header.insert(QStringLiteral("id"), id);
        send(routingId, { Command::Chunk, header, *bytes });
        return;
    }
    case Command::Put: {
        auto digest = core::Digest::fromHex(message.header.value(QStringLiteral("sha256")).toString());
        const auto offset = message.header.value(QStringLiteral("offset")).toInteger(-1);
        const auto size = message.header.value(QStringLiteral("size")).toInteger(-1);
        if (!digest || offset < 0 || size < 0) {
            sendError(routingId, errors::Invalid, QStringLiteral("PUT needs sha256, offset and size"), re, id);
            return;
        }
        auto state = broker.blobs().putRange(*digest, offset, size, message.payload);
        if (!state) {
            refuse(state.error().field == u"sha256" ? errors::HashMismatch : errors::Invalid, state.error());
            return;
        }
        if (*state == core::BlobStore::UploadState::Complete) {
            if (auto granted = broker.allowRead(*digest, caller); !granted) {
                refuse(errors::Internal, granted.error());
                return;
            }
        }
        send(routingId,
            okMessage(id,
                { { QStringLiteral("sha256"), digest->toHex() },
                    { QStringLiteral("received"), static_cast<qint64>(broker.blobs().uploadedBytes(*digest)) },
                    { QStringLiteral("complete"), *state == core::BlobStore::UploadState::Complete } }));
        return;
    }
    case Command::Submit: {
        auto spec = core::JobSpec::fromJson(message.header.value(QStringLiteral("job")).toObject());
        if (!spec) {
            sendError(routingId, errors::Invalid, QStringLiteral("job.") + spec.error().toString(), re, id);
            return;
        }
        // The owner is who the CURVE key says; without CURVE (a local broker) whoever the client names.
        // A job may name only files its owner may read: a file's hash is no key to it.
        if (!operatorCaller) {
            for (const auto& named : core::broker::blobsNamedBy(*spec)) {
                if (!broker.mayRead(caller, named).value_or(false)) {
                    forbidden(
                        QStringLiteral("the job names blob %1, which is not yours: upload the file yourself").arg(named.toHex()));
                    return;
                }
            }
        }
        auto jobId = broker.submit(*spec, caller);
        if (!jobId) {
            refuse(errors::Invalid, jobId.error(), QStringLiteral("job."));
            return;
        }
        qCInfo(lcBroker).noquote() << "job" << *jobId << "submitted:" << spec->name;
        send(routingId, okMessage(id, { { QStringLiteral("jobId"), *jobId } }));
        dispatchWork();
        return;
    }
    case Command::Status: {
        auto status = broker.status(message.header.value(QStringLiteral("jobId")).toString());
        if (!status) {
            sendError(routingId, errors::UnknownJob, status.error().toString(), re, id);
            return;
        }
        // Another identity sees the job's progress only; its owner sees all of it.
        const bool mine = operatorCaller || status->owner == caller;
        send(routingId, okMessage(id, { { QStringLiteral("job"), mine ? status->toJson() : status->toPublicJson() } }));
        return;
    }
    case Command::List: {
        auto jobs = broker.list();
        if (!jobs) {
            sendError(routingId, errors::Internal, jobs.error().toString(), re, id);
            return;
        }
        QJsonArray list;
        for (const auto& job : *jobs)
            list.append(operatorCaller || job.owner == caller ? job.toJson() : job.toPublicJson());
        send(routingId, okMessage(id, { { QStringLiteral("jobs"), list } }));
        return;
    }
    case Command::Cancel: {
        const QString jobId = message.header.value(QStringLiteral("jobId")).toString();
        auto exists = broker.status(jobId);
        if (!exists) {
            sendError(routingId, errors::UnknownJob, exists.error().toString(), re, id);
            return;
        }
        if (!operatorCaller && exists->owner != caller) {
            forbidden(QStringLiteral("job %1 is not yours to cancel").arg(jobId));
            return;
        }
        if (auto status = broker.cancel(jobId); !status) {
            invalid(status.error());
            return;
        }
        send(routingId, okMessage(id));
        return;
    }
    case Command::Quote: {
        auto spec = core::JobSpec::fromJson(message.header.value(QStringLiteral("job")).toObject());
        if (!spec) {
            sendError(routingId, errors::Invalid, QStringLiteral("job.") + spec.error().toString(), re, id);
            return;
        }
        auto quote = broker.quoteFor(*spec);
        if (!quote) {
            sendError(routingId, errors::Invalid, QStringLiteral("job.") + quote.error().toString(), re, id);
            return;
        }
        send(routingId, okMessage(id, { { QStringLiteral("quote"), quote->toJson() } }));
        return;
    }
    case Command::Balance: {
        const QString who = message.header.value(QStringLiteral("account")).toString(caller);
        if (!operatorCaller && who != caller) {
            forbidden(QStringLiteral("the balance of %1 is for its holder to see").arg(who));
            return;
        }
        auto account = broker.account(who);
        if (!account) {
            sendError(routingId, errors::Internal, account.error().toString(), re, id);
            return;
        }
        send(routingId, okMessage(id, *account));
        return;
    }
    case Command::Ledger: {
        const auto invariants = broker.ledger().checkInvariants();
        auto minted = broker.ledger().balance(core::ledger::accounts::Mint);
        send(routingId,
            okMessage(id,
                { { QStringLiteral("consistent"), invariants.ok() },
                    { QStringLiteral("problem"), invariants.ok() ? QString() : invariants.error().message },
                    { QStringLiteral("minted"),
                        minted ? minted->checkedMultiply(-1).value_or(core::Credits {}).toString() : QString() } }));
        return;
    }
    case Command::Commit: {
        if (!requireNode())
            return;
        if (auto status = broker.commit(peer.nodeId, message.header.value(QStringLiteral("commitment")).toObject()); !status) {
            invalid(status.error());
            return;
        }
        send(routingId, okMessage(id, { { QStringLiteral("committed"), true } }));
        return;
    }
    case Command::Nodes: {
        auto nodes = broker.nodes();
        if (!nodes) {
            sendError(routingId, errors::Internal, nodes.error().toString(), re, id);
            return;
        }
        // Records, stakes and slashes are public; a balance is its holder's.
        QJsonArray list;
        for (auto node : *nodes) {
            if (!operatorCaller && node.value(QStringLiteral("nodeId")).toString() != caller)
                node.remove(QStringLiteral("balance"));
            list.append(node);
        }
        send(routingId, okMessage(id, { { QStringLiteral("nodes"), list } }));
        return;
    }
    case Command::Receipt: {
        const QString cause = message.header.value(QStringLiteral("cause")).toString();
        if (!operatorCaller && broker.ledger().hasCause(cause).value_or(false)
            && !broker.isPartyTo(caller, cause).value_or(false)) {
            forbidden(QStringLiteral("the receipt for %1 is for the parties it names").arg(cause));
            return;
        }
        auto receipt = broker.receipt(cause);
        if (!receipt) {
            invalid(receipt.error());
            return;
        }
        send(routingId, okMessage(id, { { QStringLiteral("receipt"), *receipt } }));
        return;
    }
    case Command::Checkpoint: {
        if (!requireNode())
            return;
        const QString verification = message.header.value(QStringLiteral("verification")).toString();
        const QString sha = message.header.value(QStringLiteral("sha256")).toString();
        core::Digest blob;
        if (!sha.isEmpty()) {
            auto digest = core::Digest::fromHex(sha);
            if (!digest) {
                invalid(core::Error { QStringLiteral("sha256"), digest.error().message });
                return;
            }
            blob = *digest;
        }
        // An unusable state is answered with an ERROR that says why; it may still have settled the
        // dispute (nobody left to ask), so the verdicts go out either way.
        if (auto status = broker.checkpointDelivered(peer.nodeId, verification, blob); !status)
            invalid(status.error());
        else
            send(routingId, okMessage(id));
        sendNotices();
        dispatchWork();
        return;
    }
    case Command::Stake: {
        auto account = broker.stake(message.header.value(QStringLiteral("request")).toObject());
        if (!account) {
            invalid(account.error());
            return;
        }
        send(routingId, okMessage(id, *account));
        // Bonded: a node that was refused work for its stake is asked again now.
        const QString staker
            = message.header.value(QStringLiteral("request")).toObject().value(QStringLiteral("node")).toString();
        for (auto& other : peers) {
            if (other.nodeId == staker)
                other.refusedUntil = 0;
        }
        dispatchWork();
        return;
    }
    case Command::Verifications: {
        auto checks = broker.verifications(message.header.value(QStringLiteral("jobId")).toString());
        if (!checks) {
            sendError(routingId, errors::Internal, checks.error().toString(), re, id);
            return;
        }
        QJsonArray list;
        for (const auto& check : *checks)
            list.append(check);
        send(routingId, okMessage(id, { { QStringLiteral("verifications"), list } }));
        return;
    }
    case Command::Welcome:
    case Command::Task:
    case Command::Ok:
    case Command::Error:
    case Command::Chunk:
    case Command::Verdict:
        sendError(routingId, errors::BadMessage,
            QStringLiteral("%1 is not a request a broker answers").arg(commandName(message.command)), re, id);
        return;
    }
}

} // namespace tessera::net
