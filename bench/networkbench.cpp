// make bench, network part. Each number is a ratio against a baseline measured in the same run:
//  - blob transfer (chunked GET with credit-based flow control, from the broker's blob store, with
//    the SHA-256 check) against raw ZeroMQ moving the same chunks from memory, plain and CURVE
//    (goal: at least 0.8 of each);
//  - bytes on the wire per round against exchanging gradients and weights at every step;
//  - broker CPU for 10,000 nodes heartbeating at 1 Hz, as a share of one core (goal: at most 30%).

#include "record.h"

#include <compute/engine/brokermath.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <core/broker/broker.h>
#include <core/decomposition.h>
#include <core/jobspec.h>
#include <core/shardresult.h>
#include <net/blobcoding.h>
#include <net/brokerclient.h>
#include <net/brokerserver.h>
#include <net/messages.h>
#include <net/protocol.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <thread>

using namespace tessera;

namespace {

constexpr std::int64_t BlobBytes = 64LL << 20;

int port()
{
    return 20000 + int(QRandomGenerator::global()->bounded(20000));
}

double seconds(const QElapsedTimer& timer)
{
    return double(timer.nsecsElapsed()) / 1e9;
}

// Raw ZeroMQ: a ROUTER answering each request with a 1 MiB chunk from memory; a DEALER pulling
// BlobBytes with MaxCreditChunks requests in flight, as the blob protocol does.
double rawRate(const std::optional<net::CurveKeys>& keys)
{
    zmq::context_t context;
    const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port());
    std::atomic<bool> stop { false };
    const std::string chunk(std::size_t(net::MaxChunkBytes), 'x');
    zmq::socket_t server(context, zmq::socket_type::router);
    if (keys) {
        server.set(zmq::sockopt::curve_server, 1);
        server.set(zmq::sockopt::curve_secretkey, keys->secretKey.toStdString());
    }
    server.bind(endpoint);
    std::thread serving([&] {
        while (!stop) {
            zmq::pollitem_t item { server.handle(), 0, ZMQ_POLLIN, 0 };
            zmq::poll(&item, 1, std::chrono::milliseconds(50));
            std::vector<zmq::message_t> request;
            while (zmq::recv_multipart(server, std::back_inserter(request), zmq::recv_flags::dontwait)) {
                server.send(request[0], zmq::send_flags::sndmore);
                server.send(zmq::buffer(chunk), zmq::send_flags::none);
                request.clear();
            }
        }
    });
    zmq::socket_t client(context, zmq::socket_type::dealer);
    if (keys) {
        const auto own = net::CurveKeys::generate();
        client.set(zmq::sockopt::curve_serverkey, keys->publicKey.toStdString());
        client.set(zmq::sockopt::curve_publickey, own.publicKey.toStdString());
        client.set(zmq::sockopt::curve_secretkey, own.secretKey.toStdString());
    }
    client.connect(endpoint);
    QElapsedTimer timer;
    timer.start();
    std::int64_t requested = 0, received = 0;
    int inFlight = 0;
    while (received < BlobBytes) {
        while (inFlight < net::MaxCreditChunks && requested < BlobBytes) {
            client.send(zmq::str_buffer("get"), zmq::send_flags::none);
            requested += net::MaxChunkBytes;
            ++inFlight;
        }
        zmq::message_t reply;
        (void)client.recv(reply);
        received += std::int64_t(reply.size());
        --inFlight;
    }
    const double rate = double(BlobBytes) / seconds(timer);
    stop = true;
    serving.join();
    return rate;
}

struct Server {
    QTemporaryDir dir;
    std::unique_ptr<core::BlobStore> blobs
        = std::move(core::broker::Broker::openBlobs(dir.filePath(QStringLiteral("broker")))).value();
    compute::BrokerMath math { {}, *blobs };
    core::SystemClock clock;
    std::unique_ptr<core::broker::Broker> broker;
    std::unique_ptr<net::BrokerServer> server;
    std::atomic<bool> stop { false };
    std::thread thread;
    double cpuSeconds = 0.0;

