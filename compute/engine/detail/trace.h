#pragma once

// Private to compute/: includes torch. A portable shard's trace over one checkpoint interval, what
// a node gives the referee of a dispute (docs/VERIFICATION.md, "Disputes over portable jobs";
// docs/DETERMINISM.md, "Trace"): the hashes of the training state's tensors at the interval's
// start, and for each step of the interval the hash of every output of every instruction of the
// step's program, in program order. Stored as a dict of tensors (torch.load reads it):
//   "checkpoint": int64 []        the interval's end, checkpoint j
//   "first": int64 []             the interval's first shard step, (j-1)c + 1
//   "start": uint8 [S, 32]        the state's tensors at checkpoint j-1, in name order
//   "steps": uint8 [T, O, 32]     its T steps in order, each with its O outputs in program order

#include "tensors.h"

#include <compute/portable/program.h>
#include <core/error.h>
#include <core/hash.h>

#include <QByteArray>
#include <QList>

#include <functional>
#include <map>
#include <memory>

namespace tessera::compute::detail {

struct Trace {
    std::int64_t checkpoint = 0;
    QList<core::Digest> start;
    std::map<std::int64_t, QList<core::Digest>> steps;

    QByteArray toBytes() const;
    static core::Result<Trace> fromBytes(const QByteArray& bytes);
};

// A value's hash: its canonical record (tensors.h, recordHash) under its program name and shape.
core::Digest valueHash(const portable::Value& value, const void* memory);

// Fills a trace as a step's program runs (PortableStep's observer).
class TraceRecorder {
public:
    explicit TraceRecorder(Trace& trace);
    // Step `step` (1-based) is about to run or has run instruction `instruction` (Start: before any).
    void observe(std::int64_t step, const portable::Program& program, std::size_t instruction, portable::Executor& executor);

private:
    Trace& m_trace;
};

// What a trace says of the state, step by step: checked against the programs (outputs per step,
// state names), it gives the hashes of the state's tensors after each step and their roots.
struct TraceWalk {
    std::map<std::string, core::Digest> state; // name -> tensor hash, where the walk stopped
    QList<core::Digest> roots; // after each step walked, in order
};
// Walks `trace` over shard steps first..last (1-based, inclusive) with each step's program;
// stops early before step `stopBefore` (0: walk all). An error says what does not fit.
using ProgramOf = std::function<core::Result<std::shared_ptr<const portable::Program>>(std::int64_t step)>;
core::Result<TraceWalk> walkTrace(
    const Trace& trace, std::int64_t first, std::int64_t last, const ProgramOf& programOf, std::int64_t stopBefore = 0);

} // namespace tessera::compute::detail
