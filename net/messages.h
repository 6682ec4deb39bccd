#pragma once

#include "protocol.h"

#include <core/broker/assignment.h>
#include <core/broker/records.h>
#include <core/disputequestion.h>
#include <core/error.h>
#include <core/hash.h>
#include <core/inference/question.h>
#include <core/jobspec.h>
#include <core/nodeinfo.h>
#include <core/pricing.h>
#include <core/resultstates.h>
#include <core/shardresult.h>
#include <core/shardtask.h>
#include <core/stagetensors.h>

#include <QJsonObject>
#include <QList>
#include <QString>

#include <optional>

namespace tessera::net {

// docs/PROTOCOL.md's table, one struct per request and reply, each field's name written once
// (here). fromHeader() checks what it needs and says which field is wrong; toHeader() writes what
// the table says. A request's `id` (and a plaintext caller's `owner`) travel beside these fields:
// see Request below. Golden headers: tests/net/tst_messages.cpp.

// (The envelope's own fields, id, re, code and message, are in protocol.h.)
namespace fields {
inline const QString Owner = QStringLiteral("owner");
inline const QString Node = QStringLiteral("node");
inline const QString NodeId = QStringLiteral("nodeId");
inline const QString HeartbeatMs = QStringLiteral("heartbeatMs");
inline const QString BrokerVersion = QStringLiteral("brokerVersion");
inline const QString Encodings = QStringLiteral("encodings");
inline const QString Encoding = QStringLiteral("encoding");
inline const QString Slots = QStringLiteral("slots");
inline const QString Assignment = QStringLiteral("assignment");
inline const QString DeadlineMs = QStringLiteral("deadlineMs");
inline const QString Task = QStringLiteral("task");
inline const QString StartWeightsBlob = QStringLiteral("startWeightsBlob");
inline const QString StartChangeBlob = QStringLiteral("startChangeBlob");
inline const QString StartChangeBase = QStringLiteral("startChangeBase");
inline const QString Result = QStringLiteral("result");
inline const QString Verdict = QStringLiteral("verdict");
inline const QString Paid = QStringLiteral("paid");
inline const QString Sha256 = QStringLiteral("sha256");
inline const QString Offset = QStringLiteral("offset");
inline const QString Length = QStringLiteral("length");
inline const QString Size = QStringLiteral("size");
inline const QString Received = QStringLiteral("received");
inline const QString Complete = QStringLiteral("complete");
inline const QString Job = QStringLiteral("job");
inline const QString JobId = QStringLiteral("jobId");
inline const QString RequestId = QStringLiteral("requestId");
inline const QString Jobs = QStringLiteral("jobs");
inline const QString Limit = QStringLiteral("limit");
inline const QString All = QStringLiteral("all");
inline const QString Total = QStringLiteral("total");
inline const QString Next = QStringLiteral("next");
inline const QString Quote = QStringLiteral("quote");
inline const QString Account = QStringLiteral("account");
inline const QString Consistent = QStringLiteral("consistent");
inline const QString Problem = QStringLiteral("problem");
inline const QString Minted = QStringLiteral("minted");
inline const QString SigningKey = QStringLiteral("signingKey");
inline const QString Cause = QStringLiteral("cause");
inline const QString Receipt = QStringLiteral("receipt");
inline const QString Nodes = QStringLiteral("nodes");
inline const QString Commitment = QStringLiteral("commitment");
inline const QString Committed = QStringLiteral("committed");
inline const QString Verification = QStringLiteral("verification");
inline const QString Verifications = QStringLiteral("verifications");
inline const QString Checkpoint = QStringLiteral("checkpoint");
inline const QString Want = QStringLiteral("want");
inline const QString Step = QStringLiteral("step");
inline const QString Instruction = QStringLiteral("instruction");
inline const QString State = QStringLiteral("state");
inline const QString Detail = QStringLiteral("detail");
inline const QString Request = QStringLiteral("request");
inline const QString SwarmPort = QStringLiteral("swarmPort");
inline const QString Network = QStringLiteral("network");
inline const QString Swarm = QStringLiteral("swarm");
inline const QString Torrent = QStringLiteral("torrent");
inline const QString Certificate = QStringLiteral("certificate");
inline const QString Peers = QStringLiteral("peers");
inline const QString Holding = QStringLiteral("holding");
inline const QString Seed = QStringLiteral("seed");
inline const QString LogHeadMs = QStringLiteral("logHeadMs");
inline const QString From = QStringLiteral("from");
inline const QString To = QStringLiteral("to");
inline const QString Index = QStringLiteral("index");
inline const QString Head = QStringLiteral("head");
inline const QString Consistency = QStringLiteral("consistency");
inline const QString Proof = QStringLiteral("proof");
inline const QString Entry = QStringLiteral("entry");
inline const QString Entries = QStringLiteral("entries");
inline const QString Log = QStringLiteral("log");
} // namespace fields

// --- node ----------------------------------------------------------------------------------------

struct RegisterRequest {
    static constexpr Command command = Command::Register;
    core::NodeInfo node;
    QJsonObject toHeader() const;
    static core::Result<RegisterRequest> fromHeader(const QJsonObject& header);
};

struct Welcome {
    static constexpr Command command = Command::Welcome;
    QString nodeId;
    int heartbeatMs = 1000;
    QString brokerVersion = QStringLiteral("1");
    QStringList encodings = {}; // the range codings its PUT takes ("Encoded ranges"); an older broker names none
    int swarmPort = 0; // where the broker seeds blobs (docs/SWARM.md), on the host the node reached it at; 0: none
    // The network's id: brokers that share one database name the same (docs/STORE.md, "Several
    // brokers"); "" from an older broker.
    QString network = {};
    // How often the broker signs a head of its ledger's log, and the node asks for it (docs/LEDGER.md);
    // 0 from an older broker: no log.
    int logHeadMs = 0;
    QJsonObject toHeader() const;
    static core::Result<Welcome> fromHeader(const QJsonObject& header);
};

struct ReadyRequest {
    static constexpr Command command = Command::Ready;
    int slots = 1;
    QJsonObject toHeader() const;
    static core::Result<ReadyRequest> fromHeader(const QJsonObject& header);
};

// One blob of a TASK offered over the swarm (docs/SWARM.md, "Protocol"): its torrent (a blob of
// its own, fetched by GET), the node's certificate for it, and peers that hold or fetch it.
struct SwarmOffer {
    core::Digest sha256; // the blob
    core::Digest torrent; // the blob of its .torrent
    QByteArray certificate; // PEM, signed by the broker's swarm authority for the node's swarm key
    QStringList peers; // host:port, at most MaxPeers
    // Whether the node dials the broker's seed at once; false: its peers first, and the seed once
    // they brought less than SeedBelowBytes in SeedAfterMs (docs/SWARM.md, "The broker's seed").
    // Absent: true.
    bool seed = true;

