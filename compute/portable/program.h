#pragma once

// A portable training step as a program: a list of instructions over named values, each
// instruction one portable kernel (kernels.h) with its inputs, outputs and attributes spelled out.
// The trainer runs a step by running its program; a dispute is narrowed to one instruction of one
// step, and the referee runs that instruction alone from the inputs both sides agree on
// (docs/VERIFICATION.md, "Disputes over portable jobs"). The order of the instructions is part of
// the contract: docs/DETERMINISM.md lists it per model, and `tessera-node program JOB` prints it.
//
// Values are single-assignment: a parameter before its update and after it are two values (the
// executor may still give both the same memory and update in place). No torch, no Qt.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::compute::portable {

enum class DType : std::uint8_t { Float32, Int64 };

struct Value {
    // The name a value is hashed under: for the training state, its name in the state
    // ("model/fc0.weight", "optimizer/momentum/fc0.weight", "optimizer/adam_step"), the same before
    // and after the step; for everything else a name unique in the program ("fc0.out").
    std::string name;
    DType dtype = DType::Float32;
    std::vector<std::int64_t> shape; // empty: a scalar
    std::int64_t count() const;
    std::int64_t bytes() const;
};

enum class Op : std::uint8_t {
    Batch, // -> x, y: the step's samples and targets, read by the trainer (no kernel)
    Linear, // x [n, in], w [out, in] (, b [out]) -> y [n, out] = x w^T (+ b)
    LinearGradInput, // dy [n, out], w [out, in] -> dx [n, in] = dy w
    LinearGradWeight, // dy [n, out], x [n, in] -> dw [out, in] = dy^T x
    LinearGradBias, // dy [n, out] -> db [out]: the rows of dy summed in order
    Relu, // x -> y
    ReluGrad, // y (the forward output), dy -> dx
    CrossEntropy, // logits [n, c], targets [n] (int64) -> loss [], dlogits [n, c]
    ClipFactor, // g_1 .. g_k -> factor []; reals: maxNorm
    Scale, // g, factor [] -> g * factor
    Sgd, // p, g (, buf) -> p' (, buf'); reals: lr, momentum, weightDecay; integers: nesterov, first
    Adam, // p, g, m, v, step [] (int64, this step's number) -> p', m', v'; reals: lr, beta1, beta2,
          // eps, weightDecay; integers: decoupled, fresh (m and v start at 0 and are no inputs)
    Count, // n [] (int64) -> n + 1
    // The cnn's, on channels-last images; integers: batch, height, width, channels in, channels
    // out (kernels.h, conv3x3*); the bias's gradient is LinearGradBias over the pixels.
    Conv3x3, // x, w [cout, cin, 3, 3], b -> y
    Conv3x3GradInput, // dy, w -> dx
    Conv3x3GradWeight, // dy, x -> dw
    // integers: batch, height, width, channels of the input
    MaxPool2, // x -> y
    MaxPool2ReluGrad, // y (the ReLU's output the pooling read), dy -> the ReLU's input's gradient
    ChannelsFirst, // x [n, h, w, c] -> y [n, c * h * w]
    ChannelsLast, // x [n, c * h * w] -> y [n, h, w, c]
    // reals: rate p; integers: the stream's seed (its 64 bits as int64)
    Dropout, // x -> y
    DropoutGrad, // dy -> dx
    // The gpt's (kernels.h); integers: batch, length, width (and the vocabulary for the token's).
    Embed, // tokens [n, l] (int64), wte [v, width], wpe [context, width] -> x [n, l, width]
    EmbedGradPosition, // dx -> dwpe [context, width]
    EmbedGradToken, // dx, tokens (, base: the tied head's gradient) -> dwte [v, width]
    Add, // a, b -> a + b
    LayerNorm, // x, gamma, beta -> y (rows of gamma's width)
    LayerNormGrad, // x, gamma, dy -> dx, dgamma, dbeta
    Gelu, // x -> y
    GeluGrad, // x, dy -> dx
    // integers: batch, length, heads, width
    Attention, // qkv [n, l, 3 width] -> y [n, l, width]
    AttentionGrad, // qkv, dy -> dqkv
};
const char* opName(Op op);
// Whether an instruction is the optimizer's part of a step (ClipFactor, Scale, Count, Sgd, Adam):
// a step's update starts at its first such instruction.
bool updates(Op op);

struct Instruction {
    Op op = Op::Batch;
    std::vector<int> inputs; // value indices
    std::vector<int> outputs;
    std::vector<double> reals;
    std::vector<std::int64_t> integers;
    std::string label; // for people: "fc1: gradient of the weight"
};

struct Program {
    std::vector<Value> values;
    std::vector<Instruction> instructions;
    // The training state at the step's start and at its end, each in name order (the order its
    // checkpoint hash takes them in). The end may hold more than the start: the optimizer's
    // buffers are born in a shard's first step unless the round carries them.
    std::vector<int> stateBefore;
    std::vector<int> stateAfter;

    int add(Value value);
    int addInstruction(Instruction instruction);
    // The value of the state named `name` at the step's start (-1: none).
    int before(const std::string& name) const;
    // Every value's output position: index into the concatenated outputs of all instructions, in
    // order (a trace lists one hash per output, in this order); -1 for values no instruction writes.
    std::vector<int> outputPositions() const;
    int outputCount() const;
    // One line per instruction: "7  Linear  fc1.out [64, 128] <- fc0.act, model/fc1.weight, model/fc1.bias".
    std::string listing() const;
};

// Runs a program's instructions with the portable kernels. Values get memory from bind() (the
// training state, updated in place when an instruction's output is bound to its input's memory)
// or from the executor, which keeps it for the next step.
class Executor {
public:
    explicit Executor(int threads = 1);
    int threads() const { return m_threads; }

    // Forgets the bindings; the executor's own memory for a value is allocated when first used.
    void prepare(const Program& program);
    void bind(int value, void* memory);
    void* memory(int value);
    float* floats(int value) { return static_cast<float*>(memory(value)); }

    // Runs one instruction (Batch does nothing: the trainer writes x and y).
    void run(const Program& program, std::size_t instruction);

private:
    int m_threads;
    std::vector<void*> m_memory;
    std::vector<std::size_t> m_sizes; // in 8-byte words
    std::vector<std::vector<std::uint64_t>> m_owned; // allocated when first used, kept for the next step
    // A convolution's unfolded input, by value, shared by its forward and its weight's gradient
    // within a step (values do not change within a step); emptied by prepare().
    struct Unfolded {
        std::vector<float> col;
        bool current = false;
    };
    std::map<int, Unfolded> m_unfolded;
    const float* unfolded(int value, const std::vector<std::int64_t>& geometry);
};

} // namespace tessera::compute::portable
