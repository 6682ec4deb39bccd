#pragma once

#include "../error.h"
#include "../hash.h"
#include "inferencespec.h"

#include <QByteArray>
#include <QJsonObject>
#include <QList>

#include <cstdint>
#include <optional>

namespace tessera::core {
struct ShardTask;
}

namespace tessera::core::inference {

// The lines an inference shard writes, one per input (docs/DETERMINISM.md, "Inference"): JSON
// without spaces, keys in a fixed order, float32 values as printf("%.9g"). A line's SHA-256 is
// its entry in the shard's chain; the shard's blob is its lines, each followed by '\n'.
QByteArray formatFloat(float value);
QByteArray classifyLine(
    std::int64_t index, std::int64_t chosen, const float* probabilities, std::int64_t classes, std::optional<std::int64_t> label);
QByteArray scoreLine(std::int64_t index, float loss, std::int64_t tokens);
QByteArray generateLine(std::int64_t index, const QList<std::int64_t>& tokens, bool stopped);

// The blob of lines, and the chain of a shard: the model's weights' hash, then one hash per batch
// of `batchSize` lines (a step; generate: a prompt), the SHA-256 of its lines' SHA-256s one after
// the other, so that the chain is as long as the shard has steps and a batch's entry pins each
// of its lines.
QByteArray blobOf(const QList<QByteArray>& lines);
Digest batchHash(const QList<QByteArray>& lines);
QList<Digest> chainOf(const Digest& startWeights, const QList<QByteArray>& lines, std::int64_t batchSize);
// A blob's lines (each without its '\n'); an error when it does not end with one.
Result<QList<QByteArray>> linesOf(const QByteArray& blob);

// The most bytes of lines a shard may reveal.
inline constexpr qsizetype MaxShardBytes = qsizetype(256) << 20;
// The field of an error about a line's form (not its hash): what the broker refuses without a
// slash (docs/VERIFICATION.md, "Inference"). Tessera's node checks the same rules on the values as
// it makes the lines (compute/engine/detail/inferencerun.cpp), so it never sends such a line.
inline const QString FormField = QStringLiteral("lines");

// A revealed shard against its task and the chain its node signed: one line per input of
// [sampleBegin, sampleEnd) in order, hashing batch by batch to the chain, then (checkLines) each
// a line of the task's kind with values in range and of its input. An error of field
// weightsSha256 is a contradiction of what the node signed; of field FormField, a line's form.
Status checkRevealed(const ShardTask& task, const QByteArray& blob, const QList<Digest>& chain);
Status checkLines(const ShardTask& task, const QList<QByteArray>& lines);

// What a finished job's lines add up to (tessera-job status): inputs; classify: labelled inputs
// and how many got their label; score: the mean loss; generate: tokens written.
struct Summary {
    std::int64_t inputs = 0;
    std::int64_t labelled = 0;
    std::int64_t correct = 0;
    double meanLoss = 0.0;
    std::int64_t tokens = 0;
    double accuracy() const { return labelled > 0 ? double(correct) / double(labelled) : 0.0; }
};
Result<Summary> summarize(InferenceSpec::Task task, const QByteArray& blob);

// Two lines of one input made on different runtime profiles: equal within the tolerance of
// docs/DETERMINISM.md, "Inference" (classes, tokens equal; probabilities within 1e-3; losses
// within 1e-3 relative). `why` says where they part.
bool agreeWithin(InferenceSpec::Task task, const QByteArray& a, const QByteArray& b, QString* why = nullptr);
// Where two generate lines' completions part (the first differing token position), -1: nowhere.
std::int64_t firstDifferingToken(const QByteArray& a, const QByteArray& b);

// A generate job's lines as `tessera-job fetch` writes them: "text" added, the tokens as UTF-8
// (invalid bytes replaced). Other lines unchanged.
QByteArray withText(const QByteArray& blob);

} // namespace tessera::core::inference
