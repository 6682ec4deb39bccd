#include "program.h"

#include "kernels.h"

#include <charconv>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace tessera::compute::portable {

std::int64_t Value::count() const
{
    std::int64_t n = 1;
    for (auto size : shape)
        n *= size;
    return n;
}

std::int64_t Value::bytes() const
{
    return count() * (dtype == DType::Int64 ? 8 : 4);
}

bool updates(Op op)
{
    return op == Op::ClipFactor || op == Op::Scale || op == Op::Count || op == Op::Sgd || op == Op::Adam;
}

const char* opName(Op op)
{
    switch (op) {
    case Op::Batch:
        return "Batch";
    case Op::Linear:
        return "Linear";
    case Op::LinearGradInput:
        return "LinearGradInput";
    case Op::LinearGradWeight:
        return "LinearGradWeight";
    case Op::LinearGradBias:
        return "LinearGradBias";
    case Op::Relu:
        return "Relu";
    case Op::ReluGrad:
        return "ReluGrad";
    case Op::CrossEntropy:
        return "CrossEntropy";
    case Op::ClipFactor:
        return "ClipFactor";
    case Op::Scale:
        return "Scale";
    case Op::Sgd:
        return "Sgd";
    case Op::Adam:
        return "Adam";
    case Op::Count:
        return "Count";
    case Op::Conv3x3:
        return "Conv3x3";
    case Op::Conv3x3GradInput:
        return "Conv3x3GradInput";
    case Op::Conv3x3GradWeight:
        return "Conv3x3GradWeight";
    case Op::MaxPool2:
        return "MaxPool2";
    case Op::MaxPool2ReluGrad:
        return "MaxPool2ReluGrad";
    case Op::ChannelsFirst:
        return "ChannelsFirst";
    case Op::ChannelsLast:
        return "ChannelsLast";
    case Op::Dropout:
        return "Dropout";
    case Op::DropoutGrad:
        return "DropoutGrad";
    case Op::Embed:
        return "Embed";
    case Op::EmbedGradPosition:
        return "EmbedGradPosition";
    case Op::EmbedGradToken:
        return "EmbedGradToken";
    case Op::Add:
        return "Add";
    case Op::LayerNorm:
        return "LayerNorm";
    case Op::LayerNormGrad:
        return "LayerNormGrad";
    case Op::Gelu:
        return "Gelu";
    case Op::GeluGrad:
        return "GeluGrad";
    case Op::Attention:
        return "Attention";
    case Op::AttentionGrad:
        return "AttentionGrad";
    }
    return "?";
}

int Program::add(Value value)
{
    values.push_back(std::move(value));
    return int(values.size()) - 1;
}

int Program::addInstruction(Instruction instruction)
{
    instructions.push_back(std::move(instruction));
    return int(instructions.size()) - 1;
}

int Program::before(const std::string& name) const
{
    for (int v : stateBefore) {
        if (values[std::size_t(v)].name == name)
            return v;
    }
    return -1;
}

std::vector<int> Program::outputPositions() const
{
    std::vector<int> positions(values.size(), -1);
    int next = 0;
    for (const auto& instruction : instructions) {
        for (int v : instruction.outputs)
            positions[std::size_t(v)] = next++;
    }
    return positions;
}

int Program::outputCount() const
{
    int n = 0;
    for (const auto& instruction : instructions)
        n += int(instruction.outputs.size());
    return n;
}

namespace {

std::string describe(const Value& value)
{
    std::ostringstream out;
    out << value.name << " [";
    for (std::size_t i = 0; i < value.shape.size(); ++i)
        out << (i ? ", " : "") << value.shape[i];
    out << "]" << (value.dtype == DType::Int64 ? " int64" : "");
    return out.str();
}

} // namespace

