#include "replicahost.h"

#include <core/readfile.h>

#include <QLoggingCategory>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

Q_LOGGING_CATEGORY(lcServe, "tessera.serve")

namespace tessera::app {

struct ReplicaHost::Replica {
    QString tag;
    QString assignment;
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::pair<QString, core::inference::Question>> questions;
    bool stop = false;
    std::atomic<bool> done { false }; // its thread has returned: joined at once
    QString jobId;
    std::atomic<std::int64_t> answered { 0 };
    std::atomic<std::int64_t> tokens { 0 };
    std::thread thread;
};

ReplicaHost::ReplicaHost(Load load, std::function<void(Served)> deliver)
    : m_load(std::move(load))
    , m_deliver(std::move(deliver))
{ }

ReplicaHost::~ReplicaHost()
{
    unhost({}, {});
    for (auto& stopping : m_stopping)
        stopping->thread.join();
}

void ReplicaHost::reap()
{
    // Threads of replicas stopped earlier that have returned (never one still answering: the
    // caller's loop does not wait for a long answer to end).
    for (auto it = m_stopping.begin(); it != m_stopping.end();) {
        if ((*it)->done) {
            (*it)->thread.join();
            it = m_stopping.erase(it);
        } else {
            ++it;
        }
    }
}

void ReplicaHost::host(const QString& tag, const QString& assignment, const core::ShardTask& replica, const QString& weightsPath)
{
    auto hosted = std::make_shared<Replica>();
    hosted->tag = tag;
    hosted->assignment = assignment;
    hosted->jobId = replica.jobId;
    {
        QMutexLocker lock(&m_mutex);
        reap();
        if (m_replicas.contains(keyOf(tag, assignment)))
            return;
        m_replicas.insert(keyOf(tag, assignment), hosted);
    }
    hosted->thread = std::thread([this, hosted, replica, weightsPath] { serve(hosted, replica, weightsPath); });
}

QList<ReplicaHost::Summary> ReplicaHost::summaries()
{
    QMutexLocker lock(&m_mutex);
    QList<Summary> all;
    for (const auto& replica : std::as_const(m_replicas))
        all.append({ replica->jobId, replica->answered, replica->tokens });
    return all;
}

void ReplicaHost::ask(
    const QString& tag, const QString& assignment, const QString& ticket, const core::inference::Question& question)
{
    std::shared_ptr<Replica> hosted;
    {
        QMutexLocker lock(&m_mutex);
        hosted = m_replicas.value(keyOf(tag, assignment));
    }
    if (!hosted) {
        m_deliver({ Served::Kind::Answered, tag, assignment, ticket, 0, {}, {},
            QStringLiteral("this node does not host replica %1").arg(assignment) });
        return;
    }
    {
        std::lock_guard lock(hosted->mutex);
        hosted->questions.emplace_back(ticket, question);
    }
    hosted->wake.notify_one();
}

void ReplicaHost::unhost(const QString& tag, const QString& assignment)
{
    QList<std::shared_ptr<Replica>> stopping;
    {
        QMutexLocker lock(&m_mutex);
        for (auto it = m_replicas.begin(); it != m_replicas.end();) {
            const bool match = (tag.isEmpty() || (*it)->tag == tag) && (assignment.isEmpty() || (*it)->assignment == assignment);
            if (match) {
                stopping.append(*it);
                it = m_replicas.erase(it);
            } else {
                ++it;
            }
        }
    }
    // Told to stop (an answer in progress ends at its next token), not waited for here.
    for (const auto& hosted : stopping) {
        {
            std::lock_guard lock(hosted->mutex);
            hosted->stop = true;
        }
        hosted->wake.notify_one();
    }
    QMutexLocker lock(&m_mutex);
    m_stopping += stopping;
    reap();
}

void ReplicaHost::serve(const std::shared_ptr<Replica>& replica, const core::ShardTask& task, const QString& weightsPath)
{
    // Said last, once the model (a worker, perhaps) is gone too: reap() then joins at once.
    struct Done {
        std::atomic<bool>& flag;
        ~Done() { flag = true; }
    } done { replica->done };
    const QString tag = replica->tag, assignment = replica->assignment;
    auto stopped = [replica] {
        std::lock_guard lock(replica->mutex);
        return replica->stop;
    };
    std::unique_ptr<compute::HostedModel> model;
    QString failure;
    try {
        auto weights = core::readFile(weightsPath);
        auto loaded
            = !weights ? core::Result<std::unique_ptr<compute::HostedModel>>(weights.error()) : m_load(task, *weights, stopped);
        if (loaded)
            model = std::move(*loaded);
        else
            failure = loaded.error().toString();
    } catch (const std::exception& caught) {
        failure = QStringLiteral("internal error: %1").arg(QString::fromUtf8(caught.what()));
    }
    if (!failure.isEmpty())
        qCWarning(lcServe).noquote() << "cannot host" << assignment << ":" << failure;
    m_deliver({ Served::Kind::Hosted, tag, assignment, {}, 0, {}, {}, failure });
    while (model) {
        std::pair<QString, core::inference::Question> next;
        {
            std::unique_lock lock(replica->mutex);
            replica->wake.wait(lock, [&] { return replica->stop || !replica->questions.empty(); });
            if (replica->stop)
                return;
            next = std::move(replica->questions.front());
            replica->questions.pop_front();
        }
        const QString ticket = next.first;
        Served answered { Served::Kind::Answered, tag, assignment, ticket, 0, {}, {}, {} };
        // The first tokens go at once (the time to the first token is what a user waits for), the
        // rest at most every StreamEveryMs: one TOKENS message a token would flood the broker.
        Served pending { Served::Kind::Tokens, tag, assignment, ticket, 0, {}, {}, {} };
        auto lastSent = std::chrono::steady_clock::time_point {};
        auto flush = [&] {
            if (!pending.tokens.isEmpty())
                m_deliver(pending);
            pending.from += pending.tokens.size();
            pending.tokens.clear();
            lastSent = std::chrono::steady_clock::now();
        };
        try {
            auto line = model->answer(next.second, [&](std::int64_t from, const QList<std::int64_t>& tokens) {
                if (stopped())
                    throw std::runtime_error("the replica was stopped");
                if (pending.tokens.isEmpty())
                    pending.from = from;
                pending.tokens.append(tokens);
                if (std::chrono::steady_clock::now() - lastSent >= std::chrono::milliseconds(StreamEveryMs))
                    flush();
            });
            // What is left goes with the answer: its line has every token, and the broker streams them.
            if (line) {
                answered.line = std::move(*line);
                ++replica->answered;
                replica->tokens += pending.from + pending.tokens.size();
            } else
                answered.error = line.error().toString();
        } catch (const std::exception& caught) {
            answered.error = QStringLiteral("internal error: %1").arg(QString::fromUtf8(caught.what()));
        }
        m_deliver(std::move(answered));
    }
}

} // namespace tessera::app
