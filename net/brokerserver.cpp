#include "brokerserver.h"

#include "blobcoding.h"
#include "framing.h"
#include "messages.h"
#include "ratelimiter.h"

#include <core/capabilities.h>

#include <QCache>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLoggingCategory>
#include <QRandomGenerator>
#include <QRegularExpression>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <cstring>
#include <deque>

#include <arpa/inet.h>
#include <unistd.h>

Q_LOGGING_CATEGORY(lcBroker, "tessera.broker")

namespace tessera::net {

namespace {

// What a blob range, a served answer's part and a stage's tensor cost against the rate limit.
constexpr double RangeCost = 0.25;

QString shortId(const QString& id)
{
    return id.left(12);
}

bool isLoopback(const QString& endpoint)
{
    const QString host = endpointHost(endpoint);
    return host == u"localhost" || host.startsWith(u"127.") || host == u"[::1]" || host == u"::1";
}

// A node the broker may not give work (too little stake bonded) is asked again this often.
constexpr std::int64_t RefusedRetryMs = 10'000;
// A peer dropped for flooding is ignored this long; a client that is silent this long is forgotten.
constexpr std::int64_t BanMs = 60'000;
constexpr std::int64_t ForgetClientMs = 60'000;

// What a peer hears of the broker's own trouble: no file of the broker's (its database, its blob
// folder, a worker's scratch folder) is named to a stranger; the log has the whole text.
QString scrubbed(QString text)
{
    static const QRegularExpression path(QStringLiteral(R"((?<![\w:/.])/(?:[\w.+@-]+/)+[\w.+@-]*)"));
    return text.replace(path, QStringLiteral("[a file of the broker's]"));
}

QJsonObject scrubbed(QJsonObject body)
{
    for (auto it = body.begin(); it != body.end(); ++it) {
        if (it->isString())
            *it = scrubbed(it->toString());
    }
    return body;
}

} // namespace

QString scrubbedForPeers(const QString& text)
{
    return scrubbed(text);
}

struct BrokerServer::Private {
    struct Peer {
        QString nodeId; // empty until REGISTER (job owners' clients never register)
        bool waiting = false; // sent READY and has no task yet
        std::int64_t refusedUntil = 0; // the broker may not give it work (stake too low); asked again then
        double score = 0.0;
        std::int64_t lastSeen = 0;
        std::int64_t lastSent = 0;
        QString principal; // whose limits and bans apply (principalOf)
        QJsonValue readyId = {}; // of its latest READY: an ERROR refusing it names it
        QString probe; // of the latest HEARTBEAT sent to it (docs/PROTOCOL.md, "Round trips")
        std::int64_t probeSentAt = 0;
    };
    // Limits and bans are per identity, not per connection: a new socket does not start afresh.
    struct Principal {
        RateLimiter limiter;
        std::int64_t lastSeen = 0;
    };

    // One request as a handler sees it: who sent it and what, decoded, and who the caller is.
    struct Request {
        QByteArray routingId;
        Peer& peer;
        const Message& message;
        QJsonValue id;
        QString caller; // under CURVE the client's key; in plaintext the account it names
        bool operatorCaller = false; // a key of Broker/OperatorKeys, or any plaintext caller
        QString userId; // the CURVE key; empty in plaintext
        QString principal; // the CURVE key; in plaintext the peer's address (on loopback, its connection)
        QString address; // the peer's IP address; empty on loopback or where it is not known
        QString host; // the peer's IP address as it came, loopback too; empty where not known
        int re() const { return int(message.command); }
        const QJsonObject& header() const { return message.header; }
    };

    core::broker::Broker& broker;
    BrokerServerOptions options;
    const core::Clock& clock;
    std::unique_ptr<zmq::context_t> ownContext;
    zmq::context_t& context;
    zmq::socket_t router;
    std::unique_ptr<zmq::socket_t> zap;
    QString endpoint;
    QHash<QByteArray, Peer> peers;
    QHash<QString, Principal> principals;
    QHash<QString, std::int64_t> banned; // principal -> until (ms)
    Counters counters;
    std::int64_t nextKeepAlive = 0;
    // Messages waiting for the broker, in the order they came (all of them go through here), and
    // how many each peer has waiting; `busy` while serveWhileBusy runs. A message that came while
    // the broker computed passed admission then (`admitted`) and counts against its principal's
    // bound on waiting messages and bytes until it is handled.
    struct Waiting {
        QByteArray routingId;
        detail::Frames received;
        bool admitted = false;
        QString principal = {};
        std::int64_t bytes = 0;
    };
    struct WaitingOf {
        int messages = 0;
        std::int64_t bytes = 0;
    };
    std::deque<Waiting> deferred;
    QHash<QByteArray, int> deferredOf;
    QHash<QString, WaitingOf> waitingOf; // principal -> its messages that came while busy
    // Clients whose SUBMIT waits for its weights to be built in the background: each hears a
    // HEARTBEAT every heartbeat interval until its answer, so that it knows the broker is alive.
    QHash<QByteArray, int> building;
    std::int64_t buildingHeardAt = 0; // when they last heard one while the broker was busy
    std::int64_t waitingBytes = 0;
    bool busy = false;
    // The zstd ranges sent last ("Encoded ranges"), by blob, offset and length: nodes that fetch the
    // same round's change ask for the same ranges, and each costs one coding. An empty entry: the
    // range does not shrink and goes plain.
    QCache<QString, QByteArray> codedRanges { CodedRangeCacheBytes };
    static constexpr qsizetype CodedRangeCacheBytes = 32 * 1024 * 1024;
    std::unique_ptr<BrokerSwarm> swarm; // with options.swarm, from bind()

    Private(core::broker::Broker& b, BrokerServerOptions o, const core::Clock& c)
        : broker(b)
        , options(std::move(o))
        , clock(c)
        , ownContext(options.context ? nullptr : std::make_unique<zmq::context_t>())
        , context(options.context ? *options.context : *ownContext)
        , router(context, zmq::socket_type::router)
    { }

    std::int64_t now() const { return clock.nowMs(); }

    // --- sending ---------------------------------------------------------------------------------

    void send(const QByteArray& routingId, const Message& message)
    {
        counters.bytesOut += detail::sendMessage(router, message, routingId);
        if (auto it = peers.find(routingId); it != peers.end())
            it->lastSent = now();
    }

    void sendError(const QByteArray& routingId, const QString& code, const QString& text, int re, const QJsonValue& id)
    {
        ++counters.errors;
        qCWarning(lcBroker).noquote() << "refused a message:" << code << text;
        send(routingId, errorMessage(code, scrubbed(text), re, id));
    }

    void ok(const Request& r, const QJsonObject& fields = {}) { send(r.routingId, okMessage(r.id, fields)); }
    void refuse(const Request& r, const QString& code, const QString& text) { sendError(r.routingId, code, text, r.re(), r.id); }
    void forbidden(const Request& r, const QString& text) { refuse(r, errors::Forbidden, text); }
    // A broker error as the peer should hear it: a full disk is the broker's trouble, not the
    // request's (disk-full, without the broker's paths; the log has the whole error).
    void refuse(const Request& r, const core::Error& error, const QString& code = errors::Invalid, const QString& prefix = {})
    {
        refuseLater({ r.routingId, r.message.command, r.re(), r.id }, error, code, prefix);
    }
    // Who to answer once a request that ran in the background is done.
    struct Asker {
        QByteArray routingId;
        Command command;
        int re;
        QJsonValue id;
    };
    void refuseLater(
        const Asker& asker, const core::Error& error, const QString& code = errors::Invalid, const QString& prefix = {})
    {
        if (error.diskFull) {
            qCWarning(lcBroker).noquote() << commandName(asker.command) << "refused:" << error.toString();
            sendError(asker.routingId, errors::DiskFull,
                QStringLiteral("the broker's disk is full; nothing was stored (try again later)"), asker.re, asker.id);
            return;
        }
        if (error.field == u"database") { // the broker's own trouble: what SQLite said stays in the log
            qCWarning(lcBroker).noquote() << commandName(asker.command) << "refused:" << error.toString();
            sendError(asker.routingId, errors::Internal,
                QStringLiteral("the broker could not record this (an error of its database; its operator's log has it)"),
                asker.re, asker.id);
            return;
        }
        if (error.field == u"standby") { // a standby broker of a network: ask the active one
            sendError(asker.routingId, errors::Standby, error.message, asker.re, asker.id);
            return;
        }
        sendError(asker.routingId, code, prefix + error.toString(), asker.re, asker.id);
    }
    bool requireNode(const Request& r)
    {
        if (!r.peer.nodeId.isEmpty())
            return true;
        refuse(r, errors::NotRegistered, QStringLiteral("send REGISTER first"));
        return false;
    }
    // Decodes a typed request; a wrong field is answered invalid and comes back empty.
    template<typename Typed> std::optional<Typed> decoded(const Request& r)
    {
        auto typed = Typed::fromHeader(r.header());
        if (!typed) {
            refuse(r, errors::Invalid, typed.error().toString());
            return std::nullopt;
        }
        return std::move(*typed);
    }

