// tessera-broker: the job broker daemon. Wiring only: settings, the compute-backed training math,
// the Broker (core) and its network loop (net).

#include <compute/brokermath.h>
#include <core/broker/broker.h>
#include <core/settings/settings.h>
#include <net/brokerserver.h>
#include <net/curvekeys.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QStandardPaths>
#include <QTextStream>

#include <atomic>
#include <csignal>

namespace {

std::atomic<bool> stopRequested { false };

void requestStop(int)
{
    stopRequested.store(true);
}

int fail(const QString& message)
{
    QTextStream(stderr) << "tessera-broker: " << message << Qt::endl;
    return 1;
}

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("tessera-broker"));
    QCoreApplication::setApplicationVersion(QStringLiteral(TESSERA_VERSION));
    using namespace tessera;
    namespace names = core::settings::names;

    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral("Tessera job broker: owns jobs, schedules shards on nodes, aggregates rounds."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addOption({ QStringLiteral("data"), QStringLiteral("folder for the database and blobs (Broker/DataDirectory)"),
        QStringLiteral("DIR") });
    parser.addOption(
        { QStringLiteral("bind"), QStringLiteral("endpoint to listen on (Broker/Bind)"), QStringLiteral("ENDPOINT") });
    parser.addOption({ QStringLiteral("keys"),
        QStringLiteral("keypair file; created if missing; turns CURVE on (Broker/KeyFile)"), QStringLiteral("FILE") });
    parser.addOption({ QStringLiteral("config"), QStringLiteral("settings file"), QStringLiteral("FILE") });
    parser.process(app);

    core::settings::Settings settings(parser.isSet(QStringLiteral("config")) ? parser.value(QStringLiteral("config"))
                                                                             : core::settings::Settings::defaultFilePath());
    for (const auto& problem : settings.load())
        QTextStream(stderr) << "tessera-broker: " << settings.filePath() << ": " << problem.toString() << Qt::endl;

    QString dataDirectory = parser.value(QStringLiteral("data"));
    if (dataDirectory.isEmpty())
        dataDirectory = settings.stringValue(names::BrokerDataDirectory);
    if (dataDirectory.isEmpty())
        dataDirectory = QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) + QStringLiteral("/Tessera/broker");

    net::BrokerServerOptions options;
    options.bind
        = parser.isSet(QStringLiteral("bind")) ? parser.value(QStringLiteral("bind")) : settings.stringValue(names::BrokerBind);
    options.heartbeatMs = int(settings.intValue(names::NetworkHeartbeatIntervalMs));
    options.allowList = settings.listValue(names::BrokerAllowList);
    options.maxRequestsPerSecond = int(settings.intValue(names::BrokerMaxRequestsPerSecond));
    const QString keyFile = parser.isSet(QStringLiteral("keys")) ? parser.value(QStringLiteral("keys"))
                                                                 : settings.stringValue(names::BrokerKeyFile);
    if (!keyFile.isEmpty()) {
        auto keys = net::CurveKeys::loadOrCreate(keyFile);
        if (!keys)
            return fail(keys.error().toString());
        options.keys = *keys;
    }

    compute::ComputeEnvironment environment;
    environment.fashionMnistDirectory = settings.stringValue(names::DataFashionMnistDirectory);
    environment.device = QStringLiteral("cpu"); // the broker aggregates and evaluates on the CPU
    compute::BrokerMath math(environment);
    core::broker::SystemClock clock;
    core::broker::Broker::Options brokerOptions;
    brokerOptions.faucet = settings.boolValue(names::BrokerFaucet);
    brokerOptions.pricePerUnit = core::Credits::fromMicro(settings.intValue(names::BrokerPricePerUnitMicro));
    brokerOptions.minStake = core::Credits::fromMicro(settings.intValue(names::BrokerMinStakeMicro));
    brokerOptions.sampling.warmup = settings.intValue(names::BrokerSamplingWarmup);
    brokerOptions.sampling.floor = double(settings.intValue(names::BrokerSamplingFloorPercent)) / 100.0;
    brokerOptions.canaryRate = double(settings.intValue(names::BrokerCanaryPercent)) / 100.0;
    brokerOptions.slashFraction = double(settings.intValue(names::BrokerSlashPercent)) / 100.0;
    brokerOptions.disputeTimeoutMs = settings.intValue(names::BrokerDisputeTimeoutSeconds) * 1000;
    brokerOptions.selfVerifyAfterMs = settings.intValue(names::BrokerSelfVerifyAfterSeconds) * 1000;
    brokerOptions.unbondingDelayMs = settings.intValue(names::BrokerUnbondingDelaySeconds) * 1000;
    brokerOptions.maxRunningJobsPerOwner = settings.intValue(names::BrokerMaxJobsPerOwner);
    auto broker = core::broker::Broker::open(dataDirectory, math, clock, brokerOptions);
    if (!broker)
        return fail(broker.error().toString());
    math.useBlobs((*broker)->blobs());

    net::BrokerServer server(**broker, options);
    if (auto status = server.bind(); !status)
        return fail(status.error().toString());
    std::signal(SIGINT, requestStop);
    std::signal(SIGTERM, requestStop);
    QTextStream(stdout) << "tessera-broker " << TESSERA_VERSION << " listening at " << server.address() << " (data in "
                        << dataDirectory << ")" << Qt::endl;
    server.run(stopRequested);
    QTextStream(stdout) << "tessera-broker: stopped" << Qt::endl;
    return 0;
}
