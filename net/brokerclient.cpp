#include "brokerclient.h"

#include "blobcoding.h"
#include "framing.h"
#include "messages.h"

#include <core/blobstore.h>
#include <core/datasetchunks.h>
#include <core/readfile.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QUuid>

#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace tessera::net {

namespace {

// An ERROR reply as the error it names.
core::Error refusal(const Message& reply)
{
    return core::Error { reply.header.value(fields::Code).toString(), reply.header.value(fields::Message).toString() };
}

} // namespace

struct BrokerClient::Private {
    BrokerAddress broker;
    int timeoutMs;
    zmq::context_t context;
    zmq::socket_t socket { context, zmq::socket_type::dealer };
    qint64 nextId = 1;
    QString plaintextAccount; // named as "owner" in every request to a plaintext broker
    std::optional<CurveKeys> keys;
    std::optional<CurveKeys> ownKeys; // under CURVE without keys: one new key for every broker
    QList<BrokerAddress> others; // of the network, tried in order
};

namespace {

// Whether a reply, or the lack of one, sends the client to the network's next broker.
bool movesOn(const core::Error& error)
{
    return error.field == errors::Standby || error.field == u"broker";
}

} // namespace

BrokerClient::BrokerClient(BrokerAddress broker, std::optional<CurveKeys> keys, int timeoutMs)
    : d(std::make_unique<Private>())
{
    d->timeoutMs = timeoutMs;
    d->keys = std::move(keys);
    connectTo(broker);
}

void BrokerClient::connectTo(const BrokerAddress& broker)
{
    d->broker = broker;
    d->socket = zmq::socket_t(d->context, zmq::socket_type::dealer);
    d->socket.set(zmq::sockopt::linger, 0);
    d->plaintextAccount.clear();
    if (!d->broker.serverKey.isEmpty()) {
        if (!d->keys && !d->ownKeys)
            d->ownKeys = CurveKeys::generate();
        const auto own = d->keys ? *d->keys : *d->ownKeys;
        d->socket.set(zmq::sockopt::curve_serverkey, d->broker.serverKey.toStdString());
        d->socket.set(zmq::sockopt::curve_publickey, own.publicKey.toStdString());
        d->socket.set(zmq::sockopt::curve_secretkey, own.secretKey.toStdString());
    } else if (d->keys) {
        d->plaintextAccount = d->keys->publicKey;
    }
    d->socket.connect(d->broker.endpoint.toStdString());
}

void BrokerClient::setOtherBrokers(const QList<BrokerAddress>& others)
{
    d->others = others;
}

QString BrokerClient::endpoint() const
{
    return d->broker.endpoint;
}

bool BrokerClient::moveOn()
{
    if (d->others.isEmpty())
        return false;
    connectTo(d->others.takeFirst());
    return true;
}

BrokerClient::~BrokerClient() = default;

void BrokerClient::send(const Message& message)
{
    detail::sendMessage(d->socket, message);
}

core::Result<Message> BrokerClient::receive()
{
    for (;;) {
        zmq::pollitem_t item { d->socket.handle(), 0, ZMQ_POLLIN, 0 };
        zmq::poll(&item, 1, std::chrono::milliseconds(d->timeoutMs));
        if (!(item.revents & ZMQ_POLLIN))
            return core::Error { QStringLiteral("broker"),
                QStringLiteral("no answer from %1 within %2 s (is it running, and is the key right?)")
                    .arg(d->broker.endpoint, QString::number(d->timeoutMs / 1000)) };
        auto received = detail::receiveFrames(d->socket);
        if (!received)
            continue;
        auto message = decode(received->frames);
        if (!message)
            return core::Error { QStringLiteral("broker"),
                QStringLiteral("the broker sent something unreadable: %1").arg(message.error().message) };
        if (message->command == Command::Heartbeat)
            continue;
        return *message;
    }
}

qint64 BrokerClient::sendRequest(Command command, QJsonObject header)
{
    const qint64 id = d->nextId++;
    header.insert(fields::Id, id);
    if (!d->plaintextAccount.isEmpty() && !header.contains(fields::Owner))
        header.insert(fields::Owner, d->plaintextAccount);
    send({ command, header, {} });
    return id;
}

core::Result<QString> BrokerClient::submit(const core::JobSpec& spec, QString requestId, int attempts)
{
    if (requestId.isEmpty())
        requestId = QUuid::createUuid().toString(QUuid::WithoutBraces);
    const QJsonObject header = SubmitRequest { spec, requestId }.toHeader();
    QList<qint64> asked;
    core::Error lastError;
    for (int attempt = 0; attempt < std::max(1, attempts); ++attempt) {
        asked.append(sendRequest(Command::Submit, header));
        for (;;) {
            auto reply = receive();
            if (!reply) {
                lastError = reply.error();
                break; // asked again under the same name: one job however many times
            }
            if (!asked.contains(reply->header.value(fields::Id).toInteger(-1)))
                continue; // a late answer to an earlier request
            if (reply->command == Command::Error) {
                const auto refused = refusal(*reply);
                if (refused.field == errors::Standby && moveOn()) {
                    asked.append(sendRequest(Command::Submit, header)); // the files are the same blobs
                    continue;
                }
                return refused;
            }
            auto submitted = SubmitReply::fromHeader(reply->header);
            if (!submitted)
                return submitted.error();
            return submitted->jobId;
        }
    }
    return core::Error { lastError.field,
        QStringLiteral("%1, asked %2 times; if the broker created the job, submitting again with --request-id %3 "
                       "gives that job and never a second one")
            .arg(lastError.message)
            .arg(std::max(1, attempts))
            .arg(requestId) };
}

