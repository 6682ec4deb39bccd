#include "protocol.h"

#include <QJsonDocument>
#include <QJsonParseError>

namespace tessera::net {

QString commandName(Command command)
{
    switch (command) {
    case Command::Register:
        return QStringLiteral("REGISTER");
    case Command::Welcome:
        return QStringLiteral("WELCOME");
    case Command::Heartbeat:
        return QStringLiteral("HEARTBEAT");
    case Command::Ready:
        return QStringLiteral("READY");
    case Command::Task:
        return QStringLiteral("TASK");
    case Command::Result:
        return QStringLiteral("RESULT");
    case Command::Ok:
        return QStringLiteral("OK");
    case Command::Error:
        return QStringLiteral("ERROR");
    case Command::Bye:
        return QStringLiteral("BYE");
    case Command::Get:
        return QStringLiteral("GET");
    case Command::Chunk:
        return QStringLiteral("CHUNK");
    case Command::Put:
        return QStringLiteral("PUT");
    case Command::Submit:
        return QStringLiteral("SUBMIT");
    case Command::Status:
        return QStringLiteral("STATUS");
    case Command::List:
        return QStringLiteral("LIST");
    case Command::Cancel:
        return QStringLiteral("CANCEL");
    case Command::Quote:
        return QStringLiteral("QUOTE");
    case Command::Balance:
        return QStringLiteral("BALANCE");
    case Command::Ledger:
        return QStringLiteral("LEDGER");
    case Command::Receipt:
        return QStringLiteral("RECEIPT");
    case Command::Nodes:
        return QStringLiteral("NODES");
    case Command::Commit:
        return QStringLiteral("COMMIT");
    case Command::Checkpoint:
        return QStringLiteral("CHECKPOINT");
    case Command::Verdict:
        return QStringLiteral("VERDICT");
    case Command::Stake:
        return QStringLiteral("STAKE");
    case Command::Verifications:
        return QStringLiteral("VERIFICATIONS");
    case Command::Have:
        return QStringLiteral("HAVE");
    case Command::LogHead:
        return QStringLiteral("LOG-HEAD");
    case Command::LogProof:
        return QStringLiteral("LOG-PROOF");
    case Command::LogConsistency:
        return QStringLiteral("LOG-CONSISTENCY");
    case Command::LogEntries:
        return QStringLiteral("LOG-ENTRIES");
    case Command::Record:
        return QStringLiteral("RECORD");
    case Command::Ask:
        return QStringLiteral("ASK");
    case Command::Request:
        return QStringLiteral("REQUEST");
    case Command::Tokens:
        return QStringLiteral("TOKENS");
    case Command::Answer:
        return QStringLiteral("ANSWER");
    case Command::Hosting:
        return QStringLiteral("HOSTING");
    case Command::Tensor:
        return QStringLiteral("TENSOR");
    case Command::Stop:
        return QStringLiteral("STOP");
    }
    return QStringLiteral("0x%1").arg(int(command), 2, 16, QLatin1Char('0'));
}

namespace {

bool isKnown(std::uint8_t byte)
{
    switch (Command(byte)) {
    case Command::Register:
    case Command::Welcome:
    case Command::Heartbeat:
    case Command::Ready:
    case Command::Task:
    case Command::Result:
    case Command::Ok:
    case Command::Error:
    case Command::Bye:
    case Command::Get:
    case Command::Chunk:
    case Command::Put:
    case Command::Submit:
    case Command::Status:
    case Command::List:
    case Command::Cancel:
    case Command::Quote:
    case Command::Balance:
    case Command::Ledger:
    case Command::Receipt:
    case Command::Nodes:
    case Command::Commit:
    case Command::Checkpoint:
    case Command::Verdict:
    case Command::Stake:
    case Command::Verifications:
    case Command::Have:
    case Command::LogHead:
    case Command::LogProof:
    case Command::LogConsistency:
    case Command::LogEntries:
    case Command::Record:
    case Command::Ask:
    case Command::Request:
    case Command::Tokens:
    case Command::Answer:
    case Command::Hosting:
    case Command::Tensor:
    case Command::Stop:
        return true;
    }
    return false;
}

bool carriesPayload(Command command)
{
    return command == Command::Chunk || command == Command::Put || command == Command::Tensor;
}

} // namespace

QList<QByteArray> encode(const Message& message)
{
    QList<QByteArray> frames {
        QByteArray(ProtocolId),
        QByteArray(1, char(message.command)),
        QJsonDocument(message.header).toJson(QJsonDocument::Compact),
    };
    if (carriesPayload(message.command))
        frames.append(message.payload);
    return frames;
}

core::Result<Message, ProtocolError> decode(const QList<QByteArray>& frames)
{
    qsizetype total = 0;
    for (const auto& frame : frames)
        total += frame.size();
    if (total > MaxMessageBytes)
        return ProtocolError { errors::TooLarge,
            QStringLiteral("the message has %1 bytes; the limit is %2").arg(total).arg(MaxMessageBytes) };
    if (frames.size() < 3)
        return ProtocolError { errors::BadMessage,
            QStringLiteral("a message has at least 3 frames, this one %1").arg(frames.size()) };
    if (frames[0] != ProtocolId) {
        if (frames[0].startsWith("TESSERA/"))
            return ProtocolError { errors::BadVersion,
                QStringLiteral("this broker speaks %1, not %2")
                    .arg(QLatin1String(ProtocolId), QString::fromLatin1(frames[0].left(32))) };
        return ProtocolError { errors::BadMessage, QStringLiteral("the first frame must be %1").arg(QLatin1String(ProtocolId)) };
    }
    if (frames[1].size() != 1)
        return ProtocolError { errors::BadMessage, QStringLiteral("the command frame must be 1 byte") };
    const auto byte = std::uint8_t(frames[1][0]);
    if (!isKnown(byte))
        return ProtocolError { errors::UnknownCommand,
            QStringLiteral("unknown command 0x%1").arg(int(byte), 2, 16, QLatin1Char('0')), int(byte) };
    const auto command = Command(byte);
    if (frames[2].size() > MaxHeaderBytes)
        return ProtocolError { errors::TooLarge, QStringLiteral("the header is over %1 bytes").arg(MaxHeaderBytes), int(byte) };
    QJsonParseError parseError;
    const auto document = QJsonDocument::fromJson(frames[2], &parseError);
    if (parseError.error != QJsonParseError::NoError || !document.isObject())
        return ProtocolError { errors::BadMessage, QStringLiteral("the header must be a JSON object"), int(byte) };

    Message message { command, document.object(), {} };
    const qsizetype expectedFrames = carriesPayload(command) ? 4 : 3;
    if (frames.size() != expectedFrames)
        return ProtocolError { errors::BadMessage,
            QStringLiteral("%1 has %2 frames, not %3").arg(commandName(command)).arg(expectedFrames).arg(frames.size()),
            int(byte) };
    if (carriesPayload(command)) {
        if (frames[3].size() > MaxChunkBytes)
            return ProtocolError { errors::TooLarge, QStringLiteral("a chunk is at most %1 bytes").arg(MaxChunkBytes),
                int(byte) };
        message.payload = frames[3];
    }
    return message;
}

Message errorMessage(const QString& code, const QString& text, int re, const QJsonValue& id)
{
    QJsonObject header { { fields::Code, code }, { fields::Message, text } };
    if (re >= 0)
        header.insert(fields::Re, re);
    if (!id.isUndefined() && !id.isNull())
        header.insert(fields::Id, id);
    return { Command::Error, header, {} };
}

Message okMessage(const QJsonValue& id, QJsonObject header)
{
    if (!id.isUndefined() && !id.isNull())
        header.insert(fields::Id, id);
    return { Command::Ok, header, {} };
}

} // namespace tessera::net
