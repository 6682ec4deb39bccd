#pragma once

// A pipeline stage's share of a training step (layers on different nodes; docs/DETERMINISM.md,
// "Pipeline stages"): the order in which a stage runs its micro-batches' halves (1F1B), and one
// stage's step over its training state, fed the tensors its neighbours send. Whatever order the
// halves of different micro-batches interleave in, a stage's forwards and its backwards each run
// in micro-batch order, so the gradients' sums (and every bit after them) are the same as
// train-local's micro-batched step. No torch, no Qt.

#include "stages.h"

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tessera::compute::portable {

enum class Pass : std::uint8_t { Forward, Backward };

struct Slot {
    Pass pass = Pass::Forward;
    std::int64_t micro = 0;
    bool operator==(const Slot&) const = default;
};

// The order in which stage `stage` of `stages` runs the halves of a step's `microBatches`
// micro-batches, 1F1B (as PipeDream-Flush and Megatron-LM): min(S - s, M) forwards, then a
// backward and a forward in turn while forwards are left, then the backwards left. Stage s holds
// at most S - s micro-batches' activations (GPipe, every forward first, would hold M) for the same
// bubble, (S - 1) / (M + S - 1) of a step. With every stage following it and each half waiting
// for the tensor it reads, no stage waits on one that waits on it.
std::vector<Slot> oneForwardOneBackward(std::int64_t stages, std::int64_t microBatches, std::int64_t stage);

// A stage's training state by name ("model/…", "optimizer/…", as in the checkpoint) and Adam's
// step count ("optimizer/adam_step", which every stage keeps).
struct StageState {
    std::map<std::string, std::vector<float>> floats;
    std::int64_t adamStep = 0;
};

// One step of one stage: its micro-batches' forward and backward halves, in the order its
// schedule gives, then its update. Each parameter's gradient is summed over the micro-batches in
// micro-batch order (from the first's, one float32 add at a time) and divided by float(M), as
// train-local's micro-batched step does. Not thread-safe; one step at a time.
class StageStep {
public:
    // inFlight: how many micro-batches' forwards may run ahead of their backwards (S - s for
    // 1F1B). threads: how many compute (any count gives the same bits).
    StageStep(const Stage& stage, std::int64_t microBatches, std::int64_t inFlight, int threads = 1);

    // Starts a step over `state`, which the update changes in place (it must outlive the step).
    void begin(StageState& state);
    // The same over memory the caller holds: memoryOf gives each state value's (float32, or Adam's
    // int64 step count), of the value's shape, the same for a name before and after the step.
    using MemoryOf = std::function<void*(const Value& value)>;
    void begin(MemoryOf memoryOf);
    // The forward half of the next micro-batch (they come in order): stage 0 reads its tokens
    // [b, length], the others the activation their predecessor sent [b, length, width]; the last
    // stage also its targets. Returns the activation to send on (empty at the last stage). An
    // empty string on success, else what is wrong (a size, the order, a micro-batch too many).
    std::string forward(std::span<const std::int64_t> tokens, std::span<const float> activation,
        std::span<const std::int64_t> targets, std::vector<float>& sent);
    // The backward half of the next micro-batch: `gradient` is what the successor sent back
    // (empty at the last stage). Returns the gradient to send back (empty at stage 0).
    std::string backward(std::span<const float> gradient, std::vector<float>& sent);
    // After every backward: each of the stage's parameters' averaged gradient's float64 sum of
    // squares, by the parameter's name, which the stages exchange for the clipping factor.
    std::vector<std::pair<std::string, double>> squares();
    // The update, with the factor every stage computes alike (globalClipFactor; ignored without
    // clipping). After it the step is over; begin() starts the next.
    std::string update(float clipFactor = 1.0f);

    // The last stage's loss of the step: its micro-batches' losses summed in order over float(M).
    double loss() const { return double(m_losses / float(m_microBatches)); }
    std::int64_t forwards() const { return m_forwards; }
    std::int64_t backwards() const { return m_backwards; }
    // The sizes of the tensors a stage receives and sends: float32 elements (the activation and its
    // gradient have one shape), and int64 tokens or targets of a micro-batch.
    std::int64_t boundaryElements() const { return m_boundary; }
    std::int64_t tokensPerMicroBatch() const { return m_tokens; }

private:
    std::string bindState(Executor& executor, const Program& program); // empty, or what is missing
    void average(); // the sums over float(M), once a step

    const Stage& m_stage;
    std::int64_t m_microBatches;
    int m_threads;
    MemoryOf m_memoryOf; // empty: no step begun
    struct Flight {
        Executor executor;
        std::vector<std::int64_t> tokens, targets;
        std::vector<float> activation, gradient;
        bool busy = false;
    };
    std::vector<Flight> m_flights; // micro-batch m runs in m_flights[m % size]
    // What the backward half makes (every gradient, the parameters' included) lives only within one
    // micro-batch's backward: the gradient sent is copied out and the parameters' gradients are
    // summed at its end. So every flight computes it in this one memory, and a stage holds its
    // in-flight micro-batches' forward values and a single backward's (docs/PERFORMANCE.md,
    // "Pipeline stages"). By value; words of 8 bytes, as the executor's own.
    std::vector<std::pair<int, std::vector<std::uint64_t>>> m_backwardMemory;
    std::vector<std::vector<float>> m_sums; // per stage.gradients
    std::int64_t m_forwards = 0, m_backwards = 0;
    float m_losses = 0.0f;
    bool m_averaged = false;
    std::int64_t m_boundary = 0, m_tokens = 0;
};

// The clipping factor every stage computes: the global norm's square is the stages' per-tensor
// sums of squares added in name order across all the stages (the ClipFactor kernel's order), and
// the factor kernels.h's clipFactor(that, maxNorm).
float globalClipFactor(const std::vector<std::vector<std::pair<std::string, double>>>& perStage, double maxNorm);

// A boundary tensor in int8 (training.pipeline.tensors "int8"; docs/DETERMINISM.md, "Pipeline
// stages"): each row of `width` floats (one position's vector) as a float32 scale, the row's
// largest magnitude over 127, and each value over the scale rounded to the nearest integer, ties
// to even, clamped to [-127, 127] (0 for a row of zeros). The bytes: every row's scale
// (little-endian), then every row's codes. An error (and nothing in `out`) for a value that is not
// finite, or a size that is not whole rows.
std::int64_t int8Bytes(std::int64_t elements, std::int64_t width);
std::string quantiseRows(std::span<const float> values, std::int64_t width, std::vector<char>& out);
// The values back: each code times its row's scale. A row quantiseRows cannot make (a scale not
// +0 or positive, finite and at most FLT_MAX / 127; the code -128; a code under a zero scale) is
// an error, which the receiver takes as its link's (the sender's fault, not its own).
std::string dequantiseRows(std::span<const char> bytes, std::int64_t width, std::vector<float>& out);

} // namespace tessera::compute::portable
