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

void Serving::tick()
{
    // A replica that never says it is loaded, or a node that holds a request and never answers it,
    // loses it: the replica or request goes to another node, and that node hosts the job no more.
    const auto now = m_.clock.nowMs();
    QStringList stuck;
    for (const auto& replica : std::as_const(m_replicas)) {
        if (!replica.ready && now - replica.placedAt > LoadTimeoutMs)
            stuck.append(replica.assignment);
    }
    for (const auto& ticket : std::as_const(m_tickets)) {
        const auto job = m_jobs.constFind(ticket.jobId);
        // A replica answers one request at a time: the one behind waits for the one before it.
        const auto limit = MaxAtReplica * (AnswerTimeoutMs + ticket.question.maxTokens * 1000);
        if (!ticket.node.isEmpty() && job != m_jobs.constEnd() && now - ticket.sentAt > limit
            && !stuck.contains(ticket.assignment))
            stuck.append(ticket.assignment);
    }
    for (const auto& assignment : stuck) {
        const auto replica = m_replicas.constFind(assignment);
        if (replica == m_replicas.constEnd())
            continue;
        qCWarning(lcServing).noquote() << "replica" << assignment << "of node" << replica->node.left(12)
                                       << "did not load or answer in time: it goes to another node";
        if (auto job = m_jobs.find(replica->jobId); job != m_jobs.end())
            job->excluded.insert(replica->node);
        drop(assignment, true);
    }
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
    int hosted = 0; // each replica is a model loaded on the node: a few at most
    for (const auto& replica : std::as_const(m_replicas))
        hosted += replica.node == nodeId ? 1 : 0;
    if (hosted >= MaxReplicasPerNode)
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
        // A portable replica computes with the threads it has (any count gives the same bits).
        const bool portable = job.replicaTask.portable;
        if (hosts || held >= job.spec.inference.replicas || job.excluded.contains(nodeId)
            || (node.maxThreads < job.spec.inference.threads && !portable)
            || !missingCapabilities(node.capabilities, job.spec).isEmpty())
            continue;
        // One runtime profile a job (its replicas'), so that every replica gives every answer's
        // bytes; a job without replicas takes the next node's, a portable job is of every profile.
        if (held > 0 && !portable && runtimeProfileFamily(node.runtimeProfile) != runtimeProfileFamily(job.profile))
            continue;
        if (held == 0)
            job.profile = portable ? PortableProfile : node.runtimeProfile;
        Assignment assignment { newAssignmentId(), job.replicaTask, job.weightsBlob, 0, std::nullopt };
        assignment.task.shard = job.replicasPlaced++ % std::max<std::int64_t>(job.spec.inference.replicas, 1);
        auto named = blobsNamedBy(job.spec) + QList<Digest> { job.weightsBlob };
        if (auto granted = m_.store.allowRead(named, nodeId); !granted)
            return granted.error();
        m_replicas.insert(assignment.id, { assignment.id, job.id, nodeId, false, 0, m_.clock.nowMs(), ++m_placed });
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
            if (ticket.askers.size() >= MaxAskersPerTicket)
                return Error { QStringLiteral("requestId"), QStringLiteral("is asked %1 times already").arg(MaxAskersPerTicket) };
            ticket.askers.append(asker);
            if (!ticket.forwarded.isEmpty())
                m_notices.push_back({ ServeNotice::Kind::Tokens, {}, {}, ticket.id, {}, asker, 0, ticket.forwarded, {}, {} });
            return {};
        }
    }
    if (qsizetype(job->queue.size()) >= MaxQueued)
        return Error { QStringLiteral("jobId"),
            QStringLiteral("%1 requests wait for this job's replicas already; ask again later").arg(MaxQueued) };
    // Twice the most it could cost (a checked answer is paid to two nodes), set aside until it is
    // answered: what is owed and set aside for the requests before it is not there to spend.
    const auto most = costOf(*job, question, question.maxTokens).checkedMultiply(2);
    auto escrow = m_.stakes.escrow(jobId);
    if (!escrow)
        return escrow.error();
    const auto free
        = escrow->checkedSubtract(job->owedTotal).value_or(Credits {}).checkedSubtract(job->reserved).value_or(Credits {});
    if (!most || free < *most)
        return Error { QStringLiteral("budget"),
            QStringLiteral("the job's budget holds %1 credits, less than this request may cost (%2)")
                .arg(free.toString(), most ? most->toString() : QStringLiteral("?")) };
    Ticket ticket;
    ticket.id = newTicketId();
    ticket.jobId = jobId;
    ticket.question = question;
    ticket.askers = { asker };
    ticket.rememberAs = key;
    ticket.sampled = m_.random.generateDouble() < job->spec.inference.checkShare;
    ticket.reserved = *most;
    job->reserved = job->reserved.checkedAdd(*most).value_or(job->reserved);
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
        if (!best || replica.load < best->load || (replica.load == best->load && replica.placed < best->placed))
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
    ticket.sentAt = m_.clock.nowMs();
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
    if (more.isEmpty())
        return; // the answer is shorter than what was streamed: its OK says so
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
        drop(assignment, true); // may settle other tickets (a check with nobody left to make it)
        if (auto again = m_tickets.find(ticketId); again != m_tickets.end())
            requeue(job, *again, true);
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
        // An answer that parts from what another node streamed before it went is checked.
        ticket.contradicted = ticket.contradicted || common < ticket.forwarded.size();
        forward(ticket, common);
    }
    ticket.firstNode = nodeId;
    ticket.firstLine = line;
    // Streamed tokens are signed by nobody: a node that went away after streaming others proves
    // nothing, and its stream was corrected above. Such an answer is checked as a sampled one is.
    if (!ticket.sampled && !ticket.contradicted) {
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
        // Nobody can be told wrong without the referee (it failed, or it computes on another runtime
        // profile, whose tokens may part from an honest node's): the first answer goes out
        // unchecked, and both are paid.
        qCWarning(lcServing).noquote() << "no ruling on" << ticket.id << ":" << right.error().toString();
        settle(job, ticket, ticket.firstLine, false, { { ticket.firstNode, true }, { nodeId, true } });
        return;
    }
    auto agrees = [&](const QByteArray& claim) { return claim == *right; };
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
    const bool same = job.replicaTask.portable
        ? replay->runtimeProfile == PortableProfile
        : runtimeProfileFamily(replay->runtimeProfile) == runtimeProfileFamily(job.profile);
    if (!same)
        return Error {
            QStringLiteral("referee"),
            QStringLiteral("the broker's runtime profile (%1) is not the replicas' (%2)").arg(replay->runtimeProfile, job.profile)
        };
    auto lines = inference::linesOf(replay->weights);
    if (!lines || lines->size() != 1)
        return Error { QStringLiteral("referee"), QStringLiteral("the re-execution gave no answer") };
    return lines->front();
}

