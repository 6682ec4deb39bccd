#include "trace.h"

#include <torch/torch.h>

#include <cstring>

namespace tessera::compute::detail {

namespace {

at::Tensor digestsTensor(const QList<core::Digest>& digests)
{
    auto out = torch::empty({ std::int64_t(digests.size()), 32 }, torch::kUInt8);
    for (qsizetype i = 0; i < digests.size(); ++i)
        std::memcpy(out[i].data_ptr<std::uint8_t>(), digests[i].toRaw().constData(), 32);
    return out;
}

core::Result<QList<core::Digest>> digestsOf(const at::Tensor& tensor, const QString& name)
{
    if (tensor.scalar_type() != at::kByte || tensor.dim() != 2 || tensor.size(1) != 32)
        return core::Error { QStringLiteral("trace"), QStringLiteral("'%1' must be uint8 [n, 32]").arg(name) };
    const auto bytes = tensor.contiguous();
    QList<core::Digest> digests;
    for (std::int64_t i = 0; i < bytes.size(0); ++i)
        digests.append(
            *core::Digest::fromRaw(QByteArrayView(reinterpret_cast<const char*>(bytes[i].data_ptr<std::uint8_t>()), 32)));
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
    for (const auto& [step, outputs] : steps)
        tensors.emplace_back("step/" + std::to_string(step), digestsTensor(outputs));
    sortByName(tensors);
    return pickleTensors(tensors);
}

core::Result<Trace> Trace::fromBytes(const QByteArray& bytes)
{
    auto tensors = unpickleTensors(bytes, QStringLiteral("the trace is not a dict of tensors"));
    if (!tensors)
        return core::Error { QStringLiteral("trace"), tensors.error().message };
    Trace trace;
    bool hasCheckpoint = false, hasStart = false;
    for (const auto& [name, tensor] : *tensors) {
        const auto qname = QString::fromStdString(name);
        if (name == "checkpoint") {
            if (tensor.scalar_type() != at::kLong || tensor.numel() != 1)
                return core::Error { QStringLiteral("trace"), QStringLiteral("'checkpoint' must be one int64") };
            trace.checkpoint = tensor.item<std::int64_t>();
            hasCheckpoint = true;
        } else if (name == "start") {
            auto digests = digestsOf(tensor, qname);
            if (!digests)
                return digests.error();
            trace.start = *digests;
            hasStart = true;
        } else if (name.rfind("step/", 0) == 0) {
            bool ok = false;
            const auto step = qname.mid(5).toLongLong(&ok);
            if (!ok || step < 1)
                return core::Error { QStringLiteral("trace"), QStringLiteral("'%1' does not name a step").arg(qname) };
            auto digests = digestsOf(tensor, qname);
            if (!digests)
                return digests.error();
            trace.steps[step] = *digests;
        } else {
            return core::Error { QStringLiteral("trace"), QStringLiteral("a trace has no '%1'").arg(qname) };
        }
    }
    if (!hasCheckpoint || !hasStart)
        return core::Error { QStringLiteral("trace"), QStringLiteral("a trace needs 'checkpoint' and 'start'") };
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
    TraceWalk walk;
    auto program = programOf(first);
    if (!program)
        return program.error();
    if (trace.start.size() != qsizetype(program->stateBefore.size()))
        return unfit(QStringLiteral("the trace starts with %1 tensors; the state at step %2 has %3")
                         .arg(trace.start.size())
                         .arg(first - 1)
                         .arg(program->stateBefore.size()));
    for (std::size_t i = 0; i < program->stateBefore.size(); ++i)
        walk.state[program->values[std::size_t(program->stateBefore[i])].name] = trace.start[qsizetype(i)];
    for (std::int64_t step = first; step <= last; ++step) {
        if (step == stopBefore)
            break;
        if (step != first) {
            program = programOf(step);
            if (!program)
                return program.error();
        }
        for (int v : program->stateBefore) {
            if (!walk.state.count(program->values[std::size_t(v)].name))
                return unfit(QStringLiteral("step %1 reads a state tensor the trace does not have").arg(step));
        }
        const auto found = trace.steps.find(step);
        if (found == trace.steps.end())
            return unfit(QStringLiteral("the trace has no step %1").arg(step));
        const auto& hashes = found->second;
        if (hashes.size() != program->outputCount())
            return unfit(QStringLiteral("step %1 of the trace has %2 outputs; its program has %3")
                             .arg(step)
                             .arg(hashes.size())
                             .arg(program->outputCount()));
        const auto positions = program->outputPositions();
        QList<core::Digest> leaves;
        std::map<std::string, core::Digest> after;
        for (int v : program->stateAfter) {
            const auto& name = program->values[std::size_t(v)].name;
            const int position = positions[std::size_t(v)];
            if (position < 0 && !walk.state.count(name))
                return unfit(QStringLiteral("step %1 leaves a state tensor nobody wrote").arg(step));
            after[name] = position >= 0 ? hashes[position] : walk.state.at(name);
            leaves.append(after[name]);
        }
        walk.state = std::move(after);
        walk.roots.append(rootOf(leaves));
    }
    return walk;
}

} // namespace tessera::compute::detail
