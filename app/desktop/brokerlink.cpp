#include "brokerlink.h"

#include <core/inference/outputs.h>
#include <net/brokerclient.h>
#include <net/messages.h>

#include <QDir>
#include <QPromise>
#include <QSaveFile>
#include <QtConcurrent/QtConcurrentRun>

namespace tessera::app {

namespace {

core::Error noBroker()
{
    return { QStringLiteral("broker"), QStringLiteral("no broker") };
}

// Thrown from a transfer's progress to end it: the transfer's own client goes with it.
struct Cancelled { };

std::function<void(std::int64_t, std::int64_t)> checked(BrokerLink::Progress progress, BrokerLink::Cancel cancel)
{
    return [progress = std::move(progress), cancel = std::move(cancel)](std::int64_t done, std::int64_t total) {
        if (cancel && cancel->load())
            throw Cancelled {};
        if (progress)
            progress(done, total);
    };
}

core::Error cancelled()
{
    return { QStringLiteral("cancelled"), QStringLiteral("cancelled") };
}

} // namespace

BrokerLink::BrokerLink(int timeoutMs)
    : m_timeoutMs(timeoutMs)
    , m_thread([this] { serve(); })
{ }

BrokerLink::~BrokerLink()
{
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
        m_queue.clear(); // their promises finish as cancelled when dropped
    }
    m_wake.notify_all();
    m_thread.join();
}

void BrokerLink::setBroker(std::optional<net::BrokerAddress> broker, std::optional<net::CurveKeys> keys)
{
    std::lock_guard lock(m_mutex);
    const auto text = [](const std::optional<net::BrokerAddress>& address) { return address ? address->toString() : QString(); };
    if (text(broker) == text(m_broker) && keys.has_value() == m_keys.has_value())
        return;
    m_broker = std::move(broker);
    m_keys = std::move(keys);
    ++m_generation;
}

std::optional<net::BrokerAddress> BrokerLink::broker() const
{
    std::lock_guard lock(m_mutex);
    return m_broker;
}

std::pair<std::optional<net::BrokerAddress>, std::optional<net::CurveKeys>> BrokerLink::target() const
{
    std::lock_guard lock(m_mutex);
    return { m_broker, m_keys };
}

int BrokerLink::pending() const
{
    std::lock_guard lock(m_mutex);
    return int(m_queue.size()) + m_running;
}

QFuture<core::Result<QJsonObject>> BrokerLink::request(net::Command command, QJsonObject header)
{
    auto promise = std::make_shared<QPromise<core::Result<QJsonObject>>>();
    auto future = promise->future();
    promise->start();
    {
        std::lock_guard lock(m_mutex);
        m_queue.push_back([promise, command, header = std::move(header)](net::BrokerClient* client) {
            core::Result<QJsonObject> reply = client ? client->request(command, header) : core::Result<QJsonObject>(noBroker());
            const bool broken = !reply && reply.error().field == u"broker";
            promise->addResult(reply);
            promise->finish();
            return broken;
        });
    }
    m_wake.notify_one();
    return future;
}

void BrokerLink::serve()
{
    std::unique_ptr<net::BrokerClient> client;
    std::uint64_t made = ~std::uint64_t(0);
    for (;;) {
        std::function<bool(net::BrokerClient*)> task;
        std::optional<net::BrokerAddress> broker;
        std::optional<net::CurveKeys> keys;
        std::uint64_t generation = 0;
        {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, [&] { return m_stop || !m_queue.empty(); });
            if (m_stop)
                return;
            task = std::move(m_queue.front());
            m_queue.pop_front();
            ++m_running;
            broker = m_broker;
            keys = m_keys;
            generation = m_generation;
        }
        if (generation != made) {
            client.reset();
            if (broker)
                client = std::make_unique<net::BrokerClient>(*broker, keys, m_timeoutMs);
            made = generation;
        }
        if (task(client.get()))
            made = ~std::uint64_t(0);
        std::lock_guard lock(m_mutex);
        --m_running;
    }
}

QFuture<core::Result<QString>> BrokerLink::submit(
    core::JobSpec spec, const QString& baseDirectory, Progress progress, Cancel cancel)
{
    const auto [broker, keys] = target();
    return QtConcurrent::run([=]() mutable -> core::Result<QString> {
        if (!broker)
            return noBroker();
        try {
            net::BrokerClient client(*broker, keys, 30'000);
            const auto step = checked(progress, cancel);
            if (auto uploaded = client.uploadJobFiles(spec, baseDirectory, {}, step); !uploaded)
                return uploaded.error();
            step(0, 0); // cancelled between the files and the submission: nothing was submitted
            // Asked again under one request id when the broker is slow to answer: one job, one escrow.
            return client.submit(spec);
        } catch (const Cancelled&) {
            return cancelled();
        }
    });
}

QFuture<core::Result<QString>> BrokerLink::saveModel(const QString& jobId, const QString& path, Progress progress, Cancel cancel)
{
    const auto [broker, keys] = target();
    return QtConcurrent::run([=]() -> core::Result<QString> {
        if (!broker)
            return noBroker();
        try {
            net::BrokerClient client(*broker, keys, 30'000);
            auto reply = client.request(net::Command::Status, net::JobRequest { jobId }.toHeader());
            if (!reply)
                return reply.error();
            auto status = net::StatusReply::fromHeader(*reply);
            if (!status)
                return status.error();
            if (!status->job.full)
                return core::Error { QStringLiteral("forbidden"), QStringLiteral("only the job's owner may fetch its weights") };
            if (status->job.weightsBlob.isNull())
                return core::Error { QStringLiteral("jobId"),
                    QStringLiteral("the broker named no weights for job %1").arg(jobId) };
            if (!status->job.inference.isEmpty() && status->job.state != core::broker::JobState::Finished)
                return core::Error { QStringLiteral("jobId"),
                    QStringLiteral("job %1 has %2 of %3 shards done: its results come when it has finished")
                        .arg(jobId)
                        .arg(status->job.shardsDone)
                        .arg(status->job.shards) };
            auto weights = client.download(status->job.weightsBlob, checked(progress, cancel));
            if (!weights)
                return weights.error();
            if (status->job.inference == u"generate") // with each completion's text, as tessera-job fetch writes it
                *weights = core::inference::withText(*weights);
            QSaveFile file(path); // whole or not at all
            if (!file.open(QIODevice::WriteOnly) || file.write(*weights) != weights->size() || !file.commit())
                return core::Error { QStringLiteral("file"), QStringLiteral("cannot write %1").arg(path) };
            return path;
        } catch (const Cancelled&) {
            return cancelled();
        }
    });
}

} // namespace tessera::app