std::string Program::listing() const
{
    std::ostringstream out;
    for (std::size_t i = 0; i < instructions.size(); ++i) {
        const auto& instruction = instructions[i];
        out << i << "  " << opName(instruction.op) << "  ";
        for (std::size_t o = 0; o < instruction.outputs.size(); ++o)
            out << (o ? ", " : "") << describe(values[std::size_t(instruction.outputs[o])]);
        out << " <- ";
        for (std::size_t o = 0; o < instruction.inputs.size(); ++o)
            out << (o ? ", " : "") << values[std::size_t(instruction.inputs[o])].name;
        if (!instruction.reals.empty() || !instruction.integers.empty()) {
            out << "  (";
            bool first = true;
            for (double r : instruction.reals) {
                char text[32];
                const auto end = std::to_chars(text, text + sizeof text, r).ptr; // the shortest that reads back exactly
                out << (first ? "" : ", ") << std::string_view(text, std::size_t(end - text));
                first = false;
            }
            for (auto n : instruction.integers) {
                out << (first ? "" : ", ") << n;
                first = false;
            }
            out << ")";
        }
        if (!instruction.label.empty())
            out << "  # " << instruction.label;
        out << "\n";
    }
    return out.str();
}

Executor::Executor(int threads)
    : m_threads(threads < 1 ? 1 : threads)
{ }

void Executor::prepare(const Program& program)
{
    for (auto& [value, unfolded] : m_unfolded)
        unfolded.current = false; // the memory stays for the next step
    m_memory.assign(program.values.size(), nullptr);
    m_sizes.resize(program.values.size());
    m_owned.resize(program.values.size());
    for (std::size_t v = 0; v < program.values.size(); ++v) {
        m_sizes[v] = std::size_t((program.values[v].bytes() + 7) / 8);
        if (m_owned[v].size() != m_sizes[v])
            m_owned[v].clear(); // sized again when first used
    }
}

void Executor::bind(int value, void* memory)
{
    m_memory.at(std::size_t(value)) = memory;
}

void* Executor::memory(int value)
{
    auto& bound = m_memory.at(std::size_t(value));
    if (bound)
        return bound;
    auto& owned = m_owned[std::size_t(value)];
    if (owned.size() != m_sizes[std::size_t(value)])
        owned.assign(m_sizes[std::size_t(value)], 0);
    return owned.data();
}

const float* Executor::unfolded(int value, const std::vector<std::int64_t>& geometry)
{
    auto& unfolded = m_unfolded[value];
    if (!unfolded.current) {
        unfolded.col.resize(std::size_t(geometry.at(0) * geometry.at(1) * geometry.at(2) * geometry.at(3) * 9));
        unfold3x3(floats(value), unfolded.col.data(), geometry.at(0), geometry.at(1), geometry.at(2), geometry.at(3), m_threads);
        unfolded.current = true;
    }
    return unfolded.col.data();
}

namespace {

// An instruction that updates state: its outputs start as copies of its inputs unless they share
// memory (an update in place).
void copyInto(void* out, const void* in, std::int64_t bytes)
{
    if (out != in)
        std::memmove(out, in, std::size_t(bytes));
}

} // namespace

