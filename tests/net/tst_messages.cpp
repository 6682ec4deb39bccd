// The typed messages of docs/PROTOCOL.md: each writes the header the table says (golden compact
// JSON), reads back what it wrote, and names the field that is wrong in what it refuses.

#include <core/smalljobs.h>
#include <net/blobcoding.h>
#include <net/messages.h>

#include <zstd.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QTest>

using namespace tessera;
using namespace tessera::net;

namespace {

QByteArray compact(const QJsonObject& header)
{
    return QJsonDocument(header).toJson(QJsonDocument::Compact);
}

core::Digest digest(char c)
{
    return *core::Digest::fromHex(QString(64, QLatin1Char(c)));
}

// A TASK that reads: one shard of a zoo mlp on the built-in data.
TaskMessage smallTask(const core::Digest& weights)
{
    TaskMessage task;
    task.assignment = QStringLiteral("0123456789abcdef");
    task.task.jobId = QStringLiteral("j");
    task.task.sampleEnd = 10;
    task.task.localSteps = 1;
    task.task.batchSize = 1;
    task.task.threads = 1;
    task.task.model.zoo = QStringLiteral("mlp");
    task.task.dataset.builtin = QStringLiteral("fashion-mnist");
    task.startWeightsBlob = weights;
    return task;
}

} // namespace

class MessagesTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void headersAreWhatTheTableSays()
    {
        QCOMPARE(compact(Welcome { QStringLiteral("n1"), 1000, QStringLiteral("1") }.toHeader()),
            QByteArray(R"({"brokerVersion":"1","heartbeatMs":1000,"nodeId":"n1"})"));
        QCOMPARE(compact(Welcome { QStringLiteral("n1"), 1000, QStringLiteral("1"), { ZstdEncoding } }.toHeader()),
            QByteArray(R"({"brokerVersion":"1","encodings":["zstd"],"heartbeatMs":1000,"nodeId":"n1"})"));
        QCOMPARE(compact(ReadyRequest {}.toHeader()), QByteArray(R"({"slots":1})"));
        QCOMPARE(compact(GetRequest { digest('a'), 0, 4096, ZstdEncoding }.toHeader()),
            QByteArray(R"({"encoding":"zstd","length":4096,"offset":0,"sha256":")") + QByteArray(64, 'a') + "\"}");
        QCOMPARE(compact(ChunkHeader { digest('a'), 0, 9, ZstdEncoding, 9 }.toHeader()),
            QByteArray(R"({"encoding":"zstd","length":9,"offset":0,"sha256":")") + QByteArray(64, 'a') + "\",\"size\":9}");
        QCOMPARE(compact(GetRequest { digest('a'), 1048576, 4096 }.toHeader()),
            QByteArray(R"({"length":4096,"offset":1048576,"sha256":")") + QByteArray(64, 'a') + "\"}");
        QCOMPARE(compact(PutReply { digest('b'), 10, true }.toHeader()),
            QByteArray(R"({"complete":true,"received":10,"sha256":")") + QByteArray(64, 'b') + "\"}");
        QCOMPARE(compact(ResultReply { core::ResultVerdict::Accepted, core::Credits::parse(u"0.9").value(), {} }.toHeader()),
            QByteArray(R"({"paid":"0.9","verdict":"accepted"})"));
        QCOMPARE(
            compact(ResultReply { core::ResultVerdict::Sampled, {}, {} }.toHeader()), QByteArray(R"({"verdict":"sampled"})"));
        QCOMPARE(
            compact(CheckpointAnswer { QStringLiteral("v1"), std::nullopt }.toHeader()), QByteArray(R"({"verification":"v1"})"));
        using Want = core::DisputeQuestion::Want;
        QCOMPARE(compact(CheckpointAsk { QStringLiteral("v1"), QStringLiteral("a1"), { Want::State, 3 } }.toHeader()),
            QByteArray(R"({"assignment":"a1","checkpoint":3,"verification":"v1"})"));
        QCOMPARE(compact(CheckpointAsk { QStringLiteral("v1"), QStringLiteral("a1"), { Want::Trace, 4 } }.toHeader()),
            QByteArray(R"({"assignment":"a1","checkpoint":4,"verification":"v1","want":"trace"})"));
        QCOMPARE(compact(CheckpointAsk { QStringLiteral("v1"), QStringLiteral("a1"), { Want::Operands, 0, 23, 7 } }.toHeader()),
            QByteArray(R"({"assignment":"a1","instruction":7,"step":23,"verification":"v1","want":"operands"})"));
        QCOMPARE(compact(BalanceRequest {}.toHeader()), QByteArray("{}"));
        QCOMPARE(compact(BalanceRequest { QStringLiteral("k") }.toHeader()), QByteArray(R"({"account":"k"})"));
        QCOMPARE(compact(LedgerReply { true, {}, QStringLiteral("12.5"), QStringLiteral("S") }.toHeader()),
            QByteArray(R"({"consistent":true,"minted":"12.5","problem":"","signingKey":"S"})"));
        QCOMPARE(compact(PageRequest { 100, 50, true }.toHeader()), QByteArray(R"({"all":true,"limit":50,"offset":100})"));
        QVERIFY(!PageRequest::fromHeader({ { QStringLiteral("limit"), 501 } }).ok());
        QCOMPARE(PageRequest::fromHeader({})->limit, PageRequest::DefaultLimit);
        const auto checks
            = VerificationsRequest::fromHeader(VerificationsRequest { QStringLiteral("j"), { 5, 7, false } }.toHeader());
        QVERIFY(checks.ok());
        QCOMPARE(checks->jobId, QStringLiteral("j"));
        QCOMPARE(checks->page.offset, 5);
        QCOMPARE(checks->page.limit, 7);
        QCOMPARE(compact(VerdictMessage {
                     QStringLiteral("a1"), core::CheckVerdict::Paid, core::Credits::parse(u"0.9").value(), QStringLiteral("ok") }
                             .toHeader()),
            QByteArray(R"({"assignment":"a1","detail":"ok","paid":"0.9","state":"paid"})"));
    }

    void whatIsWrittenReadsBack()
    {
        const PutRequest put { digest('c'), 2, 9 };
        const auto read = PutRequest::fromHeader(put.toHeader());
        QVERIFY(read.ok());
        QCOMPARE(read->sha256, put.sha256);
        QCOMPARE(read->offset, 2);
        QCOMPARE(read->size, 9);
        // A dispute's question reads back whole; an unknown one is refused by field.
        for (const core::DisputeQuestion question : { core::DisputeQuestion { core::DisputeQuestion::Want::State, 5 },
                 core::DisputeQuestion { core::DisputeQuestion::Want::Trace, 2 },
                 core::DisputeQuestion { core::DisputeQuestion::Want::Operands, 0, 14, 3 } }) {
            const auto ask
                = CheckpointAsk::fromHeader(CheckpointAsk { QStringLiteral("v"), QStringLiteral("a"), question }.toHeader());
            QVERIFY(ask.ok());
            QVERIFY(ask->question == question);
        }
        const auto unknown = CheckpointAsk::fromHeader({ { fields::Verification, QStringLiteral("v") },
            { fields::Assignment, QStringLiteral("a") }, { fields::Want, QStringLiteral("weights") } });
        QVERIFY(!unknown.ok());
        QCOMPARE(unknown.error().field, QStringLiteral("want"));
        const CheckpointAnswer answer { QStringLiteral("v2"), digest('d') };
        QCOMPARE(CheckpointAnswer::fromHeader(answer.toHeader())->sha256, answer.sha256);
        const VerdictMessage verdict { QStringLiteral("a"), core::CheckVerdict::Slashed, {}, QStringLiteral("why") };
        QCOMPARE(VerdictMessage::fromHeader(verdict.toHeader())->detail, QStringLiteral("why"));
        QCOMPARE(VerdictMessage::fromHeader(verdict.toHeader())->state, core::CheckVerdict::Slashed);
        // Every verdict and every answer to RESULT reads back; a broker's word the protocol does not
        // have, or a payment that is not an amount, is refused by field (a node records none of it).
        for (const auto& name : core::namesOf<core::CheckVerdict>()) {
            const VerdictMessage each { QStringLiteral("a"), *core::fromName<core::CheckVerdict>(name),
                core::Credits::parse(u"2.25").value(), {} };
            const auto back = VerdictMessage::fromHeader(each.toHeader());
            QVERIFY(back.ok());
            QCOMPARE(core::nameOf(back->state), name);
            QCOMPARE(back->paid->toString(), QStringLiteral("2.25"));
        }
        for (const auto& name : core::namesOf<core::ResultVerdict>()) {
            const auto back = ResultReply::fromHeader({ { fields::Verdict, name } });
            QVERIFY(back.ok());
            QCOMPARE(core::nameOf(back->verdict), name);
            QVERIFY(!back->paid);
        }
        const QJsonObject strange { { fields::Assignment, QStringLiteral("a") }, { fields::State, QStringLiteral("pondering") } };
        QCOMPARE(VerdictMessage::fromHeader(strange).error().field, QStringLiteral("state"));
        // A payment that is not an amount is not believed; the verdict it came with still counts.
        for (const auto& paid : { QStringLiteral("lots"), QStringLiteral("-1"), QStringLiteral("1e9") }) {
            QJsonObject header { { fields::Assignment, QStringLiteral("a") }, { fields::State, QStringLiteral("paid") },
                { fields::Paid, paid }, { fields::Detail, QStringLiteral("checked") } };
            const auto told = VerdictMessage::fromHeader(header);
            QVERIFY(told.ok());
            QCOMPARE(told->state, core::CheckVerdict::Paid);
            QVERIFY(!told->paid);
            QVERIFY2(told->detail.startsWith(QStringLiteral("checked; the broker's paid")), qPrintable(told->detail));
            const auto reply
                = ResultReply::fromHeader({ { fields::Verdict, QStringLiteral("accepted") }, { fields::Paid, paid } });
            QVERIFY(reply.ok());
            QCOMPARE(reply->verdict, core::ResultVerdict::Accepted);
            QVERIFY(!reply->paid);
            QVERIFY(reply->problem.contains(paid));
        }
        QCOMPARE(
            ResultReply::fromHeader({ { fields::Verdict, QStringLiteral("maybe") } }).error().field, QStringLiteral("verdict"));
        core::broker::JobStatus job;
        job.id = QStringLiteral("j");
        job.state = core::broker::JobState::Cancelled;
        job.rounds = 3;
        job.weightsBlob = digest('e');
        const auto status = StatusReply::fromHeader({ { fields::Job, job.toJson() } });
        QVERIFY(status.ok());
        QCOMPARE(status->job.state, core::broker::JobState::Cancelled);
        QVERIFY(status->job.full);
        QVERIFY(!StatusReply::fromHeader({ { fields::Job, job.toPublicJson() } })->job.full);
        // A TASK's change comes with its base, or neither does.
        auto task = smallTask(digest('f'));
        auto plain = TaskMessage::fromHeader(task.toHeader());
        QVERIFY2(plain.ok(), qPrintable(plain.ok() ? QString() : plain.error().toString()));
        QVERIFY(!plain->startChange);
        QVERIFY(!task.toHeader().contains(fields::StartChangeBlob));
        task.startChange = core::broker::WeightsChange { digest('1'), digest('2') };
        QCOMPARE(TaskMessage::fromHeader(task.toHeader())->startChange, task.startChange);
        auto half = task.toHeader();
        half.remove(fields::StartChangeBase);
        QCOMPARE(TaskMessage::fromHeader(half).error().field, fields::StartChangeBlob);
    }

    // The swarm's additions (docs/SWARM.md, "Protocol"): WELCOME's swarmPort, TASK's offers, HAVE,
    // and NodeInfo's swarm endpoint, golden and read back; what is wrong in them is named.
    void swarmFields()
    {
        QCOMPARE(compact(Welcome { QStringLiteral("n1"), 1000, QStringLiteral("1"), {}, 6881 }.toHeader()),
            QByteArray(R"({"brokerVersion":"1","heartbeatMs":1000,"nodeId":"n1","swarmPort":6881})"));
        QCOMPARE(Welcome::fromHeader({ { fields::NodeId, QStringLiteral("n") } })->swarmPort, 0);
        QCOMPARE(compact(HaveMessage { digest('a'), false }.toHeader()),
            QByteArray(R"({"holding":false,"sha256":")") + QByteArray(64, 'a') + "\"}");
        QVERIFY(HaveMessage::fromHeader(HaveMessage { digest('a'), true }.toHeader())->holding);
        QCOMPARE(HaveMessage::fromHeader({ { fields::Sha256, digest('a').toHex() } }).error().field, fields::Holding);

        const SwarmOffer offer { digest('a'), digest('b'), "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n",
            { QStringLiteral("10.0.0.2:6881"), QStringLiteral("node.example:7000") } };
        QCOMPARE(compact(offer.toJson()),
            QByteArray(
                R"({"certificate":"-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n","peers":["10.0.0.2:6881",)"
                R"("node.example:7000"],"sha256":")")
                + QByteArray(64, 'a') + R"(","torrent":")" + QByteArray(64, 'b') + "\"}");
        auto task = smallTask(digest('a'));
        QVERIFY(!task.toHeader().contains(fields::Swarm)); // none: no field (the Python node's TASKs)
        task.swarm = { offer };
        const auto read = TaskMessage::fromHeader(task.toHeader());
        QVERIFY(read.ok());
        QCOMPARE(read->swarm, task.swarm);

        const auto refusedAt = [&](const QJsonObject& changed) {
            auto header = task.toHeader();
            header.insert(fields::Swarm, QJsonArray { changed });
            const auto refused = TaskMessage::fromHeader(header);
            return refused ? QString() : refused.error().field;
        };
        auto noPort = offer.toJson();
        noPort.insert(fields::Peers, QJsonArray { QStringLiteral("10.0.0.2") });
        QCOMPARE(refusedAt(noPort), QStringLiteral("swarm[0].peers"));
        auto notPem = offer.toJson();
        notPem.insert(fields::Certificate, QStringLiteral("hello"));
        QCOMPARE(refusedAt(notPem), QStringLiteral("swarm[0].certificate"));
        auto manyPeers = offer.toJson();
        QJsonArray peers;
        for (int i = 0; i <= SwarmOffer::MaxPeers; ++i)
            peers.append(QStringLiteral("10.0.0.%1:6881").arg(i));
        manyPeers.insert(fields::Peers, peers);
        QCOMPARE(refusedAt(manyPeers), QStringLiteral("swarm[0].peers"));
        // "seed": false only when false; absent (a broker before the field) means dial the seed.
        QVERIFY(offer.seed);
        auto later = offer;
        later.seed = false;
        QCOMPARE(later.toJson().value(fields::Seed), QJsonValue(false));
        QVERIFY(!SwarmOffer::fromJson(later.toJson())->seed);
        QVERIFY(SwarmOffer::fromJson(offer.toJson())->seed);
        auto notBool = offer.toJson();
        notBool.insert(fields::Seed, QStringLiteral("no"));
        QCOMPARE(refusedAt(notBool), QStringLiteral("swarm[0].seed"));

        core::NodeInfo node;
        node.nodeId = QStringLiteral("n");
        node.softwareVersion = QStringLiteral("0.1.0");
        node.runtimeProfile = QStringLiteral("p");
        node.swarm
            = core::SwarmEndpoint { QStringLiteral("-----BEGIN PUBLIC KEY-----\nMF\n-----END PUBLIC KEY-----\n"), 6881, {} };
        QCOMPARE(compact(node.toJson().value(QStringLiteral("swarm")).toObject()),
            QByteArray(R"({"key":"-----BEGIN PUBLIC KEY-----\nMF\n-----END PUBLIC KEY-----\n","port":6881})"));
        QCOMPARE(core::NodeInfo::fromJson(node.toJson())->swarm, node.swarm);
        auto json = node.toJson();
        json.insert(QStringLiteral("swarm"),
            QJsonObject { { QStringLiteral("key"), QStringLiteral("x") }, { QStringLiteral("port"), 1 } });
        QCOMPARE(core::NodeInfo::fromJson(json).error().field, QStringLiteral("swarm.key"));
        json.insert(QStringLiteral("swarm"),
            QJsonObject { { QStringLiteral("key"), node.swarm->key }, { QStringLiteral("port"), 70000 } });
        QCOMPARE(core::NodeInfo::fromJson(json).error().field, QStringLiteral("swarm.port"));
    }

    // A coded range reads back; a range whose coding is unknown, or that claims more than a range
    // may hold, is refused by the field; an older broker's WELCOME names no coding.
    void codedRangeHeaders()
    {
        const auto put = PutRequest::fromHeader(PutRequest { digest('c'), 0, 5, ZstdEncoding, 5 }.toHeader());
        QVERIFY(put.ok());
        QCOMPARE(put->encoding, ZstdEncoding);
        QCOMPARE(put->length, 5);
        QCOMPARE(PutRequest::fromHeader(PutRequest { digest('c'), 0, 5 }.toHeader())->encoding, QString());
        auto header = PutRequest { digest('c'), 0, 5, QStringLiteral("brotli"), 5 }.toHeader();
        QCOMPARE(PutRequest::fromHeader(header).error().field, fields::Encoding);
        header = PutRequest { digest('c'), 0, 5, ZstdEncoding, MaxChunkBytes + 1 }.toHeader();
        QCOMPARE(PutRequest::fromHeader(header).error().field, fields::Length);
        header.remove(fields::Length);
        QCOMPARE(ChunkHeader::fromHeader(header).error().field, fields::Length);
        // A GET may ask for a coding the broker does not know: it is answered plain, not refused.
        QVERIFY(GetRequest::fromHeader(GetRequest { digest('a'), 0, 1, QStringLiteral("brotli") }.toHeader()).ok());
        QVERIFY(Welcome::fromHeader({ { fields::NodeId, QStringLiteral("n") } })->encodings.isEmpty());
    }

    // decodeRange takes one frame of exactly the header's length, and nothing else: not a frame
    // that names no size, holds more or less, is followed by bytes, or is not zstd at all.
    void codedRangesDecodeExactlyOrAreRefused()
    {
        QByteArray plain;
        for (int i = 0; i < 200000; ++i)
            plain.append(char(i % 7 == 0 ? i / 7 : 0));
        const QByteArray frame = encodeRange(plain);
        QVERIFY(!frame.isEmpty() && frame.size() < plain.size());
        QCOMPARE(*decodeRange(frame, plain.size()), plain);
        QCOMPARE(decodeRange(frame, plain.size() - 1).error().field, QStringLiteral("payload"));
        QCOMPARE(decodeRange(frame, plain.size() + 1).error().field, QStringLiteral("payload"));
        QCOMPARE(decodeRange(frame + frame, plain.size()).error().field, QStringLiteral("payload"));
        QCOMPARE(decodeRange(frame.left(frame.size() - 3), plain.size()).error().field, QStringLiteral("payload"));
        QCOMPARE(decodeRange(QByteArray(64, 'x'), 64).error().field, QStringLiteral("payload"));
        QCOMPARE(decodeRange({}, 0).error().field, QStringLiteral("payload"));
        QCOMPARE(decodeRange(frame, MaxChunkBytes + 1).error().field, QStringLiteral("length"));
        // A frame of 64 MiB of zeros is a few KiB: a range may not make the decoder allocate it.
        const QByteArray bomb = encodeRange(QByteArray(64 << 20, '\0'));
        QVERIFY(bomb.size() < 65536);
        QCOMPARE(decodeRange(bomb, MaxChunkBytes).error().field, QStringLiteral("payload"));
        // A streamed frame names no content size: refused rather than decoded into a guess.
        QByteArray unsized(qsizetype(ZSTD_compressBound(size_t(plain.size()))), Qt::Uninitialized);
        ZSTD_CCtx* context = ZSTD_createCCtx();
        ZSTD_outBuffer out { unsized.data(), size_t(unsized.size()), 0 };
        ZSTD_inBuffer in { plain.constData(), size_t(plain.size()), 0 };
        // Fed first, ended after: the coder cannot know the size when the frame starts.
        QVERIFY(!ZSTD_isError(ZSTD_compressStream2(context, &out, &in, ZSTD_e_continue)));
        ZSTD_inBuffer none { nullptr, 0, 0 };
        QVERIFY(ZSTD_compressStream2(context, &out, &none, ZSTD_e_end) == 0);
        ZSTD_freeCCtx(context);
        unsized.truncate(qsizetype(out.pos));
        QCOMPARE(ZSTD_getFrameContentSize(unsized.constData(), size_t(unsized.size())), ZSTD_CONTENTSIZE_UNKNOWN);
        QCOMPARE(decodeRange(unsized, plain.size()).error().field, QStringLiteral("payload"));
        // Bytes that do not shrink go plain.
        QByteArray noise(4096, Qt::Uninitialized);
        for (qsizetype i = 0; i < noise.size(); ++i)
            noise[i] = char((i * 2654435761u) >> 13);
        QVERIFY(encodeRange(noise).isEmpty() || encodeRange(noise).size() < noise.size());
        QVERIFY(encodeRange({}).isEmpty());
    }

    void refusalsNameTheField()
    {
        QCOMPARE(GetRequest::fromHeader({ { fields::Offset, 0 }, { fields::Length, 1 } }).error().field, fields::Sha256);
        QCOMPARE(GetRequest::fromHeader(
                     { { fields::Sha256, digest('a').toHex() }, { fields::Offset, 0 }, { fields::Length, 2 * 1024 * 1024 } })
                     .error()
                     .field,
            fields::Length);
        QCOMPARE(PutRequest::fromHeader({ { fields::Sha256, digest('a').toHex() }, { fields::Offset, -1 }, { fields::Size, 1 } })
                     .error()
                     .field,
            fields::Offset);
        QCOMPARE(ResultRequest::fromHeader({ { fields::Assignment, QStringLiteral("a") } }).error().field, fields::Result);
        QVERIFY(ResultRequest::fromHeader({ { fields::Assignment, QStringLiteral("a") }, { fields::Result, QJsonObject {} } })
                    .error()
                    .field.startsWith(QStringLiteral("result.")));
        QVERIFY(RegisterRequest::fromHeader({ { fields::Node, QJsonObject { { QStringLiteral("bogus"), 1 } } } })
                    .error()
                    .field.startsWith(QStringLiteral("node.")));
        QCOMPARE(SubmitRequest::fromHeader({}).error().field, fields::Job);
        QCOMPARE(ListReply::fromHeader({}).error().field, fields::Jobs);
    }

    // TENSOR (docs/PROTOCOL.md, "Stage tasks"): "to" from a node, "from" from the broker, read back,
    // and refused by field: both or neither direction, a kind it does not know, an offset past the
    // tensor, a stage past the most a pipeline has.
    void tensorMessages()
    {
        TensorMessage out { QStringLiteral("a1"), true, 1, core::TensorKind::Gradient, 3, 2, 0, 4096 };
        QCOMPARE(compact(out.toHeader()),
            QByteArray(R"({"assignment":"a1","kind":"gradient","micro":2,"offset":0,"size":4096,"step":3,"to":1})"));
        auto back = TensorMessage::fromHeader(out.toHeader());
        QVERIFY(back);
        QVERIFY(back->outbound);
        QCOMPARE(back->kind, core::TensorKind::Gradient);
        QCOMPARE(back->stage, 1);
        auto in = out;
        in.outbound = false;
        in.kind = core::TensorKind::Squares;
        QCOMPARE(compact(in.toHeader()),
            QByteArray(R"({"assignment":"a1","from":1,"kind":"squares","micro":2,"offset":0,"size":4096,"step":3})"));
        QVERIFY(!TensorMessage::fromHeader(in.toHeader())->outbound);
        const Message message { Command::Tensor, out.toHeader(), QByteArray(4096, 'x') }; // the bytes in a fourth frame
        QCOMPARE(encode(message).size(), 4);
        QCOMPARE(decode(encode(message)).value(), message);
        QCOMPARE(commandName(Command::Tensor), QStringLiteral("TENSOR"));
        auto with = [&](const QString& key, const QJsonValue& value) {
            auto header = out.toHeader();
            header.insert(key, value);
            return TensorMessage::fromHeader(header);
        };
        QCOMPARE(with(QStringLiteral("from"), 0).error().field, QStringLiteral("to"));
        QCOMPARE(with(QStringLiteral("kind"), QStringLiteral("weights")).error().field, QStringLiteral("kind"));
        QCOMPARE(with(QStringLiteral("offset"), 4096).error().field, QStringLiteral("offset"));
        QCOMPARE(with(QStringLiteral("to"), 16).error().field, QStringLiteral("to"));
        QCOMPARE(with(QStringLiteral("size"), 0).error().field, QStringLiteral("size"));
        auto neither = out.toHeader();
        neither.remove(QStringLiteral("to"));
        QCOMPARE(TensorMessage::fromHeader(neither).error().field, QStringLiteral("to"));
    }

    // Serving's messages (docs/PROTOCOL.md, "Serving"): the table's headers, read back, and refused
    // by field.
    void servingMessages()
    {
        core::inference::Question question;
        question.prompt = "Hi";
        question.maxTokens = 3;
        question.temperature = 0.0;
        question.stop = { "%" };
        QCOMPARE(compact(AskRequest { QStringLiteral("j"), question, QStringLiteral("r1") }.toHeader()),
            QByteArray(
                R"({"jobId":"j","question":{"maxTokens":3,"prompt":"Hi","seed":0,"stop":["%"],"temperature":0},"requestId":"r1"})"));
        QCOMPARE(AskRequest::fromHeader(AskRequest { QStringLiteral("j"), question, {} }.toHeader())->question, question);
        QCOMPARE(compact(ServeRequest { QStringLiteral("a"), QStringLiteral("t1"), question }.toHeader()),
            QByteArray(
                R"({"assignment":"a","question":{"maxTokens":3,"prompt":"Hi","seed":0,"stop":["%"],"temperature":0},"ticket":"t1"})"));
        QCOMPARE(compact(TokensMessage { QStringLiteral("t1"), 2, { 72, 105 } }.toHeader()),
            QByteArray(R"({"from":2,"ticket":"t1","tokens":[72,105]})"));
        QCOMPARE(compact(HostingMessage { QStringLiteral("a"), false, QStringLiteral("no") }.toHeader()),
            QByteArray(R"({"assignment":"a","failure":"no","ready":false})"));
        const auto answer = AnswerRequest::fromHeader(
            { { QStringLiteral("ticket"), QStringLiteral("t1") }, { QStringLiteral("line"), QStringLiteral("{}") },
                { QStringLiteral("answer"), QJsonObject { { QStringLiteral("kind"), QStringLiteral("tessera-answer") } } } });
        QVERIFY(answer);
        QCOMPARE(answer->line, QByteArray("{}"));
        QVERIFY(AnswerRequest::fromHeader(
            { { QStringLiteral("ticket"), QStringLiteral("t1") }, { QStringLiteral("failure"), QStringLiteral("x") } }));
        QCOMPARE(AnswerRequest::fromHeader({ { QStringLiteral("ticket"), QStringLiteral("t1") } }).error().field,
            QStringLiteral("line"));
        // A question with a field it does not know, a token beyond a byte, no tokens, a bad request id.
        auto header = AskRequest { QStringLiteral("j"), question, {} }.toHeader();
        auto bad = header.value(QStringLiteral("question")).toObject();
        bad.insert(QStringLiteral("tokens"), 5);
        header.insert(QStringLiteral("question"), bad);
        QVERIFY(AskRequest::fromHeader(header).error().field.startsWith(QStringLiteral("question")));
        QCOMPARE(TokensMessage::fromHeader({ { QStringLiteral("from"), 0 }, { QStringLiteral("tokens"), QJsonArray { 256 } } })
                     .error()
                     .field,
            QStringLiteral("tokens[0]"));
        QCOMPARE(TokensMessage::fromHeader({ { QStringLiteral("from"), 0 }, { QStringLiteral("tokens"), QJsonArray {} } })
                     .error()
                     .field,
            QStringLiteral("tokens"));
        QCOMPARE(
            AskRequest::fromHeader(AskRequest { QStringLiteral("j"), question, QStringLiteral("a b") }.toHeader()).error().field,
            fields::RequestId);
    }

    // A path in a job or a task is for its writer's machine: a broker reading a SUBMIT or QUOTE,
    // and a node reading a TASK, forget it (a hostile owner's "/dev/zero" is never opened).
    void localFileNamesDoNotCrossTheWire()
    {
        auto spec = core::smallMlpJob(QStringLiteral("paths"));
        spec.dataset.source = core::DatasetSpec::Source::Chunks;
        spec.dataset.manifestSha256 = digest('c');
        spec.dataset.manifestFile = QStringLiteral("/dev/zero");
        spec.dataset.testSha256 = digest('d');
        spec.dataset.testFile = QStringLiteral("/etc/shadow");
        spec.dataset.trainSamples = 100;
        const auto submitted = SubmitRequest::fromHeader(SubmitRequest { spec, {} }.toHeader());
        QVERIFY(submitted.ok());
        QVERIFY(submitted->job.dataset.manifestFile.isEmpty() && submitted->job.dataset.testFile.isEmpty());
        QCOMPARE(submitted->job.dataset.manifestSha256, digest('c'));
        const auto quoted = QuoteRequest::fromHeader(QuoteRequest { spec }.toHeader());
        QVERIFY(quoted.ok() && quoted->job.dataset.manifestFile.isEmpty());

        auto task = smallTask(digest('a'));
        task.task.dataset = spec.dataset;
        task.task.dataChunks = { digest('e') };
        const auto read = TaskMessage::fromHeader(task.toHeader());
        QVERIFY2(read.ok(), qPrintable(read.ok() ? QString() : read.error().toString()));
        QVERIFY(read->task.dataset.manifestFile.isEmpty() && read->task.dataset.testFile.isEmpty());
        QCOMPARE(read->task.dataChunks, QList<core::Digest> { digest('e') });
    }
};

QTEST_GUILESS_MAIN(MessagesTest)
#include "tst_messages.moc"
