#pragma once

#include <core/error.h>
#include <core/stagetensors.h>

#include <QByteArray>

#include <cstdint>

namespace tessera::compute {

using core::StageTensor;
using core::stageTensorsRoot;

// How a stage task (core::ShardTask::isStage) trades tensors with the other stages of its shard
// (docs/PROTOCOL.md, "Stage tasks"): the residual stream forward to stage s + 1, its gradient back
// to stage s - 1, and each stage's sums of squares to every other (for the clipping factor). A
// tensor's bytes are its float32 elements, little-endian, in row-major order. What a link carries
// them over is the network's business (net/), or a queue between threads (train-local). Called
// from the one thread that runs the stage.
class StageLink {
public:
    using Kind = core::TensorKind;
    virtual ~StageLink() = default;
    // Hands `bytes` to stage `to` as its tensor of this kind for (step, micro-batch); 0-based step.
    virtual core::Status send(std::int64_t to, Kind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes) = 0;
    // Waits for stage `from`'s tensor of this kind for (step, micro-batch): an error when the link
    // is gone or the run is cancelled (the stage fails).
    virtual core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) = 0;
};

// A stage re-executed from what it received (core::ShardTask::stageInputs, docs/VERIFICATION.md,
// "Pipeline stages"): each receive is served from the broker's record, each send goes nowhere (the
// run still logs its hash for tensorsRoot). A tensor the record lacks fails the stage.
class RecordedStageLink final : public StageLink {
public:
    explicit RecordedStageLink(core::StageInputs inputs)
        : m_inputs(std::move(inputs))
    { }
    core::Status send(std::int64_t, Kind, std::int64_t, std::int64_t, const QByteArray&) override { return {}; }
    core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) override
    {
        if (auto bytes = m_inputs.find(from, kind, step, micro))
            return *bytes;
        return core::Error { QStringLiteral("stageInputs"),
            QStringLiteral("the stage's recorded inputs have no %1 from stage %2 for step %3, micro-batch %4")
                .arg(core::nameOf(kind))
                .arg(from)
                .arg(step + 1)
                .arg(micro) };
    }

private:
    core::StageInputs m_inputs;
};

// A stage's link that passes every tensor through to `inner` and keeps what it received as the
// broker records it (core::StageInputs::record): the record a re-execution reads (train-local's
// stages for a bench, a test's reference run).
class RecordingStageLink final : public StageLink {
public:
    explicit RecordingStageLink(StageLink& inner)
        : m_inner(inner)
    { }
    core::Status send(std::int64_t to, Kind kind, std::int64_t step, std::int64_t micro, const QByteArray& bytes) override
    {
        return m_inner.send(to, kind, step, micro, bytes);
    }
    core::Result<QByteArray> receive(std::int64_t from, Kind kind, std::int64_t step, std::int64_t micro) override
    {
        auto bytes = m_inner.receive(from, kind, step, micro);
        if (bytes)
            record += core::StageInputs::record(from, kind, step, micro, *bytes);
        return bytes;
    }
    QByteArray record = core::StageInputs::Magic;

private:
    StageLink& m_inner;
};

} // namespace tessera::compute
