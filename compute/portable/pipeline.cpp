#include "pipeline.h"

#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

namespace tessera::compute::portable {

std::vector<Slot> oneForwardOneBackward(std::int64_t stages, std::int64_t microBatches, std::int64_t stage)
{
    std::vector<Slot> slots;
    if (stages < 1 || stage < 0 || stage >= stages || microBatches < 1)
        return slots;
    const auto warm = std::min(stages - stage, microBatches);
    std::int64_t forwards = 0, backwards = 0;
    for (; forwards < warm; ++forwards)
        slots.push_back({ Pass::Forward, forwards });
    while (backwards < microBatches) {
        slots.push_back({ Pass::Backward, backwards++ });
        if (forwards < microBatches)
            slots.push_back({ Pass::Forward, forwards++ });
    }
    return slots;
}

StageStep::StageStep(const Stage& stage, std::int64_t microBatches, std::int64_t inFlight, int threads)
    : m_stage(stage)
    , m_microBatches(std::max<std::int64_t>(microBatches, 1))
    , m_threads(threads)
{
    const auto flights = std::clamp<std::int64_t>(inFlight, 1, m_microBatches);
    m_flights.reserve(std::size_t(flights));
    for (std::int64_t f = 0; f < flights; ++f)
        m_flights.push_back(Flight { Executor(threads), {}, {}, {}, {}, false });
    const auto& values = stage.program.values;
    for (int v : stage.program.instructions.front().outputs) {
        const auto& value = values[std::size_t(v)];
        if (v == stage.received)
            m_boundary = value.count();
        else
            m_tokens = value.count();
    }
    if (stage.gradientReceived >= 0)
        m_boundary = values[std::size_t(stage.gradientReceived)].count();
    if (stage.sent >= 0)
        m_boundary = values[std::size_t(stage.sent)].count();
    if (m_flights.size() < 2)
        return; // the flight's own memory serves
    std::set<int> state(stage.program.stateBefore.begin(), stage.program.stateBefore.end());
    state.insert(stage.program.stateAfter.begin(), stage.program.stateAfter.end());
    std::set<int> shared;
    for (std::size_t i = stage.backwardStart + 1; i < stage.program.instructions.size(); ++i) {
        for (int v : stage.program.instructions[i].outputs) {
            if (!state.count(v) && v != stage.gradientReceived && shared.insert(v).second)
                m_backwardMemory.emplace_back(
                    v, std::vector<std::uint64_t>(std::size_t((values[std::size_t(v)].bytes() + 7) / 8)));
        }
    }
}

std::string StageStep::bindState(Executor& executor, const Program& program)
{
    for (const auto* list : { &program.stateBefore, &program.stateAfter }) {
        for (int v : *list) {
            void* memory = m_memoryOf(program.values[std::size_t(v)]);
            if (!memory)
                return "the stage's state has no " + program.values[std::size_t(v)].name;
            executor.bind(v, memory);
        }
    }
    return {};
}

void StageStep::begin(StageState& state)
{
    begin([&state](const Value& value) -> void* {
        if (value.dtype == DType::Int64)
            return &state.adamStep;
        auto& memory = state.floats[value.name];
        memory.resize(std::size_t(value.count()));
        return memory.data();
    });
}

void StageStep::begin(MemoryOf memoryOf)
{
    m_memoryOf = std::move(memoryOf);
    m_forwards = m_backwards = 0;
    m_losses = 0.0f;
    m_averaged = false;
    m_sums.assign(m_stage.gradients.size(), {});
    for (auto& flight : m_flights)
        flight.busy = false;
}

std::string StageStep::forward(std::span<const std::int64_t> tokens, std::span<const float> activation,
    std::span<const std::int64_t> targets, std::vector<float>& sent)
{
    if (!m_memoryOf)
        return "no step begun";
    if (m_forwards >= m_microBatches)
        return "every micro-batch's forward has run";
    auto& flight = m_flights[std::size_t(m_forwards % std::int64_t(m_flights.size()))];
    if (flight.busy)
        return "micro-batch " + std::to_string(m_forwards) + ": more forwards ahead of their backwards than "
            + std::to_string(m_flights.size());
    const auto& program = m_stage.program;
    auto& executor = flight.executor;
    executor.prepare(program);
    if (auto error = bindState(executor, program); !error.empty())
        return error;
    for (auto& [v, memory] : m_backwardMemory)
        executor.bind(v, memory.data());
    for (int v : program.instructions.front().outputs) {
        const auto& value = program.values[std::size_t(v)];
        if (v == m_stage.received) {
            if (std::int64_t(activation.size()) != value.count())
                return "the activation received has " + std::to_string(activation.size()) + " values, not "
                    + std::to_string(value.count());
            flight.activation.assign(activation.begin(), activation.end());
            executor.bind(v, flight.activation.data());
            continue;
        }
        const bool isTargets = value.name == "batch.y";
        const auto given = isTargets ? targets : tokens;
        if (std::int64_t(given.size()) != value.count())
            return std::string(isTargets ? "the targets have " : "the tokens have ") + std::to_string(given.size())
                + " values, not " + std::to_string(value.count());
        auto& memory = isTargets ? flight.targets : flight.tokens;
        memory.assign(given.begin(), given.end());
        executor.bind(v, memory.data());
    }
    for (std::size_t i = 1; i < m_stage.backwardStart; ++i)
        executor.run(program, i);
    if (m_stage.loss >= 0)
        m_losses = m_losses + *executor.floats(m_stage.loss);
    sent.clear();
    if (m_stage.sent >= 0) {
        const float* out = executor.floats(m_stage.sent);
        sent.assign(out, out + program.values[std::size_t(m_stage.sent)].count());
    }
    flight.busy = true;
    ++m_forwards;
    return {};
}

std::string StageStep::backward(std::span<const float> gradient, std::vector<float>& sent)
{
    if (!m_memoryOf)
        return "no step begun";
    if (m_backwards >= m_forwards)
        return "micro-batch " + std::to_string(m_backwards) + "'s backward before its forward";
    auto& flight = m_flights[std::size_t(m_backwards % std::int64_t(m_flights.size()))];
    const auto& program = m_stage.program;
    auto& executor = flight.executor;
    if (m_stage.gradientReceived >= 0) {
        const auto count = program.values[std::size_t(m_stage.gradientReceived)].count();
        if (std::int64_t(gradient.size()) != count)
            return "the gradient received has " + std::to_string(gradient.size()) + " values, not " + std::to_string(count);
        flight.gradient.assign(gradient.begin(), gradient.end());
        executor.bind(m_stage.gradientReceived, flight.gradient.data());
    }
    for (std::size_t i = m_stage.backwardStart + 1; i < program.instructions.size(); ++i)
        executor.run(program, i);
    sent.clear();
    if (m_stage.gradientSent >= 0) {
        const float* out = executor.floats(m_stage.gradientSent);
        sent.assign(out, out + program.values[std::size_t(m_stage.gradientSent)].count());
    }
    for (std::size_t k = 0; k < m_stage.gradients.size(); ++k) {
        const int value = m_stage.gradients[k].second;
        const float* g = executor.floats(value);
        const auto n = std::size_t(program.values[std::size_t(value)].count());
        auto& sum = m_sums[k];
        if (m_backwards == 0) {
            sum.assign(g, g + n);
            continue;
        }
        for (std::size_t e = 0; e < n; ++e)
            sum[e] = sum[e] + g[e];
    }
    flight.busy = false;
    ++m_backwards;
    return {};
}

void StageStep::average()
{
    if (m_averaged)
        return;
    const float divisor = float(m_microBatches);
    for (auto& sum : m_sums) {
        for (auto& e : sum)
            e = e / divisor;
    }
    m_averaged = true;
}

std::vector<std::pair<std::string, double>> StageStep::squares()
{
    std::vector<std::pair<std::string, double>> result;
    if (m_backwards < m_microBatches)
        return result;
    average();
    for (std::size_t k = 0; k < m_stage.gradients.size(); ++k)
        result.emplace_back(m_stage.program.values[std::size_t(m_stage.gradients[k].first)].name,
            sumOfSquares(m_sums[k].data(), std::int64_t(m_sums[k].size())));
    return result;
}

std::string StageStep::update(float clipFactor)
{
    if (!m_memoryOf)
        return "no step begun";
    if (m_backwards < m_microBatches)
        return "the update before micro-batch " + std::to_string(m_backwards) + "'s backward";
    average();
    const auto& update = m_stage.update;
    Executor executor(m_threads);
    executor.prepare(update);
    if (auto error = bindState(executor, update); !error.empty())
        return error;
    if (m_stage.clipFactor >= 0)
        executor.bind(m_stage.clipFactor, &clipFactor);
    for (std::size_t k = 0; k < m_stage.gradients.size(); ++k)
        executor.bind(m_stage.gradients[k].second, m_sums[k].data());
    for (std::size_t i = 0; i < update.instructions.size(); ++i)
        executor.run(update, i);
    m_memoryOf = {};
    return {};
}

float globalClipFactor(const std::vector<std::vector<std::pair<std::string, double>>>& perStage, double maxNorm)
{
    std::map<std::string, double> byName; // name order
    for (const auto& stage : perStage) {
        for (const auto& [name, sum] : stage)
            byName[name] = sum;
    }
    double total = 0.0;
    for (const auto& [name, sum] : byName)
        total += sum;
    return clipFactor(total, maxNorm);
}

std::int64_t int8Bytes(std::int64_t elements, std::int64_t width)
{
    return width > 0 && elements % width == 0 ? elements / width * std::int64_t(sizeof(float)) + elements : -1;
}

std::string quantiseRows(std::span<const float> values, std::int64_t width, std::vector<char>& out)
{
    out.clear();
    const auto elements = std::int64_t(values.size());
    if (int8Bytes(elements, width) < 0)
        return std::to_string(elements) + " values are not whole rows of " + std::to_string(width);
    const auto rows = elements / width;
    out.resize(std::size_t(int8Bytes(elements, width))); // the caller's buffer, kept from call to call
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* row = values.data() + r * width;
        float largest = 0.0f;
        for (std::int64_t k = 0; k < width; ++k) {
            if (!std::isfinite(row[k])) {
                out.clear();
                return "a value to send is not finite (is the learning rate too high?)";
            }
            largest = std::max(largest, std::fabs(row[k]));
        }
        const float scale = largest / 127.0f;
        std::memcpy(out.data() + r * std::int64_t(sizeof(float)), &scale, sizeof(float)); // little-endian hosts
        auto* codes = out.data() + rows * std::int64_t(sizeof(float)) + r * width;
        for (std::int64_t k = 0; k < width; ++k) {
            const float level = scale == 0.0f ? 0.0f : std::nearbyint(row[k] / scale);
            codes[k] = static_cast<char>(static_cast<std::int8_t>(std::clamp(level, -127.0f, 127.0f)));
        }
    }
    return {};
}

