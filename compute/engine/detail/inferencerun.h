#pragma once

// Private to compute/: includes torch. An inference shard's arithmetic (docs/DETERMINISM.md,
// "Inference"): one output line per input, each from the model's weights and that input alone.

#include "datasets.h"
#include "models.h"
#include "portablestep.h"

#include <compute/common/environment.h>

#include <core/error.h>
#include <core/inference/question.h>
#include <core/shardtask.h>

#include <QByteArray>
#include <QList>

#include <functional>
#include <memory>

namespace tessera::compute::detail {

class InferenceRun {
public:
    // weights: the model's (a pickled dict of tensors) whose canonical hash is task.startWeights.
    static core::Result<std::unique_ptr<InferenceRun>> start(
        const core::ShardTask& task, const QByteArray& weights, const ComputeEnvironment& environment);

    // The lines of inputs [first, last) (absolute indices within the task's range), each batch
    // computed whole (the referee's one input is computed in its batch).
    core::Result<QList<QByteArray>> linesOf(std::int64_t first, std::int64_t last);
    // Step `step` of the shard (0-based): its batch, or its prompt.
    core::Result<QList<QByteArray>> stepLines(std::int64_t step);
    // A served model's answer to one question (task: a serve replica's, docs/PROTOCOL.md,
    // "Serving"): the line of answerTask(task, question), calling onTokens(from, tokens) with the
    // tokens as they may be streamed (none a stop takes back).
    using OnTokens = std::function<void(std::int64_t from, const QList<std::int64_t>& tokens)>;
    core::Result<QByteArray> answer(const core::inference::Question& question, const OnTokens& onTokens);

private:
    InferenceRun() = default;
    core::Result<QList<QByteArray>> batchLines(std::int64_t batch);
    core::Result<QByteArray> generate(std::int64_t index, const OnTokens& onTokens = {}, qsizetype holdBack = 0);
    core::Status loadPrompts();
    // The logits of a batch (portable mode: by the portable kernels, float32).
    at::Tensor logitsOf(const at::Tensor& x);
    // A window's mean cross-entropy, and a batch's softmax, by the task's arithmetic.
    float lossOf(const at::Tensor& logits, const at::Tensor& targets) const;
    at::Tensor probabilitiesOf(const at::Tensor& logits) const;
    // The next token after `sequence`, drawn by the job's rule from the last position's logits.
    std::int64_t nextToken(const std::vector<std::int64_t>& sequence, Model::KvCache& cache, std::int64_t& cached, bool& caches,
        std::uint64_t seed, std::int64_t t);

    core::ShardTask m_task;
    ComputeEnvironment m_environment;
    std::unique_ptr<Model> m_model;
    std::unique_ptr<PortableForward> m_portable; // portable mode's forward pass
    std::unique_ptr<portable::GptDecoder> m_decoder; // and its cache, for generation
    std::shared_ptr<const Dataset> m_inputs; // classify, score
    QList<QByteArray> m_prompts; // generate: the file's lines (empty: the task's text)
    std::int64_t m_vocabulary = 0;
    std::int64_t m_classes = 0; // classify: the first batch's, which every batch must have
};

} // namespace tessera::compute::detail
