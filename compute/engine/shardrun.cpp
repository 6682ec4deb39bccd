#include "shardrun.h"

#include "detail/inferencerun.h"
#include <core/inference/outputs.h>

#include "detail/batches.h"
#include "detail/datasets.h"
#include "detail/models.h"
#include "detail/optimizer.h"
#include "detail/portablestep.h"
#include "detail/tensors.h"
#include "detail/trace.h"
#include "detail/update.h"
#include "runtimeprofile.h"

#include <core/nodeinfo.h>
#include <core/readfile.h>
#include <core/seeds.h>

#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <utility>

#include <torch/torch.h>

#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>

#include <cmath>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace tessera::compute {

using namespace detail;

struct ShardRun::Private {
    core::ShardTask task;
    ComputeEnvironment environment;
    DatasetSplits data;
    std::unique_ptr<Model> model;
    std::unique_ptr<Optimizer> optimizer;
    std::unique_ptr<PortableStep> portable; // training.determinism portable: each step a program
    PortableStep::Observer observer; // a dispute's trace, while one is recorded
    std::unique_ptr<BatchPlan> plan;
    std::unique_ptr<InferenceRun> inference; // an inference task: its lines instead of training
    QList<QByteArray> lines; // and the lines so far
    c10::Device device { c10::kCPU };
    std::int64_t step = 0;
    QList<double> losses;
    QList<core::Digest> chain; // without the one being hashed (pendingHash)
    std::future<core::Digest> pendingHash; // the newest checkpoint's hash, computed on a helper thread
    QByteArray keptState; // suspend() at task.keptStateCheckpoint(), for disputes
    QByteArray startWeights; // the round's weights (shared, not copied), for a compressed update
    QString startWeightsFile; // or (spillTo) the file that holds them
    core::Digest startHash; // a stage started from a file (startFromFile): the round's weights' hash
    QString keptStateFile; // spillTo: where the kept state goes as soon as it is made
    bool keptInFile = false; // it went there
    bool keepCheckpointStates = true;
    std::int64_t previousElapsedMs = 0; // before a suspend
    QElapsedTimer timer;
    bool broken = false;
    // A stage task's: its share of the model (the model's parameter names), the link to the other
    // stages, and every tensor it traded.
    std::set<std::string> stageParameters;
    StageLink* link = nullptr;
    std::unique_ptr<StageLink> recorded; // a re-executed stage's (task.stageInputs), which link points to
    QList<StageTensor> tensors;
    bool linkBroken = false;

    // The chain with every checkpoint hashed: waits for the one in flight.
    const QList<core::Digest>& settledChain()
    {
        if (pendingHash.valid())
            chain.append(pendingHash.get());
        return chain;
    }
};

namespace {

// Pins what decides the bits: the shard's own thread count, on this (the compute) thread.
void pinRuntime(const core::ShardTask& task)
{
    if (at::get_num_threads() != task.threads)
        at::set_num_threads(int(task.threads));
}

// What decides a result's bits: the portable kernels alone, or this runtime (LibTorch, BLAS, CPU
// capability, threads, device).
QString profileOf(const core::ShardTask& task, const c10::Device& device)
{
    return task.portable ? core::PortableProfile : currentRuntimeProfile(int(task.threads), deviceProfileName(device)).toString();
}

core::Digest taskDigest(const core::ShardTask& task)
{
    return core::Digest::ofBytes(QJsonDocument(task.toJson()).toJson(QJsonDocument::Compact));
}

// Builds everything but the weights: data, model, batch plan.
core::Result<std::unique_ptr<ShardRun::Private>> prepare(const core::ShardTask& task, const ComputeEnvironment& environment)
{
    if (auto status = task.validate(); !status)
        return status.error();
    pinRuntime(task);
    auto data = loadTaskData(task, environment);
    if (!data)
        return data.error();
    const auto size = data->trainSampleCount();
    if (task.sampleEnd > size)
        return core::Error { QStringLiteral("sampleEnd"),
            QStringLiteral("the shard reads samples up to %1 but the dataset has %2").arg(task.sampleEnd).arg(size) };

    auto d = std::make_unique<ShardRun::Private>();
    d->task = task;
    d->environment = environment;
    d->data = *data;
    auto model = buildModel(task.model, data->train->sampleShape(), data->train->classes,
        core::deriveSeed(std::uint64_t(task.seed), { std::uint64_t(core::SeedPurpose::Initialisation) }), environment);
    if (!model)
        return model.error();
    auto device = resolveDevice(environment.device);
    if (!device)
        return device.error();
    d->device = task.portable ? c10::Device(c10::kCPU) : *device; // the portable kernels are CPU code
    d->model = std::move(*model);
    if (task.portable) { // a model the portable kernels do not cover is refused here, by field
        if (auto program = portableProgram(task, 0, data->train->sampleShape(), data->train->classes); !program)
            return program.error();
    }
    d->model->to(d->device); // before the optimizer takes the parameters
    d->optimizer = std::make_unique<Optimizer>(task.optimizer, d->model->parameters());
    if (task.portable)
        d->portable = std::make_unique<PortableStep>(d->task, *d->model, *d->optimizer, data->train->sampleShape(),
            data->train->classes, environment.portableThreads > 0 ? environment.portableThreads : int(task.threads));
    d->plan = std::make_unique<BatchPlan>(task, *data);
    if (auto status = d->plan->check(); !status)
        return status.error();
    if (task.isStage()) {
        auto parameters
            = d->portable ? d->portable->stageParameters() : core::Result<std::set<std::string>>(std::set<std::string> {});
        if (!parameters || parameters->empty())
            return core::Error { QStringLiteral("stages"),
                parameters ? QStringLiteral("the stage holds no parameters") : parameters.error().message };
        d->stageParameters = std::move(*parameters);
    }
    if (!task.stageInputs.isNull()) {
        const auto file = environment.blobPath ? environment.blobPath(task.stageInputs) : std::nullopt;
        auto bytes = file ? core::readFile(*file)
                          : core::Result<QByteArray>(core::Error { QStringLiteral("stageInputs"),
                              QStringLiteral("the stage's recorded inputs %1 are not here").arg(task.stageInputs.toHex()) });
        if (!bytes)
            return bytes.error();
        if (core::Digest::ofBytes(*bytes) != task.stageInputs)
            return core::Error { QStringLiteral("stageInputs"), QStringLiteral("the stage's recorded inputs are damaged") };
        auto inputs = core::StageInputs::parse(*bytes);
        if (!inputs)
            return inputs.error();
        d->recorded = std::make_unique<RecordedStageLink>(std::move(*inputs));
        d->link = d->recorded.get();
    }
    return d;
}

// Whether a tensor of a training state or of the round's weights is a stage task's own: one of its
// parameters ("model/X", "X"), their optimizer buffers ("optimizer/exp_avg/X", …), or Adam's step
// count, which every stage keeps. Every tensor for other tasks.
bool ownedBy(const ShardRun::Private& d, std::string name)
{
    if (!d.task.isStage())
        return true;
    for (const std::string prefix : { "model/", "optimizer/" }) {
        if (name.rfind(prefix, 0) == 0)
            name = name.substr(prefix.size());
    }
    for (const std::string prefix : { "exp_avg/", "exp_avg_sq/", "momentum/" }) {
        if (name.rfind(prefix, 0) == 0) {
            name = name.substr(prefix.size());
            break;
        }
    }
    return name == "adam_step" || d.stageParameters.count(name);
}

NamedTensors ownShare(const ShardRun::Private& d, NamedTensors state)
{
    if (d.task.isStage())
        std::erase_if(state, [&](const auto& entry) { return !ownedBy(d, entry.first); });
    return state;
}

// What a checkpoint of the chain hashes: at step 0 the round's weights (so that the chain starts at
// the task's startWeights), after that the whole training state, weights and optimizer state, so
// that a referee who restores a checkpoint agreed by both sides of a dispute restores all of it.
NamedTensors trainingState(const ShardRun::Private& d)
{
    NamedTensors state = withPrefix("model/", d.model->state());
    for (auto& entry : withPrefix("optimizer/", d.optimizer->state()))
        state.push_back(std::move(entry));
    sortByName(state);
    return ownShare(d, std::move(state));
}

// What a round's weights hold and a shard reveals: the model's tensors, and with a carried
// optimizer state (task.carriesOptimizer) the optimizer's under "optimizer/".
// A stage task's: its own share of them, unless `whole` (its chain starts at the round's weights).
NamedTensors roundState(const ShardRun::Private& d, bool whole = false)
{
    NamedTensors state = d.model->state();
    if (d.task.carriesOptimizer) {
        for (auto& entry : withPrefix(CarriedPrefix, d.optimizer->state()))
            state.push_back(std::move(entry));
        sortByName(state);
    }
    return whole ? state : ownShare(d, std::move(state));
}

// A training state's checkpoint hash: its canonical hash, or for a portable job the root of its
// tensors' own hashes (docs/DETERMINISM.md, "Checkpoint chain"), which a dispute's trace can be
// checked against tensor by tensor.
core::Digest stateHash(const core::ShardTask& task, const NamedTensors& state)
{
    return task.portable ? stateRoot(state) : canonicalHash(state);
}

core::Digest checkpointHash(const ShardRun::Private& d)
{
    if (d.step == 0) // a stage started from a file holds only its share: the hash of the whole was taken as it read
        return d.startHash.isNull() ? canonicalHash(roundState(d, true)) : d.startHash;
    return stateHash(d.task, trainingState(d));
}

// Loads the round's weights into the model, and a carried optimizer state into the optimizer.
core::Status loadRoundState(ShardRun::Private& d, const NamedTensors& weights)
{
    if (!d.task.carriesOptimizer)
        return d.model->loadState(weights);
    auto carried = stripPrefix(CarriedPrefix, weights);
    if (carried.empty())
        return core::Error { QStringLiteral("startWeights"),
            QStringLiteral("the round's weights carry no optimizer state, which the task says they do") };
    if (auto status = d.model->loadState(modelPart(weights)); !status)
        return status;
    if (auto status = d.optimizer->loadState(carried); !status)
        return status;
    // Exactly the optimizer's own entries: a misnamed one would be dropped unseen otherwise.
    auto names = [](const NamedTensors& tensors) {
        std::vector<std::string> out;
        for (const auto& entry : tensors)
            out.push_back(entry.first);
        std::sort(out.begin(), out.end());
        return out;
    };
    if (names(carried) != names(d.optimizer->state()))
        return core::Error { QStringLiteral("startWeights"),
            QStringLiteral("the carried optimizer state does not fit the model and optimizer") };
    return {};
}

// A training state up to this size is copied and hashed on a helper thread while training goes
// on: a copy costs a tenth of a hash, and the copy's memory is small next to the runtime's. A
// larger one is hashed in place (its hash is small next to its model's steps).
constexpr std::int64_t OffThreadHashBytes = 64LL << 20;

std::int64_t bytesOf(const NamedTensors& tensors)
{
    std::int64_t total = 0;
    for (const auto& [name, tensor] : tensors)
        total += std::int64_t(tensor.nbytes());
    return total;
}

} // namespace

