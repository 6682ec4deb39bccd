#include "nodecommands.h"

#include <cmath>

#include "../common/computeexecutor.h"
#include "../common/nodecontrol.h"
#include "../common/nodesetup.h"

#include <app/common/cli.h>
#include <app/common/inferencejob.h>
#include <compute/common/environment.h>
#include <compute/devices/devices.h>
#include <compute/devices/sensors.h>
#include <compute/engine/benchmark.h>
#include <compute/engine/localjob.h>
#include <compute/engine/runtimeprofile.h>
#include <compute/engine/shardrun.h>
#include <compute/engine/weights.h>
#include <control/controlclient.h>
#include <control/controlserver.h>
#include <core/benchmark.h>
#include <core/broker/records.h>
#include <core/decomposition.h>
#include <core/inference/outputs.h>
#include <core/jobspec.h>
#include <core/ledger/logrecord.h>
#include <core/ledger/logwatch.h>
#include <core/settings/settings.h>
#include <core/signing.h>
#include <core/thermal.h>
#include <net/brokerclient.h>
#include <net/curvekeys.h>
#include <net/identity.h>
#include <net/messages.h>
#include <net/nodeclient.h>
#include <net/resultrelay.h>

#include <QCommandLineParser>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QHostAddress>
#include <QHostInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>
#include <QStandardPaths>
#include <QSysInfo>
#include <QTextStream>
#include <QThread>

#include <atomic>
#include <csignal>
#include <thread>

#include <cstdio>
#include <unistd.h>

namespace tessera::app {

namespace {

using cli::err;
using cli::fail;
using cli::out;
using cli::printJson;

const char* Usage = R"(Usage: tessera-node [--config FILE] COMMAND [ARGS]

Commands:
  run [--broker ADDRESS]...            contribute: train shards for brokers (tcp://host:port, with
                                       #KEY for CURVE); without --broker, those of Node/Brokers.
                                       SIGTERM finishes and reports the shard in training first
  results [--json]                     the shards this node trained and what became of each
                                       (computed, committed, sampled, accepted, verified,
                                       disputed, slashed, rejected, paid, failed, stale, refused)
  balance [--broker ADDRESS] [--json]  what this node holds on a broker: credits earned, and stake
  record -o FILE [--broker ADDRESS] [--json]
                                       this node's record on the broker's network: the ledger log's
                                       entries that name it, with proofs under a signed head, for
                                       another network to check (tessera-job verify-record)
  present-record FILE [--broker ADDRESS] [--json]
                                       give a broker of another network that trusts this one
                                       (Broker/TrustedNetworks) this node's record: it starts the
                                       node's sampling streak there, at most Broker/RecordCreditMax
  stake bond|unbond AMOUNT [--broker ADDRESS]
                                       bond credits from this node's balance as stake (a broker
                                       gives work only to nodes with enough bonded), or unbond
                                       them: they stay slashable for the broker's unbonding delay
  ctl state|pause|resume|finish [--json]
  ctl snooze MINUTES | device ID pause|resume | set KEY=VALUE... | url
                                       drive a running tessera-node (tessera-node run) on this
                                       machine through its control API (docs/CONTROL.md; the
                                       token is control.token in the data directory): its state;
                                       pause it (the shard in training is kept), resume it, finish
                                       the shard then pause, snooze it, pause a device, set its
                                       limits; url: its web dashboard's address, with the token
  devices [--json]                     list this machine's devices and whether Tessera can train
                                       on each (and if not, why)
  benchmark [--json] [--threads N] [--max-repetitions N] [--last]
                                       measure training throughput (zoo mlp and cnn, samples/s)
                                       and matmul GFLOPS, repeated until they vary by at most 5%;
                                       stored in the node database; --last shows the stored one
  train-local JOB.json [--out DIR]     train a whole job on this machine (all rounds and shards,
                                       aggregated as a broker would); writes DIR/model.pt
                                       (torch.load), DIR/model.torchscript.pt (torch.jit.load,
                                       zoo models) and DIR/report.json
  infer-local JOB.json -o OUT.jsonl    run a whole inference job on this machine (every shard, as a
                                       broker cuts them) and write its result as tessera-job fetch
                                       does
  sample WEIGHTS --job JOB.json [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]
                                       text from a language model's weights (a gpt job's
                                       model.pt): N tokens (200) after TEXT, drawn at temperature
                                       T (0.8; 0: the likeliest) from seed S (0), the same text for
                                       the same seed
  program JOB.json [--step N]          the instructions of a portable job's training step N (1)
                                       in their order, with their values, as a dispute numbers
                                       them (docs/DETERMINISM.md, "Programs")
  train-shard TASK.json --weights FILE --out DIR
                                       train one shard task (as a verifier re-executes it);
                                       writes DIR/result.json and DIR/weights.pt

Options:
  --config FILE    settings file (default ~/.config/Tessera/tessera.ini)
  --version        print the version
  --help           print this help
)";

// The lines of Usage that describe one command (its synopsis and the indented lines after it).
QString commandHelp(const QString& command)
{
    const auto lines = QString::fromUtf8(Usage).split(u'\n');
    QString help;
    bool inside = false;
    for (const auto& line : lines) {
        if (line.startsWith(QStringLiteral("  ")) && !line.startsWith(QStringLiteral("   "))) {
            inside = line.mid(2).section(u' ', 0, 0) == command;
            if (inside)
                help += line.mid(2) + u'\n';
            continue;
        }
        if (inside && line.startsWith(QStringLiteral("   ")))
            help += line + u'\n';
        else
            inside = false;
    }
    return help;
}

bool writeFile(const QString& path, const QByteArray& bytes)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly))
        return false;
    file.write(bytes);
    return file.commit();
}

std::optional<QByteArray> readFile(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return std::nullopt;
    return file.readAll();
}

// Files named in a job are relative to the job file.
void resolvePaths(core::JobSpec& spec, const QDir& base)
{
    auto resolve = [&](QString& path) {
        if (!path.isEmpty() && QFileInfo(path).isRelative())
            path = base.absoluteFilePath(path);
    };
    resolve(spec.model.scriptFile);
    resolve(spec.model.initialWeightsFile);
    resolve(spec.dataset.trainFile);
    resolve(spec.dataset.testFile);
    resolve(spec.dataset.manifestFile);
    resolve(spec.inference.promptsFile);
}

QString describeMemory(std::int64_t bytes)
{
    return bytes > 0 ? QStringLiteral("%1 GiB").arg(double(bytes) / double(1LL << 30), 0, 'f', 1) : QStringLiteral("?");
}

