#include "messages.h"

#include <core/jsonreader.h>

#include <QJsonArray>
#include <QRegularExpression>

namespace tessera::net {

using core::JsonReader;
using core::Presence;

namespace {

// A field that must be a JSON object (a NodeInfo, a ShardTask, a signed document), read by its
// own parser; its errors carry its name in front.
core::Result<QJsonObject> objectField(const QJsonObject& header, const QString& key)
{
    const auto value = header.value(key);
    if (!value.isObject())
        return core::Error { key, QStringLiteral("is required (an object)") };
    return value.toObject();
}

core::Error nested(const QString& key, const core::Error& error)
{
    return { error.field.isEmpty() ? key : key + u'.' + error.field, error.message };
}

// The job spec a SUBMIT or a QUOTE carries.
core::Result<core::JobSpec> jobField(const QJsonObject& header)
{
    auto object = objectField(header, fields::Job);
    if (!object)
        return object.error();
    auto spec = core::JobSpec::fromJson(*object);
    if (!spec)
        return nested(fields::Job, spec.error());
    // A broker opens no path a client names.
    if (auto status = core::forgetLocalFiles(*spec); !status)
        return nested(fields::Job, status.error());
    return spec;
}

// A paginated reply's rows (each read by Record::fromJson) and where its page ends.
template<typename Record> core::Status readPage(const QJsonObject& header, const QString& field, QList<Record>& rows, Page& page)
{
    if (!header.value(field).isArray())
        return core::Error { field, QStringLiteral("is required (a list)") };
    for (const auto& value : header.value(field).toArray())
        rows.append(Record::fromJson(value.toObject()));
    page.read(header);
    return {};
}

// What a broker says it paid, as a decimal string ("10.8"): nothing when absent, and nothing,
// with why in `problem`, when it is not an amount or is negative (no broker pays a node less than
// nothing): the verdict it comes with still counts, its payment is not believed.
std::optional<core::Credits> paidIn(const QJsonObject& header, QString& problem)
{
    if (!header.contains(fields::Paid))
        return std::nullopt;
    const QString text = header.value(fields::Paid).toString();
    auto credits = core::Credits::parse(text);
    if (!credits || credits->isNegative()) {
        problem = QStringLiteral("the broker's paid '%1' is not an amount of credits").arg(text.left(40));
        return std::nullopt;
    }
    return *credits;
}

// Two counts nobody sends a negative or absurd value of: offsets and sizes of blobs, deadlines.
constexpr std::int64_t MaxCount = std::int64_t(1) << 50;

} // namespace

Envelope Envelope::of(const QJsonObject& header)
{
    return { header.value(fields::Id), header.value(fields::Owner).toString() };
}

QJsonObject RegisterRequest::toHeader() const
{
    return { { fields::Node, node.toJson() } };
}

core::Result<RegisterRequest> RegisterRequest::fromHeader(const QJsonObject& header)
{
    auto object = objectField(header, fields::Node);
    if (!object)
        return object.error();
    auto node = core::NodeInfo::fromJson(*object);
    if (!node)
        return nested(fields::Node, node.error());
    return RegisterRequest { *node };
}

QJsonObject Welcome::toHeader() const
{
    QJsonObject header { { fields::NodeId, nodeId }, { fields::HeartbeatMs, heartbeatMs },
        { fields::BrokerVersion, brokerVersion } };
    if (!encodings.isEmpty())
        header.insert(fields::Encodings, QJsonArray::fromStringList(encodings));
    if (swarmPort > 0)
        header.insert(fields::SwarmPort, swarmPort);
    if (!network.isEmpty())
        header.insert(fields::Network, network);
    if (logHeadMs > 0)
        header.insert(fields::LogHeadMs, logHeadMs);
    return header;
}

core::Result<Welcome> Welcome::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    Welcome welcome;
    welcome.nodeId = reader.string(fields::NodeId);
    welcome.heartbeatMs = int(reader.integer(fields::HeartbeatMs, 1, 3'600'000, Presence::Optional, 1000));
    welcome.brokerVersion = reader.string(fields::BrokerVersion, Presence::Optional);
    welcome.encodings = reader.stringList(fields::Encodings, Presence::Optional);
    welcome.swarmPort = int(reader.integer(fields::SwarmPort, 0, 65535, Presence::Optional));
    welcome.network = reader.string(fields::Network, Presence::Optional);
    welcome.logHeadMs = int(reader.integer(fields::LogHeadMs, 0, 3'600'000, Presence::Optional));
    static const QRegularExpression NetworkId(QStringLiteral("^[0-9a-f]{32}$"));
    if (!welcome.network.isEmpty() && !NetworkId.match(welcome.network).hasMatch())
        return core::Error { fields::Network, QStringLiteral("expected 32 hex digits") };
    if (!reader.ok())
        return reader.status().error();
    return welcome;
}

