#include "nodeclient.h"

#include "blobcoding.h"
#include "framing.h"
#include "messages.h"
#include "protocol.h"
#include "ratelimiter.h"
#include "resultrelay.h"

#include <core/capabilities.h>
#include <core/ledger/logwatch.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLoggingCategory>
#include <QRegularExpression>
#include <QSet>
#include <QThread>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

namespace {

// Makes an eventfd readable (what wakes a node client's loop).
void signalEventFd(int fd)
{
    const std::uint64_t one = 1;
    (void)!::write(fd, &one, sizeof one);
}

} // namespace

#include <algorithm>
#include <deque>
#include <map>

Q_LOGGING_CATEGORY(lcNode, "tessera.node")

namespace tessera::net {

namespace {

// How long a node whose disk could not keep a task's blobs waits before it asks for work again.
constexpr std::int64_t DiskFullPauseMs = 15'000;
// How often a node tries to fetch a blob whose ranges come wrong before it gives the shard back.
constexpr int MaxDownloadAttempts = 3;
// How long a stopping node waits to report what finished before it leaves anyway.
constexpr std::int64_t StopReportMs = 10'000;

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
    explicit Download(core::Digest d = {}, std::int64_t g = 0, int a = 1)
        : digest(d)
        , generation(g)
        , attempts(a)
    { }
    core::Digest digest;
    std::int64_t generation = 0; // replies to the GETs of an earlier try are ignored
    int attempts = 1;
    std::int64_t size = -1; // unknown until the first CHUNK
    std::int64_t requested = 0; // bytes asked for
    std::int64_t received = 0;
    int inFlight = 0;
};

// A blob being uploaded in ranges, with at most MaxCreditChunks unacknowledged.
struct Upload {
    enum class Purpose { Weights, CheckpointState };
    Purpose purpose = Purpose::Weights;
    core::Digest digest;
    QByteArray bytes;
    std::int64_t sent = 0;
    int inFlight = 0;
    QString verification; // a checkpoint state's dispute
};

struct CurrentTask {
    QString assignment;
    core::ShardTask task;
    core::Digest startWeightsBlob;
    bool started = false; // handed to the executor
    std::optional<core::broker::WeightsChange> change; // another way to startWeightsBlob
    bool rebuilding = false; // the executor makes startWeightsBlob from the change
    bool changeFailed = false; // it did not: download the weights whole
    QByteArray rebuilt; // what it made, handed on to the training without reading it back
    std::int64_t deadlineAt = 0; // the clock's ms when the broker stops waiting for the result; 0: none
};

// What a request that waits for its reply was for; the reply is matched by the request's id.
struct Pending {
    enum class Purpose { Register, Commit, Weights, CheckpointState, Result, CheckpointAnswer, Get, LogHead, Answer };
    Purpose purpose = Purpose::Register;
    core::Digest digest; // Get, Weights, CheckpointState
    QString verification; // CheckpointAnswer
    std::int64_t generation = 0; // Get: the download's try; LogHead: the size it asked from
};

} // namespace

struct NodeClient::Private {
    // Where the result at the front of the outbox is: commit, then reveal (weights, then result).
    enum class Report { Idle, Committing, Uploading, Reporting };

    NodeClientOptions options;
    ShardExecutor& executor;
    core::BlobStore& cache;
    QString tag;
    const core::Clock& clock;
    Counters counters;

    std::unique_ptr<zmq::context_t> ownContext;
    zmq::context_t& context;
    std::unique_ptr<zmq::socket_t> socket;
    Session session = Session::Disconnected;
    Report report = Report::Idle;
    bool readySent = false;
    bool brokerTakesZstd = false; // its WELCOME listed zstd: PUTs go coded ("Encoded ranges")
    std::int64_t lastReceived = 0;
    std::int64_t lastHeard = 0; // the broker's last message (lastReceived restarts at each reconnect)
    std::int64_t lastSent = 0;
    QString network; // WELCOME's: the sessions of one network hand each other results (options.relay)
    int logHeadMs = 0; // WELCOME's: how often to ask for the ledger log's head (0: an older broker)
    std::int64_t nextLogHeadAt = 0;
    bool logHeadAsked = false;
    std::int64_t logHeadAskedAt = 0; // an ask whose reply never came (a broker killed and back at once) is made again
    int logHeadMisses = 0; // asks in a row that got no head
    QHash<QString, int> handedAttempts; // results from the relay in the outbox: refusals so far
    std::int64_t reconnectAt = 0;
    Backoff backoff;
    std::map<qint64, Pending> pending;
    qint64 nextId = 1;

    std::unique_ptr<core::ResultLog> log;
    std::optional<CurrentTask> current;
    QHash<core::Digest, Download> downloads;
    // The served models' replicas this session hosts, by assignment: the job, and the blobs pinned.
    struct HostedReplica {
        QString jobId;
        QList<core::Digest> pinned;
    };
    QHash<QString, HostedReplica> hosted;
    std::deque<ShardExecutor::Finished> outbox; // finished shards not yet reported
    std::optional<Upload> upload;
    std::deque<CheckpointAsk> asks;
    std::int64_t downloadGeneration = 0;
    // Disputes' states being re-created by the executor (by verification), and those ready to send.
    QSet<QString> recreating;
    struct ReadyState {
        QString verification;
        core::Digest digest;
        QByteArray bytes;
    };
    std::deque<ReadyState> readyStates;
    std::int64_t diskFullUntil = 0; // no READY before this: the last task's blobs did not fit
    bool stopping = false; // asks for no more work

    // The blob swarm (options.swarm), the broker's seed as host:port (WELCOME's swarmPort on the
    // broker's host), and the current task's blobs that the swarm did not bring (GET instead).
    std::unique_ptr<NodeSwarm> swarm;
    QString brokerSeed;
    QSet<core::Digest> swarmFailed;
    std::int64_t swarmCheckedAt = 0; // when what it serves was last pruned and counted

    // Readable when the executor has something for this client (ShardExecutor::notify): the loop
    // waits on it beside the socket.
    int wake = -1;

