// tessera-broker: the job broker daemon, and the operator's commands on its books. Wiring only:
// settings, the compute-backed training math, the Broker (core) and its network loop (net).

#include <app/common/cli.h>
#include <compute/engine/brokermath.h>
#include <core/broker/broker.h>
#include <core/broker/offthreadmath.h>
#include <core/broker/operator.h>
#include <core/broker/storemigration.h>
#include <core/settings/settings.h>
#include <core/storage/database.h>
#include <net/brokerserver.h>
#include <net/curvekeys.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
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

using tessera::app::cli::fail;
using namespace tessera;
namespace names = tessera::core::settings::names;

// The operator's commands: they act on the broker's database, also while the broker runs.
int operatorCommand(const QStringList& positional, const QString& store, const QCommandLineParser& parser)
{
    using namespace tessera;
    auto& out = app::cli::out();
    const QString command = positional.first();
    const bool json = parser.isSet(QStringLiteral("json"));
    if (command == u"credit" && positional.size() == 3) {
        auto amount = core::Credits::parse(positional[2]);
        if (!amount || amount->micro() <= 0)
            return fail(QStringLiteral("AMOUNT must be a positive number of credits, like 250 or 12.5"));
        auto credited = core::broker::creditAccount(
            store, positional[1], *amount, parser.value(QStringLiteral("memo")), QDateTime::currentMSecsSinceEpoch());
        if (!credited)
            return fail(credited.error().toString());
        if (json)
            return app::cli::printJson(QJsonDocument(
                QJsonObject { { QStringLiteral("account"), positional[1] }, { QStringLiteral("credited"), amount->toString() },
                    { QStringLiteral("cause"), credited->cause }, { QStringLiteral("balance"), credited->balance.toString() } }));
        out << "credited " << amount->toString() << " credits to " << positional[1] << " (" << credited->cause
            << "; its holder fetches the signed receipt with tessera-job receipt " << credited->cause << "); balance "
            << credited->balance.toString() << Qt::endl;
        return 0;
    }
    if (command == u"balance" && positional.size() == 2) {
        auto account = core::broker::accountIn(store, positional[1]);
        if (!account)
            return fail(account.error().toString());
        if (json)
            return app::cli::printJson(QJsonDocument(*account));
        out << positional[1] << ": " << account->value(QStringLiteral("balance")).toString() << " credits, "
            << account->value(QStringLiteral("stake")).toString() << " bonded, "
            << account->value(QStringLiteral("unbonding")).toString() << " unbonding" << Qt::endl;
        return 0;
    }
    app::cli::err() << "usage: tessera-broker [--config FILE] [--data DIR | --database URI] credit [--memo TEXT] [--json] [--] "
                       "ACCOUNT AMOUNT\n"
                       "       tessera-broker [--config FILE] [--data DIR | --database URI] balance [--json] [--] ACCOUNT\n"
                       "(an account may begin with '-': put it after --)"
                    << Qt::endl;
    return 2;
}

// tessera-broker migrate-store --to URI: the data folder's broker.sqlite and blobs into an empty
// PostgreSQL database (docs/STORE.md, "Moving a network to PostgreSQL").
int migrateStoreCommand(const QCommandLineParser& parser, const QString& dataDirectory)
{
    const QString to = parser.value(QStringLiteral("to"));
    const QString sqlite = QDir(dataDirectory).filePath(QStringLiteral("broker.sqlite"));
    if (parser.positionalArguments().size() != 1 || to.isEmpty()) {
        app::cli::err() << "usage: tessera-broker [--data DIR] migrate-store --to postgresql://..." << Qt::endl;
        return 2;
    }
    if (!QFile::exists(sqlite))
        return fail(QStringLiteral("no broker database in %1 (--data or Broker/DataDirectory)").arg(dataDirectory));
    auto blobs = core::broker::Broker::openBlobs(dataDirectory);
    if (!blobs)
        return fail(blobs.error().toString());
    auto moved = core::broker::migrateStore(sqlite, to, blobs->get());
    if (!moved)
        return fail(moved.error().toString());
    QTextStream out(stdout);
    std::int64_t rows = 0;
    for (const auto& table : moved->tables)
        rows += table.rows;
    out << "copied " << rows << " rows of " << moved->tables.size() << " tables and " << moved->blobs
        << " blobs; the books balance. Start the broker with Broker/Database set to that URI (its data folder "
           "stays its blobs' folder)"
        << Qt::endl;
    return 0;
}

