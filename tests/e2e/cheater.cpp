// tessera-test-cheater: a node that cheats, for the end-to-end tests of verification. It is the
// real network client (net::NodeClient: register, commit, upload, result, checkpoints) around an
// executor that lies in one of seven ways:
//
//   random       random weights of the right shape, and a chain of made-up hashes
//   fewer-steps  trains half the steps and pads the chain (the first half is honest)
//   copy         hands in the result of the next shard (what another node computes) as its own
//   stale        relabels an honest result as one for the previous round
//   wrong-data   trains on the wrong samples (another data order)
//   late         honest up to the last interval, whose checkpoint and weights are another run's (a
//                dispute there needs the state at checkpoint n-2, which an honest node re-creates)
//   poisoned     an honest chain, but the weights (or int8 update) it reveals are another run's (a
//                dispute over the revealed result, settled from the last state)
//
// Usage: tessera-test-cheater --broker ADDRESS --data DIR --mode MODE

#include <compute/runtimeprofile.h>
#include <compute/shardrun.h>
#include <compute/weights.h>
#include <core/blobstore.h>
#include <core/signing.h>
#include <net/curvekeys.h>
#include <net/nodeclient.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QMutex>
#include <QRandomGenerator>

#include <atomic>
#include <csignal>

using namespace tessera;

namespace {

std::atomic<bool> g_stop { false };

class CheatingExecutor final : public net::ShardExecutor {
public:
    explicit CheatingExecutor(QString mode)
        : m_mode(std::move(mode))
    { }

    void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray& startWeights,
        const QHash<core::Digest, QString>& blobPaths) override
    {
        compute::ComputeEnvironment environment;
        environment.device = QStringLiteral("cpu");
        environment.blobPath = [blobPaths](const core::Digest& digest) -> std::optional<QString> {
            const auto it = blobPaths.constFind(digest);
            return it == blobPaths.constEnd() ? std::nullopt : std::optional<QString>(*it);
        };
        auto output = cheat(task, startWeights, environment);
        QMutexLocker lock(&m_mutex);
        m_finished.append({ tag, assignment, output.result, output.weights, output.keptState, {}, {} });
    }

    QList<Finished> takeFinished(const QString& tag) override
    {
        QMutexLocker lock(&m_mutex);
        QList<Finished> mine;
        for (auto it = m_finished.begin(); it != m_finished.end();) {
            if (it->tag == tag) {
                mine.append(*it);
                it = m_finished.erase(it);
            } else {
                ++it;
            }
        }
        return mine;
    }

    bool idle() const override
    {
        QMutexLocker lock(&m_mutex);
        return m_finished.isEmpty();
    }

private:
    compute::ShardOutput cheat(
        const core::ShardTask& task, const QByteArray& start, const compute::ComputeEnvironment& environment)
    {
        if (m_mode == u"random") {
            core::JobSpec spec;
            spec.model = task.model;
            spec.dataset = task.dataset;
            spec.training.seed = std::int64_t(QRandomGenerator::global()->bounded(1'000'000));
            auto weights = compute::initialWeights(spec, environment);
            auto honest = compute::runShard(task, start, environment); // for the shape of the result only
            if (!weights)
                return honest;
            honest.weights = weights->bytes;
            honest.result.finalHash = weights->canonicalHash;
            honest.result.weightsSha256 = core::Digest::ofBytes(weights->bytes);
            for (qsizetype i = 1; i < honest.result.checkpointHashes.size(); ++i)
                honest.result.checkpointHashes[i]
                    = core::Digest::ofBytes(QByteArray::number(QRandomGenerator::global()->generate64()));
            honest.keptState.clear();
            qInfo("cheat: random weights for round %lld shard %lld", qlonglong(task.round), qlonglong(task.shard));
            return honest;
        }
        if (m_mode == u"fewer-steps") {
            auto half = task;
            half.localSteps = std::max<std::int64_t>(
                task.checkpointInterval, task.localSteps / 2 / task.checkpointInterval * task.checkpointInterval);
            auto output = compute::runShard(half, start, environment);
            while (output.result.checkpointHashes.size() < task.checkpointCount())
                output.result.checkpointHashes.append(output.result.checkpointHashes.last());
            output.result.samplesProcessed = task.localSteps * task.batchSize;
            qInfo("cheat: %lld of %lld steps for round %lld shard %lld", qlonglong(half.localSteps), qlonglong(task.localSteps),
                qlonglong(task.round), qlonglong(task.shard));
            return output;
        }
        if (m_mode == u"copy") {
            // The next shard's slice of the data: what the node training that shard hands in.
            auto other = task;
            const auto length = task.sampleEnd - task.sampleBegin;
            other.shard = task.shard + 1;
            other.sampleBegin = task.sampleEnd;
            other.sampleEnd = task.sampleEnd + length;
            if (other.sampleEnd > 60'000) {
                other.sampleBegin = 0;
                other.sampleEnd = length;
                other.shard = 0;
            }
            auto output = compute::runShard(other, start, environment);
            output.result.shard = task.shard;
            qInfo("cheat: shard %lld's result for round %lld shard %lld", qlonglong(other.shard), qlonglong(task.round),
                qlonglong(task.shard));
            return output;
        }
        if (m_mode == u"wrong-data") {
            auto other = task;
            other.seed = task.seed + 1; // another permutation of the slice
            auto output = compute::runShard(other, start, environment);
            qInfo("cheat: wrong data order for round %lld shard %lld", qlonglong(task.round), qlonglong(task.shard));
            return output;
        }
        if (m_mode == u"late" || m_mode == u"poisoned") {
            auto output = compute::runShard(task, start, environment);
            auto other = task;
            other.seed = task.seed + 1;
            const auto lie = compute::runShard(other, start, environment);
            if (output.result.outcome != core::ShardResult::Outcome::Completed
                || lie.result.outcome != core::ShardResult::Outcome::Completed)
                return output;
            output.weights = lie.weights;
            output.result.finalHash = lie.result.finalHash;
            output.result.weightsSha256 = lie.result.weightsSha256;
            if (m_mode == u"late") {
                output.result.checkpointHashes.last() = lie.result.checkpointHashes.last();
                qInfo("cheat: the last interval of round %lld shard %lld is another run's", qlonglong(task.round),
                    qlonglong(task.shard));
            } else {
                qInfo("cheat: an honest chain with another run's result for round %lld shard %lld", qlonglong(task.round),
                    qlonglong(task.shard));
            }
            return output;
        }
        auto output = compute::runShard(task, start, environment);
        if (m_mode == u"stale" && task.round > 0) {
            output.result.round = task.round - 1;
            qInfo("cheat: round %lld's shard %lld labelled round %lld", qlonglong(task.round), qlonglong(task.shard),
                qlonglong(task.round - 1));
        }
        return output;
    }