    // database: Broker/Database (empty: SQLite in the folder).
    explicit Server(std::optional<net::CurveKeys> keys, const QString& database = {})
    {
        core::broker::Broker::Options brokerOptions;
        brokerOptions.database = database;
        broker = std::move(core::broker::Broker::open(dir.filePath(QStringLiteral("broker")), *blobs, math, clock, brokerOptions))
                     .value();
        net::BrokerServerOptions options;
        options.keys = std::move(keys);
        options.liveness = 30; // a loaded simulator may be late with heartbeats; keep the nodes
        // A random port, another where it is taken (a run before left thousands of connections).
        for (int attempt = 0; attempt < 20; ++attempt) {
            options.bind = QStringLiteral("tcp://127.0.0.1:%1").arg(port());
            server = std::make_unique<net::BrokerServer>(*broker, options, clock);
            if (server->bind())
                return;
        }
        qFatal("cannot bind");
    }
    void start()
    {
        thread = std::thread([this] {
            rusage before {}, after {};
            getrusage(RUSAGE_THREAD, &before);
            server->run(stop);
            getrusage(RUSAGE_THREAD, &after);
            auto cpu = [](const rusage& u) {
                return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
            };
            cpuSeconds = cpu(after) - cpu(before);
        });
    }
    void finish()
    {
        stop = true;
        thread.join();
    }
};

double blobRate(const std::optional<net::CurveKeys>& keys)
{
    Server server(keys);
    QByteArray blob(BlobBytes, Qt::Uninitialized);
    for (qsizetype i = 0; i < blob.size(); i += 4096)
        blob[i] = char(QRandomGenerator::global()->generate());
    const auto digest = *server.broker->blobs().put(blob);
    // The downloader is a node given work that needs the blob (under CURVE, only such a reader may GET it).
    const auto reader = net::CurveKeys::generate();
    if (auto granted = server.broker->allowRead(digest, reader.publicKey); !granted)
        qFatal("%s", qPrintable(granted.error().toString()));
    server.start();
    auto address = *net::BrokerAddress::parse(server.server->address());
    net::BrokerClient client(address, reader);
    QElapsedTimer timer;
    timer.start();
    rusage before {}, after {};
    getrusage(RUSAGE_THREAD, &before);
    auto bytes = client.download(digest);
    getrusage(RUSAGE_THREAD, &after);
    const double rate = double(BlobBytes) / seconds(timer);
    server.finish();
    auto cpu = [](const rusage& u) {
        return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
    };
    std::printf("    %s: the client's thread used %.0f ms of CPU, the broker's %.0f ms, in %.0f ms\n",
        keys ? "CURVE" : "plaintext", (cpu(after) - cpu(before)) * 1e3, server.cpuSeconds * 1e3, double(BlobBytes) / rate * 1e3);
    if (!bytes)
        qFatal("%s", qPrintable(bytes.error().toString()));
    return rate;
}