std::string dequantiseRows(std::span<const char> bytes, std::int64_t width, std::vector<float>& out)
{
    out.clear();
    const auto size = std::int64_t(bytes.size());
    if (width <= 0 || size % (width + std::int64_t(sizeof(float))) != 0)
        return std::to_string(size) + " bytes are not whole int8 rows of " + std::to_string(width);
    const auto rows = size / (width + std::int64_t(sizeof(float)));
    out.resize(std::size_t(rows * width)); // the caller's buffer, kept from call to call
    for (std::int64_t r = 0; r < rows; ++r) {
        float scale = 0.0f;
        std::memcpy(&scale, bytes.data() + r * std::int64_t(sizeof(float)), sizeof(float));
        // What quantiseRows can make, and nothing else: a scale that is +0 or a positive finite
        // float of at most FLT_MAX / 127, codes in [-127, 127], all 0 under a zero scale.
        std::string wrong;
        if (!std::isfinite(scale) || std::signbit(scale) || scale > std::numeric_limits<float>::max() / 127.0f)
            wrong = "row " + std::to_string(r) + "'s scale is not one a sender makes";
        const auto* codes = bytes.data() + rows * std::int64_t(sizeof(float)) + r * width;
        for (std::int64_t k = 0; k < width && wrong.empty(); ++k) {
            const auto code = static_cast<std::int8_t>(codes[k]);
            if (code == -128 || (scale == 0.0f && code != 0))
                wrong = "row " + std::to_string(r) + " has a code a sender does not make";
            out[std::size_t(r * width + k)] = float(code) * scale;
        }
        if (!wrong.empty()) {
            out.clear();
            return wrong;
        }
    }
    return {};
}

} // namespace tessera::compute::portable
