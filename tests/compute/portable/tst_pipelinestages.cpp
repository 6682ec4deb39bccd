// The zoo gpt cut into pipeline stages (compute/portable/stages.h): a micro-batch computed stage by
// stage, each boundary tensor handed on, gives the loss and every parameter's gradient the bits of
// the whole step program, for any number of stages; one tensor crosses each boundary each way.
#include <compute/portable/kernels.h>
#include <compute/portable/stages.h>
#include <compute/portable/zoo.h>

#include <QTest>

#include <cstring>
#include <map>
#include <vector>

using namespace tessera::compute::portable;

namespace {

constexpr std::int64_t Vocabulary = 64, Layers = 4, Heads = 2, Width = 16, Context = 8, Batch = 2;

struct Model {
    std::map<std::string, std::vector<float>> parameters; // by value name ("model/...")
    std::vector<std::int64_t> tokens, targets;
};

Model modelFor(const Program& whole)
{
    Model model;
    std::uint64_t seed = 1;
    for (int v : whole.stateBefore) {
        const auto& value = whole.values[std::size_t(v)];
        auto& memory = model.parameters[value.name];
        memory.resize(std::size_t(value.count()));
        uniformFill(memory.data(), value.count(), 0.3f, seed++);
    }
    for (std::int64_t i = 0; i < Batch * Context; ++i) {
        model.tokens.push_back(std::int64_t(splitMix(99, std::uint64_t(i)) % Vocabulary));
        model.targets.push_back(std::int64_t(splitMix(98, std::uint64_t(i)) % Vocabulary));
    }
    return model;
}

void bindParameters(Executor& executor, const Program& program, Model& model)
{
    for (int v : program.stateBefore)
        executor.bind(v, model.parameters.at(program.values[std::size_t(v)].name).data());
}

std::vector<float> copyOf(Executor& executor, const Program& program, int value)
{
    const auto* memory = executor.floats(value);
    return std::vector<float>(memory, memory + program.values[std::size_t(value)].count());
}

} // namespace

class PipelineStagesTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void stagesGiveTheWholeProgramsBits()
    {
        const Program whole = gptStep(Batch, Context, Vocabulary, Layers, Heads, Width, Context, false, {}, {});
        auto model = modelFor(whole);
        // The whole program's forward and backward, up to its update.
        Executor reference;
        reference.prepare(whole);
        bindParameters(reference, whole, model);
        reference.bind(whole.instructions[0].outputs[0], model.tokens.data());
        reference.bind(whole.instructions[0].outputs[1], model.targets.data());
        float loss = 0.0f;
        for (std::size_t i = 0; i < whole.instructions.size(); ++i) {
            const auto op = whole.instructions[i].op;
            if (op == Op::Sgd || op == Op::Adam || op == Op::ClipFactor)
                break;
            reference.run(whole, i);
            if (op == Op::CrossEntropy)
                loss = *reference.floats(whole.instructions[i].outputs[0]);
        }

        for (const std::int64_t count : { 1, 2, 3, 4 }) {
            std::string why;
            auto stages = gptStages(Batch, Context, Vocabulary, Layers, Heads, Width, Context, false, count, &why);
            QVERIFY2(std::int64_t(stages.size()) == count, why.c_str());
            std::vector<Executor> executors(stages.size());
            std::vector<float> boundary;
            for (std::size_t s = 0; s < stages.size(); ++s) { // forward, stage by stage
                const auto& stage = stages[s];
                auto& executor = executors[s];
                executor.prepare(stage.program);
                bindParameters(executor, stage.program, model);
                const auto& inputs = stage.program.instructions[0].outputs;
                for (int v : inputs) {
                    const auto& name = stage.program.values[std::size_t(v)].name;
                    if (name == "batch.x")
                        executor.bind(v, model.tokens.data());
                    else if (name == "batch.y")
                        executor.bind(v, model.targets.data());
                    else {
                        QCOMPARE(v, stage.received);
                        std::memcpy(executor.memory(v), boundary.data(), boundary.size() * sizeof(float));
                    }
                }
                for (std::size_t i = 1; i < stage.backwardStart; ++i)
                    executor.run(stage.program, i);
                if (s + 1 < stages.size()) {
                    QVERIFY(stage.sent >= 0);
                    const std::vector<std::int64_t> shape { Batch, Context, Width };
                    QCOMPARE(stage.program.values[std::size_t(stage.sent)].shape, shape);
                    boundary = copyOf(executor, stage.program, stage.sent);
                } else {
                    QVERIFY(stage.loss >= 0);
                    QCOMPARE(*executor.floats(stage.loss), loss);
                }
            }
            for (std::size_t s = stages.size(); s-- > 0;) { // backward, from the last stage
                const auto& stage = stages[s];
                auto& executor = executors[s];
                if (stage.gradientReceived >= 0)
                    std::memcpy(executor.memory(stage.gradientReceived), boundary.data(), boundary.size() * sizeof(float));
                for (std::size_t i = stage.backwardStart + 1; i < stage.program.instructions.size(); ++i)
                    executor.run(stage.program, i);
                if (s > 0)
                    boundary = copyOf(executor, stage.program, stage.gradientSent);
                for (const auto& [parameter, gradient] : stage.gradients) {
                    const auto& name = stage.program.values[std::size_t(gradient)].name;
                    const auto ours = copyOf(executor, stage.program, gradient);
                    const auto theirs = copyOf(reference, whole, gradient);
                    QVERIFY2(
                        ours.size() == theirs.size() && std::memcmp(ours.data(), theirs.data(), ours.size() * sizeof(float)) == 0,
                        (name + " with " + std::to_string(count) + " stages").c_str());
                }
            }
            // Every parameter is one stage's.
            std::size_t parameters = 0;
            for (const auto& stage : stages)
                parameters += stage.gradients.size();
            QCOMPARE(parameters, whole.stateBefore.size());
        }
    }

    void whatTheCutDoesNotCoverIsRefused()
    {
        std::string why;
        QVERIFY(gptStages(Batch, Context, Vocabulary, Layers, Heads, Width, Context, true, 2, &why).empty());
        QVERIFY(why.find("tied") != std::string::npos);
        QVERIFY(gptStages(Batch, Context, Vocabulary, Layers, Heads, Width, Context, false, 5, &why).empty());
        QCOMPARE(gptStages(Batch, Context, Vocabulary, Layers, Heads, Width, Context, true, 1, &why).size(), std::size_t(1));
        const std::vector<std::int64_t> even { 0, 2, 4 }, uneven { 0, 2, 3, 4 };
        QCOMPARE(stageBlocks(4, 2), even);
        QCOMPARE(stageBlocks(4, 3), uneven);
    }
};

QTEST_GUILESS_MAIN(PipelineStagesTest)
#include "tst_pipelinestages.moc"
