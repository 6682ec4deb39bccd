// tessera-test-cheater: a node that cheats, for the end-to-end tests of verification. It is the
// real network client (net::NodeClient: register, commit, upload, result, checkpoints) around an
// executor that lies in one of nine ways:
//
//   random       weights (or an int8 update) of the right form that no honest run gives, and a
//                chain of made-up hashes
//   fewer-steps  trains half the steps and pads the chain (the first half is honest)
//   copy         hands in the result of the next shard (what another node computes) as its own
//   stale        relabels an honest result as one for the previous round
//   wrong-data   trains on the wrong samples (another data order)
//   late         honest up to the last interval, whose checkpoint and weights are another run's (a
//                dispute there needs the state at checkpoint n-2, which an honest node re-creates)
//   poisoned     an honest chain, but the weights (or int8 update) it reveals are another run's (a
//                dispute over the revealed result, settled from the last state)
//   wrong-lr     trains with twice the learning rate (its forward and backward are honest; every
//                update differs)
//   collude      trains with 1.5 times the learning rate: two colluders (--name tells them apart)
//                compute the same wrong result, so each vouches for the other's when drawn to check it
//   wrong-answer hosts served models (docs/PROTOCOL.md, "Serving") and signs answers whose last
//                token is changed (its streamed tokens are honest); its shards are honest
//   stage-lr     takes stage tasks of pipeline jobs (docs/PROTOCOL.md, "Stage tasks") and trains
//                its stage with twice the learning rate, trading real tensors with its partners
//                (which compute honestly on what it sends); its re-executions are honest
//
// The wrong-data and wrong-lr cheaters believe their lie: asked in a dispute, they answer from the
// run that gave their result (a state, or a portable job's trace and operands), so a portable
// dispute is narrowed to the instruction where they part from the job (the step's batch, the
// first update). The others have nothing consistent to show and answer that they have nothing.
//
// Usage: tessera-test-cheater --broker ADDRESS --data DIR --mode MODE [--name NAME]

#include <app/common/replicahost.h>
#include <compute/engine/runtimeprofile.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <core/blobstore.h>
#include <core/capabilities.h>
#include <core/inference/outputs.h>
#include <core/readfile.h>
#include <core/signing.h>
#include <net/curvekeys.h>
#include <net/nodeclient.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMutex>
#include <QRandomGenerator>
#include <QSet>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

using namespace tessera;

namespace {

std::atomic<bool> g_stop { false };

class CheatingExecutor final : public net::ShardExecutor {
public:
    explicit CheatingExecutor(QString mode)
        : m_mode(std::move(mode))
    {
        if (m_mode == u"wrong-answer")
            m_replicas = std::make_unique<app::ReplicaHost>(
                [](const core::ShardTask& task, const QByteArray& weights, const std::function<bool()>&) {
                    return compute::inThreadCompute()->host(task, weights, {});
                },
                [this](Served served) {
                    if (served.kind == Served::Kind::Answered && served.error.isEmpty())
                        served.line = wrongAnswer(served.line);
                    const QString tag = served.tag;
                    {
                        QMutexLocker lock(&m_mutex);
                        m_served.append(std::move(served));
                    }
                    notify(tag);
                });
    }
    ~CheatingExecutor() override
    {
        {
            std::lock_guard lock(m_stageMutex);
            m_closing = true;
        }
        m_arrived.notify_all();
        for (auto& thread : m_stageThreads)
            thread.join();
        m_replicas.reset();
    }

    // --- stage-lr: a live stage trained with twice the learning rate ------------------------------
    bool runsStages() const override { return m_mode == u"stage-lr"; }
    QList<Tensor> takeTensors(const QString& tag) override
    {
        std::lock_guard lock(m_stageMutex);
        return takeTagged(m_outbox, tag);
    }
    void deliverTensor(const Tensor& tensor) override
    {
        {
            std::lock_guard lock(m_stageMutex);
            m_inbox[{ tensor.assignment, tensor.peer, int(tensor.kind), tensor.step, tensor.micro }] = tensor.bytes;
        }
        m_arrived.notify_all();
    }
    void stopStage(const QString& assignment, const QString&) override
    {
        {
            std::lock_guard lock(m_stageMutex);
            m_stopped.insert(assignment);
        }
        m_arrived.notify_all();
    }

