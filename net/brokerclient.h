#pragma once

#include "curvekeys.h"
#include "protocol.h"

#include <core/error.h>
#include <core/hash.h>
#include <core/jobspec.h>

#include <QJsonObject>

#include <functional>
#include <memory>
#include <optional>

namespace tessera::net {

// A job owner's connection to a broker: blocking requests with a timeout, and blob transfer with
// credit-based flow control. For tessera-job and the app's submit panel; one thread at a time.
class BrokerClient {
public:
    // keys: the caller's identity. Under CURVE (the address has #KEY) it connects with them (without,
    // with a new key each time: nobody's account); to a plaintext broker it names their public key as
    // the account it acts for ("owner" in every request).
    BrokerClient(BrokerAddress broker, std::optional<CurveKeys> keys, int timeoutMs = 15000);
    ~BrokerClient();
    BrokerClient(const BrokerClient&) = delete;
    BrokerClient& operator=(const BrokerClient&) = delete;

    // The network's other brokers (several brokers on one database, docs/STORE.md): where this
    // one answers a request, an upload or a submit with ERROR standby, or does not answer in
    // time, the client connects to the next of them and asks again there.
    void setOtherBrokers(const QList<BrokerAddress>& others);
    // The broker it talks to now.
    QString endpoint() const;

    // Sends a request and waits for its OK; an ERROR reply or a timeout comes back as an Error.
    core::Result<QJsonObject> request(Command command, QJsonObject header);
    // A request whose answer comes in parts before its OK (ASK: TOKENS): each message that carries
    // the request's id and is neither OK nor ERROR goes to onPart, and the timeout counts from the
    // last message. Not asked again elsewhere: a repeat is the caller's (ASK's requestId).
    core::Result<QJsonObject> streamingRequest(
        Command command, QJsonObject header, const std::function<void(const Message&)>& onPart);

    // SUBMIT (docs/PROTOCOL.md, "Submitting twice"): named by requestId (a new one when empty), and
    // asked again under the same name when no answer comes within the timeout, up to `attempts`
    // times in all, so that a broker that was slow to hear creates one job however often it is
    // asked. The client waits as long as the broker sends HEARTBEATs (it is building the weights).
    core::Result<QString> submit(const core::JobSpec& spec, QString requestId = {}, int attempts = 3);

    core::Result<core::Digest> upload(
        const QByteArray& bytes, const std::function<void(std::int64_t, std::int64_t)>& progress = {});
    core::Result<QByteArray> download(
        const core::Digest& digest, const std::function<void(std::int64_t, std::int64_t)>& progress = {});
    // A job's newest global weights (what torch.load reads), as the broker's STATUS names them.
    core::Result<QByteArray> jobWeights(const QString& jobId);

    // Uploads the files a job names (its TorchScript model and tensor files; relative paths are
    // relative to baseDirectory) and names them by their SHA-256 instead, as SUBMIT expects.
    // report(file, bytes) is told of each upload, and progress(done, total) as its bytes go.
    core::Status uploadJobFiles(core::JobSpec& spec, const QString& baseDirectory,
        const std::function<void(const QString&, std::int64_t)>& report = {},
        const std::function<void(std::int64_t, std::int64_t)>& progress = {});

private:
    // Connects to the next of the other brokers; false when none is left.
    bool moveOn();
    void connectTo(const BrokerAddress& broker);
    core::Result<Message> receive();
    qint64 sendRequest(Command command, QJsonObject header); // returns its id
    void send(const Message& message);

    struct Private;
    std::unique_ptr<Private> d;
};

} // namespace tessera::net