int devices(const QStringList& args)
{
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("json"), QStringLiteral("print JSON") });
    if (!parser.parse(args))
        return fail(parser.errorText());
    const auto report = compute::detectDevices(compute::defaultProbeProgram(), compute::torchCapabilities());
    if (parser.isSet(QStringLiteral("json"))) {
        QJsonArray list;
        for (const auto& device : report.devices)
            list.append(device.toJson());
        out() << QJsonDocument(QJsonObject { { QStringLiteral("devices"), list },
                                   { QStringLiteral("warnings"), QJsonArray::fromStringList(report.warnings) } })
                     .toJson();
        return 0;
    }
    for (const auto& device : report.devices) {
        out() << core::nameOf(device.kind) << ":" << device.index << "  " << device.name << "\n";
        out() << "    memory " << describeMemory(device.memoryBytes) << ", " << device.cores
              << (device.kind == core::DeviceInfo::Kind::Cpu ? " logical cores" : " compute units");
        if (!device.features.isEmpty())
            out() << ", " << device.features.join(u' ');
        if (!device.computeCapability.isEmpty())
            out() << ", compute capability " << device.computeCapability;
        if (!device.driverVersion.isEmpty())
            out() << ", driver " << device.driverVersion;
        out() << "\n    usable: " << (device.usable ? QStringLiteral("yes") : QStringLiteral("no, ") + device.unusableReason)
              << "\n";
    }
    for (const auto& warning : report.warnings)
        out() << "warning: " << warning << "\n";
    out() << Qt::flush;
    return 0;
}

void printBenchmark(const core::BenchmarkRecord& record)
{
    out() << record.device << "  (" << record.runtimeProfile << ", " << record.measuredAt.toString(Qt::ISODate) << ")\n";
    for (const auto& m : record.measurements)
        out() << QStringLiteral("  %1 %2 %3  (cv %4%, %5 repetitions)\n")
                     .arg(m.name, -7)
                     .arg(m.value, 10, 'f', 1)
                     .arg(m.unit, -10)
                     .arg(m.cv * 100.0, 0, 'f', 1)
                     .arg(m.repetitions);
    out() << Qt::flush;
}

int benchmark(const QStringList& args, const core::settings::Settings& settings)
{
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("json"), QStringLiteral("print JSON") });
    parser.addOption({ QStringLiteral("last"), QStringLiteral("show the stored result") });
    parser.addOption({ QStringLiteral("threads"), QStringLiteral("threads"), QStringLiteral("N") });
    parser.addOption({ QStringLiteral("max-repetitions"), QStringLiteral("repetitions"), QStringLiteral("N") });
    if (!parser.parse(args))
        return fail(parser.errorText());
    const QString directory = dataDirectory(settings);
    if (!QDir().mkpath(directory))
        return fail(QStringLiteral("cannot create %1").arg(directory));
    auto store = core::BenchmarkStore::open(QDir(directory).filePath(QStringLiteral("node.sqlite")));
    if (!store)
        return fail(store.error().toString());

    const bool json = parser.isSet(QStringLiteral("json"));
    core::BenchmarkRecord record;
    if (parser.isSet(QStringLiteral("last"))) {
        auto last = (*store)->latest(QStringLiteral("cpu:0 ") + compute::detectCpu().name);
        if (!last)
            return fail(last.error().toString());
        if (!last->has_value())
            return fail(QStringLiteral("no benchmark stored yet; run tessera-node benchmark"));
        record = **last;
    } else {
        compute::BenchmarkOptions options;
        options.threads = parser.isSet(QStringLiteral("threads")) ? parser.value(QStringLiteral("threads")).toInt()
                                                                  : computeThreads(settings);
        if (options.threads < 1 || options.threads > 1024)
            return fail(QStringLiteral("--threads must be from 1 to 1024"));
        if (parser.isSet(QStringLiteral("max-repetitions"))) {
            options.maxRepetitions = std::max(1, parser.value(QStringLiteral("max-repetitions")).toInt());
            options.minRepetitions = std::min(options.minRepetitions, options.maxRepetitions);
        }
        const bool tty = isatty(fileno(stderr));
        options.progress = [&](const QString& name, int repetition) {
            if (tty)
                err() << "\r  " << name << " repetition " << repetition << "    " << Qt::flush;
        };
        record = compute::runBenchmark(options);
        if (tty)
            err() << "\r" << QString(40, u' ') << "\r" << Qt::flush;
        if (auto status = (*store)->save(record); !status)
            return fail(status.error().toString());
    }
    if (json)
        printJson(QJsonDocument(record.toJson()));
    else
        printBenchmark(record);
    return 0;
}

int results(const QStringList& args, const core::settings::Settings& settings)
{
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("json"), QStringLiteral("print JSON") });
    if (!parser.parse(args))
        return fail(parser.errorText());
    auto log = core::ResultLog::open(QDir(dataDirectory(settings)).filePath(QStringLiteral("node.sqlite")));
    if (!log)
        return fail(log.error().toString());
    auto list = (*log)->list();
    if (!list)
        return fail(list.error().toString());
    if (parser.isSet(QStringLiteral("json"))) {
        QJsonArray array;
        for (const auto& entry : *list)
            array.append(entry.toJson());
        printJson(QJsonDocument(array));
        return 0;
    }
    for (const auto& entry : *list)
        out() << QStringLiteral("%1  job %2 round %3 shard %4  %5%6%7")
                     .arg(entry.assignment, entry.jobId, QString::number(entry.round), QString::number(entry.shard),
                         core::nameOf(entry.state),
                         entry.state == core::NodeResultState::Paid ? QStringLiteral(" %1 credits").arg(entry.paid) : QString(),
                         entry.detail.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(entry.detail))
              << "\n";
    if (list->isEmpty())
        out() << "no results yet\n";
    out() << Qt::flush;
    return 0;
}

std::atomic<bool> stopRequested { false };
std::atomic<bool> abandonRequested { false };

void onSignal(int)
{
    // The first signal finishes the shard in training; a second one leaves at once.
    if (stopRequested.exchange(true))
        abandonRequested.store(true);
}

// The brokers a node serves: --broker, else Node/Brokers.
core::Result<QList<net::BrokerAddress>> brokersFrom(const QStringList& given, const core::settings::Settings& settings)
{
    namespace names = core::settings::names;
    QStringList addresses = given;
    if (addresses.isEmpty())
        addresses = settings.listValue(names::NodeBrokers);
    if (addresses.isEmpty())
        return core::Error { {}, QStringLiteral("no broker: give --broker tcp://host:port or set Node/Brokers") };
    QList<net::BrokerAddress> brokers;
    for (const auto& address : addresses) {
        auto parsed = net::BrokerAddress::parse(address);
        if (!parsed)
            return core::Error { {}, parsed.error().toString() };
        brokers.append(*parsed);
    }
    return brokers;
}

// Compute/BenchmarkOnFirstStart: before the node registers, so that brokers schedule it by what it
// measured, not by a default.
void benchmarkIfFirstStart(const core::settings::Settings& settings, const QString& directory)
{
    namespace names = core::settings::names;
    auto measured = settings.boolValue(names::ComputeBenchmarkOnFirstStart)
        ? benchmarkOnFirstStart(directory, computeThreads(settings), toolOptionsFrom(settings))
        : core::Result<std::optional<double>>(std::optional<double> {});
    if (!measured)
        err() << "tessera-node: could not benchmark this machine: " << measured.error().toString() << Qt::endl;
    else if (*measured)
        out() << "tessera-node: first start: measured this CPU at " << qRound64(**measured)
              << " samples/s of the zoo mlp (tessera-node benchmark measures more)" << Qt::endl;
}

