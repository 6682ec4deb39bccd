// A served model end to end (docs/PROTOCOL.md, "Serving"): a broker and tessera-node processes on
// 127.0.0.1 host a trained gpt, and a client sends it 104 requests at once while one node is
// killed: each is answered exactly once, with the tokens tessera-node infer-local writes for it,
// and the owner pays exactly what the answers cost. Then a node that signs wrong answers hosts
// a replica beside an honest one: answers are checked, the liar slashed and dropped, the client
// never told its answer.

#include "cluster.h"

#include <core/inference/question.h>
#include <net/messages.h>
#include <net/protocol.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

using namespace tessera;
using namespace tessera::tests::e2e;

namespace {

// Many ASKs in flight on one DEALER socket, as a client of the protocol would send them.
class Asker {
public:
    explicit Asker(const QString& endpoint)
        : m_socket(m_context, zmq::socket_type::dealer)
    {
        m_socket.set(zmq::sockopt::linger, 0);
        m_socket.connect(endpoint.toStdString());
    }

    void ask(int id, const QString& jobId, const core::inference::Question& question, const QString& requestId)
    {
        auto header = net::AskRequest { jobId, question, requestId }.toHeader();
        header.insert(net::fields::Id, id);
        zmq::multipart_t frames;
        for (const auto& frame : net::encode({ net::Command::Ask, header, {} }))
            frames.addmem(frame.constData(), size_t(frame.size()));
        frames.send(m_socket);
    }

    struct Reply {
        int oks = 0;
        int errors = 0;
        QString error;
        QJsonObject answer;
        QList<std::int64_t> streamed; // the tokens as TOKENS left them (a restart replaces from `from`)
    };
    // Reads what came for up to waitMs; true when a message came.
    bool receive(int waitMs)
    {
        zmq::pollitem_t item { m_socket.handle(), 0, ZMQ_POLLIN, 0 };
        zmq::poll(&item, 1, std::chrono::milliseconds(waitMs));
        if (!(item.revents & ZMQ_POLLIN))
            return false;
        zmq::multipart_t frames(m_socket);
        QList<QByteArray> list;
        for (const auto& frame : frames)
            list.append(QByteArray(static_cast<const char*>(frame.data()), qsizetype(frame.size())));
        auto message = net::decode(list);
        if (!message)
            return true;
        const int id = int(message->header.value(net::fields::Id).toInteger(-1));
        auto& reply = m_replies[id];
        if (message->command == net::Command::Tokens) {
            auto tokens = net::TokensMessage::fromHeader(message->header);
            if (tokens && tokens->from <= reply.streamed.size())
                reply.streamed = reply.streamed.mid(0, tokens->from) + tokens->tokens;
        } else if (message->command == net::Command::Ok) {
            ++reply.oks;
            reply.answer = message->header.value(QStringLiteral("answer")).toObject();
        } else if (message->command == net::Command::Error) {
            ++reply.errors;
            reply.error = message->header.value(net::fields::Message).toString();
        }
        return true;
    }
    const QHash<int, Reply>& replies() const { return m_replies; }
    int answered() const
    {
        int n = 0;
        for (const auto& reply : m_replies)
            n += reply.oks + reply.errors;
        return n;
    }

private:
    zmq::context_t m_context;
    zmq::socket_t m_socket;
    QHash<int, Reply> m_replies;
};

QList<std::int64_t> tokensOf(const QJsonObject& object)
{
    QList<std::int64_t> tokens;
    for (const auto& token : object.value(QStringLiteral("tokens")).toArray())
        tokens.append(token.toInteger());
    return tokens;
}

} // namespace

class ServingTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::unique_ptr<Cluster> m_cluster;
    QProcess* m_second = nullptr;
    QString m_trainId;
    static constexpr int Greedy = 100; // requests at temperature 0; 4 more draw at 0.8

    Run node(const QStringList& arguments)
    {
        return run(Bin + QStringLiteral("/tessera-node"),
            QStringList { QStringLiteral("--config"), QStringLiteral("/dev/null") } + arguments);
    }

    // What infer-local writes for a generate job of these prompts (one JSON object per line).
    QList<QJsonObject> inferLocally(const QString& prompts, const QString& name)
    {
        const QString job = m_dir.filePath(name + QStringLiteral(".json"));
        Cluster::writeFile(job,
            QStringLiteral(R"({ "kind": "inference", "name": "%1",
    "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32, "initialWeights": { "file": "lm.pt" } },
    "dataset": { "builtin": "fortunes" }, "inference": { "task": "generate", %2 }, "budget": "1" })")
                .arg(name, prompts));
        const QString out = m_dir.filePath(name + QStringLiteral(".jsonl"));
        const auto local = node({ QStringLiteral("infer-local"), job, QStringLiteral("-o"), out });
        if (local.exitCode != 0)
            qWarning("%s", qPrintable(local.output));
        QFile file(out);
        QList<QJsonObject> lines;
        if (local.exitCode == 0 && file.open(QIODevice::ReadOnly)) {
            for (const auto& line : file.readAll().split('\n')) {
                if (!line.isEmpty())
                    lines.append(QJsonDocument::fromJson(line).object());
            }
        }
        return lines;
    }

    QString submitServed(const QString& name, int replicas, double checkShare)
    {
        const QString file = m_dir.filePath(name + QStringLiteral(".json"));
        Cluster::writeFile(file,
            QStringLiteral(R"({ "kind": "inference", "name": "%1", "model": { "fromJob": "%2" },
    "inference": { "task": "serve", "replicas": %3, "seconds": 900, "maxTokens": 24, "checkShare": %4 },
    "budget": "100" })")
                .arg(name, m_trainId)
                .arg(replicas)
                .arg(checkShare));
        return m_cluster->submit(file);
    }

    std::int64_t servingValue(const QString& jobId, const QString& key)
    {
        return m_cluster->status(jobId).value(QStringLiteral("serving")).toObject().value(key).toInteger(-1);
    }

    static core::inference::Question question(const QString& prompt, double temperature, std::int64_t seed)
    {
        core::inference::Question q;
        q.prompt = prompt.toUtf8();
        q.maxTokens = 24;
        q.temperature = temperature;
        q.seed = seed;
        q.stop = { QByteArrayLiteral("%\n") };
        return q;
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_cluster = std::make_unique<Cluster>();
        // No timer decides anything here, however slowly a loaded machine runs the nodes.
        m_cluster->startBroker({}, QStringLiteral("MinDeadlineSeconds=900\nSelfVerifyAfterSeconds=900\n"));
        m_cluster->startNode(1);
        m_second = m_cluster->startNode(2);
        QVERIFY(QTest::qWaitFor([&] { return m_cluster->nodes().size() == 2; }, 120'000));
        const QString trainFile = m_dir.filePath(QStringLiteral("lm-train.json"));
        Cluster::writeFile(trainFile, QStringLiteral(R"({
    "name": "small gpt", "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32 },
    "dataset": { "builtin": "fortunes" }, "optimizer": { "kind": "adamw", "lr": 0.003 },
    "training": { "rounds": 1, "shardsPerRound": 1, "localSteps": 100, "batchSize": 32, "seed": 3 },
    "aggregation": { "compression": "none" }, "budget": "100"
})"));
        m_trainId = m_cluster->submit(trainFile);
        QVERIFY(!m_trainId.isEmpty());
        QCOMPARE(m_cluster->waitForEnd(m_trainId).value(QStringLiteral("state")).toString(), QStringLiteral("finished"));
        const auto fetch = m_cluster->job(
            { QStringLiteral("fetch"), m_trainId, QStringLiteral("-o"), m_dir.filePath(QStringLiteral("lm.pt")) });
        QCOMPARE(fetch.exitCode, 0);
    }

    void everyRequestIsAnsweredOnceThroughAKilledNode()
    {
        // The local answers: greedy ones from one run of all prompts (the index does not matter at
        // temperature 0), the drawn ones each from a job of that one prompt (index 0, as served).
        QFile prompts(m_dir.filePath(QStringLiteral("prompts.txt")));
        QVERIFY(prompts.open(QIODevice::WriteOnly));
        for (int i = 0; i < Greedy; ++i)
            prompts.write(QStringLiteral("Fortune %1: \n").arg(i).toUtf8());
        prompts.close();
        auto local = inferLocally(
            QStringLiteral(R"("prompts": { "file": "prompts.txt" }, "maxTokens": 24, "temperature": 0, "stop": [ "%\n" ])"),
            QStringLiteral("greedy"));
        QCOMPARE(local.size(), Greedy);
        for (int k = 0; k < 4; ++k) {
            const auto drawn = inferLocally(QStringLiteral(R"("prompts": { "text": "Tell me ", "count": 1 }, "maxTokens": 24,
                "temperature": 0.8, "seed": %1, "stop": [ "%\n" ])")
                                                .arg(100 + k),
                QStringLiteral("drawn%1").arg(k));
            QCOMPARE(drawn.size(), 1);
            local.append(drawn.first());
        }

        const QString jobId = submitServed(QStringLiteral("served"), 2, 0.25);
        QVERIFY(!jobId.isEmpty());
        QVERIFY(QTest::qWaitFor([&] { return servingValue(jobId, QStringLiteral("replicas")) == 2; }, 120'000));
        const auto budget = m_cluster->status(jobId).value(QStringLiteral("escrow")).toString();

        Asker asker(m_cluster->endpoint());
        for (int i = 0; i < Greedy + 4; ++i) {
            const auto q = i < Greedy ? question(QStringLiteral("Fortune %1: ").arg(i), 0.0, 0)
                                      : question(QStringLiteral("Tell me "), 0.8, 100 + (i - Greedy));
            asker.ask(i, jobId, q, QStringLiteral("r%1").arg(i));
        }
        // A node goes away (SIGKILL) once a few answers are in: its requests go to the other.
        bool killed = false;
        QElapsedTimer guard; // against a hang only: nothing here waits for a timer to decide
        guard.start();
        while (asker.answered() < Greedy + 4 && guard.elapsed() < 600'000) {
            asker.receive(200);
            if (!killed && asker.answered() >= 10) {
                m_second->kill();
                killed = true;
            }
        }
        QVERIFY(killed);
        QCOMPARE(asker.answered(), Greedy + 4);
        double paid = 0;
        for (int i = 0; i < Greedy + 4; ++i) {
            const auto& reply = asker.replies().value(i);
            QVERIFY2(reply.errors == 0, qPrintable(reply.error));
            QCOMPARE(reply.oks, 1);
            QCOMPARE(tokensOf(reply.answer), tokensOf(local[i]));
            QCOMPARE(reply.answer.value(QStringLiteral("finish")), local[i].value(QStringLiteral("finish")));
            QCOMPARE(reply.streamed, tokensOf(reply.answer)); // the stream told the answer, once
            paid += reply.answer.value(QStringLiteral("cost")).toString().toDouble();
        }
        // The owner paid what the answers cost (the broker pays what they earned once a second).
        auto escrow = [&] { return m_cluster->status(jobId).value(QStringLiteral("escrow")).toString().toDouble(); };
        QVERIFY(QTest::qWaitFor([&] { return std::abs(escrow() - (budget.toDouble() - paid)) < 1e-6; }, 60'000));
        // A repeated request id is the same answer, charged once.
        asker.ask(500, jobId, question(QStringLiteral("Fortune 5: "), 0.0, 0), QStringLiteral("r5"));
        QVERIFY(QTest::qWaitFor([&] { return asker.receive(100) && asker.replies().value(500).oks == 1; }, 60'000));
        QCOMPARE(asker.replies().value(500).answer, asker.replies().value(5).answer);
        QTest::qWait(1500); // a payment for it would be made within a second
        QVERIFY(std::abs(escrow() - (budget.toDouble() - paid)) < 1e-6);
        QVERIFY(m_cluster->ledgerConsistent());
        // tessera-job ask gives the same answer, streamed, and a served job has no result to fetch.
        const auto asked = m_cluster->job({ QStringLiteral("ask"), jobId, QStringLiteral("--prompt"),
            QStringLiteral("Fortune 7: "), QStringLiteral("--tokens"), QStringLiteral("24"), QStringLiteral("--temperature"),
            QStringLiteral("0"), QStringLiteral("--stop"), QStringLiteral("%\n"), QStringLiteral("--json") });
        QVERIFY2(asked.exitCode == 0, qPrintable(asked.output));
        QCOMPARE(tokensOf(QJsonDocument::fromJson(asked.standardOutput.toUtf8()).object()), tokensOf(local[7]));
        const auto fetch
            = m_cluster->job({ QStringLiteral("fetch"), jobId, QStringLiteral("-o"), m_dir.filePath(QStringLiteral("x")) });
        QVERIFY(fetch.exitCode != 0);
        QVERIFY2(fetch.output.contains(QStringLiteral("served job")), qPrintable(fetch.output));
        QCOMPARE(m_cluster->job({ QStringLiteral("cancel"), jobId }).exitCode, 0);
    }

    void aNodeThatAnswersWronglyIsSlashedAndItsAnswerNeverSent()
    {
        m_cluster->startCheater(QStringLiteral("wrong-answer"));
        QVERIFY(QTest::qWaitFor([&] { return m_cluster->nodes().size() == 3; }, 120'000));
        const QString jobId = submitServed(QStringLiteral("checked"), 2, 1.0);
        QVERIFY(!jobId.isEmpty());
        QVERIFY(QTest::qWaitFor([&] { return servingValue(jobId, QStringLiteral("replicas")) == 2; }, 120'000));
        const auto local = inferLocally(
            QStringLiteral(R"("prompts": { "file": "prompts.txt" }, "maxTokens": 24, "temperature": 0, "stop": [ "%\n" ])"),
            QStringLiteral("greedy-again"));
        QCOMPARE(local.size(), Greedy);
        Asker asker(m_cluster->endpoint());
        for (int i = 0; i < 8; ++i)
            asker.ask(i, jobId, question(QStringLiteral("Fortune %1: ").arg(i), 0.0, 0), QStringLiteral("c%1").arg(i));
        QElapsedTimer guard;
        guard.start();
        while (asker.answered() < 8 && guard.elapsed() < 300'000)
            asker.receive(200);
        int checked = 0;
        for (int i = 0; i < 8; ++i) {
            const auto& reply = asker.replies().value(i);
            QVERIFY2(reply.errors == 0, qPrintable(reply.error));
            QCOMPARE(reply.oks, 1);
            QCOMPARE(tokensOf(reply.answer), tokensOf(local[i]));
            checked += reply.answer.value(QStringLiteral("checked")).toBool() ? 1 : 0;
        }
        // Checked until the liar was caught; then it hosts the job no more, and the honest replica
        // answers alone (unchecked: nobody is left to check it).
        QVERIFY(checked >= 1);
        QCOMPARE(servingValue(jobId, QStringLiteral("replicas")), 1);
        const auto cheater = m_cluster->nodeNamed(QStringLiteral("cheater-wrong-answer"));
        const auto honest = m_cluster->nodeNamed(QStringLiteral("node-1"));
        QVERIFY(cheater.value(QStringLiteral("slashed")).toString() != u"0");
        QCOMPARE(honest.value(QStringLiteral("slashed")).toString(), QStringLiteral("0"));
        QVERIFY(m_cluster->ledgerConsistent());
    }

    void cleanupTestCase() { m_cluster.reset(); }
};

QTEST_GUILESS_MAIN(ServingTest)
#include "tst_serving.moc"
