#include "embeddedbroker.h"

#include <core/helperprogram.h>
#include <core/settings/settings.h>

#include <QDir>
#include <QFileInfo>
#include <QProcess>

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tessera::app {

namespace names = core::settings::names;

namespace {

// A TCP port on 127.0.0.1 that nobody listens on now (the kernel's choice), or 0.
int freeLoopbackPort()
{
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    sockaddr_in address {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0
        && ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
        port = ntohs(address.sin_port);
    ::close(fd);
    return port;
}

} // namespace

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
    const int port = freeLoopbackPort();
    if (port == 0)
        return core::Error { QStringLiteral("broker"), QStringLiteral("no free port on 127.0.0.1 for the local broker") };
    const QString address = QStringLiteral("tcp://127.0.0.1:%1").arg(port);

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
