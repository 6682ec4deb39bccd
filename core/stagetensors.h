#pragma once

#include "error.h"
#include "hash.h"

#include <QList>
#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core {

// What the stages of a pipeline shard trade (docs/PROTOCOL.md, "Stage tasks"): the residual
// stream forward, its gradient back, and each stage's sums of squares for the clipping factor.
enum class TensorKind : std::uint8_t { Activation, Gradient, Squares };
QString nameOf(TensorKind kind); // "activation", "gradient", "squares"
std::optional<TensorKind> tensorKindNamed(const QString& name);

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

} // namespace tessera::core
