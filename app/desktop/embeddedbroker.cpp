#include "embeddedbroker.h"

#include <core/helperprogram.h>
#include <core/settings/settings.h>

#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>

#include <signal.h>
#include <sys/prctl.h>

namespace tessera::app {

namespace names = core::settings::names;

EmbeddedBroker::EmbeddedBroker() = default;

EmbeddedBroker::~EmbeddedBroker()
{
    stop();
}

QString EmbeddedBroker::defaultBrokerProgram()
{
    return core::helperProgram("TESSERA_BROKER_PROGRAM", QStringLiteral("tessera-broker"), QStringLiteral(TESSERA_BIN_DIR));
}

core::Result<QString> EmbeddedBroker::start(Options options)
{
    stop();
    const QString program = options.program.isEmpty() ? defaultBrokerProgram() : options.program;
    if (!QFileInfo(program).isExecutable())
        return core::Error { QStringLiteral("broker"), QStringLiteral("the local broker's program %1 is missing").arg(program) };
    if (!QDir().mkpath(options.dataDirectory))
        return core::Error { QStringLiteral("broker"), QStringLiteral("cannot create %1").arg(options.dataDirectory) };
    // A Unix socket in a folder of the user's alone (0700, in the runtime folder): on loopback TCP
    // every account on this machine would reach the broker, and a plaintext broker takes every
    // caller for its operator (docs/SECURITY.md, "The practice broker").
    QString runtime = QStandardPaths::writableLocation(QStandardPaths::RuntimeLocation);
    if (runtime.isEmpty() || !QDir().mkpath(runtime))
        runtime = QDir::tempPath();
    auto folder = std::make_unique<QTemporaryDir>(QDir(runtime).filePath(QStringLiteral("tessera-practice-XXXXXX")));
    if (!folder->isValid())
        return core::Error {
            QStringLiteral("broker"),
            QStringLiteral("cannot create a folder for the local broker's socket in %1: %2").arg(runtime, folder->errorString())
        };
    if (!QFile::setPermissions(folder->path(), QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner))
        return core::Error { QStringLiteral("broker"), QStringLiteral("cannot make %1 the user's alone").arg(folder->path()) };
    const QString address = QStringLiteral("ipc://") + folder->filePath(QStringLiteral("broker.sock"));

    // Its own settings file, written afresh each start: the user's settings are the node's.
    const QString settingsPath = QDir(options.dataDirectory).filePath(QStringLiteral("broker.ini"));
    QFile::remove(settingsPath);
    core::settings::Settings settings(settingsPath);
    for (const auto& [key, value] : std::initializer_list<std::pair<QString, QVariant>> {
             { names::BrokerBind, address },
             { names::BrokerDataDirectory, options.dataDirectory },
             { names::BrokerFaucet, options.faucet },
             { names::BrokerCanaryPercent, options.canaryPercent },
             { names::BrokerSelfVerifyAfterSeconds, options.selfVerifyAfterSeconds },
             { names::BrokerDisputeTimeoutSeconds, options.disputeTimeoutSeconds },
             { names::NetworkHeartbeatIntervalMs, options.heartbeatMs },
             { names::DataFashionMnistDirectory, options.environment.fashionMnistDirectory },
             { names::DataFortunesDirectory, options.environment.fortunesDirectory },
         }) {
        if (auto set = settings.set(key, value); !set)
            return set.error();
    }
    if (auto saved = settings.save(); !saved)
        return saved.error();

    m_process = std::make_unique<QProcess>();
    m_process->setProgram(program);
    m_process->setArguments({ QStringLiteral("--config"), settingsPath });
    m_process->setProcessChannelMode(QProcess::ForwardedChannels);
    // It ends with the app, however the app ends (the GUI thread forks it and lives as long).
    m_process->setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGTERM); });
    m_stopping = false;
    QObject::connect(m_process.get(), &QProcess::finished, m_process.get(), [this](int, QProcess::ExitStatus) {
        if (!m_stopping && m_onEnded)
            m_onEnded(endedWhy());
    });
    m_process->start();
    if (!m_process->waitForStarted(10'000)) {
        const QString why = m_process->errorString();
        m_process.reset();
        return core::Error { QStringLiteral("broker"), QStringLiteral("cannot start the local broker %1: %2").arg(program, why) };
    }
    m_address = address;
    m_socketFolder = std::move(folder);
    return address;
}

void EmbeddedBroker::stop()
{
    if (!m_process)
        return;
    m_stopping = true;
    if (m_process->state() != QProcess::NotRunning) {
        m_process->terminate(); // SIGTERM: it stops its loop and closes its database
        if (!m_process->waitForFinished(15'000)) {
            m_process->kill();
            m_process->waitForFinished(5'000);
        }
    }
    m_process.reset();
    m_socketFolder.reset(); // and its socket
}

bool EmbeddedBroker::running() const
{
    return m_process && m_process->state() != QProcess::NotRunning;
}

QString EmbeddedBroker::endedWhy() const
{
    if (!m_process || m_process->state() != QProcess::NotRunning)
        return {};
    return m_process->exitStatus() == QProcess::CrashExit
        ? QStringLiteral("the local broker crashed")
        : QStringLiteral("the local broker ended (exit code %1)").arg(m_process->exitCode());
}

} // namespace tessera::app