namespace {

// The samples and targets of shard step `step` (0-based), on the run's device.
std::pair<at::Tensor, at::Tensor> batchOf(ShardRun::Private& d, std::int64_t step)
{
    const auto indices = d.plan->indicesOfStep(step);
    const auto index
        = torch::from_blob(const_cast<std::int64_t*>(indices.data()), { std::int64_t(indices.size()) }, torch::kInt64);
    return { d.data.train->samples(index, d.task.portable).to(d.device), d.data.train->y.index_select(0, index).to(d.device) };
}

} // namespace

ShardRun::ShardRun(std::unique_ptr<Private> d)
    : d(std::move(d))
{ }

ShardRun::~ShardRun() = default;

namespace {

// A stage task's share of the round's weights, read from their file one tensor at a time
// (ShardRun::startFromFile): every tensor goes into the hash of the whole and is checked against
// the model's (name, shape, dtype); the stage's own parameters and the model's buffers are copied
// into it, and the other stages' tensors are let go as they are read. The other stages'
// parameters are let go first, so that the stage never holds the whole model.
core::Status loadStageShare(ShardRun::Private& d, const QString& weightsFile)
{
    auto unfit = [](const QString& why) { return core::Error { QStringLiteral("startWeights"), why }; };
    std::map<std::string, at::Tensor> expected; // the model's tensors' shapes and dtypes, on the meta device
    for (const auto& [name, tensor] : d.model->state())
        expected.emplace(name, at::empty(tensor.sizes(), tensor.options().device(at::kMeta)));
    d.optimizer->releaseAllBut([&](const std::string& name) { return ownedBy(d, name); });
    std::set<std::string> released;
    for (const auto& [name, parameter] : d.model->parameters()) {
        if (!ownedBy(d, name))
            released.insert(name);
    }
    std::map<std::string, at::Tensor> targets;
    for (auto& [name, tensor] : d.model->state()) {
        if (!released.count(name))
            targets.emplace(name, tensor);
    }
    core::Sha256 hasher;
    std::size_t seen = 0;
    torch::NoGradGuard noGrad;
    auto read = visitTensorsInFile(weightsFile, QStringLiteral("the start weights are not a dict of tensors"),
        [&](const std::string& name, const at::Tensor& tensor) -> core::Status {
            const QString tensorName = QString::fromStdString(name);
            const auto shape = expected.find(name);
            if (shape == expected.end())
                return unfit(QStringLiteral("the start weights have '%1', which the model does not").arg(tensorName));
            if (tensor.sizes() != shape->second.sizes())
                return unfit(QStringLiteral("'%1' is %2 in the start weights but %3 in the model")
                                 .arg(tensorName, shapeOf(tensor), shapeOf(shape->second)));
            // A broker's round weights are the model's own state: a stage refuses another dtype
            // rather than hash one thing and train on another.
            if (tensor.scalar_type() != shape->second.scalar_type())
                return unfit(QStringLiteral("'%1' has another dtype in the start weights than in the model").arg(tensorName));
            ++seen;
            addCanonicalRecord(hasher, name, tensor);
            if (const auto target = targets.find(name); target != targets.end())
                target->second.copy_(tensor);
            return {};
        });
    if (!read)
        return core::Error { QStringLiteral("startWeights"), read.error().message };
    if (seen != expected.size())
        return unfit(QStringLiteral("the start weights lack %1 of the model's %2 tensors")
                         .arg(expected.size() - seen)
                         .arg(expected.size()));
    d.startHash = hasher.result();
    if (!d.task.startWeights.isNull() && d.startHash != d.task.startWeights)
        return unfit(QStringLiteral("the start weights do not hash to the task's startWeights"));
#ifdef __GLIBC__
    // The other stages' parameters, built with the model and let go above, sit in the heap's free
    // lists (glibc raises its mmap threshold as large blocks come and go): given back to the system.
    malloc_trim(0);
#endif
    return {};
}

// The round's weights, read and checked against the task once, where they come in.
core::Result<NamedTensors> startTensors(const core::ShardTask& task, const QByteArray& startWeights)
{
    auto weights = unpickleTensors(startWeights, QStringLiteral("the start weights are not a dict of tensors"));
    if (!weights)
        return core::Error { QStringLiteral("startWeights"), weights.error().message };
    if (!task.startWeights.isNull() && canonicalHash(*weights) != task.startWeights)
        return core::Error { QStringLiteral("startWeights"),
            QStringLiteral("the start weights do not hash to the task's startWeights") };
    return weights;
}

} // namespace