Status Serving::flushPayments(const QString& jobId)
{
    // Every payment, then (all made, inside the caller's transaction) the debts are cleared; a
    // payment that fails leaves every debt for the next call. The sequence keeps causes unique.
    const auto at = QStringLiteral("%1-%2").arg(m_.clock.nowMs()).arg(++m_flushes);
    for (auto& job : m_jobs) {
        if ((!jobId.isEmpty() && job.id != jobId) || job.owed.isEmpty())
            continue;
        for (auto it = job.owed.begin(); it != job.owed.end(); ++it) {
            for (const bool check : { false, true }) {
                const auto amount = check ? it->forChecks : it->forAnswers;
                const auto count = check ? it->checks : it->answers;
                if (count == 0)
                    continue;
                auto paid = m_.stakes.payFromEscrow(job.id, it.key(), amount,
                    QStringLiteral("%1:%2/served/%3/%4")
                        .arg(check ? QStringLiteral("verify") : QStringLiteral("pay"), job.id, at, it.key()),
                    QStringLiteral("%1 served %2").arg(count).arg(check ? QStringLiteral("checks") : QStringLiteral("answers")));
                if (!paid)
                    return paid.error();
            }
        }
    }
    return {};
}

bool Serving::owes() const
{
    return std::any_of(m_jobs.begin(), m_jobs.end(), [](const Job& job) { return !job.owed.isEmpty(); });
}

void Serving::paid(const QString& jobId)
{
    for (auto& job : m_jobs) {
        if (jobId.isEmpty() || job.id == jobId) {
            job.owed.clear();
            job.owedTotal = {};
        }
    }
}