// Compute/MaxTemperatureC: the CPU held under a temperature by the compute thread's duty cycle
// (docs/APP.md, "Heat and energy"; a headless node reads the CPU's sensors only), on a thread of
// its own until the node stops; none without a limit.
// Both limits may change while it runs (the control API's limits): it reads them each second.
struct HeatLimits {
    std::atomic<int> maxTemperatureC { 0 };
    std::atomic<int> cpuPercent { 100 };
    std::atomic<bool> changed { false }; // wakes governHeat at once
};

std::thread governHeat(ComputeExecutor& executor, HeatLimits& limits)
{
    return std::thread([&executor, &limits] {
        compute::Sensors sensors;
        std::optional<core::ThermalGovernor> governor;
        QElapsedTimer clock;
        clock.start();
        int applied = limits.cpuPercent.load();
        int asked = applied; // Compute/CpuPercent as last read: a new one is applied even if equal to `applied`
        std::int64_t last = 0;
        while (!stopRequested.load()) {
            const std::int64_t now = clock.elapsed();
            const int limit = limits.maxTemperatureC.load();
            const int cpuPercent = limits.cpuPercent.load();
            if (limit <= 0)
                governor.reset();
            else if (!governor || governor->target() != double(limit))
                governor.emplace(core::ThermalGovernor { static_cast<double>(limit) });
            int percent = cpuPercent;
            if (governor) // the sensors are read only under a limit
                percent = std::min(cpuPercent, governor->update(sensors.read(now).cpuTemperatureC, double(now - last) / 1000.0));
            last = now;
            if (percent != applied || cpuPercent != asked) {
                executor.thread().setCpuPercent(percent);
                applied = percent;
                asked = cpuPercent;
            }
            for (int slept = 0; slept < 10 && !stopRequested.load() && !limits.changed.exchange(false); ++slept)
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
}

// What a stopping node says it did: shards reported, where its blobs came from, what it served.
QString stopSummary(const std::vector<std::unique_ptr<net::NodeClient>>& clients)
{
    int results = 0;
    net::NodeClient::Counters sum;
    for (const auto& client : clients) {
        const auto counters = client->counters();
        results += counters.results;
        sum.blobsFetched += counters.blobsFetched;
        sum.blobsFromSwarm += counters.blobsFromSwarm;
        sum.swarmFallbacks += counters.swarmFallbacks;
        sum.swarmBytesUploaded += counters.swarmBytesUploaded;
    }
    return QStringLiteral("tessera-node: stopped after reporting %1 shard(s); blobs: %2 from the swarm, %3 from the broker (%4 "
                          "after the swarm failed); served %5 bytes to peers")
        .arg(results)
        .arg(sum.blobsFromSwarm)
        .arg(sum.blobsFetched - sum.blobsFromSwarm)
        .arg(sum.swarmFallbacks)
        .arg(sum.swarmBytesUploaded);
}

// What every session of tessera-node run shares; each gets its broker and swarm.
net::NodeClientOptions sharedSessionOptions(
    const NodeIdentity& identity, const QString& directory, const core::settings::Settings& settings)
{
    net::NodeClientOptions shared;
    shared.keys = identity.keys;
    shared.signing = identity.signing;
    shared.resultLogPath = QDir(directory).filePath(QStringLiteral("node.sqlite"));
    shared.node = identity.info;
    shared.heartbeatMs = int(settings.intValue(core::settings::names::NetworkHeartbeatIntervalMs));
    // Results a silent broker's session cannot report go to another broker of the same network.
    shared.relay = std::make_shared<net::ResultRelay>(QDir(directory).filePath(QStringLiteral("relay")));
    // Every broker's ledger log must extend the heads this node saw (docs/LEDGER.md, "Watching the log").
    shared.logWatch = std::make_shared<core::ledger::LogWatch>(directory);
    return shared;
}

// docs/CONTROL.md: the control API and its dashboard; the node runs on without it when it cannot be
// served (null). Its limits are applied as they come, on the control thread.
std::unique_ptr<NodeControl> serveControl(const core::settings::Settings& settings, const QString& directory,
    ComputeExecutor& executor, const core::NodeInfo& node, HeatLimits& heatLimits)
{
    namespace names = core::settings::names;
    auto control = NodeControl::start(settings, directory, executor.thread(), { node.nodeId, node.name, node.devices },
        [&executor, &heatLimits](const QString& key, const QVariant& value) { // on the control thread
            const int number = value.toInt();
            if (key == names::ComputeMaxThreads) {
                executor.thread().setMaxThreads(number > 0 ? number : QThread::idealThreadCount());
            } else if (key == names::ComputeCpuPercent) {
                heatLimits.cpuPercent = number; // governHeat applies it at once, under the temperature limit
            } else if (key == names::ComputeMaxTemperatureC) {
                heatLimits.maxTemperatureC = number;
            }
            heatLimits.changed = true;
        });
    if (!control)
        err() << "tessera-node: the control API is off: " << control.error().toString() << Qt::endl;
    else if (*control)
        out() << "control API at " << (*control)->address() << "api/v1/ and its dashboard at / (its token is "
              << QDir(directory).filePath(QStringLiteral("control.token"))
              << "; tessera-node ctl url prints the dashboard's address with it)" << Qt::endl;
    return control ? std::move(*control) : nullptr;
}

// tessera-node run's status when a network's ledger log broke (docs/NODE.md).
constexpr int LogBrokenExit = 3;

int runNode(const QStringList& args, const core::settings::Settings& settings, compute::ComputeEnvironment environment)
{
    namespace names = core::settings::names;
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("broker"), QStringLiteral("broker address"), QStringLiteral("ADDRESS") });
    if (!parser.parse(args))
        return fail(parser.errorText());
    auto found = brokersFrom(parser.values(QStringLiteral("broker")), settings);
    if (!found)
        return fail(found.error().message);
    cli::keepMessagesInLogTail();
    const auto& brokers = *found;
    QStringList addresses;
    for (const auto& broker : brokers)
        addresses << broker.endpoint;
    const QString directory = dataDirectory(settings);
    benchmarkIfFirstStart(settings, directory);
    auto runtime = runtimeOf(settings);
    if (!runtime)
        return fail(
            QStringLiteral("cannot learn this node's runtime from its compute worker: %1").arg(runtime.error().toString()));
    auto identity = loadNodeIdentity(settings, QStringLiteral(TESSERA_VERSION), *runtime);
    if (!identity)
        return fail(identity.error().toString());
    for (const auto& warning : identity->warnings)
        err() << "tessera-node: " << warning << Qt::endl;
    const auto& node = identity->info;

    ComputeExecutor executor(environment, compute::inThreadCompute());
    executor.setToolOptions(toolOptionsFrom(settings));
    executor.thread().setMaxThreads(node.maxThreads);
    executor.thread().setMaxMemoryMiB(node.maxMemoryMiB);
    executor.thread().setSandbox(sandboxFrom(settings));
    executor.thread().setCpuPercent(int(settings.intValue(names::ComputeCpuPercent)));
    HeatLimits heatLimits;
    heatLimits.maxTemperatureC = int(settings.intValue(names::ComputeMaxTemperatureC));
    heatLimits.cpuPercent = int(settings.intValue(names::ComputeCpuPercent));

    std::signal(SIGINT, onSignal);
    std::signal(SIGTERM, onSignal);
    out() << "tessera-node " << TESSERA_VERSION << " contributing to " << addresses.join(QStringLiteral(", ")) << " as "
          << node.nodeId << Qt::endl;
    const auto control = serveControl(settings, directory, executor, node, heatLimits);

    // One session, cache and thread per broker: a node can serve several brokers at once.
    std::vector<std::unique_ptr<core::BlobStore>> caches;
    std::vector<std::unique_ptr<net::NodeClient>> clients;
    std::vector<std::thread> threads;
    const auto cacheLimit = settings.intValue(names::CacheMaxSizeMiB) * 1024 * 1024 / std::max<qsizetype>(1, brokers.size());
    const net::NodeClientOptions shared = sharedSessionOptions(*identity, directory, settings);
    for (qsizetype i = 0; i < brokers.size(); ++i) {
        const QString cacheDir = QDir(directory).filePath(
            QStringLiteral("cache/") + core::Digest::ofBytes(brokers[i].endpoint.toUtf8()).toHex().left(16));
        auto cache = core::BlobStore::open(cacheDir, cacheLimit);
        if (!cache)
            return fail(cache.error().toString());
        net::NodeClientOptions options = shared;
        options.broker = brokers[i];
        options.swarm = swarmOptionsFrom(settings, int(i));
        caches.push_back(std::move(*cache));
        clients.push_back(std::make_unique<net::NodeClient>(options, executor, *caches.back(), QString::number(i)));
    }
    for (auto& client : clients)
        threads.emplace_back([&client] { client->run(stopRequested, abandonRequested); });
    std::thread heat = governHeat(executor, heatLimits);
    for (auto& thread : threads)
        thread.join();
    stopRequested = true;
    if (heat.joinable())
        heat.join();
    out() << stopSummary(clients) << Qt::endl;
    // For scripts: a broker showed a ledger log that does not extend what its network signed.
    return shared.logWatch->anyBroken() ? LogBrokenExit : 0;
}

// tessera-node ctl's request: the action, its path and JSON body, from the command line
// (docs/CONTROL.md, "Actions"); an error names the usage.
struct CtlRequest {
    QByteArray method = "POST";
    QByteArray path;
    QJsonObject body;
};

core::Result<CtlRequest> ctlRequest(const QStringList& words)
{
    const core::Error usage { {},
        QStringLiteral("usage: tessera-node ctl state|pause|resume|finish|url [--json], ctl snooze MINUTES, ctl device "
                       "ID pause|resume, ctl set KEY=VALUE...") };
    if (words.isEmpty())
        return usage;
    const QString& action = words[0];
    CtlRequest request { "POST", "/api/v1/" + action.toUtf8(), {} };
    if ((action == u"state" || action == u"url" || action == u"pause" || action == u"resume" || action == u"finish")
        && words.size() == 1) {
        if (action == u"state" || action == u"url")
            request = { "GET", "/api/v1/state", {} };
        return request;
    }
    if (action == u"snooze" && words.size() == 2) {
        bool number = false;
        request.body.insert(QStringLiteral("minutes"), words[1].toInt(&number));
        return number ? core::Result<CtlRequest>(request) : usage;
    }
    if (action == u"device" && words.size() == 3 && (words[2] == u"pause" || words[2] == u"resume")) {
        request.body = { { QStringLiteral("device"), words[1] }, { QStringLiteral("paused"), words[2] == u"pause" } };
        return request;
    }
    if (action == u"set" && words.size() >= 2) {
        request.path = "/api/v1/limits";
        for (const auto& word : words.mid(1)) { // the API checks the keys and values, as the settings file does
            const qsizetype equals = word.indexOf(u'=');
            if (equals <= 0)
                return usage;
            request.body.insert(word.left(equals), word.mid(equals + 1));
        }
        return request;
    }
    return usage;
}

void printControlState(const QJsonObject& state)
{
    const auto shard = state.value(QStringLiteral("shard")).toObject();
    out() << state.value(QStringLiteral("state")).toString() << ": " << state.value(QStringLiteral("reason")).toString();
    if (!shard.isEmpty()) {
        out() << "; job " << shard.value(QStringLiteral("job")).toString() << ", round "
              << shard.value(QStringLiteral("round")).toInteger() + 1 << ", shard "
              << shard.value(QStringLiteral("shard")).toInteger() + 1;
        if (shard.contains(QStringLiteral("stages")))
            out() << ", stage " << shard.value(QStringLiteral("stage")).toInteger() + 1 << " of "
                  << shard.value(QStringLiteral("stages")).toInteger();
        out() << ": step " << shard.value(QStringLiteral("step")).toInteger() << " of "
              << shard.value(QStringLiteral("steps")).toInteger();
    }
    out() << Qt::endl;
}

// Where this machine's node serves its API, for ctl: its bind (127.0.0.1 for a bind to every
// address), and over TLS beyond loopback, pinned to the certificate in its data folder.
core::Result<control::ControlEndpoint> controlEndpoint(
    const core::settings::Settings& settings, const QDir& data, const QByteArray& token, quint16 port)
{
    namespace names = core::settings::names;
    const QHostAddress bind(settings.stringValue(names::ControlBind));
    const bool tls = !bind.isLoopback();
    QByteArray fingerprint;
    if (tls) {
        const auto certificate = readFile(data.filePath(QStringLiteral("control.crt")));
        fingerprint = certificate ? control::fingerprintOf(*certificate) : QByteArray();
        if (fingerprint.isEmpty())
            return core::Error { {},
                QStringLiteral("no control.crt in %1: the node serves its API over TLS beyond loopback, "
                               "and ctl pins its certificate")
                    .arg(data.path()) };
    }
    return control::ControlEndpoint { control::localHostFor(bind), port, token, fingerprint };
}

// The dashboard's address with the token (and, over TLS, the certificate's fingerprint, which the
// desktop app's Machines view pins) in its fragment: the address to give a browser or another app.
QString dashboardUrl(const core::settings::Settings& settings, const control::ControlEndpoint& endpoint)
{
    namespace names = core::settings::names;
    const QHostAddress bind(settings.stringValue(names::ControlBind));
    const QString host = control::isEveryAddress(bind)     ? QHostInfo::localHostName()
        : bind.protocol() == QAbstractSocket::IPv6Protocol ? u'[' + bind.toString() + u']'
                                                           : bind.toString();
    QString url = QStringLiteral("%1://%2:%3/#token=%4")
                      .arg(endpoint.fingerprint.isEmpty() ? QStringLiteral("http") : QStringLiteral("https"), host)
                      .arg(endpoint.port)
                      .arg(QString::fromLatin1(endpoint.token));
    if (!endpoint.fingerprint.isEmpty())
        url += QStringLiteral("&fp=") + QString::fromLatin1(endpoint.fingerprint);
    return url;
}

// tessera-node ctl: one request to this machine's node's control API, and what it answered.
int ctl(const QStringList& args, const core::settings::Settings& settings)
{
    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("action"), QStringLiteral("state, pause, resume, ..."));
    parser.addOption({ QStringLiteral("json"), QStringLiteral("the state as JSON") });
    if (!parser.parse(args))
        return fail(parser.errorText());
    auto request = ctlRequest(parser.positionalArguments());
    if (!request)
        return fail(request.error().message);
    const QDir data(dataDirectory(settings));
    const auto token = readFile(data.filePath(QStringLiteral("control.token")));
    // The port the node took, which it writes while it serves (never Control/Port blindly: another
    // program may hold that one, and would be sent the token).
    const auto port = readFile(data.filePath(QStringLiteral("control.port")));
    if (!token || !port)
        return fail(QStringLiteral("no tessera-node serves a control API with the data folder %1 (is tessera-node run going "
                                   "with this settings file? its log says why when it cannot serve one)")
                        .arg(data.path()));
    auto endpoint = controlEndpoint(settings, data, token->trimmed(), quint16(port->trimmed().toUInt()));
    if (!endpoint)
        return fail(endpoint.error().message);
    auto state = control::callControl(*endpoint, request->method, request->path,
        request->body.isEmpty() ? QByteArray() : QJsonDocument(request->body).toJson(QJsonDocument::Compact));
    if (!state)
        return fail(state.error().message);
    if (parser.positionalArguments()[0] == u"url") { // the token in the fragment: never sent to a server, nor kept in its logs
        out() << dashboardUrl(settings, *endpoint) << Qt::endl;
        return 0;
    }
    if (parser.isSet(QStringLiteral("json")))
        return printJson(QJsonDocument(*state));
    printControlState(*state);
    return 0;
}