    // --- the loop --------------------------------------------------------------------------------

    void receive();
    // The next message with its sender's routing id, if one is waiting.
    std::optional<std::pair<QByteArray, detail::Frames>> nextMessage();
    void queue(QByteArray routingId, detail::Frames received);
    void drainDeferred();
    void serveBusy();
    void handleZap();
    // Admission: the ban list and the peer's rate limit. False: the message goes no further.
    bool admit(const QByteArray& routingId, const QString& principal, const QList<QByteArray>& frames);
    void handle(const QByteArray& routingId, const detail::Frames& received, bool admitted = false);
    // Whose limits apply to a message: its CURVE key; in plaintext its IP address, except on
    // loopback, where every process of the machine shares one address (and is the operator): there
    // each connection counts on its own.
    static QString principalOf(const QByteArray& routingId, const detail::Frames& received);
    // The peer's IP address (ZeroMQ's Peer-Address): IPv4, or an IPv6 /64 ("2001:db8::/64"); empty
    // on loopback or where it is not known.
    static QString addressOf(const detail::Frames& received);
    // The peer's IP address as it came, loopback too (an IPv4 address mapped into IPv6 is that
    // IPv4 address).
    static QString hostOf(const QString& peerAddress)
    {
        return peerAddress.startsWith(u"::ffff:") && peerAddress.contains(u'.') ? peerAddress.mid(7) : peerAddress;
    }
    core::Status startSwarm();
    QList<SwarmOffer> swarmOffers(const QString& nodeId, const core::broker::Assignment& a, std::int64_t validMs);
    void nodeGone(const QString& nodeId);
    void onHave(Request& r);
    void dispatch(Request& r);
    void keepAlive();
    // A HEARTBEAT to a node, with a new probe; its echo gives the node's round trip
    // (docs/PROTOCOL.md, "Round trips").
    void sendHeartbeat(const QByteArray& routingId, Peer& peer);
    void noteEcho(Peer& peer, const detail::Frames& received); // while the broker computes
    void noteEcho(Peer& peer, const QJsonObject& header);
    void dispatchWork();
    // Sends what the broker has to tell nodes (dispute checkpoint requests, verdicts) to those
    // connected; a node that is away misses its verdicts (its dispute then times out).
    void sendNotices();

    // --- node commands ---------------------------------------------------------------------------
    void onRegister(Request& r);
    void onBye(Request& r);
    void onReady(Request& r);
    void onResult(Request& r);
    void onCommit(Request& r);
    void onCheckpoint(Request& r);
    // Serving (docs/PROTOCOL.md, "Serving").
    void onAsk(Request& r);
    void onTokens(Request& r);
    void onAnswer(Request& r);
    void onHosting(Request& r);
    // A stage task's tensor (docs/PROTOCOL.md, "Stage tasks"): checked by the broker and forwarded.
    void onTensor(Request& r);
    // Pipeline shards to the waiting nodes, S at a time.
    void dispatchPipelines(QList<QByteArray>& waiting);
    void sendServeNotices();
    // The ASKs waiting for their answers, by the handle the broker's serving knows them by.
    QHash<std::int64_t, Asker> askers;
    std::int64_t nextAsker = 1;
    // The routing id of a registered node's connection (empty: not connected).
    QByteArray routingOfNode(const QString& nodeId) const
    {
        for (auto it = peers.constBegin(); it != peers.constEnd(); ++it) {
            if (it->nodeId == nodeId)
                return it.key();
        }
        return {};
    }

    // --- blob commands ---------------------------------------------------------------------------
    void onGet(Request& r);
    void onPut(Request& r);

    // --- client commands -------------------------------------------------------------------------
    void onSubmit(Request& r);
    void onStatus(Request& r);
    void onList(Request& r);
    void onCancel(Request& r);
    void onQuote(Request& r);
    bool namesOnlyReadableBlobs(Request& r, const core::JobSpec& job); // or answers forbidden
    void onBalance(Request& r);
    void onLedger(Request& r);
    void onNodes(Request& r);
    void onReceipt(Request& r);
    void onLogHead(Request& r);
    void onLogProof(Request& r);
    void onLogConsistency(Request& r);
    void onLogEntries(Request& r);
    void onRecord(Request& r);
    // A log request's reply, or its error (a database's as internal).
    void answer(Request& r, const core::Result<QJsonObject>& reply);
    void onStake(Request& r);
    void onVerifications(Request& r);
};

BrokerServer::BrokerServer(core::broker::Broker& broker, BrokerServerOptions options, const core::Clock& clock)
    : d(std::make_unique<Private>(broker, std::move(options), clock))
{ }

BrokerServer::~BrokerServer() = default;

core::Status BrokerServer::bind()
{
    // A Unix socket (ipc://PATH) reaches whoever may enter its folder: only a folder of this
    // account's alone (no access for group or others) keeps a plaintext broker its own.
    if (d->options.bind.startsWith(u"ipc://")) {
        const QFileInfo folder(QFileInfo(d->options.bind.mid(6)).absolutePath());
        const auto others = QFileDevice::ReadGroup | QFileDevice::WriteGroup | QFileDevice::ExeGroup | QFileDevice::ReadOther
            | QFileDevice::WriteOther | QFileDevice::ExeOther;
        if (!folder.isDir() || (folder.permissions() & others) || folder.ownerId() != ::getuid())
            return core::Error { QStringLiteral("bind"),
                QStringLiteral("refusing to listen on %1: its folder must be this account's alone (mode 0700), so that no "
                               "other account on this machine reaches the broker")
                    .arg(d->options.bind) };
    }
    if (!d->options.keys && !d->options.insecurePlaintext && !d->options.bind.startsWith(u"inproc://")
        && !d->options.bind.startsWith(u"ipc://") && !isLoopback(d->options.bind))
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
    d->nextKeepAlive = d->now() + d->options.heartbeatMs;
    return d->startSwarm();
}

core::Status BrokerServer::Private::startSwarm()
{
    if (!options.swarm)
        return {};
    auto seed = *options.swarm;
    if (seed.address.isEmpty()) {
        const QString host = endpointHost(endpoint);
        seed.address = host.isEmpty()            ? QStringLiteral("127.0.0.1")
            : host == u"*" || host == u"0.0.0.0" ? QStringLiteral("0.0.0.0")
                                                 : host;
    }
    auto started = BrokerSwarm::start(seed, broker.blobs());
    if (!started)
        return core::Error { QStringLiteral("swarm"),
            QStringLiteral("the blob swarm cannot start: %1").arg(started.error().toString()) };
    swarm = std::move(*started);
    qCInfo(lcBroker).noquote() << "seeding blobs over the swarm on" << seed.address << "port" << swarm->port();
    return {};
}

int BrokerServer::swarmPort() const
{
    return d->swarm ? d->swarm->port() : 0;
}

// The blobs of a TASK over one piece, offered over the swarm to a node that joined it.
QList<SwarmOffer> BrokerServer::Private::swarmOffers(
    const QString& nodeId, const core::broker::Assignment& a, std::int64_t validMs)
{
    if (!swarm || !swarm->member(nodeId))
        return {};
    QList<core::Digest> blobs { a.startWeightsBlob };
    if (a.startChange)
        blobs.append(a.startChange->blob);
    return swarm->offer(nodeId, blobs + a.task.inputBlobs(), validMs);
}

void BrokerServer::Private::nodeGone(const QString& nodeId)
{
    broker.nodeLost(nodeId);
    if (swarm)
        swarm->left(nodeId);
}

QString BrokerServer::address() const
{
    return d->options.keys ? d->endpoint + u'#' + d->options.keys->publicKey : d->endpoint;
}

BrokerServer::Counters BrokerServer::counters() const
{
    auto counters = d->counters;
    counters.swarmBytesOut = d->swarm ? d->swarm->uploadedBytes() : 0;
    return counters;
}

void BrokerServer::run(const std::atomic<bool>& stop)
{
    while (!stop.load())
        pollOnce(int(std::clamp<std::int64_t>(d->nextKeepAlive - d->now(), 0, d->options.heartbeatMs)));
    for (auto it = d->peers.constBegin(); it != d->peers.constEnd(); ++it) {
        if (!it->nodeId.isEmpty())
            d->send(it.key(), { Command::Bye, {}, {} });
    }
}

void BrokerServer::pollOnce(int maxWaitMs)
{
    // What came while the broker computed goes first.
    if (!d->deferred.empty()) {
        d->drainDeferred();
        d->sendNotices();
        maxWaitMs = 0;
    }
    if (d->broker.submitsInBackground() > 0)
        maxWaitMs = std::min(maxWaitMs, 20); // their answers go out soon after their weights are built
    std::vector<zmq::pollitem_t> items { { d->router.handle(), 0, ZMQ_POLLIN, 0 } };
    if (d->zap)
        items.push_back({ d->zap->handle(), 0, ZMQ_POLLIN, 0 });
    try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(std::max(0, maxWaitMs)));
    } catch (const zmq::error_t& error) {
        if (error.num() != EINTR)
            throw;
        return;
    }
    if (d->zap && (items[1].revents & ZMQ_POLLIN))
        d->handleZap();
    if (items[0].revents & ZMQ_POLLIN) {
        d->receive();
        d->sendNotices();
    }
    d->broker.pollSubmits(); // jobs whose initial weights were built in the background
    if (d->now() >= d->nextKeepAlive) {
        d->keepAlive();
        d->broker.tick();
        d->drainDeferred();
        d->sendNotices();
        d->dispatchWork();
        d->nextKeepAlive = d->now() + d->options.heartbeatMs;
    }
}