void Serving::closeAccounts(const QString& jobId)
{
    // A first answer that waited for its check was streamed whole: its askers get it (unchecked),
    // and its node is owed for it, once (the ticket is settled and gone).
    auto job = m_jobs.find(jobId);
    if (job == m_jobs.end())
        return;
    QStringList checking;
    for (const auto& ticket : std::as_const(m_tickets)) {
        if (ticket.jobId == jobId && ticket.checking)
            checking.append(ticket.id);
    }
    for (const auto& id : checking) {
        auto ticket = m_tickets.find(id);
        if (ticket == m_tickets.end())
            continue;
        job->queue.erase(std::remove(job->queue.begin(), job->queue.end(), id), job->queue.end());
        release(*ticket);
        const QByteArray line = ticket->firstLine;
        const QString first = ticket->firstNode;
        settle(*job, *ticket, line, false, { { first, true } });
    }
}

void Serving::owe(Job& job, const QString& node, bool check, Credits amount)
{
    auto& owed = job.owed[node];
    (check ? owed.checks : owed.answers) += 1;
    auto& sum = check ? owed.forChecks : owed.forAnswers;
    sum = sum.checkedAdd(amount).value_or(sum);
    job.owedTotal = job.owedTotal.checkedAdd(amount).value_or(job.owedTotal);
}

Credits Serving::costOf(const Job& job, const inference::Question& question, const QByteArray& line) const
{
    const auto completion = inference::completionOf(line);
    return costOf(job, question, completion ? completion->tokens.size() : 0);
}

Credits Serving::costOf(const Job& job, const inference::Question& question, std::int64_t written) const
{
    // The positions the answer read (docs/JOBS.md, "Served models"): the prompt (at most the
    // context), then one a token while the sequence fits the context, `context` a token past it.
    const auto context = std::max<std::int64_t>(job.spec.model.context, 1);
    const auto prompt = std::int64_t(question.prompt.size());
    std::int64_t positions = std::min(prompt, context);
    const auto cached = std::clamp<std::int64_t>(context - prompt, 0, written);
    positions += cached + (written - cached) * context;
    return job.pricePerToken.checkedMultiply(positions).value_or(Credits {});
}

void Serving::settle(Job& job, Ticket& ticket, const QByteArray& line, bool checked, const QHash<QString, bool>& rightByNode)
{
    // What each right node earned is owed until the next flushPayments() (once a second): a ledger
    // transaction an answer would hold the broker's loop on the disk for each. A wrong node is
    // slashed at once.
    const auto price = costOf(job, ticket.question, line);
    Credits cost;
    QStringList wrong; // replicas of nodes that answered wrongly, dropped once the ticket is settled
    QString honest;
    job.reserved = job.reserved.checkedSubtract(ticket.reserved).value_or(Credits {});
    ticket.reserved = {};
    for (auto it = rightByNode.begin(); it != rightByNode.end(); ++it) {
        if (it.value()) {
            honest = it.key();
            owe(job, it.key(), it.key() != ticket.firstNode, price);
            cost = cost.checkedAdd(price).value_or(cost);
        }
    }
    const bool slashes = std::any_of(rightByNode.begin(), rightByNode.end(), [](bool right) { return !right; });
    std::optional<storage::Transaction> transaction;
    Status moved;
    if (slashes) {
        auto begun = m_.store.begin();
        if (begun)
            transaction.emplace(std::move(*begun));
        else
            moved = begun.error();
    }
    for (auto it = rightByNode.begin(); transaction && moved && it != rightByNode.end(); ++it) {
        if (!it.value()) {
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
        qCWarning(lcServing).noquote() << "could not slash for" << ticket.id << ":" << moved.error().toString();
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
        while (job.remembered.size() >= MaxRemembered && !job.rememberedOrder.empty()) {
            job.remembered.remove(job.rememberedOrder.front());
            job.rememberedOrder.pop_front();
        }
        auto kept = answer;
        kept.insert(QStringLiteral("question"), ticket.question.toJson());
        job.remembered.insert(ticket.rememberAs, kept);
        job.rememberedOrder.push_back(ticket.rememberAs);
    }
    m_tickets.remove(ticket.id);
    for (const auto& assignment : wrong)
        drop(assignment, true);
}

void Serving::refuseAll(Ticket& ticket, const Error& error)
{
    if (auto job = m_jobs.find(ticket.jobId); job != m_jobs.end())
        job->reserved = job->reserved.checkedSubtract(ticket.reserved).value_or(Credits {});
    ticket.reserved = {};
    for (const auto asker : std::as_const(ticket.askers))
        m_notices.push_back({ ServeNotice::Kind::Refuse, {}, {}, ticket.id, {}, asker, 0, {}, {}, error });
    release(ticket);
}

} // namespace tessera::core::broker
