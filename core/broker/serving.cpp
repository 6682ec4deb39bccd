#include "serving.h"

#include "../capabilities.h"
#include "../decomposition.h"
#include "../inference/outputs.h"
#include "../signing.h"

#include <QJsonArray>
#include <QLoggingCategory>

#include <algorithm>

Q_LOGGING_CATEGORY(lcServing, "tessera.broker.serving")

namespace tessera::core::broker {

namespace {

QString newTicketId()
{
    return QStringLiteral("t%1").arg(QRandomGenerator::system()->generate64(), 16, 16, QLatin1Char('0'));
}

QString newAssignmentId()
{
    return QStringLiteral("%1").arg(QRandomGenerator::system()->generate64(), 16, 16, QLatin1Char('0'));
}

Error ended(const QString& why)
{
    return Error { QStringLiteral("jobId"), why };
}

} // namespace

Serving::Serving(Parts parts)
    : m_(parts)
{ }

// --- jobs ------------------------------------------------------------------------------------------

void Serving::add(const JobRow& row, const JobSpec& spec)
{
    Job job;
    job.id = row.id;
    job.owner = row.owner;
    job.spec = spec;
    job.replicaTask = decomposeShard(row.id, spec, 0, 0, row.weightsHash);
    job.weightsBlob = row.weightsBlob;
    job.pricePerToken = row.pricePerShard;
    job.endsAt = row.createdAt + spec.inference.seconds * 1000;
    m_jobs.insert(job.id, std::move(job));
}

void Serving::remove(const QString& jobId, const QString& why)
{
    auto job = m_jobs.find(jobId);
    if (job == m_jobs.end())
        return;
    for (auto it = m_replicas.begin(); it != m_replicas.end();) {
        if (it->jobId == jobId) {
            m_notices.push_back({ ServeNotice::Kind::Unhost, it->node, it->assignment, {}, {}, 0, 0, {}, {}, {} });
            it = m_replicas.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = m_tickets.begin(); it != m_tickets.end();) {
        if (it->jobId == jobId) {
            refuseAll(*it, ended(why));
            it = m_tickets.erase(it);
        } else {
            ++it;
        }
    }
    m_jobs.erase(job);
}

bool Serving::wantsReplicas() const
{
    QHash<QString, std::int64_t> held;
    for (const auto& replica : m_replicas)
        ++held[replica.jobId];
    for (const auto& job : m_jobs) {
        if (held.value(job.id) < job.spec.inference.replicas)
            return true;
    }
    return false;
}

QList<QString> Serving::due() const
{
    QList<QString> due;
    const auto now = m_.clock.nowMs();
    for (const auto& job : m_jobs) {
        if (now >= job.endsAt)
            due.append(job.id);
    }
    return due;
}

QJsonObject Serving::statusOf(const QString& jobId) const
{
    const auto job = m_jobs.constFind(jobId);
    if (job == m_jobs.constEnd())
        return {};
    qint64 ready = 0, inFlight = 0;
    for (const auto& replica : m_replicas) {
        if (replica.jobId == jobId && replica.ready)
            ++ready;
    }
    for (const auto& ticket : m_tickets) {
        if (ticket.jobId == jobId && !ticket.node.isEmpty())
            ++inFlight;
    }
    return { { QStringLiteral("replicas"), ready }, { QStringLiteral("answered"), qint64(job->answered) },
        { QStringLiteral("checked"), qint64(job->checked) }, { QStringLiteral("tokens"), qint64(job->tokens) },
        { QStringLiteral("answering"), inFlight }, { QStringLiteral("queued"), qint64(job->queue.size()) },
        { QStringLiteral("pricePerToken"), job->pricePerToken.toString() }, { QStringLiteral("endsAt"), qint64(job->endsAt) } };
}

// --- replicas --------------------------------------------------------------------------------------

Result<std::optional<Assignment>> Serving::place(const QString& nodeId, const NodeInfo& node)
{
    if (!node.capabilities.contains(QStringLiteral("serve")) || node.signingKey.isEmpty())
        return std::optional<Assignment> {};
    for (auto& job : m_jobs) {
        int held = 0;
        bool hosts = false;
        for (const auto& replica : m_replicas) {
            if (replica.jobId == job.id) {
                ++held;
                hosts = hosts || replica.node == nodeId;
            }
        }
        if (hosts || held >= job.spec.inference.replicas || job.excluded.contains(nodeId)
            || node.maxThreads < job.spec.inference.threads || !missingCapabilities(node.capabilities, job.spec).isEmpty())
            continue;
        // One runtime profile a job, so that every replica gives every answer's bytes.
        if (!job.profile.isEmpty() && !reproduces(node.runtimeProfile, job.profile))
            continue;
        if (job.profile.isEmpty())
            job.profile = node.runtimeProfile;
        Assignment assignment { newAssignmentId(), job.replicaTask, job.weightsBlob, 0, std::nullopt };
        assignment.task.shard = job.replicasPlaced++ % std::max<std::int64_t>(job.spec.inference.replicas, 1);
        auto named = blobsNamedBy(job.spec) + QList<Digest> { job.weightsBlob };
        if (auto granted = m_.store.allowRead(named, nodeId); !granted)
            return granted.error();
        m_replicas.insert(assignment.id, { assignment.id, job.id, nodeId, false, 0, m_.clock.nowMs() });
        qCInfo(lcServing).noquote() << "replica" << assignment.id << "of job" << job.id << "placed on" << nodeId.left(12);
        return std::optional<Assignment>(std::move(assignment));
    }
    return std::optional<Assignment> {};
}

Status Serving::hosting(const QString& nodeId, const QString& assignment, bool ready, const QString& failure)
{
    auto replica = m_replicas.find(assignment);
    if (replica == m_replicas.end() || replica->node != nodeId)
        return Error { QStringLiteral("assignment"), QStringLiteral("no replica %1 of this node's").arg(assignment) };
    const QString jobId = replica->jobId;
    if (!ready) {
        qCWarning(lcServing).noquote() << "node" << nodeId.left(12) << "cannot host job" << jobId << ":" << failure;
        if (auto job = m_jobs.find(jobId); job != m_jobs.end())
            job->excluded.insert(nodeId);
        drop(assignment, false);
        return {};
    }
    replica->ready = true;
    if (auto job = m_jobs.find(jobId); job != m_jobs.end())
        pump(*job);
    return {};
}

void Serving::nodeLost(const QString& nodeId)
{
    QStringList gone;
    for (const auto& replica : m_replicas) {
        if (replica.node == nodeId)
            gone.append(replica.assignment);
    }
    for (const auto& assignment : gone)
        drop(assignment, false);
}

void Serving::drop(const QString& assignment, bool tell)
{
    auto replica = m_replicas.find(assignment);
    if (replica == m_replicas.end())
        return;
    const QString jobId = replica->jobId, node = replica->node;
    if (tell)
        m_notices.push_back({ ServeNotice::Kind::Unhost, node, assignment, {}, {}, 0, 0, {}, {}, {} });
    m_replicas.erase(replica);
    auto job = m_jobs.find(jobId);
    if (job == m_jobs.end())
        return;
    // Its tickets go back to the front of the queue, for another replica (a node that went away
    // mid-request: the client still hears one answer, docs/PROTOCOL.md, "Serving").
    QList<QString> back;
    for (auto& ticket : m_tickets) {
        if (ticket.assignment == assignment)
            back.append(ticket.id);
    }
    if (!back.isEmpty())
        qCInfo(lcServing).noquote() << back.size() << "requests at replica" << assignment << "of node" << node.left(12)
                                    << "go to another";
    for (auto it = back.rbegin(); it != back.rend(); ++it) {
        auto& ticket = m_tickets[*it];
        ticket.node.clear();
        ticket.assignment.clear();
        ticket.received.clear();
        job->queue.push_front(ticket.id);
    }
    pump(*job);
}

// --- requests --------------------------------------------------------------------------------------

Status Serving::ask(const QString& jobId, const QString& caller, bool operatorCaller, const inference::Question& question,
    const QString& requestId, std::int64_t asker)
{
    auto job = m_jobs.find(jobId);
    if (job == m_jobs.end())
        return Error { QStringLiteral("jobId"), QStringLiteral("job %1 is not a served job that is running").arg(jobId) };
    if (!operatorCaller && caller != job->owner)
        return Error { QStringLiteral("forbidden"), QStringLiteral("only the job's owner asks its model (it pays)") };
    if (question.maxTokens > job->spec.inference.maxTokens)
        return Error { QStringLiteral("question.maxTokens"),
            QStringLiteral("at most the job's %1").arg(job->spec.inference.maxTokens) };
    const QString key = requestId.isEmpty() ? QString() : caller + u'/' + requestId;
    if (!key.isEmpty()) {
        if (const auto answer = job->remembered.constFind(key); answer != job->remembered.constEnd()) {
            if (answer->value(QStringLiteral("question")).toObject() != question.toJson())
                return Error { QStringLiteral("requestId"), QStringLiteral("names another question of yours") };
            auto reply = *answer;
            reply.remove(QStringLiteral("question"));
            m_notices.push_back({ ServeNotice::Kind::Answer, {}, {}, {}, {}, asker, 0, {}, reply, {} });
            return {};
        }
        if (const auto live = job->live.constFind(key); live != job->live.constEnd()) {
            auto& ticket = m_tickets[*live];
            if (ticket.question != question)
                return Error { QStringLiteral("requestId"), QStringLiteral("names another question of yours") };
            ticket.askers.append(asker);
            if (!ticket.forwarded.isEmpty())
                m_notices.push_back({ ServeNotice::Kind::Tokens, {}, {}, ticket.id, {}, asker, 0, ticket.forwarded, {}, {} });
            return {};
        }
    }
    // Twice the most it could cost (a checked answer is paid to two nodes).
    const auto most = job->pricePerToken.checkedMultiply(2 * (question.prompt.size() + question.maxTokens));
    auto escrow = m_.stakes.escrow(jobId);
    if (!escrow)
        return escrow.error();
    if (!most || *escrow < *most)
        return Error { QStringLiteral("budget"),
            QStringLiteral("the job's budget holds %1 credits, less than this request may cost (%2)")
                .arg(escrow->toString(), most ? most->toString() : QStringLiteral("?")) };
    Ticket ticket;
    ticket.id = newTicketId();
    ticket.jobId = jobId;
    ticket.question = question;
    ticket.askers = { asker };
    ticket.rememberAs = key;
    ticket.sampled = m_.random.generateDouble() < job->spec.inference.checkShare;
    if (!key.isEmpty())
        job->live.insert(key, ticket.id);
    job->queue.push_back(ticket.id);
    m_tickets.insert(ticket.id, std::move(ticket));
    pump(*job);
    return {};
}

Serving::Replica* Serving::leastLoaded(const Job& job, const QString& except)
{
    Replica* best = nullptr;
    for (auto& replica : m_replicas) {
        if (replica.jobId != job.id || !replica.ready || replica.node == except || replica.load >= MaxAtReplica)
            continue;
        if (!best || replica.load < best->load || (replica.load == best->load && replica.placedAt < best->placedAt))
            best = &replica;
    }
    return best;
}

void Serving::pump(Job& job)
{
    while (!job.queue.empty()) {
        auto& ticket = m_tickets[job.queue.front()];
        auto* replica = leastLoaded(job, ticket.checking ? ticket.firstNode : QString());
        if (!replica && ticket.checking) {
            bool another = false;
            for (const auto& other : std::as_const(m_replicas))
                another = another || (other.jobId == job.id && other.ready && other.node != ticket.firstNode);
            if (!another) { // nobody else to check it: answered unchecked
                job.queue.pop_front();
                const QByteArray line = ticket.firstLine;
                settle(job, ticket, line, false, { { ticket.firstNode, true } });
                continue;
            }
        }
        if (!replica)
            return;
        job.queue.pop_front();
        sendTo(ticket, *replica);
    }
}

void Serving::sendTo(Ticket& ticket, Replica& replica)
{
    ticket.node = replica.node;
    ticket.assignment = replica.assignment;
    ticket.received.clear();
    ++replica.load;
    m_notices.push_back(
        { ServeNotice::Kind::Request, replica.node, replica.assignment, ticket.id, ticket.question, 0, 0, {}, {}, {} });
}

void Serving::release(Ticket& ticket)
{
    if (auto replica = m_replicas.find(ticket.assignment); replica != m_replicas.end())
        replica->load = std::max(0, replica->load - 1);
    ticket.node.clear();
    ticket.assignment.clear();
}

void Serving::tokens(const QString& nodeId, const QString& ticketId, std::int64_t from, const QList<std::int64_t>& tokens)
{
    auto ticket = m_tickets.find(ticketId);
    if (ticket == m_tickets.end() || ticket->node != nodeId || ticket->checking || from != ticket->received.size()
        || ticket->received.size() + tokens.size() > ticket->question.maxTokens)
        return; // stale, out of order, or a check's (which nobody streams)
    ticket->received.append(tokens);
    // Tokens the askers already have (from a node that went away) are compared, not sent again.
    const auto have = ticket->forwarded.size();
    qsizetype differs = -1;
    for (qsizetype i = from; i < std::min<qsizetype>(have, ticket->received.size()); ++i) {
        if (ticket->received[i] != ticket->forwarded[i]) {
            differs = i;
            break;
        }
    }
    if (differs >= 0) {
        ticket->contradicted = true;
        ticket->forwarded.resize(differs);
    }
    if (ticket->received.size() > ticket->forwarded.size())
        forward(*ticket, ticket->forwarded.size());
}

void Serving::forward(Ticket& ticket, std::int64_t from)
{
    const auto more = ticket.received.mid(from);
    ticket.forwarded = ticket.received.mid(0, from) + more;
    for (const auto asker : std::as_const(ticket.askers))
        m_notices.push_back({ ServeNotice::Kind::Tokens, {}, {}, ticket.id, {}, asker, from, more, {}, {} });
}

Status Serving::checkAnswer(
    const Job& job, const Ticket& ticket, const NodeInfo& node, const QByteArray& line, const QJsonObject& signedAnswer)
{
    if (node.signingKey.isEmpty() || signedAnswer.value(QStringLiteral("signer")).toString() != node.signingKey)
        return Error { QStringLiteral("answer.signer"),
            QStringLiteral("the answer is not signed with the node's registered key") };
    if (auto status = verifyDocument(signedAnswer); !status)
        return Error { QStringLiteral("answer.") + status.error().field, status.error().message };
    auto unsigned_ = signedAnswer;
    unsigned_.remove(QStringLiteral("signer"));
    unsigned_.remove(QStringLiteral("signature"));
    if (unsigned_ != inference::answerDocument(ticket.assignment, job.id, ticket.id, line))
        return Error { QStringLiteral("answer"), QStringLiteral("the signed answer is not of this ticket and line") };
    return inference::checkLines(inference::answerTask(job.replicaTask, ticket.question), { line });
}

Status Serving::answered(const QString& nodeId, const NodeInfo& node, const QString& ticketId, const QByteArray& line,
    const QJsonObject& signedAnswer, const QString& failure)
{
    auto ticket = m_tickets.find(ticketId);
    if (ticket == m_tickets.end() || ticket->node != nodeId)
        return Error { QStringLiteral("ticket"), QStringLiteral("this node does not hold ticket %1 (any more)").arg(ticketId) };
    auto& job = m_jobs[ticket->jobId];
    Status checked = failure.isEmpty() ? checkAnswer(job, *ticket, node, line, signedAnswer)
                                       : Status(Error { QStringLiteral("failure"), failure });
    if (!checked) {
        // No answer of this node's: the ticket goes to another replica, and this node hosts the job
        // no more.
        qCWarning(lcServing).noquote() << "node" << nodeId.left(12) << "gave no answer to" << ticketId << ":"
                                       << checked.error().toString();
        const QString assignment = ticket->assignment;
        release(*ticket);
        job.excluded.insert(nodeId);
        drop(assignment, true);
        requeue(job, *ticket, true);
        return failure.isEmpty() ? checked : Status {};
    }
    release(*ticket);
    if (ticket->checking)
        secondAnswer(job, *ticket, nodeId, line);
    else
        firstAnswer(job, *ticket, nodeId, line);
    pump(job);
    return {};
}

void Serving::requeue(Job& job, Ticket& ticket, bool front)
{
    ticket.received.clear();
    if (front)
        job.queue.push_front(ticket.id);
    else
        job.queue.push_back(ticket.id);
    pump(job);
}

void Serving::firstAnswer(Job& job, Ticket& ticket, const QString& nodeId, const QByteArray& line)
{
    // The askers have every token of the answer (a node streams them all before its ANSWER).
    if (auto completion = inference::completionOf(line); completion && completion->tokens != ticket.forwarded) {
        ticket.received = completion->tokens;
        const auto common
            = std::mismatch(ticket.forwarded.begin(), ticket.forwarded.end(), ticket.received.begin(), ticket.received.end())
                  .first
            - ticket.forwarded.begin();
        forward(ticket, common);
    }
    ticket.firstNode = nodeId;
    ticket.firstLine = line;
    if (ticket.contradicted) { // two nodes streamed different tokens: the referee decides now
        auto right = referee(job, ticket);
        if (!right) {
            qCWarning(lcServing).noquote() << "the referee failed on" << ticket.id << ":" << right.error().toString();
            settle(job, ticket, line, false, { { nodeId, true } });
            return;
        }
        const bool agrees = line == *right || inference::agreeWithin(InferenceSpec::Task::Generate, line, *right);
        settle(job, ticket, agrees ? line : *right, true, { { nodeId, agrees } });
        return;
    }
    if (!ticket.sampled) {
        settle(job, ticket, line, false, { { nodeId, true } });
        return;
    }
    ticket.checking = true;
    job.queue.push_front(ticket.id);
}

void Serving::secondAnswer(Job& job, Ticket& ticket, const QString& nodeId, const QByteArray& line)
{
    if (line == ticket.firstLine) {
        settle(job, ticket, line, true, { { ticket.firstNode, true }, { nodeId, true } });
        return;
    }
    auto right = referee(job, ticket);
    if (!right) {
        // Nobody can be told wrong without the referee: the first answer goes out unchecked.
        qCWarning(lcServing).noquote() << "the referee failed on" << ticket.id << ":" << right.error().toString();
        settle(job, ticket, ticket.firstLine, false, { { ticket.firstNode, true }, { nodeId, true } });
        return;
    }
    auto agrees = [&](const QByteArray& claim) {
        return claim == *right || inference::agreeWithin(InferenceSpec::Task::Generate, claim, *right);
    };
    const bool first = agrees(ticket.firstLine), second = agrees(line);
    settle(job, ticket,
        first        ? ticket.firstLine
            : second ? line
                     : *right,
        true, { { ticket.firstNode, first }, { nodeId, second } });
}

Result<QByteArray> Serving::referee(const Job& job, const Ticket& ticket)
{
    auto weights = m_.blobs.read(job.weightsBlob);
    if (!weights)
        return weights.error();
    const auto task = inference::answerTask(job.replicaTask, ticket.question);
    auto replay = m_.math.replay(task, 0, *weights, task.startWeights, 1, {});
    if (!replay)
        return replay.error();
    auto lines = inference::linesOf(replay->weights);
    if (!lines || lines->size() != 1)
        return Error { QStringLiteral("referee"), QStringLiteral("the re-execution gave no answer") };
    return lines->front();
}

Credits Serving::costOf(const Job& job, const inference::Question& question, const QByteArray& line) const
{
    const auto completion = inference::completionOf(line);
    const auto tokens = question.prompt.size() + (completion ? completion->tokens.size() : 0);
    return job.pricePerToken.checkedMultiply(tokens).value_or(Credits {});
}

void Serving::settle(Job& job, Ticket& ticket, const QByteArray& line, bool checked, const QHash<QString, bool>& rightByNode)
{
    // Paid (or slashed) in one transaction: the answerer by `pay:`, the checker by `verify:`.
    const auto price = costOf(job, ticket.question, line);
    Credits cost;
    QStringList wrong; // replicas of nodes that answered wrongly, dropped once the ticket is settled
    auto transaction = m_.store.begin();
    Status moved = transaction ? Status {} : Status(transaction.error());
    QString honest;
    for (auto it = rightByNode.begin(); it != rightByNode.end(); ++it) {
        if (it.value())
            honest = it.key();
    }
    for (auto it = rightByNode.begin(); moved && it != rightByNode.end(); ++it) {
        const bool first = it.key() == ticket.firstNode;
        if (it.value()) {
            auto paid = m_.stakes.payFromEscrow(job.id, it.key(), price,
                first ? QStringLiteral("pay:%1/%2").arg(job.id, ticket.id) : QStringLiteral("verify:%1").arg(ticket.id),
                first ? QStringLiteral("served answer") : QStringLiteral("re-executed a served answer"));
            if (paid)
                cost = cost.checkedAdd(*paid).value_or(cost);
            else
                moved = paid.error();
        } else {
            // Slashed, and it hosts the job no more.
            qCWarning(lcServing).noquote() << "node" << it.key().left(12) << "answered" << ticket.id << "wrongly: slashed";
            job.excluded.insert(it.key());
            for (const auto& replica : std::as_const(m_replicas)) {
                if (replica.jobId == job.id && replica.node == it.key())
                    wrong.append(replica.assignment);
            }
            moved = m_.stakes.slash(it.key(), honest, QStringLiteral("slash:%1:%2").arg(ticket.id, it.key()),
                QStringLiteral("signed a wrong answer to ticket %1 of job %2").arg(ticket.id, job.id));
        }
    }
    if (moved && transaction)
        moved = transaction->commit() ? Status {} : Status(Error { QStringLiteral("database"), QStringLiteral("commit failed") });
    if (!moved)
        qCWarning(lcServing).noquote() << "could not pay for" << ticket.id << ":" << moved.error().toString();
    auto completion = inference::completionOf(line);
    QJsonArray tokens;
    for (const auto token : completion ? completion->tokens : QList<std::int64_t> {})
        tokens.append(qint64(token));
    const QJsonObject answer { { QStringLiteral("tokens"), tokens },
        { QStringLiteral("finish"), completion && completion->stopped ? QStringLiteral("stop") : QStringLiteral("length") },
        { QStringLiteral("text"), inference::textOf(completion ? completion->tokens : QList<std::int64_t> {}) },
        { QStringLiteral("line"), QString::fromUtf8(line) }, { QStringLiteral("cost"), cost.toString() },
        { QStringLiteral("checked"), checked } };
    for (const auto asker : std::as_const(ticket.askers))
        m_notices.push_back({ ServeNotice::Kind::Answer, {}, {}, ticket.id, {}, asker, 0, {}, answer, {} });
    ++job.answered;
    job.checked += checked ? 1 : 0;
    job.tokens += completion ? completion->tokens.size() : 0;
    if (!ticket.rememberAs.isEmpty()) {
        job.live.remove(ticket.rememberAs);
        if (job.remembered.size() < MaxRemembered) {
            auto kept = answer;
            kept.insert(QStringLiteral("question"), ticket.question.toJson());
            job.remembered.insert(ticket.rememberAs, kept);
        }
    }
    m_tickets.remove(ticket.id);
    for (const auto& assignment : wrong)
        drop(assignment, true);
}

void Serving::refuseAll(Ticket& ticket, const Error& error)
{
    for (const auto asker : std::as_const(ticket.askers))
        m_notices.push_back({ ServeNotice::Kind::Refuse, {}, {}, ticket.id, {}, asker, 0, {}, {}, error });
    release(ticket);
}

} // namespace tessera::core::broker
