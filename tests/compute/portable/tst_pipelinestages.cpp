// The zoo gpt cut into pipeline stages (compute/portable/stages.h): a micro-batch computed stage by
// stage, each boundary tensor handed on, gives the loss and every parameter's gradient the bits of
// the whole step program, for any number of stages; one tensor crosses each boundary each way.
#include <compute/portable/kernels.h>
#include <compute/portable/pipeline.h>
#include <compute/portable/stages.h>
#include <compute/portable/zoo.h>

#include <QTest>

#include <cmath>
#include <cstring>
#include <limits>
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

// One step across the stages, each with its own share of the state, run in lock step: each stage
// runs its schedule's next half once the tensor it reads has been sent (1F1B, or every forward
// first with gpipe). The stages' states merged.
State stepAcrossStages(const std::vector<Stage>& stages, const State& start, const std::vector<std::int64_t>& tokens,
    const std::vector<std::int64_t>& targets, const OptimizerSettings& optimizer, bool gpipe)
{
    const auto S = std::int64_t(stages.size());
    std::vector<StageState> states(stages.size());
    std::vector<StageStep> steps;
    std::vector<std::vector<Slot>> schedules;
    for (std::int64_t s = 0; s < S; ++s) {
        const auto& stage = stages[std::size_t(s)];
        auto& state = states[std::size_t(s)];
        state.adamStep = start.adamStep;
        for (const auto* list : { &stage.program.stateBefore, &stage.update.stateBefore }) {
            for (int v : *list) {
                const auto& value = stage.program.values[std::size_t(v)];
                const auto& name = value.name;
                if (value.dtype == DType::Float32 && start.floats.count(name))
                    state.floats[name] = start.floats.at(name);
            }
        }
        steps.emplace_back(stage, MicroBatches, gpipe ? MicroBatches : S - s);
        steps.back().begin(state);
        if (gpipe) {
            std::vector<Slot> slots;
            for (const auto pass : { Pass::Forward, Pass::Backward }) {
                for (std::int64_t m = 0; m < MicroBatches; ++m)
                    slots.push_back({ pass, m });
            }
            schedules.push_back(slots);
        } else {
            schedules.push_back(oneForwardOneBackward(S, MicroBatches, s));
        }
    }
    // activations[s][m]: what stage s receives for micro-batch m; gradients[s][m]: what stage s sends back.
    std::vector<std::map<std::int64_t, std::vector<float>>> activations(stages.size() + 1), gradients(stages.size() + 1);
    std::vector<std::size_t> next(stages.size(), 0);
    for (bool progress = true; progress;) {
        progress = false;
        for (std::int64_t s = 0; s < S; ++s) {
            const auto u = std::size_t(s);
            if (next[u] == schedules[u].size())
                continue;
            const auto slot = schedules[u][next[u]];
            const auto m = slot.micro;
            std::vector<float> sent;
            std::string error;
            if (slot.pass == Pass::Forward) {
                if (s > 0 && !activations[u].count(m))
                    continue;
                const auto x = slice(tokens, m), y = slice(targets, m);
                error = steps[u].forward(s == 0 ? std::span<const std::int64_t>(x) : std::span<const std::int64_t> {},
                    s > 0 ? std::span<const float>(activations[u].at(m)) : std::span<const float> {},
                    s == S - 1 ? std::span<const std::int64_t>(y) : std::span<const std::int64_t> {}, sent);
                if (s + 1 < S)
                    activations[u + 1][m] = sent;
            } else {
                if (s + 1 < S && !gradients[u + 1].count(m))
                    continue;
                error = steps[u].backward(
                    s + 1 < S ? std::span<const float>(gradients[u + 1].at(m)) : std::span<const float> {}, sent);
                gradients[u][m] = sent;
            }
            if (!error.empty())
                qFatal("stage %lld: %s", static_cast<long long>(s), error.c_str());
            ++next[u];
            progress = true;
        }
    }
    std::vector<std::vector<std::pair<std::string, double>>> squares;
    for (std::int64_t s = 0; s < S; ++s) {
        if (next[std::size_t(s)] != schedules[std::size_t(s)].size())
            qFatal("stage %lld waits for a tensor nobody sends", static_cast<long long>(s));
        squares.push_back(steps[std::size_t(s)].squares());
    }
    const float factor = globalClipFactor(squares, optimizer.clipNorm);
    State merged;
    merged.adamStep = -1;
    if (start.floats.count("optimizer/adam_step")) // the test's model has floats for it too, never read
        merged.floats["optimizer/adam_step"] = start.floats.at("optimizer/adam_step");
    for (std::int64_t s = 0; s < S; ++s) {
        if (auto error = steps[std::size_t(s)].update(factor); !error.empty())
            qFatal("stage %lld: %s", static_cast<long long>(s), error.c_str());
        const auto& state = states[std::size_t(s)];
        if (merged.adamStep >= 0 && merged.adamStep != state.adamStep)
            qFatal("the stages count Adam's steps differently");
        merged.adamStep = state.adamStep;
        for (const auto& [name, memory] : state.floats) {
            if (!merged.floats.emplace(name, memory).second)
                qFatal("two stages hold %s", name.c_str());
        }
    }
    return merged;
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
            for (const bool gpipe : { false, true }) {
                const auto state = stepAcrossStages(stages, start, tokens, targets, optimizer, gpipe);
                QCOMPARE(state.adamStep, reference.adamStep);
                QCOMPARE(state.floats.size(), reference.floats.size());
                for (const auto& [name, memory] : reference.floats) {
                    const auto& ours = state.floats.at(name);
                    QVERIFY2(
                        ours.size() == memory.size() && std::memcmp(ours.data(), memory.data(), ours.size() * sizeof(float)) == 0,
                        (name + " with " + std::to_string(count) + " stages" + (gpipe ? ", gpipe" : "")).c_str());
                }
            }
        }
    }

    // 1F1B: each stage runs each micro-batch's forward and backward once, each pass in micro-batch
    // order, never more than S - s forwards ahead of its backwards, and the first stage begins
    // with min(S, M) forwards.
    void theScheduleRunsEveryHalfOnceInOrder()
    {
        for (std::int64_t S = 1; S <= 6; ++S) {
            for (std::int64_t M = 1; M <= 9; ++M) {
                for (std::int64_t s = 0; s < S; ++s) {
                    const auto slots = oneForwardOneBackward(S, M, s);
                    QCOMPARE(std::int64_t(slots.size()), 2 * M);
                    std::int64_t forwards = 0, backwards = 0;
                    for (const auto& slot : slots) {
                        if (slot.pass == Pass::Forward) {
                            QCOMPARE(slot.micro, forwards++);
                        } else {
                            QCOMPARE(slot.micro, backwards++);
                            QVERIFY(backwards <= forwards);
                        }
                        QVERIFY(forwards - backwards <= S - s);
                    }
                    QCOMPARE(slots.front(), (Slot { Pass::Forward, 0 }));
                    QCOMPARE(slots.back(), (Slot { Pass::Backward, M - 1 }));
                }
                QCOMPARE(oneForwardOneBackward(S, M, 0)[std::size_t(std::min(S, M))].pass, Pass::Backward);
            }
        }
        QVERIFY(oneForwardOneBackward(2, 4, 2).empty());
        QVERIFY(oneForwardOneBackward(0, 4, 0).empty());
    }

    // A stage refuses what would change its bits: a tensor of the wrong size, a backward before its
    // forward, a forward too many ahead, an update before every backward.
    void aStageRefusesWhatIsOutOfTurn()
    {
        std::string why;
        auto stages = gptStages(Micro, Context, Vocabulary, Layers, Heads, Width, Context, false, 2, &why);
        QVERIFY2(stages.size() == 2, why.c_str());
        const Program whole = gptStep(Micro, Context, Vocabulary, Layers, Heads, Width, Context, false, {}, {});
        const auto model = modelFor(whole);
        StageState state;
        for (const auto& [name, memory] : model.parameters)
            state.floats[name] = memory;
        StageStep last(stages[1], 2, 1);
        std::vector<float> sent;
        QVERIFY(last.forward({}, {}, {}, sent) == "no step begun");
        last.begin(state);
        QCOMPARE(last.boundaryElements(), Micro * Context * Width);
        const std::vector<float> activation(std::size_t(Micro * Context * Width), 0.5f), short_(3, 0.5f);
        const auto y = slice(model.targets, 0);
        QVERIFY(last.forward({}, short_, y, sent).find("activation received has 3 values") != std::string::npos);
        QVERIFY(!last.backward({}, sent).empty());
        QVERIFY(!last.update().empty());
        QVERIFY(last.forward({}, activation, y, sent).empty());
        QVERIFY(sent.empty()); // the last stage sends its loss nowhere
        QVERIFY(last.forward({}, activation, y, sent).find("more forwards ahead") != std::string::npos);
        QVERIFY(last.backward({}, sent).empty());
        QCOMPARE(std::int64_t(sent.size()), Micro * Context * Width);
        QVERIFY(last.squares().empty()); // one micro-batch of two is not the step's gradient
        QVERIFY(last.forward({}, activation, y, sent).empty());
        QVERIFY(last.backward({}, sent).empty());
        QVERIFY(last.forward({}, activation, y, sent).find("every micro-batch") != std::string::npos);
        QVERIFY(!last.squares().empty());
        QVERIFY(std::isfinite(last.loss()));
        QVERIFY(last.update().empty());
    }

    // training.pipeline.tensors "int8": each row as a float32 scale and 8-bit codes, ties to even,
    // every value within half a scale of what was sent; a row of zeros stays zeros; what is not
    // finite, or not whole rows, is refused; a quarter of the bytes and a row's scale more.
    void boundaryTensorsInInt8AreRowsOfCodesAndAScale()
    {
        const std::vector<float> values { 1.0f, -0.5f, 0.25f, 0.0f, /* row 2 */ 0.0f, 0.0f, 0.0f, 0.0f,
            /* row 3 */ 254.0f, 1.0f, -3.0f, 0.5f };
        std::vector<char> bytes;
        QVERIFY(quantiseRows(values, 4, bytes).empty());
        QCOMPARE(std::int64_t(bytes.size()), int8Bytes(12, 4));
        QCOMPARE(bytes.size(), std::size_t(3 * 4 + 12));
        float scale = 0.0f;
        std::memcpy(&scale, bytes.data(), 4);
        QCOMPARE(scale, 1.0f / 127.0f);
        QCOMPARE(int(std::int8_t(bytes[12])), 127);
        QCOMPARE(int(std::int8_t(bytes[13])), -64); // -63.5: ties to even
        QCOMPARE(int(std::int8_t(bytes[14])), 32); // 31.75
        std::memcpy(&scale, bytes.data() + 8, 4);
        QCOMPARE(scale, 2.0f);
        QCOMPARE(int(std::int8_t(bytes[21])), 0); // 1 / 2 = 0.5: ties to even
        std::vector<float> back;
        QVERIFY(dequantiseRows(bytes, 4, back).empty());
        QCOMPARE(back.size(), values.size());
        for (std::size_t k = 0; k < values.size(); ++k) {
            const float rowScale = k < 4 ? 1.0f / 127.0f : k < 8 ? 0.0f : 2.0f;
            QVERIFY2(std::fabs(back[k] - values[k]) <= rowScale / 2, qPrintable(QString::number(k)));
        }
        QCOMPARE(back[4], 0.0f);
        auto broken = values;
        broken[6] = std::numeric_limits<float>::infinity();
        QVERIFY(!quantiseRows(broken, 4, bytes).empty() && bytes.empty());
        broken[6] = std::numeric_limits<float>::quiet_NaN();
        QVERIFY(!quantiseRows(broken, 4, bytes).empty());
        QVERIFY(!quantiseRows(values, 5, bytes).empty()); // not whole rows
        QVERIFY(!dequantiseRows(std::vector<char>(23), 4, back).empty() && back.empty());
        QVERIFY(!dequantiseRows(std::vector<char>(8), 0, back).empty());
        QCOMPARE(int8Bytes(10, 4), std::int64_t(-1));
        // Ties to even, not away from zero: a row whose largest is 127 has the scale 1.
        QVERIFY(quantiseRows(std::vector<float> { 127.0f, 2.5f, -2.5f, 3.5f }, 4, bytes).empty());
        QCOMPARE(int(std::int8_t(bytes[5])), 2);
        QCOMPARE(int(std::int8_t(bytes[6])), -2);
        QCOMPARE(int(std::int8_t(bytes[7])), 4);
        // A subnormal row: the scale is subnormal too, and nothing passes 127.
        const float tiny = std::numeric_limits<float>::denorm_min() * 300.0f;
        QVERIFY(quantiseRows(std::vector<float> { tiny, -tiny, tiny / 2, 0.0f }, 4, bytes).empty());
        for (int k = 4; k < 8; ++k)
            QVERIFY(std::abs(int(std::int8_t(bytes[std::size_t(k)]))) <= 127);
        // A row no sender makes is refused: a scale that is negative, not finite or too large, the
        // code -128, a code under a zero scale.
        auto forged = [&](float given, char code) {
            std::vector<char> row(8, 0);
            std::memcpy(row.data(), &given, 4);
            row[5] = code;
            return dequantiseRows(row, 4, back);
        };
        QVERIFY(forged(0.5f, 3).empty());
        QCOMPARE(back[1], 1.5f);
        QVERIFY(!forged(-0.5f, 3).empty() && back.empty());
        QVERIFY(!forged(-0.0f, 0).empty());
        QVERIFY(!forged(std::numeric_limits<float>::quiet_NaN(), 3).empty());
        QVERIFY(!forged(std::numeric_limits<float>::infinity(), 3).empty());
        QVERIFY(!forged(std::numeric_limits<float>::max(), 3).empty());
        QVERIFY(!forged(0.5f, char(-128)).empty());
        QVERIFY(!forged(0.0f, 1).empty());
        QVERIFY(forged(0.0f, 0).empty());
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