int sample(const QStringList& args, const compute::ComputeEnvironment& environment)
{
    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("weights"), QStringLiteral("weights file"));
    parser.addOption({ QStringLiteral("job"), QStringLiteral("the job file"), QStringLiteral("FILE") });
    parser.addOption({ QStringLiteral("prompt"), QStringLiteral("text to continue"), QStringLiteral("TEXT") });
    parser.addOption({ QStringLiteral("tokens"), QStringLiteral("tokens to write"), QStringLiteral("N"), QStringLiteral("200") });
    parser.addOption(
        { QStringLiteral("temperature"), QStringLiteral("sampling temperature"), QStringLiteral("T"), QStringLiteral("0.8") });
    parser.addOption({ QStringLiteral("seed"), QStringLiteral("sampling seed"), QStringLiteral("S"), QStringLiteral("0") });
    if (!parser.parse(args) || parser.positionalArguments().size() != 1 || !parser.isSet(QStringLiteral("job")))
        return fail(QStringLiteral(
            "usage: tessera-node sample WEIGHTS --job JOB.json [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]"));
    const auto text = readFile(parser.value(QStringLiteral("job")));
    if (!text)
        return fail(QStringLiteral("cannot read %1").arg(parser.value(QStringLiteral("job"))));
    auto spec = core::JobSpec::fromJsonText(*text);
    if (!spec)
        return fail(QStringLiteral("%1: %2").arg(parser.value(QStringLiteral("job")), spec.error().toString()));
    const auto weights = readFile(parser.positionalArguments().first());
    if (!weights)
        return fail(QStringLiteral("cannot read %1").arg(parser.positionalArguments().first()));
    bool tokensOk = false, temperatureOk = false, seedOk = false;
    compute::SampleOptions options;
    if (parser.isSet(QStringLiteral("prompt")))
        options.prompt = parser.value(QStringLiteral("prompt")).toUtf8();
    options.tokens = parser.value(QStringLiteral("tokens")).toLongLong(&tokensOk);
    options.temperature = parser.value(QStringLiteral("temperature")).toDouble(&temperatureOk);
    options.seed = parser.value(QStringLiteral("seed")).toULongLong(&seedOk);
    if (!tokensOk || !temperatureOk || !seedOk)
        return fail(QStringLiteral("--tokens, --temperature and --seed take numbers"));
    const auto written = compute::sampleText(spec->model, *weights, options, environment);
    if (!written)
        return fail(written.error().toString());
    out() << QString::fromUtf8(options.prompt + *written) << Qt::endl;
    return 0;
}

