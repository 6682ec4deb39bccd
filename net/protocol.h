#pragma once

#include <core/error.h>

#include <QByteArray>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <cstdint>

namespace tessera::net {

// docs/PROTOCOL.md, as code. Encoding and decoding are pure functions over frames, so they are
// tested against golden bytes without sockets, and decoding never throws: bad frames come back as
// a ProtocolError that the broker turns into an ERROR reply.

inline constexpr char ProtocolId[] = "TESSERA/1";
inline constexpr qsizetype MaxHeaderBytes = 64 * 1024;
inline constexpr qsizetype MaxChunkBytes = 1024 * 1024;
inline constexpr qsizetype MaxMessageBytes = 2 * 1024 * 1024;
inline constexpr int MaxCreditChunks = 8;

enum class Command : std::uint8_t {
    Register = 0x01,
    Welcome = 0x02,
    Heartbeat = 0x03,
    Ready = 0x04,
    Task = 0x05,
    Result = 0x06,
    Ok = 0x07,
    Error = 0x08,
    Bye = 0x09,
    Get = 0x10,
    Chunk = 0x11,
    Put = 0x12,
    Submit = 0x20,
    Status = 0x21,
    List = 0x22,
    Cancel = 0x23,
    Quote = 0x24,
    Balance = 0x25,
    Ledger = 0x26,
    Receipt = 0x27,
    Nodes = 0x28,
    Commit = 0x29,
    Checkpoint = 0x2A, // broker -> node: a dispute asks for a checkpoint state; node -> broker: here it is
    Verdict = 0x2B, // broker -> node: what became of a result
    Stake = 0x2C, // bond or unbond stake (a request signed with the node's key)
    Verifications = 0x2D, // the checks of a job, or of all jobs
    Have = 0x2E, // node -> broker: it starts or stops serving a blob over the swarm (docs/SWARM.md)
    LogHead = 0x2F, // the ledger's log (docs/LEDGER.md): the newest signed head, and a consistency proof
    LogProof = 0x30, // an entry and its inclusion proof
    LogConsistency = 0x31, // a consistency proof between two sizes
    LogEntries = 0x32, // a page of entries
    Record = 0x33, // node -> broker: its portable record of another network (docs/LEDGER.md)
    Ask = 0x34, // client -> broker: a request to a served model (docs/PROTOCOL.md, "Serving")
    Request = 0x35, // broker -> node: a request for a replica it hosts
    Tokens = 0x36, // node -> broker -> client: an answer's tokens as they are made
    Answer = 0x37, // node -> broker: a request's whole, signed answer
    Hosting = 0x38, // node -> broker: a replica is loaded (or cannot be); broker -> node: stop hosting it
    Tensor = 0x39, // node -> broker -> node: a stage task's tensor for another stage of its shard
    Stop = 0x3A, // broker -> node: a stage task's pipeline ended; the node drops the task
};

QString commandName(Command command);

// The fields of every message's envelope (docs/PROTOCOL.md, "Messages"); those of each request and
// reply are in messages.h, in the same namespace.
namespace fields {
inline const QString Id = QStringLiteral("id");
inline const QString Re = QStringLiteral("re");
inline const QString Code = QStringLiteral("code");
inline const QString Message = QStringLiteral("message");
} // namespace fields

// The error codes of docs/PROTOCOL.md.
namespace errors {
inline const QString BadMessage = QStringLiteral("bad-message");
inline const QString BadVersion = QStringLiteral("bad-version");
inline const QString UnknownCommand = QStringLiteral("unknown-command");
inline const QString TooLarge = QStringLiteral("too-large");
inline const QString Invalid = QStringLiteral("invalid");
inline const QString UnknownJob = QStringLiteral("unknown-job");
inline const QString UnknownBlob = QStringLiteral("unknown-blob");
inline const QString HashMismatch = QStringLiteral("hash-mismatch");
inline const QString NotRegistered = QStringLiteral("not-registered");
inline const QString Stale = QStringLiteral("stale");
inline const QString Internal = QStringLiteral("internal");
inline const QString TooManyRequests = QStringLiteral("too-many-requests");
inline const QString DiskFull = QStringLiteral("disk-full");
inline const QString Forbidden = QStringLiteral("forbidden");
inline const QString Standby = QStringLiteral("standby"); // another broker of the network holds its work
} // namespace errors

struct Message {
    Command command = Command::Heartbeat;
    QJsonObject header;
    QByteArray payload; // blob bytes of CHUNK and PUT; empty otherwise

    bool operator==(const Message&) const = default;
};

struct ProtocolError {
    QString code; // one of errors::
    QString message;
    int command = -1; // the command byte, when it could be read
};

// Frames of a message as a DEALER sends it (a ROUTER adds the routing id in front).
QList<QByteArray> encode(const Message& message);
core::Result<Message, ProtocolError> decode(const QList<QByteArray>& frames);

// Builders for the replies everyone sends.
Message errorMessage(const QString& code, const QString& text, int re = -1, const QJsonValue& id = {});
Message okMessage(const QJsonValue& id, QJsonObject fields = {});

} // namespace tessera::net