    class QueueLink final : public compute::StageLink {
    public:
        QueueLink(CheatingExecutor& executor, QString tag, QString assignment)
            : m_executor(executor)
            , m_tag(std::move(tag))
            , m_assignment(std::move(assignment))
        { }
        core::Status send(std::int64_t to, Kind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes) override
        {
            {
                std::lock_guard lock(m_executor.m_stageMutex);
                m_executor.m_outbox.append({ m_tag, m_assignment, to, kind, step, micro, bytes });
            }
            m_executor.notify(m_tag);
            return {};
        }
        core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) override
        {
            std::unique_lock lock(m_executor.m_stageMutex);
            const Key key { m_assignment, from, int(kind), step, micro };
            const bool came = m_executor.m_arrived.wait_for(lock, std::chrono::minutes(10), [&] {
                return m_executor.m_closing || m_executor.m_stopped.contains(m_assignment) || m_executor.m_inbox.count(key);
            });
            const auto found = m_executor.m_inbox.find(key);
            if (!came || found == m_executor.m_inbox.end())
                return core::Error { QStringLiteral("link"), QStringLiteral("the pipeline stopped") };
            auto bytes = std::move(found->second);
            m_executor.m_inbox.erase(found);
            return bytes;
        }

    private:
        CheatingExecutor& m_executor;
        QString m_tag;
        QString m_assignment;
    };

    void startStage(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray& startWeights,
        const compute::ComputeEnvironment& environment)
    {
        std::lock_guard lock(m_stageMutex);
        m_stageThreads.emplace_back([this, tag, assignment, task, startWeights, environment] {
            auto believed = task;
            believed.optimizer.lr = task.optimizer.lr * 2.0;
            QueueLink link(*this, tag, assignment);
            compute::ShardOutput output;
            auto run = compute::ShardRun::start(believed, startWeights, environment);
            core::Status status = run ? core::Status {} : core::Status(run.error());
            if (run) {
                (*run)->setStageLink(&link);
                while (status && !(*run)->finished())
                    status = (*run)->step();
            }
            if (status) {
                output = (*run)->finish();
                qInfo("cheat: stage %lld of round %lld shard %lld trained with twice the learning rate", qlonglong(task.stage),
                    qlonglong(task.round), qlonglong(task.shard));
            } else {
                output.result = core::ShardResult::failedOf(task, status.error().toString());
                output.result.outcome = core::ShardResult::Outcome::Returned;
            }
            {
                QMutexLocker finished(&m_mutex);
                m_finished.append({ tag, assignment, output.result, output.weights, output.keptState, {}, {} });
            }
            notify(tag);
        });
    }

    bool canHost() const override { return m_replicas != nullptr; }
    void host(const QString& tag, const QString& assignment, const core::ShardTask& replica, const QString& weightsPath) override
    {
        m_replicas->host(tag, assignment, replica, weightsPath);
    }
    void ask(
        const QString& tag, const QString& assignment, const QString& ticket, const core::inference::Question& question) override
    {
        m_replicas->ask(tag, assignment, ticket, question);
    }
    void unhost(const QString& tag, const QString& assignment) override
    {
        if (m_replicas)
            m_replicas->unhost(tag, assignment);
    }
    QList<Served> takeServed(const QString& tag) override
    {
        QMutexLocker lock(&m_mutex);
        return takeTagged(m_served, tag);
    }

    // A served answer with its last token changed (one added to an empty one): well-formed, wrong.
    static QByteArray wrongAnswer(const QByteArray& line)
    {
        auto completion = core::inference::completionOf(line);
        if (!completion)
            return line;
        if (completion->tokens.isEmpty())
            completion->tokens.append('A');
        else
            completion->tokens.last() = (completion->tokens.last() + 1) % 128;
        qInfo("cheat: a served answer's last token changed");
        return core::inference::generateLine(0, completion->tokens, completion->stopped);
    }

    void start(const QString& tag, const QString& assignment, const core::ShardTask& task, const QByteArray& givenWeights,
        const QString& startWeightsFile, const QHash<core::Digest, QString>& blobPaths, std::int64_t) override
    {
        const QByteArray startWeights = givenWeights.isEmpty() && !startWeightsFile.isEmpty()
            ? core::readFile(startWeightsFile).value_or(QByteArray())
            : givenWeights;
        if (task.isLiveStage())
            return startStage(tag, assignment, task, startWeights, environmentOf(blobPaths));
        auto output = cheat(task, startWeights, environmentOf(blobPaths));
        QMutexLocker lock(&m_mutex);
        m_finished.append({ tag, assignment, output.result, output.weights, output.keptState, {}, {} });
    }

    QList<Finished> takeFinished(const QString& tag) override
    {
        QMutexLocker lock(&m_mutex);
        return takeTagged(m_finished, tag);
    }

    bool idle() const override
    {
        QMutexLocker lock(&m_mutex);
        return m_finished.isEmpty();
    }