// --data, else Broker/DataDirectory, else ~/.local/share/Tessera/broker.
QString dataDirectoryFrom(const QCommandLineParser& parser, const tessera::core::settings::Settings& settings)
{
    QString dataDirectory = parser.value(QStringLiteral("data"));
    if (dataDirectory.isEmpty())
        dataDirectory = settings.stringValue(tessera::core::settings::names::BrokerDataDirectory);
    if (dataDirectory.isEmpty())
        dataDirectory = QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) + QStringLiteral("/Tessera/broker");
    return dataDirectory;
}

// The command line: options, and the operator's commands.
void describe(QCommandLineParser& parser)
{
    parser.setApplicationDescription(
        QStringLiteral("Tessera job broker: owns jobs, schedules shards on nodes, aggregates rounds."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addOption({ QStringLiteral("data"), QStringLiteral("folder for the database and blobs (Broker/DataDirectory)"),
        QStringLiteral("DIR") });
    parser.addOption({ QStringLiteral("database"),
        QStringLiteral("a postgresql:// URI to keep the records in, shared by the network's brokers (Broker/Database)"),
        QStringLiteral("URI") });
    parser.addOption(
        { QStringLiteral("bind"), QStringLiteral("endpoint to listen on (Broker/Bind)"), QStringLiteral("ENDPOINT") });
    parser.addOption({ QStringLiteral("keys"),
        QStringLiteral("keypair file; created if missing; turns CURVE on (Broker/KeyFile)"), QStringLiteral("FILE") });
    parser.addOption({ QStringLiteral("config"), QStringLiteral("settings file"), QStringLiteral("FILE") });
    parser.addOption({ QStringLiteral("insecure-plaintext"),
        QStringLiteral("listen without CURVE on an address other than loopback (anyone who reaches it can claim any account)") });
    parser.addOption({ QStringLiteral("memo"), QStringLiteral("credit: why (kept in the ledger)"), QStringLiteral("TEXT") });
    parser.addOption({ QStringLiteral("to"), QStringLiteral("migrate-store: the empty PostgreSQL database to move to"),
        QStringLiteral("URI") });
    parser.addOption({ QStringLiteral("json"), QStringLiteral("credit, balance: print one JSON document") });
    parser.addPositionalArgument(QStringLiteral("command"),
        QStringLiteral("nothing: run the broker; credit ACCOUNT AMOUNT: new credits for an account (the operator funds "
                       "job owners); balance ACCOUNT: an account's credits; migrate-store --to URI: this broker's "
                       "SQLite database and blobs into an empty PostgreSQL database"),
        QStringLiteral("[credit ACCOUNT AMOUNT | balance ACCOUNT | migrate-store --to URI]"));
}

// The server's options from the settings and the command line; an error when the key file cannot be read or made.
core::Result<net::BrokerServerOptions> serverOptionsFrom(
    const core::settings::Settings& settings, const QCommandLineParser& parser)
{
    net::BrokerServerOptions options;
    options.bind
        = parser.isSet(QStringLiteral("bind")) ? parser.value(QStringLiteral("bind")) : settings.stringValue(names::BrokerBind);
    options.heartbeatMs = int(settings.intValue(names::NetworkHeartbeatIntervalMs));
    options.allowList = settings.listValue(names::BrokerAllowList);
    options.operatorKeys = settings.listValue(names::BrokerOperatorKeys);
    options.insecurePlaintext = parser.isSet(QStringLiteral("insecure-plaintext"));
    options.maxRequestsPerSecond = int(settings.intValue(names::BrokerMaxRequestsPerSecond));
    if (settings.boolValue(names::BrokerSwarm)) {
        net::BrokerSwarm::Options swarm;
        swarm.address = settings.stringValue(names::BrokerSwarmAddress);
        swarm.port = int(settings.intValue(names::BrokerSwarmPort));
        swarm.uploadBytesPerSecond = settings.intValue(names::BrokerSwarmMaxUploadKiBps) * 1024;
        swarm.directNodes = int(settings.intValue(names::BrokerSwarmDirectNodes));
        options.swarm = swarm;
    }
    const QString keyFile = parser.isSet(QStringLiteral("keys")) ? parser.value(QStringLiteral("keys"))
                                                                 : settings.stringValue(names::BrokerKeyFile);
    if (!keyFile.isEmpty()) {
        auto keys = net::CurveKeys::loadOrCreate(keyFile);
        if (!keys)
            return keys.error();
        options.keys = *keys;
    }

    return options;
}

// Broker/Sandbox: a job owner's code runs in confined tessera-compute workers.
void confineJobCode(compute::BrokerMath& math, const core::settings::Settings& settings, const QString& dataDirectory)
{
    if (!settings.boolValue(names::BrokerSandbox))
        return;
    compute::sandbox::WorkerOptions worker;
    worker.scratchRoot = QDir(dataDirectory).filePath(QStringLiteral("scratch"));
    worker.memoryMiB = settings.intValue(names::BrokerWorkerMemoryMiB); // a job's allowance, not the machine's
    worker.nice = 0; // the broker's own work, on its critical path
    worker.timeLimitMs = settings.intValue(names::BrokerMaxDeadlineSeconds) * 1000;
    compute::sandbox::removeStaleScratch(worker.scratchRoot); // what a crashed run left
    math.setSandbox(worker);
    math.setJobCodeLimit(std::int64_t(settings.intValue(names::BrokerJobCodeSeconds)) * 1000);
}

core::broker::Broker::Options brokerOptionsFrom(const core::settings::Settings& settings)
{
    core::broker::Broker::Options brokerOptions;
    brokerOptions.faucet = settings.boolValue(names::BrokerFaucet);
    brokerOptions.pricePerUnit = core::Credits::fromMicro(settings.intValue(names::BrokerPricePerUnitMicro));
    brokerOptions.minStake = core::Credits::fromMicro(settings.intValue(names::BrokerMinStakeMicro));
    brokerOptions.sampling.warmup = settings.intValue(names::BrokerSamplingWarmup);
    brokerOptions.sampling.floor = double(settings.intValue(names::BrokerSamplingFloorPercent)) / 100.0;
    brokerOptions.canaryRate = double(settings.intValue(names::BrokerCanaryPercent)) / 100.0;
    brokerOptions.auditRate = double(settings.intValue(names::BrokerAuditPercent)) / 100.0;
    brokerOptions.slashFraction = double(settings.intValue(names::BrokerSlashPercent)) / 100.0;
    brokerOptions.updateNormFactor = double(settings.intValue(names::BrokerUpdateNormFactor));
    brokerOptions.disputeTimeoutMs = settings.intValue(names::BrokerDisputeTimeoutSeconds) * 1000;
    brokerOptions.selfVerifyAfterMs = settings.intValue(names::BrokerSelfVerifyAfterSeconds) * 1000;
    brokerOptions.logHeadMs = settings.intValue(names::BrokerLogHeadMs);
    brokerOptions.trustedNetworks = settings.listValue(names::BrokerTrustedNetworks);
    brokerOptions.recordCreditMax = settings.intValue(names::BrokerRecordCreditMax);
    brokerOptions.unbondingDelayMs = settings.intValue(names::BrokerUnbondingDelaySeconds) * 1000;
    brokerOptions.maxRunningJobsPerOwner = settings.intValue(names::BrokerMaxJobsPerOwner);
    brokerOptions.maxUnnamedUploadBytes = std::int64_t(settings.intValue(names::BrokerMaxUnnamedUploadMiB)) << 20;
    brokerOptions.unnamedUploadMs = std::int64_t(settings.intValue(names::BrokerUnnamedUploadMinutes)) * 60'000;
    brokerOptions.keepRounds = settings.intValue(names::BrokerKeepRounds);
    brokerOptions.maxParameters = settings.intValue(names::BrokerMaxParameters);
    brokerOptions.maxAssignmentsPerNode = int(settings.intValue(names::BrokerMaxShardsPerNode));
    brokerOptions.minDeadlineMs = settings.intValue(names::BrokerMinDeadlineSeconds) * 1000;
    brokerOptions.maxDeadlineMs = settings.intValue(names::BrokerMaxDeadlineSeconds) * 1000;
    return brokerOptions;
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
    describe(parser);
    parser.process(app);

    core::settings::Settings settings(parser.isSet(QStringLiteral("config")) ? parser.value(QStringLiteral("config"))
                                                                             : core::settings::Settings::defaultFilePath());
    for (const auto& problem : settings.load())
        QTextStream(stderr) << "tessera-broker: " << settings.filePath() << ": " << problem.toString() << Qt::endl;

    const QString dataDirectory = dataDirectoryFrom(parser, settings);

    const QString database = parser.isSet(QStringLiteral("database")) ? parser.value(QStringLiteral("database"))
                                                                      : settings.stringValue(names::BrokerDatabase);
    if (!database.isEmpty() && !core::storage::isPostgresUri(database))
        return fail(QStringLiteral("Broker/Database: expected empty or a postgresql:// URI"));
    if (parser.positionalArguments().value(0) == u"migrate-store")
        return migrateStoreCommand(parser, dataDirectory);
    if (!parser.positionalArguments().isEmpty())
        return operatorCommand(parser.positionalArguments(), database.isEmpty() ? dataDirectory : database, parser);

    auto serverOptions = serverOptionsFrom(settings, parser);
    if (!serverOptions)
        return fail(serverOptions.error().toString());
    auto options = *serverOptions;
    if (options.swarm)
        options.swarm->authorityFile = QDir(dataDirectory).filePath(QStringLiteral("swarm-authority.pem"));

    compute::ComputeEnvironment environment;
    environment.fashionMnistDirectory = settings.stringValue(names::DataFashionMnistDirectory);
    environment.fortunesDirectory = settings.stringValue(names::DataFortunesDirectory);
    environment.device = QStringLiteral("cpu"); // the broker aggregates and evaluates on the CPU
    auto blobs = core::broker::Broker::openBlobs(dataDirectory);
    if (!blobs)
        return fail(blobs.error().toString());
    compute::BrokerMath math(environment, **blobs);
    confineJobCode(math, settings, dataDirectory);
    // Aggregation, evaluation and replays run on a worker thread while the network loop answers
    // heartbeats and reads (docs/ARCHITECTURE.md, "Threads").
    core::broker::OffThreadMath offThread(math);
    core::SystemClock clock;
    auto brokerOptions = brokerOptionsFrom(settings);
    brokerOptions.database = database;
    brokerOptions.endpoint = options.bind; // named to clients by a standby broker of the network
    auto broker = core::broker::Broker::open(dataDirectory, **blobs, offThread, clock, brokerOptions);
    if (!broker)
        return fail(broker.error().toString());
    if (settings.boolValue(names::BrokerSandbox))
        (*broker)->setJobCodeMath(&math); // its workers may build a job's weights beside the arithmetic thread

    net::BrokerServer server(**broker, options, clock);
    if (auto status = server.bind(); !status)
        return fail(status.error().message);
    if (!options.keys)
        QTextStream(stderr) << "tessera-broker: plaintext: every caller acts as the operator (any account, every job); "
                            << (options.insecurePlaintext ? "--insecure-plaintext lets other machines in"
                                                          : "only this machine can reach it")
                            << Qt::endl;
    std::signal(SIGINT, requestStop);
    std::signal(SIGTERM, requestStop);
    QTextStream(stdout) << "tessera-broker " << TESSERA_VERSION << " listening at " << server.address() << " (data in "
                        << dataDirectory << ")" << Qt::endl;
    offThread.setWhileWaiting([&server] { server.serveWhileBusy(); });
    server.run(stopRequested);
    offThread.setWhileWaiting({});
    const auto counted = server.counters();
    QTextStream(stdout) << "tessera-broker: stopped after " << counted.messages << " messages, " << counted.bytesIn
                        << " bytes in, " << counted.bytesOut << " bytes out" << Qt::endl;
    return 0;
}
