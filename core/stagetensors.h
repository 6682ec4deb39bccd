#pragma once

#include "error.h"
#include "hash.h"

#include <QByteArray>
#include <QList>
#include <QString>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

namespace tessera::core {

// What the stages of a pipeline shard trade (docs/PROTOCOL.md, "Stage tasks"): the residual
// stream forward, its gradient back, and each stage's sums of squares for the clipping factor.
enum class TensorKind : std::uint8_t { Activation, Gradient, Squares };
QString nameOf(TensorKind kind); // "activation", "gradient", "squares"
std::optional<TensorKind> tensorKindNamed(const QString& name);

struct ShardTask;
// The most bytes a stage task's tensor of this kind may have: a micro-batch's positions of float32
// rows of the model's width (int8 rows are smaller), or 64 KiB of sums (a name and 8 bytes for
// each of a stage's tensors). What the broker relays, and a node's supervisor carries for its
// worker, is refused past it.
std::int64_t maxTensorBytes(const ShardTask& task, TensorKind kind);

// One tensor a stage sent or received, as its result commits to it: the SHA-256 of its bytes.
struct StageTensor {
    bool sent = false; // else received
    std::int64_t peer = 0; // the other stage
    TensorKind kind = TensorKind::Activation;
    std::int64_t step = 0;
    std::int64_t micro = 0;
    Digest digest;
    bool operator==(const StageTensor&) const = default;
};

// The root a stage's result commits to (ShardResult::tensorsRoot): SHA-256 over each tensor's line
// "sent|received PEER KIND STEP MICRO SHA256HEX\n", the lines sorted bytewise (a stage and the
// broker that relays its tensors see them in different orders).
Digest stageTensorsRoot(const QList<StageTensor>& tensors);

// What a stage received in one shard, as the broker relayed it (docs/PROTOCOL.md, "Stage inputs"):
// the blob a re-execution of the stage reads its neighbours' tensors from (ShardTask::stageInputs).
// The file: the line "tessera-stage-inputs 1\n", then for each tensor, in the order it came whole,
// the line "FROM KIND STEP MICRO BYTES\n" and its BYTES bytes.
class StageInputs {
public:
    static constexpr const char* Magic = "tessera-stage-inputs 1\n";
    // The record of one tensor: its line and its bytes, to append to the file.
    static QByteArray record(std::int64_t from, TensorKind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes);
    // A file read back; an error names what is wrong (a damaged line, a tensor twice, bytes missing).
    static Result<StageInputs> parse(const QByteArray& file);
    // The tensor stage `from` sent of this kind for (step, micro-batch), if it was received.
    std::optional<QByteArray> find(std::int64_t from, TensorKind kind, std::int64_t step, std::int64_t micro) const;
    qsizetype size() const { return qsizetype(m_tensors.size()); }

private:
    using Key = std::tuple<std::int64_t, int, std::int64_t, std::int64_t>; // from, kind, step, micro
    QByteArray m_file; // the file as read: each tensor is copied out when it is asked for
    std::map<Key, std::pair<qsizetype, qsizetype>> m_tensors; // offset, size
};

} // namespace tessera::core
