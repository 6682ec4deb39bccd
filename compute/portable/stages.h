#pragma once

// The zoo gpt cut into pipeline stages (layers on different nodes): the program of one
// micro-batch's forward and backward pass (gptStep without its update) split into S stages of
// consecutive blocks, stage 0 also holding the embeddings and the last stage the final LayerNorm,
// the head and the loss. Each stage's program is the instructions of the whole program that
// belong to it, in the whole program's order, so a micro-batch computed stage by stage, with each
// boundary tensor handed on unchanged, gives every value the bits of the whole program (whatever
// S is). What crosses a boundary is one tensor each way a micro-batch: the residual stream
// [batch, length, width] forward, its gradient backward. No torch, no Qt.

#include "program.h"
#include "zoo.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::compute::portable {

// Stage s holds blocks [firstBlock[s], firstBlock[s + 1]): the layers split as evenly as they go,
// the earlier stages taking one more where they do not divide (the last also holds the head).
std::vector<std::int64_t> stageBlocks(std::int64_t layers, std::int64_t stages);

struct Stage {
    // Instructions [0, backwardStart) are the micro-batch's forward pass through the stage (the last
    // stage's ends with its CrossEntropy), the rest its backward pass. Each half starts with a Batch
    // whose outputs are what the stage reads from outside: forward, the tokens (stage 0) or the
    // activation received, and the targets (the last stage); backward, the gradient received (every
    // stage but the last).
    Program program;
    std::size_t backwardStart = 0;
    int received = -1; // forward: the activation from stage s - 1 (-1 at stage 0)
    int sent = -1; // forward: the activation for stage s + 1 (-1 at the last)
    int gradientReceived = -1; // backward: from stage s + 1 (-1 at the last)
    int gradientSent = -1; // backward: for stage s - 1 (-1 at stage 0)
    int loss = -1; // the last stage's micro-batch loss
    // The stage's parameters (stateBefore's values) and each one's gradient, in name order.
    std::vector<std::pair<int, int>> gradients;
    // The step's update of the stage's parameters, once their gradients are averaged over the
    // micro-batches: the whole program's update instructions for them (over the same values), its
    // stateBefore and stateAfter the stage's part of the training state. With clipping it starts
    // with a Batch of `clipFactor`, which every stage computes alike: the global norm's square is the
    // sum, over all the model's gradients in name order, of each one's float64 sum of squares
    // (sumOfSquares: what the stages exchange), and the factor clipFactor(that, clipNorm). Every
    // stage keeps Adam's step count (optimizer/adam_step) and counts it itself.
    Program update;
    int clipFactor = -1;
};

// The stages of a gpt without dropout, its head not tied to the token embedding when stages > 1
// (a tied head's gradient would cross from the last stage to the first): empty, with `why` set,
// for what the cut does not cover.
std::vector<Stage> gptStages(std::int64_t microBatch, std::int64_t length, std::int64_t vocabulary, std::int64_t layers,
    std::int64_t heads, std::int64_t width, std::int64_t context, bool tied, std::int64_t stages, std::string* why = nullptr,
    const OptimizerSettings& optimizer = {}, const StepSettings& step = {});

} // namespace tessera::compute::portable