QJsonObject ReadyRequest::toHeader() const
{
    return { { fields::Slots, slots } };
}

core::Result<ReadyRequest> ReadyRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    ReadyRequest ready;
    ready.slots = int(reader.integer(fields::Slots, 0, 1024, Presence::Optional, 1));
    if (!reader.ok())
        return reader.status().error();
    return ready;
}

QJsonObject TaskMessage::toHeader() const
{
    QJsonObject header { { fields::Assignment, assignment }, { fields::DeadlineMs, static_cast<qint64>(deadlineMs) },
        { fields::Task, task.toJson() }, { fields::StartWeightsBlob, startWeightsBlob.toHex() } };
    if (startChange) {
        header.insert(fields::StartChangeBlob, startChange->blob.toHex());
        header.insert(fields::StartChangeBase, startChange->base.toHex());
    }
    if (!swarm.isEmpty()) {
        QJsonArray offers;
        for (const auto& offer : swarm)
            offers.append(offer.toJson());
        header.insert(fields::Swarm, offers);
    }
    return header;
}

QJsonObject SwarmOffer::toJson() const
{
    QJsonObject json { { fields::Sha256, sha256.toHex() }, { fields::Torrent, torrent.toHex() },
        { fields::Certificate, QString::fromLatin1(certificate) }, { fields::Peers, QJsonArray::fromStringList(peers) } };
    if (!seed)
        json.insert(fields::Seed, false); // absent means true: what a broker before the field meant
    return json;
}

core::Result<SwarmOffer> SwarmOffer::fromJson(const QJsonObject& json)
{
    JsonReader reader(json);
    SwarmOffer offer;
    offer.sha256 = reader.digest(fields::Sha256);
    offer.torrent = reader.digest(fields::Torrent);
    offer.certificate = reader.text(fields::Certificate, MaxCertificateBytes).toLatin1();
    offer.peers = reader.stringList(fields::Peers, Presence::Optional);
    offer.seed = reader.boolean(fields::Seed, Presence::Optional, true);
    if (reader.ok() && !offer.certificate.startsWith("-----BEGIN CERTIFICATE-----"))
        reader.fail(fields::Certificate, QStringLiteral("a PEM certificate"));
    if (offer.peers.size() > MaxPeers)
        reader.fail(fields::Peers, QStringLiteral("at most %1 items").arg(MaxPeers));
    for (const auto& peer : std::as_const(offer.peers)) {
        const auto colon = peer.lastIndexOf(u':');
        bool number = false;
        const int port = peer.mid(colon + 1).toInt(&number);
        if (colon < 1 || !number || port <= 0 || port > 65535 || peer.size() > 300) {
            reader.fail(fields::Peers, QStringLiteral("each is host:port"));
            break;
        }
    }
    if (!reader.ok())
        return reader.status().error();
    return offer;
}

QJsonObject HaveMessage::toHeader() const
{
    return { { fields::Sha256, sha256.toHex() }, { fields::Holding, holding } };
}

core::Result<HaveMessage> HaveMessage::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    HaveMessage have;
    have.sha256 = reader.digest(fields::Sha256);
    have.holding = reader.boolean(fields::Holding);
    if (!reader.ok())
        return reader.status().error();
    return have;
}