// A job file, its files' paths taken from the file's own folder; the error says which file and why.
core::Result<core::JobSpec> readJobFile(const QString& jobPath)
{
    const auto text = readFile(jobPath);
    if (!text)
        return core::Error { {}, QStringLiteral("cannot read %1").arg(jobPath) };
    auto json = core::parseJsonObject(*text);
    if (!json)
        return core::Error { {}, QStringLiteral("%1: %2").arg(jobPath, json.error().toString()) };
    // An inference job's prompts file is counted; its model is a file here (fromJob needs a broker).
    auto resolved = resolveInferenceJob(*json, QFileInfo(jobPath).absoluteDir().absolutePath(), [](const QString& jobId) {
        return core::Result<core::broker::JobStatus>(core::Error { QStringLiteral("model.fromJob"),
            QStringLiteral("job %1 is on a broker: on this machine give the weights (model.initialWeights.file)").arg(jobId) });
    });
    if (!resolved)
        return core::Error { {}, QStringLiteral("%1: %2").arg(jobPath, resolved.error().toString()) };
    auto spec = core::JobSpec::fromJson(*resolved);
    if (!spec)
        return core::Error { {}, QStringLiteral("%1: %2").arg(jobPath, spec.error().toString()) };
    resolvePaths(*spec, QFileInfo(jobPath).absoluteDir());
    return spec;
}

int program(const QStringList& args, const compute::ComputeEnvironment& environment)
{
    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("job"), QStringLiteral("job file"));
    parser.addOption({ QStringLiteral("step"), QStringLiteral("shard step, from 1"), QStringLiteral("N"), QStringLiteral("1") });
    bool numeric = false;
    if (!parser.parse(args) || parser.positionalArguments().size() != 1
        || (parser.value(QStringLiteral("step")).toLongLong(&numeric), !numeric))
        return fail(QStringLiteral("usage: tessera-node program JOB.json [--step N]"));
    const QString jobPath = parser.positionalArguments().first();
    auto spec = readJobFile(jobPath);
    if (!spec)
        return fail(spec.error().message);
    if (spec->training.determinism != core::TrainingSpec::Determinism::Portable)
        return fail(QStringLiteral("%1: only a portable job (training.determinism portable) trains by a program").arg(jobPath));
    const auto task = core::decomposeShard(QStringLiteral("job"), *spec, 0, 0, {});
    const auto listing = compute::portableListing(task, parser.value(QStringLiteral("step")).toLongLong(), environment);
    if (!listing)
        return fail(listing.error().toString());
    out() << *listing << Qt::flush;
    return 0;
}

