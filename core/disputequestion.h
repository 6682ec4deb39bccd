#pragma once

#include "enumnames.h"

#include <QString>

#include <cstdint>
#include <optional>

namespace tessera::core {

// What a dispute asks a node for about one of its results (docs/PROTOCOL.md, CHECKPOINT): the
// training state at a checkpoint; for a portable job, the trace of a checkpoint interval or the
// operands of one instruction of one step (docs/VERIFICATION.md, "Disputes over portable jobs").
struct DisputeQuestion {
    enum class Want { State, Trace, Operands };
    Want want = Want::State;
    std::int64_t checkpoint = 0; // State: that checkpoint; Trace: the interval that ends there
    std::int64_t step = 0; // Operands: the shard step (1-based)
    std::int64_t instruction = 0; // Operands: the instruction of its program

    // For logs: "checkpoint 4", "the trace of checkpoint 4", "the operands of step 23, instruction 7".
    QString describe() const
    {
        switch (want) {
        case Want::Trace:
            return QStringLiteral("the trace of checkpoint %1").arg(checkpoint);
        case Want::Operands:
            return QStringLiteral("the operands of step %1, instruction %2").arg(step).arg(instruction);
        case Want::State:
            break;
        }
        return QStringLiteral("checkpoint %1").arg(checkpoint);
    }
    bool operator==(const DisputeQuestion&) const = default;
};

template<> struct EnumNames<DisputeQuestion::Want> { // CHECKPOINT's `want`
    static constexpr std::array names { "state", "trace", "operands" };
};

} // namespace tessera::core