// --- inference tasks (docs/DETERMINISM.md, "Inference") -------------------------------------

core::Result<std::unique_ptr<ShardRun>> ShardRun::startInference(
    const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment)
{
    auto inference = InferenceRun::start(task, startWeights, environment);
    if (!inference)
        return inference.error();
    auto d = std::make_unique<Private>();
    d->task = task;
    d->environment = environment;
    d->inference = std::move(*inference);
    d->startWeights = startWeights;
    d->timer.start();
    return std::unique_ptr<ShardRun>(new ShardRun(std::move(d)));
}

core::Result<std::unique_ptr<ShardRun>> ShardRun::resumeInference(const core::ShardTask& task, const QByteArray& suspended,
    const ComputeEnvironment& environment, const QByteArray& startWeights)
{
    auto bad = [](const QString& what) { return core::Error { QStringLiteral("state"), what }; };
    auto saved = unpickleTensors(suspended, QStringLiteral("the saved shard state is damaged"));
    if (!saved)
        return saved.error();
    std::map<std::string, at::Tensor> meta;
    for (const auto& [name, tensor] : stripPrefix("meta/", *saved))
        meta[name] = tensor;
    const auto expected = taskDigest(task).toRaw();
    const auto savedTask = meta["task"], step = meta["step"], lines = meta["lines"], elapsed = meta["elapsed_ms"];
    if (!savedTask.defined() || savedTask.scalar_type() != at::kByte || savedTask.numel() != expected.size()
        || QByteArray(static_cast<const char*>(savedTask.contiguous().data_ptr()), expected.size()) != expected)
        return bad(QStringLiteral("the saved state belongs to another shard (meta/task)"));
    if (!step.defined() || step.scalar_type() != at::kLong || step.numel() != 1 || !lines.defined()
        || lines.scalar_type() != at::kByte)
        return bad(QStringLiteral("the saved state needs meta/step (int64) and meta/lines (uint8)"));
    auto run = startInference(task, startWeights, environment);
    if (!run)
        return run.error();
    auto& d = *(*run)->d;
    const auto bytes = lines.contiguous();
    auto read = core::inference::linesOf(QByteArray(static_cast<const char*>(bytes.data_ptr()), bytes.numel()));
    d.step = step.item<std::int64_t>();
    const auto covered = std::min(task.sampleEnd - task.sampleBegin, d.step * task.batchSize);
    if (!read || d.step < 0 || d.step > task.localSteps || read->size() != covered)
        return bad(QStringLiteral("meta/lines are not the lines of meta/step's steps"));
    d.lines = *read;
    d.previousElapsedMs = elapsed.defined() && elapsed.numel() == 1 ? elapsed.item<std::int64_t>() : 0;
    return run;
}

core::Status ShardRun::stepInference()
{
    auto lines = d->inference->stepLines(d->step);
    if (!lines) {
        d->broken = true;
        return lines.error();
    }
    d->lines.append(*lines);
    ++d->step;
    return {};
}

QByteArray ShardRun::suspendInference() const
{
    const auto task = taskDigest(d->task).toRaw();
    const auto lines = core::inference::blobOf(d->lines);
    NamedTensors state;
    state.emplace_back(
        "meta/elapsed_ms", torch::tensor(static_cast<std::int64_t>(d->previousElapsedMs + d->timer.elapsed()), torch::kInt64));
    state.emplace_back(
        "meta/lines", torch::from_blob(const_cast<char*>(lines.constData()), { lines.size() }, torch::kUInt8).clone());
    state.emplace_back("meta/step", torch::tensor(d->step, torch::kInt64));
    state.emplace_back(
        "meta/task", torch::from_blob(const_cast<char*>(task.constData()), { task.size() }, torch::kUInt8).clone());
    return pickleTensors(state);
}

ShardOutput ShardRun::finishInference()
{
    ShardOutput output;
    auto& result = output.result;
    result.jobId = d->task.jobId;
    result.round = d->task.round;
    result.shard = d->task.shard;
    result.runtimeProfile = profileOf(d->task, c10::Device(c10::kCPU));
    result.wallTimeMs = d->previousElapsedMs + d->timer.elapsed();
    if (!finished()) {
        result.outcome = core::ShardResult::Outcome::Failed;
        result.failure = QStringLiteral("the shard stopped after %1 of %2 steps").arg(d->step).arg(d->task.localSteps);
        return output;
    }
    output.weights = core::inference::blobOf(d->lines);
    result.finalHash = core::Digest::ofBytes(output.weights);
    result.weightsSha256 = result.finalHash;
    result.checkpointHashes = core::inference::chainOf(d->task.startWeights, d->lines, d->task.batchSize);
    result.samplesProcessed = d->task.sampleEnd - d->task.sampleBegin;
    return output;
}

core::Result<Replay> ShardRun::replayInference(const core::ShardTask& task, std::int64_t from, const QByteArray& weights,
    std::int64_t to, const ComputeEnvironment& environment)
{
    // Steps (batches) from .. to-1 of the shard, chain entries from+1 .. to, from the model's
    // weights alone; the lines they give are in `weights`.
    if (from < 0 || to <= from || to >= task.checkpointCount())
        return core::Error { QStringLiteral("checkpoint"),
            QStringLiteral("cannot compute batches %1 to %2 of a shard of %3")
                .arg(from)
                .arg(to - 1)
                .arg(task.checkpointCount() - 1) };
    auto inference = InferenceRun::start(task, weights, environment);
    if (!inference)
        return core::Error { QStringLiteral("state"), inference.error().message };
    auto lines = (*inference)
                     ->linesOf(task.sampleBegin + from * task.batchSize,
                         std::min(task.sampleEnd, task.sampleBegin + to * task.batchSize));
    if (!lines)
        return lines.error();
    Replay replay;
    replay.checkpoints = core::inference::chainOf({}, *lines, task.batchSize).mid(1);
    replay.weights = core::inference::blobOf(*lines);
    if (from == 0 && to == task.checkpointCount() - 1)
        replay.weightsHash = core::Digest::ofBytes(replay.weights);
    replay.runtimeProfile = profileOf(task, c10::Device(c10::kCPU));
    return replay;
}

core::Result<std::unique_ptr<ShardRun>> ShardRun::start(
    const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment)
{
    if (task.inference)
        return startInference(task, startWeights, environment);
    auto prepared = prepare(task, environment);
    if (!prepared)
        return prepared.error();
    auto d = std::move(*prepared);
    auto weights = startTensors(task, startWeights);
    if (!weights)
        return weights.error();
    if (auto status = loadRoundState(*d, *weights); !status)
        return status.error();
    d->startWeights = startWeights;
    d->chain.append(checkpointHash(*d));
    // A stage's chain starts at the round's weights, hashed whole; then it keeps only its share.
    if (task.isStage())
        d->optimizer->releaseAllBut([&](const std::string& name) { return ownedBy(*d, name); });
    d->timer.start();
    return std::unique_ptr<ShardRun>(new ShardRun(std::move(d)));
}