QJsonObject AskRequest::toHeader() const
{
    QJsonObject header { { fields::JobId, jobId }, { QStringLiteral("question"), question.toJson() } };
    if (!requestId.isEmpty())
        header.insert(fields::RequestId, requestId);
    return header;
}

core::Result<AskRequest> AskRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    AskRequest ask;
    ask.jobId = reader.string(fields::JobId);
    ask.requestId = reader.string(fields::RequestId, Presence::Optional);
    reader.object(u"question");
    if (!reader.ok())
        return reader.status().error();
    if (!ask.requestId.isEmpty() && !SubmitRequest::isRequestId(ask.requestId))
        return core::Error { fields::RequestId, QStringLiteral("1 to 64 of A-Z a-z 0-9 . _ : -") };
    // Checked against the job's maxTokens by the broker; here only the protocol's bound.
    auto read = core::inference::Question::read(header.value(u"question").toObject(), core::InferenceSpec::MaxTokens);
    if (!read)
        return read.error();
    ask.question = std::move(*read);
    return ask;
}

QJsonObject ServeRequest::toHeader() const
{
    return { { fields::Assignment, assignment }, { QStringLiteral("ticket"), ticket },
        { QStringLiteral("question"), question.toJson() } };
}

core::Result<ServeRequest> ServeRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    ServeRequest request;
    request.assignment = reader.string(fields::Assignment);
    request.ticket = reader.text(u"ticket", 64);
    reader.object(u"question");
    if (!reader.ok())
        return reader.status().error();
    auto read = core::inference::Question::read(header.value(u"question").toObject(), core::InferenceSpec::MaxTokens);
    if (!read)
        return read.error();
    request.question = std::move(*read);
    return request;
}

QJsonObject TokensMessage::toHeader() const
{
    QJsonArray list;
    for (const auto token : tokens)
        list.append(qint64(token));
    QJsonObject header { { QStringLiteral("from"), qint64(from) }, { QStringLiteral("tokens"), list } };
    if (!ticket.isEmpty())
        header.insert(QStringLiteral("ticket"), ticket);
    return header;
}

core::Result<TokensMessage> TokensMessage::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    TokensMessage message;
    message.ticket = reader.text(u"ticket", 64, Presence::Optional);
    message.from = reader.integer(u"from", 0, core::InferenceSpec::MaxTokens);
    message.tokens = reader.integerList(u"tokens", 0, 255, MaxTokens);
    if (reader.ok() && message.tokens.isEmpty())
        reader.fail(u"tokens", QStringLiteral("at least one token"));
    if (!reader.ok())
        return reader.status().error();
    return message;
}

QJsonObject AnswerRequest::toHeader() const
{
    QJsonObject header { { QStringLiteral("ticket"), ticket } };
    if (!failure.isEmpty()) {
        header.insert(QStringLiteral("failure"), failure);
        return header;
    }
    header.insert(QStringLiteral("line"), QString::fromUtf8(line));
    header.insert(QStringLiteral("answer"), answer);
    return header;
}

core::Result<AnswerRequest> AnswerRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    AnswerRequest answer;
    answer.ticket = reader.text(u"ticket", 64);
    answer.failure = reader.text(u"failure", 2000, Presence::Optional);
    if (answer.failure.isEmpty()) {
        answer.line = reader.text(u"line", 4 * core::InferenceSpec::MaxTokens + 64).toUtf8();
        reader.object(u"answer");
        answer.answer = header.value(u"answer").toObject();
    }
    if (!reader.ok())
        return reader.status().error();
    return answer;
}

QJsonObject HostingMessage::toHeader() const
{
    QJsonObject header { { fields::Assignment, assignment }, { QStringLiteral("ready"), ready } };
    if (!failure.isEmpty())
        header.insert(QStringLiteral("failure"), failure);
    return header;
}

