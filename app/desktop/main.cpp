// tessera: the desktop app. See README.md ("The desktop app") and docs/APP.md.

#include "desktopapp.h"

#include <core/settings/settings.h>
#include <ui/widgets/submitpanel.h>

#include <QApplication>
#include <QComboBox>
#include <QCommandLineParser>
#include <QDir>
#include <QLineEdit>
#include <QLocalServer>
#include <QLocalSocket>
#include <QLockFile>
#include <QStandardPaths>
#include <QThread>
#include <QTimer>

#include <cstdio>
#include <functional>
#include <memory>

using namespace tessera;

namespace {

QString instanceName()
{
    return QStringLiteral("tessera-%1").arg(QString::fromLocal8Bit(qgetenv("USER")));
}

void describe(QCommandLineParser& parser)
{
    parser.setApplicationDescription(QStringLiteral(
        "Tessera: contribute this computer's idle time to training machine-learning models, and submit your own jobs."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addOption({ QStringLiteral("config"), QStringLiteral("settings file (default ~/.config/Tessera/tessera.ini)"),
        QStringLiteral("FILE"), core::settings::Settings::defaultFilePath() });
    parser.addOption({ QStringLiteral("screenshot"),
        QStringLiteral("render every tab of the dashboard to DIR/<tab>.png (offscreen) with live data, then quit"),
        QStringLiteral("DIR") });
    parser.addOption({ QStringLiteral("screenshot-after"),
        QStringLiteral("seconds to run (contributing, with a small demo job) before the screenshots (default 0)"),
        QStringLiteral("SECONDS"), QStringLiteral("0") });
    parser.addOption({ QStringLiteral("screenshot-gpt"),
        QStringLiteral("with --screenshot-after: the demo job is a small GPT on the fortunes text (the Jobs tab then shows "
                       "its perplexity and text)") });
    parser.addOption({ QStringLiteral("show"), QStringLiteral("open the dashboard even when the tray is available") });
}

// One instance per user: a second start raises the first one's window. -1: this is the first
// (it holds `lock`); else the exit status of this one.
int raiseFirstInstance(QLockFile& lock)
{
    if (lock.tryLock(100))
        return -1;
    QLocalSocket socket;
    socket.connectToServer(instanceName());
    if (socket.waitForConnected(1000)) {
        socket.write("show\n");
        socket.waitForBytesWritten(1000);
        std::fprintf(stderr, "tessera is already running; its window was raised\n");
        return 0;
    }
    std::fprintf(stderr, "tessera: another instance holds %s\n", qPrintable(lock.fileName()));
    return 1;
}

// What a second start says: show the window.
void listenForSecondStarts(QLocalServer& server, app::DesktopApp& desktop)
{
    QLocalServer::removeServer(instanceName());
    server.listen(instanceName());
    QObject::connect(&server, &QLocalServer::newConnection, &desktop, [&] {
        while (auto* socket = server.nextPendingConnection()) {
            QObject::connect(socket, &QLocalSocket::readyRead, socket, [socket, &desktop] {
                socket->readAll();
                desktop.dashboard().show();
                desktop.dashboard().raise();
                desktop.dashboard().activateWindow();
                socket->deleteLater();
            });
        }
    });
}

// Live data for --screenshot-after: contribute, and submit a small job from the panel.
void submitScreenshotJob(app::DesktopApp& desktop, bool gpt)
{
    auto& panel = desktop.dashboard().submitPanel();
    {
        // A cnn's shards last seconds: long enough for the Overview to show one in training.
        auto* model = qobject_cast<QComboBox*>(panel.field(QStringLiteral("model")));
        model->setCurrentIndex(model->findData(gpt ? QStringLiteral("gpt") : QStringLiteral("cnn")));
        if (!gpt) // the cnn takes one hidden layer after its convolutions
            qobject_cast<QLineEdit*>(panel.field(QStringLiteral("hidden")))->setText(QStringLiteral("64"));
    }
    if (auto spec = panel.spec()) {
        auto small = *spec;
        small.name = gpt ? QStringLiteral("screenshot GPT") : QStringLiteral("screenshot demo");
        small.training.rounds = gpt ? 8 : 3;
        small.training.localSteps = gpt ? 30 : 120;
        small.training.checkpointInterval = gpt ? 10 : 40;
        if (gpt) {
            small.model.layers = 2;
            small.model.width = 64;
            small.model.context = 64;
            small.optimizer.schedule.totalSteps = small.training.rounds * small.training.localSteps;
            small.optimizer.schedule.warmupSteps = 10;
        }
        small.budget = *core::Credits::fromCredits(gpt ? 500 : 100);
        // After the practice job's submission, which Start contributing began (one at a time).
        auto submit = std::make_shared<std::function<void()>>();
        *submit = [&desktop, small, weak = std::weak_ptr(submit)] {
            desktop.submit(small).then(&desktop, [submit = weak.lock()](const core::Result<QString>& submitted) {
                if (!submitted && submitted.error().message.contains(QStringLiteral("under way")))
                    QTimer::singleShot(200, [submit] { (*submit)(); });
                else if (!submitted)
                    std::fprintf(stderr, "tessera: the demo job: %s\n", qPrintable(submitted.error().toString()));
            });
        };
        (*submit)();
    } else {
        std::fprintf(stderr, "tessera: the demo job: %s\n", qPrintable(spec.error().toString()));
    }
}

// The dashboard's tabs into `directory` after `seconds`, then quit.
void screenshotLater(QApplication& application, app::DesktopApp& desktop, const QString& directory, int seconds)
{
    QTimer::singleShot(seconds * 1000, &application, [&application, &desktop, directory, seconds] {
        // The Overview at its most telling: a shard in training (waited for up to 30 s more).
        for (int waited = 0; waited < 30'000 && seconds > 0 && !desktop.training(); waited += 20) {
            QThread::msleep(20);
            QCoreApplication::processEvents();
        }
        desktop.refresh();
        // The broker's answers come in a moment after the refresh asks (never on this thread).
        for (int waited = 0; waited < 5000 && (desktop.brokerRequestsPending() > 0 || !desktop.brokerAnswered()); waited += 20) {
            QThread::msleep(20);
            QCoreApplication::processEvents();
        }
        const auto status = desktop.screenshot(directory);
        if (!status)
            std::fprintf(stderr, "tessera: %s\n", qPrintable(status.error().toString()));
        else
            std::printf("wrote the dashboard's tabs to %s\n", qPrintable(directory));
        application.exit(status ? 0 : 1);
    });
}

} // namespace

int main(int argc, char* argv[])
{
    // --screenshot renders without a display.
    for (int i = 1; i < argc; ++i) {
        if (QByteArray(argv[i]) == "--screenshot" && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
            qputenv("QT_QPA_PLATFORM", "offscreen");
    }
    QApplication application(argc, argv);
    QApplication::setApplicationName(QStringLiteral("Tessera"));
    QApplication::setOrganizationName(QStringLiteral("Tessera"));
    QApplication::setApplicationVersion(QStringLiteral(TESSERA_VERSION));
    QApplication::setQuitOnLastWindowClosed(false);
    application.setWindowIcon(ui::Tray::iconFor(core::Contribution::State::Working));

    QCommandLineParser parser;
    describe(parser);
    parser.process(application);
    const bool screenshots = parser.isSet(QStringLiteral("screenshot"));

    const QString runtime = QStandardPaths::writableLocation(QStandardPaths::RuntimeLocation);
    QDir().mkpath(runtime);
    QLockFile lock(QDir(runtime).filePath(QStringLiteral("tessera.lock")));
    lock.setStaleLockTime(0);
    if (!screenshots) {
        if (const int exitStatus = raiseFirstInstance(lock); exitStatus >= 0)
            return exitStatus;
    }

    app::DesktopApp desktop({ parser.value(QStringLiteral("config")), parser.isSet(QStringLiteral("show")) || screenshots });
    if (auto started = desktop.start(); !started) {
        std::fprintf(stderr, "tessera: %s\n", qPrintable(started.error().toString()));
        if (screenshots)
            return 1;
    }
    QObject::connect(&desktop, &app::DesktopApp::quitRequested, &application, &QApplication::quit);
    // For make bench: the moment the event loop runs with the tray (or window) up.
    QTimer::singleShot(0, &application, [] { std::fprintf(stderr, "tessera: ready\n"); });

    QLocalServer server;
    if (!screenshots)
        listenForSecondStarts(server, desktop);

    if (screenshots) {
        const int seconds = parser.value(QStringLiteral("screenshot-after")).toInt();
        if (seconds > 0) {
            desktop.startContributing();
            submitScreenshotJob(desktop, parser.isSet(QStringLiteral("screenshot-gpt")));
        }
        screenshotLater(application, desktop, parser.value(QStringLiteral("screenshot")), seconds);
    }
    return application.exec();
}