// What train-local prints as it goes: a step counter on a terminal, and a line per round.
compute::LocalJobObserver trainLocalObserver(const core::JobSpec& spec, bool tty)
{
    const auto& training = spec.training;
    const bool languageModel = spec.model.context > 0;
    compute::LocalJobObserver observer;
    observer.stepFinished = [tty, training](const core::ShardTask& task, std::int64_t step) {
        if (tty && (step % 10 == 0 || step == task.localSteps))
            err() << "\r  round " << task.round + 1 << "/" << training.rounds << "  shard " << task.shard + 1 << "/"
                  << training.shardsPerRound << "  step " << step << "/" << task.localSteps << "   " << Qt::flush;
    };
    observer.roundFinished = [tty, training, languageModel](const compute::RoundReport& report) {
        if (tty)
            err() << "\r" << QString(60, u' ') << "\r" << Qt::flush;
        if (languageModel) { // per token
            out() << QStringLiteral("round %1/%2  test loss %3  perplexity %4  token accuracy %5%  train loss %6  (%7 s)")
                         .arg(report.round + 1)
                         .arg(training.rounds)
                         .arg(report.evaluation.loss, 0, 'f', 4)
                         .arg(std::exp(report.evaluation.loss), 0, 'f', 2)
                         .arg(report.evaluation.accuracy * 100.0, 0, 'f', 2)
                         .arg(report.meanTrainLoss, 0, 'f', 4)
                         .arg(double(report.wallTimeMs) / 1000.0, 0, 'f', 1)
                  << Qt::endl;
            return;
        }
        out() << QStringLiteral("round %1/%2  test accuracy %3%  test loss %4  train loss %5  (%6 s)")
                     .arg(report.round + 1)
                     .arg(training.rounds)
                     .arg(report.evaluation.accuracy * 100.0, 0, 'f', 2)
                     .arg(report.evaluation.loss, 0, 'f', 4)
                     .arg(report.meanTrainLoss, 0, 'f', 4)
                     .arg(double(report.wallTimeMs) / 1000.0, 0, 'f', 1)
              << Qt::endl;
    };
    return observer;
}

// train-local's report.json: the job, each round's figures and the final weights' hashes.
QJsonObject trainLocalReport(const core::JobSpec& spec, const compute::LocalJobOutput& output)
{
    QJsonArray rounds;
    for (const auto& report : output.rounds) {
        rounds.append(QJsonObject {
            { QStringLiteral("round"), static_cast<qint64>(report.round) },
            { QStringLiteral("testAccuracy"), report.evaluation.accuracy },
            { QStringLiteral("testLoss"), report.evaluation.loss },
            { QStringLiteral("trainLoss"), report.meanTrainLoss },
            { QStringLiteral("wallTimeMs"), static_cast<qint64>(report.wallTimeMs) },
            { QStringLiteral("weightsHash"), report.weightsHash.toHex() },
        });
    }
    return QJsonObject {
        { QStringLiteral("job"), spec.toJson() },
        { QStringLiteral("rounds"), rounds },
        { QStringLiteral("finalWeightsHash"), output.finalWeights.canonicalHash.toHex() },
        { QStringLiteral("finalWeightsSha256"), core::Digest::ofBytes(output.finalWeights.bytes).toHex() },
    };
}

int trainLocal(const QStringList& args, const compute::ComputeEnvironment& environment)
{
    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("job"), QStringLiteral("job file"));
    parser.addOption(
        { QStringLiteral("out"), QStringLiteral("output folder"), QStringLiteral("DIR"), QStringLiteral("tessera-out") });
    if (!parser.parse(args) || parser.positionalArguments().size() != 1)
        return fail(QStringLiteral("usage: tessera-node train-local JOB.json [--out DIR]"));
    const QString jobPath = parser.positionalArguments().first();
    auto spec = readJobFile(jobPath);
    if (!spec)
        return fail(spec.error().message);

    const QString outDir = parser.value(QStringLiteral("out"));
    if (!QDir().mkpath(outDir))
        return fail(QStringLiteral("cannot create %1").arg(outDir));

    const bool tty = isatty(fileno(stderr));
    const auto& training = spec->training;
    out() << "Training \"" << spec->name << "\" on this machine: " << training.rounds << " rounds x " << training.shardsPerRound
          << " shards x " << training.localSteps << " steps of " << training.batchSize << " samples, " << training.threads
          << " thread(s)" << Qt::endl;

    auto output = compute::runJobLocally(*spec, environment, trainLocalObserver(*spec, tty));
    if (!output)
        return fail(output.error().toString());

    const QString weightsPath = QDir(outDir).filePath(QStringLiteral("model.pt"));
    if (!writeFile(weightsPath, output->finalWeights.bytes))
        return fail(QStringLiteral("cannot write %1").arg(weightsPath));
    QString scriptPath;
    if (spec->model.source == core::ModelSpec::Source::Zoo) {
        scriptPath = QDir(outDir).filePath(QStringLiteral("model.torchscript.pt"));
        if (auto status = compute::exportTorchScript(spec->model, output->finalWeights.bytes, scriptPath); !status)
            return fail(status.error().toString());
    }
    const QJsonObject report = trainLocalReport(*spec, *output);
    writeFile(QDir(outDir).filePath(QStringLiteral("report.json")), QJsonDocument(report).toJson());
    out() << "final weights " << output->finalWeights.canonicalHash.toHex() << Qt::endl;
    out() << "wrote " << weightsPath;
    if (!scriptPath.isEmpty())
        out() << ", " << scriptPath;
    out() << " and " << QDir(outDir).filePath(QStringLiteral("report.json")) << Qt::endl;
    return 0;
}

// An inference job on this machine (docs/JOBS.md, "Inference jobs"): every shard in order, as the
// broker cuts them, assembled as the broker assembles them: the bytes `tessera-job fetch` writes.
int inferLocal(const QStringList& args, const compute::ComputeEnvironment& environment)
{
    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("job"), QStringLiteral("job file"));
    parser.addOption({ { QStringLiteral("o"), QStringLiteral("out") }, QStringLiteral("result file"), QStringLiteral("FILE") });
    if (!parser.parse(args) || parser.positionalArguments().size() != 1 || !parser.isSet(QStringLiteral("out")))
        return fail(QStringLiteral("usage: tessera-node infer-local JOB.json -o OUT.jsonl"));
    auto spec = readJobFile(parser.positionalArguments().first());
    if (!spec)
        return fail(spec.error().message);
    if (!spec->isInference())
        return fail(
            QStringLiteral("%1 is a training job: tessera-node train-local runs it").arg(parser.positionalArguments().first()));
    if (spec->inference.serves())
        return fail(QStringLiteral("%1 is a served job: it answers requests (tessera-job ask), one at a time; infer-local runs a "
                                   "generate job of one prompt to give a served answer's tokens")
                        .arg(parser.positionalArguments().first()));
    auto weights = compute::initialWeights(*spec, environment);
    if (!weights)
        return fail(weights.error().toString());
    const auto tasks = core::decomposeRound(QStringLiteral("0000000000000000"), *spec, 0, weights->canonicalHash);
    out() << "Running \"" << spec->name << "\" on this machine: " << spec->inferenceInputs() << " inputs in " << tasks.size()
          << " shards" << Qt::endl;
    QByteArray lines;
    for (const auto& task : tasks) {
        const auto output = compute::runShard(task, weights->bytes, environment);
        if (output.result.outcome != core::ShardResult::Outcome::Completed)
            return fail(QStringLiteral("shard %1: %2").arg(task.shard).arg(output.result.failure));
        lines += output.weights;
    }
    auto summary = core::inference::summarize(spec->inference.task, lines);
    if (spec->inference.task == core::InferenceSpec::Task::Generate)
        lines = core::inference::withText(lines);
    const QString path = parser.value(QStringLiteral("out"));
    if (!writeFile(path, lines))
        return fail(QStringLiteral("cannot write %1").arg(path));
    out() << "wrote " << path << " (" << lines.size() << " bytes, SHA-256 " << core::Digest::ofBytes(lines).toHex() << ")";
    if (summary && summary->labelled > 0)
        out() << "; accuracy " << QString::number(summary->accuracy() * 100.0, 'f', 2) << "% of " << summary->labelled;
    if (summary && spec->inference.task == core::InferenceSpec::Task::Score)
        out() << "; mean loss " << summary->meanLoss << " (perplexity " << std::exp(summary->meanLoss) << ")";
    if (summary && spec->inference.task == core::InferenceSpec::Task::Generate)
        out() << "; " << summary->tokens << " tokens";
    out() << Qt::endl;
    return 0;
}