core::Result<HostingMessage> HostingMessage::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    HostingMessage hosting;
    hosting.assignment = reader.string(fields::Assignment);
    hosting.ready = reader.boolean(u"ready");
    hosting.failure = reader.text(u"failure", 2000, Presence::Optional);
    if (!reader.ok())
        return reader.status().error();
    return hosting;
}

QJsonObject TensorMessage::toHeader() const
{
    return { { fields::Assignment, assignment }, { outbound ? QStringLiteral("to") : QStringLiteral("from"), qint64(stage) },
        { QStringLiteral("kind"), core::nameOf(kind) }, { QStringLiteral("step"), qint64(step) },
        { QStringLiteral("micro"), qint64(micro) }, { QStringLiteral("offset"), qint64(offset) },
        { QStringLiteral("size"), qint64(size) } };
}

core::Result<TensorMessage> TensorMessage::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    TensorMessage message;
    message.assignment = reader.text(fields::Assignment, 64);
    message.outbound = header.contains(QStringLiteral("to"));
    if (message.outbound == header.contains(QStringLiteral("from")))
        return core::Error { QStringLiteral("to"),
            QStringLiteral("a tensor goes to a stage or comes from one: one of to and from") };
    const auto maxStage = core::TrainingSpec::Pipeline::MaxStages - 1;
    message.stage = reader.integer(message.outbound ? u"to" : u"from", 0, maxStage);
    const auto kind = core::tensorKindNamed(reader.string(u"kind"));
    message.step = reader.integer(u"step", 0, core::ShardResult::MaxSteps);
    message.micro = reader.integer(u"micro", 0, core::TrainingSpec::Pipeline::MaxMicroBatches - 1);
    message.size = reader.integer(u"size", 1, MaxBytes);
    message.offset = reader.integer(u"offset", 0, MaxBytes);
    if (reader.ok() && !kind)
        reader.fail(u"kind", QStringLiteral("activation, gradient or squares"));
    if (reader.ok() && message.offset >= message.size)
        reader.fail(u"offset", QStringLiteral("past the tensor's %1 bytes").arg(message.size));
    if (!reader.ok())
        return reader.status().error();
    message.kind = *kind;
    return message;
}

QJsonObject StopMessage::toHeader() const
{
    return { { fields::Assignment, assignment }, { QStringLiteral("reason"), reason } };
}

core::Result<StopMessage> StopMessage::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    StopMessage message;
    message.assignment = reader.text(fields::Assignment, 64);
    message.reason = reader.text(u"reason", 2000, Presence::Optional);
    if (!reader.ok())
        return reader.status().error();
    return message;
}

core::Result<TaskMessage> TaskMessage::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    TaskMessage message;
    message.assignment = reader.string(fields::Assignment);
    message.deadlineMs = reader.integer(fields::DeadlineMs, -MaxCount, MaxCount, Presence::Optional);
    message.startWeightsBlob = reader.digest(fields::StartWeightsBlob);
    const auto changeBlob = reader.digest(fields::StartChangeBlob, Presence::Optional);
    const auto changeBase = reader.digest(fields::StartChangeBase, Presence::Optional);
    if (!reader.ok())
        return reader.status().error();
    if (changeBlob.isNull() != changeBase.isNull())
        return core::Error { fields::StartChangeBlob, QStringLiteral("comes with startChangeBase, or neither does") };
    if (!changeBlob.isNull())
        message.startChange = core::broker::WeightsChange { changeBlob, changeBase };
    const auto offers = reader.objectList(fields::Swarm, SwarmOffer::MaxOffers, Presence::Optional);
    for (qsizetype i = 0; i < offers.size(); ++i) {
        auto offer = SwarmOffer::fromJson(header.value(fields::Swarm).toArray().at(i).toObject());
        if (!offer)
            return nested(QStringLiteral("swarm[%1]").arg(i), offer.error());
        message.swarm.append(*offer);
    }
    if (!reader.ok())
        return reader.status().error();
    auto object = objectField(header, fields::Task);
    if (!object)
        return object.error();
    auto task = core::ShardTask::fromJson(*object);
    if (!task)
        return nested(fields::Task, task.error());
    message.task = *task;
    core::forgetLocalFiles(message.task.model, message.task.dataset); // a node opens no path a broker names
    if (message.task.inference)
        message.task.inference->promptsFile.clear();
    return message;
}

