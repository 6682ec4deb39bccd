#include "nodeclient.h"

#include "protocol.h"

#include <QDateTime>
#include <QLoggingCategory>
#include <QThread>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <deque>

Q_LOGGING_CATEGORY(lcNode, "tessera.node")

namespace tessera::net {

namespace {

std::int64_t nowMs()
{
    return QDateTime::currentMSecsSinceEpoch();
}

// How long a node whose disk could not keep a task's blobs waits before it asks for work again.
constexpr std::int64_t DiskFullPauseMs = 15'000;

// A result without training: the shard failed, or the node gives it back (Returned).
core::ShardResult untrained(
    const QString& jobId, std::int64_t round, std::int64_t shard, core::ShardResult::Outcome outcome, const QString& why)
{
    core::ShardResult result;
    result.jobId = jobId;
    result.round = round;
    result.shard = shard;
    result.outcome = outcome;
    result.failure = why;
    return result;
}

// A blob being fetched in ranges, with at most MaxCreditChunks requests unanswered.
struct Download {
    explicit Download(core::Digest d = {})
        : digest(d)
    { }
    core::Digest digest;
    std::int64_t size = -1; // unknown until the first CHUNK
    std::int64_t requested = 0; // bytes asked for
    std::int64_t received = 0;
    int inFlight = 0;
    QByteArray bytes;
};

// A blob being uploaded in ranges, with at most MaxCreditChunks unacknowledged.
struct Upload {
    core::Digest digest;
    QByteArray bytes;
    std::int64_t sent = 0;
    int inFlight = 0;
    bool complete = false;
    QString verification; // a checkpoint state for this dispute; empty for a result's weights
};

// A dispute asked for the training state at a checkpoint of one of this node's results.
struct CheckpointAsk {
    QString verification;
    QString assignment;
    std::int64_t checkpoint = 0;
};

struct CurrentTask {
    QString assignment;
    core::ShardTask task;
    core::Digest startWeightsBlob;
    bool started = false; // handed to the executor
};

} // namespace

struct NodeClient::Private {
    NodeClientOptions options;
    ShardExecutor& executor;
    core::BlobStore& cache;
    QString tag;
    Counters counters;

    zmq::context_t context;
    std::unique_ptr<zmq::socket_t> socket;
    bool registered = false;
    bool readySent = false;
    std::int64_t lastReceived = 0;
    std::int64_t lastSent = 0;
    int backoffMs = 0;

    std::unique_ptr<core::ResultLog> log;
    std::optional<CurrentTask> current;
    QHash<core::Digest, Download> downloads;
    std::deque<ShardExecutor::Finished> outbox; // finished shards not yet reported
    std::optional<Upload> upload;
    std::deque<CheckpointAsk> asks;
    bool commitSent = false;
    bool committed = false;
    bool resultSent = false;
    std::int64_t diskFullUntil = 0; // no READY before this: the last task's blobs did not fit

    Private(NodeClientOptions o, ShardExecutor& e, core::BlobStore& c, QString t)
        : options(std::move(o))
        , executor(e)
        , cache(c)
        , tag(std::move(t))
    { }

    void connect()
    {
        socket = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
        socket->set(zmq::sockopt::linger, 0);
        if (!options.broker.serverKey.isEmpty()) {
            const auto keys = options.keys ? *options.keys : CurveKeys::generate();
            socket->set(zmq::sockopt::curve_serverkey, options.broker.serverKey.toStdString());
            socket->set(zmq::sockopt::curve_publickey, keys.publicKey.toStdString());
            socket->set(zmq::sockopt::curve_secretkey, keys.secretKey.toStdString());
        }
        socket->connect(options.broker.endpoint.toStdString());
        registered = false;
        readySent = false;
        downloads.clear();
        upload.reset();
        commitSent = false;
        committed = false;
        resultSent = false;
        lastReceived = nowMs();
        send({ Command::Register, QJsonObject { { QStringLiteral("node"), options.node.toJson() } }, {} });
    }