void bytesPerRound()
{
    QFile file(QStringLiteral(TESSERA_SOURCE_DIR "/examples/jobs/fashion-mnist-mlp.json"));
    if (!file.open(QIODevice::ReadOnly))
        qFatal("no example job");
    const auto spec = *core::JobSpec::fromJsonText(file.readAll());
    compute::BrokerMath math({});
    const auto weights = *math.initialWeights(spec);
    const std::int64_t w = weights.bytes.size();
    std::int64_t parameters = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;

    // One shard's messages, encoded for real: TASK, the GETs and CHUNKs of the start weights, the
    // PUTs of what the shard reveals and their OKs, and the RESULT. What it reveals is a real
    // shard's: trained, then its int8 update (the default) or its float32 weights.
    const auto task = core::decomposeRound(QStringLiteral("0123456789abcdef"), spec, 0, weights.canonicalHash).first();
    const auto trained = compute::runShard(task, weights.bytes, {});
    if (trained.result.outcome != core::ShardResult::Outcome::Completed)
        qFatal("the example shard failed: %s", qPrintable(trained.result.failure));
    const std::int64_t u = trained.weights.size();
    // The round's change that nodes holding the previous round's weights download instead (int8).
    const auto aggregated = compute::aggregate(spec.aggregation, weights.bytes, { { 0, 1, trained.weights, {} } }, {});
    if (!aggregated || aggregated->change.isEmpty())
        qFatal("the example round has no int8 change");
    const std::int64_t c = aggregated->change.size();
    const auto& result = trained.result;
    auto size = [](const net::Message& m) {
        std::int64_t total = 0;
        for (const auto& frame : net::encode(m))
            total += frame.size();
        return total;
    };
    // A blob's ranges as they go on the wire: plain, or each range zstd-coded where that makes it
    // smaller, as Tessera's node and broker send them (docs/PROTOCOL.md, "Encoded ranges").
    auto transfer = [&](const QByteArray& blob, bool coded, net::Command request, net::Command reply) {
        std::int64_t total = 0;
        for (qsizetype offset = 0; offset < blob.size(); offset += net::MaxChunkBytes) {
            const QByteArray range = blob.mid(offset, net::MaxChunkBytes);
            net::BlobRange<net::Command::Put> header { weights.canonicalHash, offset, blob.size() };
            const QByteArray payload = coded ? net::codedPayload(header, range) : range;
            const auto asked = request == net::Command::Get
                ? net::GetRequest { weights.canonicalHash, offset, range.size(), coded ? net::ZstdEncoding : QString() }
                      .toHeader()
                : header.toHeader();
            const auto answer = reply == net::Command::Ok ? net::okMessage(1, { { QStringLiteral("received"), 1 } })
                                                          : net::Message { reply, header.toHeader(), {} };
            total += size({ request, asked, {} }) + size(answer) + payload.size();
        }
        return total;
    };
    auto perShard = [&](const QByteArray& uploaded, const QByteArray& downloaded, bool coded) {
        return size({ net::Command::Task,
                   QJsonObject { { QStringLiteral("assignment"), QStringLiteral("0123456789abcdef") },
                       { QStringLiteral("task"), task.toJson() },
                       { QStringLiteral("startWeightsBlob"), weights.canonicalHash.toHex() },
                       { QStringLiteral("deadlineMs"), 30000 } },
                   {} })
            + transfer(downloaded, coded, net::Command::Get, net::Command::Chunk)
            + transfer(uploaded, coded, net::Command::Put, net::Command::Ok)
            + size({ net::Command::Result,
                QJsonObject { { QStringLiteral("assignment"), QStringLiteral("0123456789abcdef") },
                    { QStringLiteral("result"), result.toJson() } },
                {} })
            + size(net::okMessage(1, { { QStringLiteral("verdict"), QStringLiteral("accepted") } }));
    };
    const auto& update = trained.weights;
    const auto& change = aggregated->change;
    // A TASK of round 1 on also names the change and its base: two more digests.
    const std::int64_t changeFields = 2 * (64 + 20);
    const std::int64_t perRound = (perShard(update, change, true) + changeFields) * spec.training.shardsPerRound;
    const std::int64_t perRoundPlain = (perShard(update, change, false) + changeFields) * spec.training.shardsPerRound;
    const std::int64_t perRoundUploads = perShard(update, weights.bytes, false) * spec.training.shardsPerRound;
    const std::int64_t perRoundFloat = perShard(weights.bytes, weights.bytes, false) * spec.training.shardsPerRound;
    auto codedSize = [](const QByteArray& blob) {
        std::int64_t total = 0;
        for (qsizetype offset = 0; offset < blob.size(); offset += net::MaxChunkBytes) {
            const QByteArray range = blob.mid(offset, net::MaxChunkBytes);
            const QByteArray frame = net::encodeRange(range);
            total += frame.isEmpty() ? range.size() : frame.size();
        }
        return total;
    };
    const std::int64_t codedUpdate = codedSize(update);
    const std::int64_t codedChange = codedSize(change);
    // Data-parallel SGD that synchronises every step: each worker sends its gradient and receives
    // the new weights, as float32, at each of the round's steps.
    const std::int64_t perStep = 2 * 4 * parameters * spec.training.localSteps * spec.training.shardsPerRound;
    std::printf("Bytes on the wire per round (%s: %lld shards x %lld steps, weights %lld bytes, int8 update %lld bytes "
                "(zstd %lld), round's int8 change %lld bytes (zstd %lld))\n",
        qPrintable(spec.name), static_cast<long long>(spec.training.shardsPerRound),
        static_cast<long long>(spec.training.localSteps), static_cast<long long>(w), static_cast<long long>(u),
        static_cast<long long>(codedUpdate), static_cast<long long>(c), static_cast<long long>(codedChange));
    std::printf("  Tessera %lld bytes (plain int8: %lld; float32 download: %lld; float32 both ways: %lld)   per-step exchange "
                "%lld bytes   %.0fx fewer (%.0fx; %.0fx; %.0fx)\n",
        static_cast<long long>(perRound), static_cast<long long>(perRoundPlain), static_cast<long long>(perRoundUploads),
        static_cast<long long>(perRoundFloat), static_cast<long long>(perStep), double(perStep) / double(perRound),
        double(perStep) / double(perRoundPlain), double(perStep) / double(perRoundUploads),
        double(perStep) / double(perRoundFloat));
    bench::record("network.bytesPerRoundPlain", double(perRoundPlain));
    bench::record("network.codedUpdateBytes", double(codedUpdate));
    bench::record("network.codedChangeBytes", double(codedChange));
    bench::record("network.bytesPerRound", double(perRound));
    bench::record("network.bytesPerRoundFloatDownload", double(perRoundUploads));
    bench::record("network.changeBytes", double(c));
    bench::record("network.bytesPerRoundFloat", double(perRoundFloat));
    bench::record("network.bytesPerStepExchange", double(perStep));
    bench::record("network.weightsBytes", double(w));
    bench::record("network.updateBytes", double(u));
}