core::Result<std::unique_ptr<ShardRun>> ShardRun::startFromFile(
    const core::ShardTask& task, const QString& startWeightsFile, const ComputeEnvironment& environment)
{
    if (!task.isStage() || task.carriesOptimizer) {
        auto bytes = core::readFile(startWeightsFile);
        if (!bytes)
            return core::Error { QStringLiteral("startWeights"), bytes.error().message };
        return start(task, *bytes, environment);
    }
    // A file this node cannot read is its own trouble, not the job's (given back, not failed).
    if (QFile file(startWeightsFile); !file.open(QIODevice::ReadOnly))
        return core::Error { QStringLiteral("sandbox"),
            QStringLiteral("the round's weights cannot be read here: ") + file.errorString() };
    auto prepared = prepare(task, environment);
    if (!prepared)
        return prepared.error();
    auto d = std::move(*prepared);
    if (auto status = loadStageShare(*d, startWeightsFile); !status)
        return status.error();
    d->startWeightsFile = startWeightsFile;
    d->chain.append(d->startHash);
    d->timer.start();
    return std::unique_ptr<ShardRun>(new ShardRun(std::move(d)));
}

core::Result<std::unique_ptr<ShardRun>> ShardRun::resume(const core::ShardTask& task, const QByteArray& suspended,
    const ComputeEnvironment& environment, StateOrigin origin, const QByteArray& startWeights)
{
    if (task.inference)
        return resumeInference(task, suspended, environment, startWeights);
    if (task.isStage()) // its tensors so far are not in the state: the stage starts again
        return core::Error { QStringLiteral("stage"), QStringLiteral("a stage task is not resumed: it starts again") };
    auto prepared = prepare(task, environment);
    if (!prepared)
        return prepared.error();
    auto d = std::move(*prepared);
    auto saved = unpickleTensors(suspended, QStringLiteral("the saved shard state is damaged"));
    if (!saved)
        return saved.error();
    const auto meta = stripPrefix("meta/", *saved);
    auto find = [&](const std::string& name) -> at::Tensor {
        for (const auto& [key, tensor] : meta) {
            if (key == name)
                return tensor;
        }
        return {};
    };
    // A state is checked record by record before it is used. A stranger's (a dispute's checkpoint)
    // needs only meta/step besides the model and the optimizer; the rest of meta/ is this node's own
    // bookkeeping (docs/DETERMINISM.md, "Training state").
    auto bad = [](const QString& what) { return core::Error { QStringLiteral("state"), what }; };
    const bool own = origin == StateOrigin::Own;
    const auto step = find("step");
    const auto savedTask = own ? find("task") : at::Tensor(), losses = own ? find("losses") : at::Tensor(),
               chain = own ? find("chain") : at::Tensor(), elapsed = own ? find("elapsed_ms") : at::Tensor();
    if (!step.defined() || (own && !savedTask.defined()))
        return bad(own ? QStringLiteral("the saved shard state is incomplete: it needs meta/task and meta/step")
                       : QStringLiteral("the state is incomplete: it needs meta/step"));
    if (own) {
        const auto expected = taskDigest(task).toRaw();
        if (savedTask.scalar_type() != at::kByte || savedTask.dim() != 1 || savedTask.numel() != expected.size())
            return bad(QStringLiteral("meta/task must be the 32 bytes of the task's SHA-256 (uint8 [32])"));
        if (QByteArray(static_cast<const char*>(savedTask.contiguous().data_ptr()), expected.size()) != expected)
            return bad(QStringLiteral("the saved state belongs to another shard (meta/task)"));
    }
    if (step.scalar_type() != at::kLong || step.numel() != 1)
        return bad(QStringLiteral("meta/step must be one int64"));
    if (losses.defined() && (losses.scalar_type() != at::kDouble || losses.dim() != 1))
        return bad(QStringLiteral("meta/losses must be float64 [step]"));
    if (chain.defined() && (chain.scalar_type() != at::kByte || chain.dim() != 2 || chain.size(1) != 32))
        return bad(QStringLiteral("meta/chain must be uint8 [checkpoints, 32]"));
    if (elapsed.defined() && (elapsed.scalar_type() != at::kLong || elapsed.numel() != 1))
        return bad(QStringLiteral("meta/elapsed_ms must be one int64"));
    if (auto status = d->model->loadState(stripPrefix("model/", *saved)); !status)
        return status.error();
    if (auto status = d->optimizer->loadState(stripPrefix("optimizer/", *saved)); !status)
        return status.error();
    d->step = step.item<std::int64_t>();
    if (d->step < 0 || d->step > task.localSteps)
        return bad(QStringLiteral("meta/step is outside the shard"));
    if (losses.defined()) {
        const auto lossValues = losses.contiguous();
        for (std::int64_t i = 0; i < lossValues.numel(); ++i)
            d->losses.append(lossValues.data_ptr<double>()[i]);
        if (d->losses.size() != d->step)
            return bad(QStringLiteral("meta/losses has %1 losses for %2 steps").arg(d->losses.size()).arg(d->step));
    }
    if (chain.defined()) {
        const auto chainBytes = chain.contiguous();
        for (std::int64_t i = 0; i < chainBytes.size(0); ++i)
            d->chain.append(*core::Digest::fromRaw(
                QByteArrayView(reinterpret_cast<const char*>(chainBytes[i].data_ptr<std::uint8_t>()), 32)));
    }
    d->previousElapsedMs = elapsed.defined() ? elapsed.item<std::int64_t>() : 0;
    if (!startWeights.isEmpty()) {
        if (auto checked = startTensors(task, startWeights); !checked)
            return checked.error();
        d->startWeights = startWeights;
    }
    d->timer.start();
    return std::unique_ptr<ShardRun>(new ShardRun(std::move(d)));
}

const core::ShardTask& ShardRun::task() const
{
    return d->task;
}

std::int64_t ShardRun::completedSteps() const
{
    return d->step;
}

bool ShardRun::finished() const
{
    return d->step >= d->task.localSteps;
}

double ShardRun::lastLoss() const
{
    return d->losses.isEmpty() ? std::nan("") : d->losses.last();
}

core::Status ShardRun::step()
{
    if (d->broken)
        return core::Error { {}, QStringLiteral("the shard already failed") };
    if (finished())
        return core::Error { {}, QStringLiteral("the shard has no steps left") };
    if (d->inference)
        return stepInference();
    pinRuntime(d->task);
    const auto& task = d->task;
    auto outcome = guarded(QStringLiteral("step %1").arg(d->step + 1), [&]() -> double {
        const auto [x, y] = batchOf(*d, d->step);
        if (d->portable) {
            if (task.isStage() && !d->link)
                throw std::runtime_error("a stage task needs its link to the other stages");
            auto loss = task.isStage() ? d->portable->runStage(d->step, x, y, *d->link, d->tensors)
                                       : d->portable->run(d->step, x, y, d->observer);
            if (!loss && loss.error().field == u"link") {
                d->linkBroken = true; // the other stages', or the network's: the task goes back
                throw std::runtime_error(loss.error().message.toStdString());
            }
            if (!loss)
                throw std::runtime_error(loss.error().message.toStdString());
            if (!std::isfinite(*loss))
                throw std::runtime_error("the loss became NaN or infinite (is the learning rate too high?)");
            return *loss;
        }
        torch::manual_seed(core::deriveSeed(std::uint64_t(task.seed),
            { std::uint64_t(core::SeedPurpose::Step), std::uint64_t(task.round), std::uint64_t(task.shard),
                std::uint64_t(d->step) }));
        d->model->setTraining(true);
        d->optimizer->zeroGrad();
        const auto loss = lossOf(d->model->forward(x), y);
        const double value = loss.item<double>();
        if (!std::isfinite(value))
            throw std::runtime_error("the loss became NaN or infinite (is the learning rate too high?)");
        loss.backward();
        // The schedule runs across the job: round r's step s is global step r x H + s.
        d->optimizer->step(task.optimizer.learningRateAt(task.round * task.localSteps + d->step));
        return value;
    });
    if (!outcome) {
        d->broken = true;
        if (d->linkBroken)
            return core::Error { QStringLiteral("link"), outcome.error().message };
        return outcome.error();
    }
    d->losses.append(*outcome);
    ++d->step;
    if (d->step % task.checkpointInterval == 0 || d->step == task.localSteps) {
        const auto index = d->settledChain().size(); // at most one hash in flight
        auto state = trainingState(*d);
        if (bytesOf(state) <= OffThreadHashBytes) {
            d->pendingHash
                = std::async(std::launch::async, [task = d->task, copy = cloneTensors(state)] { return stateHash(task, copy); });
        } else {
            d->chain.append(stateHash(task, state));
        }
        state.clear();
        if (d->keepCheckpointStates && d->step < task.localSteps && index == task.keptStateCheckpoint())
            keepState();
    }
    return {};
}