void Executor::run(const Program& program, std::size_t index)
{
    const auto& instruction = program.instructions.at(index);
    const auto& in = instruction.inputs;
    const auto& out = instruction.outputs;
    auto value = [&](int v) -> const Value& { return program.values[std::size_t(v)]; };
    auto f = [&](int v) { return floats(v); };
    // Indices (targets, tokens) come from data, or from a stranger's operands in a dispute: each
    // is checked before anything is read at it.
    auto indices = [&](int v, std::int64_t limit, const char* what) {
        const auto* data = static_cast<const std::int64_t*>(memory(v));
        for (std::int64_t i = 0; i < value(v).count(); ++i) {
            if (data[i] < 0 || data[i] >= limit)
                throw std::out_of_range(
                    std::string(what) + " " + std::to_string(data[i]) + " is outside 0.." + std::to_string(limit - 1));
        }
        return data;
    };
    switch (instruction.op) {
    case Op::Batch:
        return;
    case Op::Linear: {
        const auto& w = value(in[1]);
        const std::int64_t outputs = w.shape[0], inputs = w.shape[1], rows = value(in[0]).count() / inputs;
        linearForward(f(in[0]), f(in[1]), in.size() > 2 ? f(in[2]) : nullptr, f(out[0]), rows, inputs, outputs, m_threads);
        return;
    }
    case Op::LinearGradInput: {
        const auto& w = value(in[1]);
        const std::int64_t outputs = w.shape[0], inputs = w.shape[1], rows = value(in[0]).count() / outputs;
        linearGradInput(f(in[0]), f(in[1]), f(out[0]), rows, inputs, outputs, m_threads);
        return;
    }
    case Op::LinearGradWeight: {
        const auto& dw = value(out[0]);
        const std::int64_t outputs = dw.shape[0], inputs = dw.shape[1], rows = value(in[0]).count() / outputs;
        linearGradWeight(f(in[0]), f(in[1]), f(out[0]), rows, inputs, outputs, m_threads);
        return;
    }
    case Op::LinearGradBias: {
        const std::int64_t outputs = value(out[0]).count(), rows = value(in[0]).count() / outputs;
        linearGradBias(f(in[0]), f(out[0]), rows, outputs);
        return;
    }
    case Op::Relu:
        reluForward(f(in[0]), f(out[0]), value(in[0]).count());
        return;
    case Op::ReluGrad:
        reluBackward(f(in[0]), f(in[1]), f(out[0]), value(in[0]).count());
        return;
    case Op::CrossEntropy: {
        const auto& logits = value(in[0]);
        const std::int64_t classes = logits.shape.back(), rows = logits.count() / classes;
        if (value(in[1]).count() != rows)
            throw std::invalid_argument("cross-entropy: one target a row");
        *f(out[0]) = crossEntropy(f(in[0]), indices(in[1], classes, "a target"), f(out[1]), rows, classes);
        return;
    }
    case Op::ClipFactor: {
        double squares = 0.0; // tensor after tensor, in the instruction's order
        for (int g : in)
            squares += sumOfSquares(f(g), value(g).count());
        *f(out[0]) = clipFactor(squares, instruction.reals.at(0));
        return;
    }
    case Op::Scale: {
        const float factor = *f(in[1]);
        const float* g = f(in[0]);
        float* scaled = f(out[0]);
        for (std::int64_t i = 0; i < value(in[0]).count(); ++i)
            scaled[i] = g[i] * factor;
        return;
    }
    case Op::Sgd: {
        const auto& p = value(in[0]);
        const bool momentum = out.size() > 1, first = instruction.integers.at(1) != 0;
        copyInto(memory(out[0]), memory(in[0]), p.bytes());
        if (momentum && !first)
            copyInto(memory(out[1]), memory(in[2]), p.bytes());
        sgdStep(f(out[0]), f(in[1]), momentum ? f(out[1]) : nullptr, p.count(), float(instruction.reals.at(0)),
            float(instruction.reals.at(1)), float(instruction.reals.at(2)), instruction.integers.at(0) != 0, first);
        return;
    }
    case Op::Adam: {
        const auto& p = value(in[0]);
        const bool fresh = instruction.integers.at(1) != 0;
        copyInto(memory(out[0]), memory(in[0]), p.bytes());
        if (fresh) {
            std::memset(memory(out[1]), 0, std::size_t(p.bytes()));
            std::memset(memory(out[2]), 0, std::size_t(p.bytes()));
        } else {
            copyInto(memory(out[1]), memory(in[2]), p.bytes());
            copyInto(memory(out[2]), memory(in[3]), p.bytes());
        }
        const auto step = *static_cast<const std::int64_t*>(memory(in.back()));
        const auto& r = instruction.reals;
        adamStep(f(out[0]), f(in[1]), f(out[1]), f(out[2]), p.count(), r.at(0), r.at(1), r.at(2), r.at(3), r.at(4),
            instruction.integers.at(0) != 0, step);
        return;
    }
    case Op::Count:
        *static_cast<std::int64_t*>(memory(out[0])) = *static_cast<const std::int64_t*>(memory(in[0])) + 1;
        return;
    case Op::Conv3x3:
    case Op::Conv3x3GradInput:
    case Op::Conv3x3GradWeight: {
        const auto& g = instruction.integers; // batch, height, width, channels in, channels out
        if (instruction.op == Op::Conv3x3)
            conv3x3Forward(f(in[0]), f(in[1]), f(in[2]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3), g.at(4), m_threads,
                unfolded(in[0], g));
        else if (instruction.op == Op::Conv3x3GradInput)
            conv3x3GradInput(f(in[0]), f(in[1]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3), g.at(4), m_threads);
        else
            conv3x3GradWeight(
                f(in[0]), f(in[1]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3), g.at(4), m_threads, unfolded(in[1], g));
        return;
    }
    case Op::MaxPool2:
    case Op::MaxPool2ReluGrad:
    case Op::ChannelsFirst:
    case Op::ChannelsLast: {
        const auto& g = instruction.integers; // batch, height, width, channels
        if (instruction.op == Op::MaxPool2)
            maxPool2Forward(f(in[0]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3));
        else if (instruction.op == Op::MaxPool2ReluGrad)
            maxPool2ReluBackward(f(in[0]), f(in[1]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3));
        else if (instruction.op == Op::ChannelsFirst)
            channelsFirst(f(in[0]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3));
        else
            channelsLast(f(in[0]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3));
        return;
    }
    case Op::Embed: {
        const auto& g = instruction.integers; // batch, length, width
        if (g.at(1) > value(in[2]).shape.at(0))
            throw std::invalid_argument("the sequence is longer than the position embedding");
        embedForward(
            indices(in[0], value(in[1]).shape.at(0), "a token"), f(in[1]), f(in[2]), f(out[0]), g.at(0), g.at(1), g.at(2));
        return;
    }
    case Op::EmbedGradPosition: {
        const auto& g = instruction.integers;
        std::memset(memory(out[0]), 0, std::size_t(value(out[0]).bytes())); // rows past the length stay 0
        embedGradPosition(f(in[0]), f(out[0]), g.at(0), g.at(1), g.at(2));
        return;
    }
    case Op::EmbedGradToken: {
        const auto& g = instruction.integers; // batch, length, width, vocabulary
        embedGradToken(f(in[0]), indices(in[1], g.at(3), "a token"), in.size() > 2 ? f(in[2]) : nullptr, f(out[0]), g.at(3),
            g.at(0), g.at(1), g.at(2));
        return;
    }
    case Op::Add:
        add(f(in[0]), f(in[1]), f(out[0]), value(in[0]).count());
        return;
    case Op::LayerNorm: {
        const std::int64_t width = value(in[1]).count();
        layerNormForward(f(in[0]), f(in[1]), f(in[2]), f(out[0]), value(in[0]).count() / width, width);
        return;
    }
    case Op::LayerNormGrad: {
        const std::int64_t width = value(in[1]).count();
        layerNormBackward(f(in[0]), f(in[1]), f(in[2]), f(out[0]), f(out[1]), f(out[2]), value(in[0]).count() / width, width);
        return;
    }
    case Op::Gelu:
        geluForward(f(in[0]), f(out[0]), value(in[0]).count());
        return;
    case Op::GeluGrad:
        geluBackward(f(in[0]), f(in[1]), f(out[0]), value(in[0]).count());
        return;
    case Op::Attention:
    case Op::AttentionGrad: {
        const auto& g = instruction.integers; // batch, length, heads, width
        if (instruction.op == Op::Attention)
            attentionForward(f(in[0]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3), m_threads);
        else
            attentionBackward(f(in[0]), f(in[1]), f(out[0]), g.at(0), g.at(1), g.at(2), g.at(3), m_threads);
        return;
    }
    case Op::Dropout:
    case Op::DropoutGrad: {
        const float p = float(instruction.reals.at(0));
        const auto seed = std::uint64_t(instruction.integers.at(0));
        if (instruction.op == Op::Dropout)
            dropoutForward(f(in[0]), f(out[0]), value(in[0]).count(), p, seed);
        else
            dropoutBackward(f(in[0]), f(out[0]), value(in[0]).count(), p, seed);
        return;
    }
    }
    throw std::logic_error("unknown portable instruction");
}

} // namespace tessera::compute::portable