QJsonObject ResultRequest::toHeader() const
{
    return { { fields::Assignment, assignment }, { fields::Result, result.toJson() } };
}

core::Result<ResultRequest> ResultRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    ResultRequest request;
    request.assignment = reader.string(fields::Assignment);
    if (!reader.ok())
        return reader.status().error();
    auto object = objectField(header, fields::Result);
    if (!object)
        return object.error();
    auto result = core::ShardResult::fromJson(*object);
    if (!result)
        return nested(fields::Result, result.error());
    request.result = *result;
    return request;
}

QJsonObject ResultReply::toHeader() const
{
    QJsonObject header { { fields::Verdict, core::nameOf(verdict) } };
    if (paid)
        header.insert(fields::Paid, paid->toString());
    return header;
}

core::Result<ResultReply> ResultReply::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    ResultReply reply { reader.named<core::ResultVerdict>(fields::Verdict, QStringLiteral("a verdict")), {}, {} };
    if (!reader.ok())
        return reader.status().error();
    reply.paid = paidIn(header, reply.problem);
    return reply;
}

QJsonObject CommitRequest::toHeader() const
{
    return { { fields::Commitment, commitment } };
}

core::Result<CommitRequest> CommitRequest::fromHeader(const QJsonObject& header)
{
    auto object = objectField(header, fields::Commitment);
    if (!object)
        return object.error();
    return CommitRequest { *object };
}

QJsonObject CommitReply::toHeader() const
{
    return { { fields::Committed, committed } };
}

core::Result<CommitReply> CommitReply::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    CommitReply reply { reader.boolean(fields::Committed) };
    if (!reader.ok())
        return reader.status().error();
    return reply;
}

QJsonObject CheckpointAsk::toHeader() const
{
    QJsonObject header { { fields::Verification, verification }, { fields::Assignment, assignment } };
    using Want = core::DisputeQuestion::Want;
    if (question.want != Want::Operands)
        header.insert(fields::Checkpoint, static_cast<qint64>(question.checkpoint));
    if (question.want != Want::State)
        header.insert(fields::Want, core::nameOf(question.want));
    if (question.want == Want::Operands) {
        header.insert(fields::Step, static_cast<qint64>(question.step));
        header.insert(fields::Instruction, static_cast<qint64>(question.instruction));
    }
    return header;
}

core::Result<CheckpointAsk> CheckpointAsk::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    using Want = core::DisputeQuestion::Want;
    CheckpointAsk ask { reader.string(fields::Verification), reader.string(fields::Assignment), {} };
    ask.question.want = reader.named(fields::Want, QStringLiteral("a question"), Presence::Optional, Want::State);
    if (ask.question.want == Want::Operands) {
        ask.question.step = reader.integer(fields::Step, 1, core::ShardResult::MaxSteps);
        ask.question.instruction = reader.integer(fields::Instruction, 0, core::ShardResult::MaxInstructions);
    } else {
        ask.question.checkpoint = reader.integer(fields::Checkpoint, 0, core::ShardResult::MaxCheckpoints);
    }
    if (!reader.ok())
        return reader.status().error();
    return ask;
}

QJsonObject CheckpointAnswer::toHeader() const
{
    QJsonObject header { { fields::Verification, verification } };
    if (sha256)
        header.insert(fields::Sha256, sha256->toHex());
    return header;
}

core::Result<CheckpointAnswer> CheckpointAnswer::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    CheckpointAnswer answer;
    answer.verification = reader.string(fields::Verification);
    if (reader.has(fields::Sha256))
        answer.sha256 = reader.digest(fields::Sha256);
    if (!reader.ok())
        return reader.status().error();
    return answer;
}

