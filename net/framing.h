#pragma once

// Private to net/: moving Tessera messages through ZeroMQ sockets, in one place for the broker
// server, the node client and the broker client.

#include "protocol.h"

#include <QByteArray>
#include <QList>
#include <QString>

#include <zmq.hpp>

#include <optional>

namespace tessera::net::detail {

// Sends a message (after a ROUTER's routing id, when given). Large frames (blob chunks) go without
// a copy: ZeroMQ keeps the bytes alive until they are sent.
// Returns the bytes of the message's frames (the routing id not counted).
std::int64_t sendMessage(zmq::socket_t& socket, const Message& message, const QByteArray& routingId = {});

struct Frames {
    QList<QByteArray> frames;
    QString userId; // the CURVE key the ZAP handler vouched for, if any
    QString peerAddress; // the sender's IP address (ZeroMQ's Peer-Address), if known
};

// The next multipart message, if one is waiting (it does not wait).
std::optional<Frames> receiveFrames(zmq::socket_t& socket);

} // namespace tessera::net::detail
