#pragma once

#include <net/curvekeys.h>
#include <net/protocol.h>

#include <core/error.h>
#include <core/jobspec.h>

#include <QFuture>
#include <QJsonObject>
#include <QString>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace tessera::net {
class BrokerClient;
}

namespace tessera::app {

// The desktop app's way to its broker, never on the GUI thread: the window must not wait on a
// network (a broker that is slow or gone costs the user nothing but the answer). Requests run in
// order on a thread of their own over one kept connection; a job's submission and a model's
// download run each on a pool thread with progress and a way to cancel them. Every call returns at
// once with a QFuture, which the GUI reads when it is ready (QFuture::then with a context object).
class BrokerLink {
public:
    explicit BrokerLink(int timeoutMs = 1500);
    ~BrokerLink(); // waits for the request in flight (at most its timeout), drops the queued ones
    BrokerLink(const BrokerLink&) = delete;
    BrokerLink& operator=(const BrokerLink&) = delete;

    // Where the requests go from now on, and as whom; nullopt: nowhere (they fail at once).
    void setBroker(std::optional<net::BrokerAddress> broker, std::optional<net::CurveKeys> keys);
    std::optional<net::BrokerAddress> broker() const;

    QFuture<core::Result<QJsonObject>> request(net::Command command, QJsonObject header);
    // Requests queued or in flight.
    int pending() const;

    // A long transfer's progress (bytes done, of total; total 0: not known yet), told on the
    // transfer's thread; and its cancel switch, which the transfer reads between chunks.
    using Progress = std::function<void(std::int64_t done, std::int64_t total)>;
    using Cancel = std::shared_ptr<std::atomic<bool>>;
    // Uploads the files a job names (relative to baseDirectory), then submits it: its id.
    QFuture<core::Result<QString>> submit(core::JobSpec spec, const QString& baseDirectory, Progress progress, Cancel cancel);
    // Downloads a job's newest weights (torch.load reads them) into `path`, whole or not at all.
    QFuture<core::Result<QString>> saveModel(const QString& jobId, const QString& path, Progress progress, Cancel cancel);

private:
    void serve();
    // The broker and keys a transfer of its own connects with, read together.
    std::pair<std::optional<net::BrokerAddress>, std::optional<net::CurveKeys>> target() const;

    const int m_timeoutMs;
    mutable std::mutex m_mutex;
    std::condition_variable m_wake;
    // Each returns whether the connection should be made anew (a request timed out: its answer may
    // still come and would be taken for the next one's).
    std::deque<std::function<bool(net::BrokerClient*)>> m_queue;
    int m_running = 0;
    bool m_stop = false;
    std::optional<net::BrokerAddress> m_broker;
    std::optional<net::CurveKeys> m_keys;
    std::uint64_t m_generation = 0; // changes with the broker: the worker's connection is made anew
    std::thread m_thread;
};

} // namespace tessera::app