void BrokerServer::Private::receive()
{
    // Drain what is there (a bounded number), then look after heartbeats. Everything goes through
    // the queue, behind what came while the broker was busy, so that no peer's messages overtake
    // each other.
    for (int i = 0; i < 1000; ++i) {
        auto next = nextMessage();
        if (!next)
            break;
        queue(std::move(next->first), std::move(next->second));
    }
    drainDeferred();
}

std::optional<std::pair<QByteArray, detail::Frames>> BrokerServer::Private::nextMessage()
{
    for (;;) {
        auto received = detail::receiveFrames(router);
        if (!received)
            return std::nullopt;
        if (received->frames.isEmpty())
            continue; // not even a routing id
        QByteArray routingId = received->frames.takeFirst();
        return std::pair { std::move(routingId), std::move(*received) };
    }
}

void BrokerServer::Private::queue(QByteArray routingId, detail::Frames received)
{
    ++deferredOf[routingId];
    deferred.push_back({ std::move(routingId), std::move(received) });
}

void BrokerServer::Private::drainDeferred()
{
    while (!deferred.empty()) {
        auto next = std::move(deferred.front());
        deferred.pop_front();
        if (auto it = deferredOf.find(next.routingId); it != deferredOf.end() && --*it <= 0)
            deferredOf.erase(it);
        if (next.admitted) {
            auto& of = waitingOf[next.principal];
            waitingBytes -= next.bytes;
            of.bytes -= next.bytes;
            if (--of.messages <= 0)
                waitingOf.remove(next.principal);
        }
        // May make the broker busy: new messages queue up behind.
        handle(next.routingId, next.received, next.admitted);
    }
}

void BrokerServer::serveWhileBusy()
{
    if (d->busy)
        return;
    d->busy = true;
    d->serveBusy();
    d->busy = false;
}

namespace {

// What a peer may be answered while the broker computes: reads that change nothing, and a
// pipeline's tensors (the relay's memory only, never the database), which its stages wait on.
bool servedWhileBusy(const QList<QByteArray>& frames)
{
    if (frames.size() < 2 || frames[1].size() != 1)
        return false;
    switch (Command(quint8(frames[1][0]))) {
    case Command::Tensor:
    case Command::Status:
    case Command::List:
    case Command::Nodes:
    case Command::Ledger:
    case Command::Balance:
    case Command::Receipt:
    case Command::Verifications:
    case Command::Get:
    case Command::LogHead:
    case Command::LogProof:
    case Command::LogConsistency:
    case Command::LogEntries:
        return true;
    default:
        return false;
    }
}

} // namespace

