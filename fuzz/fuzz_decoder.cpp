// libFuzzer target: the wire protocol's decoder (net::decode) on arbitrary frames. The input is
// split into frames at each 0xFF 0x00 pair; whatever comes, decode returns a message or an error,
// and a serving message's header is read as its typed request (docs/PROTOCOL.md, "Serving").

#include <net/messages.h>
#include <net/protocol.h>

#include <QByteArray>
#include <QList>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    QList<QByteArray> frames;
    QByteArray current;
    for (std::size_t i = 0; i < size; ++i) {
        if (i + 1 < size && data[i] == 0xFF && data[i + 1] == 0x00) {
            frames.append(current);
            current.clear();
            ++i;
            continue;
        }
        current.append(char(data[i]));
    }
    frames.append(current);
    auto message = tessera::net::decode(frames);
    if (message) {
        // What decodes must encode again.
        (void)tessera::net::encode(*message);
        using tessera::net::Command;
        switch (message->command) {
        case Command::Ask:
            (void)tessera::net::AskRequest::fromHeader(message->header);
            break;
        case Command::Request:
            (void)tessera::net::ServeRequest::fromHeader(message->header);
            break;
        case Command::Tokens:
            (void)tessera::net::TokensMessage::fromHeader(message->header);
            break;
        case Command::Answer:
            (void)tessera::net::AnswerRequest::fromHeader(message->header);
            break;
        case Command::Hosting:
            (void)tessera::net::HostingMessage::fromHeader(message->header);
            break;
        default:
            break;
        }
    }
    return 0;
}
