#include "nodesetup.h"

#include <compute/common/types.h>
#include <compute/devices/devices.h>
#include <core/benchmark.h>
#include <core/capabilities.h>
#include <net/identity.h>

#include <QDir>
#include <QStandardPaths>
#include <QSysInfo>
#include <QThread>

namespace tessera::app {

namespace names = core::settings::names;

compute::ComputeEnvironment environmentFrom(const core::settings::Settings& settings)
{
    compute::ComputeEnvironment environment;
    environment.fashionMnistDirectory = settings.stringValue(names::DataFashionMnistDirectory);
    environment.fortunesDirectory = settings.stringValue(names::DataFortunesDirectory);
    return environment;
}

QString dataDirectory(const core::settings::Settings& settings)
{
    const QString configured = settings.stringValue(names::NodeDataDirectory);
    return configured.isEmpty()
        ? QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) + QStringLiteral("/Tessera")
        : configured;
}

int computeThreads(const core::settings::Settings& settings)
{
    const auto maxThreads = settings.intValue(names::ComputeMaxThreads);
    return int(maxThreads > 0 ? maxThreads : QThread::idealThreadCount());
}

compute::ComputeThread::Sandbox sandboxFrom(const core::settings::Settings& settings)
{
    compute::ComputeThread::Sandbox sandbox;
    sandbox.enabled = settings.boolValue(names::ComputeSandbox);
    sandbox.scratchRoot = QDir(dataDirectory(settings)).filePath(QStringLiteral("scratch"));
    return sandbox;
}

compute::sandbox::WorkerOptions toolOptionsFrom(const core::settings::Settings& settings)
{
    compute::sandbox::WorkerOptions options;
    options.scratchRoot = QDir(dataDirectory(settings)).filePath(QStringLiteral("scratch"));
    options.memoryMiB = settings.intValue(names::ComputeMaxMemoryMiB);
    options.nice = 0;
    options.confined = settings.boolValue(names::ComputeSandbox);
    options.timeLimitMs = 10 * 60 * 1000; // a sample or a rebuild takes seconds, the longest benchmark a minute
    return options;
}

core::Result<compute::sandbox::RuntimeInfo> runtimeOf(const core::settings::Settings& settings)
{
    return compute::sandbox::runtimeInWorker(1, toolOptionsFrom(settings));
}

namespace {

// The zoo mlp figure of this CPU's newest stored benchmark, if any (what a node registers with).
core::Result<std::optional<double>> storedMlpBenchmark(core::BenchmarkStore& store)
{
    auto last = store.latest(QStringLiteral("cpu:0 ") + compute::detectCpu().name);
    if (!last)
        return last.error();
    const auto mlp = last->has_value() ? (*last)->measurement(u"mlp") : std::nullopt;
    return mlp ? std::optional<double>(mlp->value) : std::nullopt;
}

} // namespace

core::Result<std::optional<double>> benchmarkOnFirstStart(
    const QString& directory, int threads, const compute::sandbox::WorkerOptions& worker)
{
    if (!QDir().mkpath(directory))
        return core::Error { names::NodeDataDirectory, QStringLiteral("cannot create %1").arg(directory) };
    auto store = core::BenchmarkStore::open(QDir(directory).filePath(QStringLiteral("node.sqlite")));
    if (!store)
        return store.error();
    auto stored = storedMlpBenchmark(**store);
    if (!stored)
        return stored.error();
    if (*stored)
        return std::optional<double> {};
    const auto record = compute::sandbox::benchmarkInWorker(compute::BenchmarkOptions::firstStart(threads), worker);
    if (!record)
        return record.error();
    if (auto saved = (*store)->save(*record); !saved)
        return saved.error();
    const auto mlp = record->measurement(u"mlp");
    return mlp ? std::optional<double>(mlp->value) : std::nullopt;
}

core::Result<NodeIdentity> loadNodeIdentity(const core::settings::Settings& settings, const QString& softwareVersion,
    const std::optional<compute::sandbox::RuntimeInfo>& runtime)
{
    const QString directory = dataDirectory(settings);
    if (!QDir().mkpath(directory))
        return core::Error { names::NodeDataDirectory, QStringLiteral("cannot create %1").arg(directory) };
    auto me = net::Identity::loadOrCreate(net::Identity::defaultKeyFile(settings));
    if (!me)
        return me.error();
    const auto* keys = &me->keys;
    const auto* signing = &me->signing;

    NodeIdentity identity { *keys, *signing, {}, {} };
    auto& node = identity.info;
    node.nodeId = keys->publicKey;
    node.signingKey = QString::fromLatin1(signing->publicKey.toBase64());
    node.name
        = settings.stringValue(names::NodeName).isEmpty() ? QSysInfo::machineHostName() : settings.stringValue(names::NodeName);
    node.softwareVersion = softwareVersion;
    const auto report
        = compute::detectDevices(compute::defaultProbeProgram(), runtime ? runtime->torch : compute::TorchCapabilities {});
    node.devices = report.devices;
    identity.warnings = report.warnings;
    node.maxThreads = computeThreads(settings);
    node.maxMemoryMiB = settings.intValue(names::ComputeMaxMemoryMiB);
    node.capabilities = core::ownCapabilities();
    if (auto store = core::BenchmarkStore::open(QDir(directory).filePath(QStringLiteral("node.sqlite")))) {
        if (auto stored = storedMlpBenchmark(**store); stored && *stored)
            node.benchmarkSamplesPerSecond = **stored;
    }
    if (runtime)
        withRuntime(identity, *runtime);
    return identity;
}

void withRuntime(NodeIdentity& identity, const compute::sandbox::RuntimeInfo& runtime)
{
    identity.info.runtimeProfile = runtime.runtimeProfile;
    compute::decideUsability(identity.info.devices, runtime.torch);
}

std::optional<net::NodeSwarm::Options> swarmOptionsFrom(const core::settings::Settings& settings, int index)
{
    namespace names = core::settings::names;
    if (!settings.boolValue(names::SwarmEnabled))
        return std::nullopt;
    net::NodeSwarm::Options options;
    options.address = settings.stringValue(names::SwarmAddress);
    const auto port = settings.intValue(names::SwarmPort);
    options.port = port == 0 ? 0 : int(std::min<std::int64_t>(port + index, 65535));
    options.host = settings.stringValue(names::SwarmHost);
    options.serve = settings.boolValue(names::SwarmServe);
    options.uploadBytesPerSecond = settings.intValue(names::SwarmMaxUploadKiBps) * 1024;
    options.keyFile = QDir(dataDirectory(settings)).filePath(QStringLiteral("swarm.key"));
    return options;
}

} // namespace tessera::app