QJsonObject VerdictMessage::toHeader() const
{
    QJsonObject header { { fields::Assignment, assignment }, { fields::State, core::nameOf(state) }, { fields::Detail, detail } };
    if (paid)
        header.insert(fields::Paid, paid->toString());
    return header;
}

core::Result<VerdictMessage> VerdictMessage::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    VerdictMessage verdict { reader.string(fields::Assignment),
        reader.named<core::CheckVerdict>(fields::State, QStringLiteral("a verdict")), {},
        reader.string(fields::Detail, Presence::Optional) };
    if (!reader.ok())
        return reader.status().error();
    QString problem;
    verdict.paid = paidIn(header, problem);
    if (!problem.isEmpty())
        verdict.detail = verdict.detail.isEmpty() ? problem : verdict.detail + QStringLiteral("; ") + problem;
    return verdict;
}

QJsonObject GetRequest::toHeader() const
{
    QJsonObject header { { fields::Sha256, sha256.toHex() }, { fields::Offset, static_cast<qint64>(offset) },
        { fields::Length, static_cast<qint64>(length) } };
    if (!encoding.isEmpty())
        header.insert(fields::Encoding, encoding);
    return header;
}

core::Result<GetRequest> GetRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    GetRequest request { reader.digest(fields::Sha256), reader.integer(fields::Offset, 0, MaxCount),
        reader.integer(fields::Length, 0, MaxChunkBytes), reader.string(fields::Encoding, Presence::Optional) };
    if (!reader.ok())
        return reader.status().error();
    return request;
}

template<Command C> QJsonObject BlobRange<C>::toHeader() const
{
    QJsonObject header { { fields::Sha256, sha256.toHex() }, { fields::Offset, static_cast<qint64>(offset) },
        { fields::Size, static_cast<qint64>(size) } };
    if (!encoding.isEmpty()) {
        header.insert(fields::Encoding, encoding);
        header.insert(fields::Length, static_cast<qint64>(length));
    }
    return header;
}

template<Command C> core::Result<BlobRange<C>> BlobRange<C>::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    BlobRange range { reader.digest(fields::Sha256), reader.integer(fields::Offset, 0, MaxCount),
        reader.integer(fields::Size, 0, MaxCount), reader.string(fields::Encoding, Presence::Optional) };
    if (!range.encoding.isEmpty()) {
        if (range.encoding != ZstdEncoding)
            reader.fail(
                fields::Encoding, QStringLiteral("unknown encoding \"%1\" (zstd is the one there is)").arg(range.encoding));
        range.length = reader.integer(fields::Length, 0, MaxChunkBytes);
    }
    if (!reader.ok())
        return reader.status().error();
    return range;
}

template struct BlobRange<Command::Chunk>;
template struct BlobRange<Command::Put>;

QJsonObject PutReply::toHeader() const
{
    return { { fields::Sha256, sha256.toHex() }, { fields::Received, static_cast<qint64>(received) },
        { fields::Complete, complete } };
}

core::Result<PutReply> PutReply::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    PutReply reply { reader.digest(fields::Sha256), reader.integer(fields::Received, 0, MaxCount),
        reader.boolean(fields::Complete) };
    if (!reader.ok())
        return reader.status().error();
    return reply;
}

bool SubmitRequest::isRequestId(const QString& id)
{
    if (id.isEmpty() || id.size() > 64)
        return false;
    for (const QChar c : id) {
        const char16_t u = c.unicode();
        const bool allowed = (u >= u'a' && u <= u'z') || (u >= u'A' && u <= u'Z') || (u >= u'0' && u <= u'9') || u == u'.'
            || u == u'_' || u == u':' || u == u'-';
        if (!allowed)
            return false;
    }
    return true;
}

QJsonObject SubmitRequest::toHeader() const
{
    QJsonObject header { { fields::Job, job.toJson() } };
    if (!requestId.isEmpty())
        header.insert(fields::RequestId, requestId);
    return header;
}