namespace {

// What suspend() pickles: the training state, progress and chain so far.
NamedTensors suspendedStateOf(ShardRun::Private& d)
{
    // The tensors themselves, not copies: pickling reads them, and nothing trains meanwhile.
    NamedTensors state = withPrefix("model/", d.model->state());
    for (auto& entry : withPrefix("optimizer/", d.optimizer->state()))
        state.push_back(std::move(entry));
    const auto task = taskDigest(d.task).toRaw();
    state.emplace_back(
        "meta/task", torch::from_blob(const_cast<char*>(task.constData()), { task.size() }, torch::kUInt8).clone());
    state.emplace_back("meta/step", torch::tensor(d.step, torch::kInt64));
    state.emplace_back("meta/losses", torch::tensor(std::vector<double>(d.losses.begin(), d.losses.end()), torch::kFloat64));
    const auto& hashes = d.settledChain();
    auto chain = torch::empty({ std::int64_t(hashes.size()), 32 }, torch::kUInt8);
    for (qsizetype i = 0; i < hashes.size(); ++i)
        std::memcpy(chain[i].data_ptr<std::uint8_t>(), hashes[i].toRaw().constData(), 32);
    state.emplace_back("meta/chain", chain);
    state.emplace_back(
        "meta/elapsed_ms", torch::tensor(static_cast<std::int64_t>(d.previousElapsedMs + d.timer.elapsed()), torch::kInt64));
    sortByName(state);
    return state;
}

} // namespace

void ShardRun::spillTo(const QString& startWeightsFile, const QString& keptStateFile)
{
    d->startWeightsFile = startWeightsFile;
    if (!startWeightsFile.isEmpty())
        d->startWeights = QByteArray(); // the caller's copy goes with its own scope
    d->keptStateFile = keptStateFile;
    if (!keptStateFile.isEmpty() && !d->keptInFile)
        QFile::remove(keptStateFile); // an earlier shard's
}

void ShardRun::setStageLink(StageLink* link)
{
    d->link = link ? link : d->recorded.get(); // none: a re-executed stage keeps its recorded inputs
}

void ShardRun::setKeepsCheckpointState(bool keeps)
{
    d->keepCheckpointStates = keeps;
}

void ShardRun::keepState()
{
    // Pickled straight into the file when the run spills (never whole in memory: 3 x the model
    // for AdamW); in memory otherwise, or when the file cannot be written.
    if (!d->keptStateFile.isEmpty() && pickleTensorsToFile(suspendedStateOf(*d), d->keptStateFile)) {
        d->keptInFile = true;
        return;
    }
    d->keptState = suspend();
}

QByteArray ShardRun::suspend() const
{
    if (d->inference)
        return suspendInference();
    return pickleTensors(suspendedStateOf(*d));
}

namespace {

// What a node reveals at the end of a shard (detail::revealedUpdate): the final weights, or their
// compressed update from the round's weights.
// roundTensors: the round's weights (all, or at least the stage's share), read only when needed.
using RoundTensors = std::function<core::Result<NamedTensors>()>;
core::Result<NamedTensors> reveal(const core::ShardTask& task, NamedTensors final, const RoundTensors& roundTensors)
{
    if (task.compression == core::Compression::None) {
        // The broker refuses a result that is not finite as a signed lie: an honest node fails the
        // shard instead (a compressed update is checked the same way as it is quantised).
        for (const auto& [name, tensor] : final) {
            if (tensor.is_floating_point() && !torch::isfinite(tensor).all().item<bool>())
                return core::Error {
                    QStringLiteral("weights"),
                    QStringLiteral("%1 became NaN or infinite (is the learning rate too high?)").arg(QString::fromStdString(name))
                };
        }
        return final;
    }
    // Checked against the task where they came in (start(), resume()), or the broker's own blob.
    auto start = roundTensors();
    if (!start)
        return start.error();
    if (task.isStage()) { // the stage's update is of its own part of the round's weights
        std::set<std::string> own;
        for (const auto& entry : final)
            own.insert(entry.first);
        std::erase_if(*start, [&](const auto& entry) { return !own.count(entry.first); });
    }
    sortByName(*start);
    sortByName(final);
    return revealedUpdate(task.compression, *start, final);
}

const QString RoundDamaged = QStringLiteral("the round's weights are not a dict of tensors");

RoundTensors fromBytes(const QByteArray& roundWeights)
{
    return [roundWeights]() -> core::Result<NamedTensors> {
        if (roundWeights.isEmpty())
            return core::Error { QStringLiteral("startWeights"),
                QStringLiteral("the round's weights are needed to compress the update") };
        return unpickleTensors(roundWeights, RoundDamaged);
    };
}

// A run's round weights: in memory, or read again from the file that holds them (spillTo,
// startFromFile), a stage's share alone.
RoundTensors roundTensorsOf(const ShardRun::Private& d)
{
    if (!d.startWeights.isEmpty() || d.startWeightsFile.isEmpty())
        return fromBytes(d.startWeights);
    return [&d]() -> core::Result<NamedTensors> {
        NamedTensors share;
        core::Sha256 hasher; // a stage's file is hashed again: the update is of what it started from
        auto read = visitTensorsInFile(d.startWeightsFile, RoundDamaged, [&](const std::string& name, at::Tensor tensor) {
            addCanonicalRecord(hasher, name, tensor);
            if (ownedBy(d, name)) // every tensor but a stage's others
                share.emplace_back(name, std::move(tensor));
            return core::Status {};
        });
        if (!read)
            return core::Error { QStringLiteral("startWeights"),
                QStringLiteral("the round's weights cannot be read again: ") + read.error().message };
        if (!d.startHash.isNull() && hasher.result() != d.startHash)
            return core::Error { QStringLiteral("startWeights"), QStringLiteral("the round's weights changed on disk") };
        return share;
    };
}

} // namespace

ShardOutput ShardRun::finish()
{
    if (d->inference)
        return finishInference();
    ShardOutput output;
    auto& result = output.result;
    result.jobId = d->task.jobId;
    result.round = d->task.round;
    result.shard = d->task.shard;
    result.runtimeProfile = profileOf(d->task, d->device);
    result.wallTimeMs = d->previousElapsedMs + d->timer.elapsed();
    if (!finished()) {
        result.outcome = core::ShardResult::Outcome::Failed;
        result.failure = QStringLiteral("the shard stopped after %1 of %2 steps").arg(d->step).arg(d->task.localSteps);
        return output;
    }
    d->optimizer->releaseGradients(); // before the round's weights are read again to reveal the update
    auto revealed = reveal(d->task, roundState(*d), roundTensorsOf(*d));
    if (!revealed) {
        result.outcome = core::ShardResult::Outcome::Failed;
        result.failure = revealed.error().toString();
        return output;
    }
    output.weights = pickleTensors(*revealed);
    result.finalHash = canonicalHash(*revealed);
    result.checkpointHashes = d->settledChain();
    output.keptState = d->keptState;
    if (d->keptInFile)
        output.keptStateFile = d->keptStateFile;
    result.weightsSha256 = core::Digest::ofBytes(output.weights);
    if (d->task.isStage())
        result.tensorsRoot = stageTensorsRoot(d->tensors);
    output.stageTensors = d->tensors;
    result.losses = d->losses;
    result.samplesProcessed = d->task.localSteps * d->task.batchSize;
    return output;
}