// A simulator process: `nodes` DEALER sockets that register, then each send a heartbeat a second
// for windowSeconds. Several of them share the load (one process cannot hold 10,000 connections
// under a 20,000 file descriptor limit: each socket also needs a wake-up descriptor).
int simulate(int nodes, const std::string& endpoint, int windowSeconds, int first)
{
    rlimit limit {};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    zmq::context_t context(1);
    context.set(zmq::ctxopt::max_sockets, nodes + 100);
    std::vector<zmq::socket_t> sockets;
    sockets.reserve(std::size_t(nodes));
    auto sendFrames = [](zmq::socket_t& socket, const QList<QByteArray>& frames) {
        for (qsizetype f = 0; f < frames.size(); ++f)
            (void)socket.send(zmq::buffer(frames[f].constData(), std::size_t(frames[f].size())),
                f + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::dontwait);
    };
    for (int i = 0; i < nodes; ++i) {
        sockets.emplace_back(context, zmq::socket_type::dealer);
        sockets.back().set(zmq::sockopt::linger, 0);
        sockets.back().set(zmq::sockopt::rcvhwm, 0);
        sockets.back().connect(endpoint);
        core::NodeInfo node;
        node.nodeId = QStringLiteral("sim-%1").arg(first + i);
        node.softwareVersion = QStringLiteral("bench");
        node.runtimeProfile = QStringLiteral("p");
        node.maxThreads = 1;
        sendFrames(sockets.back(),
            net::encode({ net::Command::Register, QJsonObject { { QStringLiteral("node"), node.toJson() } }, {} }));
    }
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const auto heartbeat = net::encode({ net::Command::Heartbeat, {}, {} });
    QElapsedTimer window;
    window.start();
    while (seconds(window) < windowSeconds) {
        QElapsedTimer second;
        second.start();
        for (auto& socket : sockets)
            sendFrames(socket, heartbeat);
        const auto rest = 1000 - second.elapsed();
        if (rest > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(rest));
    }
    return 0;
}