core::Result<QJsonObject> BrokerClient::request(Command command, QJsonObject header)
{
    for (;;) {
        const qint64 id = sendRequest(command, header);
        auto reply = receive();
        while (reply && reply->header.value(fields::Id).toInteger(-1) != id)
            reply = receive(); // a late answer to an earlier request
        const auto error = !reply              ? std::optional<core::Error>(reply.error())
            : reply->command == Command::Error ? std::optional<core::Error>(refusal(*reply))
                                               : std::nullopt;
        if (!error)
            return reply->header;
        if (!movesOn(*error) || !moveOn())
            return *error;
    }
}

core::Result<QJsonObject> BrokerClient::streamingRequest(
    Command command, QJsonObject header, const std::function<void(const Message&)>& onPart)
{
    const qint64 id = sendRequest(command, header);
    for (;;) {
        auto reply = receive();
        if (!reply)
            return reply.error();
        if (reply->header.value(fields::Id).toInteger(-1) != id)
            continue; // a late answer to an earlier request, or a heartbeat
        if (reply->command == Command::Error)
            return refusal(*reply);
        if (reply->command == Command::Ok)
            return reply->header;
        if (onPart)
            onPart(*reply);
    }
}

core::Result<core::Digest> BrokerClient::upload(
    const QByteArray& bytes, const std::function<void(std::int64_t, std::int64_t)>& progress)
{
    const auto digest = core::Digest::ofBytes(bytes);
    std::int64_t sent = 0;
    int inFlight = 0;
    bool complete = false;
    while (!complete) {
        while (inFlight < MaxCreditChunks && sent < bytes.size()) {
            const auto length = std::min<std::int64_t>(MaxChunkBytes, bytes.size() - sent);
            send({ Command::Put, PutRequest { digest, sent, bytes.size() }.toHeader(), bytes.mid(sent, length) });
            sent += length;
            ++inFlight;
        }
        auto reply = receive();
        const auto error = !reply              ? std::optional<core::Error>(reply.error())
            : reply->command == Command::Error ? std::optional<core::Error>(refusal(*reply))
                                               : std::nullopt;
        if (error) {
            if (!movesOn(*error) || !moveOn())
                return *error;
            sent = 0; // the whole blob again, to the next broker
            inFlight = 0;
            continue;
        }
        auto put = PutReply::fromHeader(reply->header);
        if (!put)
            return put.error();
        --inFlight;
        complete = put->complete;
        if (progress)
            progress(put->received, bytes.size());
    }
    return digest;
}

core::Result<QByteArray> BrokerClient::jobWeights(const QString& jobId)
{
    auto reply = request(Command::Status, JobRequest { jobId }.toHeader());
    if (!reply)
        return reply.error();
    auto status = StatusReply::fromHeader(*reply);
    if (!status)
        return status.error();
    // Another identity sees only a job's progress (docs/PROTOCOL.md, "Who may do what").
    if (!status->job.full)
        return core::Error { QStringLiteral("forbidden"),
            QStringLiteral("job %1 is not yours: only its owner may fetch its weights").arg(jobId) };
    if (status->job.weightsBlob.isNull())
        return core::Error { QStringLiteral("jobId"), QStringLiteral("the broker named no weights for job %1").arg(jobId) };
    return download(status->job.weightsBlob);
}