    QString m_mode;
    mutable QMutex m_mutex;
    QList<Finished> m_finished;
};

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("broker"), QStringLiteral("broker address"), QStringLiteral("ADDRESS") });
    parser.addOption({ QStringLiteral("data"), QStringLiteral("data folder"), QStringLiteral("DIR") });
    parser.addOption({ QStringLiteral("mode"), QStringLiteral("how to cheat"), QStringLiteral("MODE") });
    parser.process(app);
    const QString mode = parser.value(QStringLiteral("mode"));
    const QStringList modes { QStringLiteral("random"), QStringLiteral("fewer-steps"), QStringLiteral("copy"),
        QStringLiteral("stale"), QStringLiteral("wrong-data"), QStringLiteral("late"), QStringLiteral("poisoned") };
    auto broker = net::BrokerAddress::parse(parser.value(QStringLiteral("broker")));
    const QString data = parser.value(QStringLiteral("data"));
    if (!modes.contains(mode) || !broker || data.isEmpty() || !QDir().mkpath(data)) {
        qCritical("usage: tessera-test-cheater --broker ADDRESS --data DIR --mode %s", qPrintable(modes.join(u'|')));
        return 2;
    }
    auto keys = net::CurveKeys::loadOrCreate(QDir(data).filePath(QStringLiteral("node.key")));
    auto signing = core::SigningKeys::loadOrCreate(QDir(data).filePath(QStringLiteral("node.sign")));
    auto cache = core::BlobStore::open(QDir(data).filePath(QStringLiteral("blobs")));
    if (!keys || !signing || !cache) {
        qCritical("cannot set up %s", qPrintable(data));
        return 1;
    }
    net::NodeClientOptions options;
    options.broker = *broker;
    options.signing = *signing;
    options.resultLogPath = QDir(data).filePath(QStringLiteral("node.sqlite"));
    options.node.nodeId = keys->publicKey;
    options.node.name = QStringLiteral("cheater-") + mode;
    options.node.softwareVersion = QStringLiteral("test");
    options.node.runtimeProfile = compute::currentRuntimeProfile(1).toString();
    options.node.signingKey = QString::fromLatin1(signing->publicKey.toBase64());
    options.node.maxThreads = 1;
    options.node.benchmarkSamplesPerSecond = 20000;

    std::signal(SIGTERM, [](int) { g_stop = true; });
    CheatingExecutor executor(mode);
    net::NodeClient client(options, executor, **cache, QStringLiteral("cheater"));
    std::atomic<bool> abandon { false };
    client.run(g_stop, abandon);
    return 0;
}
