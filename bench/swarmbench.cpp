// The blob swarm's data plane (docs/SWARM.md, "Measures"): how many bytes leave the broker when N
// nodes fetch one round's blob at once, over the swarm (its seed's upload plus each node's GET of
// the torrent) against GET alone (N copies), with the broker's and the nodes' own swarm code
// (net/brokerswarm, net/nodeswarm), each node on its own loopback address. Nodes are handed the
// blob one after another, as TASKs go out, and each serves it once it has it, as a node does.
// Not a whole round: no training, no ZeroMQ; the broker's egress for the blob is what is measured.
//
// Usage: tessera-bench-swarm [--quick] [--plain | --direct N] [--seed-mbit N] [--uplink] [--nodes N] [--blob example|40m]

#include "record.h"

#include <core/blobstore.h>
#include <net/brokerswarm.h>
#include <net/nodeswarm.h>

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QThread>

#include <cstdio>

using namespace tessera;

namespace {

struct Outcome {
    double brokerRatio = 0; // the broker's bytes for the blob over its size
    double seconds = 0;
    int fallbacks = 0;
};

Outcome measure(int nodes, qsizetype size, std::int64_t seedBytesPerSecond, int directNodes)
{
    QTemporaryDir dir;
    auto store = core::BlobStore::open(dir.filePath(QStringLiteral("broker")));
    QByteArray bytes(size, Qt::Uninitialized);
    QRandomGenerator::global()->fillRange(reinterpret_cast<quint32*>(bytes.data()), size / 4);
    const auto blob = (*store)->put(bytes);
    net::BrokerSwarm::Options seedOptions;
    seedOptions.uploadBytesPerSecond = seedBytesPerSecond;
    seedOptions.directNodes = directNodes;
    auto broker = net::BrokerSwarm::start(seedOptions, **store);
    if (!store || !blob || !broker)
        qFatal("cannot start the broker's swarm");
    const QString seed = QStringLiteral("127.0.0.1:%1").arg((*broker)->port());

    std::vector<std::unique_ptr<net::NodeSwarm>> swarms;
    for (int i = 0; i < nodes; ++i) {
        net::NodeSwarm::Options options;
        options.address = QStringLiteral("127.0.1.%1").arg(i + 1);
        options.host = options.address; // all on loopback: each named by its own address
        options.stallMs = 60'000;
        auto swarm = net::NodeSwarm::start(options, dir.filePath(QStringLiteral("node%1").arg(i)));
        if (!swarm)
            qFatal("%s", qPrintable(swarm.error().toString()));
        (*broker)->joined(QString::number(i), (*swarm)->endpoint(), options.address);
        swarms.push_back(std::move(*swarm));
    }
    QElapsedTimer clock;
    clock.start();
    std::int64_t torrentBytes = 0;
    for (int i = 0; i < nodes; ++i) {
        const auto offers = (*broker)->offer(QString::number(i), { *blob }, 600'000);
        if (offers.size() != 1)
            qFatal("no offer");
        auto torrent = (*store)->read(offers[0].torrent); // what the node GETs
        torrentBytes += torrent->size();
        swarms[size_t(i)]->offered(offers[0]);
        if (!swarms[size_t(i)]->fetch(*blob, *torrent, seed, clock.elapsed()))
            qFatal("cannot fetch");
    }
    Outcome outcome;
    int done = 0;
    while (done < nodes) {
        (*broker)->tick();
        for (auto& swarm : swarms) {
            for (const auto& ended : swarm->poll(clock.elapsed())) {
                ++done;
                if (!ended.error.isEmpty()) {
                    ++outcome.fallbacks; // it would GET the blob: a whole copy from the broker
                    torrentBytes += size;
                    continue;
                }
                if (core::Digest::ofFile(ended.file).value_or(core::Digest {}) != *blob)
                    qFatal("a node got other bytes");
                // As a node's cache adopts it: renamed into the cache's folder, served from there.
                const QString cached = dir.filePath(QStringLiteral("cache%1/").arg(&swarm - swarms.data())) + blob->toHex();
                if (!QDir().mkpath(QFileInfo(cached).absolutePath()) || !QFile::rename(ended.file, cached))
                    qFatal("cannot keep the blob");
                swarm->serve(*blob, cached);
            }
        }
        QThread::msleep(20);
    }
    outcome.seconds = double(clock.elapsed()) / 1000.0;
    outcome.brokerRatio = double((*broker)->uploadedBytes() + torrentBytes) / double(size);
    return outcome;
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const bool quick = app.arguments().contains(QStringLiteral("--quick"));
    // The broker's default (Broker/SwarmDirectNodes: the first node dials the seed, the others take
    // the blob from it and each other), --direct N, or --plain: every node dials the seed.
    const bool plain = app.arguments().contains(QStringLiteral("--plain"));
    const auto directAt = app.arguments().indexOf(QStringLiteral("--direct"));
    const int directNodes = plain ? 0
        : directAt > 0            ? app.arguments().value(directAt + 1).toInt()
                                  : net::BrokerSwarm::Options {}.directNodes;
    const auto at = app.arguments().indexOf(QStringLiteral("--seed-mbit"));
    const std::int64_t seedRate = at > 0 ? app.arguments().value(at + 1).toLongLong() * 1'000'000 / 8 : 0;
    // The example job's round change (int8, 0.257 x 942 KB) and a ~40 M-parameter job's (0.257 x 160 MB).
    const QList<std::pair<const char*, qsizetype>> blobs { { "example", 242'430 }, { "40m", quick ? 8 << 20 : 41 << 20 } };
    // --uplink: the broker's seed capped at --seed-mbit (100 by default) and 8 nodes, beside the
    // time GET alone would take through the same uplink.
    const bool uplink = app.arguments().contains(QStringLiteral("--uplink"));
    const auto nodesAt = app.arguments().indexOf(QStringLiteral("--nodes"));
    const QList<int> counts = nodesAt > 0 ? QList<int> { app.arguments().value(nodesAt + 1).toInt() }
        : uplink                          ? QList<int> { 8 }
                                          : QList<int> { 4, 16, 32 };
    const auto blobAt = app.arguments().indexOf(QStringLiteral("--blob"));
    const QString only = blobAt > 0 ? app.arguments().value(blobAt + 1) : QString();
    const std::int64_t rate = uplink && seedRate == 0 ? 100'000'000 / 8 : seedRate;
    std::printf("%-8s %4s %10s %12s %12s %9s %9s\n", "blob", "N", "MB", "swarm", "GET only", "seconds", "fallbacks");
    for (const auto& [name, size] : blobs) {
        if ((uplink && QByteArray(name) != "40m") || (!only.isEmpty() && only != QLatin1String(name)))
            continue;
        for (const int nodes : counts) {
            const auto outcome = measure(nodes, size, rate, directNodes);
            std::printf("%-8s %4d %10.2f %11.2fx %11.0fx %9.2f %9d\n", name, nodes, double(size) / 1e6, outcome.brokerRatio,
                double(nodes), outcome.seconds, outcome.fallbacks);
            if (uplink) {
                const double getSeconds = double(nodes) * double(size) / double(rate);
                std::printf("uplink %.0f Mbit/s, %d nodes: the swarm took %.1f s, GET alone would take %.1f s: %.2fx faster\n",
                    double(rate) * 8 / 1e6, nodes, outcome.seconds, getSeconds, getSeconds / outcome.seconds);
                bench::record(plain ? "swarm.plain.uplink.seconds" : "swarm.uplink.seconds", outcome.seconds);
                bench::record(plain ? "swarm.plain.uplink.ratio" : "swarm.uplink.ratio", outcome.brokerRatio);
                bench::record("swarm.uplink.getSeconds", getSeconds);
                continue;
            }
            const QByteArray key = QByteArray(plain ? "swarm.plain." : "swarm.") + name + '.' + QByteArray::number(nodes);
            bench::record((key + ".ratio").constData(), outcome.brokerRatio);
            bench::record((key + ".seconds").constData(), outcome.seconds);
            std::fflush(stdout);
        }
    }
    return 0;
}