    bool recreate(const QString& tag, const QString& key, const core::ShardTask& task, const core::DisputeQuestion& question,
        const QString& startWeightsPath, const QString& keptStatePath, const QHash<core::Digest, QString>& blobPaths) override
    {
        const auto believed = believedTask(task);
        if (!believed)
            return false;
        auto read
            = [](const QString& path) { return path.isEmpty() ? core::Result<QByteArray>(QByteArray()) : core::readFile(path); };
        const auto start = read(startWeightsPath), kept = read(keptStatePath);
        Recreated made { tag, key, {}, {}, {} };
        if (!start || !kept) {
            made.error = QStringLiteral("cannot read its files");
        } else {
            const auto environment = environmentOf(blobPaths);
            using Want = core::DisputeQuestion::Want;
            auto bytes = question.want == Want::Trace
                ? compute::traceInterval(*believed, *start, *kept, question.checkpoint, environment)
                : question.want == Want::Operands
                ? compute::operandsOf(*believed, *start, *kept, question.step, question.instruction, environment)
                : compute::recreateState(*believed, *start, *kept, question.checkpoint, environment);
            if (bytes) {
                made.state = *bytes;
                made.digest = core::Digest::ofBytes(made.state);
            } else {
                made.error = bytes.error().toString();
            }
        }
        qInfo("cheat: answers %s from its own run", qPrintable(question.describe()));
        QMutexLocker lock(&m_mutex);
        m_recreated.append(made);
        return true;
    }

    QList<Recreated> takeRecreated(const QString& tag) override
    {
        QMutexLocker lock(&m_mutex);
        return takeTagged(m_recreated, tag);
    }

private:
    static compute::ComputeEnvironment environmentOf(const QHash<core::Digest, QString>& blobPaths)
    {
        compute::ComputeEnvironment environment;
        environment.device = QStringLiteral("cpu");
        environment.blobPath = [blobPaths](const core::Digest& digest) -> std::optional<QString> {
            const auto it = blobPaths.constFind(digest);
            return it == blobPaths.constEnd() ? std::nullopt : std::optional<QString>(*it);
        };
        return environment;
    }

    // The task this cheater trains instead of the one it was given, where it trains a whole other one.
    std::optional<core::ShardTask> believedTask(const core::ShardTask& task) const
    {
        auto other = task;
        if (m_mode == u"wrong-data") {
            other.seed = task.seed + 1; // another permutation of the slice
            return other;
        }
        if (m_mode == u"wrong-lr" || m_mode == u"collude") {
            other.optimizer.lr = task.optimizer.lr * (m_mode == u"collude" ? 1.5 : 2.0);
            return other;
        }
        return std::nullopt;
    }

    // One line made wrong but well-formed: a classify line with its two likeliest classes'
    // probabilities swapped (so its class is the runner-up), a score line's loss raised by 0.5, a
    // generate line's first token changed.
    static QByteArray wrongLine(const QByteArray& line)
    {
        const auto object = QJsonDocument::fromJson(line).object();
        const auto index = object.value(QStringLiteral("index")).toInteger();
        if (object.contains(QStringLiteral("probabilities"))) {
            std::vector<float> p;
            for (const auto& value : object.value(QStringLiteral("probabilities")).toArray())
                p.push_back(std::strtof(value.toVariant().toString().toLatin1().constData(), nullptr));
            if (p.size() < 2)
                return line;
            std::vector<std::size_t> order(p.size());
            std::iota(order.begin(), order.end(), std::size_t(0));
            std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
            std::swap(p[order[0]], p[order[1]]);
            const auto label = object.contains(QStringLiteral("label"))
                ? std::optional<std::int64_t>(object.value(QStringLiteral("label")).toInteger())
                : std::nullopt;
            return core::inference::classifyLine(index, std::int64_t(order[1]), p.data(), std::int64_t(p.size()), label);
        }
        if (object.contains(QStringLiteral("loss")))
            return core::inference::scoreLine(index, float(object.value(QStringLiteral("loss")).toDouble() + 0.5),
                object.value(QStringLiteral("tokens")).toInteger());
        QList<std::int64_t> tokens;
        for (const auto& value : object.value(QStringLiteral("tokens")).toArray())
            tokens.append(value.toInteger());
        if (tokens.isEmpty())
            tokens.append(65);
        else
            tokens[0] = tokens[0] == 65 ? 66 : 65;
        return core::inference::generateLine(index, tokens, object.value(QStringLiteral("finish")).toString() == u"stop");
    }

