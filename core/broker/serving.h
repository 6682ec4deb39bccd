#pragma once

#include "../blobstore.h"
#include "../clock.h"
#include "../credits.h"
#include "../error.h"
#include "../inference/question.h"
#include "../jobspec.h"
#include "../nodeinfo.h"
#include "assignment.h"
#include "brokerstore.h"
#include "stakes.h"
#include "trainingmath.h"

#include <QHash>
#include <QJsonObject>
#include <QList>
#include <QRandomGenerator>
#include <QSet>
#include <QString>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace tessera::core::broker {

// What serving has to tell peers since the last takeNotices(); net/ turns each into a message. An
// asker is the handle net/ gave ask() for one ASK (who to answer, and its id).
struct ServeNotice {
    enum class Kind {
        Request, // REQUEST to `node` for its replica `assignment`
        Unhost, // HOSTING ready false to `node`: stop hosting `assignment`
        Tokens, // TOKENS to `asker`
        Answer, // the ASK's OK, `answer`
        Refuse, // the ASK's ERROR, `error`
    };
    Kind kind = Kind::Request;
    QString node;
    QString assignment;
    QString ticket;
    inference::Question question;
    std::int64_t asker = 0;
    std::int64_t from = 0;
    QList<std::int64_t> tokens;
    QJsonObject answer;
    Error error;
};

// Served jobs (docs/PROTOCOL.md, "Serving"; docs/VERIFICATION.md, "Served answers"): each keeps its
// model on up to `replicas` nodes of one runtime profile, and every request (a ticket) goes to the
// least-loaded replica, at most MaxAtReplica at one at a time, the rest queued here in order. A
// sampled ticket is answered twice, by two replicas, and refereed when they differ. In memory:
// a broker that restarts forgets its tickets (never the money, which moves in the ledger). Part
// of the Broker, on its thread.
class Serving {
public:
    static constexpr int MaxAtReplica = 2;
    static constexpr qsizetype MaxRemembered = 10000; // answers kept per job for repeated request ids
    static constexpr qsizetype MaxQueued = 1000; // requests waiting for a job's replicas
    static constexpr qsizetype MaxAskersPerTicket = 16; // repeats of one live request id
    static constexpr int MaxReplicasPerNode = 2; // served models one node holds
    static constexpr std::int64_t LoadTimeoutMs = 300'000; // for a replica to say it is loaded
    static constexpr std::int64_t AnswerTimeoutMs = 60'000; // for an answer, plus a second a token

    struct Parts {
        BrokerStore& store;
        Stakes& stakes;
        TrainingMath& math;
        BlobStore& blobs;
        const Clock& clock;
        QRandomGenerator& random;
    };
    explicit Serving(Parts parts);

    // A running served job (its row's pricePerShard is its price per token).
    void add(const JobRow& job, const JobSpec& spec);
    // The job ended: its replicas are told to stop, its open requests refused.
    void remove(const QString& jobId, const QString& why);
    bool serves(const QString& jobId) const { return m_jobs.contains(jobId); }
    // Whether a served job has fewer replicas than it asks for (a node that asks for work may get one).
    bool wantsReplicas() const;
    // Served jobs whose time is up.
    QList<QString> due() const;
    // Replicas that never load and requests never answered go to other nodes (each tick).
    void tick();
    // What STATUS says of a served job: replicas ready, requests answered and waiting, tokens, end.
    QJsonObject statusOf(const QString& jobId) const;

    // A replica for a node that asks for work (READY) and may host one: a served job short of
    // replicas whose model this node can run, which it does not host yet.
    Result<std::optional<Assignment>> place(const QString& nodeId, const NodeInfo& node);
    // HOSTING from a node: its replica is loaded (ready) or cannot be.
    Status hosting(const QString& nodeId, const QString& assignment, bool ready, const QString& failure);
    void nodeLost(const QString& nodeId);

    // ASK: a request of the job's owner (or the operator), answered through `asker`'s notices.
    Status ask(const QString& jobId, const QString& caller, bool operatorCaller, const inference::Question& question,
        const QString& requestId, std::int64_t asker);
    // TOKENS from the node answering a ticket.
    void tokens(const QString& nodeId, const QString& ticket, std::int64_t from, const QList<std::int64_t>& tokens);
    // ANSWER from a node: its line and signed answer, or why it has none. An error: refused (the
    // ticket is not this node's: field "ticket", stale).
    Status answered(const QString& nodeId, const NodeInfo& node, const QString& ticket, const QByteArray& line,
        const QJsonObject& signedAnswer, const QString& failure);

