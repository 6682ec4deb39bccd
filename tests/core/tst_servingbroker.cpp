// A served job's broker side (docs/PROTOCOL.md, "Serving") with a fake clock and stand-in
// arithmetic: replicas placed and loaded, requests routed to the least-loaded one, a lost node's
// requests answered by another without a token told twice, repeats answered once, the escrow set
// aside, replicas and requests that never come back given to others, and a check's liar slashed.

#include <core/broker/broker.h>
#include <core/capabilities.h>
#include <core/inference/outputs.h>
#include <core/inference/question.h>
#include <core/signing.h>

#include <support/fakemath.h>
#include <support/teststore.h>

#include <QHash>
#include <QJsonDocument>
#include <QTemporaryDir>
#include <QTest>

using namespace tessera::core;
using namespace tessera::core::broker;
using tessera::tests::FakeMath;

namespace {

SigningKeys& keysOf(const QString& nodeId)
{
    static QHash<QString, SigningKeys> keys;
    if (!keys.contains(nodeId))
        keys.insert(nodeId, SigningKeys::generate());
    return keys[nodeId];
}

NodeInfo node(const QString& id)
{
    NodeInfo info;
    info.signingKey = QString::fromLatin1(keysOf(id).publicKey.toBase64());
    info.nodeId = id;
    info.softwareVersion = QStringLiteral("test");
    info.runtimeProfile = QStringLiteral("p");
    info.maxThreads = 4;
    info.capabilities = ownCapabilities() << capability::Serve;
    info.benchmarkSamplesPerSecond = 1000;
    return info;
}

JobSpec servedJob(double checkShare, const QString& budget = QStringLiteral("100"), bool portable = false)
{
    auto spec = JobSpec::fromJson(
        QJsonDocument::fromJson(QStringLiteral(R"({
        "name": "served", "kind": "inference",
        "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32,
                   "initialWeights": { "sha256": "%1" } },
        "dataset": { "builtin": "fortunes" },
        "inference": { "task": "serve", "replicas": 2, "seconds": 600, "maxTokens": 8, "checkShare": %2,
                       "determinism": "%4" },
        "budget": "%3" })")
                                    .arg(Digest::ofBytes("w0").toHex())
                                    .arg(checkShare)
                                    .arg(budget, portable ? QStringLiteral("portable") : QStringLiteral("fast"))
                                    .toUtf8())
            .object());
    if (!spec)
        qFatal("%s", qPrintable(spec.error().toString()));
    return *spec;
}

inference::Question question(const QString& prompt, std::int64_t tokens = 4)
{
    inference::Question q;
    q.prompt = prompt.toUtf8();
    q.maxTokens = tokens;
    return q;
}

QByteArray lineOf(const QList<std::int64_t>& tokens)
{
    return inference::generateLine(0, tokens, false);
}

} // namespace

class ServingBrokerTest : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    FakeMath m_math;
    ManualClock m_clock;
    std::vector<std::unique_ptr<BlobStore>> m_blobs;
    int m_opened = 0;

    struct Served {
        std::unique_ptr<Broker> broker;
        QString jobId;
        QHash<QString, QString> replicaOf; // node -> its replica's assignment
    };

    // A faucet broker with a served job whose two replicas are loaded on a and b (portable: b is of
    // another runtime profile than a).
    Served served(double checkShare = 0.0, const QString& budget = QStringLiteral("100"), bool portable = false)
    {
        const QString name = QStringLiteral("b%1").arg(++m_opened);
        auto blobs = Broker::openBlobs(m_dir.filePath(name));
        Broker::Options options;
        options.faucet = true;
        options.sampling = { 0, 0.0 };
        options.database = tessera::tests::TestStore::databaseFor(m_dir.filePath(name));
        auto broker = Broker::open(m_dir.filePath(name), **blobs, m_math, m_clock, options);
        m_blobs.push_back(std::move(*blobs));
        if (!broker)
            qFatal("%s", qPrintable(broker.error().toString()));
        Served setup { std::move(*broker), {}, {} };
        if (!setup.broker->blobs().put(QByteArrayLiteral("w0"))) // the model's weights, uploaded
            qFatal("cannot store the weights");
        auto job = setup.broker->submit(servedJob(checkShare, budget, portable));
        if (!job)
            qFatal("%s", qPrintable(job.error().toString()));
        setup.jobId = *job;
        for (const auto* id : { "a", "b" }) {
            const QString nodeId = QString::fromLatin1(id);
            auto info = node(nodeId);
            if (portable && nodeId == u"b")
                info.runtimeProfile = QStringLiteral("q");
            if (!setup.broker->registerNode(info))
                qFatal("cannot register");
            auto replica = setup.broker->assign(nodeId);
            if (!replica || !replica->has_value() || !(*replica)->task.inference->serves())
                qFatal("no replica for %s", id);
            setup.replicaOf.insert(nodeId, (*replica)->id);
            if (!setup.broker->hosting(nodeId, (*replica)->id, true, {}))
                qFatal("cannot host");
        }
        return setup;
    }

    // The requests sent to each node since the last call, as (node, ticket).
    static QList<std::pair<QString, QString>> requests(std::vector<ServeNotice>& notices)
    {
        QList<std::pair<QString, QString>> sent;
        for (const auto& notice : notices) {
            if (notice.kind == ServeNotice::Kind::Request)
                sent.append({ notice.node, notice.ticket });
        }
        return sent;
    }

    // The answers the broker has told askers since the last call.
    static QList<QJsonObject> answersTold(Broker& broker)
    {
        QList<QJsonObject> told;
        for (const auto& notice : broker.takeServeNotices()) {
            if (notice.kind == ServeNotice::Kind::Answer)
                told.append(notice.answer);
        }
        return told;
    }

    static Status answer(Broker& broker, const QString& nodeId, const QString& assignment, const QString& jobId,
        const QString& ticket, const QByteArray& line)
    {
        return broker.answered(
            nodeId, ticket, line, signDocument(inference::answerDocument(assignment, jobId, ticket, line), keysOf(nodeId)), {});
    }

