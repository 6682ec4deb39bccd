#include "embeddedbroker.h"

#include <compute/brokermath.h>
#include <core/broker/offthreadmath.h>
#include <net/brokerserver.h>

#include <future>

namespace tessera::app {

EmbeddedBroker::~EmbeddedBroker()
{
    stop();
}

core::Result<QString> EmbeddedBroker::start(Options options)
{
    stop();
    m_stop = false;
    std::promise<core::Result<QString>> ready;
    auto address = ready.get_future();
    m_thread = std::thread([this, options = std::move(options), &ready]() mutable {
        // Everything the broker owns (SQLite, sockets) lives and dies on this thread.
        auto blobs = core::broker::Broker::openBlobs(options.dataDirectory);
        if (!blobs) {
            ready.set_value(blobs.error());
            return;
        }
        compute::BrokerMath math(options.environment, **blobs);
        core::broker::OffThreadMath offThread(math); // aggregation and replays off the network loop
        core::SystemClock clock;
        auto broker = core::broker::Broker::open(options.dataDirectory, **blobs, offThread, clock, options.broker);
        if (!broker) {
            ready.set_value(broker.error());
            return;
        }
        net::BrokerServerOptions serverOptions;
        serverOptions.bind = QStringLiteral("tcp://127.0.0.1:*");
        serverOptions.heartbeatMs = options.heartbeatMs;
        net::BrokerServer server(**broker, serverOptions, clock);
        if (auto bound = server.bind(); !bound) {
            ready.set_value(bound.error());
            return;
        }
        ready.set_value(server.address());
        offThread.setWhileWaiting([&server] { server.serveWhileBusy(); });
        server.run(m_stop);
        offThread.setWhileWaiting({});
    });
    auto result = address.get();
    if (!result) {
        m_thread.join();
        return result.error();
    }
    m_address = *result;
    return result;
}

void EmbeddedBroker::stop()
{
    if (!m_thread.joinable())
        return;
    m_stop = true;
    m_thread.join();
}

} // namespace tessera::app
