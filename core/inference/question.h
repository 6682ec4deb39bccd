#pragma once

#include "../error.h"
#include "../hash.h"
#include "../jsonreader.h"

#include <QByteArray>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <cstdint>

namespace tessera::core {
struct ShardTask;
}

namespace tessera::core::inference {

// One request to a served model (docs/PROTOCOL.md, "Serving"): a prompt and how to generate its
// completion. Its answer is the line of a generate shard of that one prompt at index 0
// (answerTask), so that every replica, the referee and infer-local write the same bytes.
struct Question {
    static constexpr qsizetype MaxPromptBytes = 4096;
    QByteArray prompt; // bytes, one token each
    std::int64_t maxTokens = 100;
    double temperature = 0.8;
    std::int64_t seed = 0;
    QList<QByteArray> stop;

    // Reads a question (unknown fields refused); maxTokens at most `mostTokens` (the job's).
    static Result<Question> read(
        const QJsonObject& json, std::int64_t mostTokens, const QString& field = QStringLiteral("question"));
    QJsonObject toJson() const; // every field written
    // The longest stop sequence's bytes, less one: how many tokens a node holds back while
    // streaming, so that none it streamed is taken back by a stop.
    qsizetype holdBack() const;
    bool operator==(const Question&) const = default;
};

// The generate task whose one line answers `question` on a replica of `replica` (a serve task).
ShardTask answerTask(const ShardTask& replica, const Question& question);

// The signed answer document's kind (docs/PROTOCOL.md, "Serving").
inline constexpr const char* AnswerKind = "tessera-answer";
// The unsigned answer document a node signs for a line.
QJsonObject answerDocument(const QString& assignment, const QString& jobId, const QString& ticket, const QByteArray& line);

// A generate line's tokens and finish (read back from the line), or an error naming "line".
struct Completion {
    QList<std::int64_t> tokens;
    bool stopped = false;
};
Result<Completion> completionOf(const QByteArray& line);
// Tokens as text: their bytes as UTF-8 (invalid bytes replaced).
QString textOf(const QList<std::int64_t>& tokens);

} // namespace tessera::core::inference
