#include "stages.h"

#include "zoo.h"

#include <algorithm>
#include <map>
#include <set>

namespace tessera::compute::portable {

std::vector<std::int64_t> stageBlocks(std::int64_t layers, std::int64_t stages)
{
    std::vector<std::int64_t> first;
    if (stages < 1)
        return first;
    for (std::int64_t s = 0; s <= stages; ++s)
        first.push_back(layers - ((stages - s) * layers) / stages);
    return first;
}

namespace {

// The stage an instruction of gptStep belongs to, from the name of its first output: a block's
// values carry its name, the embeddings' and the head's their own.
std::int64_t stageOf(const std::string& name, const std::vector<std::int64_t>& first, std::int64_t stages)
{
    const std::string block = "transformer.h.";
    if (name.rfind(block, 0) == 0) {
        const auto index = std::stoll(name.substr(block.size()));
        for (std::int64_t s = 0; s < stages; ++s) {
            if (index < first[std::size_t(s + 1)])
                return s;
        }
        return stages - 1;
    }
    if (name == "embedding" || name == "batch.x" || name.rfind("transformer.wpe", 0) == 0
        || name.rfind("transformer.wte", 0) == 0)
        return 0;
    return stages - 1; // ln_f, the head, the loss
}

struct Cut {
    std::vector<std::size_t> forward, backward; // instructions of the whole program, in order
};

// Stage s's program: its instructions of the whole program in order, each half after a Batch of
// what it reads from outside; the reason it cannot be cut so, or empty.
std::string assemble(Stage& stage, std::int64_t s, std::int64_t stages, const Program& whole, const Cut& cut,
    const std::vector<std::int64_t>& writer, const std::set<int>& parameters, const std::map<std::string, int>& byName)
{
    auto refuse = [](const std::string& reason) { return reason; };
    const auto& batch = whole.instructions.front();
    const int tokens = batch.outputs.at(0), targets = batch.outputs.at(1);
    auto& program = stage.program;
    program.values = whole.values;
    std::set<int> used;
    // What a half reads from another stage: one tensor, received in its Batch.
    auto foreign = [&](const std::vector<std::size_t>& half) {
        std::vector<int> read;
        for (auto i : half) {
            for (int v : whole.instructions[i].inputs) {
                used.insert(v);
                if (!parameters.count(v) && writer[std::size_t(v)] != s && writer[std::size_t(v)] >= 0
                    && std::find(read.begin(), read.end(), v) == read.end())
                    read.push_back(v);
            }
        }
        return read;
    };
    auto readForward = foreign(cut.forward);
    auto readBackward = foreign(cut.backward);
    // The backward half re-reads the forward's own inputs (a LayerNorm's gradient reads the
    // activation it normalised): those arrived with the forward half.
    std::erase_if(readBackward, [&](int v) { return std::find(readForward.begin(), readForward.end(), v) != readForward.end(); });
    std::vector<int> forwardInputs;
    if (s == 0)
        forwardInputs.push_back(tokens);
    for (int v : readForward) {
        if (v == tokens || v == targets)
            continue;
        if (stage.received >= 0)
            return refuse("stage " + std::to_string(s) + " would receive more than one activation");
        stage.received = v;
        forwardInputs.push_back(v);
    }
    if (s == stages - 1)
        forwardInputs.push_back(targets);
    program.addInstruction(
        { Op::Batch, {}, forwardInputs, {}, {}, "what the stage reads: its batch or the activation received" });
    for (auto i : cut.forward)
        program.addInstruction(whole.instructions[i]);
    stage.backwardStart = program.instructions.size();
    std::vector<int> backwardInputs;
    for (int v : readBackward) {
        if (v == tokens)
            continue;
        if (stage.gradientReceived >= 0)
            return refuse("stage " + std::to_string(s) + " would receive more than one gradient");
        stage.gradientReceived = v;
        backwardInputs.push_back(v);
    }
    program.addInstruction({ Op::Batch, {}, backwardInputs, {}, {}, "what the stage reads: the gradient received" });
    for (auto i : cut.backward)
        program.addInstruction(whole.instructions[i]);
    for (auto i : cut.forward) {
        if (whole.instructions[i].op == Op::CrossEntropy)
            stage.loss = whole.instructions[i].outputs.at(0);
    }
    for (int v : whole.stateBefore) {
        if (!used.count(v))
            continue;
        program.stateBefore.push_back(v);
        // Parameter model/X's gradient is the value X.grad the stage writes.
        const auto gradient = byName.find(whole.values[std::size_t(v)].name.substr(6) + ".grad");
        if (gradient == byName.end() || writer[std::size_t(gradient->second)] != s)
            return refuse("no gradient of " + whole.values[std::size_t(v)].name + " in its stage");
        stage.gradients.emplace_back(v, gradient->second);
    }
    return {};
}

// The stage's part of the whole program's update: Scale, Sgd and Adam of its parameters (named in
// their first input: the gradient "X.grad", the parameter "model/X"), Adam's Count, and the state.
void cutUpdate(Stage& stage, const Program& whole)
{
    std::set<std::string> own; // "X" of the stage's parameters model/X
    for (const auto& [parameter, gradient] : stage.gradients)
        own.insert(whole.values[std::size_t(parameter)].name.substr(6));
    auto owned = [&](const std::string& name) { // a state value or a gradient of the stage's
        if (name == "optimizer/adam_step")
            return true;
        for (const auto* prefix : { "model/", "optimizer/momentum/", "optimizer/exp_avg/", "optimizer/exp_avg_sq/" }) {
            const std::string p = prefix;
            if (name.rfind(p, 0) == 0 && own.count(name.substr(p.size())))
                return true;
        }
        const auto dot = name.rfind(".grad");
        return dot != std::string::npos && own.count(name.substr(0, dot));
    };
    auto& update = stage.update;
    update.values = whole.values;
    for (const auto& instruction : whole.instructions) {
        if (!updates(instruction.op))
            continue;
        if (instruction.op == Op::ClipFactor) {
            stage.clipFactor = instruction.outputs.at(0);
            update.addInstruction(
                { Op::Batch, {}, { stage.clipFactor }, {}, {}, "the clipping factor, from every stage's sums" });
            continue;
        }
        if (instruction.op == Op::Count || owned(whole.values[std::size_t(instruction.inputs.at(0))].name))
            update.addInstruction(instruction);
    }
    for (int v : whole.stateBefore) {
        if (owned(whole.values[std::size_t(v)].name))
            update.stateBefore.push_back(v);
    }
    for (int v : whole.stateAfter) {
        if (owned(whole.values[std::size_t(v)].name))
            update.stateAfter.push_back(v);
    }
}

} // namespace

std::vector<Stage> gptStages(std::int64_t microBatch, std::int64_t length, std::int64_t vocabulary, std::int64_t layers,
    std::int64_t heads, std::int64_t width, std::int64_t context, bool tied, std::int64_t stages, std::string* why,
    const OptimizerSettings& optimizer, const StepSettings& step)
{
    auto refuse = [&](const std::string& reason) {
        if (why)
            *why = reason;
        return std::vector<Stage> {};
    };
    if (stages < 1 || stages > layers)
        return refuse("a stage holds at least one block: 1 to " + std::to_string(layers) + " stages");
    if (tied && stages > 1)
        return refuse("a head tied to the token embedding spans the first and the last stage");
    const Program whole = gptStep(microBatch, length, vocabulary, layers, heads, width, context, tied, optimizer, step);
    const auto first = stageBlocks(layers, stages);
    std::vector<Cut> cuts(static_cast<std::size_t>(stages));
    std::vector<std::int64_t> writer(whole.values.size(), -1); // the stage that writes a value
    bool backward = false;
    for (std::size_t i = 1; i < whole.instructions.size(); ++i) { // 0 is the Batch
        const auto& instruction = whole.instructions[i];
        if (updates(instruction.op))
            break; // the update: not a stage's
        const auto s = stageOf(whole.values[std::size_t(instruction.outputs.at(0))].name, first, stages);
        (backward ? cuts[std::size_t(s)].backward : cuts[std::size_t(s)].forward).push_back(i);
        backward = backward || instruction.op == Op::CrossEntropy;
        for (int v : instruction.outputs)
            writer[std::size_t(v)] = s;
    }
    writer[std::size_t(whole.instructions.front().outputs.at(0))] = 0; // the tokens
    writer[std::size_t(whole.instructions.front().outputs.at(1))] = stages - 1; // the targets
    std::set<int> parameters(whole.stateBefore.begin(), whole.stateBefore.end());
    std::map<std::string, int> byName;
    for (std::size_t v = 0; v < whole.values.size(); ++v)
        byName.emplace(whole.values[v].name, int(v));

    std::vector<Stage> result(static_cast<std::size_t>(stages));
    for (std::int64_t s = 0; s < stages; ++s) {
        const auto reason = assemble(result[std::size_t(s)], s, stages, whole, cuts[std::size_t(s)], writer, parameters, byName);
        if (!reason.empty())
            return refuse(reason);
    }
    for (auto& stage : result)
        cutUpdate(stage, whole);
    // What each stage sends: what the next (forward) or the one before (backward) receives.
    for (std::int64_t s = 0; s < stages; ++s) {
        auto& stage = result[std::size_t(s)];
        if (s + 1 < stages)
            stage.sent = result[std::size_t(s + 1)].received;
        if (s > 0)
            stage.gradientSent = result[std::size_t(s - 1)].gradientReceived;
    }
    return result;
}

} // namespace tessera::compute::portable