core::ShardResult failedResult(const core::ShardTask& task, const QString& why)
{
    auto result = core::ShardResult::failedOf(task, why);
    result.runtimeProfile = profileOf(task, c10::Device(c10::kCPU));
    return result;
}

ShardOutput runShard(const core::ShardTask& task, const QByteArray& startWeights, const ComputeEnvironment& environment)
{
    auto run = ShardRun::start(task, startWeights, environment);
    if (!run)
        return { failedResult(task, run.error().toString()), {}, {} };
    while (!(*run)->finished()) {
        if (auto status = (*run)->step(); !status)
            return { failedResult(task, status.error().toString()), {}, {} };
    }
    return (*run)->finish();
}

core::Result<Replay> replayShard(const core::ShardTask& task, std::int64_t from, const QByteArray& state,
    const core::Digest& expected, std::int64_t to, const QByteArray& roundWeights, const ComputeEnvironment& environment)
{
    if (task.inference)
        return ShardRun::replayInference(task, from, state, to, environment);
    const auto count = task.checkpointCount();
    const bool revealOnly = from == to && to == count - 1 && from > 0;
    if (from < 0 || (to <= from && !revealOnly) || to >= count)
        return core::Error { QStringLiteral("checkpoint"),
            QStringLiteral("cannot replay from checkpoint %1 to %2 of a shard with %3").arg(from).arg(to).arg(count) };
    auto stepOf = [&](std::int64_t k) { return std::min(k * task.checkpointInterval, task.localSteps); };
    auto run = from == 0 ? ShardRun::start(task, state, environment)
                         : ShardRun::resume(task, state, environment, ShardRun::StateOrigin::Stranger);
    if (!run)
        return core::Error { QStringLiteral("state"), run.error().message };
    auto& d = *(*run)->d;
    d.keepCheckpointStates = false;
    if (d.step != stepOf(from))
        return core::Error { QStringLiteral("state"),
            QStringLiteral("the state is at step %1, not at checkpoint %2 (step %3)").arg(d.step).arg(from).arg(stepOf(from)) };
    // From the round's weights: start() hashed them (before a stage let go of the others' share).
    if ((from == 0 ? d.settledChain().first() : checkpointHash(d)) != expected)
        return core::Error { QStringLiteral("state"), QStringLiteral("the state does not hash to the agreed checkpoint") };
    d.chain = { expected };
    while (d.step < stepOf(to)) {
        if (auto status = (*run)->step(); !status)
            return status.error();
    }
    Replay replay;
    replay.checkpoints = d.settledChain().mid(1);
    if (to == count - 1) {
        auto revealed = reveal(task, roundState(d), fromBytes(from == 0 ? state : roundWeights));
        if (!revealed)
            return revealed.error();
        replay.weights = pickleTensors(*revealed);
        replay.weightsHash = canonicalHash(*revealed);
    } else {
        replay.weights = pickleTensors(d.model->state());
        replay.weightsHash = canonicalHash(d.model->state());
    }
    replay.runtimeProfile = profileOf(task, d.device);
    if (task.isStage() && from == 0 && to == count - 1)
        replay.tensorsRoot = stageTensorsRoot(d.tensors);
    return replay;
}

core::Result<std::unique_ptr<ShardRun>> ShardRun::trainedTo(const core::ShardTask& task, const QByteArray& startWeights,
    const QByteArray& keptState, std::int64_t step, const ComputeEnvironment& environment)
{
    if (task.inference) // each input comes from the weights alone: no dispute asks for a state
        return core::Error { QStringLiteral("state"), QStringLiteral("an inference task has no training state") };
    const auto kept = task.keptStateCheckpoint();
    const bool fromKept = !keptState.isEmpty() && kept > 0 && std::min(kept * task.checkpointInterval, task.localSteps) <= step;
    auto run = fromKept ? ShardRun::resume(task, keptState, environment) : ShardRun::start(task, startWeights, environment);
    if (!run)
        return run.error();
    auto& d = *(*run)->d;
    d.keepCheckpointStates = false;
    while (d.step < step) {
        if (auto status = (*run)->step(); !status)
            return status.error();
    }
    return run;
}

core::Result<QByteArray> recreateState(const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& keptState,
    std::int64_t wanted, const ComputeEnvironment& environment)
{
    if (wanted < 1 || wanted > task.checkpointCount() - 1)
        return core::Error { QStringLiteral("checkpoint"),
            QStringLiteral("a shard with %1 checkpoints has no checkpoint %2 after the start")
                .arg(task.checkpointCount())
                .arg(wanted) };
    if (wanted == task.keptStateCheckpoint() && !keptState.isEmpty())
        return keptState;
    auto run = ShardRun::trainedTo(
        task, startWeights, keptState, std::min(wanted * task.checkpointInterval, task.localSteps), environment);
    if (!run)
        return run.error();
    return (*run)->suspend();
}

namespace {

// The shard steps (1-based, inclusive) of checkpoint interval j: (j-1)c + 1 .. min(jc, H).
std::pair<std::int64_t, std::int64_t> stepsOfInterval(const core::ShardTask& task, std::int64_t j)
{
    return { (j - 1) * task.checkpointInterval + 1, std::min(j * task.checkpointInterval, task.localSteps) };
}

core::Status narrowable(const core::ShardTask& task, std::int64_t checkpoint)
{
    if (!task.portable)
        return core::Error { QStringLiteral("training.determinism"),
            QStringLiteral("only a portable job's disputes are narrowed to one instruction") };
    if (task.microBatches > 1)
        return core::Error { QStringLiteral("microBatches"), QStringLiteral("a micro-batched step is not traced yet") };
    if (checkpoint < 1 || checkpoint > task.checkpointCount() - 1)
        return core::Error { QStringLiteral("checkpoint"),
            QStringLiteral("a shard with %1 checkpoints has no interval ending at checkpoint %2")
                .arg(task.checkpointCount())
                .arg(checkpoint) };
    return {};
}

// The programs of a task's steps, for its dataset's samples, as a dispute reads them: only their
// structure (instructions, values, state), which is the same for every step but a shard's first
// (where the optimizer's buffers are born, unless the round carries them); the attributes (the
// learning rate) are those of the first step of each kind. refereeInstruction runs its
// instruction from its own step's program.
ProgramOf structuresOf(const core::ShardTask& task, const std::vector<std::int64_t>& shape, std::int64_t classes)
{
    auto built = std::make_shared<std::map<bool, std::shared_ptr<const portable::Program>>>();
    return [task, shape, classes, built](std::int64_t step) -> core::Result<std::shared_ptr<const portable::Program>> {
        auto& slot = (*built)[step > 1 || task.carriesOptimizer];
        if (!slot) {
            auto program = portableProgram(task, step - 1, shape, classes);
            if (!program)
                return program.error();
            slot = std::make_shared<const portable::Program>(std::move(*program));
        }
        return slot;
    };
}

} // namespace

core::Result<QString> portableListing(const core::ShardTask& task, std::int64_t step, const ComputeEnvironment& environment)
{
    auto data = loadDataset(task.dataset, environment, task.model.context);
    if (!data)
        return data.error();
    // A micro-batched step runs the program of one micro-batch, M times, before its update.
    auto micro = task;
    micro.batchSize = task.batchSize / std::max<std::int64_t>(task.microBatches, 1);
    auto program = portableProgram(micro, step - 1, data->train->sampleShape(), data->train->classes);
    if (!program)
        return program.error();
    return QString::fromStdString(program->listing());
}

