#pragma once

#include <compute/common/environment.h>
#include <compute/common/stagelink.h>
#include <compute/common/types.h>

#include <core/error.h>
#include <core/shardresult.h>
#include <core/shardtask.h>
#include <core/verification/verification.h>

#include <QByteArray>

#include <memory>
#include <optional>

namespace tessera::compute {

// The referee's arithmetic. Re-executes a shard from checkpoint `from` to checkpoint `to`
// (checkpoint k is at step min(k c, H)) and returns the hashes of checkpoints from+1..to, and the
// weights at `to`: at the last checkpoint, what a node reveals (ShardOutput::weights, which needs
// `roundWeights` for a compressed update unless from == 0). At from == 0, `state` is the round's
// weights; after that it is a checkpoint state that must be at that checkpoint and hash to
// `expected`, the hash both sides of the dispute agree on; an error names what is wrong with it.
// from == to == the last checkpoint only reveals: the referee of a dispute over the revealed form.
core::Result<Replay> replayShard(const core::ShardTask& task, std::int64_t from, const QByteArray& state,
    const core::Digest& expected, std::int64_t to, const QByteArray& roundWeights, const ComputeEnvironment& environment);

// This node's own training state at checkpoint `wanted` (1..n-1) of a shard it trained,
// re-created for a dispute: resumed from `keptState` (ShardOutput::keptState) when that checkpoint
// comes before the wanted one, else trained again from the round's weights. Its model and
// optimizer are bit for bit what training had there (what the checkpoint hash covers); it costs at
// most half the shard's steps with the kept state, all of them without.
core::Result<QByteArray> recreateState(const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& keptState,
    std::int64_t wanted, const ComputeEnvironment& environment);

// Disputes over portable jobs, narrowed to one instruction (docs/VERIFICATION.md, "Disputes over
// portable jobs"; the trace's format in compute/engine/detail/trace.h and docs/DETERMINISM.md, "Trace").
//
// A node's side. This node's trace of checkpoint interval `checkpoint` (1..n-1) of a shard it
// trained, re-trained from keptState or the round's weights as recreateState does; and the inputs
// of instruction `instruction` of shard step `step` (1-based) as a dict "0", "1", ... in the
// instruction's input order.
core::Result<QByteArray> traceInterval(const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& keptState,
    std::int64_t checkpoint, const ComputeEnvironment& environment);
core::Result<QByteArray> operandsOf(const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& keptState,
    std::int64_t step, std::int64_t instruction, const ComputeEnvironment& environment);

// The referee's side. Each trace is checked against the programs and against what its node signed:
// its state at the start must be the agreed checkpoint j-1 (at j = 1 the state the round's weights
// give), and its state after the last step its own checkpoint j. A trace that fails names its fault
// and is not used. With both usable: the first step whose state differs, and in it the first
// instruction whose output differs. The referee rules at once where that instruction reads no
// operands (the step's batch, which it reads itself); otherwise refereeInstruction() rules from
// the operands one side sends.
using core::verification::TraceComparison;
// The most bytes an honest trace of interval `checkpoint` can have: a hash per state value and per
// output of each of the interval's steps, and room for the file's own structure.
core::Result<std::int64_t> traceBytesBound(
    const core::ShardTask& task, std::int64_t checkpoint, const ComputeEnvironment& environment);
core::Result<TraceComparison> compareTraces(const core::ShardTask& task, std::int64_t checkpoint, const core::Digest& agreed,
    const QByteArray& roundWeights, const core::Digest& firstClaim, const core::Digest& secondClaim, const QByteArray& firstTrace,
    const QByteArray& secondTrace, const ComputeEnvironment& environment);
// Runs the one instruction from the operands, each checked against the hash both traces agree
// on, and says whose outputs equal the referee's. An error: the operands are unusable (they name
// what is wrong) or the traces do not differ there.
core::Result<core::verification::Ruling> refereeInstruction(const core::ShardTask& task, std::int64_t step,
    std::int64_t instruction, const QByteArray& operands, const QByteArray& firstTrace, const QByteArray& secondTrace,
    const ComputeEnvironment& environment);

// The program of shard step `step` (1-based) of a portable task, one instruction a line, numbered
// as a dispute numbers them (docs/DETERMINISM.md, "Programs"): `tessera-node program` prints it.
core::Result<QString> portableListing(const core::ShardTask& task, std::int64_t step, const ComputeEnvironment& environment);

// One shard in training, advanced a step at a time, so that the compute thread can pause, cancel
// or throttle between steps. Everything a step does is fixed by the task: its batch comes from the
// seeded permutations, its dropout from the step's seed, its arithmetic from the task's thread count.
//
// Not thread-safe: create, step and finish a run on one thread (the compute thread).
class ShardRun {
public:
    // startWeights: the round's global weights (a pickled dict of tensors) whose canonical hash
    // must equal task.startWeights.
    static core::Result<std::unique_ptr<ShardRun>> start(
        const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment);
    // The same from the file that holds the round's weights (which must stay there until finish()).
    // A stage task builds the model, gives the other stages' parameters back, then reads only its
    // share of the file, a tensor at a time, hashing the whole as it goes (and again when it
    // reveals a compressed update): it holds its share of the model (docs/PERFORMANCE.md, "Pipeline
    // stages"). Any other task reads the file whole. A file this node cannot open is an error of
    // field "sandbox" (the node's trouble, not the job's).
    static core::Result<std::unique_ptr<ShardRun>> startFromFile(
        const core::ShardTask& task, const QString& startWeightsFile, const ComputeEnvironment& environment);
    // Whose training state resume() is given: this node's own suspend() (meta/task must name the
    // task; the losses, chain and time so far continue), or another node's checkpoint state in a
    // dispute, of which only the model, the optimizer and meta/step count (docs/DETERMINISM.md,
    // "Training state"; its checkpoint hash is what ties it to the shard).
    enum class StateOrigin { Own, Stranger };
    // Continues a run from suspend()'s bytes; ends bit for bit where an uninterrupted run would.
    // startWeights: the round's weights, which finish() needs for a compressed update (task.compression).
    static core::Result<std::unique_ptr<ShardRun>> resume(const core::ShardTask& task, const QByteArray& suspended,
        const ComputeEnvironment& environment, StateOrigin origin = StateOrigin::Own, const QByteArray& startWeights = {});
    ~ShardRun();

