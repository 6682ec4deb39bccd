#include "trace.h"

#include <torch/torch.h>

#include <cstring>

namespace tessera::compute::detail {

namespace {

at::Tensor digestsTensor(const QList<core::Digest>& digests)
{
    auto out = torch::empty({ std::int64_t(digests.size()), 32 }, torch::kUInt8);
    auto* raw = out.data_ptr<std::uint8_t>();
    for (qsizetype i = 0; i < digests.size(); ++i)
        std::memcpy(raw + 32 * i, digests[i].toRaw().constData(), 32);
    return out;
}

core::Result<QList<core::Digest>> digestsOf(const at::Tensor& tensor, const QString& name)
{
    if (tensor.scalar_type() != at::kByte || tensor.dim() != 2 || tensor.size(1) != 32)
        return core::Error { QStringLiteral("trace"), QStringLiteral("'%1' must be uint8 [n, 32]").arg(name) };
    const auto bytes = tensor.contiguous();
    const auto* raw = reinterpret_cast<const char*>(bytes.data_ptr<std::uint8_t>());
    QList<core::Digest> digests;
    digests.reserve(bytes.size(0));
    for (std::int64_t i = 0; i < bytes.size(0); ++i)
        digests.append(*core::Digest::fromRaw(QByteArrayView(raw + 32 * i, 32)));
    return digests;
}

at::ScalarType typeOf(const portable::Value& value)
{
    return value.dtype == portable::DType::Int64 ? at::kLong : at::kFloat;
}

} // namespace

QByteArray Trace::toBytes() const
{
    NamedTensors tensors;
    tensors.emplace_back("checkpoint", torch::tensor(checkpoint, torch::kInt64));
    tensors.emplace_back("start", digestsTensor(start));
    const std::int64_t first = steps.empty() ? 0 : steps.begin()->first;
    const std::int64_t outputs = steps.empty() ? 0 : steps.begin()->second.size();
    auto all = torch::zeros({ std::int64_t(steps.size()), outputs, 32 }, torch::kUInt8);
    auto* raw = all.data_ptr<std::uint8_t>();
    for (const auto& [step, hashes] : steps) {
        for (qsizetype o = 0; o < hashes.size() && o < outputs; ++o)
            std::memcpy(raw + ((step - first) * outputs + o) * 32, hashes[o].toRaw().constData(), 32);
    }
    tensors.emplace_back("first", torch::tensor(first, torch::kInt64));
    tensors.emplace_back("steps", all);
    sortByName(tensors);
    return pickleTensors(tensors);
}

core::Result<Trace> Trace::fromBytes(const QByteArray& bytes)
{
    auto tensors = unpickleTensors(bytes, QStringLiteral("the trace is not a dict of tensors"));
    if (!tensors)
        return core::Error { QStringLiteral("trace"), tensors.error().message };
    auto unfit = [](const QString& why) { return core::Error { QStringLiteral("trace"), why }; };
    std::map<std::string, at::Tensor> found;
    for (const auto& [name, tensor] : *tensors) {
        if (name != "checkpoint" && name != "first" && name != "start" && name != "steps")
            return unfit(QStringLiteral("a trace has no '%1'").arg(QString::fromStdString(name)));
        found[name] = tensor;
    }
    if (found.size() != 4)
        return unfit(QStringLiteral("a trace needs 'checkpoint', 'first', 'start' and 'steps'"));
    for (const auto* name : { "checkpoint", "first" }) {
        if (found[name].scalar_type() != at::kLong || found[name].numel() != 1)
            return unfit(QStringLiteral("'%1' must be one int64").arg(QLatin1String(name)));
    }
    Trace trace;
    trace.checkpoint = found["checkpoint"].item<std::int64_t>();
    const auto first = found["first"].item<std::int64_t>();
    auto start = digestsOf(found["start"], QStringLiteral("start"));
    if (!start)
        return start.error();
    trace.start = *start;
    const auto all = found["steps"];
    if (all.scalar_type() != at::kByte || all.dim() != 3 || all.size(2) != 32 || (all.size(0) > 0 && first < 1))
        return unfit(QStringLiteral("'steps' must be uint8 [steps, outputs, 32] after a 'first' step of 1 or more"));
    const auto contiguous = all.contiguous();
    const auto* raw = reinterpret_cast<const char*>(contiguous.data_ptr<std::uint8_t>());
    const std::int64_t outputs = all.size(1);
    for (std::int64_t t = 0; t < all.size(0); ++t) {
        auto& hashes = trace.steps[first + t];
        hashes.reserve(outputs);
        for (std::int64_t o = 0; o < outputs; ++o)
            hashes.append(*core::Digest::fromRaw(QByteArrayView(raw + (t * outputs + o) * 32, 32)));
    }
    return trace;
}

core::Digest valueHash(const portable::Value& value, const void* memory)
{
    return recordHash(value.name, typeOf(value), value.shape, memory, value.bytes());
}

TraceRecorder::TraceRecorder(Trace& trace)
    : m_trace(trace)
{ }

void TraceRecorder::observe(
    std::int64_t step, const portable::Program& program, std::size_t instruction, portable::Executor& executor)
{
    if (instruction == std::size_t(-1)) {
        if (m_trace.start.isEmpty() && m_trace.steps.empty()) {
            for (int v : program.stateBefore)
                m_trace.start.append(valueHash(program.values[std::size_t(v)], executor.memory(v)));
        }
        m_trace.steps[step].clear();
        return;
    }
    auto& outputs = m_trace.steps[step];
    for (int v : program.instructions[instruction].outputs)
        outputs.append(valueHash(program.values[std::size_t(v)], executor.memory(v)));
}

core::Result<TraceWalk> walkTrace(
    const Trace& trace, std::int64_t first, std::int64_t last, const ProgramOf& programOf, std::int64_t stopBefore)
{
    auto unfit = [](const QString& why) { return core::Error { QStringLiteral("trace"), why }; };
    // The state as the walk goes: each tensor's name (the program's own string) and hash, in name
    // order; a program's stateBefore and stateAfter are in name order too.
    std::vector<std::pair<const std::string*, core::Digest>> state;
    std::map<const portable::Program*, std::vector<int>> positionsOf; // each program's, once
    TraceWalk walk;
    auto found = programOf(first);
    if (!found)
        return found.error();
    const portable::Program* program = found->get();
    if (trace.start.size() != qsizetype(program->stateBefore.size()))
        return unfit(QStringLiteral("the trace starts with %1 tensors; the state at step %2 has %3")
                         .arg(trace.start.size())
                         .arg(first - 1)
                         .arg(program->stateBefore.size()));
    for (std::size_t i = 0; i < program->stateBefore.size(); ++i)
        state.emplace_back(&program->values[std::size_t(program->stateBefore[i])].name, trace.start[qsizetype(i)]);
    std::vector<std::pair<const std::string*, core::Digest>> after;
    for (std::int64_t step = first; step <= last; ++step) {
        if (step == stopBefore)
            break;
        if (step != first) {
            found = programOf(step);
            if (!found)
                return found.error();
            program = found->get();
        }
        // The step reads exactly the state the walk holds.
        bool fits = program->stateBefore.size() == state.size();
        for (std::size_t i = 0; fits && i < state.size(); ++i)
            fits = program->values[std::size_t(program->stateBefore[i])].name == *state[i].first;
        if (!fits)
            return unfit(QStringLiteral("step %1 reads another state than the trace holds").arg(step));
        const auto steps = trace.steps.find(step);
        if (steps == trace.steps.end())
            return unfit(QStringLiteral("the trace has no step %1").arg(step));
        const auto& hashes = steps->second;
        if (hashes.size() != program->outputCount())
            return unfit(QStringLiteral("step %1 of the trace has %2 outputs; its program has %3")
                             .arg(step)
                             .arg(hashes.size())
                             .arg(program->outputCount()));
        auto& positions = positionsOf[program];
        if (positions.empty())
            positions = program->outputPositions();
        after.clear();
        QList<core::Digest> leaves;
        leaves.reserve(qsizetype(program->stateAfter.size()));
        for (int v : program->stateAfter) {
            const auto& name = program->values[std::size_t(v)].name;
            const int position = positions[std::size_t(v)];
            if (position < 0)
                return unfit(QStringLiteral("step %1 leaves a state tensor no instruction wrote").arg(step));
            after.emplace_back(&name, hashes[position]);
            leaves.append(hashes[position]);
        }
        state.swap(after);
        walk.roots.append(rootOf(leaves));
    }
    for (const auto& [name, hash] : state)
        walk.state[*name] = hash;
    return walk;
}

} // namespace tessera::compute::detail