private Q_SLOTS:
    void requestsGoToTheLeastLoadedReplicaAndWait()
    {
        auto s = served();
        for (int i = 0; i < 5; ++i)
            QVERIFY(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q%1").arg(i)), {}, i + 1));
        auto notices = s.broker->takeServeNotices();
        const auto sent = requests(notices);
        // Two at each replica (the least loaded first, a tie to the one placed first), the fifth waits.
        QCOMPARE(sent.size(), 4);
        QCOMPARE(sent[0].first, QStringLiteral("a"));
        QCOMPARE(sent[1].first, QStringLiteral("b"));
        QCOMPARE(sent[2].first, QStringLiteral("a"));
        QCOMPARE(sent[3].first, QStringLiteral("b"));
        QCOMPARE(s.broker->status(s.jobId)->serving.value(QStringLiteral("queued")).toInteger(), 1);
        // b answers one: the waiting one goes to b, and its asker hears the answer.
        QVERIFY(answer(
            *s.broker, QStringLiteral("b"), s.replicaOf[QStringLiteral("b")], s.jobId, sent[1].second, lineOf({ 1, 2, 3, 4 })));
        notices = s.broker->takeServeNotices();
        QCOMPARE(requests(notices).size(), 1);
        QCOMPARE(requests(notices).first().first, QStringLiteral("b"));
        bool answered = false;
        for (const auto& notice : notices) {
            if (notice.kind == ServeNotice::Kind::Answer && notice.asker == 2) {
                answered = true;
                QCOMPARE(notice.answer.value(QStringLiteral("text")).toString(), QStringLiteral("\x01\x02\x03\x04"));
                QVERIFY(!notice.answer.value(QStringLiteral("checked")).toBool());
            }
        }
        QVERIFY(answered);
        // An answer for a ticket the node does not hold, or signed by another key, is refused.
        QCOMPARE(answer(*s.broker, QStringLiteral("a"), s.replicaOf[QStringLiteral("a")], s.jobId, sent[1].second,
                     lineOf({ 1, 2, 3, 4 }))
                     .error()
                     .field,
            QStringLiteral("ticket"));
        const auto forged = signDocument(
            inference::answerDocument(s.replicaOf[QStringLiteral("a")], s.jobId, sent[0].second, lineOf({ 1, 2, 3, 4 })),
            keysOf(QStringLiteral("b")));
        QVERIFY(!s.broker->answered(QStringLiteral("a"), sent[0].second, lineOf({ 1, 2, 3, 4 }), forged, {}));
    }

    void aLostNodesRequestGoesToAnotherAndNoTokenIsToldTwice()
    {
        auto s = served();
        QVERIFY(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), QStringLiteral("r1"), 7));
        auto notices = s.broker->takeServeNotices();
        const auto first = requests(notices).first();
        QCOMPARE(first.first, QStringLiteral("a"));
        s.broker->tokens(QStringLiteral("a"), first.second, 0, { 1, 2 });
        s.broker->nodeLost(QStringLiteral("a"));
        notices = s.broker->takeServeNotices();
        const auto again = requests(notices);
        QCOMPARE(again.size(), 1);
        QCOMPARE(again.first(), std::pair(QStringLiteral("b"), first.second));
        // b streams the same answer from its start: only what the asker lacks is told.
        s.broker->tokens(QStringLiteral("b"), first.second, 0, { 1, 2, 3 });
        QVERIFY(answer(
            *s.broker, QStringLiteral("b"), s.replicaOf[QStringLiteral("b")], s.jobId, first.second, lineOf({ 1, 2, 3, 4 })));
        QList<std::int64_t> told { 1, 2 }; // from a, before it went
        int answers = 0;
        for (const auto& notice : s.broker->takeServeNotices()) {
            if (notice.kind == ServeNotice::Kind::Tokens) {
                QCOMPARE(notice.from, told.size());
                told += notice.tokens;
            }
            answers += notice.kind == ServeNotice::Kind::Answer ? 1 : 0;
        }
        QCOMPARE(told, QList<std::int64_t>({ 1, 2, 3, 4 })); // b's 1 and 2 were not told again
        QCOMPARE(answers, 1);
        // The same request id again: the same answer, at once, and not charged again.
        QVERIFY(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), QStringLiteral("r1"), 8));
        notices = s.broker->takeServeNotices();
        QCOMPARE(requests(notices).size(), 0);
        QCOMPARE(notices.size(), size_t(1));
        QCOMPARE(notices.front().kind, ServeNotice::Kind::Answer);
        QVERIFY(
            !s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("other")), QStringLiteral("r1"), 9));
        const auto before = s.broker->status(s.jobId)->escrow;
        s.broker->tick(); // pays what was earned
        const auto after = s.broker->status(s.jobId)->escrow;
        QVERIFY(after < before);
        s.broker->tick();
        QCOMPARE(s.broker->status(s.jobId)->escrow, after);
        QVERIFY(s.broker->ledger().checkInvariants());
    }

    void aRequestTheBudgetCannotCoverIsRefused()
    {
        // The price of a token is at least a millionth of a credit; a budget of 0.00005 credits
        // covers one small request set aside (twice its most), not two.
        auto s = served(0.0, QStringLiteral("0.0001"));
        const auto price = s.broker->status(s.jobId)->serving.value(QStringLiteral("pricePerToken")).toString();
        QVERIFY(!price.isEmpty());
        int accepted = 0;
        for (int i = 0; i < 50; ++i)
            accepted += s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, i + 1) ? 1 : 0;
        QVERIFY(accepted >= 1);
        QVERIFY(accepted < 50);
        QCOMPARE(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, 99).error().field,
            QStringLiteral("budget"));
    }

    void replicasAndRequestsThatNeverComeBackGoToOthers()
    {
        auto s = served();
        QVERIFY(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, 1));
        auto notices = s.broker->takeServeNotices();
        const auto sent = requests(notices).first();
        QCOMPARE(sent.first, QStringLiteral("a"));
        // a never answers: after twice 60 s and a second a token, its replica goes, the request to b.
        m_clock.advance(2 * (60'000 + 4'000) + 1);
        s.broker->tick();
        notices = s.broker->takeServeNotices();
        bool unhosted = false;
        for (const auto& notice : notices)
            unhosted = unhosted || (notice.kind == ServeNotice::Kind::Unhost && notice.node == u"a");
        QVERIFY(unhosted);
        const QList<std::pair<QString, QString>> toB { { QStringLiteral("b"), sent.second } };
        QCOMPARE(requests(notices), toB);
        // a gets no replica of that job again; a new node does, and one that never loads it loses it.
        QVERIFY(!s.broker->assign(QStringLiteral("a"))->has_value());
        QVERIFY(s.broker->registerNode(node(QStringLiteral("c"))));
        auto replica = s.broker->assign(QStringLiteral("c"));
        QVERIFY(replica && replica->has_value());
        m_clock.advance(300'001);
        s.broker->tick();
        unhosted = false;
        for (const auto& notice : s.broker->takeServeNotices())
            unhosted = unhosted || (notice.kind == ServeNotice::Kind::Unhost && notice.node == u"c");
        QVERIFY(unhosted);
    }

    // A job that ends while an answer waits for its check: its client gets the answer (unchecked),
    // its node is paid once for it, the checker's late answer is stale, the rest of the escrow
    // goes back, and the books balance.
    void aJobThatEndsMidCheckAnswersAndPaysOnce()
    {
        auto s = served(1.0);
        QVERIFY(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, 1));
        auto notices = s.broker->takeServeNotices();
        const auto first = requests(notices).first();
        QVERIFY(answer(*s.broker, first.first, s.replicaOf[first.first], s.jobId, first.second, lineOf({ 1, 2, 3, 4 })));
        notices = s.broker->takeServeNotices();
        const auto check = requests(notices).first();
        QVERIFY(check.first != first.first);
        QVERIFY(s.broker->cancel(s.jobId));
        int answers = 0;
        for (const auto& notice : s.broker->takeServeNotices()) {
            if (notice.kind == ServeNotice::Kind::Answer) {
                ++answers;
                QVERIFY(!notice.answer.value(QStringLiteral("checked")).toBool());
            }
            QVERIFY(notice.kind != ServeNotice::Kind::Refuse);
        }
        QCOMPARE(answers, 1);
        QCOMPARE(
            answer(*s.broker, check.first, s.replicaOf[check.first], s.jobId, check.second, lineOf({ 1, 2, 3, 4 })).error().field,
            QStringLiteral("ticket"));
        auto paid = s.broker->ledger().history(QStringLiteral("balance:") + first.first);
        QVERIFY(paid);
        int payments = 0;
        for (const auto& transfer : *paid)
            payments += transfer.cause.startsWith(QStringLiteral("pay:")) ? 1 : 0;
        QCOMPARE(payments, 1);
        QCOMPARE(s.broker->status(s.jobId)->escrow, Credits {});
        QVERIFY(s.broker->ledger().checkInvariants());
    }

    // A referee of another runtime profile than the replicas' may part from an honest node's
    // tokens: it rules on nothing, nobody is slashed, and the first answer goes out unchecked.
    void aRefereeOfAnotherProfileSlashesNobody()
    {
        auto s = served(1.0);
        m_math.refereeLine = lineOf({ 1, 2, 3, 4 });
        m_math.refereeProfile = QStringLiteral("another");
        QVERIFY(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, 1));
        auto notices = s.broker->takeServeNotices();
        const auto first = requests(notices).first();
        QVERIFY(answer(*s.broker, first.first, s.replicaOf[first.first], s.jobId, first.second, lineOf({ 1, 2, 3, 5 })));
        notices = s.broker->takeServeNotices();
        const auto check = requests(notices).first();
        QVERIFY(answer(*s.broker, check.first, s.replicaOf[check.first], s.jobId, check.second, lineOf({ 1, 2, 3, 4 })));
        bool told = false;
        for (const auto& notice : s.broker->takeServeNotices()) {
            if (notice.kind == ServeNotice::Kind::Answer) {
                told = true;
                QVERIFY(!notice.answer.value(QStringLiteral("checked")).toBool());
            }
        }
        QVERIFY(told);
        for (const auto* id : { "a", "b" }) {
            const auto account = s.broker->account(QString::fromLatin1(id));
            QVERIFY(account);
            QCOMPARE(account->value(QStringLiteral("stake")).toString(),
                s.broker->account(QStringLiteral("a"))->value(QStringLiteral("stake")).toString());
        }
        QVERIFY(s.broker->assign(QStringLiteral("a"))); // neither lost its stake
        m_math.refereeLine.clear();
        m_math.refereeProfile = QStringLiteral("p");
    }

    // What one owner or node can hold of a broker's memory is bounded: requests waiting for a job,
    // repeats of one live request id, replicas on one node.
    void theBrokersServingStateIsBounded()
    {
        auto s = served(0.0, QStringLiteral("1000"));
        int accepted = 0;
        for (int i = 0; i < Serving::MaxQueued + 2 * Serving::MaxAtReplica + 5; ++i)
            accepted += s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, i + 1) ? 1 : 0;
        QCOMPARE(accepted, int(Serving::MaxQueued) + 2 * Serving::MaxAtReplica);
        QCOMPARE(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, 99'999).error().field,
            QStringLiteral("jobId"));

        auto t = served();
        int joined = 0;
        for (int i = 0; i < Serving::MaxAskersPerTicket + 3; ++i)
            joined += t.broker->ask(
                          t.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), QStringLiteral("r"), i + 1)
                ? 1
                : 0;
        QCOMPARE(joined, int(Serving::MaxAskersPerTicket));

        // a hosts a replica of t's job; of two more jobs it takes one, and no third.
        for (int k = 0; k < 2; ++k)
            QVERIFY(t.broker->submit(servedJob(0.0)));
        int placed = 0;
        for (int k = 0; k < 3; ++k) {
            auto replica = t.broker->assign(QStringLiteral("a"));
            placed
                += replica && replica->has_value() && (*replica)->task.inference && (*replica)->task.inference->serves() ? 1 : 0;
        }
        QCOMPARE(placed, Serving::MaxReplicasPerNode - 1);
    }

    void aCheckedAnswerThatDiffersIsRefereedAndTheLiarSlashed()
    {
        auto s = served(1.0);
        const auto right = lineOf({ 1, 2, 3, 4 });
        m_math.refereeLine = right;
        QVERIFY(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, 1));
        auto notices = s.broker->takeServeNotices();
        const auto first = requests(notices).first();
        QCOMPARE(first.first, QStringLiteral("a"));
        QVERIFY(answer(
            *s.broker, QStringLiteral("a"), s.replicaOf[QStringLiteral("a")], s.jobId, first.second, lineOf({ 1, 2, 3, 5 })));
        notices = s.broker->takeServeNotices();
        const auto check = requests(notices);
        const QList<std::pair<QString, QString>> toB { { QStringLiteral("b"), first.second } };
        QCOMPARE(check, toB);
        QVERIFY(answer(*s.broker, QStringLiteral("b"), s.replicaOf[QStringLiteral("b")], s.jobId, first.second, right));
        const auto told = answersTold(*s.broker);
        QVERIFY(!told.isEmpty());
        for (const auto& answer : told) {
            QCOMPARE(answer.value(QStringLiteral("line")).toString().toUtf8(), right);
            QVERIFY(answer.value(QStringLiteral("checked")).toBool());
        }
        auto stakeA = s.broker->account(QStringLiteral("a"));
        auto stakeB = s.broker->account(QStringLiteral("b"));
        QVERIFY(stakeA && stakeB);
        QVERIFY(Credits::parse(stakeA->value(QStringLiteral("stake")).toString()).value()
            < Credits::parse(stakeB->value(QStringLiteral("stake")).toString()).value());
        const auto again = s.broker->assign(QStringLiteral("a")); // its stake is short now, and the job is not for it
        QVERIFY(!again || !again->has_value());
        m_math.refereeLine.clear();
        QVERIFY(s.broker->ledger().checkInvariants());
    }

    // inference.determinism portable: replicas on nodes of different runtime profiles, and a
    // referee of any profile (the portable one) rules between them.
    void aPortableServedJobTakesEveryProfileAndItsRefereeRules()
    {
        auto s = served(1.0, QStringLiteral("100"), true); // b ("q") got a replica beside a ("p")
        const auto right = lineOf({ 1, 2, 3, 4 });
        m_math.refereeLine = right;
        m_math.refereeProfile = PortableProfile;
        QVERIFY(s.broker->ask(s.jobId, QStringLiteral("local"), true, question(QStringLiteral("q")), {}, 1));
        auto notices = s.broker->takeServeNotices();
        const auto first = requests(notices).first();
        const QString liar = first.first, honest = liar == u"a" ? QStringLiteral("b") : QStringLiteral("a");
        QVERIFY(answer(*s.broker, liar, s.replicaOf[liar], s.jobId, first.second, lineOf({ 1, 2, 3, 5 })));
        notices = s.broker->takeServeNotices();
        QCOMPARE(requests(notices).first().first, honest);
        QVERIFY(answer(*s.broker, honest, s.replicaOf[honest], s.jobId, first.second, right));
        const auto told = answersTold(*s.broker);
        QVERIFY(!told.isEmpty());
        for (const auto& answer : told) {
            QCOMPARE(answer.value(QStringLiteral("line")).toString().toUtf8(), right);
            QVERIFY(answer.value(QStringLiteral("checked")).toBool());
        }
        const auto stakeLiar = Credits::parse(s.broker->account(liar)->value(QStringLiteral("stake")).toString()).value();
        const auto stakeHonest = Credits::parse(s.broker->account(honest)->value(QStringLiteral("stake")).toString()).value();
        QVERIFY(stakeLiar < stakeHonest);
        m_math.refereeLine.clear();
        m_math.refereeProfile = QStringLiteral("p");
        QVERIFY(s.broker->ledger().checkInvariants());
    }
};

QTEST_GUILESS_MAIN(ServingBrokerTest)
#include "tst_servingbroker.moc"