    std::vector<ServeNotice> takeNotices() { return std::exchange(m_notices, {}); }
    // Pays what the answers since the last paid() earned (of one job, or of all): one transfer a
    // node and kind (cause pay:JOB/served/MS-N/NODE, verify:JOB/served/MS-N/NODE). Inside the
    // caller's transaction; the broker calls it each tick, and before a served job's refund. The
    // debts stay until the caller says the transaction committed (paid()): a rolled-back one
    // leaves them for the next flush.
    Status flushPayments(const QString& jobId = {});
    void paid(const QString& jobId = {});
    bool owes() const; // whether any job owes its nodes for answers
    // A job ends: the requests whose first answer waits for its check are answered with it,
    // unchecked, and it is owed to its node (before the last flushPayments and the refund).
    void closeAccounts(const QString& jobId);

private:
    struct Replica {
        QString assignment;
        QString jobId;
        QString node;
        bool ready = false;
        int load = 0; // tickets at it
        std::int64_t placedAt = 0;
        std::int64_t placed = 0; // the order replicas were placed in (ties of load go to the first)
    };
    struct Ticket {
        QString id;
        QString jobId;
        inference::Question question;
        QList<std::int64_t> askers;
        QString rememberAs; // owner/requestId, when given
        QString node; // where it is now (empty: queued)
        QString assignment;
        QList<std::int64_t> forwarded; // tokens the askers have
        QList<std::int64_t> received; // tokens of the node answering now
        bool sampled = false;
        bool contradicted = false; // a second node's tokens differed from those forwarded
        bool checking = false; // the first answer is in; a second replica answers it again
        QString firstNode;
        QByteArray firstLine;
        Credits reserved; // of the job's escrow, until it is answered
        std::int64_t sentAt = 0; // to its node
    };
    struct Job {
        QString id;
        QString owner;
        JobSpec spec;
        ShardTask replicaTask;
        Digest weightsBlob;
        Credits pricePerToken;
        std::int64_t endsAt = 0;
        QString profile; // the replicas' runtime profile (the first's)
        QSet<QString> excluded; // nodes that could not host or answer it
        std::deque<QString> queue; // tickets waiting for a replica
        QHash<QString, QJsonObject> remembered; // owner/requestId -> answer
        std::deque<QString> rememberedOrder; // the oldest is forgotten first
        QHash<QString, QString> live; // owner/requestId -> ticket
        std::int64_t answered = 0;
        std::int64_t checked = 0;
        std::int64_t tokens = 0;
        std::int64_t replicasPlaced = 0;
        struct Owed {
            std::int64_t answers = 0;
            std::int64_t checks = 0;
            Credits forAnswers;
            Credits forChecks;
        };
        QHash<QString, Owed> owed; // by node, until flushPayments()
        Credits owedTotal;
        Credits reserved; // for the tickets not answered yet
    };

    void pump(Job& job);
    Replica* leastLoaded(const Job& job, const QString& except);
    void sendTo(Ticket& ticket, Replica& replica);
    void release(Ticket& ticket); // off its replica
    void requeue(Job& job, Ticket& ticket, bool front);
    void forward(Ticket& ticket, std::int64_t from);
    void drop(const QString& assignment, bool tell);
    // The node's signed answer checked (signer, kind, ticket, line) and the line's form: an error
    // says why it is not an answer.
    Status checkAnswer(
        const Job& job, const Ticket& ticket, const NodeInfo& node, const QByteArray& line, const QJsonObject& signedAnswer);
    void firstAnswer(Job& job, Ticket& ticket, const QString& nodeId, const QByteArray& line);
    void secondAnswer(Job& job, Ticket& ticket, const QString& nodeId, const QByteArray& line);
    // The referee's line for a ticket (the broker's own re-execution).
    Result<QByteArray> referee(const Job& job, const Ticket& ticket);
    // Pays (and slashes) for a settled ticket, and answers its askers with `line`.
    void settle(Job& job, Ticket& ticket, const QByteArray& line, bool checked, const QHash<QString, bool>& rightByNode);
    Credits costOf(const Job& job, const inference::Question& question, const QByteArray& line) const;
    Credits costOf(const Job& job, const inference::Question& question, std::int64_t written) const;
    void owe(Job& job, const QString& node, bool check, Credits amount);
    void refuseAll(Ticket& ticket, const Error& error);

    Parts m_;
    QHash<QString, Job> m_jobs;
    QHash<QString, Replica> m_replicas; // by assignment
    QHash<QString, Ticket> m_tickets; // by id
    std::vector<ServeNotice> m_notices;
    std::int64_t m_flushes = 0;
    std::int64_t m_placed = 0;
};

} // namespace tessera::core::broker
