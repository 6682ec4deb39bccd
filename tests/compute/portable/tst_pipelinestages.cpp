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

// The training state by name: a state value and its update's output share memory.
struct State {
    std::map<std::string, std::vector<float>> floats;
    std::int64_t adamStep = 0;

    void bind(Executor& executor, const Program& program)
    {
        for (const auto* list : { &program.stateBefore, &program.stateAfter }) {
            for (int v : *list) {
                const auto& value = program.values[std::size_t(v)];
                if (value.dtype == DType::Int64) {
                    executor.bind(v, &adamStep);
                    continue;
                }
                auto& memory = floats[value.name];
                memory.resize(std::size_t(value.count()));
                executor.bind(v, memory.data());
            }
        }
    }
};

constexpr std::int64_t MicroBatches = 3, Micro = 2; // a step's batch of 6
const OptimizerSettings AdamW { OptimizerSettings::Kind::AdamW, 0.0, 0.1, false, 0.9, 0.95, 1e-8, 0.5 };

// The tokens and targets of micro-batch m.
std::vector<std::int64_t> slice(const std::vector<std::int64_t>& all, std::int64_t m)
{
    const auto begin = all.begin() + m * Micro * Context;
    return std::vector<std::int64_t>(begin, begin + Micro * Context);
}

// One step as train-local takes it (docs/DETERMINISM.md, "Micro-batches"): the whole program of a
// micro-batch M times up to its update, the gradients summed in order and divided by M, the update.
State referenceStep(
    const Program& whole, const State& start, const std::vector<std::int64_t>& tokens, const std::vector<std::int64_t>& targets)
{
    State state = start;
    Executor executor;
    std::size_t updateStart = 0;
    while (updateStart < whole.instructions.size() && whole.instructions[updateStart].op != Op::ClipFactor)
        ++updateStart;
    if (updateStart == whole.instructions.size())
        qFatal("the reference step clips: its ClipFactor names every gradient");
    const auto& gradients = whole.instructions[updateStart].inputs; // every gradient, in name order
    std::vector<std::vector<float>> sums(gradients.size());
    for (std::int64_t m = 0; m < MicroBatches; ++m) {
        executor.prepare(whole);
        state.bind(executor, whole);
        auto x = slice(tokens, m), y = slice(targets, m);
        executor.bind(whole.instructions[0].outputs[0], x.data());
        executor.bind(whole.instructions[0].outputs[1], y.data());
        for (std::size_t i = 0; i < updateStart; ++i)
            executor.run(whole, i);
        for (std::size_t k = 0; k < gradients.size(); ++k) {
            const float* g = executor.floats(gradients[k]);
            const auto n = std::size_t(whole.values[std::size_t(gradients[k])].count());
            if (m == 0)
                sums[k].assign(g, g + n);
            else
                for (std::size_t e = 0; e < n; ++e)
                    sums[k][e] = sums[k][e] + g[e];
        }
    }
    for (std::size_t k = 0; k < gradients.size(); ++k) {
        float* g = executor.floats(gradients[k]);
        for (std::size_t e = 0; e < sums[k].size(); ++e)
            g[e] = sums[k][e] / float(MicroBatches);
    }
    for (std::size_t i = updateStart; i < whole.instructions.size(); ++i)
        executor.run(whole, i);
    return state;
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

    // A whole step across stages, each micro-batch's forward and backward in the 1F1B order a
    // pipeline runs them (stage s: S - s forwards first, then a backward and a forward in turn), each
    // stage averaging its gradients and updating its own parameters with AdamW and the clipping
    // factor from every stage's per-tensor sums: the same training state, bit for bit, as the step
    // train-local takes, for 1 to 4 stages.
    void aStepAcrossStagesIsTrainLocalsStep_data()
    {
        QTest::addColumn<int>("kind");
        QTest::addColumn<double>("momentum");
        QTest::addColumn<bool>("carried"); // the optimizer's buffers exist before the step
        QTest::newRow("adamw, fresh moments") << int(OptimizerSettings::Kind::AdamW) << 0.0 << false;
        QTest::newRow("adam, carried moments") << int(OptimizerSettings::Kind::Adam) << 0.0 << true;
        QTest::newRow("sgd, momentum born") << int(OptimizerSettings::Kind::Sgd) << 0.9 << false;
        QTest::newRow("sgd, nesterov, carried momentum") << int(OptimizerSettings::Kind::Sgd) << 0.9 << true;
    }
    void aStepAcrossStagesIsTrainLocalsStep()
    {
        QFETCH(int, kind);
        QFETCH(double, momentum);
        QFETCH(bool, carried);
        OptimizerSettings optimizer = AdamW;
        optimizer.kind = OptimizerSettings::Kind(kind);
        optimizer.momentum = momentum;
        optimizer.nesterov = carried && momentum > 0.0;
        StepSettings step;
        step.learningRate = 0.01;
        step.buffersBefore = carried;
        const Program whole = gptStep(Micro, Context, Vocabulary, Layers, Heads, Width, Context, false, optimizer, step);
        auto model = modelFor(whole);
        State start;
        for (auto& [name, memory] : model.parameters) {
            if (name.rfind("optimizer/exp_avg_sq/", 0) == 0) // a second moment is not negative
                for (auto& e : memory)
                    e = e < 0.0f ? -e : e;
            start.floats[name] = memory;
        }
        start.adamStep = carried ? 4 : 0;
        std::vector<std::int64_t> tokens, targets;
        for (std::int64_t i = 0; i < MicroBatches * Micro * Context; ++i) {
            tokens.push_back(std::int64_t(splitMix(7, std::uint64_t(i)) % Vocabulary));
            targets.push_back(std::int64_t(splitMix(8, std::uint64_t(i)) % Vocabulary));
        }
        const State reference = referenceStep(whole, start, tokens, targets);
        QCOMPARE(reference.adamStep, start.adamStep + (optimizer.kind == OptimizerSettings::Kind::Sgd ? 0 : 1));

        for (const std::int64_t count : { 1, 2, 4 }) {
            std::string why;
            auto stages
                = gptStages(Micro, Context, Vocabulary, Layers, Heads, Width, Context, false, count, &why, optimizer, step);
            QVERIFY2(std::int64_t(stages.size()) == count, why.c_str());
            State state = start;
            // Each stage keeps a micro-batch's activations from its forward to its backward: an
            // executor a micro-batch in flight.
            std::vector<std::vector<Executor>> executors(stages.size(), std::vector<Executor>(std::size_t(MicroBatches)));
            std::vector<std::vector<std::vector<float>>> activations(
                stages.size() + 1, std::vector<std::vector<float>>(MicroBatches));
            std::vector<std::vector<std::vector<float>>> gradients(
                stages.size() + 1, std::vector<std::vector<float>>(MicroBatches));
            std::vector<std::vector<std::vector<float>>> sums(stages.size());
            std::vector<std::vector<std::int64_t>> x(MicroBatches), y(MicroBatches);
            for (std::int64_t m = 0; m < MicroBatches; ++m) {
                x[std::size_t(m)] = slice(tokens, m);
                y[std::size_t(m)] = slice(targets, m);
            }
            auto forward = [&](std::size_t s, std::int64_t m) {
                const auto& stage = stages[s];
                auto& executor = executors[s][std::size_t(m)];
                executor.prepare(stage.program);
                state.bind(executor, stage.program);
                for (int v : stage.program.instructions[0].outputs) {
                    const auto& name = stage.program.values[std::size_t(v)].name;
                    if (name == "batch.x")
                        executor.bind(v, x[std::size_t(m)].data());
                    else if (name == "batch.y")
                        executor.bind(v, y[std::size_t(m)].data());
                    else
                        executor.bind(v, activations[s][std::size_t(m)].data()); // from stage s - 1
                }
                for (std::size_t i = 1; i < stage.backwardStart; ++i)
                    executor.run(stage.program, i);
                if (stage.sent >= 0)
                    activations[s + 1][std::size_t(m)] = copyOf(executor, stage.program, stage.sent);
            };
            auto backward = [&](std::size_t s, std::int64_t m) {
                const auto& stage = stages[s];
                auto& executor = executors[s][std::size_t(m)];
                if (stage.gradientReceived >= 0)
                    executor.bind(stage.gradientReceived, gradients[s + 1][std::size_t(m)].data());
                for (std::size_t i = stage.backwardStart + 1; i < stage.program.instructions.size(); ++i)
                    executor.run(stage.program, i);
                if (stage.gradientSent >= 0)
                    gradients[s][std::size_t(m)] = copyOf(executor, stage.program, stage.gradientSent);
                auto& stageSums = sums[s];
                stageSums.resize(stage.gradients.size());
                for (std::size_t k = 0; k < stage.gradients.size(); ++k) {
                    const auto g = copyOf(executor, stage.program, stage.gradients[k].second);
                    if (m == 0)
                        stageSums[k] = g;
                    else
                        for (std::size_t e = 0; e < g.size(); ++e)
                            stageSums[k][e] = stageSums[k][e] + g[e];
                }
            };
            // 1F1B, simulated in lock step: each stage runs its next operation once its input is there.
            const auto S = stages.size();
            std::vector<std::int64_t> forwards(S, 0), backwards(S, 0);
            for (bool progress = true; progress;) {
                progress = false;
                for (std::size_t s = 0; s < S; ++s) {
                    const bool warm = forwards[s] < std::min<std::int64_t>(MicroBatches, std::int64_t(S - s));
                    const bool canForward = forwards[s] < MicroBatches && (s == 0 || forwards[s - 1] > forwards[s]);
                    const bool canBackward = backwards[s] < forwards[s] && (s + 1 == S || backwards[s + 1] > backwards[s]);
                    if (canForward && (warm || !canBackward || forwards[s] - backwards[s] < std::int64_t(S - s))) {
                        forward(s, forwards[s]++);
                        progress = true;
                    } else if (canBackward) {
                        backward(s, backwards[s]++);
                        progress = true;
                    }
                }
            }
            for (std::size_t s = 0; s < S; ++s)
                QCOMPARE(backwards[s], MicroBatches);
            // The clipping factor: every gradient's sum of squares, in name order across the stages.
            std::map<std::string, double> squares;
            for (std::size_t s = 0; s < S; ++s) {
                for (std::size_t k = 0; k < stages[s].gradients.size(); ++k) {
                    auto& g = sums[s][k];
                    for (auto& e : g)
                        e = e / float(MicroBatches);
                    squares[stages[s].program.values[std::size_t(stages[s].gradients[k].first)].name]
                        = sumOfSquares(g.data(), std::int64_t(g.size()));
                }
            }
            double total = 0.0;
            for (const auto& [name, sum] : squares) // std::map: name order
                total += sum;
            float factor = clipFactor(total, optimizer.clipNorm);
            for (std::size_t s = 0; s < S; ++s) {
                const auto& stage = stages[s];
                state.adamStep = start.adamStep; // each stage counts Adam's steps itself
                Executor executor;
                executor.prepare(stage.update);
                state.bind(executor, stage.update);
                if (stage.clipFactor >= 0)
                    executor.bind(stage.clipFactor, &factor);
                for (std::size_t k = 0; k < stage.gradients.size(); ++k)
                    executor.bind(stage.gradients[k].second, sums[s][k].data());
                for (std::size_t i = 0; i < stage.update.instructions.size(); ++i)
                    executor.run(stage.update, i);
                QCOMPARE(state.adamStep, reference.adamStep);
            }
            QCOMPARE(state.floats.size(), reference.floats.size());
            for (const auto& [name, memory] : reference.floats) {
                const auto& ours = state.floats.at(name);
                QVERIFY2(
                    ours.size() == memory.size() && std::memcmp(ours.data(), memory.data(), ours.size() * sizeof(float)) == 0,
                    (name + " with " + std::to_string(count) + " stages").c_str());
            }
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
        QVERIFY(stageBlocks(4, 0).empty());
    }
};

QTEST_GUILESS_MAIN(PipelineStagesTest)
#include "tst_pipelinestages.moc"