core::Result<SubmitRequest> SubmitRequest::fromHeader(const QJsonObject& header)
{
    auto spec = jobField(header);
    if (!spec)
        return spec.error();
    SubmitRequest request { *spec, {} };
    if (header.contains(fields::RequestId)) {
        const auto value = header.value(fields::RequestId);
        if (!value.isString() || !isRequestId(value.toString()))
            return core::Error { fields::RequestId, QStringLiteral("must be 1 to 64 of A-Z a-z 0-9 . _ : -") };
        request.requestId = value.toString();
    }
    return request;
}

QJsonObject SubmitReply::toHeader() const
{
    return { { fields::JobId, jobId } };
}

core::Result<SubmitReply> SubmitReply::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    SubmitReply reply { reader.string(fields::JobId) };
    if (!reader.ok())
        return reader.status().error();
    return reply;
}

QJsonObject JobRequest::toHeader() const
{
    return { { fields::JobId, jobId } };
}

core::Result<JobRequest> JobRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    JobRequest request { reader.string(fields::JobId) };
    if (!reader.ok())
        return reader.status().error();
    return request;
}

core::Result<StatusReply> StatusReply::fromHeader(const QJsonObject& header)
{
    auto object = objectField(header, fields::Job);
    if (!object)
        return object.error();
    return StatusReply { core::broker::JobStatus::fromJson(*object) };
}

QJsonObject PageRequest::toHeader() const
{
    QJsonObject header { { fields::Offset, static_cast<qint64>(offset) }, { fields::Limit, static_cast<qint64>(limit) } };
    if (all)
        header.insert(fields::All, true);
    return header;
}

core::Result<PageRequest> PageRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    PageRequest request;
    request.offset = reader.integer(fields::Offset, 0, MaxCount, Presence::Optional, 0);
    request.limit = reader.integer(fields::Limit, 1, MaxLimit, Presence::Optional, DefaultLimit);
    request.all = reader.boolean(fields::All, Presence::Optional, false);
    if (!reader.ok())
        return reader.status().error();
    return request;
}

void Page::read(const QJsonObject& header)
{
    total = header.value(fields::Total).toInteger();
    if (header.value(fields::Next).isDouble())
        next = header.value(fields::Next).toInteger();
}

core::Result<ListReply> ListReply::fromHeader(const QJsonObject& header)
{
    ListReply reply;
    if (auto read = readPage(header, fields::Jobs, reply.jobs, reply.page); !read)
        return read.error();
    return reply;
}

QJsonObject QuoteRequest::toHeader() const
{
    return { { fields::Job, job.toJson() } };
}

core::Result<QuoteRequest> QuoteRequest::fromHeader(const QJsonObject& header)
{
    auto spec = jobField(header);
    if (!spec)
        return spec.error();
    return QuoteRequest { *spec };
}

QJsonObject QuoteReply::toHeader() const
{
    return { { fields::Quote, quote.toJson() } };
}

core::Result<QuoteReply> QuoteReply::fromHeader(const QJsonObject& header)
{
    auto object = objectField(header, fields::Quote);
    if (!object)
        return object.error();
    return QuoteReply { core::Quote::fromJson(*object) };
}

QJsonObject BalanceRequest::toHeader() const
{
    return account.isEmpty() ? QJsonObject {} : QJsonObject { { fields::Account, account } };
}

core::Result<BalanceRequest> BalanceRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    BalanceRequest request { reader.string(fields::Account, Presence::Optional) };
    if (!reader.ok())
        return reader.status().error();
    return request;
}

QJsonObject LedgerReply::toHeader() const
{
    return { { fields::Consistent, consistent }, { fields::Problem, problem }, { fields::Minted, minted },
        { fields::SigningKey, signingKey } };
}

core::Result<LedgerReply> LedgerReply::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    LedgerReply reply { reader.boolean(fields::Consistent), reader.string(fields::Problem, Presence::Optional),
        reader.string(fields::Minted, Presence::Optional), reader.string(fields::SigningKey, Presence::Optional) };
    if (!reader.ok())
        return reader.status().error();
    return reply;
}

