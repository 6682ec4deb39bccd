#include "framing.h"

#include <zmq_addon.hpp>

namespace tessera::net::detail {

std::int64_t sendMessage(zmq::socket_t& socket, const Message& message, const QByteArray& routingId)
{
    const auto frames = encode(message);
    std::int64_t bytes = 0;
    if (!routingId.isEmpty())
        socket.send(zmq::buffer(routingId.constData(), std::size_t(routingId.size())), zmq::send_flags::sndmore);
    for (qsizetype i = 0; i < frames.size(); ++i) {
        bytes += frames[i].size();
        const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        if (frames[i].size() < 4096) {
            socket.send(zmq::buffer(frames[i].constData(), std::size_t(frames[i].size())), flags);
            continue;
        }
        auto* held = new QByteArray(frames[i]);
        zmq::message_t frame(
            held->data(), std::size_t(held->size()), [](void*, void* hint) { delete static_cast<QByteArray*>(hint); }, held);
        socket.send(frame, flags);
    }
    return bytes;
}

std::optional<Frames> receiveFrames(zmq::socket_t& socket)
{
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(socket, std::back_inserter(parts), zmq::recv_flags::dontwait))
        return std::nullopt;
    Frames received;
    if (!parts.empty()) {
        try {
            received.userId = QString::fromLatin1(parts.back().gets("User-Id"));
        } catch (const zmq::error_t&) { }
        try {
            received.peerAddress = QString::fromLatin1(parts.back().gets("Peer-Address"));
        } catch (const zmq::error_t&) { }
    }
    for (const auto& part : parts)
        received.frames.append(QByteArray(static_cast<const char*>(part.data()), qsizetype(part.size())));
    return received;
}

} // namespace tessera::net::detail