void BrokerServer::Private::serveBusy()
{
    // Nothing here may add or remove peers: the broker's caller may be walking them. What waits is
    // bounded per principal (as its rate is), so that one key cannot fill the queue that other
    // peers' RESULTs and CHECKPOINTs wait in, and in all.
    constexpr std::size_t MaxWaiting = 10'000;
    constexpr int MaxWaitingPerPrincipal = 256;
    constexpr std::int64_t MaxWaitingBytesPerPrincipal = 32LL << 20;
    constexpr std::int64_t MaxWaitingBytes = 512LL << 20;
    if (zap) {
        zmq::pollitem_t item { zap->handle(), 0, ZMQ_POLLIN, 0 };
        while (zmq::poll(&item, 1, std::chrono::milliseconds(0)) > 0 && (item.revents & ZMQ_POLLIN))
            handleZap();
    }
    broker.keepLease(); // an aggregation longer than the lease must not let a standby take over
    for (int i = 0; i < 200; ++i) {
        auto next = nextMessage();
        if (!next)
            break;
        auto& [routingId, received] = *next;
        const auto found = peers.find(routingId);
        const bool heartbeat = received.frames.size() > 1 && received.frames[1].size() == 1
            && quint8(received.frames[1][0]) == quint8(Command::Heartbeat);
        if (heartbeat && found == peers.end() && deferredOf.contains(routingId)) {
            // A node whose REGISTER waits in the queue: answered, so that it does not take the
            // broker for gone while a large model's weights are built.
            counters.bytesOut += detail::sendMessage(router, { Command::Heartbeat, {}, {} }, routingId);
            continue;
        }
        if (found != peers.end()) {
            found->lastSeen = now();
            if (heartbeat) { // its arrival is all a heartbeat says, but for the echo of a probe
                noteEcho(*found, received);
                continue;
            }
            if (!deferredOf.contains(routingId) && servedWhileBusy(received.frames)) {
                handle(routingId, received);
                continue;
            }
        }
        const QString principal = principalOf(routingId, received);
        if (auto ban = banned.find(principal); ban != banned.end() && now() < *ban)
            continue; // dropped for flooding: not even an answer
        if (!admit(routingId, principal, received.frames))
            continue; // over its rate: refused as at any time
        std::int64_t bytes = 0;
        for (const auto& frame : received.frames)
            bytes += frame.size();
        const auto& of = waitingOf[principal];
        if (deferred.size() >= MaxWaiting || of.messages >= MaxWaitingPerPrincipal
            || of.bytes + bytes > MaxWaitingBytesPerPrincipal || waitingBytes + bytes > MaxWaitingBytes) {
            if (of.messages == 0)
                waitingOf.remove(principal);
            ++counters.errors;
            sendError(routingId, errors::TooManyRequests, QStringLiteral("the broker is busy; try again in a moment"), -1, {});
            continue;
        }
        auto& counted = waitingOf[principal];
        ++counted.messages;
        counted.bytes += bytes;
        waitingBytes += bytes;
        ++deferredOf[routingId];
        deferred.push_back({ std::move(routingId), std::move(received), true, principal, bytes });
    }
    // Nodes hear from the broker as usual, so that none takes it for gone, and so does a client
    // whose SUBMIT is being answered (a zoo model's weights are built on the arithmetic thread).
    const auto t = now();
    for (auto it = peers.begin(); it != peers.end(); ++it) {
        if (!it->nodeId.isEmpty() && t - it->lastSent >= options.heartbeatMs)
            sendHeartbeat(it.key(), *it);
    }
    if (!building.isEmpty() && t - buildingHeardAt >= options.heartbeatMs) {
        buildingHeardAt = t;
        for (auto it = building.cbegin(); it != building.cend(); ++it)
            send(it.key(), { Command::Heartbeat, {}, {} });
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

bool BrokerServer::Private::admit(const QByteArray& routingId, const QString& who, const QList<QByteArray>& frames)
{
    // A blob range (GET, PUT) counts a quarter: a download on a fast link is 1 MiB ranges as fast as
    // the link carries them (about 600 a second on loopback here), not a flood.
    // So do a served answer's parts (TOKENS, ANSWER): a replica of a small model answers hundreds of
    // requests a second; and a pipeline's tensors (TENSOR), a few a micro-batch.
    const bool range = frames.size() > 1 && frames[1].size() == 1
        && (quint8(frames[1][0]) == quint8(Command::Get) || quint8(frames[1][0]) == quint8(Command::Put)
            || quint8(frames[1][0]) == quint8(Command::Tokens) || quint8(frames[1][0]) == quint8(Command::Answer)
            || quint8(frames[1][0]) == quint8(Command::Tensor));
    // A proof of the ledger's log reads up to a few thousand hashes: it counts 4.
    const bool logRead = frames.size() > 1 && frames[1].size() == 1
        && (quint8(frames[1][0]) == quint8(Command::LogProof) || quint8(frames[1][0]) == quint8(Command::LogConsistency));
    auto& principal = principals[who];
    if (principal.lastSeen == 0)
        principal.limiter = RateLimiter(options.maxRequestsPerSecond);
    principal.lastSeen = now();
    switch (principal.limiter.admit(range ? RangeCost : logRead ? 4.0 : 1.0, now())) {
    case RateLimiter::Decision::Pass:
        return true;
    case RateLimiter::Decision::Refuse:
        ++counters.errors;
        send(routingId,
            errorMessage(errors::TooManyRequests,
                QStringLiteral("more than %1 messages a second; slow down").arg(options.maxRequestsPerSecond), -1, {}));
        return false;
    case RateLimiter::Decision::Drop:
        if (busy) { // no peer is removed while the broker computes: refused now, dropped later
            ++counters.errors;
            send(routingId, errorMessage(errors::TooManyRequests, QStringLiteral("slow down"), -1, {}));
            return false;
        }
        qCWarning(lcBroker).noquote() << "dropped a peer that sent more than" << options.maxRequestsPerSecond
                                      << "messages a second for 5 s" << shortId(who);
        // Every connection of that identity goes, and stays away for the ban.
        {
            const QString flooder = who;
            for (auto it = peers.begin(); it != peers.end();) {
                if (it->principal != flooder) {
                    ++it;
                    continue;
                }
                if (!it->nodeId.isEmpty())
                    nodeGone(it->nodeId);
                it = peers.erase(it);
            }
            principals.remove(flooder);
            banned.insert(flooder, now() + BanMs);
        }
        ++counters.errors;
        ++counters.dropped;
        return false;
    }
    return false;
}

QString BrokerServer::Private::addressOf(const detail::Frames& received)
{
    const QString address = hostOf(received.peerAddress);
    if (address.isEmpty() || address.startsWith(u"127.") || address == u"::1")
        return {};
    // One IPv6 host is given a whole /64: its first 64 bits are its address here.
    in6_addr six {};
    if (inet_pton(AF_INET6, address.toLatin1().constData(), &six) == 1) {
        std::memset(&six.s6_addr[8], 0, 8);
        char text[INET6_ADDRSTRLEN] {};
        if (inet_ntop(AF_INET6, &six, text, sizeof text) != nullptr)
            return QString::fromLatin1(text) + QStringLiteral("/64");
    }
    return address;
}

QString BrokerServer::Private::principalOf(const QByteArray& routingId, const detail::Frames& received)
{
    if (!received.userId.isEmpty())
        return received.userId;
    const QString address = addressOf(received);
    if (address.isEmpty())
        return QStringLiteral("connection:") + QString::fromLatin1(routingId.toHex());
    return QStringLiteral("address:") + address;
}

void BrokerServer::Private::handle(const QByteArray& routingId, const detail::Frames& received, bool admitted)
{
    ++counters.messages;
    const QList<QByteArray>& frames = received.frames;
    for (const auto& frame : frames)
        counters.bytesIn += frame.size();
    const QString& userId = received.userId;
    const QString principal = principalOf(routingId, received);
    if (auto ban = banned.find(principal); ban != banned.end()) {
        if (now() < *ban)
            return; // dropped for flooding: not even an answer
        banned.erase(ban);
    }
    auto found = peers.find(routingId);
    if (found == peers.end())
        found = peers.insert(routingId, Peer { {}, false, 0, 0.0, 0, 0, principal, {}, {}, 0 });
    auto& peer = *found;
    peer.lastSeen = now();
    if (!admitted && !admit(routingId, peer.principal, frames))
        return;
    auto message = decode(frames);
    if (!message) {
        sendError(routingId, message.error().code, message.error().message, message.error().command, {});
        return;
    }
    // Who asks (docs/PROTOCOL.md, "Who may do what"): under CURVE the client's key, the operator when
    // the key is one of Broker/OperatorKeys; on a plaintext broker (loopback only) every caller is
    // the operator, acting for the account it names ("owner").
    const auto envelope = Envelope::of(message->header);
    const bool curve = !userId.isEmpty();
    Request request { routingId, peer, *message, envelope.id,
        curve ? userId : (envelope.owner.isEmpty() ? QStringLiteral("local") : envelope.owner),
        !curve || options.operatorKeys.contains(userId), userId, principal, addressOf(received), hostOf(received.peerAddress) };
    dispatch(request);
}

void BrokerServer::Private::dispatch(Request& r)
{
    switch (r.message.command) {
    case Command::Register:
        return onRegister(r);
    case Command::Heartbeat:
        return noteEcho(r.peer, r.message.header);
    case Command::Bye:
        return onBye(r);
    case Command::Ready:
        return onReady(r);
    case Command::Result:
        return onResult(r);
    case Command::Commit:
        return onCommit(r);
    case Command::Checkpoint:
        return onCheckpoint(r);
    case Command::Get:
        return onGet(r);
    case Command::Put:
        return onPut(r);
    case Command::Submit:
        return onSubmit(r);
    case Command::Status:
        return onStatus(r);
    case Command::List:
        return onList(r);
    case Command::Cancel:
        return onCancel(r);
    case Command::Quote:
        return onQuote(r);
    case Command::Balance:
        return onBalance(r);
    case Command::Ledger:
        return onLedger(r);
    case Command::Nodes:
        return onNodes(r);
    case Command::Receipt:
        return onReceipt(r);
    case Command::Stake:
        return onStake(r);
    case Command::Verifications:
        return onVerifications(r);
    case Command::Have:
        return onHave(r);
    case Command::LogHead:
        return onLogHead(r);
    case Command::LogProof:
        return onLogProof(r);
    case Command::LogConsistency:
        return onLogConsistency(r);
    case Command::LogEntries:
        return onLogEntries(r);
    case Command::Record:
        return onRecord(r);
    case Command::Ask:
        return onAsk(r);
    case Command::Tokens:
        return onTokens(r);
    case Command::Answer:
        return onAnswer(r);
    case Command::Hosting:
        return onHosting(r);
    case Command::Tensor:
        return onTensor(r);
    case Command::Stop:
    case Command::Request:
    case Command::Welcome:
    case Command::Task:
    case Command::Ok:
    case Command::Error:
    case Command::Chunk:
    case Command::Verdict:
        refuse(r, errors::BadMessage, QStringLiteral("%1 is not a request a broker answers").arg(commandName(r.message.command)));
        return;
    }
}

void BrokerServer::Private::sendHeartbeat(const QByteArray& routingId, Peer& peer)
{
    peer.probe = QString::number(QRandomGenerator::system()->generate64() | (quint64(1) << 63), 16);
    peer.probeSentAt = now();
    send(routingId, { Command::Heartbeat, QJsonObject { { QStringLiteral("probe"), peer.probe } }, {} });
}

void BrokerServer::Private::noteEcho(Peer& peer, const detail::Frames& received)
{
    if (received.frames.size() >= 3 && received.frames[2].size() <= 256)
        noteEcho(peer, QJsonDocument::fromJson(received.frames[2]).object());
}

void BrokerServer::Private::noteEcho(Peer& peer, const QJsonObject& header)
{
    if (peer.nodeId.isEmpty() || peer.probe.isEmpty())
        return;
    if (header.value(QStringLiteral("echo")).toString() != peer.probe)
        return; // an older probe's, or a guess: no shorter trip than the node has
    broker.noteRoundTrip(peer.nodeId, now() - peer.probeSentAt);
    peer.probe.clear();
}

void BrokerServer::Private::keepAlive()
{
    for (auto it = building.cbegin(); it != building.cend(); ++it)
        send(it.key(), { Command::Heartbeat, {}, {} });
    // So does a client whose ASK waits (queued, or checked by a second replica).
    QSet<QByteArray> asking;
    for (const auto& asker : std::as_const(askers))
        asking.insert(asker.routingId);
    for (const auto& routingId : std::as_const(asking))
        send(routingId, { Command::Heartbeat, {}, {} });
    const auto t = now();
    QList<QByteArray> gone;
    for (auto it = peers.begin(); it != peers.end(); ++it) {
        const bool node = !it->nodeId.isEmpty();
        const std::int64_t silence = t - it->lastSeen;
        if (node && silence > std::int64_t(options.heartbeatMs) * options.liveness) {
            qCInfo(lcBroker).noquote() << "node" << shortId(it->nodeId) << "went silent; its shards go to others";
            nodeGone(it->nodeId);
            gone.append(it.key());
        } else if (!node && silence > ForgetClientMs) {
            gone.append(it.key()); // a client that went away
        } else if (node && t - it->lastSent >= options.heartbeatMs) {
            sendHeartbeat(it.key(), *it);
        }
    }
    for (const auto& id : gone)
        peers.remove(id);
    for (auto it = principals.begin(); it != principals.end();)
        it = t - it->lastSeen > ForgetClientMs ? principals.erase(it) : std::next(it);
    for (auto it = banned.begin(); it != banned.end();)
        it = t >= *it ? banned.erase(it) : std::next(it);
    if (swarm)
        swarm->tick();
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
    dispatchPipelines(waiting);
    const auto t = now();
    for (const auto& id : waiting) {
        auto& peer = peers[id];
        if (t < peer.refusedUntil)
            continue;
        auto assignment = broker.assign(peer.nodeId);
        if (!assignment) {
            // Told once why (the node logs it), asked again in a while or as soon as it bonds stake.
            qCWarning(lcBroker).noquote() << "no work for node" << shortId(peer.nodeId) << ":" << assignment.error().toString();
            if (peer.refusedUntil == 0)
                sendError(id, errors::Invalid, assignment.error().toString(), int(Command::Ready), peer.readyId);
            peer.refusedUntil = t + RefusedRetryMs;
            continue;
        }
        peer.refusedUntil = 0;
        if (!assignment->has_value())
            continue;
        const auto& a = **assignment;
        peer.waiting = false;
        ++counters.tasksSent;
        // A served job's replica has no deadline (0): it hosts until the job ends.
        const auto deadlineMs = a.deadlineMs > 0 ? a.deadlineMs - t : 0;
        send(id,
            { Command::Task,
                TaskMessage { a.id, deadlineMs, a.task, a.startWeightsBlob, a.startChange,
                    swarmOffers(peer.nodeId, a, deadlineMs > 0 ? deadlineMs : 3'600'000) }
                    .toHeader(),
                {} });
    }
}

void BrokerServer::Private::sendServeNotices()
{
    using Kind = core::broker::ServeNotice::Kind;
    for (auto& notice : broker.takeServeNotices()) {
        switch (notice.kind) {
        case Kind::Request:
        case Kind::Unhost: {
            const auto node = routingOfNode(notice.node);
            if (node.isEmpty())
                break; // gone: the broker hears of it (nodeLost) and sends the request elsewhere
            if (notice.kind == Kind::Request)
                send(node,
                    { Command::Request, ServeRequest { notice.assignment, notice.ticket, notice.question }.toHeader(), {} });
            else
                send(node, { Command::Hosting, HostingMessage { notice.assignment, false, {} }.toHeader(), {} });
            break;
        }
        case Kind::Tokens: {
            const auto asker = askers.constFind(notice.asker);
            if (asker == askers.constEnd())
                break;
            auto header = TokensMessage { {}, notice.from, notice.tokens }.toHeader();
            header.insert(QStringLiteral("text"), core::inference::textOf(notice.tokens));
            if (!asker->id.isUndefined())
                header.insert(fields::Id, asker->id);
            send(asker->routingId, { Command::Tokens, header, {} });
            break;
        }
        case Kind::Answer:
        case Kind::Refuse: {
            const auto asker = askers.constFind(notice.asker);
            if (asker == askers.constEnd())
                break;
            if (notice.kind == Kind::Answer)
                send(asker->routingId, okMessage(asker->id, { { QStringLiteral("answer"), notice.answer } }));
            else
                refuseLater(*asker, notice.error);
            askers.erase(asker);
            break;
        }
        }
    }
}

void BrokerServer::Private::sendNotices()
{
    sendServeNotices();
    for (auto& notice : broker.takeNotices()) {
        for (auto it = peers.constBegin(); it != peers.constEnd(); ++it) {
            if (it->nodeId != notice.nodeId)
                continue;
            const auto command = notice.kind == core::broker::Notice::Kind::CheckpointRequest ? Command::Checkpoint
                : notice.kind == core::broker::Notice::Kind::Stop                             ? Command::Stop
                                                                                              : Command::Verdict;
            send(it.key(), { command, scrubbed(notice.body), {} });
            break;
        }
    }
}

// --- node commands -------------------------------------------------------------------------------

void BrokerServer::Private::onRegister(Request& r)
{
    auto request = RegisterRequest::fromHeader(r.header());
    if (!request) {
        refuse(r, errors::Invalid, request.error().toString());
        return;
    }
    auto& node = request->node;
    // With CURVE, a node is who its key says it is, whatever it claims.
    if (!r.userId.isEmpty())
        node.nodeId = r.userId;
    if (node.nodeId.isEmpty()) {
        refuse(r, errors::Invalid, QStringLiteral("node.nodeId: is required"));
        return;
    }
    if (auto allowed = broker.checkRegistration(node, !r.userId.isEmpty()); !allowed) {
        refuse(r, allowed.error(), errors::Forbidden);
        return;
    }
    // The same node on a new connection (it reconnected, or restarted): what was in flight on the
    // old one is void, a TASK sent there may never have arrived, so its shards go back to the queue
    // (and to it again, if nobody else takes them).
    bool replaced = false;
    for (auto it = peers.begin(); it != peers.end();) {
        if (it.key() != r.routingId && it->nodeId == node.nodeId) {
            it = peers.erase(it);
            replaced = true;
        } else {
            ++it;
        }
    }
    if (replaced)
        nodeGone(node.nodeId);
    if (auto status = broker.registerNode(node, r.address); !status) {
        refuse(r, status.error(), errors::Internal);
        return;
    }
    auto& self = peers[r.routingId];
    self.nodeId = node.nodeId;
    self.score = broker.schedulingScore(node.nodeId);
    qCDebug(lcBroker).noquote() << "node" << shortId(node.nodeId) << "registered:" << node.name << node.runtimeProfile;
    if (swarm && node.swarm && node.capabilities.contains(core::capability::Swarm))
        swarm->joined(node.nodeId, *node.swarm, r.host);
    else if (swarm)
        swarm->left(node.nodeId);
    QJsonObject welcome = Welcome { node.nodeId, options.heartbeatMs, QStringLiteral("1"), { ZstdEncoding },
        swarm ? swarm->port() : 0, broker.networkId(), int(broker.log().intervalMs()) }
                              .toHeader();
    if (!r.id.isUndefined())
        welcome.insert(fields::Id, r.id);
    send(r.routingId, { Command::Welcome, welcome, {} });
}

void BrokerServer::Private::onBye(Request& r)
{
    if (!r.peer.nodeId.isEmpty())
        nodeGone(r.peer.nodeId);
    peers.remove(r.routingId);
}

void BrokerServer::Private::onReady(Request& r)
{
    if (!requireNode(r) || !decoded<ReadyRequest>(r))
        return;
    r.peer.waiting = true;
    r.peer.readyId = r.id;
    dispatchWork();
}

void BrokerServer::Private::onResult(Request& r)
{
    if (!requireNode(r))
        return;
    auto request = decoded<ResultRequest>(r);
    if (!request)
        return;
    const QString nodeId = r.peer.nodeId;
    auto verdict = broker.acceptResult(nodeId, request->assignment, request->result);
    if (!verdict) {
        refuse(r, verdict.error());
        return;
    }
    if (*verdict == core::broker::Acceptance::Stale) {
        refuse(r, errors::Stale, QStringLiteral("the shard was already answered; this result is not counted"));
        return;
    }
    qCDebug(lcBroker).noquote() << "result of job" << request->result.jobId << "round" << request->result.round << "shard"
                                << request->result.shard << "from node" << shortId(nodeId) << ":"
                                << (*verdict == core::broker::Acceptance::Accepted      ? "accepted"
                                           : *verdict == core::broker::Acceptance::Held ? "sampled"
                                                                                        : "failed");
    if (auto it = peers.find(r.routingId); it != peers.end())
        it->score = broker.schedulingScore(nodeId);
    ResultReply reply;
    reply.verdict = *verdict == core::broker::Acceptance::Accepted ? core::ResultVerdict::Accepted
        : *verdict == core::broker::Acceptance::Held               ? core::ResultVerdict::Sampled
                                                                   : core::ResultVerdict::Failed;
    if (*verdict == core::broker::Acceptance::Accepted) {
        if (auto job = broker.status(request->result.jobId))
            reply.paid = job->pricePerShard;
    }
    ok(r, reply.toHeader());
    dispatchWork();
}

void BrokerServer::Private::onCommit(Request& r)
{
    if (!requireNode(r))
        return;
    auto request = decoded<CommitRequest>(r);
    if (!request)
        return;
    if (auto status = broker.commit(r.peer.nodeId, request->commitment); !status) {
        refuse(r, status.error());
        return;
    }
    ok(r, CommitReply {}.toHeader());
}

void BrokerServer::Private::onAsk(Request& r)
{
    auto request = decoded<AskRequest>(r);
    if (!request)
        return;
    const auto asker = nextAsker++;
    askers.insert(asker, { r.routingId, r.message.command, r.re(), r.id });
    if (auto status = broker.ask(request->jobId, r.caller, r.operatorCaller, request->question, request->requestId, asker);
        !status) {
        askers.remove(asker);
        if (status.error().field == u"forbidden")
            forbidden(r, status.error().message);
        else
            refuse(r, status.error());
        return;
    }
    sendServeNotices();
}

void BrokerServer::Private::onTokens(Request& r)
{
    if (!requireNode(r))
        return;
    if (auto tokens = decoded<TokensMessage>(r)) {
        broker.tokens(r.peer.nodeId, tokens->ticket, tokens->from, tokens->tokens);
        sendServeNotices();
    }
}

void BrokerServer::Private::onAnswer(Request& r)
{
    if (!requireNode(r))
        return;
    auto answer = decoded<AnswerRequest>(r);
    if (!answer)
        return;
    if (auto status = broker.answered(r.peer.nodeId, answer->ticket, answer->line, answer->answer, answer->failure); !status)
        refuse(r, status.error().field == u"ticket" ? errors::Stale : errors::Invalid, status.error().toString());
    else
        ok(r);
    sendServeNotices();
}

void BrokerServer::Private::onHosting(Request& r)
{
    if (!requireNode(r))
        return;
    auto hosting = decoded<HostingMessage>(r);
    if (!hosting)
        return;
    if (auto status = broker.hosting(r.peer.nodeId, hosting->assignment, hosting->ready, hosting->failure); !status)
        qCWarning(lcBroker).noquote() << "HOSTING from node" << shortId(r.peer.nodeId) << ":" << status.error().toString();
    sendServeNotices();
}

void BrokerServer::Private::dispatchPipelines(QList<QByteArray>& waiting)
{
    const auto t = now();
    for (;;) {
        QList<QString> nodes;
        for (const auto& id : waiting) {
            if (t >= peers[id].refusedUntil)
                nodes.append(peers[id].nodeId);
        }
        auto handed = broker.assignPipeline(nodes);
        if (!handed) {
            qCWarning(lcBroker).noquote() << "cannot hand out a pipeline:" << handed.error().toString();
            return;
        }
        if (handed->isEmpty())
            return;
        for (const auto& [nodeId, a] : *handed) {
            const auto id = routingOfNode(nodeId);
            waiting.removeAll(id);
            auto& peer = peers[id];
            peer.waiting = false;
            ++counters.tasksSent;
            const auto deadlineMs = a.deadlineMs - t;
            send(id,
                { Command::Task,
                    TaskMessage {
                        a.id, deadlineMs, a.task, a.startWeightsBlob, a.startChange, swarmOffers(peer.nodeId, a, deadlineMs) }
                        .toHeader(),
                    {} });
        }
    }
}

void BrokerServer::Private::onTensor(Request& r)
{
    if (!requireNode(r))
        return;
    auto tensor = decoded<TensorMessage>(r);
    if (!tensor)
        return;
    if (!tensor->outbound) {
        refuse(r, errors::Invalid, QStringLiteral("from: a node sends a tensor to a stage (to)"));
        return;
    }
    const core::broker::Pipelines::Part part { tensor->stage, tensor->kind, tensor->step, tensor->micro, tensor->offset,
        tensor->size };
    auto forward = broker.relayTensor(r.peer.nodeId, tensor->assignment, part, r.message.payload);
    if (!forward) {
        // A stage of a pipeline that ended is told so (it drops the task); anything else is refused.
        const bool ended = forward.error().field == QLatin1String("assignment");
        refuse(r, ended ? errors::Stale : errors::Invalid, forward.error().toString());
        return;
    }
    // A part the schedule sends is bounded by it (each once, at most the shard's tensors), not by
    // the rate: a small model's stages trade many a second. A refused one counted.
    if (auto principal = principals.find(r.principal); principal != principals.end())
        principal->limiter.refund(RangeCost);
    const auto to = routingOfNode(forward->node);
    if (to.isEmpty())
        return; // gone: the broker hears of it (nodeLost) and stops the pipeline
    auto relayed = *tensor;
    relayed.outbound = false;
    relayed.assignment = forward->assignment;
    relayed.stage = forward->from;
    send(to, { Command::Tensor, relayed.toHeader(), r.message.payload });
}

void BrokerServer::Private::onCheckpoint(Request& r)
{
    if (!requireNode(r))
        return;
    auto answer = decoded<CheckpointAnswer>(r);
    if (!answer)
        return;
    // An unusable state is answered with an ERROR that says why; it may still have settled the
    // dispute (nobody left to ask), so the verdicts go out either way.
    if (auto status = broker.checkpointDelivered(r.peer.nodeId, answer->verification, answer->sha256.value_or(core::Digest {}));
        !status)
        refuse(r, status.error());
    else
        ok(r);
    sendNotices();
    dispatchWork();
}

// --- blob commands -------------------------------------------------------------------------------

void BrokerServer::Private::onHave(Request& r)
{
    if (!requireNode(r))
        return;
    if (auto have = decoded<HaveMessage>(r); have && swarm)
        swarm->have(r.peer.nodeId, have->sha256, have->holding);
}

void BrokerServer::Private::onGet(Request& r)
{
    auto request = decoded<GetRequest>(r);
    if (!request)
        return;
    const auto size = broker.blobs().sizeOf(request->sha256);
    if (!size) {
        refuse(r, errors::UnknownBlob, QStringLiteral("no blob %1").arg(request->sha256.toHex()));
        return;
    }
    // A blob's torrent is read by whoever may read the blob.
    const auto content = swarm ? swarm->contentOf(request->sha256) : std::nullopt;
    if (!r.operatorCaller && !broker.mayRead(r.caller, content.value_or(request->sha256)).value_or(false)) {
        forbidden(r,
            QStringLiteral("blob %1 is not yours to read: only its uploader, the owner of a job that uses it and nodes "
                           "given work that needs it may")
                .arg(request->sha256.toHex()));
        return;
    }
    auto bytes = broker.blobs().readRange(request->sha256, request->offset, request->length);
    if (!bytes) {
        refuse(r, bytes.error());
        return;
    }
    ChunkHeader chunk { request->sha256, request->offset, *size };
    if (request->encoding == ZstdEncoding && !bytes->isEmpty()) {
        const QString key
            = request->sha256.toHex() + u'/' + QString::number(request->offset) + u'/' + QString::number(bytes->size());
        QByteArray coded;
        if (const auto* cached = codedRanges.object(key)) {
            coded = *cached;
        } else {
            coded = encodeRange(*bytes);
            codedRanges.insert(key, new QByteArray(coded), std::max<qsizetype>(coded.size(), 64));
        }
        if (!coded.isEmpty()) {
            chunk.encoding = ZstdEncoding;
            chunk.length = bytes->size();
            *bytes = std::move(coded);
        }
    }
    QJsonObject header = chunk.toHeader();
    if (!r.id.isUndefined())
        header.insert(fields::Id, r.id);
    send(r.routingId, { Command::Chunk, header, *bytes });
}

void BrokerServer::Private::onPut(Request& r)
{
    auto request = decoded<PutRequest>(r);
    if (!request)
        return;
    const auto range = rangeOf(*request, r.message.payload);
    if (!range) {
        refuse(r, range.error());
        return;
    }
    // The upload is the caller's own: keyed by its identity (its CURVE key; in plaintext its address).
    // Completing it grants reading the blob, so a caller who may not read a blob the broker has
    // proves it has the bytes: all of them, hashed, not stored (a hash is no key to a file).
    const bool reader = r.operatorCaller || broker.mayRead(r.caller, request->sha256).value_or(false);
    const bool stored = broker.blobs().contains(request->sha256);
    if (!stored && request->offset == 0) {
        if (auto admitted = broker.admitUpload(r.caller, request->size); !admitted) {
            refuse(r, admitted.error());
            return;
        }
    }
    auto state = broker.blobs().putRange(request->sha256, request->offset, request->size, *range, r.principal, now(),
        reader ? core::BlobStore::Stored::IsComplete : core::BlobStore::Stored::MustProve);
    if (!state) {
        refuse(r, state.error(), state.error().field == u"sha256" ? errors::HashMismatch : errors::Invalid);
        return;
    }
    const bool complete = *state == core::BlobStore::UploadState::Complete;
    if (complete) {
        auto granted = broker.allowRead(request->sha256, r.caller);
        if (granted && !stored)
            granted = broker.recordUpload(request->sha256, r.caller, request->size); // new bytes: bounded, collected
        if (!granted) {
            refuse(r, granted.error(), errors::Internal);
            return;
        }
    }
    ok(r, PutReply { request->sha256, broker.blobs().uploadedBytes(request->sha256, r.principal), complete }.toHeader());
}

// --- client commands -----------------------------------------------------------------------------

void BrokerServer::Private::onSubmit(Request& r)
{
    auto request = decoded<SubmitRequest>(r);
    if (!request)
        return;
    if (!namesOnlyReadableBlobs(r, request->job))
        return;
    // A TorchScript model's weights are built in the background (its loading is the owner's code):
    // everyone else is served meanwhile, and the answer comes when they are built.
    const Asker asker { r.routingId, r.message.command, r.re(), r.id };
    const QString name = request->job.name;
    ++building[asker.routingId];
    auto started
        = broker.submitInBackground(request->job, r.caller, request->requestId, [this, asker, name](core::Result<QString> jobId) {
              if (auto it = building.find(asker.routingId); it != building.end() && --*it <= 0)
                  building.erase(it);
              if (!jobId) {
                  refuseLater(asker, jobId.error(), errors::Invalid, QStringLiteral("job."));
                  return;
              }
              qCInfo(lcBroker).noquote() << "job" << *jobId << "submitted:" << name;
              send(asker.routingId, okMessage(asker.id, SubmitReply { *jobId }.toHeader()));
              dispatchWork();
          });
    if (!started) {
        if (auto it = building.find(asker.routingId); it != building.end() && --*it <= 0)
            building.erase(it);
        refuse(r, started.error(), errors::Invalid, QStringLiteral("job."));
    }
}

void BrokerServer::Private::onStatus(Request& r)
{
    auto request = decoded<JobRequest>(r);
    if (!request)
        return;
    auto status = broker.status(request->jobId);
    if (!status) {
        refuse(r, errors::UnknownJob, status.error().toString());
        return;
    }
    // Another identity sees the job's progress only; its owner sees all of it.
    const bool mine = r.operatorCaller || status->owner == r.caller;
    ok(r, { { fields::Job, mine ? status->toJson() : status->toPublicJson() } });
}

namespace {

// One page of rows: from the request's offset, at most its limit, and no more than fit in a header
// with room to spare; `next` says where the following page starts.
QJsonObject pageOf(const QString& field, const QList<QJsonObject>& rows, const PageRequest& request)
{
    constexpr qsizetype Budget = MaxHeaderBytes * 3 / 4;
    QJsonArray page;
    qsizetype bytes = 0;
    std::int64_t index = request.offset;
    const auto total = std::int64_t(rows.size());
    for (; index < total && index - request.offset < request.limit; ++index) {
        const auto size = QJsonDocument(rows[qsizetype(index)]).toJson(QJsonDocument::Compact).size() + 1;
        if (bytes + size > Budget && !page.isEmpty())
            break;
        bytes += size;
        page.append(rows[qsizetype(index)]);
    }
    QJsonObject header { { field, page }, { fields::Total, static_cast<qint64>(total) } };
    if (index < total)
        header.insert(fields::Next, static_cast<qint64>(index));
    return header;
}

core::broker::Broker::Listing listingOf(const PageRequest& request)
{
    return request.all ? core::broker::Broker::Listing::All : core::broker::Broker::Listing::Recent;
}

} // namespace

void BrokerServer::Private::onList(Request& r)
{
    auto request = decoded<PageRequest>(r);
    if (!request)
        return;
    auto jobs = broker.list(listingOf(*request));
    if (!jobs) {
        refuse(r, errors::Internal, jobs.error().toString());
        return;
    }
    QList<QJsonObject> rows;
    for (const auto& job : *jobs)
        rows.append(r.operatorCaller || job.owner == r.caller ? job.toJson() : job.toPublicJson());
    ok(r, pageOf(fields::Jobs, rows, *request));
}

void BrokerServer::Private::onCancel(Request& r)
{
    auto request = decoded<JobRequest>(r);
    if (!request)
        return;
    auto job = broker.status(request->jobId);
    if (!job) {
        refuse(r, errors::UnknownJob, job.error().toString());
        return;
    }
    if (!r.operatorCaller && job->owner != r.caller) {
        forbidden(r, QStringLiteral("job %1 is not yours to cancel").arg(request->jobId));
        return;
    }
    if (auto status = broker.cancel(request->jobId); !status) {
        refuse(r, status.error());
        return;
    }
    ok(r);
}

bool BrokerServer::Private::namesOnlyReadableBlobs(Request& r, const core::JobSpec& job)
{
    // A job may name only files its owner may read: a file's hash is no key to it. Nor to a quote,
    // whose answer (or error) would tell the shape and size of another's data.
    if (r.operatorCaller)
        return true;
    for (const auto& named : core::broker::blobsNamedBy(job)) {
        if (!broker.mayRead(r.caller, named).value_or(false)) {
            forbidden(
                r, QStringLiteral("the job names blob %1, which is not yours: upload the file yourself").arg(named.toHex()));
            return false;
        }
    }
    const auto chunks = broker.chunksNamedBy(job); // the manifest is readable: it was just checked
    if (!chunks) {
        refuse(r, chunks.error(), errors::Invalid, QStringLiteral("job."));
        return false;
    }
    for (const auto& chunk : *chunks) {
        if (!broker.mayRead(r.caller, chunk).value_or(false)) {
            forbidden(r,
                QStringLiteral("the job's manifest lists chunk %1, which is not yours: upload the file yourself")
                    .arg(chunk.toHex()));
            return false;
        }
    }
    return true;
}

void BrokerServer::Private::onQuote(Request& r)
{
    auto request = decoded<QuoteRequest>(r);
    if (!request || !namesOnlyReadableBlobs(r, request->job))
        return;
    auto quote = broker.quoteFor(request->job);
    if (!quote) {
        refuse(r, errors::Invalid, QStringLiteral("job.") + quote.error().toString());
        return;
    }
    ok(r, QuoteReply { *quote }.toHeader());
}

void BrokerServer::Private::onBalance(Request& r)
{
    auto request = decoded<BalanceRequest>(r);
    if (!request)
        return;
    const QString who = request->account.isEmpty() ? r.caller : request->account;
    if (!r.operatorCaller && who != r.caller) {
        forbidden(r, QStringLiteral("the balance of %1 is for its holder to see").arg(who));
        return;
    }
    auto account = broker.account(who);
    if (!account) {
        refuse(r, errors::Internal, account.error().toString());
        return;
    }
    ok(r, *account);
}

void BrokerServer::Private::onLedger(Request& r)
{
    const auto invariants = broker.ledger().checkInvariants();
    auto minted = broker.ledger().balance(core::ledger::accounts::Mint);
    ok(r,
        LedgerReply { invariants.ok(), invariants.ok() ? QString() : invariants.error().message,
            minted ? minted->checkedMultiply(-1).value_or(core::Credits {}).toString() : QString(),
            QString::fromLatin1(broker.signingKey().toBase64()) }
            .toHeader());
}

void BrokerServer::Private::onNodes(Request& r)
{
    auto request = decoded<PageRequest>(r);
    if (!request)
        return;
    auto nodes = broker.nodes(listingOf(*request));
    if (!nodes) {
        refuse(r, errors::Internal, nodes.error().toString());
        return;
    }
    // Records, stakes and slashes are public; a balance is its holder's.
    QList<QJsonObject> rows;
    for (auto node : *nodes) {
        if (!r.operatorCaller && node.value(fields::NodeId).toString() != r.caller)
            node.remove(QStringLiteral("balance"));
        rows.append(node);
    }
    ok(r, pageOf(fields::Nodes, rows, *request));
}

void BrokerServer::Private::onReceipt(Request& r)
{
    auto request = decoded<ReceiptRequest>(r);
    if (!request)
        return;
    if (!r.operatorCaller && broker.ledger().hasCause(request->cause).value_or(false)
        && !broker.isPartyTo(r.caller, request->cause).value_or(false)) {
        forbidden(r, QStringLiteral("the receipt for %1 is for the parties it names").arg(request->cause));
        return;
    }
    auto receipt = broker.receipt(request->cause);
    if (!receipt) {
        refuse(r, receipt.error());
        return;
    }
    QJsonObject reply { { fields::Receipt, *receipt } };
    // Its transfer's leaf in the ledger's log, with the proof and a head (docs/LEDGER.md, "Receipts").
    if (auto log = broker.log().receiptLog(request->cause))
        reply.insert(fields::Log, *log);
    else
        qCWarning(lcBroker).noquote() << "a receipt without its log's proof:" << log.error().toString();
    ok(r, reply);
}

void BrokerServer::Private::answer(Request& r, const core::Result<QJsonObject>& reply)
{
    if (!reply) {
        const bool database = reply.error().field.isEmpty() || reply.error().field == u"database";
        refuse(r, reply.error(), database ? errors::Internal : errors::Invalid);
        return;
    }
    ok(r, *reply);
}

void BrokerServer::Private::onLogHead(Request& r)
{
    if (auto request = decoded<LogHeadRequest>(r))
        answer(r, broker.log().headReply(request->from));
}

void BrokerServer::Private::onLogProof(Request& r)
{
    if (auto request = decoded<LogProofRequest>(r))
        answer(r, broker.log().proofReply(request->index, request->size));
}

void BrokerServer::Private::onLogConsistency(Request& r)
{
    if (auto request = decoded<LogConsistencyRequest>(r))
        answer(r, broker.log().consistencyReply(request->from, request->to));
}

void BrokerServer::Private::onLogEntries(Request& r)
{
    if (auto request = decoded<LogEntriesRequest>(r))
        answer(r, broker.log().entriesReply(request->from, request->limit));
}

void BrokerServer::Private::onRecord(Request& r)
{
    // From the node the record names: the caller (its CURVE key, which is its node id).
    auto request = decoded<RecordRequest>(r);
    if (!request)
        return;
    if (!r.operatorCaller && !broker.mayRead(r.caller, request->sha256).value_or(false)) {
        forbidden(r, QStringLiteral("upload the record (PUT) first"));
        return;
    }
    constexpr qint64 MaxRecordBytes = 16 << 20;
    if (broker.blobs().sizeOf(request->sha256).value_or(0) > MaxRecordBytes) {
        refuse(r, errors::Invalid, QStringLiteral("record: more than 16 MiB"));
        return;
    }
    auto bytes = broker.blobs().read(request->sha256);
    if (!bytes) {
        refuse(r, bytes.error());
        return;
    }
    answer(r, broker.creditRecord(r.caller, QJsonDocument::fromJson(*bytes).object()));
}

void BrokerServer::Private::onStake(Request& r)
{
    auto request = decoded<StakeRequest>(r);
    if (!request)
        return;
    auto account = broker.stake(request->request, r.caller);
    if (!account) {
        refuse(r, account.error());
        return;
    }
    ok(r, *account);
    // Bonded: a node that was refused work for its stake is asked again now.
    const QString staker = request->request.value(QStringLiteral("node")).toString();
    for (auto& other : peers) {
        if (other.nodeId == staker)
            other.refusedUntil = 0;
    }
    dispatchWork();
}

void BrokerServer::Private::onVerifications(Request& r)
{
    auto request = decoded<VerificationsRequest>(r);
    if (!request)
        return;
    constexpr int Newest = 10'000;
    auto checks = broker.verifications(request->jobId, Newest);
    if (!checks) {
        refuse(r, errors::Internal, checks.error().toString());
        return;
    }
    ok(r, pageOf(fields::Verifications, *checks, request->page));
}

} // namespace tessera::net