    Private(NodeClientOptions o, ShardExecutor& e, core::BlobStore& c, QString t, const core::Clock& k)
        : options(std::move(o))
        , executor(e)
        , cache(c)
        , tag(std::move(t))
        , clock(k)
        , ownContext(options.context ? nullptr : std::make_unique<zmq::context_t>())
        , context(options.context ? *options.context : *ownContext)
        , backoff(options.initialBackoffMs, options.maxBackoffMs)
        , wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))
    {
        lastHeard = clock.nowMs();
        if (wake < 0)
            qCWarning(lcNode).noquote() << "no eventfd: finished shards are picked up at the next message or tick";
        else
            executor.setNotifier(tag, this, [fd = wake] { signalEventFd(fd); });
    }
    ~Private()
    {
        executor.setNotifier(tag, this, {});
        if (wake >= 0)
            ::close(wake);
    }

    // Waits at most maxWaitMs for a message or the executor's word.
    void waitForWork(int maxWaitMs)
    {
        zmq::pollitem_t items[2]
            = { { socket ? socket->handle() : nullptr, 0, ZMQ_POLLIN, 0 }, { nullptr, wake, ZMQ_POLLIN, 0 } };
        zmq::pollitem_t* first = socket ? &items[0] : &items[1];
        const int count = (socket ? 1 : 0) + (wake >= 0 ? 1 : 0);
        if (count == 0) {
            QThread::msleep(std::uint32_t(std::max(0, maxWaitMs)));
            return;
        }
        zmq::poll(first, std::size_t(count), std::chrono::milliseconds(std::max(0, maxWaitMs)));
        if (wake >= 0 && (items[1].revents & ZMQ_POLLIN)) {
            std::uint64_t told = 0;
            (void)!::read(wake, &told, sizeof told);
        }
    }

    std::int64_t now() const { return clock.nowMs(); }

    // --- the connection --------------------------------------------------------------------------

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
        lastReceived = now();
        newSession();
    }

    // Nothing of the last session carries over: its requests will never be answered. What the node
    // holds (the shard in training, results not yet reported) goes to the next session.
    void newSession()
    {
        pending.clear();
        report = Report::Idle;
        readySent = false;
        abandonDownloads();
        upload.reset();
        registerNode();
    }

    void registerNode()
    {
        session = Session::Registering;
        auto node = options.node;
        // Serving needs an executor that hosts replicas (LibTorch in this process).
        if (executor.canHost() && !node.capabilities.contains(core::capability::Serve))
            node.capabilities.append(core::capability::Serve);
        if (executor.runsStages() && !node.capabilities.contains(core::capability::Pipeline))
            node.capabilities.append(core::capability::Pipeline);
        if (executor.runsStages() && !node.capabilities.contains(core::capability::PipelineInt8))
            node.capabilities.append(core::capability::PipelineInt8);
        if (swarm) {
            if (!node.capabilities.contains(core::capability::Swarm))
                node.capabilities.append(core::capability::Swarm);
            node.swarm = swarm->endpoint();
        }
        request(Command::Register, RegisterRequest { node }.toHeader(), {}, { Pending::Purpose::Register, {}, {} });
    }

    void disconnect()
    {
        socket.reset();
        session = Session::Disconnected;
        pending.clear();
        ++counters.reconnects;
        const int wait = backoff.next();
        qCWarning(lcNode).noquote() << "the broker at" << options.broker.endpoint << "went silent; reconnecting in" << wait
                                    << "ms";
        reconnectAt = now() + wait;
    }

    void send(Command command, const QJsonObject& header, const QByteArray& payload = {})
    {
        // Between a broker gone silent and the reconnect there is no socket: what would go now
        // goes again after the next REGISTER (fetchMissing, the outbox), not here. The swarm's
        // fallback to GET is what comes in that gap (a broker killed mid-fetch).
        if (!socket)
            return;
        detail::sendMessage(*socket, { command, header, payload });
        lastSent = now();
    }

    // A request whose reply matters: it gets an id, and the reply is matched by it.
    void request(Command command, QJsonObject header, const QByteArray& payload, const Pending& purpose)
    {
        const qint64 id = nextId++;
        header.insert(fields::Id, id);
        pending[id] = purpose;
        send(command, header, payload);
    }

    // --- blobs -----------------------------------------------------------------------------------

    // Asks for the next ranges of every download, as far as the credit allows.
    void pumpDownloads()
    {
        if (!socket || session != Session::Registered)
            return; // the downloads start again once registered (fetchMissing)
        for (auto& download : downloads) {
            while (download.inFlight < MaxCreditChunks
                && (download.size < 0 ? download.inFlight == 0 : download.requested < download.size)) {
                const std::int64_t length = download.size < 0
                    ? MaxChunkBytes
                    : std::min<std::int64_t>(MaxChunkBytes, download.size - download.requested);
                request(Command::Get, GetRequest { download.digest, download.requested, length, ZstdEncoding }.toHeader(), {},
                    { Pending::Purpose::Get, download.digest, {}, download.generation });
                download.requested += length;
                ++download.inFlight;
            }
        }
    }

    void pumpUpload()
    {
        if (!upload)
            return;
        const auto purpose
            = upload->purpose == Upload::Purpose::Weights ? Pending::Purpose::Weights : Pending::Purpose::CheckpointState;
        while (upload->inFlight < MaxCreditChunks && upload->sent < upload->bytes.size()) {
            const std::int64_t length = std::min<std::int64_t>(MaxChunkBytes, upload->bytes.size() - upload->sent);
            PutRequest put { upload->digest, upload->sent, upload->bytes.size() };
            QByteArray payload = upload->bytes.mid(upload->sent, length);
            // Coded only for a broker that said it takes coded ranges ("Encoded ranges").
            if (brokerTakesZstd)
                payload = codedPayload(put, std::move(payload));
            counters.bytesUploaded += length;
            counters.wireBytesUploaded += payload.size();
            request(Command::Put, put.toHeader(), payload, { purpose, upload->digest, {} });
            upload->sent += length;
            ++upload->inFlight;
        }
    }

    QList<core::Digest> blobsOf(const core::ShardTask& task, const core::Digest& weights) const
    {
        QList<core::Digest> needed { weights };
        for (const auto& digest : task.inputBlobs()) {
            if (!needed.contains(digest)) // each once: pins are counted
                needed.append(digest);
        }
        return needed;
    }

    // A download goes into the cache as a chunked upload of its own (an uploader per blob, so that
    // the cache's per-uploader limits never count one blob against another).
    static QString downloadKey(const core::Digest& digest) { return QStringLiteral("download:") + digest.toHex(); }

    // Starts (or starts over) fetching a blob: a new try, whose GETs are told apart from the last's.
    void startDownload(const core::Digest& digest, int attempt = 1)
    {
        downloads.insert(digest, Download(digest, ++downloadGeneration, attempt));
    }

    // Drops every download and what it left in the cache.
    void abandonDownloads()
    {
        for (auto it = downloads.cbegin(); it != downloads.cend(); ++it)
            cache.abandonUpload(it.key(), downloadKey(it.key()));
        downloads.clear();
    }

    // Whether the round's weights come from the previous round's (in the cache) and the round's
    // int8 change, a quarter of their bytes, rather than whole.
    bool viaChange() const
    {
        return current && current->change && !current->changeFailed && executor.rebuildsWeights()
            && !cache.contains(current->startWeightsBlob) && cache.contains(current->change->base);
    }

    void fetchMissing()
    {
        if (!current || current->started || current->rebuilding)
            return;
        auto needed = blobsOf(current->task, current->startWeightsBlob);
        if (viaChange())
            needed.replace(0, current->change->blob);
        for (const auto& digest : needed)
            obtain(digest);
        pumpDownloads();
    }

    // Starts fetching a blob the task needs: from the swarm where the TASK offered it (its torrent
    // GOT first), else, or when the swarm did not bring it, by GET.
    void obtain(const core::Digest& digest)
    {
        if (cache.contains(digest) || downloads.contains(digest) || (swarm && swarm->fetching(digest)))
            return;
        const auto offer = swarm && !swarmFailed.contains(digest) ? swarm->offerFor(digest) : std::nullopt;
        if (!offer) {
            startDownload(digest);
            return;
        }
        if (!cache.contains(offer->torrent)) {
            if (!downloads.contains(offer->torrent))
                startDownload(offer->torrent);
            return;
        }
        auto bytes = cache.read(offer->torrent);
        auto fetched = bytes ? swarm->fetch(digest, *bytes, brokerSeed, now()) : core::Status(bytes.error());
        if (fetched)
            return;
        qCWarning(lcNode).noquote() << "blob" << digest.toHex().left(12) << "cannot come over the swarm ("
                                    << fetched.error().toString() << "): fetching it from the broker";
        swarmGaveUp(digest);
    }

    void swarmGaveUp(const core::Digest& digest)
    {
        ++counters.swarmFallbacks;
        swarmFailed.insert(digest);
        startDownload(digest);
    }

    // What the swarm brought (checked here against the blob's SHA-256 before the cache takes it),
    // what it gave up on (GET instead), and what it stopped serving.
    void pollSwarm()
    {
        if (!swarm)
            return;
        bool changed = false;
        for (const auto& outcome : swarm->poll(now())) {
            changed = true;
            if (!outcome.error.isEmpty()) {
                qCWarning(lcNode).noquote() << "blob" << outcome.blob.toHex().left(12) << "did not come over the swarm ("
                                            << outcome.error << "): fetching it from the broker";
                swarmGaveUp(outcome.blob);
                continue;
            }
            takeFromSwarm(outcome.blob, outcome.file);
        }
        // What it serves is checked once a heartbeat, not every turn of the loop: each count asks
        // libtorrent's thread about every torrent.
        if (now() - swarmCheckedAt >= options.heartbeatMs) {
            swarmCheckedAt = now();
            for (const auto& blob : swarm->prune([this](const core::Digest& blob) { return cache.contains(blob); }))
                tellHave(blob, false);
            counters.swarmBytesUploaded = swarm->uploadedBytes();
        }
        if (changed) {
            pumpDownloads();
            maybeStartTask();
        }
    }

    void takeFromSwarm(const core::Digest& blob, const QString& file)
    {
        const auto digest = core::Digest::ofFile(file);
        const auto size = QFileInfo(file).size();
        if (!digest || *digest != blob) {
            swarm->discard(blob);
            qCWarning(lcNode).noquote() << "blob" << blob.toHex().left(12)
                                        << "came over the swarm with other bytes: fetching it from the broker";
            swarmGaveUp(blob);
            return;
        }
        auto adopted = cache.adopt(file, blob);
        if (!adopted) {
            swarm->discard(blob);
            cannotKeep(adopted.error());
            swarmGaveUp(blob);
            return;
        }
        ++counters.blobsFetched;
        ++counters.blobsFromSwarm;
        counters.bytesFetched += size;
        counters.bytesFromSwarm += size;
        qCInfo(lcNode).noquote() << "fetched blob" << blob.toHex().left(12) << "(" << size << "bytes) from the swarm";
        serveHeld(blob);
    }

    // Serves a blob the cache holds to the other nodes of its swarm, and tells the broker.
    void serveHeld(const core::Digest& blob)
    {
        if (!swarm)
            return;
        const auto path = cache.path(blob);
        if (!path) {
            swarm->discard(blob); // the cache let it go at once (over its size): nothing to serve it from
            return;
        }
        if (swarm->serve(blob, *path))
            tellHave(blob, true);
    }

    void tellHave(const core::Digest& blob, bool holding)
    {
        if (socket && session == Session::Registered)
            send(Command::Have, HaveMessage { blob, holding }.toHeader());
    }

    // The round's weights from the previous round's and the change, off this thread.
    void startRebuild()
    {
        const auto& change = *current->change;
        const auto previous = cache.path(change.base);
        const auto delta = cache.path(change.blob);
        if (!previous || !delta) { // evicted meanwhile
            fetchMissing();
            return;
        }
        cache.pin(change.base);
        cache.pin(change.blob);
        current->rebuilding = true;
        executor.rebuild(tag, current->assignment, *previous, *delta);
    }

    void releaseChange()
    {
        current->rebuilding = false;
        cache.unpin(current->change->base);
        cache.unpin(current->change->blob);
    }

    void collectRebuilt()
    {
        for (auto& made : executor.takeRebuilt(tag)) {
            if (!current || made.key != current->assignment || !current->rebuilding)
                continue; // the task went meanwhile (giveUp() unpinned for it)
            releaseChange();
            QString why = made.error;
            if (why.isEmpty() && made.digest != current->startWeightsBlob)
                why = QStringLiteral("the rebuilt weights have SHA-256 %1, not the round's").arg(made.digest.toHex().left(16));
            if (why.isEmpty()) {
                auto stored = cache.put(made.weights, made.digest);
                if (stored) {
                    ++counters.weightsRebuilt;
                    qCInfo(lcNode).noquote()
                        << "rebuilt the round's weights from its change (" << cache.sizeOf(current->change->blob).value_or(0)
                        << "bytes fetched for" << made.weights.size() << ")";
                    current->rebuilt = std::move(made.weights);
                    maybeStartTask();
                    continue;
                }
                cannotKeep(stored.error());
                if (stored.error().diskFull) {
                    giveUp(stored.error().message, core::ShardResult::Outcome::Returned);
                    continue;
                }
                why = stored.error().message;
            }
            qCWarning(lcNode).noquote() << "the round's change did not give its weights (" << why << "): downloading them whole";
            ++counters.rebuildsFailed;
            current->changeFailed = true;
            fetchMissing();
            maybeStartTask();
        }
    }

    // Reports the current task (before it started training) as failed, or as returned when the
    // trouble is this node's own (a full disk), for another node to take.
    void giveUp(const QString& why, core::ShardResult::Outcome outcome = core::ShardResult::Outcome::Failed)
    {
        if (!current || current->started)
            return;
        if (current->rebuilding)
            releaseChange();
        const auto& task = current->task;
        outbox.push_back(
            { tag, current->assignment, untrained(task.jobId, task.round, task.shard, outcome, why), {}, {}, {}, {} });
        current.reset();
        abandonDownloads();
    }

    // The blob cache could not keep something: said in the log; a full disk also holds off new
    // work for a while (the caller gives its shard back).
    void cannotKeep(const core::Error& error)
    {
        qCWarning(lcNode).noquote() << error.toString();
        if (!error.diskFull)
            return;
        diskFullUntil = now() + DiskFullPauseMs;
        qCWarning(lcNode).noquote() << "the disk is full: giving the shard back; no new work for" << DiskFullPauseMs / 1000
                                    << "s";
    }

    bool swarmFetching() const
    {
        if (!swarm || !current)
            return false;
        for (const auto& digest : blobsOf(current->task, current->startWeightsBlob)) {
            if (swarm->fetching(digest))
                return true;
        }
        return current->change && swarm->fetching(current->change->blob);
    }

    void maybeStartTask()
    {
        if (!current || current->started || current->rebuilding || !downloads.isEmpty() || swarmFetching())
            return;
        if (viaChange()) {
            if (cache.contains(current->change->blob))
                startRebuild();
            else
                fetchMissing();
            return;
        }
        QHash<core::Digest, QString> paths;
        for (const auto& digest : blobsOf(current->task, current->startWeightsBlob)) {
            auto path = cache.path(digest);
            if (!path) { // not here yet (its torrent came first), or evicted meanwhile
                fetchMissing();
                return;
            }
            paths.insert(digest, *path);
        }
        // A stage task reads its share of the round's weights from the cache's file (pinned below
        // until its result is settled; rebuilt weights were put there too) rather than hold the
        // whole model in this process.
        const bool fromFile = current->task.isStage();
        auto weights = fromFile          ? core::Result<QByteArray>(QByteArray())
            : current->rebuilt.isEmpty() ? cache.read(current->startWeightsBlob)
                                         : core::Result<QByteArray>(std::move(current->rebuilt));
        current->rebuilt = QByteArray();
        if (!weights) {
            qCWarning(lcNode).noquote() << weights.error().toString();
            return;
        }
        for (const auto& digest : paths.keys())
            cache.pin(digest);
        current->started = true;
        if (current->task.inference && current->task.inference->serves())
            return hostReplica(paths);
        const auto& task = current->task;
        qCInfo(lcNode).noquote() << "training" << current->assignment << "(job" << task.jobId << "round" << task.round << "shard"
                                 << task.shard
                                 << (task.isStage() ? QStringLiteral("stage %1 of %2)").arg(task.stage + 1).arg(task.stages)
                                                    : QStringLiteral(")"));
        const std::int64_t deadlineMs
            = current->deadlineAt > 0 ? std::max<std::int64_t>(1, current->deadlineAt - clock.nowMs()) : 0;
        executor.start(tag, current->assignment, current->task, *weights,
            fromFile ? paths.value(current->startWeightsBlob) : QString(), paths, deadlineMs);
        for (const auto& tensor : std::exchange(earlyTensors, {})) // a stage's that came while it fetched
            executor.deliverTensor(tensor);
    }

    // --- serving (docs/PROTOCOL.md, "Serving") ----------------------------------------------------

    // A served model's replica: loaded by the executor, which says when it is ready (collectServed);
    // it holds no shard slot, so the node asks for work again at once.
    void hostReplica(const QHash<core::Digest, QString>& paths)
    {
        qCInfo(lcNode).noquote() << "hosting" << current->assignment << "(job" << current->task.jobId << "replica"
                                 << current->task.shard << ")";
        hosted.insert(current->assignment, { current->task.jobId, paths.keys() });
        executor.host(tag, current->assignment, current->task, paths.value(current->startWeightsBlob));
        current.reset();
        readySent = false;
    }

    void unhost(const QString& assignment)
    {
        for (const auto& digest : hosted.value(assignment).pinned)
            cache.unpin(digest);
        hosted.remove(assignment);
        executor.unhost(tag, assignment);
    }

    // Every replica goes with the session that was given it: a broker that registers this node again
    // gives it replicas anew.
    void unhostAll()
    {
        for (const auto& assignment : hosted.keys())
            unhost(assignment);
    }

    void onServeRequest(const Message& message)
    {
        auto request = ServeRequest::fromHeader(message.header);
        if (!request) {
            qCWarning(lcNode).noquote() << "ignored a request:" << request.error().toString();
            return;
        }
        if (!hosted.contains(request->assignment)) {
            AnswerRequest refusal;
            refusal.ticket = request->ticket;
            refusal.failure = QStringLiteral("this node does not host %1").arg(request->assignment);
            send(Command::Answer, refusal.toHeader());
            return;
        }
        executor.ask(tag, request->assignment, request->ticket, request->question);
    }

    void onHosting(const Message& message)
    {
        auto hosting = HostingMessage::fromHeader(message.header);
        if (hosting && !hosting->ready && hosted.contains(hosting->assignment)) {
            qCInfo(lcNode).noquote() << "stopped hosting" << hosting->assignment;
            unhost(hosting->assignment);
        }
    }

    // A running stage task's tensors for the other stages (docs/PROTOCOL.md, "Stage tasks"): each
    // as TENSOR messages of at most a chunk's bytes, in order. Without a session they are dropped:
    // the broker stops a pipeline whose stage went.
    void relayTensors()
    {
        // Not tied to `current`: a stage's last tensors may come out after its task finished.
        for (const auto& tensor : executor.takeTensors(tag)) {
            if (session != Session::Registered)
                continue;
            const auto size = std::int64_t(tensor.bytes.size());
            for (std::int64_t offset = 0; offset < size; offset += MaxChunkBytes) {
                const TensorMessage header { tensor.assignment, true, tensor.peer, tensor.kind, tensor.step, tensor.micro, offset,
                    size };
                send(Command::Tensor, header.toHeader(), tensor.bytes.mid(offset, MaxChunkBytes));
            }
        }
    }

    // A tensor for the running stage task, a part at a time: handed to the stage once whole. Parts
    // of another assignment's, out of order or past their size are dropped (the stage then fails
    // for want of them, or is stopped).
    void onTensor(const Message& message)
    {
        auto tensor = TensorMessage::fromHeader(message.header);
        if (!tensor || tensor->outbound || !current || current->assignment != tensor->assignment)
            return;
        const auto key
            = QStringLiteral("%1/%2/%3/%4").arg(tensor->stage).arg(int(tensor->kind)).arg(tensor->step).arg(tensor->micro);
        auto& arriving = arrivingTensors[key];
        if (tensor->offset != arriving.size() || tensor->offset + message.payload.size() > tensor->size
            || arrivingTensors.size() > MaxArrivingTensors) {
            arrivingTensors.remove(key);
            return;
        }
        arriving += message.payload;
        if (arriving.size() < tensor->size)
            return;
        const ShardExecutor::Tensor whole { tag, tensor->assignment, tensor->stage, tensor->kind, tensor->step, tensor->micro,
            arriving };
        arrivingTensors.remove(key);
        if (current->started)
            executor.deliverTensor(whole);
        else if (earlyTensors.size() < std::size_t(MaxArrivingTensors)) // the stage starts once its blobs are in
            earlyTensors.push_back(whole);
    }
    static constexpr qsizetype MaxArrivingTensors = 64;
    QHash<QString, QByteArray> arrivingTensors; // the running stage's, part by part
    std::vector<ShardExecutor::Tensor> earlyTensors; // whole, before the stage started

    // STOP: the running stage's pipeline ended; the stage ends (given back) and sends no more.
    void onStop(const Message& message)
    {
        auto stop = StopMessage::fromHeader(message.header);
        if (!stop || !current || current->assignment != stop->assignment)
            return;
        qCInfo(lcNode).noquote() << "stage task" << stop->assignment << "stopped:" << stop->reason;
        arrivingTensors.clear();
        earlyTensors.clear();
        const QString why = QStringLiteral("the broker stopped the pipeline: ") + stop->reason;
        if (!current->started) // still fetching: given back at once
            return giveUp(why, core::ShardResult::Outcome::Returned);
        executor.stopStage(stop->assignment, why);
    }

    void collectServed()
    {
        for (auto& served : executor.takeServed(tag)) {
            if (!hosted.contains(served.assignment) || session != Session::Registered)
                continue; // a replica this session no longer hosts
            switch (served.kind) {
            case ShardExecutor::Served::Kind::Hosted:
                send(Command::Hosting,
                    HostingMessage { served.assignment, served.error.isEmpty(), served.error.left(1000) }.toHeader());
                if (!served.error.isEmpty())
                    unhost(served.assignment);
                break;
            case ShardExecutor::Served::Kind::Tokens:
                send(Command::Tokens, TokensMessage { served.ticket, served.from, served.tokens }.toHeader());
                break;
            case ShardExecutor::Served::Kind::Answered: {
                AnswerRequest answer;
                answer.ticket = served.ticket;
                if (served.error.isEmpty()) {
                    answer.line = served.line;
                    answer.answer = core::signDocument(core::inference::answerDocument(served.assignment,
                                                           hosted.value(served.assignment).jobId, served.ticket, served.line),
                        options.signing);
                } else {
                    answer.failure = served.error.left(1000);
                }
                request(Command::Answer, answer.toHeader(), {}, { Pending::Purpose::Answer, {}, {} });
                break;
            }
            }
        }
    }

    // --- results ---------------------------------------------------------------------------------

    void reportNext()
    {
        if (outbox.empty() || session != Session::Registered || upload || report != Report::Idle)
            return;
        const auto& finished = outbox.front();
        // Commit, then reveal: the signed hashes go first, the weights and the result after.
        if (finished.result.outcome == core::ShardResult::Outcome::Completed) {
            const auto document = core::signDocument(finished.result.commitmentDocument(finished.assignment), options.signing);
            report = Report::Committing;
            request(Command::Commit, CommitRequest { document }.toHeader(), {}, { Pending::Purpose::Commit, {}, {} });
            return;
        }
        sendResult();
    }

    void reveal()
    {
        const auto& finished = outbox.front();
        // Uploaded every time, also when this node's cache holds the bytes (it uploaded the same
        // weights before: the same job twice): the broker may have let go of them since (it
        // deletes an aggregated round's uploads), and a PUT of a blob it still holds, by a node
        // that may read it, completes at once.
        QByteArray bytes = finished.weights;
        if (bytes.isEmpty() && !finished.result.weightsSha256.isNull()) {
            if (auto kept = cache.read(finished.result.weightsSha256))
                bytes = std::move(*kept);
        }
        if (!bytes.isEmpty()) {
            report = Report::Uploading;
            upload = Upload { Upload::Purpose::Weights, finished.result.weightsSha256, std::move(bytes), 0, 0, {} };
            pumpUpload();
            return;
        }
        sendResult();
    }

    void sendResult()
    {
        const auto& finished = outbox.front();
        report = Report::Reporting;
        request(Command::Result, ResultRequest { finished.assignment, finished.result }.toHeader(), {},
            { Pending::Purpose::Result, {}, {} });
    }

    void resultAnswered()
    {
        if (!outbox.empty()) {
            handedAttempts.remove(outbox.front().assignment);
            outbox.pop_front();
            ++counters.results;
        }
        report = Report::Idle;
        upload.reset();
    }

    // --- results handed between the sessions of one network -------------------------------------

    // A finished shard onto the relay, for another session of the network: with its weights and
    // what the node keeps for a dispute over it (staged: this cache lets them go). Whether it went
    // (otherwise `finished` is as it was, and stays here with its pins).
    bool relayOut(ShardExecutor::Finished& finished, int attempts, const QString& refusedBy = {})
    {
        QList<std::pair<core::Digest, QString>> blobs;
        const auto kept = log ? log->checkpoints(finished.assignment) : core::Result<QList<core::Digest>>(QList<core::Digest> {});
        bool staged = kept.ok();
        for (const auto& digest : kept.value_or(QList<core::Digest> {})) {
            const auto file = cache.storedFile(digest);
            const auto copy = file ? options.relay->stage(*file) : std::nullopt;
            if (!copy) {
                staged = false;
                break;
            }
            blobs.append({ digest, *copy });
        }
        if (!staged) {
            for (const auto& blob : blobs)
                QFile::remove(blob.second);
            qCWarning(lcNode).noquote() << "cannot stage what the node keeps for" << finished.assignment
                                        << "to hand it on: it waits for its own broker";
            return false;
        }
        if (finished.weights.isEmpty() && !finished.result.weightsSha256.isNull()) {
            if (auto weights = cache.read(finished.result.weightsSha256))
                finished.weights = std::move(*weights);
        }
        for (const auto& blob : blobs)
            cache.unpin(blob.first);
        options.relay->hand({ network, options.broker.endpoint, std::move(finished), std::move(blobs), attempts,
            attempts > 0 ? now() + ResultRelay::RetryMs : 0, refusedBy });
        return true;
    }

    // Unreported results of a broker silent for longer than a job's lease go to the relay.
    void handOff()
    {
        if (!options.relay || network.isEmpty() || outbox.empty() || session == Session::Registered || stopping
            || now() - lastHeard < options.handOffAfterMs)
            return;
        std::deque<ShardExecutor::Finished> kept;
        for (auto& finished : outbox) {
            const QString assignment = finished.assignment;
            if (!relayOut(finished, handedAttempts.value(assignment))) {
                kept.push_back(std::move(finished));
                continue;
            }
            handedAttempts.remove(assignment);
            qCWarning(lcNode).noquote() << "the broker at" << options.broker.endpoint << "is silent with the result of"
                                        << assignment << "unreported: handed to another broker of its network";
        }
        outbox = std::move(kept);
        report = Report::Idle;
        upload.reset();
    }

    // The front result was refused because another broker of the network holds its job now (ERROR
    // standby): handed to the relay for another session (after MaxAttempts, only for the session it
    // came from). Whether it was.
    bool handOnRefused()
    {
        if (!options.relay || network.isEmpty() || outbox.empty())
            return false;
        const QString assignment = outbox.front().assignment;
        if (!relayOut(outbox.front(), handedAttempts.value(assignment) + 1, options.broker.endpoint))
            return false;
        handedAttempts.remove(assignment);
        outbox.pop_front();
        report = Report::Idle;
        upload.reset();
        return true;
    }

    // A result another session of the network handed on, delivered through this one's broker.
    void takeHanded()
    {
        if (!options.relay || network.isEmpty() || session != Session::Registered || !outbox.empty() || stopping)
            return;
        auto handed = options.relay->take(network, options.broker.endpoint, now());
        if (!handed)
            return;
        // Pinned until the result is settled, as its own session did: every one, so that the unpins
        // when it settles balance (record()).
        for (const auto& [digest, file] : handed->blobs) {
            if (auto adopted = cache.adopt(file, digest); !adopted)
                qCWarning(lcNode).noquote() << "cannot keep a state of" << handed->finished.assignment << ":"
                                            << adopted.error().toString();
            cache.pin(digest);
        }
        if (log) // its kept states are this session's now (pinned here again after a restart)
            (void)log->moved(handed->finished.assignment, options.broker.endpoint);
        qCInfo(lcNode).noquote() << "delivering the result of" << handed->finished.assignment << "(from the broker at"
                                 << handed->from << ") to" << options.broker.endpoint;
        handedAttempts.insert(handed->finished.assignment, handed->attempts);
        outbox.push_back(std::move(handed->finished));
    }

    // Answers disputes' requests for checkpoint states, one upload at a time, between results: the
    // kept state from the cache, or one the executor re-creates (off this thread) from the kept
    // state or the round's weights.
    void pumpAsks()
    {
        // A result being reported holds the upload slot from its COMMIT to its RESULT's answer.
        if (report != Report::Idle)
            return;
        while (!readyStates.empty() && !upload && session == Session::Registered) {
            auto ready = std::move(readyStates.front());
            readyStates.pop_front();
            upload = Upload { Upload::Purpose::CheckpointState, ready.digest, std::move(ready.bytes), 0, 0, ready.verification };
            pumpUpload();
        }
        while (!asks.empty() && !upload && session == Session::Registered) {
            const auto ask = asks.front();
            asks.pop_front();
            std::optional<core::Digest> digest;
            if (log && ask.question.want == core::DisputeQuestion::Want::State) {
                if (auto kept = log->checkpoint(ask.assignment, ask.question.checkpoint))
                    digest = *kept;
            }
            std::optional<QByteArray> bytes;
            if (digest) {
                if (auto read = cache.read(*digest))
                    bytes = *read;
            }
            if (bytes) {
                qCInfo(lcNode).noquote() << "sending checkpoint" << ask.question.checkpoint << "of" << ask.assignment
                                         << "to the referee";
                upload = Upload { Upload::Purpose::CheckpointState, *digest, *bytes, 0, 0, ask.verification };
                pumpUpload();
                continue;
            }
            if (startRecreation(ask))
                continue;
            qCWarning(lcNode).noquote() << "a dispute asks for" << ask.question.describe() << "of" << ask.assignment
                                        << "and this node can neither find nor re-create it";
            answerCheckpoint(ask.verification, std::nullopt);
        }
    }

    // Hands a dispute's question to the executor, with the blobs the result was trained from.
    bool startRecreation(const CheckpointAsk& ask)
    {
        // Asked again (the broker restarted): the first question's answer is on its way.
        if (recreating.contains(ask.verification)
            || std::any_of(readyStates.begin(), readyStates.end(),
                [&](const ReadyState& ready) { return ready.verification == ask.verification; }))
            return true;
        if (!log)
            return false;
        auto kept = log->kept(ask.assignment);
        if (!kept || !*kept || (*kept)->task.isEmpty() || (*kept)->inputs.isEmpty())
            return false;
        auto task = core::ShardTask::fromJson((*kept)->task);
        if (!task)
            return false;
        QHash<core::Digest, QString> paths;
        for (const auto& digest : (*kept)->inputs) {
            auto path = cache.path(digest);
            if (!path)
                return false;
            paths.insert(digest, *path);
        }
        QString keptPath;
        const auto at = task->keptStateCheckpoint();
        if (at > 0 && at <= (*kept)->checkpoints.size() && !(*kept)->checkpoints[at - 1].isNull())
            keptPath = cache.path((*kept)->checkpoints[at - 1]).value_or(QString());
        const auto startWeights = paths.value((*kept)->inputs.first());
        if (!executor.recreate(tag, ask.verification, *task, ask.question, startWeights, keptPath, paths))
            return false;
        qCInfo(lcNode).noquote() << "re-creating" << ask.question.describe() << "of" << ask.assignment << "for the referee";
        recreating.insert(ask.verification);
        return true;
    }

    // States the executor re-created go out as soon as the upload slot is free.
    void collectRecreated()
    {
        for (auto& made : executor.takeRecreated(tag)) {
            recreating.remove(made.key);
            if (!made.error.isEmpty()) {
                qCWarning(lcNode).noquote() << "could not re-create a state for dispute" << made.key << ":" << made.error;
                if (session == Session::Registered)
                    answerCheckpoint(made.key, std::nullopt);
                continue;
            }
            readyStates.push_back({ made.key, made.digest, std::move(made.state) });
        }
        pumpAsks();
    }

    void answerCheckpoint(const QString& verification, std::optional<core::Digest> state)
    {
        request(Command::Checkpoint, CheckpointAnswer { verification, state }.toHeader(), {},
            { Pending::Purpose::CheckpointAnswer, {}, verification });
    }

    // Records where the result at the front of the outbox stands.
    void logFront(core::NodeResultState state, const QString& paid = {}, const QString& detail = {})
    {
        if (!outbox.empty())
            record(outbox.front().assignment, state, paid, detail);
    }

    // What became of a result, in the log; once it can no longer be disputed its checkpoint states
    // may leave the cache (until then they are pinned: a dispute's loser is whoever cannot answer).
    void record(const QString& assignment, core::NodeResultState state, const QString& paid = {}, const QString& detail = {})
    {
        if (!log)
            return;
        const auto before = log->state(assignment);
        (void)log->advance(assignment, state, paid, detail);
        if (core::unsettled(state))
            return;
        // Released once, when it is first settled (verified, then paid, is one release): the
        // inputs' pins are counted and shared with other results.
        if (!before || !*before || !core::unsettled(**before))
            return;
        if (auto states = log->checkpoints(assignment)) {
            for (const auto& digest : *states)
                cache.unpin(digest);
        }
    }

    // Finished shards from the executor (the compute thread) go to the outbox. A result is worth
    // reporting only if the node can answer a dispute over it: it keeps the state at the task's
    // kept checkpoint and, pinned until the result is settled, the blobs it trained from (to
    // re-create any other state); without them it would lose its stake, so it gives the shard back.
    void collectFinished()
    {
        auto done = executor.takeFinished(tag);
        if (!done.isEmpty()) // a stage's tensors went out before it finished: they go before its result
            relayTensors();
        for (auto& finished : done) {
            std::optional<CurrentTask> task;
            if (current && finished.assignment == current->assignment) {
                task = std::move(*current);
                current.reset();
            }
            const bool completed = finished.result.outcome == core::ShardResult::Outcome::Completed;
            core::ResultLog::Kept kept;
            if (task) {
                const auto inputs = blobsOf(task->task, task->startWeightsBlob);
                if (completed) { // the training's pins stay, the result's now: until it is settled
                    kept.task = task->task.toJson();
                    kept.inputs = inputs;
                } else {
                    for (const auto& digest : inputs)
                        cache.unpin(digest);
                }
            }
            QString lost;
            if (completed && !task)
                lost = QStringLiteral("the node lost track of the shard's task");
            if (completed && task && (!finished.keptState.isEmpty() || !finished.keptStateFile.isEmpty())) {
                const auto at = task->task.keptStateCheckpoint();
                auto stored = finished.keptStateFile.isEmpty() ? cache.put(finished.keptState, finished.keptStateDigest)
                                                               : cache.adopt(finished.keptStateFile, finished.keptStateDigest);
                if (stored) {
                    cache.pin(*stored); // until the result is settled
                    kept.checkpoints
                        = QList<core::Digest>(qsizetype(std::max<std::int64_t>(0, task->task.checkpointCount() - 2)));
                    if (at >= 1 && at <= kept.checkpoints.size())
                        kept.checkpoints[at - 1] = *stored;
                } else {
                    cannotKeep(stored.error());
                    lost = QStringLiteral("the node could not keep its checkpoints for a dispute: ") + stored.error().message;
                }
            }
            finished.keptState.clear();
            if (!finished.keptStateFile.isEmpty() && QFile::exists(finished.keptStateFile))
                QFile::remove(finished.keptStateFile); // not taken in: the shard failed or was lost
            if (!lost.isEmpty()) {
                for (const auto& digest : kept.inputs)
                    cache.unpin(digest);
                for (const auto& digest : kept.checkpoints) {
                    if (!digest.isNull())
                        cache.unpin(digest);
                }
                kept = {};
                finished.result = untrained(finished.result.jobId, finished.result.round, finished.result.shard,
                    core::ShardResult::Outcome::Returned, lost);
            }
            if (log)
                (void)log->computed(finished.assignment, options.broker.endpoint, finished.result, kept);
            outbox.push_back(std::move(finished));
        }
    }

    // --- messages --------------------------------------------------------------------------------

    void handle(const Message& message);
    void handleReply(const Message& message, const Pending& purpose);
    void onWelcome(const Message& message);
    // The ledger's log (docs/LEDGER.md, "Watching the log"): its head asked for every logHeadMs,
    // and checked against the one the node's sessions keep for the network.
    void watchLog();
    void logHeadSeen(const QJsonObject& reply, std::int64_t from);
    void missedLogHead(const QString& why);
    bool logBroken() const
    {
        return options.logWatch && (options.logWatch->broken(network) || options.logWatch->brokerBroken(options.broker.endpoint));
    }
    // Until its log checks out again, a broker that did not show its head this many times in a row
    // gets no READY (a broker cannot escape the watch by not answering).
    static constexpr int MaxLogHeadMisses = 3;
    bool logUnseen() const { return logHeadMisses >= MaxLogHeadMisses; }
    void onTask(const Message& message);
    void onChunk(const Message& message, const Pending& purpose);
    void onOk(const Message& message, const Pending& purpose);
    void onError(const Message& message, const Pending* purpose);
    void onVerdict(const Message& message);
    void receive();
    void keepSession();
};

