#pragma once

// A peer for in-process tests of the session rules: a ZeroMQ socket in the test's context
// (inproc://), with helpers to send a message and to wait for the next one. The waits are bounded
// in real time only as a safety net: every message is already there or arrives at once over
// inproc; the clock that the rules read is the test's ManualClock.

#include <net/protocol.h>

#include <QElapsedTimer>
#include <QJsonObject>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <optional>

namespace tessera::tests {

struct Received {
    QByteArray routingId; // a ROUTER's peer
    net::Message message;
};

class SessionPeer {
public:
    SessionPeer(zmq::context_t& context, zmq::socket_type type, const std::string& endpoint, bool bind)
        : m_socket(context, type)
    {
        m_socket.set(zmq::sockopt::linger, 0);
        if (bind)
            m_socket.bind(endpoint);
        else
            m_socket.connect(endpoint);
        m_router = type == zmq::socket_type::router;
    }

    void send(
        net::Command command, const QJsonObject& header = {}, const QByteArray& payload = {}, const QByteArray& routingId = {})
    {
        const auto frames = net::encode({ command, header, payload });
        if (m_router)
            m_socket.send(zmq::buffer(routingId.constData(), std::size_t(routingId.size())), zmq::send_flags::sndmore);
        for (qsizetype i = 0; i < frames.size(); ++i)
            m_socket.send(zmq::buffer(frames[i].constData(), std::size_t(frames[i].size())),
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }

    // The next message, if one comes within waitMs (the other side is pumped by `pump` meanwhile).
    template<typename Pump> std::optional<Received> next(Pump&& pump, int waitMs = 2000)
    {
        QElapsedTimer timer;
        timer.start();
        do {
            pump();
            std::vector<zmq::message_t> parts;
            if (zmq::recv_multipart(m_socket, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
                Received received;
                QList<QByteArray> frames;
                for (std::size_t i = 0; i < parts.size(); ++i) {
                    QByteArray bytes(static_cast<const char*>(parts[i].data()), qsizetype(parts[i].size()));
                    if (m_router && i == 0)
                        received.routingId = bytes;
                    else
                        frames.append(bytes);
                }
                if (auto message = net::decode(frames))
                    received.message = *message;
                return received;
            }
        } while (timer.elapsed() < waitMs);
        return std::nullopt;
    }

    // The next message that is not a heartbeat.
    template<typename Pump> std::optional<Received> nextSkippingHeartbeats(Pump&& pump, int waitMs = 2000)
    {
        for (;;) {
            auto received = next(pump, waitMs);
            if (!received || received->message.command != net::Command::Heartbeat)
                return received;
        }
    }

    // Drains what is there (heartbeats, say) without waiting.
    template<typename Pump> void drain(Pump&& pump)
    {
        while (next(pump, 0)) { }
    }

private:
    zmq::socket_t m_socket;
    bool m_router = false;
};

} // namespace tessera::tests