    static constexpr qsizetype MaxPeers = 50;
    static constexpr std::int64_t SeedAfterMs = 5'000;
    static constexpr std::int64_t SeedBelowBytes = 2 << 20;
    static constexpr qsizetype MaxCertificateBytes = 4096;
    static constexpr qsizetype MaxOffers = 8;
    QJsonObject toJson() const;
    static core::Result<SwarmOffer> fromJson(const QJsonObject& json);
    bool operator==(const SwarmOffer&) const = default;
};

struct TaskMessage {
    static constexpr Command command = Command::Task;
    QString assignment;
    std::int64_t deadlineMs = 0; // from now
    core::ShardTask task;
    core::Digest startWeightsBlob;
    // Where the round has one: its change from the previous round's weights (startChangeBase), for
    // a node that holds those (docs/PROTOCOL.md, "The round's change").
    std::optional<core::broker::WeightsChange> startChange;
    QList<SwarmOffer> swarm; // for a node that declared `swarm`: blobs of the task it may fetch from peers
    QJsonObject toHeader() const;
    static core::Result<TaskMessage> fromHeader(const QJsonObject& header);
};

// A node starts (holding) or stops serving a blob over the swarm; no reply.
struct HaveMessage {
    static constexpr Command command = Command::Have;
    core::Digest sha256;
    bool holding = true;
    QJsonObject toHeader() const;
    static core::Result<HaveMessage> fromHeader(const QJsonObject& header);
};

// Serving (docs/PROTOCOL.md, "Serving").
// ASK: a client's request to a served job's model; requestId as for SUBMIT.
struct AskRequest {
    static constexpr Command command = Command::Ask;
    QString jobId;
    core::inference::Question question; // maxTokens checked against the job's by the broker
    QString requestId;
    QJsonObject toHeader() const;
    static core::Result<AskRequest> fromHeader(const QJsonObject& header);
};
// REQUEST: the broker hands a question to a replica's node.
struct ServeRequest {
    static constexpr Command command = Command::Request;
    QString assignment;
    QString ticket;
    core::inference::Question question;
    QJsonObject toHeader() const;
    static core::Result<ServeRequest> fromHeader(const QJsonObject& header);
};
// TOKENS: tokens [from, from + size) of a ticket's answer (node to broker), or of an ASK's (broker
// to client: `ticket` empty, the ASK's id beside it, and the text).
struct TokensMessage {
    static constexpr Command command = Command::Tokens;
    static constexpr qsizetype MaxTokens = 4096;
    QString ticket;
    std::int64_t from = 0;
    QList<std::int64_t> tokens;
    QJsonObject toHeader() const;
    static core::Result<TokensMessage> fromHeader(const QJsonObject& header);
};
// ANSWER: a ticket's line and the node's signed answer document, or why it has none (failure).
struct AnswerRequest {
    static constexpr Command command = Command::Answer;
    QString ticket;
    QByteArray line;
    QJsonObject answer; // signed (core::inference::answerDocument)
    QString failure;
    QJsonObject toHeader() const;
    static core::Result<AnswerRequest> fromHeader(const QJsonObject& header);
};
// HOSTING: node to broker, a replica loaded (ready) or not (failure); broker to node, ready false:
// stop hosting it.
struct HostingMessage {
    static constexpr Command command = Command::Hosting;
    QString assignment;
    bool ready = false;
    QString failure;
    QJsonObject toHeader() const;
    static core::Result<HostingMessage> fromHeader(const QJsonObject& header);
};

// TENSOR (docs/PROTOCOL.md, "Stage tasks"): part of a tensor one stage task sends another of its
// shard, from byte `offset` of its `size`, the bytes in the payload. Node to broker (outbound):
// `assignment` the sender's, `stage` the stage it goes to ("to"); broker to node: `assignment` the
// receiver's, `stage` the stage it comes from ("from").
struct TensorMessage {
    static constexpr Command command = Command::Tensor;
    static constexpr std::int64_t MaxBytes = std::int64_t(1) << 30; // a tensor's
    QString assignment;
    bool outbound = true;
    std::int64_t stage = 0;
    core::TensorKind kind = core::TensorKind::Activation;
    std::int64_t step = 0;
    std::int64_t micro = 0;
    std::int64_t offset = 0;
    std::int64_t size = 0;
    QJsonObject toHeader() const;
    // Checks the fields alone; the payload's place in [0, size) is the receiver's to check.
    static core::Result<TensorMessage> fromHeader(const QJsonObject& header);
};

// STOP (docs/PROTOCOL.md, "Stage tasks"): broker to node, a stage task whose pipeline ended (a
// partner failed or went, or ran past its deadline): the node drops it and sends no result.
struct StopMessage {
    static constexpr Command command = Command::Stop;
    QString assignment;
    QString reason;
    QJsonObject toHeader() const;
    static core::Result<StopMessage> fromHeader(const QJsonObject& header);
};

struct ResultRequest {
    static constexpr Command command = Command::Result;
    QString assignment;
    core::ShardResult result;
    QJsonObject toHeader() const;
    static core::Result<ResultRequest> fromHeader(const QJsonObject& header);
};

struct ResultReply {
    core::ResultVerdict verdict = core::ResultVerdict::Accepted;
    std::optional<core::Credits> paid; // when accepted
    QString problem; // read: why a `paid` that came was not believed (not an amount, negative)
    QJsonObject toHeader() const;
    static core::Result<ResultReply> fromHeader(const QJsonObject& header);
};

struct CommitRequest {
    static constexpr Command command = Command::Commit;
    QJsonObject commitment; // a signed document (ShardResult::commitmentDocument + signDocument)
    QJsonObject toHeader() const;
    static core::Result<CommitRequest> fromHeader(const QJsonObject& header);
};

struct CommitReply {
    bool committed = true;
    QJsonObject toHeader() const;
    static core::Result<CommitReply> fromHeader(const QJsonObject& header);
};

// Broker -> node: a dispute needs the training state at a checkpoint of one of its results, or for
// a portable job the trace of an interval or the operands of one instruction (want: "state" when
// absent, "trace", "operands" with step and instruction).
struct CheckpointAsk {
    static constexpr Command command = Command::Checkpoint;
    QString verification;
    QString assignment;
    core::DisputeQuestion question;
    QJsonObject toHeader() const;
    static core::Result<CheckpointAsk> fromHeader(const QJsonObject& header);
};

// Node -> broker: the state (uploaded first), or none.
struct CheckpointAnswer {
    static constexpr Command command = Command::Checkpoint;
    QString verification;
    std::optional<core::Digest> sha256;
    QJsonObject toHeader() const;
    static core::Result<CheckpointAnswer> fromHeader(const QJsonObject& header);
};

struct VerdictMessage {
    static constexpr Command command = Command::Verdict;
    QString assignment;
    core::CheckVerdict state = core::CheckVerdict::Disputed;
    std::optional<core::Credits> paid; // with Paid; read: nothing where it was not an amount (detail says so)
    QString detail;
    QJsonObject toHeader() const;
    static core::Result<VerdictMessage> fromHeader(const QJsonObject& header);
};

// --- blobs ---------------------------------------------------------------------------------------

struct GetRequest {
    static constexpr Command command = Command::Get;
    core::Digest sha256;
    std::int64_t offset = 0;
    std::int64_t length = 0; // at most MaxChunkBytes
    QString encoding = {}; // a coding the asker can decode ("zstd"), or none; one the broker does not know is ignored
    QJsonObject toHeader() const;
    static core::Result<GetRequest> fromHeader(const QJsonObject& header);
};

// The one coding of a range there is (blobcoding.h codes and decodes it).
inline const QString ZstdEncoding = QStringLiteral("zstd");

// The header of CHUNK and PUT: a range of a blob, whose bytes are the message's payload: plain, or
// (encoding "zstd") one zstd frame of the range's `length` decoded bytes ("Encoded ranges").
template<Command C> struct BlobRange {
    static constexpr Command command = C;
    core::Digest sha256;
    std::int64_t offset = 0;
    std::int64_t size = 0; // of the whole blob
    QString encoding = {}; // empty: the payload is the range itself
    std::int64_t length = 0; // with an encoding: the decoded bytes of the range, at most MaxChunkBytes
    QJsonObject toHeader() const;
    static core::Result<BlobRange> fromHeader(const QJsonObject& header);
};
using ChunkHeader = BlobRange<Command::Chunk>;
using PutRequest = BlobRange<Command::Put>;

struct PutReply {
    core::Digest sha256;
    std::int64_t received = 0;
    bool complete = false;
    QJsonObject toHeader() const;
    static core::Result<PutReply> fromHeader(const QJsonObject& header);
};

// --- clients -------------------------------------------------------------------------------------

struct SubmitRequest {
    static constexpr Command command = Command::Submit;
    core::JobSpec job;
    // The client's name for this submit (docs/PROTOCOL.md, "Submitting twice"): a SUBMIT that
    // repeats an earlier one's requestId gets the job the first created, not a second one. Empty:
    // none; else 1 to 64 of A-Z a-z 0-9 . _ : -
    QString requestId;
    static bool isRequestId(const QString& id);
    QJsonObject toHeader() const;
    static core::Result<SubmitRequest> fromHeader(const QJsonObject& header);
};

struct SubmitReply {
    QString jobId;
    QJsonObject toHeader() const;
    static core::Result<SubmitReply> fromHeader(const QJsonObject& header);
};

// STATUS and CANCEL name a job.
struct JobRequest {
    QString jobId;
    QJsonObject toHeader() const;
    static core::Result<JobRequest> fromHeader(const QJsonObject& header);
};

struct StatusReply {
    core::broker::JobStatus job;
    static core::Result<StatusReply> fromHeader(const QJsonObject& header);
};

// LIST and NODES are paginated: rows from `offset`, at most `limit` (and fewer when they would
// not fit in a header); `all` also lists what aged out (docs/PROTOCOL.md, "Listings").
struct PageRequest {
    static constexpr std::int64_t DefaultLimit = 100;
    static constexpr std::int64_t MaxLimit = 500;
    std::int64_t offset = 0;
    std::int64_t limit = DefaultLimit;
    bool all = false;
    QJsonObject toHeader() const;
    static core::Result<PageRequest> fromHeader(const QJsonObject& header);
};

// Where a page ends: the rows listed in all, and the offset of the next page (none: the last).
struct Page {
    std::int64_t total = 0;
    std::optional<std::int64_t> next;
    void read(const QJsonObject& header);
};

struct ListReply {
    QList<core::broker::JobStatus> jobs;
    Page page;
    static core::Result<ListReply> fromHeader(const QJsonObject& header);
};

struct QuoteRequest {
    static constexpr Command command = Command::Quote;
    core::JobSpec job;
    QJsonObject toHeader() const;
    static core::Result<QuoteRequest> fromHeader(const QJsonObject& header);
};

struct QuoteReply {
    core::Quote quote;
    QJsonObject toHeader() const;
    static core::Result<QuoteReply> fromHeader(const QJsonObject& header);
};

struct BalanceRequest {
    static constexpr Command command = Command::Balance;
    QString account; // empty: the caller's own
    QJsonObject toHeader() const;
    static core::Result<BalanceRequest> fromHeader(const QJsonObject& header);
};

struct LedgerReply {
    bool consistent = false;
    QString problem;
    QString minted;
    QString signingKey; // the broker's (base64): it signs receipts; signed requests name it
    QJsonObject toHeader() const;
    static core::Result<LedgerReply> fromHeader(const QJsonObject& header);
};

struct NodesReply {
    QList<core::broker::NodeRecord> nodes;
    Page page;
    static core::Result<NodesReply> fromHeader(const QJsonObject& header);
};

struct ReceiptRequest {
    static constexpr Command command = Command::Receipt;
    QString cause;
    QJsonObject toHeader() const;
    static core::Result<ReceiptRequest> fromHeader(const QJsonObject& header);
};

// The ledger's log (docs/LEDGER.md, "Asking for the log").
struct LogHeadRequest {
    static constexpr Command command = Command::LogHead;
    std::optional<std::int64_t> from; // the size of the head the asker keeps
    QJsonObject toHeader() const;
    static core::Result<LogHeadRequest> fromHeader(const QJsonObject& header);
};

struct LogProofRequest {
    static constexpr Command command = Command::LogProof;
    std::int64_t index = 0;
    std::optional<std::int64_t> size; // none: in the newest head's tree
    QJsonObject toHeader() const;
    static core::Result<LogProofRequest> fromHeader(const QJsonObject& header);
};

struct LogConsistencyRequest {
    static constexpr Command command = Command::LogConsistency;
    std::int64_t from = 0;
    std::int64_t to = 0;
    QJsonObject toHeader() const;
    static core::Result<LogConsistencyRequest> fromHeader(const QJsonObject& header);
};

struct LogEntriesRequest {
    static constexpr Command command = Command::LogEntries;
    std::int64_t from = 0;
    int limit = 256;
    QJsonObject toHeader() const;
    static core::Result<LogEntriesRequest> fromHeader(const QJsonObject& header);
};

// A node's portable record of another network, uploaded first (docs/LEDGER.md, "Portable records").
struct RecordRequest {
    static constexpr Command command = Command::Record;
    core::Digest sha256;
    QJsonObject toHeader() const;
    static core::Result<RecordRequest> fromHeader(const QJsonObject& header);
};

struct StakeRequest {
    static constexpr Command command = Command::Stake;
    QJsonObject request; // signed with the node's key: kind tessera-stake, node, action, amount, nonce, broker, expires
    QJsonObject toHeader() const;
    static core::Result<StakeRequest> fromHeader(const QJsonObject& header);
};

struct VerificationsRequest {
    static constexpr Command command = Command::Verifications;
    QString jobId; // empty: every job's
    PageRequest page; // of the newest 10,000 checks, newest first
    QJsonObject toHeader() const;
    static core::Result<VerificationsRequest> fromHeader(const QJsonObject& header);
};

struct VerificationsReply {
    QList<core::broker::CheckRecord> checks;
    Page page;
    static core::Result<VerificationsReply> fromHeader(const QJsonObject& header);
};

// Every header's request id (any JSON value) and a plaintext caller's account.
struct Envelope {
    QJsonValue id;
    QString owner;
    static Envelope of(const QJsonObject& header);
};

} // namespace tessera::net