core::Result<QByteArray> BrokerClient::download(
    const core::Digest& digest, const std::function<void(std::int64_t, std::int64_t)>& progress)
{
    QByteArray bytes;
    core::Sha256 hasher; // as the ranges arrive, so that checking overlaps the transfer
    std::int64_t size = -1;
    std::int64_t requested = 0;
    int inFlight = 0;
    auto ask = [&](std::int64_t length) {
        send({ Command::Get, GetRequest { digest, requested, length, ZstdEncoding }.toHeader(), {} });
        requested += length;
        ++inFlight;
    };
    ask(MaxChunkBytes);
    while (size < 0 || bytes.size() < size) {
        if (size > 0 && bytes.capacity() < size)
            bytes.reserve(size);
        auto reply = receive();
        if (!reply)
            return reply.error();
        if (reply->command == Command::Error)
            return refusal(*reply);
        if (reply->command != Command::Chunk)
            continue;
        auto chunk = ChunkHeader::fromHeader(reply->header);
        if (!chunk)
            return chunk.error();
        --inFlight;
        if (chunk->offset != bytes.size())
            return core::Error { QStringLiteral("broker"), QStringLiteral("blob ranges arrived out of order") };
        size = chunk->size;
        if (size > core::BlobStore::MaxBlobBytes)
            return core::Error { QStringLiteral("broker"), QStringLiteral("the broker named a blob of more than 1 GiB") };
        const auto range = rangeOf(*chunk, reply->payload);
        if (!range)
            return core::Error { QStringLiteral("broker"), range.error().message };
        hasher.addData(*range);
        bytes.append(*range);
        if (progress)
            progress(bytes.size(), size);
        while (inFlight < MaxCreditChunks && requested < size)
            ask(std::min<std::int64_t>(MaxChunkBytes, size - requested));
    }
    if (hasher.result() != digest)
        return core::Error { QStringLiteral("sha256"),
            QStringLiteral("the downloaded bytes do not hash to %1").arg(digest.toHex()) };
    return bytes;
}

core::Status BrokerClient::uploadJobFiles(core::JobSpec& spec, const QString& baseDirectory,
    const std::function<void(const QString&, std::int64_t)>& report,
    const std::function<void(std::int64_t, std::int64_t)>& progress)
{
    const QDir base(baseDirectory);
    auto uploadFile = [&](QString& name, core::Digest& digest) -> core::Status {
        if (name.isEmpty())
            return {};
        QFile blob(base.absoluteFilePath(name));
        if (!blob.open(QIODevice::ReadOnly))
            return core::Error { name, QStringLiteral("cannot read the file") };
        if (blob.size() > (qint64(1) << 30))
            return core::Error { name, QStringLiteral("files of more than 1 GiB are not accepted") };
        if (report)
            report(name, blob.size());
        auto uploaded = upload(blob.readAll(), progress);
        if (!uploaded)
            return uploaded.error();
        digest = *uploaded;
        name.clear();
        return {};
    };
    // A chunked dataset: every chunk its manifest lists (beside the manifest), then the manifest.
    if (!spec.dataset.manifestFile.isEmpty()) {
        const QString manifestPath = base.absoluteFilePath(spec.dataset.manifestFile);
        if (const QFileInfo info(manifestPath); !info.isFile() || info.size() > core::DatasetManifest::MaxManifestBytes)
            return core::Error { spec.dataset.manifestFile, QStringLiteral("is not a manifest file (of at most 16 MiB)") };
        auto text = core::readFile(manifestPath);
        if (!text)
            return core::Error { spec.dataset.manifestFile, text.error().message };
        auto manifest = core::DatasetManifest::fromJson(*text);
        if (!manifest)
            return core::Error { spec.dataset.manifestFile, manifest.error().toString() };
        // Each chunk is a file in the manifest's folder (the manifest's parser allows no other
        // name), hashed here before it goes: a manifest that names another file uploads nothing.
        const QDir chunkBase = QFileInfo(manifestPath).dir();
        for (const auto& chunk : manifest->chunks) {
            if (chunk.file.isEmpty())
                return core::Error { spec.dataset.manifestFile,
                    QStringLiteral("chunk %1 names no file to upload").arg(chunk.sha256.toHex()) };
            const QFileInfo info(chunkBase.filePath(chunk.file));
            if (!info.isFile() || info.size() != chunk.bytes)
                return core::Error {
                    chunk.file,
                    QStringLiteral("is not a file of the %1 bytes the manifest says: build the manifest again").arg(chunk.bytes)
                };
            auto bytes = core::readFile(info.filePath());
            if (!bytes)
                return core::Error { chunk.file, bytes.error().message };
            if (core::Digest::ofBytes(*bytes) != chunk.sha256)
                return core::Error { chunk.file,
                    QStringLiteral("the file's SHA-256 is not the %1 the manifest says: build the manifest again")
                        .arg(chunk.sha256.toHex()) };
            if (report)
                report(chunkBase.filePath(chunk.file), bytes->size());
            if (auto uploaded = upload(*bytes, progress); !uploaded)
                return uploaded.error();
        }
        // The manifest as it was read and checked, not read again.
        if (report)
            report(spec.dataset.manifestFile, text->size());
        auto uploaded = upload(*text, progress);
        if (!uploaded)
            return uploaded.error();
        spec.dataset.manifestSha256 = *uploaded;
        spec.dataset.manifestFile.clear();
    }
    for (auto status : { uploadFile(spec.model.scriptFile, spec.model.scriptSha256),
             uploadFile(spec.model.initialWeightsFile, spec.model.initialWeightsSha256),
             uploadFile(spec.dataset.trainFile, spec.dataset.trainSha256),
             uploadFile(spec.dataset.testFile, spec.dataset.testSha256),
             uploadFile(spec.inference.promptsFile, spec.inference.promptsSha256) }) {
        if (!status)
            return status;
    }
    return {};
}

} // namespace tessera::net