void ShardExecutor::setNotifier(const QString& tag, const void* owner, std::function<void()> wake)
{
    const std::lock_guard lock(m_notifierMutex);
    if (wake)
        m_notifiers.insert(tag, { owner, std::move(wake) });
    else if (const auto it = m_notifiers.find(tag); it != m_notifiers.end() && it->owner == owner)
        m_notifiers.erase(it);
}

void ShardExecutor::notify(const QString& tag) const
{
    const std::lock_guard lock(m_notifierMutex); // held while it runs: see setNotifier
    if (const auto it = m_notifiers.constFind(tag); it != m_notifiers.constEnd())
        it->wake();
}

NodeClient::NodeClient(
    NodeClientOptions options, ShardExecutor& executor, core::BlobStore& cache, QString tag, const core::Clock& clock)
    : d(std::make_unique<Private>(std::move(options), executor, cache, std::move(tag), clock))
{
    if (QDir().mkpath(cache.stagingDirectory()))
        executor.stageIn(d->tag, cache.stagingDirectory());
    if (d->options.swarm) {
        // Each client its own folder: two brokers' clients share one cache.
        auto swarm = NodeSwarm::start(*d->options.swarm,
            QDir(cache.stagingDirectory())
                .filePath(QStringLiteral("swarm-")
                    + QString(d->tag).replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_-]")), QStringLiteral("_"))));
        if (swarm) {
            d->swarm = std::move(*swarm);
            const auto endpoint = d->swarm->endpoint();
            qCInfo(lcNode).noquote() << (endpoint.port > 0
                    ? QStringLiteral("serving the blob swarm on port %1").arg(endpoint.port)
                    : QStringLiteral("in the blob swarm, fetching only"));
        } else
            qCWarning(lcNode).noquote() << "no blob swarm: every blob comes from the broker:" << swarm.error().toString();
    }
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
}

NodeClient::~NodeClient() = default;

const core::Clock& NodeClient::systemClock()
{
    static const core::SystemClock clock;
    return clock;
}

NodeClient::Counters NodeClient::counters() const
{
    return d->counters;
}

NodeClient::Session NodeClient::session() const
{
    return d->session;
}

int NodeClient::backoffMs() const
{
    return d->backoff.current();
}

void NodeClient::Private::handle(const Message& message)
{
    const auto id = message.header.value(fields::Id);
    const bool reply = message.command == Command::Ok || message.command == Command::Error || message.command == Command::Chunk
        || message.command == Command::Welcome;
    if (reply && !id.isUndefined()) {
        const auto found = pending.find(id.toInteger(-1));
        if (found == pending.end()) {
            // An answer to a request of an earlier session, or to none: nothing to match it to.
            ++counters.ignoredReplies;
            qCDebug(lcNode).noquote() << "ignored a reply to no request of this session:" << commandName(message.command);
            return;
        }
        const Pending purpose = found->second;
        pending.erase(found);
        handleReply(message, purpose);
        return;
    }
    switch (message.command) {
    case Command::Heartbeat: // a probe is echoed at once: the broker measures the round trip
        if (const auto probe = message.header.value(QStringLiteral("probe")).toString(); !probe.isEmpty() && probe.size() <= 64)
            send(Command::Heartbeat, QJsonObject { { QStringLiteral("echo"), probe } });
        return;
    case Command::Task:
        return onTask(message);
    case Command::Checkpoint:
        if (auto ask = CheckpointAsk::fromHeader(message.header)) {
            asks.push_back(*ask);
            pumpAsks();
        }
        return;
    case Command::Verdict:
        return onVerdict(message);
    case Command::Request:
        return onServeRequest(message);
    case Command::Hosting:
        return onHosting(message);
    case Command::Tensor:
        return onTensor(message);
    case Command::Stop:
        return onStop(message);
    case Command::Bye:
        session = Session::Disconnected;
        reconnectAt = now() + backoff.next();
        socket.reset();
        return;
    case Command::Error:
        return onError(message, nullptr); // about no request of ours (a READY the broker refuses)
    default:
        ++counters.ignoredReplies;
        return;
    }
}

void NodeClient::Private::handleReply(const Message& message, const Pending& purpose)
{
    if (message.command == Command::Error)
        return onError(message, &purpose);
    if (message.command == Command::Welcome && purpose.purpose == Pending::Purpose::Register)
        return onWelcome(message);
    if (message.command == Command::Chunk && purpose.purpose == Pending::Purpose::Get)
        return onChunk(message, purpose);
    if (message.command == Command::Ok)
        return onOk(message, purpose);
    ++counters.ignoredReplies;
}

void NodeClient::Private::onWelcome(const Message& message)
{
    unhostAll();
    session = Session::Registered;
    const auto welcome = Welcome::fromHeader(message.header);
    brokerTakesZstd = welcome && welcome->encodings.contains(ZstdEncoding);
    network = welcome ? welcome->network : QString();
    logHeadMs = welcome ? welcome->logHeadMs : 0;
    nextLogHeadAt = now(); // the head at once, then every logHeadMs
    logHeadAsked = false;
    if (options.logWatch) {
        // A broker keeps the network it named first, and keeps publishing its log.
        if (auto pinned = options.logWatch->announced(options.broker.endpoint, network, logHeadMs > 0); !pinned)
            qCWarning(lcNode).noquote() << "cannot keep the ledger log's evidence:" << pinned.error().toString();
        counters.logBroken = logBroken();
    }
    brokerSeed.clear();
    if (welcome && welcome->swarmPort > 0) {
        const QString host = endpointHost(options.broker.endpoint);
        brokerSeed = QStringLiteral("%1:%2").arg(host.isEmpty() ? QStringLiteral("127.0.0.1") : host).arg(welcome->swarmPort);
    }
    readySent = false;
    backoff.reset();
    ++counters.registrations;
    qCInfo(lcNode).noquote() << "registered with" << options.broker.endpoint;
    // A task whose blobs were still coming when the connection broke starts its downloads again.
    fetchMissing();
    maybeStartTask();
}

void NodeClient::Private::onTask(const Message& message)
{
    readySent = false;
    auto task = TaskMessage::fromHeader(message.header);
    if (!task) {
        // A task this node cannot read (a field or value of a later protocol, docs/PROTOCOL.md,
        // "Capabilities") is given back when it names its shard, so that it goes to another node
        // at once instead of waiting for its deadline; one that does not is ignored.
        const auto assignment = message.header.value(fields::Assignment).toString();
        const auto named = message.header.value(fields::Task).toObject();
        const auto jobId = named.value(QStringLiteral("jobId")).toString();
        const auto round = named.value(QStringLiteral("round")).toInteger(-1);
        const auto shard = named.value(QStringLiteral("shard")).toInteger(-1);
        if (current || assignment.isEmpty() || assignment.size() > 128 || jobId.isEmpty() || jobId.size() > 128 || round < 0
            || shard < 0) {
            qCWarning(lcNode).noquote() << "ignored a task:" << task.error().toString();
            return;
        }
        qCWarning(lcNode).noquote() << "gave back" << assignment << ": this node cannot run it:" << task.error().toString();
        outbox.push_back({ tag, assignment,
            untrained(jobId, round, shard, core::ShardResult::Outcome::Returned,
                QStringLiteral("this node cannot run the task: %1").arg(task.error().toString().left(300))),
            {}, {}, {}, {} });
        return;
    }
    if (current) {
        // Busy with another shard (the broker sent this one to a session it then lost): given back at
        // once, so that it does not wait for its deadline.
        qCWarning(lcNode).noquote() << "gave back" << task->assignment << ": busy with" << current->assignment;
        outbox.push_back({ tag, task->assignment,
            untrained(task->task.jobId, task->task.round, task->task.shard, core::ShardResult::Outcome::Returned,
                QStringLiteral("the node is busy with another shard")),
            {}, {}, {}, {} });
        return;
    }
    ++counters.tasks;
    swarmFailed.clear();
    if (swarm) {
        for (const auto& offer : task->swarm)
            swarm->offered(offer);
    }
    arrivingTensors.clear(); // of a stage task before this one
    earlyTensors.clear();
    current = CurrentTask { task->assignment, task->task, task->startWeightsBlob, false, task->startChange, false, false, {},
        task->deadlineMs > 0 ? clock.nowMs() + task->deadlineMs : 0 };
    fetchMissing();
    maybeStartTask();
}

void NodeClient::Private::onChunk(const Message& message, const Pending& purpose)
{
    const auto& digest = purpose.digest;
    auto chunk = ChunkHeader::fromHeader(message.header);
    if (!downloads.contains(digest) || downloads[digest].generation != purpose.generation)
        return; // a reply to an earlier try
    auto& download = downloads[digest];
    --download.inFlight;
    // A try that goes wrong starts over a few times; then the shard goes back to the broker.
    const auto retry = [&](const QString& why) {
        const int attempt = download.attempts + 1;
        if (attempt > MaxDownloadAttempts) {
            giveUp(QStringLiteral("the node could not fetch blob %1: %2").arg(digest.toHex().left(12), why),
                core::ShardResult::Outcome::Returned);
            return;
        }
        qCWarning(lcNode).noquote() << "blob" << digest.toHex().left(12) << ":" << why << "; fetching it again";
        startDownload(digest, attempt);
    };
    if (!chunk || chunk->sha256 != digest || chunk->offset != download.received || chunk->size > core::BlobStore::MaxBlobBytes) {
        retry(QStringLiteral("a range arrived out of order"));
        pumpDownloads();
        return;
    }
    download.size = chunk->size;
    const auto range = rangeOf(*chunk, message.payload);
    if (!range) {
        retry(range.error().message);
        pumpDownloads();
        return;
    }
    counters.wireBytesFetched += message.payload.size();
    // Each range goes to the cache's file as it comes, hashed on the way: no step holds the whole
    // blob in memory or hashes it at once, however large the model.
    const auto stored = cache.putRange(digest, chunk->offset, chunk->size, *range, downloadKey(digest), now());
    download.received += range->size();
    if (!stored) {
        const auto& error = stored.error();
        if (error.field == u"sha256" || error.field == u"offset" || error.field == u"size") {
            retry(error.message); // what came was wrong: another try may get it right
        } else {
            // The cache cannot keep it (a full disk, an unwritable folder): fetching it again would
            // not help; the shard goes back to the broker for someone else.
            cannotKeep(error);
            giveUp(QStringLiteral("the node could not keep a blob the shard needs: ") + error.message,
                core::ShardResult::Outcome::Returned);
        }
    } else if (*stored == core::BlobStore::UploadState::Complete) {
        ++counters.blobsFetched;
        counters.bytesFetched += download.size;
        qCInfo(lcNode).noquote() << "fetched blob" << digest.toHex().left(12) << "(" << download.size << "bytes) from the broker";
        downloads.remove(digest);
        serveHeld(digest);
    }
    pumpDownloads();
    maybeStartTask();
}

void NodeClient::Private::onOk(const Message& message, const Pending& purpose)
{
    switch (purpose.purpose) {
    case Pending::Purpose::Commit:
        if (report != Report::Committing || outbox.empty())
            return;
        logFront(core::NodeResultState::Committed);
        return reveal();
    case Pending::Purpose::Weights:
    case Pending::Purpose::CheckpointState: {
        auto reply = PutReply::fromHeader(message.header);
        if (!upload || upload->digest != purpose.digest)
            return;
        --upload->inFlight;
        if (!reply || !reply->complete) {
            pumpUpload();
            return;
        }
        const auto done = *upload;
        upload.reset();
        if (done.purpose == Upload::Purpose::CheckpointState) {
            answerCheckpoint(done.verification, done.digest);
            pumpAsks();
            reportNext();
            return;
        }
        cache.put(done.bytes, done.digest); // keep our own copy (hashed by the compute thread): a verifier may ask for it
        pumpAsks();
        if (report == Report::Uploading && !outbox.empty())
            sendResult();
        return;
    }
    case Pending::Purpose::Result: {
        auto reply = ResultReply::fromHeader(message.header);
        if (reply && reply->verdict == core::ResultVerdict::Accepted)
            logFront(!reply->paid || reply->paid->isZero() ? core::NodeResultState::Accepted : core::NodeResultState::Paid,
                reply->paid ? reply->paid->toString() : QString(), reply->problem);
        else if (reply && reply->verdict == core::ResultVerdict::Sampled)
            logFront(core::NodeResultState::Sampled, {}, QStringLiteral("another node re-executes it; paid once it agrees"));
        return resultAnswered();
    }
    case Pending::Purpose::CheckpointAnswer:
    case Pending::Purpose::Answer:
        return; // the referee has it (or knows there is none); the broker has the answer
    case Pending::Purpose::LogHead:
        return logHeadSeen(message.header, purpose.generation);
    case Pending::Purpose::Register:
    case Pending::Purpose::Get:
        ++counters.ignoredReplies;
        return;
    }
}

void NodeClient::Private::onError(const Message& message, const Pending* purpose)
{
    const QString code = message.header.value(fields::Code).toString();
    const QString text = message.header.value(fields::Message).toString();
    if (code == errors::NotRegistered) {
        // The broker does not know this session (it restarted): a new one on the same connection,
        // unless one is already on its way.
        if (session != Session::Registering)
            newSession();
        return;
    }
    if (!purpose) {
        qCWarning(lcNode).noquote() << "broker says" << code << text;
        // A stage's TENSOR the broker no longer relays: its pipeline ended.
        if (message.header.value(fields::Re).toInt() == int(Command::Tensor) && current && current->task.isStage())
            executor.stopStage(current->assignment, QStringLiteral("the broker relays no more: ") + text);
        return;
    }
    switch (purpose->purpose) {
    case Pending::Purpose::CheckpointAnswer:
    case Pending::Purpose::CheckpointState:
        qCWarning(lcNode).noquote() << "the referee refused a checkpoint:" << text;
        if (purpose->purpose == Pending::Purpose::CheckpointState && upload && upload->digest == purpose->digest) {
            upload.reset();
            pumpAsks();
            reportNext();
        }
        return;
    case Pending::Purpose::Commit:
    case Pending::Purpose::Weights:
    case Pending::Purpose::Result:
        qCWarning(lcNode).noquote() << "broker says" << code << text;
        if (report == Report::Idle)
            return;
        if (code == errors::Standby && handOnRefused()) // another broker of the network holds the job now
            return;
        logFront(code == errors::Stale ? core::NodeResultState::Stale : core::NodeResultState::Refused, {}, text);
        return resultAnswered(); // the broker will not count this result; the next one can go
    case Pending::Purpose::Get:
        qCWarning(lcNode).noquote() << "broker says" << code << text;
        if (const auto blob = swarm ? swarm->blobOfTorrent(purpose->digest) : std::nullopt) {
            // Only the swarm's way to the blob is gone: the blob itself comes by GET.
            if (downloads.contains(purpose->digest)) {
                downloads.remove(purpose->digest);
                swarmGaveUp(*blob);
                pumpDownloads();
            }
            return;
        }
        return giveUp(QStringLiteral("a blob the shard needs is not on the broker"));
    case Pending::Purpose::Register:
        qCWarning(lcNode).noquote() << "the broker refused this node:" << code << text;
        return;
    case Pending::Purpose::Answer:
        qCWarning(lcNode).noquote() << "the broker refused an answer:" << code << text;
        return;
    case Pending::Purpose::LogHead:
        logHeadAsked = false;
        // A log shorter than a head the network signed was rolled back (or forked).
        if (code == errors::Invalid && text.startsWith(fields::From + u':') && options.logWatch)
            counters.logBroken = !options.logWatch->shorter(network, options.broker.endpoint, text) || logBroken();
        else
            missedLogHead(code + u' ' + text);
        return;
    }
}

void NodeClient::Private::watchLog()
{
    if (!options.logWatch || session != Session::Registered || logHeadMs <= 0 || network.isEmpty() || now() < nextLogHeadAt
        || (logHeadAsked && now() - logHeadAskedAt < 3 * std::int64_t(logHeadMs)))
        return;
    if (logHeadAsked) // the last ask went unanswered
        missedLogHead(QStringLiteral("no answer"));
    const std::int64_t from = options.logWatch->keptSize(network);
    LogHeadRequest request;
    request.from = from;
    this->request(Command::LogHead, request.toHeader(), {}, { Pending::Purpose::LogHead, {}, {}, from });
    logHeadAsked = true;
    logHeadAskedAt = now();
    nextLogHeadAt = now() + logHeadMs;
}

void NodeClient::Private::missedLogHead(const QString& why)
{
    if (++logHeadMisses == MaxLogHeadMisses)
        qCWarning(lcNode).noquote() << "the broker at" << options.broker.endpoint << "did not show its ledger log's head"
                                    << MaxLogHeadMisses << "times in a row (" << why << "): no more work from it until it does";
}

void NodeClient::Private::logHeadSeen(const QJsonObject& reply, std::int64_t from)
{
    logHeadAsked = false;
    if (logUnseen())
        qCInfo(lcNode).noquote() << "the broker at" << options.broker.endpoint << "shows its ledger log's head again";
    logHeadMisses = 0;
    auto seen = options.logWatch->observe(network, options.broker.endpoint, reply, from);
    if (!seen)
        qCWarning(lcNode).noquote() << "cannot keep the ledger log's evidence:" << seen.error().toString();
    ++counters.logHeadsChecked;
    if (options.logWatch->broken(network))
        counters.logBroken = true;
}

void NodeClient::Private::onVerdict(const Message& message)
{
    auto verdict = VerdictMessage::fromHeader(message.header);
    if (!verdict)
        return;
    const QString paid = verdict->paid ? verdict->paid->toString() : QString();
    qCInfo(lcNode).noquote() << "result" << verdict->assignment << core::nameOf(verdict->state) << paid << verdict->detail;
    record(verdict->assignment, core::stateAfter(verdict->state), paid, verdict->detail);
    if (verdict->state == core::CheckVerdict::Slashed)
        ++counters.slashed;
}

void NodeClient::Private::receive()
{
    zmq::pollitem_t item { socket->handle(), 0, ZMQ_POLLIN, 0 };
    zmq::poll(&item, 1, std::chrono::milliseconds(0));
    if (!(item.revents & ZMQ_POLLIN))
        return;
    for (int i = 0; i < 100 && socket; ++i) {
        auto received = detail::receiveFrames(*socket);
        if (!received)
            break;
        lastReceived = now();
        lastHeard = lastReceived;
        auto message = decode(received->frames);
        if (message)
            handle(*message);
        else
            qCWarning(lcNode).noquote() << "ignored a message from the broker:" << message.error().message;
    }
}

// Paranoid Pirate: heartbeats out when nothing else went, a reconnect after liveness intervals of
// silence from the broker.
void NodeClient::Private::keepSession()
{
    if (!socket)
        return;
    if (now() - lastSent >= options.heartbeatMs)
        send(Command::Heartbeat, {});
    if (now() - lastReceived > std::int64_t(options.heartbeatMs) * options.liveness)
        disconnect();
}

void NodeClient::step(int maxWaitMs)
{
    d->relayTensors(); // before a finished stage's result: its partners wait for its last tensors
    d->collectFinished();
    d->handOff();
    d->takeHanded();
    d->collectRecreated();
    d->collectRebuilt();
    d->collectServed();
    d->pollSwarm();
    // The swarm's own thread wakes nobody here: while it fetches, this loop looks often.
    if (d->swarmFetching())
        maxWaitMs = std::min(maxWaitMs, 50);
    if (!d->socket) {
        if (d->now() < d->reconnectAt) {
            d->waitForWork(int(std::clamp<std::int64_t>(d->reconnectAt - d->now(), 0, maxWaitMs)));
            return;
        }
        d->connect();
    }
    d->reportNext();
    if (d->session == Session::Registered && !d->stopping && !d->current && !d->readySent && d->outbox.empty()
        && d->executor.idle() && d->now() >= d->diskFullUntil && !d->logBroken() && !d->logUnseen()) {
        d->send(Command::Ready, ReadyRequest {}.toHeader());
        d->readySent = true;
    }
    d->watchLog();
    d->keepSession();
    if (!d->socket)
        return;
    d->waitForWork(maxWaitMs);
    d->receive();
}

void NodeClient::wake()
{
    if (d->wake >= 0)
        signalEventFd(d->wake);
}

void NodeClient::run(const std::atomic<bool>& stop, const std::atomic<bool>& abandon)
{
    d->connect();
    bool stopping = false;
    std::int64_t stoppingSince = 0;
    for (;;) {
        if (stop.load() && !stopping) {
            stopping = true;
            stoppingSince = d->now();
            qCInfo(lcNode).noquote() << (d->current && d->current->started && !abandon.load()
                    ? "finishing the shard in training before stopping"
                    : "stopping");
        }
        d->relayTensors();
        d->collectFinished();
        const bool shardOut = d->current && d->current->started;
        // Stopping waits for the shard in training, then up to 10 s to report what finished.
        const bool reportTimedOut = !shardOut && d->now() - stoppingSince > StopReportMs;
        if (stopping && (abandon.load() || (!shardOut && d->outbox.empty()) || reportTimedOut)) {
            if (d->socket && d->session == Session::Registered)
                d->send(Command::Bye, {});
            if (d->swarm) // the last count, for the stop's summary
                d->counters.swarmBytesUploaded = d->swarm->uploadedBytes();
            return;
        }
        d->stopping = stopping;
        // Wakes on a message and on the executor's word (a finished shard is reported at once);
        // the wait bounds the timers (heartbeats, reconnects) and how soon `stop` is seen.
        step(std::clamp(d->options.heartbeatMs / 5, 10, 200));
    }
}

} // namespace tessera::net