int trainShard(const QStringList& args, const compute::ComputeEnvironment& environment)
{
    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("task"), QStringLiteral("shard task file"));
    parser.addOption({ QStringLiteral("weights"), QStringLiteral("start weights"), QStringLiteral("FILE") });
    parser.addOption({ QStringLiteral("out"), QStringLiteral("output folder"), QStringLiteral("DIR") });
    if (!parser.parse(args) || parser.positionalArguments().size() != 1 || !parser.isSet(QStringLiteral("weights"))
        || !parser.isSet(QStringLiteral("out")))
        return fail(QStringLiteral("usage: tessera-node train-shard TASK.json --weights FILE --out DIR"));
    const auto taskText = readFile(parser.positionalArguments().first());
    if (!taskText)
        return fail(QStringLiteral("cannot read %1").arg(parser.positionalArguments().first()));
    const auto json = QJsonDocument::fromJson(*taskText).object();
    auto task = core::ShardTask::fromJson(json);
    if (!task)
        return fail(task.error().toString());
    const auto weights = readFile(parser.value(QStringLiteral("weights")));
    if (!weights)
        return fail(QStringLiteral("cannot read %1").arg(parser.value(QStringLiteral("weights"))));
    const QString outDir = parser.value(QStringLiteral("out"));
    QDir().mkpath(outDir);
    const auto output = compute::runShard(*task, *weights, environment);
    writeFile(QDir(outDir).filePath(QStringLiteral("result.json")), QJsonDocument(output.result.toJson()).toJson());
    if (output.result.outcome == core::ShardResult::Outcome::Failed)
        return fail(output.result.failure);
    writeFile(QDir(outDir).filePath(QStringLiteral("weights.pt")), output.weights);
    out() << output.result.finalHash.toHex() << Qt::endl;
    return 0;
}

// A broker to talk to as this node (--broker, else the first of Node/Brokers, else the local one),
// and the node's identity.
core::Result<std::pair<net::BrokerAddress, net::Identity>> brokerSession(
    QString address, const core::settings::Settings& settings)
{
    if (address.isEmpty() && !settings.listValue(core::settings::names::NodeBrokers).isEmpty())
        address = settings.listValue(core::settings::names::NodeBrokers).first();
    auto broker = net::BrokerAddress::parse(address.isEmpty() ? QStringLiteral("tcp://127.0.0.1:5555") : address);
    if (!broker)
        return broker.error();
    auto me = net::Identity::loadOrCreate(net::Identity::defaultKeyFile(settings));
    if (!me)
        return me.error();
    return std::pair { *broker, *me };
}

// Bonds or unbonds stake: a request signed with the node's key, so that only the node moves it.
int stake(const QStringList& args, core::settings::Settings& settings)
{
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("broker"), QStringLiteral("broker address"), QStringLiteral("ADDRESS") });
    if (!parser.parse(args))
        return fail(parser.errorText());
    const auto positional = parser.positionalArguments();
    if (positional.size() != 2 || (positional[0] != u"bond" && positional[0] != u"unbond"))
        return fail(QStringLiteral("usage: tessera-node stake bond|unbond AMOUNT [--broker ADDRESS]"));
    const QString action = positional[0];
    auto amount = core::Credits::parse(positional[1]);
    if (!amount || amount->micro() <= 0)
        return fail(QStringLiteral("AMOUNT must be a positive number of credits, like 12.5"));
    auto session = brokerSession(parser.value(QStringLiteral("broker")), settings);
    if (!session)
        return fail(session.error().toString());
    auto& [broker, me] = *session;
    const auto* keys = &me.keys;
    const auto* signing = &me.signing;
    net::BrokerClient client(broker, *keys);
    // The request names the broker it is for (its signing key, from LEDGER) and expires in an hour.
    auto ledger = client.request(net::Command::Ledger, {});
    if (!ledger)
        return fail(ledger.error().message);
    const auto brokerKey = net::LedgerReply::fromHeader(*ledger);
    if (!brokerKey || brokerKey->signingKey.isEmpty())
        return fail(QStringLiteral("the broker did not say its signing key (LEDGER): is it older than this node?"));
    const auto now = QDateTime::currentMSecsSinceEpoch();
    const auto request = core::signDocument(
        QJsonObject {
            { QStringLiteral("kind"), QStringLiteral("tessera-stake") },
            { QStringLiteral("node"), keys->publicKey },
            { QStringLiteral("action"), action },
            { QStringLiteral("amount"), amount->toString() },
            { QStringLiteral("nonce"), QString::number(now) },
            { QStringLiteral("broker"), brokerKey->signingKey },
            { QStringLiteral("expires"), static_cast<qint64>(now + 3'600'000) },
        },
        *signing);
    auto reply = client.request(net::Command::Stake, { { QStringLiteral("request"), request } });
    if (!reply)
        return fail(reply.error().message);
    out() << "balance " << reply->value(QStringLiteral("balance")).toString() << ", stake "
          << reply->value(QStringLiteral("stake")).toString() << ", unbonding "
          << reply->value(QStringLiteral("unbonding")).toString() << Qt::endl;
    return 0;
}