core::Result<QByteArray> traceInterval(const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& keptState,
    std::int64_t checkpoint, const ComputeEnvironment& environment)
{
    if (auto status = narrowable(task, checkpoint); !status)
        return status.error();
    const auto [first, last] = stepsOfInterval(task, checkpoint);
    auto run = ShardRun::trainedTo(task, startWeights, keptState, first - 1, environment);
    if (!run)
        return run.error();
    auto& d = *(*run)->d;
    Trace trace;
    trace.checkpoint = checkpoint;
    TraceRecorder recorder(trace);
    d.observer = [&](const portable::Program& program, std::size_t instruction, portable::Executor& executor) {
        recorder.observe(d.step + 1, program, instruction, executor);
    };
    while (d.step < last) {
        if (auto status = (*run)->step(); !status)
            return status.error();
    }
    d.observer = nullptr;
    return trace.toBytes();
}

core::Result<QByteArray> operandsOf(const core::ShardTask& task, const QByteArray& startWeights, const QByteArray& keptState,
    std::int64_t step, std::int64_t instruction, const ComputeEnvironment& environment)
{
    if (auto status = narrowable(task, 1); !status)
        return status.error();
    if (step < 1 || step > task.localSteps || instruction < 0)
        return core::Error { QStringLiteral("step"),
            QStringLiteral("the shard has no step %1, instruction %2").arg(step).arg(instruction) };
    auto run = ShardRun::trainedTo(task, startWeights, keptState, step - 1, environment);
    if (!run)
        return run.error();
    auto& d = *(*run)->d;
    const auto [x, y] = batchOf(d, step - 1);
    auto operands = d.portable->operandsOf(step - 1, x, y, std::size_t(instruction));
    if (!operands)
        return operands.error();
    NamedTensors named;
    for (std::size_t i = 0; i < operands->size(); ++i)
        named.emplace_back(std::to_string(i), (*operands)[i]);
    sortByName(named);
    return pickleTensors(named);
}

core::Result<std::int64_t> traceBytesBound(
    const core::ShardTask& task, std::int64_t checkpoint, const ComputeEnvironment& environment)
{
    if (auto status = narrowable(task, checkpoint); !status)
        return status.error();
    auto data = loadDataset(task.dataset, environment, task.model.context);
    if (!data)
        return data.error();
    const auto programOf = structuresOf(task, data->train->sampleShape(), data->train->classes);
    const auto [first, last] = stepsOfInterval(task, checkpoint);
    std::int64_t values = 0;
    for (const auto step : { first, std::min(first + 1, last) }) {
        auto program = programOf(step);
        if (!program)
            return program.error();
        values = std::max<std::int64_t>(
            values, std::int64_t((*program)->outputCount()) + std::int64_t((*program)->stateBefore.size()));
    }
    constexpr std::int64_t Slack = 1 << 20; // the pickle's own structure, generously
    return 32 * values * (last - first + 2) + Slack;
}

namespace {

// One side's trace of checkpoint `checkpoint`, or why it cannot be one (fault).
std::optional<Trace> readTrace(const QByteArray& bytes, std::int64_t checkpoint, QString& fault)
{
    if (bytes.isEmpty()) {
        fault = QStringLiteral("no trace came");
        return std::nullopt;
    }
    auto trace = Trace::fromBytes(bytes);
    if (!trace)
        fault = trace.error().message;
    else if (trace->checkpoint != checkpoint)
        fault = QStringLiteral("the trace is of checkpoint %1, not %2").arg(trace->checkpoint).arg(checkpoint);
    else
        return std::move(*trace);
    return std::nullopt;
}

// The root of the state both sides agree on at checkpoint j-1: the agreed checkpoint hash. At j = 1
// checkpoint 0 is the canonical hash of the round's weights, which says nothing of single tensors:
// where both traces start alike, the honest side's start is the true one and so is the other's;
// where they do not, the referee hashes the state the round's weights give (nullopt here).
std::optional<core::Digest> startRootOf(
    std::int64_t checkpoint, const core::Digest& agreed, const std::optional<Trace> (&traces)[2])
{
    if (checkpoint != 1)
        return agreed;
    if (traces[0] && traces[1] && traces[0]->start == traces[1]->start)
        return rootOf(traces[0]->start);
    return std::nullopt; // the referee's own, from the round's weights
}

// The trace walked from the agreed start to the node's own claim at the checkpoint, or why not (fault).
std::optional<TraceWalk> walkToClaim(const Trace& trace, const core::Digest& startRoot, std::int64_t checkpoint,
    std::pair<std::int64_t, std::int64_t> steps, const ProgramOf& programOf, const core::Digest& claim, QString& fault)
{
    if (rootOf(trace.start) != startRoot) {
        fault = QStringLiteral("the trace does not start at the agreed checkpoint %1").arg(checkpoint - 1);
    } else if (auto walk = walkTrace(trace, steps.first, steps.second, programOf); !walk) {
        fault = walk.error().message;
    } else if (walk->roots.last() != claim) {
        fault = QStringLiteral("the trace does not end at the node's own checkpoint %1").arg(checkpoint);
    } else {
        return std::move(*walk);
    }
    return std::nullopt;
}

// The first instruction of `program` whose outputs the two sides' hashes `a` and `b` differ on.
std::int64_t firstDifferingInstruction(
    const portable::Program& program, const QList<core::Digest>& a, const QList<core::Digest>& b)
{
    qsizetype output = 0;
    while (output < a.size() && a[output] == b[output])
        ++output;
    for (std::size_t i = 0, position = 0; i < program.instructions.size(); ++i) {
        position += program.instructions[i].outputs.size();
        if (qsizetype(position) > output)
            return std::int64_t(i);
    }
    return 0;
}

// Who hashed step `step`'s batch right: the referee reads the batch itself.
core::Result<core::verification::Ruling> batchRuling(const core::ShardTask& task, const DatasetSplits& data,
    const portable::Program& program, const portable::Instruction& instruction, std::int64_t step, const QList<core::Digest>& a,
    const QList<core::Digest>& b)
{
    BatchPlan plan(task, data);
    if (auto status = plan.check(); !status)
        return status.error();
    const auto& train = *data.train;
    const auto indices = plan.indicesOfStep(step - 1);
    const auto index
        = torch::from_blob(const_cast<std::int64_t*>(indices.data()), { std::int64_t(indices.size()) }, torch::kInt64);
    const auto x = train.samples(index, true).contiguous();
    const auto y = train.y.index_select(0, index).to(torch::kLong).contiguous();
    const auto& xValue = program.values[std::size_t(instruction.outputs[0])];
    const auto& yValue = program.values[std::size_t(instruction.outputs[1])];
    if (x.numel() != xValue.count() || y.numel() != yValue.count())
        return core::Error { QStringLiteral("batch"), QStringLiteral("the batch does not have the program's shape") };
    const auto xHash = valueHash(xValue, x.data_ptr()), yHash = valueHash(yValue, y.data_ptr());
    const bool firstRight = a[0] == xHash && a[1] == yHash, secondRight = b[0] == xHash && b[1] == yHash;
    return firstRight ? core::verification::Ruling::FirstHonest
        : secondRight ? core::verification::Ruling::SecondHonest
                      : core::verification::Ruling::BothWrong;
}

} // namespace