    void send(const Message& message)
    {
        const auto frames = encode(message);
        for (qsizetype i = 0; i < frames.size(); ++i)
            socket->send(zmq::buffer(frames[i].constData(), std::size_t(frames[i].size())),
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
        lastSent = nowMs();
    }

    // Asks for the next ranges of every download, as far as the credit allows.
    void pumpDownloads()
    {
        for (auto& download : downloads) {
            while (download.inFlight < MaxCreditChunks
                && (download.size < 0 ? download.inFlight == 0 : download.requested < download.size)) {
                const std::int64_t length = download.size < 0
                    ? MaxChunkBytes
                    : std::min<std::int64_t>(MaxChunkBytes, download.size - download.requested);
                send({ Command::Get,
                    QJsonObject { { QStringLiteral("sha256"), download.digest.toHex() },
                        { QStringLiteral("offset"), static_cast<qint64>(download.requested) },
                        { QStringLiteral("length"), static_cast<qint64>(length) } },
                    {} });
                download.requested += length;
                ++download.inFlight;
            }
        }
    }

    void pumpUpload()
    {
        if (!upload)
            return;
        while (upload->inFlight < MaxCreditChunks && upload->sent < upload->bytes.size()) {
            const std::int64_t length = std::min<std::int64_t>(MaxChunkBytes, upload->bytes.size() - upload->sent);
            send({ Command::Put,
                QJsonObject { { QStringLiteral("sha256"), upload->digest.toHex() },
                    { QStringLiteral("offset"), static_cast<qint64>(upload->sent) },
                    { QStringLiteral("size"), static_cast<qint64>(upload->bytes.size()) } },
                upload->bytes.mid(upload->sent, length) });
            upload->sent += length;
            ++upload->inFlight;
        }
    }

    QList<core::Digest> blobsOf(const core::ShardTask& task, const core::Digest& weights) const
    {
        QList<core::Digest> needed { weights };
        if (task.model.source == core::ModelSpec::Source::TorchScript)
            needed.append(task.model.scriptSha256);
        if (task.dataset.source == core::DatasetSpec::Source::Tensors) {
            needed.append(task.dataset.trainSha256);
            if (!task.dataset.testSha256.isNull())
                needed.append(task.dataset.testSha256);
        }
        return needed;
    }

    // Reports the current task (before it started training) as failed, or as returned when the
    // trouble is this node's own (a full disk), for another node to take.
    void giveUp(const QString& why, core::ShardResult::Outcome outcome = core::ShardResult::Outcome::Failed)
    {
        if (!current || current->started)
            return;
        const auto& task = current->task;
        outbox.push_back({ tag, current->assignment, untrained(task.jobId, task.round, task.shard, outcome, why), {}, {} });
        current.reset();
        downloads.clear();
    }

    // The blob cache could not keep something: said in the log; a full disk also holds off new
    // work for a while (the caller gives its shard back).
    void cannotKeep(const core::Error& error)
    {
        qCWarning(lcNode).noquote() << error.toString();
        if (!error.diskFull)
            return;
        diskFullUntil = nowMs() + DiskFullPauseMs;
        qCWarning(lcNode).noquote() << "the disk is full: giving the shard back; no new work for" << DiskFullPauseMs / 1000
                                    << "s";
    }

    void maybeStartTask()
    {
        if (!current || current->started || !downloads.isEmpty())
            return;
        QHash<core::Digest, QString> paths;
        for (const auto& digest : blobsOf(current->task, current->startWeightsBlob)) {
            auto path = cache.path(digest);
            if (!path) { // evicted meanwhile: fetch again
                downloads.insert(digest, Download(digest));
                pumpDownloads();
                return;
            }
            paths.insert(digest, *path);
        }
        auto weights = cache.read(current->startWeightsBlob);
        if (!weights) {
            qCWarning(lcNode).noquote() << weights.error().toString();
            return;
        }
        for (const auto& digest : paths.keys())
            cache.pin(digest);
        current->started = true;
        const auto& task = current->task;
        qCInfo(lcNode).noquote() << "training" << current->assignment << "(job" << task.jobId << "round" << task.round << "shard"
                                 << task.shard << ")";
        executor.start(tag, current->assignment, current->task, *weights, paths);
    }

    void reportNext()
    {
        if (outbox.empty() || !registered || upload || resultSent || (commitSent && !committed))
            return;
        const auto& finished = outbox.front();
        // Commit, then reveal: the signed hashes go first, the weights and the result after.
        if (finished.result.outcome == core::ShardResult::Outcome::Completed && !committed) {
            const auto document = core::signDocument(finished.result.commitmentDocument(finished.assignment), options.signing);
            send({ Command::Commit, QJsonObject { { QStringLiteral("commitment"), document } }, {} });
            commitSent = true;
            return;
        }
        if (finished.result.outcome == core::ShardResult::Outcome::Completed && !cache.contains(finished.result.weightsSha256)
            && !finished.weights.isEmpty()) {
            upload = Upload { finished.result.weightsSha256, finished.weights, 0, 0, false, {} };
            pumpUpload();
            return;
        }
        send({ Command::Result,
            QJsonObject {
                { QStringLiteral("assignment"), finished.assignment }, { QStringLiteral("result"), finished.result.toJson() } },
            {} });
        resultSent = true;
    }

    // Answers disputes' requests for checkpoint states, one upload at a time, between results.
    void pumpAsks()
    {
        while (!asks.empty() && !upload && registered) {
            const auto ask = asks.front();
            asks.pop_front();
            std::optional<core::Digest> digest;
            if (log) {
                if (auto kept = log->checkpoint(ask.assignment, ask.checkpoint))
                    digest = *kept;
            }
            std::optional<QByteArray> bytes;
            if (digest) {
                if (auto read = cache.read(*digest))
                    bytes = *read;
            }
            if (!bytes) {
                qCWarning(lcNode).noquote() << "a dispute asks for checkpoint" << ask.checkpoint << "of" << ask.assignment
                                            << "and this node did not keep it";
                send({ Command::Checkpoint,
                    QJsonObject { { QStringLiteral("id"), QStringLiteral("checkpoint:") + ask.verification },
                        { QStringLiteral("verification"), ask.verification } },
                    {} });
                continue;
            }
            qCInfo(lcNode).noquote() << "sending checkpoint" << ask.checkpoint << "of" << ask.assignment << "to the referee";
            upload = Upload { *digest, *bytes, 0, 0, false, ask.verification };
            pumpUpload();
        }
    }

    // Records where the result at the front of the outbox stands.
    void logFront(const QString& state, const QString& paid = {}, const QString& detail = {})
    {
        if (!outbox.empty())
            record(outbox.front().assignment, state, paid, detail);
    }

    // What became of a result, in the log; once it can no longer be disputed its checkpoint states
    // may leave the cache (until then they are pinned: a dispute's loser is whoever cannot answer).
    void record(const QString& assignment, const QString& state, const QString& paid = {}, const QString& detail = {})
    {
        if (!log)
            return;
        (void)log->advance(assignment, state, paid, detail);
        if (core::ResultLog::unsettled(state))
            return;
        if (auto states = log->checkpoints(assignment)) {
            for (const auto& digest : *states)
                cache.unpin(digest);
        }
    }

    void resultAnswered()
    {
        if (!outbox.empty()) {
            outbox.pop_front();
            ++counters.results;
        }
        resultSent = false;
        commitSent = false;
        committed = false;
        upload.reset();
    }

    void handle(const Message& message);
};

NodeClient::NodeClient(NodeClientOptions options, ShardExecutor& executor, core::BlobStore& cache, QString tag)
    : d(std::make_unique<Private>(std::move(options), executor, cache, std::move(tag)))
{ }

NodeClient::~NodeClient() = default;

NodeClient::Counters NodeClient::counters() const
{
    return d->counters;
}

void NodeClient::Private::handle(const Message& message)
{
    const auto& h = message.header;
    switch (message.command) {
    case Command::Welcome:
        registered = true;
        readySent = false;
        backoffMs = 0;
        ++counters.registrations;
        qCInfo(lcNode).noquote() << "registered with" << options.broker.endpoint;
        // A task whose blobs were still coming when the connection broke starts its downloads again.
        if (current && !current->started) {
            for (const auto& digest : blobsOf(current->task, current->startWeightsBlob)) {
                if (!cache.contains(digest))
                    downloads.insert(digest, Download(digest));
            }
            pumpDownloads();
            maybeStartTask();
        }
        return;
    case Command::Heartbeat:
        return;
    case Command::Checkpoint:
        asks.push_back({ h.value(QStringLiteral("verification")).toString(), h.value(QStringLiteral("assignment")).toString(),
            h.value(QStringLiteral("checkpoint")).toInteger() });
        pumpAsks();
        return;
    case Command::Verdict: {
        const QString state = h.value(QStringLiteral("state")).toString();
        qCInfo(lcNode).noquote() << "result" << h.value(QStringLiteral("assignment")).toString() << state
                                 << h.value(QStringLiteral("paid")).toString() << h.value(QStringLiteral("detail")).toString();
        record(h.value(QStringLiteral("assignment")).toString(), state, h.value(QStringLiteral("paid")).toString(),
            h.value(QStringLiteral("detail")).toString());
        if (state == u"slashed")
            ++counters.slashed;
        return;
    }
    case Command::Bye:
        registered = false;
        return;
    case Command::Task: {
        readySent = false;
        auto task = core::ShardTask::fromJson(h.value(QStringLiteral("task")).toObject());
        auto weights = core::Digest::fromHex(h.value(QStringLiteral("startWeightsBlob")).toString());
        const QString assignment = h.value(QStringLiteral("assignment")).toString();
        if (task && weights && current) {
            // Busy with another shard (the broker sent this one to a session it then lost): given
            // back at once, so that it does not wait for its deadline.
            qCWarning(lcNode).noquote() << "gave back" << assignment << ": busy with" << current->assignment;
            outbox.push_back({ tag, assignment,
                untrained(task->jobId, task->round, task->shard, core::ShardResult::Outcome::Returned,
                    QStringLiteral("the node is busy with another shard")),
                {}, {} });
            return;
        }
        if (!task || !weights) {
            qCWarning(lcNode).noquote() << "ignored a task:" << (task ? QStringLiteral("bad weights") : task.error().toString());
            return;
        }
        ++counters.tasks;
        current = CurrentTask { assignment, *task, *weights, false };
        for (const auto& digest : blobsOf(*task, *weights)) {
            if (!cache.contains(digest))
                downloads.insert(digest, Download(digest));
        }
        pumpDownloads();
        maybeStartTask();
        return;
    }
    case Command::Chunk: {
        auto digest = core::Digest::fromHex(h.value(QStringLiteral("sha256")).toString());
        if (!digest || !downloads.contains(*digest))
            return;
        auto& download = downloads[*digest];
        --download.inFlight;
        const auto offset = h.value(QStringLiteral("offset")).toInteger(-1);
        const auto size = h.value(QStringLiteral("size")).toInteger(-1);
        if (offset != download.received || size < 0 || size > core::BlobStore::MaxBlobBytes) {
            qCWarning(lcNode).noquote() << "a blob arrived out of order; fetching it again";
            downloads[*digest] = Download(*digest);
            pumpDownloads();
            return;
        }
        download.size = size;
        download.bytes.append(message.payload);
        download.received += message.payload.size();
        if (download.received >= download.size) {
            const QByteArray bytes = download.bytes;
            downloads.remove(*digest);
            if (core::Digest::ofBytes(bytes) != *digest) {
                qCWarning(lcNode).noquote() << "blob" << digest->toHex().left(12) << "does not match its hash; fetching it again";
                downloads.insert(*digest, Download(*digest));
            } else if (auto stored = cache.put(bytes); !stored) {
                // Fetching it again would not help: the shard goes back to the broker for someone else.
                cannotKeep(stored.error());
                giveUp(QStringLiteral("the node could not keep a blob the shard needs: ") + stored.error().message,
                    core::ShardResult::Outcome::Returned);
            } else {
                ++counters.blobsFetched;
                counters.bytesFetched += bytes.size();
            }
        }
        pumpDownloads();
        maybeStartTask();
        return;
    }
    case Command::Ok:
        if (h.value(QStringLiteral("id")).toString().startsWith(u"checkpoint:"))
            return; // the referee has the checkpoint
        if (commitSent && !committed && h.value(QStringLiteral("committed")).toBool()) {
            committed = true;
            logFront(QStringLiteral("committed"));
            reportNext();
            return;
        }
        if (upload && h.contains(QStringLiteral("received"))) {
            --upload->inFlight;
            if (h.value(QStringLiteral("complete")).toBool()) {
                if (!upload->verification.isEmpty()) {
                    send({ Command::Checkpoint,
                        QJsonObject { { QStringLiteral("id"), QStringLiteral("checkpoint:") + upload->verification },
                            { QStringLiteral("verification"), upload->verification },
                            { QStringLiteral("sha256"), upload->digest.toHex() } },
                        {} });
                    upload.reset();
                    pumpAsks();
                    reportNext();
                    return;
                }
                cache.put(upload->bytes); // keep our own copy: a verifier may ask for it
                upload.reset();
                pumpAsks();
                reportNext();
            } else {
                pumpUpload();
            }
            return;
        }
        if (resultSent) {
            const QString paid = h.value(QStringLiteral("paid")).toString();
            const QString verdict = h.value(QStringLiteral("verdict")).toString();
            if (verdict == u"accepted")
                logFront(paid.isEmpty() || paid == u"0" ? QStringLiteral("accepted") : QStringLiteral("paid"), paid);
            else if (verdict == u"sampled")
                logFront(QStringLiteral("sampled"), {}, QStringLiteral("another node re-executes it; paid once it agrees"));
            resultAnswered();
        }
        return;
    case Command::Error: {
        const QString code = h.value(QStringLiteral("code")).toString();
        const int re = h.value(QStringLiteral("re")).toInt(-1);
        if (re == int(Command::Checkpoint)) {
            qCWarning(lcNode).noquote() << "the referee refused a checkpoint:" << h.value(QStringLiteral("message")).toString();
            return;
        }
        qCWarning(lcNode).noquote() << "broker says" << code << h.value(QStringLiteral("message")).toString();
        if (re == int(Command::Result) || re == int(Command::Commit) || (re == int(Command::Put) && upload)) {
            logFront(code == errors::Stale ? QStringLiteral("stale") : QStringLiteral("refused"), {},
                h.value(QStringLiteral("message")).toString());
            resultAnswered(); // the broker will not count this result; the next one can go
        } else if (re == int(Command::Get) && current) {
            giveUp(QStringLiteral("a blob the shard needs is not on the broker"));
        } else if (code == errors::NotRegistered) {
            registered = false;
            send({ Command::Register, QJsonObject { { QStringLiteral("node"), options.node.toJson() } }, {} });
        }
        return;
    }
    default:
        return;
    }
}

void NodeClient::run(const std::atomic<bool>& stop, const std::atomic<bool>& abandon)
{
    if (!d->options.resultLogPath.isEmpty()) {
        auto log = core::ResultLog::open(d->options.resultLogPath);
        if (log)
            d->log = std::move(*log);
        else
            qCWarning(lcNode).noquote() << "results will not be kept:" << log.error().toString();
    }
    // The states of results that may still be disputed stay in the cache, across restarts too.
    if (d->log) {
        if (auto unsettled = d->log->unsettledCheckpoints(d->options.broker.endpoint)) {
            for (const auto& digest : *unsettled)
                d->cache.pin(digest);
        }
    }
    d->connect();
    std::int64_t reconnectAt = 0;
    bool stopping = false;
    std::int64_t stoppingSince = 0;
    for (;;) {
        if (stop.load() && !stopping) {
            stopping = true;
            stoppingSince = nowMs();
            qCInfo(lcNode).noquote() << (d->current && d->current->started && !abandon.load()
                    ? "finishing the shard in training before stopping"
                    : "stopping");
        }
        // Finished shards come back from the executor (the compute thread).
        for (auto& finished : d->executor.takeFinished(d->tag)) {
            if (d->current && finished.assignment == d->current->assignment) {
                for (const auto& digest : d->blobsOf(d->current->task, d->current->startWeightsBlob))
                    d->cache.unpin(digest);
                d->current.reset();
            }
            // A result is only worth reporting if its checkpoint states are kept: without them the
            // node could not answer a dispute and would lose its stake. It gives the shard back.
            QList<core::Digest> kept;
            for (const auto& state : finished.checkpoints) {
                auto stored = d->cache.put(state);
                if (stored) {
                    d->cache.pin(*stored); // until the result is settled
                    kept.append(*stored);
                    continue;
                }
                d->cannotKeep(stored.error());
                for (const auto& digest : kept)
                    d->cache.unpin(digest);
                if (finished.result.outcome == core::ShardResult::Outcome::Completed)
                    finished.result = untrained(finished.result.jobId, finished.result.round, finished.result.shard,
                        core::ShardResult::Outcome::Returned,
                        QStringLiteral("the node could not keep its checkpoints for a dispute: ") + stored.error().message);
                break;
            }
            finished.checkpoints.clear();
            if (d->log)
                (void)d->log->computed(finished.assignment, d->options.broker.endpoint, finished.result, kept);
            d->outbox.push_back(std::move(finished));
        }
        const bool shardOut = d->current && d->current->started;
        // Stopping waits for the shard in training, then up to 10 s to report what finished.
        const bool reportTimedOut = !shardOut && nowMs() - stoppingSince > 10'000;
        if (stopping && (abandon.load() || (!shardOut && d->outbox.empty()) || reportTimedOut)) {
            if (d->socket && d->registered)
                d->send({ Command::Bye, {}, {} });
            return;
        }
        const auto now = nowMs();
        if (!d->socket) {
            if (now >= reconnectAt) {
                d->connect();
                reconnectAt = 0;
            } else {
                QThread::msleep(std::uint32_t(std::min<std::int64_t>(50, reconnectAt - now)));
                continue;
            }
        }
        d->reportNext();
        if (d->registered && !stopping && !d->current && !d->readySent && d->outbox.empty() && d->executor.idle()
            && now >= d->diskFullUntil) {
            d->send({ Command::Ready, QJsonObject { { QStringLiteral("slots"), 1 } }, {} });
            d->readySent = true;
        }
        if (now - d->lastSent >= d->options.heartbeatMs)
            d->send({ Command::Heartbeat, {}, {} });

        zmq::pollitem_t item { d->socket->handle(), 0, ZMQ_POLLIN, 0 };
        zmq::poll(&item, 1, std::chrono::milliseconds(50));
        if (item.revents & ZMQ_POLLIN) {
            for (int i = 0; i < 100; ++i) {
                std::vector<zmq::message_t> parts;
                if (!zmq::recv_multipart(*d->socket, std::back_inserter(parts), zmq::recv_flags::dontwait))
                    break;
                d->lastReceived = nowMs();
                QList<QByteArray> frames;
                for (const auto& part : parts)
                    frames.append(QByteArray(static_cast<const char*>(part.data()), qsizetype(part.size())));
                auto message = decode(frames);
                if (message)
                    d->handle(*message);
                else
                    qCWarning(lcNode).noquote() << "ignored a message from the broker:" << message.error().message;
            }
        }
        if (nowMs() - d->lastReceived > std::int64_t(d->options.heartbeatMs) * d->options.liveness) {
            d->backoffMs = d->backoffMs == 0 ? d->options.initialBackoffMs : std::min(d->backoffMs * 2, d->options.maxBackoffMs);
            qCWarning(lcNode).noquote() << "the broker at" << d->options.broker.endpoint << "went silent; reconnecting in"
                                        << d->backoffMs << "ms";
            d->socket.reset();
            d->registered = false;
            reconnectAt = nowMs() + d->backoffMs;
        }
    }
}

} // namespace tessera::net