// What this node holds on a broker: its balance (what it earned), stake and unbonding stake. The
// request goes with the node's identity, so under CURVE the broker answers for its account.
// The node's record on a broker's network (docs/LEDGER.md, "Portable records"): the whole log read
// and checked against a signed head, and the entries that name this node, each with its proof.
int record(const QStringList& args, const core::settings::Settings& settings)
{
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("broker"), QStringLiteral("broker address"), QStringLiteral("ADDRESS") });
    parser.addOption(
        { { QStringLiteral("o"), QStringLiteral("output") }, QStringLiteral("the record's file"), QStringLiteral("FILE") });
    parser.addOption({ QStringLiteral("json"), QStringLiteral("print JSON") });
    if (!parser.parse(args) || !parser.positionalArguments().isEmpty() || !parser.isSet(QStringLiteral("output")))
        return fail(QStringLiteral("usage: tessera-node record -o FILE [--broker ADDRESS] [--json]"));
    auto session = brokerSession(parser.value(QStringLiteral("broker")), settings);
    if (!session)
        return fail(session.error().toString());
    auto& [broker, me] = *session;
    net::BrokerClient client(broker, me.keys);
    auto reply = client.request(net::Command::LogHead, {});
    if (!reply)
        return fail(reply.error().message);
    auto head = core::ledger::LogHead::read(reply->value(net::fields::Head).toObject());
    if (!head)
        return fail(QStringLiteral("the broker's head does not hold: %1").arg(head.error().toString()));
    QStringList leaves;
    while (leaves.size() < head->size) {
        net::LogEntriesRequest request;
        request.from = leaves.size();
        auto page = client.request(net::Command::LogEntries, request.toHeader());
        if (!page)
            return fail(page.error().message);
        const auto entries = page->value(net::fields::Entries).toArray();
        if (entries.isEmpty())
            return fail(QStringLiteral("the broker's log ends before its head's %1 entries").arg(head->size));
        for (qsizetype i = 0; i < entries.size() && leaves.size() < head->size; ++i)
            leaves.append(entries[i].toString());
    }
    auto made = core::ledger::makeRecord(me.account(), *head, leaves);
    if (!made)
        return fail(made.error().toString());
    QSaveFile file(parser.value(QStringLiteral("output")));
    if (!file.open(QIODevice::WriteOnly) || file.write(QJsonDocument(*made).toJson()) < 0 || !file.commit())
        return fail(QStringLiteral("cannot write %1").arg(file.fileName()));
    const auto summary = *core::ledger::verifyRecord(*made, head->signer);
    if (parser.isSet(QStringLiteral("json")))
        return printJson(QJsonDocument(summary.toJson()));
    out() << "wrote " << file.fileName() << ": " << summary.entries << " entries of network " << head->network
          << " under its head of " << head->size << " (" << summary.verified << " results verified, " << summary.agreed
          << " checks agreed, " << summary.disputesLost << " disputes lost, " << summary.earned() << " credits earned)"
          << Qt::endl;
    return 0;
}

// Presents the node's record of another network to a broker that trusts that network: it starts
// the node's sampling streak there (docs/LEDGER.md, "Portable records").
int presentRecord(const QStringList& args, const core::settings::Settings& settings)
{
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("broker"), QStringLiteral("broker address"), QStringLiteral("ADDRESS") });
    parser.addOption({ QStringLiteral("json"), QStringLiteral("print JSON") });
    if (!parser.parse(args) || parser.positionalArguments().size() != 1)
        return fail(QStringLiteral("usage: tessera-node present-record FILE [--broker ADDRESS] [--json]"));
    QFile file(parser.positionalArguments().first());
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1").arg(file.fileName()));
    auto session = brokerSession(parser.value(QStringLiteral("broker")), settings);
    if (!session)
        return fail(session.error().toString());
    auto& [broker, me] = *session;
    net::BrokerClient client(broker, me.keys);
    auto uploaded = client.upload(file.readAll());
    if (!uploaded)
        return fail(uploaded.error().message);
    auto reply = client.request(net::Command::Record, net::RecordRequest { *uploaded }.toHeader());
    if (!reply)
        return fail(reply.error().message);
    if (parser.isSet(QStringLiteral("json")))
        return printJson(QJsonDocument(*reply));
    out() << "the broker starts this node's sampling streak from " << reply->value(QStringLiteral("credited")).toInteger()
          << " results" << Qt::endl;
    return 0;
}

int balance(const QStringList& args, const core::settings::Settings& settings)
{
    QCommandLineParser parser;
    parser.addOption({ QStringLiteral("broker"), QStringLiteral("broker address"), QStringLiteral("ADDRESS") });
    parser.addOption({ QStringLiteral("json"), QStringLiteral("print JSON") });
    if (!parser.parse(args) || !parser.positionalArguments().isEmpty())
        return fail(QStringLiteral("usage: tessera-node balance [--broker ADDRESS] [--json]"));
    auto session = brokerSession(parser.value(QStringLiteral("broker")), settings);
    if (!session)
        return fail(session.error().toString());
    auto& [broker, me] = *session;
    net::BrokerClient client(broker, me.keys);
    auto reply = client.request(net::Command::Balance, {});
    if (!reply)
        return fail(reply.error().message);
    const auto account = core::broker::AccountRecord::fromJson(*reply);
    if (parser.isSet(QStringLiteral("json")))
        return printJson(QJsonDocument(account.toJson()));
    out() << account.account << ": " << account.balance.toString() << " credits earned and held, " << account.stake.toString()
          << " bonded" << Qt::endl;
    return 0;
}

} // namespace

int runNodeCommand(const QStringList& arguments)
{
    QStringList args = arguments;
    QString configPath = core::settings::Settings::defaultFilePath();
    // Global options come before the command.
    while (args.size() > 1 && args[1].startsWith(u'-')) {
        const QString option = args.takeAt(1);
        if (option == u"--version" || option == u"-v") {
            out() << "tessera-node " << TESSERA_VERSION << Qt::endl;
            return 0;
        }
        if (option == u"--help" || option == u"-h") {
            out() << Usage;
            return 0;
        }
        if (option == u"--config" && args.size() > 1) {
            configPath = args.takeAt(1);
            continue;
        }
        return fail(QStringLiteral("unknown option %1\n%2").arg(option, QString::fromUtf8(Usage)));
    }
    if (args.size() < 2) {
        err() << Usage;
        return 2;
    }

    core::settings::Settings settings(configPath);
    for (const auto& problem : settings.load())
        err() << "tessera-node: " << configPath << ": " << problem.toString() << Qt::endl;
    const auto environment = environmentFrom(settings);

    const QString command = args[1];
    QStringList rest = args;
    rest.removeAt(1);
    if (rest.contains(QStringLiteral("--help")) || rest.contains(QStringLiteral("-h"))) {
        const auto help = commandHelp(command);
        if (help.isEmpty())
            return fail(QStringLiteral("unknown command '%1'\n%2").arg(command, QString::fromUtf8(Usage)));
        out() << "Usage: tessera-node [--config FILE] " << help << Qt::flush;
        return 0;
    }
    if (command == u"run")
        return runNode(rest, settings, environment);
    if (command == u"devices")
        return devices(rest);
    if (command == u"ctl")
        return ctl(rest, settings);
    if (command == u"results")
        return results(rest, settings);
    if (command == u"benchmark")
        return benchmark(rest, settings);
    if (command == u"train-local")
        return trainLocal(rest, environment);
    if (command == u"train-shard")
        return trainShard(rest, environment);
    if (command == u"infer-local")
        return inferLocal(rest, environment);
    if (command == u"program")
        return program(rest, environment);
    if (command == u"sample")
        return sample(rest, environment);
    if (command == u"stake")
        return stake(rest, settings);
    if (command == u"balance")
        return balance(rest, settings);
    if (command == u"record")
        return record(rest, settings);
    if (command == u"present-record")
        return presentRecord(rest, settings);
    return fail(QStringLiteral("unknown command '%1'\n%2").arg(command, QString::fromUtf8(Usage)));
}

} // namespace tessera::app