    // An inference shard with one input's line made wrong, and a chain and commitment made to
    // match: a wrong answer, not a signed contradiction, and well-formed.
    static compute::ShardOutput oneLineWrong(compute::ShardOutput output, const core::ShardTask& task)
    {
        auto lines = core::inference::linesOf(output.weights);
        if (output.result.outcome != core::ShardResult::Outcome::Completed || !lines || lines->isEmpty())
            return output;
        auto& line = (*lines)[lines->size() / 2];
        line = wrongLine(line);
        output.weights = core::inference::blobOf(*lines);
        output.result.finalHash = output.result.weightsSha256 = core::Digest::ofBytes(output.weights);
        output.result.checkpointHashes = core::inference::chainOf(task.startWeights, *lines, task.batchSize);
        qInfo("cheat: input %lld's line of shard %lld changed", qlonglong(task.sampleBegin + lines->size() / 2),
            qlonglong(task.shard));
        return output;
    }

    compute::ShardOutput cheat(
        const core::ShardTask& task, const QByteArray& start, const compute::ComputeEnvironment& environment)
    {
        if (m_mode == u"one-line")
            return oneLineWrong(compute::runShard(task, start, environment), task);
        if (m_mode == u"random") {
            // Weights (or an int8 update) of the right form and shape that no honest run gives: another
            // seed's data at three times the learning rate, and a chain of made-up hashes.
            auto other = task;
            other.seed = std::int64_t(QRandomGenerator::global()->bounded(1'000'000)) + task.seed + 1;
            other.optimizer.lr = task.optimizer.lr * 3.0;
            auto made = compute::runShard(other, start, environment);
            if (made.result.outcome != core::ShardResult::Outcome::Completed)
                return compute::runShard(task, start, environment);
            for (qsizetype i = 1; i < made.result.checkpointHashes.size(); ++i)
                made.result.checkpointHashes[i]
                    = core::Digest::ofBytes(QByteArray::number(QRandomGenerator::global()->generate64()));
            made.keptState.clear();
            qInfo("cheat: random weights for round %lld shard %lld", qlonglong(task.round), qlonglong(task.shard));
            return made;
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
        if (const auto believed = believedTask(task)) {
            auto output = compute::runShard(*believed, start, environment);
            qInfo("cheat: %s for round %lld shard %lld",
                m_mode == u"wrong-lr"      ? "twice the learning rate"
                    : m_mode == u"collude" ? "the pact's learning rate"
                                           : "wrong data order",
                qlonglong(task.round), qlonglong(task.shard));
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
    using Key = std::tuple<QString, std::int64_t, int, std::int64_t, std::int64_t>; // assignment, from, kind, step, micro
    std::mutex m_stageMutex;
    std::condition_variable m_arrived;
    std::map<Key, QByteArray> m_inbox;
    QList<Tensor> m_outbox;
    QSet<QString> m_stopped;
    bool m_closing = false;
    std::vector<std::thread> m_stageThreads;
    mutable QMutex m_mutex;
    QList<Served> m_served;
    std::unique_ptr<app::ReplicaHost> m_replicas;
    QList<Finished> m_finished;
    QList<Recreated> m_recreated;
};

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("broker"), QStringLiteral("broker address"), QStringLiteral("ADDRESS") });
    parser.addOption({ QStringLiteral("data"), QStringLiteral("data folder"), QStringLiteral("DIR") });
    parser.addOption({ QStringLiteral("mode"), QStringLiteral("how to cheat"), QStringLiteral("MODE") });
    parser.addOption({ QStringLiteral("name"), QStringLiteral("the node's name (cheater-MODE)"), QStringLiteral("NAME") });
    parser.process(app);
    const QString mode = parser.value(QStringLiteral("mode"));
    const QStringList modes { QStringLiteral("random"), QStringLiteral("fewer-steps"), QStringLiteral("copy"),
        QStringLiteral("stale"), QStringLiteral("wrong-data"), QStringLiteral("late"), QStringLiteral("poisoned"),
        QStringLiteral("wrong-lr"), QStringLiteral("collude"), QStringLiteral("one-line"), QStringLiteral("wrong-answer"),
        QStringLiteral("stage-lr") };
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
    options.node.name
        = parser.isSet(QStringLiteral("name")) ? parser.value(QStringLiteral("name")) : QStringLiteral("cheater-") + mode;
    options.node.softwareVersion = QStringLiteral("test");
    options.node.runtimeProfile = compute::currentRuntimeProfile(1).toString();
    options.node.signingKey = QString::fromLatin1(signing->publicKey.toBase64());
    options.node.maxThreads = 1;
    options.node.benchmarkSamplesPerSecond = 20000;
    options.node.capabilities = core::ownCapabilities();

    std::signal(SIGTERM, [](int) { g_stop = true; });
    CheatingExecutor executor(mode);
    net::NodeClient client(options, executor, **cache, QStringLiteral("cheater"));
    std::atomic<bool> abandon { false };
    client.run(g_stop, abandon);
    return 0;
}
