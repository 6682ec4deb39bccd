#pragma once

// Private to compute/: includes torch. A shard's step in portable mode (training.determinism
// portable): the step's program (compute/portable/program.h) run over the model's and the
// optimizer's own tensors, which it updates in place.

#include "models.h"
#include "optimizer.h"

#include <compute/common/stagelink.h>
#include <compute/portable/gptdecoder.h>
#include <compute/portable/program.h>
#include <compute/portable/stages.h>
#include <compute/portable/zoo.h>
#include <core/error.h>
#include <core/shardtask.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace tessera::compute::detail {

// The program of shard step `step` (0-based) of a task, for samples of this shape: an error
// names the field for a model the portable kernels do not cover.
core::Result<portable::Program> portableProgram(
    const core::ShardTask& task, std::int64_t step, const std::vector<std::int64_t>& sampleShape, std::int64_t classes);

// The forward program of a batch of `batch` samples of this shape (inference, docs/DETERMINISM.md,
// "Inference in portable mode"); an error names inference.determinism.
core::Result<portable::Forward> portableForward(
    const core::ModelSpec& model, std::int64_t batch, const std::vector<std::int64_t>& sampleShape, std::int64_t classes);

// A zoo model's logits by the portable kernels, over the model's own parameters.
class PortableForward {
public:
    PortableForward(core::ModelSpec spec, Model& model, std::int64_t classes, int threads);
    // x: a batch ([batch, sample...], float32 samples or int64 tokens); the logits, float32.
    core::Result<at::Tensor> logits(const at::Tensor& x);
    // The zoo gpt's incremental decoder over the model's parameters (the same bits as logits() of
    // the whole sequence's last position).
    core::Result<std::unique_ptr<portable::GptDecoder>> decoder();

private:
    core::ModelSpec m_spec;
    Model& m_model;
    std::int64_t m_classes;
    portable::Executor m_executor;
    std::vector<std::int64_t> m_shape; // of the batch m_forward was built for
    portable::Forward m_forward;
    std::vector<std::pair<int, void*>> m_bindings; // its parameters' values and their memory
};

class PortableStep {
public:
    // threads: how many compute here (any count gives the same bits).
    PortableStep(const core::ShardTask& task, Model& model, Optimizer& optimizer, std::vector<std::int64_t> sampleShape,
        std::int64_t classes, int threads);

    // Called after each instruction, with its outputs in the executor's memory.
    using Observer = std::function<void(const portable::Program&, std::size_t instruction, portable::Executor&)>;
    // Runs shard step `step` on a batch (samples as float32, targets int64); returns its loss.
    // Before the first instruction, `observer` (if any) is called with instruction = npos for the
    // state at the step's start.
    core::Result<double> run(std::int64_t step, const at::Tensor& x, const at::Tensor& y, const Observer& observer = {});
    // Runs the program of shard step `step` up to (not including) instruction `stop` and returns
    // the values it reads there: the operands of that instruction, in its input order.
    core::Result<std::vector<at::Tensor>> operandsOf(
        std::int64_t step, const at::Tensor& x, const at::Tensor& y, std::size_t stop);

    static constexpr std::size_t Start = std::size_t(-1);

    // A stage task's step (task.isStage(); docs/DETERMINISM.md, "Pipeline stages"): the stage's
    // micro-batches' halves in 1F1B order, the tensors traded over `link` (each one's hash appended
    // to `tensors`), then the stage's update. The loss: the last stage's, 0 at the others.
    core::Result<double> runStage(
        std::int64_t step, const at::Tensor& x, const at::Tensor& y, StageLink& link, QList<StageTensor>& tensors);
    // A stage task's parameters (the model's names), which its state and result hold; empty for
    // other tasks.
    core::Result<std::set<std::string>> stageParameters();

private:
    core::Status bindState(const portable::Program& program, std::int64_t step);
    // The model's or the optimizer's memory for a state value of a program (a buffer born in this
    // step, created, is made here), checked against the value's type and shape.
    core::Result<void*> stateMemory(const portable::Value& value, bool before, bool created);
    // The task's stages for shard step `step` (kept while the step's run holds them).
    core::Result<const std::vector<portable::Stage>*> stagesOf(std::int64_t step);
    std::vector<portable::Stage> m_stages;
    double m_stagesLearningRate = 0.0; // what m_stages were built for
    bool m_stagesBuffersBefore = false;
    NamedTensors m_parameters; // the model's, found once
    core::Result<double> runMicroBatched(std::int64_t step, const at::Tensor& x, const at::Tensor& y);
    core::Result<portable::Program> prepare(std::int64_t step, const at::Tensor& x, const at::Tensor& y);
    // A fresh run of `program`: the state bound, the batch converted to its values and bound.
    core::Status bindBatch(const portable::Program& program, std::int64_t step, const at::Tensor& x, const at::Tensor& y);

    const core::ShardTask& m_task;
    Model& m_model;
    Optimizer& m_optimizer;
    std::vector<std::int64_t> m_sampleShape;
    std::int64_t m_classes;
    portable::Executor m_executor;
    at::Tensor m_adamStep; // int64 scalar: the optimizer's step count while the program runs
    at::Tensor m_x, m_y; // the batch, as the program reads it
};

} // namespace tessera::compute::detail
