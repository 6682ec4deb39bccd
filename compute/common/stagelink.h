#pragma once

#include <core/error.h>
#include <core/hash.h>

#include <QByteArray>
#include <QList>

#include <cstdint>

namespace tessera::compute {

// How a stage task (core::ShardTask::isStage) trades tensors with the other stages of its shard
// (docs/PROTOCOL.md, "Stage tasks"): the residual stream forward to stage s + 1, its gradient back
// to stage s - 1, and each stage's sums of squares to every other (for the clipping factor). A
// tensor's bytes are its float32 elements, little-endian, in row-major order; the sums are
// stageSquaresBytes(). What a link carries over is the network's business (net/), or a queue
// between threads (train-local). Called from the one thread that runs the stage.
class StageLink {
public:
    enum class Kind : std::uint8_t { Activation, Gradient, Squares };
    virtual ~StageLink() = default;
    // Hands `bytes` to stage `to` as its tensor of this kind for (step, micro-batch); 0-based step.
    virtual core::Status send(std::int64_t to, Kind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes) = 0;
    // Waits for stage `from`'s tensor of this kind for (step, micro-batch): an error when the link
    // is gone or the run is cancelled (the stage fails).
    virtual core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) = 0;
};

const char* kindName(StageLink::Kind kind); // "activation", "gradient", "squares"

// One tensor a stage sent or received, as its result commits to it: the SHA-256 of its bytes.
struct StageTensor {
    bool sent = false; // else received
    std::int64_t peer = 0; // the other stage
    StageLink::Kind kind = StageLink::Kind::Activation;
    std::int64_t step = 0;
    std::int64_t micro = 0;
    core::Digest digest;
    bool operator==(const StageTensor&) const = default;
};

// The root a stage's result commits to (docs/PROTOCOL.md, "Stage tasks"): SHA-256 over each
// tensor's line "sent|received PEER KIND STEP MICRO SHA256HEX\n", in the order the stage ran them.
core::Digest stageTensorsRoot(const QList<StageTensor>& tensors);

} // namespace tessera::compute