    const core::ShardTask& task() const;
    std::int64_t completedSteps() const;
    bool finished() const;
    double lastLoss() const;

    // One optimizer step. An error (NaN loss, a model that does not fit the data) ends the run.
    core::Status step();
    // Weights, optimizer state, progress and checkpoint chain so far (a pickled dict of tensors).
    QByteArray suspend() const;
    // After the last step: the result and what the node reveals (the final weights, or their
    // compressed update from the round's weights, as task.compression says).
    ShardOutput finish();

    // Keeps the run's two largest byte arrays out of memory while it trains (a worker, whose
    // scratch folder holds them; docs/PERFORMANCE.md, "Scale"): the round's weights are read again
    // from `startWeightsFile` (which holds the bytes the run started from) when finish() needs them,
    // and the kept training state goes to `keptStateFile` as soon as it is made (ShardOutput's
    // keptStateFile then names it). A state that cannot be written stays in memory.
    void spillTo(const QString& startWeightsFile, const QString& keptStateFile);
    // Whether the run keeps the training state at task.keptStateCheckpoint() (the default): a run
    // no dispute can ask about (train-local) does without it.
    void setKeepsCheckpointState(bool keeps);
    // A stage task's link to the other stages of its shard (it must outlive the run); each step()
    // waits on it for what the neighbours send. A task with stageInputs (a re-execution) has its
    // own link to its recorded inputs from start().
    void setStageLink(StageLink* link);

    struct Private; // opaque: holds the torch objects
    friend core::Result<Replay> replayShard(const core::ShardTask&, std::int64_t, const QByteArray&, const core::Digest&,
        std::int64_t, const QByteArray&, const ComputeEnvironment&);
    friend core::Result<QByteArray> recreateState(
        const core::ShardTask&, const QByteArray&, const QByteArray&, std::int64_t, const ComputeEnvironment&);
    friend core::Result<QByteArray> traceInterval(
        const core::ShardTask&, const QByteArray&, const QByteArray&, std::int64_t, const ComputeEnvironment&);
    friend core::Result<QByteArray> operandsOf(
        const core::ShardTask&, const QByteArray&, const QByteArray&, std::int64_t, std::int64_t, const ComputeEnvironment&);
    friend core::Result<TraceComparison> compareTraces(const core::ShardTask&, std::int64_t, const core::Digest&,
        const QByteArray&, const core::Digest&, const core::Digest&, const QByteArray&, const QByteArray&,
        const ComputeEnvironment&);

private:
    explicit ShardRun(std::unique_ptr<Private> d);
    // An inference task's run: its lines a step (a batch, or a prompt) at a time.
    static core::Result<std::unique_ptr<ShardRun>> startInference(
        const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment);
    static core::Result<std::unique_ptr<ShardRun>> resumeInference(const core::ShardTask& task, const QByteArray& suspended,
        const ComputeEnvironment& environment, const QByteArray& startWeights);
    static core::Result<Replay> replayInference(const core::ShardTask& task, std::int64_t from, const QByteArray& weights,
        std::int64_t to, const ComputeEnvironment& environment);
    core::Status stepInference();
    QByteArray suspendInference() const;
    ShardOutput finishInference();
    void keepState(); // the training state at the kept checkpoint: into keptStateFile (spillTo), or memory
    // A run of this node's own shard brought to shard step `step` (not keeping checkpoint states):
    // resumed from keptState where its checkpoint comes no later, else from the round's weights.
    static core::Result<std::unique_ptr<ShardRun>> trainedTo(const core::ShardTask& task, const QByteArray& startWeights,
        const QByteArray& keptState, std::int64_t step, const ComputeEnvironment& environment);
    std::unique_ptr<Private> d;
};

// Runs every step; a failure becomes a ShardResult with outcome Failed and the reason.
ShardOutput runShard(const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment);

// A failed result for a task, with the reason.
core::ShardResult failedResult(const core::ShardTask& task, const QString& why);

} // namespace tessera::compute