// The broker thread's share of a core with `nodes` heartbeating nodes. On `database` (empty:
// SQLite); `second`: the second broker on that database, while another does the network's chores
// (several brokers: every node registers with each). Records under `label`.
void heartbeatLoad(int nodes, int windowSeconds, const QString& database = {}, bool second = false, const char* label = "load")
{
    rlimit limit {};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    if (limit.rlim_cur < rlim_t(nodes + 100)) {
        std::printf("Broker load: skipped, the file descriptor limit (%llu) is too low for %d nodes\n",
            static_cast<unsigned long long>(limit.rlim_cur), nodes);
        return;
    }
    std::optional<Server> first; // the broker with the network's chores, beside the one measured
    if (second) {
        first.emplace(std::nullopt, database);
        // The broker of the run before held the chores: its lease lapses first.
        for (int wait = 0; wait < 40 && !first->broker->doesChores(); ++wait) {
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
            first->broker->tick();
        }
    }
    Server server(std::nullopt, database);
    if (second && server.broker->doesChores())
        qFatal("the second broker took the network's chores");
    server.start();
    constexpr int Simulators = 2;
    std::vector<std::unique_ptr<QProcess>> simulators;
    for (int i = 0; i < Simulators; ++i) {
        auto process = std::make_unique<QProcess>();
        process->setProcessChannelMode(QProcess::ForwardedErrorChannel);
        process->start(QCoreApplication::applicationFilePath(),
            { QStringLiteral("--simulate"), QString::number(nodes / Simulators), server.server->address(),
                QString::number(windowSeconds + 2), QString::number(i * (nodes / Simulators)) });
        simulators.push_back(std::move(process));
    }
    std::this_thread::sleep_for(std::chrono::seconds(4)); // every node has registered
    // Measure the broker's thread over the heartbeat window only (its CPU time is read when run()
    // returns), so restart it.
    server.finish();
    const double registrationCpu = server.cpuSeconds;
    server.stop = false;
    const auto before = server.server->counters().messages;
    server.start();
    QElapsedTimer window;
    window.start();
    std::this_thread::sleep_for(std::chrono::seconds(windowSeconds));
    const double wall = seconds(window);
    server.finish();
    for (auto& process : simulators)
        process->waitForFinished(60'000);
    const double share = server.cpuSeconds / wall;
    const auto received = server.server->counters().messages - before;
    std::printf("Broker load (%s): %d nodes heartbeating at 1 Hz (and the broker heartbeating back), over %.0f s: %lld "
                "messages in\n",
        database.isEmpty() ? "SQLite"
            : second       ? "PostgreSQL, the second broker"
                           : "PostgreSQL, the first broker",
        nodes, wall, static_cast<long long>(received));
    std::printf(
        "  broker thread CPU %.2f s = %.1f%% of one core   (goal <= 30%%, %s; registering the %d nodes took %.2f s of CPU)\n",
        server.cpuSeconds, share * 100.0, share <= 0.30 ? "met" : "NOT met", nodes, registrationCpu);
    const std::string prefix(label);
    bench::record((prefix + ".nodes").c_str(), nodes);
    bench::record((prefix + ".messages").c_str(), double(received));
    bench::record((prefix + ".cpuSeconds").c_str(), server.cpuSeconds);
    bench::record((prefix + ".share").c_str(), share);
}

// The same on PostgreSQL where bench/run.sh started a server (TESSERA_BENCH_POSTGRES): the active
// broker and a second one beside it, each with every node (issue 38's goal: at most 30% of a core
// each).
void heartbeatLoadOnPostgres(int nodes, int windowSeconds)
{
    const QString database = qEnvironmentVariable("TESSERA_BENCH_POSTGRES");
    if (database.isEmpty()) {
        std::printf("Broker load on PostgreSQL: not measured (bench/run.sh starts a server where postgresql-15 is installed)\n");
        return;
    }
    heartbeatLoad(nodes, windowSeconds, database, false, "load.postgres");
    heartbeatLoad(nodes, windowSeconds, database, true, "load.second");
}

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    const auto arguments = app.arguments();
    if (arguments.size() == 6 && arguments[1] == u"--simulate")
        return simulate(arguments[2].toInt(), arguments[3].toStdString(), arguments[4].toInt(), arguments[5].toInt());
    if (arguments.contains(u"--load")) { // the heartbeat load alone
        heartbeatLoad(10000, 10);
        heartbeatLoadOnPostgres(10000, 10);
        return 0;
    }
    if (arguments.contains(u"--bytes")) { // the bytes per round alone
        bytesPerRound();
        return 0;
    }
    const auto keys = net::CurveKeys::generate();
    std::printf("Blob transfer, %lld MiB over TCP on 127.0.0.1, 1 MiB chunks, %d in flight\n",
        static_cast<long long>(BlobBytes >> 20), net::MaxCreditChunks);
    // What a receiver that checks every byte can reach at best: SHA-256 of the same bytes in memory.
    const double sha = [] {
        QByteArray blob(BlobBytes, 'x');
        QElapsedTimer timer;
        timer.start();
        (void)core::Digest::ofBytes(blob);
        return double(BlobBytes) / seconds(timer);
    }();
    std::printf("  SHA-256 of the same bytes in memory: %.0f MB/s\n", sha / 1e6);
    bench::record("blob.sha256", sha);
    for (const bool curve : { false, true }) {
        const double raw = rawRate(curve ? std::optional(keys) : std::nullopt);
        const double blob = blobRate(curve ? std::optional(keys) : std::nullopt);
        std::printf("  %-9s blob GET %7.0f MB/s   raw ZeroMQ %7.0f MB/s   ratio %.3f (goal >= 0.8)\n",
            curve ? "CURVE" : "plaintext", blob / 1e6, raw / 1e6, blob / raw);
        bench::record(curve ? "blob.curve.blob" : "blob.plain.blob", blob);
        bench::record(curve ? "blob.curve.raw" : "blob.plain.raw", raw);
    }
    if (arguments.contains(u"--blobs")) // the blob transfer alone, for working on it
        return 0;
    bytesPerRound();
    heartbeatLoad(10000, 10);
    heartbeatLoadOnPostgres(10000, 10);
    return 0;
}