core::Result<NodesReply> NodesReply::fromHeader(const QJsonObject& header)
{
    NodesReply reply;
    if (auto read = readPage(header, fields::Nodes, reply.nodes, reply.page); !read)
        return read.error();
    return reply;
}

QJsonObject ReceiptRequest::toHeader() const
{
    return { { fields::Cause, cause } };
}

core::Result<ReceiptRequest> ReceiptRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    ReceiptRequest request { reader.string(fields::Cause) };
    if (!reader.ok())
        return reader.status().error();
    return request;
}

namespace {

// A log's size or index: a JSON integer, 0 to 2^53.
constexpr std::int64_t MaxLogIndex = std::int64_t(1) << 53;

} // namespace

QJsonObject LogHeadRequest::toHeader() const
{
    QJsonObject header;
    if (from)
        header.insert(fields::From, qint64(*from));
    return header;
}

core::Result<LogHeadRequest> LogHeadRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    LogHeadRequest request;
    if (reader.has(fields::From))
        request.from = reader.integer(fields::From, 0, MaxLogIndex);
    if (!reader.ok())
        return reader.status().error();
    return request;
}

QJsonObject LogProofRequest::toHeader() const
{
    QJsonObject header { { fields::Index, qint64(index) } };
    if (size)
        header.insert(fields::Size, qint64(*size));
    return header;
}

core::Result<LogProofRequest> LogProofRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    LogProofRequest request;
    request.index = reader.integer(fields::Index, 0, MaxLogIndex);
    if (reader.has(fields::Size))
        request.size = reader.integer(fields::Size, 1, MaxLogIndex);
    if (!reader.ok())
        return reader.status().error();
    return request;
}

QJsonObject LogConsistencyRequest::toHeader() const
{
    return { { fields::From, qint64(from) }, { fields::To, qint64(to) } };
}

core::Result<LogConsistencyRequest> LogConsistencyRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    LogConsistencyRequest request { reader.integer(fields::From, 0, MaxLogIndex), reader.integer(fields::To, 0, MaxLogIndex) };
    if (!reader.ok())
        return reader.status().error();
    return request;
}

QJsonObject LogEntriesRequest::toHeader() const
{
    return { { fields::From, qint64(from) }, { fields::Limit, limit } };
}

core::Result<LogEntriesRequest> LogEntriesRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    LogEntriesRequest request { reader.integer(fields::From, 0, MaxLogIndex),
        int(reader.integer(fields::Limit, 1, 256, Presence::Optional, 256)) };
    if (!reader.ok())
        return reader.status().error();
    return request;
}

QJsonObject RecordRequest::toHeader() const
{
    return { { fields::Sha256, sha256.toHex() } };
}

core::Result<RecordRequest> RecordRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    RecordRequest request { reader.digest(fields::Sha256) };
    if (!reader.ok())
        return reader.status().error();
    return request;
}

QJsonObject StakeRequest::toHeader() const
{
    return { { fields::Request, request } };
}

core::Result<StakeRequest> StakeRequest::fromHeader(const QJsonObject& header)
{
    auto object = objectField(header, fields::Request);
    if (!object)
        return object.error();
    return StakeRequest { *object };
}

QJsonObject VerificationsRequest::toHeader() const
{
    auto header = page.toHeader();
    header.insert(fields::JobId, jobId);
    return header;
}

core::Result<VerificationsRequest> VerificationsRequest::fromHeader(const QJsonObject& header)
{
    JsonReader reader(header);
    VerificationsRequest request { reader.string(fields::JobId, Presence::Optional), {} };
    if (!reader.ok())
        return reader.status().error();
    auto page = PageRequest::fromHeader(header);
    if (!page)
        return page.error();
    request.page = *page;
    return request;
}

core::Result<VerificationsReply> VerificationsReply::fromHeader(const QJsonObject& header)
{
    VerificationsReply reply;
    if (auto read = readPage(header, fields::Verifications, reply.checks, reply.page); !read)
        return read.error();
    return reply;
}

} // namespace tessera::net
