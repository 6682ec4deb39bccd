#pragma once

// What the compute engine's tests share (tst_training, tst_portabletraining, tst_languagemodels,
// tst_pytorchfiles, tst_computesandbox): the small jobs, a prepared round, Python with PyTorch as
// an independent peer, and the PyTorch fixtures its script makes.

#include <compute/engine/brokermath.h>
#include <compute/engine/detail/batches.h>
#include <compute/engine/detail/datasets.h>
#include <compute/engine/detail/models.h>
#include <compute/engine/detail/tensors.h>
#include <compute/engine/localjob.h>
#include <compute/engine/pipelinerun.h>
#include <compute/engine/runtimeprofile.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <compute/pickle/tensorfile.h>
#include <compute/pickle/tensorwriter.h>
#include <compute/portable/matmul.h>
#include <compute/supervisor/computethread.h>
#include <compute/supervisor/sandbox/worker.h>
#include <core/datasetchunks.h>
#include <core/decomposition.h>
#include <core/modelarchive.h>
#include <core/nodeinfo.h>
#include <core/pricing.h>
#include <core/readfile.h>
#include <core/smalljobs.h>

#include <torch/serialize.h>
#include <torch/torch.h>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSet>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <map>

namespace tessera::computetests {

using compute::ComputeEnvironment;
using compute::detail::NamedTensors;

inline const QString Python = QStringLiteral("/usr/bin/python3");

inline core::JobSpec smallJob()
{
    auto spec = core::smallMlpJob(QStringLiteral("small"));
    spec.training.shardsPerRound = 3;
    spec.training.seed = 11;
    // The cases read a shard's final weights; the int8 update it reveals by default has cases of its own.
    spec.aggregation.compression = core::Compression::None;
    return spec;
}

// A small gpt on the fortunes text (docs/JOBS.md, "Language models").
inline core::JobSpec smallGpt()
{
    auto spec = smallJob();
    spec.name = QStringLiteral("small gpt");
    spec.model = core::ModelSpec {};
    spec.model.zoo = QStringLiteral("gpt");
    spec.model.layers = 2;
    spec.model.heads = 2;
    spec.model.width = 32;
    spec.model.context = 32;
    spec.dataset.builtin = QStringLiteral("fortunes");
    spec.optimizer = core::OptimizerSpec {};
    spec.optimizer.kind = core::OptimizerSpec::Kind::AdamW;
    spec.optimizer.lr = 0.003;
    spec.optimizer.weightDecay = 0.1;
    spec.optimizer.clipNorm = 1.0;
    spec.optimizer.schedule = { core::ScheduleSpec::Kind::Cosine, 5, 40, 0.0003 };
    spec.training.localSteps = 40;
    spec.training.batchSize = 16;
    spec.training.checkpointInterval = 10;
    return spec;
}

struct Prepared {
    compute::Weights start;
    QList<core::ShardTask> tasks;
};

inline Prepared prepare(const core::JobSpec& spec, const ComputeEnvironment& environment = {})
{
    auto start = compute::initialWeights(spec, environment);
    if (!start)
        qFatal("initialWeights: %s", qPrintable(start.error().toString()));
    return { *start, core::decomposeRound(QStringLiteral("job"), spec, 0, start->canonicalHash) };
}

inline bool runPython(const QStringList& arguments, QString* output = nullptr)
{
    QProcess process;
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(Python, arguments);
    if (!process.waitForFinished(300'000)) {
        qWarning("python did not finish");
        return false;
    }
    const QString text = QString::fromUtf8(process.readAll());
    if (output)
        *output = text;
    if (process.exitStatus() != QProcess::NormalExit || process.exitCode() != 0) {
        qWarning("python failed: %s", qPrintable(text));
        return false;
    }
    return true;
}

inline QString scriptPath(const char* name)
{
    return QStringLiteral(TESSERA_SOURCE_DIR "/tests/compute/python/") + QLatin1String(name);
}

inline NamedTensors unpickle(const QByteArray& bytes)
{
    auto tensors = compute::detail::unpickleTensors(bytes, QStringLiteral("test"));
    if (!tensors)
        qFatal("%s", qPrintable(tensors.error().toString()));
    return *tensors;
}

// Concatenation that sidesteps GCC 12's false -Wrestrict on `"literal" + std::string`.
inline std::string key(std::string prefix, const std::string& name)
{
    prefix.append(name);
    return prefix;
}

// Trains task 0 of a language-model job twice. Empty when it learns the text (from ln 256 nats per
// byte, within `spread`, to more than a nat less over its last 5 steps) and ends on the same bits
// both times; else what went wrong.
inline QString learnsTheText(const Prepared& prepared, double spread, compute::ShardOutput& output)
{
    output = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
    if (output.result.outcome != core::ShardResult::Outcome::Completed)
        return output.result.failure;
    const auto& losses = output.result.losses;
    if (qAbs(losses.first() - std::log(256.0)) >= spread)
        return QStringLiteral("first loss %1").arg(losses.first());
    const double late = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
    if (late >= losses.first() - 1.0)
        return QStringLiteral("loss %1 -> %2").arg(losses.first()).arg(late);
    if (compute::runShard(prepared.tasks[0], prepared.start.bytes, {}).result.finalHash != output.result.finalHash)
        return QStringLiteral("a second run ended on other bits");
    return {};
}

inline QByteArray readAll(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", qPrintable(path));
    return file.readAll();
}

// How the cases run a compute worker: the build's, with its scratch folders in `scratch`.
inline compute::sandbox::WorkerOptions workerOptions(const QTemporaryDir& scratch)
{
    compute::sandbox::WorkerOptions options;
    options.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
    options.scratchRoot = scratch.path();
    options.memoryMiB = 2048;
    options.nice = 0; // not the priority's test: a busy machine must not starve it
    return options;
}

// Makes the PyTorch fixtures (TorchScript models, tensor and weights files) in `directory`.
inline bool makeFixtures(const QString& directory)
{
    return runPython({ scriptPath("make_fixtures.py"), directory });
}

} // namespace tessera::computetests