core::Result<TraceComparison> compareTraces(const core::ShardTask& task, std::int64_t checkpoint, const core::Digest& agreed,
    const QByteArray& roundWeights, const core::Digest& firstClaim, const core::Digest& secondClaim, const QByteArray& firstTrace,
    const QByteArray& secondTrace, const ComputeEnvironment& environment)
{
    if (auto status = narrowable(task, checkpoint); !status)
        return status.error();
    auto data = loadTaskData(task, environment);
    if (!data)
        return data.error();
    const auto programOf = structuresOf(task, data->train->sampleShape(), data->train->classes);
    const auto steps = stepsOfInterval(task, checkpoint);
    TraceComparison comparison;
    const core::Digest claims[2] { firstClaim, secondClaim };
    QString* faults[2] { &comparison.firstFault, &comparison.secondFault };
    std::optional<Trace> traces[2] { readTrace(firstTrace, checkpoint, *faults[0]),
        readTrace(secondTrace, checkpoint, *faults[1]) };
    auto startRoot = startRootOf(checkpoint, agreed, traces);
    if (!startRoot) {
        auto run = ShardRun::start(task, roundWeights, environment);
        if (!run)
            return run.error();
        startRoot = stateRoot(trainingState(*(*run)->d));
    }
    std::optional<TraceWalk> walks[2];
    for (int side = 0; side < 2; ++side) {
        if (traces[side])
            walks[side] = walkToClaim(
                *traces[side], *startRoot, checkpoint, { steps.first, steps.second }, programOf, claims[side], *faults[side]);
    }
    if (!walks[0] || !walks[1])
        return comparison;
    qsizetype differing = 0;
    while (differing < walks[0]->roots.size() && walks[0]->roots[differing] == walks[1]->roots[differing])
        ++differing;
    if (differing == walks[0]->roots.size())
        return core::Error { QStringLiteral("trace"), QStringLiteral("the traces agree on every step: there is no dispute") };
    comparison.step = steps.first + differing;
    auto found = programOf(comparison.step);
    if (!found)
        return found.error();
    const auto& program = **found;
    const auto& a = traces[0]->steps.at(comparison.step);
    const auto& b = traces[1]->steps.at(comparison.step);
    comparison.instruction = firstDifferingInstruction(program, a, b);
    const auto& instruction = program.instructions[std::size_t(comparison.instruction)];
    comparison.instructionName = QStringLiteral("%1 (%2)").arg(
        QString::fromLatin1(portable::opName(instruction.op)), QString::fromStdString(instruction.label));
    if (instruction.op == portable::Op::Batch) {
        auto ruling = batchRuling(task, *data, program, instruction, comparison.step, a, b);
        if (!ruling)
            return ruling.error();
        comparison.ruling = *ruling;
    }
    return comparison;
}

namespace {

// The operands a referee was given for `wanted`, each checked against the hash both traces agree
// on (agreedHash) and bound in `executor`; `held` keeps their memory. An error of field "operands"
// says which does not fit.
core::Status bindOperands(const QByteArray& operands, const portable::Program& program, const portable::Instruction& wanted,
    std::int64_t instruction, const std::function<std::optional<core::Digest>(int)>& agreedHash, portable::Executor& executor,
    std::vector<at::Tensor>& held)
{
    auto unusable = [](const QString& why) { return core::Error { QStringLiteral("operands"), why }; };
    auto given = unpickleTensors(operands, QStringLiteral("the operands are not a dict of tensors"));
    if (!given)
        return unusable(given.error().message);
    if (given->size() != wanted.inputs.size())
        return unusable(QStringLiteral("instruction %1 reads %2 operands, not %3")
                            .arg(instruction)
                            .arg(wanted.inputs.size())
                            .arg(given->size()));
    for (std::size_t i = 0; i < wanted.inputs.size(); ++i) {
        const int v = wanted.inputs[i];
        const auto& value = program.values[std::size_t(v)];
        at::Tensor tensor;
        for (const auto& [name, t] : *given) {
            if (name == std::to_string(i))
                tensor = t;
        }
        const auto type = value.dtype == portable::DType::Int64 ? at::kLong : at::kFloat;
        if (!tensor.defined() || tensor.scalar_type() != type || tensor.numel() != value.count())
            return unusable(QStringLiteral("operand %1 ('%2') is missing or not what the instruction reads")
                                .arg(i)
                                .arg(QString::fromStdString(value.name)));
        tensor = tensor.contiguous();
        const auto hash = agreedHash(v);
        if (!hash || valueHash(value, tensor.data_ptr()) != *hash)
            return unusable(QStringLiteral("operand %1 ('%2') is not the value both traces agree on")
                                .arg(i)
                                .arg(QString::fromStdString(value.name)));
        executor.bind(v, tensor.data_ptr());
        held.push_back(tensor);
    }
    return {};
}

} // namespace

core::Result<core::verification::Ruling> refereeInstruction(const core::ShardTask& task, std::int64_t step,
    std::int64_t instruction, const QByteArray& operands, const QByteArray& firstTrace, const QByteArray& secondTrace,
    const ComputeEnvironment& environment)
{
    if (auto status = narrowable(task, 1); !status)
        return status.error();
    auto data = loadTaskData(task, environment);
    if (!data)
        return data.error();
    const auto programOf = structuresOf(task, data->train->sampleShape(), data->train->classes);
    auto exact = portableProgram(task, step - 1, data->train->sampleShape(), data->train->classes);
    if (!exact)
        return exact.error();
    const auto program = &*exact;
    if (instruction < 0 || instruction >= std::int64_t(program->instructions.size()))
        return core::Error { QStringLiteral("instruction"),
            QStringLiteral("step %1 has no instruction %2").arg(step).arg(instruction) };
    auto a = Trace::fromBytes(firstTrace), b = Trace::fromBytes(secondTrace);
    if (!a || !b)
        return core::Error { QStringLiteral("trace"), QStringLiteral("a trace the comparison read does not read any more") };
    // What both sides agree on at the instruction: the state at the step's start, and the outputs
    // of the instructions before it.
    auto walk = walkTrace(*a, (a->checkpoint - 1) * task.checkpointInterval + 1, step, programOf, step);
    if (!walk)
        return walk.error();
    const auto& hashesA = a->steps.at(step);
    const auto& hashesB = b->steps.count(step) ? b->steps.at(step) : QList<core::Digest>();
    const auto positions = program->outputPositions();
    const auto& wanted = program->instructions[std::size_t(instruction)];
    auto agreedHash = [&](int v) -> std::optional<core::Digest> {
        const int position = positions[std::size_t(v)];
        if (position >= 0)
            return hashesA[position];
        const auto found = walk->state.find(program->values[std::size_t(v)].name);
        if (found == walk->state.end())
            return std::nullopt;
        return found->second;
    };
    portable::Executor executor(int(task.threads));
    executor.prepare(*program);
    std::vector<at::Tensor> held;
    if (auto bound = bindOperands(operands, *program, wanted, instruction, agreedHash, executor, held); !bound)
        return bound.error();
    executor.run(*program, std::size_t(instruction));
    bool firstRight = true, secondRight = hashesB.size() == hashesA.size();
    for (int v : wanted.outputs) {
        const auto hash = valueHash(program->values[std::size_t(v)], executor.memory(v));
        const int position = positions[std::size_t(v)];
        firstRight = firstRight && hashesA[position] == hash;
        secondRight = secondRight && hashesB[position] == hash;
    }
    if (firstRight && secondRight)
        return core::Error { QStringLiteral("instruction"),
            QStringLiteral("both traces agree on instruction %1").arg(instruction) };
    return firstRight ? core::verification::Ruling::FirstHonest
        : secondRight ? core::verification::Ruling::SecondHonest
                      : core::verification::Ruling::BothWrong;
}

} // namespace tessera::compute
