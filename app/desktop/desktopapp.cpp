#include "desktopapp.h"

#include "idle.h"

#include <compute/common/types.h>
#include <compute/devices/devices.h>
#include <compute/supervisor/sandbox/worker.h>
#include <core/benchmark.h>
#include <core/inference/outputs.h>
#include <core/logtail.h>
#include <core/readfile.h>
#include <core/smalljobs.h>
#include <net/brokerclient.h>
#include <net/messages.h>
#include <ui/widgets/settingsdialog.h>
#include <ui/widgets/submitpanel.h>

#include <QApplication>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QHash>
#include <QHostAddress>
#include <QJsonArray>
#include <QLoggingCategory>
#include <QPointer>
#include <QProgressDialog>
#include <QSaveFile>
#include <QStandardPaths>
#include <QThread>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>

Q_LOGGING_CATEGORY(lcDesktop, "tessera.desktop")

namespace tessera::app {

namespace names = core::settings::names;

DesktopApp::DesktopApp(Options options, QObject* parent)
    : QObject(parent)
    , m_options(std::move(options))
{
    qRegisterMetaType<compute::ShardProgress>();
    m_since.start();
}

core::JobSpec DesktopApp::demoJob()
{
    auto spec = core::smallMlpJob(tr("Practice job (on this computer)"), { 64 });
    spec.training.rounds = 3;
    spec.training.shardsPerRound = 2;
    spec.training.localSteps = 30;
    spec.training.checkpointInterval = 10;
    spec.training.determinism = core::TrainingSpec::Determinism::Portable; // as the examples: any node checks any other
    spec.budget = *core::Credits::fromCredits(20);
    return spec;
}

void DesktopApp::joinNetwork(const QString& address)
{
    (void)m_settings->set(names::NodeBrokers, QStringList { address });
    (void)m_settings->save();
    m_embedded.stop(); // the practice network ends here
    note(QStringLiteral("info"), QStringLiteral("network"), QStringLiteral("joined %1").arg(address));
    aimLink();
    if (m_contribution.contributing())
        restartSessions();
    else
        startContributing();
}

DesktopApp::~DesktopApp()
{
    m_control.reset(); // no action arrives for a machine that is going
    m_tick.stop();
    if (m_contributor)
        m_contributor->stop(false);
    m_contributor.reset();
    m_embedded.stop();
}

QList<net::BrokerAddress> DesktopApp::brokers() const
{
    QList<net::BrokerAddress> list;
    if (m_embedded.running())
        list.append(*net::BrokerAddress::parse(m_embedded.address()));
    for (const auto& text : m_settings->listValue(names::NodeBrokers)) {
        if (auto address = net::BrokerAddress::parse(text))
            list.append(*address);
    }
    return list;
}

QString DesktopApp::brokerAddress() const
{
    const auto list = brokers();
    return list.isEmpty() ? QString() : list.first().toString();
}

core::Status DesktopApp::start()
{
    if (auto opened = openNode(); !opened)
        return opened;
    if (auto started = startPracticeBroker(); !started)
        return started;
    startControl();
    startMachines();
    connectDashboard();
    connectSubmitPanel();
    connectTray();
    watchSettings();
    showAtStart();
    return {};
}

core::Status DesktopApp::openNode()
{
    m_settings = std::make_unique<core::settings::Settings>(m_options.configPath);
    const auto problems = m_settings->load();
    m_dataDirectory = dataDirectory(*m_settings);
    m_dashboard = std::make_unique<ui::Dashboard>();
    m_tray = std::make_unique<ui::Tray>();
    for (const auto& problem : problems)
        note(QStringLiteral("warning"), QStringLiteral("settings"), problem.toString());

    // Without its runtime profile, which a compute worker tells (LibTorch's start takes about a
    // second, and the app does not load LibTorch): the node registers once it is known.
    auto identity = loadNodeIdentity(*m_settings, QStringLiteral(TESSERA_VERSION), std::nullopt);
    if (!identity) {
        m_contribution.setError(identity.error().toString());
        return identity.error();
    }
    m_identity = *identity;
    for (const auto& warning : m_identity->warnings)
        note(QStringLiteral("warning"), QStringLiteral("devices"), warning);
    auto log = core::ResultLog::open(QDir(m_dataDirectory).filePath(QStringLiteral("node.sqlite")));
    if (!log)
        return log.error();
    m_results = std::move(*log);
    learnRuntime();

    return {};
}

// No broker configured: one on this computer, so that a new user sees real work at once.
core::Status DesktopApp::startPracticeBroker()
{
    if (!m_settings->listValue(names::NodeBrokers).isEmpty())
        return {};
    EmbeddedBroker::Options embedded;
    embedded.dataDirectory = QDir(m_dataDirectory).filePath(QStringLiteral("local-broker"));
    embedded.environment = environmentFrom(*m_settings);
    m_embedded.setOnEnded([this](const QString& why) {
        note(QStringLiteral("error"), QStringLiteral("broker"),
            QStringLiteral("%1: the practice network is down until the app starts again").arg(why));
    });
    auto started = m_embedded.start(embedded);
    if (!started)
        return started.error();
    note(QStringLiteral("info"), QStringLiteral("broker"), QStringLiteral("local broker listening on %1").arg(*started));
    return {};
}

// The dashboard's requests.
void DesktopApp::connectDashboard()
{
    auto& dashboard = *m_dashboard;
    connect(&dashboard, &ui::Dashboard::startContributing, this, &DesktopApp::startContributing);
    connect(&dashboard, &ui::Dashboard::joinNetwork, this, &DesktopApp::joinNetwork);
    connect(&dashboard, &ui::Dashboard::runBenchmark, this, &DesktopApp::runBenchmark);
    connect(&dashboard, &ui::Dashboard::limitsChanged, this, [this](int threads, int cpu) {
        (void)m_settings->set(names::ComputeMaxThreads, threads);
        (void)m_settings->set(names::ComputeCpuPercent, cpu);
        (void)m_settings->save();
    });
    connect(&dashboard, &ui::Dashboard::openSettings, this, [this] {
        ui::SettingsDialog dialog(*m_settings, m_dashboard.get());
        if (dialog.exec() == QDialog::Accepted)
            applySettings();
    });
    connect(&dashboard, &ui::Dashboard::cancelJob, this, [this](const QString& jobId) {
        aimLink();
        m_link.request(net::Command::Cancel, net::JobRequest { jobId }.toHeader())
            .then(this, [this, jobId](const core::Result<QJsonObject>& reply) {
                note(reply ? QStringLiteral("info") : QStringLiteral("error"), QStringLiteral("jobs"),
                    reply ? QStringLiteral("cancelled %1").arg(jobId) : reply.error().message);
            });
    });
    connect(&dashboard, &ui::Dashboard::saveModel, this, [this](const QString& jobId) {
        // An inference job's result is its lines (JOBS.md, "Inference jobs"), not weights; a served
        // job has none (its answers went to those who asked).
        if (m_inferenceJobs.value(jobId) == u"serve") {
            note(QStringLiteral("info"), QStringLiteral("jobs"),
                QStringLiteral("job %1 is a served job: it has no results to save").arg(jobId));
            return;
        }
        const bool lines = m_inferenceJobs.contains(jobId);
        const auto path = lines ? QFileDialog::getSaveFileName(m_dashboard.get(), tr("Save the results"),
                              QDir::home().filePath(jobId + QStringLiteral(".jsonl")), tr("JSON lines (*.jsonl)"))
                                : QFileDialog::getSaveFileName(m_dashboard.get(), tr("Save the trained model"),
                                    QDir::home().filePath(jobId + QStringLiteral(".pt")), tr("PyTorch weights (*.pt)"));
        if (path.isEmpty())
            return;
        saveModel(jobId, path);
    });
    connect(&dashboard, &ui::Dashboard::jobSelected, this, [this](const QString&) { refresh(); });
    connect(&dashboard.devices(), &ui::DevicesModel::enabledChanged, this, [this](const QString& device, bool enabled) {
        auto disabled = m_settings->listValue(names::ComputeDisabledDevices);
        disabled.removeAll(device);
        if (!enabled)
            disabled.append(device);
        (void)m_settings->set(names::ComputeDisabledDevices, disabled);
        (void)m_settings->save();
    });
}

void DesktopApp::connectSubmitPanel()
{
    auto& dashboard = *m_dashboard;
    auto& panel = dashboard.submitPanel();
    panel.setEstimator([this](const core::JobSpec& spec) {
        aimLink();
        return m_link.request(net::QuoteRequest::command, net::QuoteRequest { spec }.toHeader())
            .then([](const core::Result<QJsonObject>& reply) -> core::Result<core::Quote> {
                if (!reply) // "broker": no answer in time (the panel asks again); else the broker's refusal code
                    return reply.error();
                auto quote = net::QuoteReply::fromHeader(*reply);
                if (!quote)
                    return quote.error();
                return quote->quote;
            });
    });
    connect(&panel, &ui::SubmitPanel::submitRequested, this, [this](const core::JobSpec& spec) { submit(spec); });
    connect(&dashboard, &ui::Dashboard::practiceAgain, this, [this] {
        if (!m_embedded.running())
            return;
        note(QStringLiteral("info"), QStringLiteral("jobs"), QStringLiteral("another practice job for the local broker"));
        submit(demoJob());
    });
    connect(&panel, &ui::SubmitPanel::cancelRequested, this, [this] {
        if (m_submitCancel)
            m_submitCancel->store(true);
    });
}

// The tray's requests.
void DesktopApp::connectTray()
{
    connect(m_tray.get(), &ui::Tray::openDashboard, this, [this] {
        m_dashboard->show();
        m_dashboard->raise();
        m_dashboard->activateWindow();
    });
    connect(m_tray.get(), &ui::Tray::contributeToggled, this, [this](bool on) {
        if (on)
            startContributing();
        else
            stopContributing();
    });
    connect(m_tray.get(), &ui::Tray::snoozeHour, this, [this] { snoozeFor(3600); });
    connect(m_tray.get(), &ui::Tray::snoozeUntilIdle, this, &DesktopApp::snoozeUntilIdle);
    connect(m_tray.get(), &ui::Tray::devicePaused, this, [this](const QString& device, bool paused) {
        if (paused)
            m_pausedDevices.insert(device);
        else
            m_pausedDevices.remove(device);
        updateState();
    });
    connect(m_tray.get(), &ui::Tray::quit, this, &DesktopApp::quitRequested);
}

// Settings edited in the file while the app runs are picked up.
void DesktopApp::watchSettings()
{
    m_watcher.addPath(m_settings->filePath());
    connect(&m_watcher, &QFileSystemWatcher::fileChanged, this, [this](const QString& path) {
        QTimer::singleShot(200, this, [this, path] {
            if (!m_watcher.files().contains(path) && QFile::exists(path))
                m_watcher.addPath(path); // replaced by an atomic save
            for (const auto& problem : m_settings->load())
                note(QStringLiteral("warning"), QStringLiteral("settings"), problem.toString());
            applySettings();
        });
    });
}

// The tray, the window a new user sees, contributing where it was left, and the refresh tick.
QList<std::pair<QString, QString>> DesktopApp::trayDevices() const
{
    QList<std::pair<QString, QString>> devices;
    for (const auto& device : m_identity->info.devices) {
        if (device.usable)
            devices.append({ ui::DevicesModel::deviceId(device), device.name });
    }
    return devices;
}

void DesktopApp::showAtStart()
{
    m_tray->setDevices(trayDevices(), {});
    applySettings();
    const bool wasContributing = m_settings->boolValue(names::ComputeContribute);
    m_dashboard->showFirstRun(!wasContributing);
    if (ui::Tray::available())
        m_tray->show();
    if (!ui::Tray::available() || m_options.forceWindow || !wasContributing)
        m_dashboard->show();
    if (wasContributing)
        startContributing();
    connect(&m_tick, &QTimer::timeout, this, &DesktopApp::refresh);
    m_tick.start(1000);
    refresh();
}

void DesktopApp::applySettings()
{
    core::Contribution::Rules rules;
    rules.runOnlyWhenIdle = m_settings->boolValue(names::ComputeRunOnlyWhenIdle);
    rules.idleSeconds = m_settings->intValue(names::ComputeIdleMinutes) * 60;
    rules.pauseOnBattery = m_settings->boolValue(names::ComputePauseOnBattery);
    m_contribution.setRules(rules);
    const int threads = computeThreads(*m_settings);
    m_dashboard->setLimits(threads, QThread::idealThreadCount(), int(m_settings->intValue(names::ComputeCpuPercent)));
    if (m_contributor) {
        auto& thread = m_contributor->executor().thread();
        thread.setMaxThreads(threads);
        thread.setMaxMemoryMiB(m_settings->intValue(names::ComputeMaxMemoryMiB));
        thread.setSandbox(sandboxFrom(*m_settings));
        m_contributor->executor().setToolOptions(toolOptionsFrom(*m_settings));
        thread.setCpuPercent(int(m_settings->intValue(names::ComputeCpuPercent)));
        m_dutyPercent = -1; // the governor sets its own share again on the next tick
    }
    writeAutostart(m_settings->boolValue(names::AppStartAtLogin));
    QSet<QString> disabled;
    for (const auto& device : m_settings->listValue(names::ComputeDisabledDevices))
        disabled.insert(device);
    if (m_identity) {
        QHash<QString, ui::DevicesModel::Benchmark> benchmarks;
        if (auto store = core::BenchmarkStore::open(QDir(m_dataDirectory).filePath(QStringLiteral("node.sqlite")))) {
            for (const auto& device : m_identity->info.devices) {
                if (device.kind != core::DeviceInfo::Kind::Cpu)
                    continue;
                if (auto last = (*store)->latest(QStringLiteral("cpu:0 ") + device.name); last && last->has_value()) {
                    ui::DevicesModel::Benchmark b;
                    if (auto m = (*last)->measurement(u"mlp"))
                        b.mlpSamplesPerSecond = m->value;
                    if (auto m = (*last)->measurement(u"cnn"))
                        b.cnnSamplesPerSecond = m->value;
                    if (auto m = (*last)->measurement(u"matmul"))
                        b.gflops = m->value;
                    benchmarks.insert(ui::DevicesModel::deviceId(device), b);
                }
            }
        }
        m_dashboard->devices().setDevices(m_identity->info.devices, benchmarks, disabled);
    }
    if (m_contributor && m_contributor->running()) {
        QStringList now;
        for (const auto& broker : brokers())
            now.append(broker.toString());
        if (now != m_sessionBrokers)
            restartSessions();
    }
}

void DesktopApp::writeAutostart(bool on)
{
    const QString path
        = QStandardPaths::writableLocation(QStandardPaths::ConfigLocation) + QStringLiteral("/autostart/tessera.desktop");
    if (!on) {
        QFile::remove(path);
        return;
    }
    QDir().mkpath(QFileInfo(path).absolutePath());
    // The packaged entry (installer/), or one written for a build from source.
    const QString packaged = QCoreApplication::applicationDirPath() + QStringLiteral("/../share/tessera/tessera.desktop");
    if (QFile::exists(packaged)) {
        QFile::remove(path);
        if (QFile::copy(packaged, path))
            return;
    }
    QFile file(path);
    if (file.open(QIODevice::WriteOnly))
        file.write(QStringLiteral("[Desktop Entry]\nType=Application\nName=Tessera\nComment=Contribute compute to Tessera\n"
                                  "Exec=%1\nIcon=tessera\nX-GNOME-Autostart-enabled=true\n")
                       .arg(QCoreApplication::applicationFilePath())
                       .toUtf8());
}

void DesktopApp::ensureContributor()
{
    // The compute thread starts when there is something to compute, not with the app.
    if (m_contributor)
        return;
    m_contributor = std::make_unique<Contributor>(environmentFrom(*m_settings));
    auto& thread = m_contributor->executor().thread();
    connect(
        &thread, &compute::ComputeThread::progress, this,
        [this](const compute::ShardProgress& progress) {
            if (!m_progress) { // a shard begins: its energy counts from here
                const qint64 now = m_since.elapsed();
                m_readings = m_sensors.read(now);
                m_energy.shardBegan(now, m_sensors.cpuJoules());
            }
            m_progress = progress;
            m_contribution.setTraining(true);
        },
        Qt::QueuedConnection);
    // A cancelled shard ends a "finish, then pause" too: there is nothing left to finish.
    connect(
        &thread, &compute::ComputeThread::shardCancelled, this,
        [this] {
            if (std::exchange(m_finishThenPause, false)) {
                m_contribution.setHeld(true);
                updateState();
            }
        },
        Qt::QueuedConnection);
    connect(
        &thread, &compute::ComputeThread::shardFinished, this,
        [this](const compute::ShardOutput& output) {
            const bool begun = m_progress.has_value();
            const double busySeconds = begun ? double(m_progress->busyMs) / 1000.0 : 0.0;
            m_progress.reset();
            m_contribution.setTraining(false);
            if (std::exchange(m_finishThenPause, false)) { // "finish, then pause" (the control API)
                m_contribution.setHeld(true);
                updateState();
            }
            // What the shard cost in energy, from the app's first sight of it.
            QString energy;
            if (begun) {
                const qint64 now = m_since.elapsed();
                m_readings = m_sensors.read(now);
                if (const auto shard = m_energy.shardEnded(
                        now, m_sensors.cpuJoules(), busySeconds, computeThreads(*m_settings), QDate::currentDate()))
                    energy = shard->describe();
            }
            note(QStringLiteral("info"), QStringLiteral("compute"),
                QStringLiteral("shard %1 of round %2 of %3: %4%5")
                    .arg(output.result.shard)
                    .arg(output.result.round)
                    .arg(output.result.jobId,
                        output.result.outcome == core::ShardResult::Outcome::Completed ? QStringLiteral("trained")
                                                                                       : output.result.failure,
                        energy));
        },
        Qt::QueuedConnection);

    applySettings();
}

void DesktopApp::learnRuntime()
{
    auto* watcher = new QFutureWatcher<core::Result<compute::sandbox::RuntimeInfo>>(this);
    connect(watcher, &QFutureWatcher<core::Result<compute::sandbox::RuntimeInfo>>::finished, this, [this, watcher] {
        const auto runtime = watcher->result();
        watcher->deleteLater();
        if (!runtime) {
            note(QStringLiteral("error"), QStringLiteral("compute"),
                QStringLiteral("the compute worker does not start, so this computer cannot train: %1")
                    .arg(runtime.error().toString()));
            m_contribution.setError(runtime.error().toString());
            return;
        }
        if (!m_identity)
            return;
        withRuntime(*m_identity, *runtime);
        refresh();
        // Contributing was asked for before the runtime was known: the sessions start now.
        if (m_contribution.contributing() && (!m_contributor || !m_contributor->running()) && !m_measuringFirstStart) {
            restartSessions();
            updateState();
        }
    });
    const auto settings = toolOptionsFrom(*m_settings);
    watcher->setFuture(QtConcurrent::run([settings] { return compute::sandbox::runtimeInWorker(1, settings); }));
}

void DesktopApp::restartSessions()
{
    if (!m_identity)
        return;
    if (m_identity->info.runtimeProfile.isEmpty()) // learnRuntime() starts them when it knows it
        return;
    ensureContributor();
    const auto list = brokers();
    m_sessionBrokers.clear();
    for (const auto& broker : list)
        m_sessionBrokers.append(broker.toString());
    auto status = m_contributor->start(list, m_identity->info, m_identity->keys, m_identity->signing, m_dataDirectory,
        int(m_settings->intValue(names::NetworkHeartbeatIntervalMs)), m_settings->intValue(names::CacheMaxSizeMiB) * 1024 * 1024,
        [settings = m_settings.get()](int index) { return swarmOptionsFrom(*settings, index); });
    if (!status)
        m_contribution.setError(status.error().toString());
}

void DesktopApp::startContributing()
{
    const bool firstTime = !m_settings->boolValue(names::ComputeContribute);
    // The first time on the practice network: a job to work on, so that the user sees a shard train,
    // get verified and get paid within a minute (the local broker's faucet pays for it).
    if (firstTime && m_embedded.running() && !m_demoSubmitted) {
        m_demoSubmitted = true;
        note(QStringLiteral("info"), QStringLiteral("jobs"),
            QStringLiteral("a practice job for the local broker, so that this computer has work at once"));
        submit(demoJob());
    }
    m_dashboard->showFirstRun(false);
    m_contribution.setContributing(true);
    m_tray->setContributing(true);
    if (!m_settings->boolValue(names::ComputeContribute)) {
        (void)m_settings->set(names::ComputeContribute, true);
        (void)m_settings->save();
    }
    if (!m_contributor || !m_contributor->running()) {
        if (!m_firstStartChecked && m_settings->boolValue(names::ComputeBenchmarkOnFirstStart)) {
            benchmarkOnFirstStartThen([this] {
                if (m_contribution.contributing() && (!m_contributor || !m_contributor->running()))
                    restartSessions();
                updateState();
            });
            updateState();
            return;
        }
        restartSessions();
    }
    updateState();
}

void DesktopApp::benchmarkOnFirstStartThen(std::function<void()> then)
{
    if (m_measuringFirstStart)
        return;
    m_measuringFirstStart = true;
    m_dashboard->setBenchmarkProgress(0, tr("first start: measuring this computer (about 2 s)…"));
    auto* watcher = new QFutureWatcher<core::Result<std::optional<double>>>(this);
    connect(watcher, &QFutureWatcher<core::Result<std::optional<double>>>::finished, this, [this, watcher, then] {
        const auto measured = watcher->result();
        watcher->deleteLater();
        m_measuringFirstStart = false;
        m_firstStartChecked = true;
        if (!measured) {
            note(QStringLiteral("warning"), QStringLiteral("benchmark"), measured.error().toString());
        } else if (*measured) {
            if (m_identity)
                m_identity->info.benchmarkSamplesPerSecond = **measured;
            note(QStringLiteral("info"), QStringLiteral("benchmark"),
                QStringLiteral("first start: this computer trains %1 samples/s of the zoo mlp").arg(qRound64(**measured)));
        }
        m_dashboard->setBenchmarkProgress(-1, measured && *measured ? tr("measured on first start") : QString());
        applySettings();
        then();
    });
    const QString directory = m_dataDirectory;
    const int threads = computeThreads(*m_settings);
    const auto worker = toolOptionsFrom(*m_settings);
    watcher->setFuture(
        QtConcurrent::run([directory, threads, worker] { return benchmarkOnFirstStart(directory, threads, worker); }));
}

void DesktopApp::stopContributing()
{
    m_contribution.setContributing(false);
    m_tray->setContributing(false);
    (void)m_settings->set(names::ComputeContribute, false);
    (void)m_settings->save();
    // A paused shard would never finish: drop it; a running one is finished and reported.
    if (m_contributor)
        m_contributor->stop(!m_computePaused);
    updateState();
}

void DesktopApp::snoozeFor(std::int64_t seconds)
{
    m_contribution.snoozeUntil(QDateTime::currentDateTime().addSecs(seconds));
    updateState();
}

void DesktopApp::snoozeUntilIdle()
{
    m_contribution.snoozeUntilIdle();
    updateState();
}

void DesktopApp::updateState()
{
    core::Contribution::Inputs inputs;
    if (m_contribution.contributing())
        sampleIdle(); // for the next time: DBus answers when it answers
    inputs.userIdleSeconds = m_idleSeconds.value_or(0);
    inputs.onBattery = onBattery();
    inputs.insideSchedule
        = core::Contribution::insideSchedule(m_settings->stringValue(names::ComputeSchedule), QTime::currentTime());
    m_contribution.setConnected(m_brokerReachable);
    m_contribution.update(inputs, QDateTime::currentDateTime());
    if (m_contribution.contributing())
        governDuty(); // the sensors matter while training; not read at all otherwise
    // Pausing every usable device from the tray pauses the compute thread.
    bool allPaused = false;
    if (m_identity) {
        const auto disabled = m_settings->listValue(names::ComputeDisabledDevices);
        int usable = 0, paused = 0;
        for (const auto& device : m_identity->info.devices) {
            if (!device.usable)
                continue;
            ++usable;
            const QString id = ui::DevicesModel::deviceId(device);
            paused += m_pausedDevices.contains(id) || disabled.contains(id) ? 1 : 0;
        }
        allPaused = usable > 0 && paused == usable;
    }
    m_allDevicesPaused = allPaused;
    const bool compute = m_contribution.mayCompute() && !allPaused;
    if (m_contributor && compute == m_computePaused) {
        if (compute)
            m_contributor->executor().thread().resume();
        else
            m_contributor->executor().thread().pause();
        m_computePaused = !compute;
    }
    const auto state = m_contribution.state();
    QString tooltip = QStringLiteral("Tessera: %1").arg(core::nameOf(state));
    if (!m_contribution.reason().isEmpty())
        tooltip += QStringLiteral(" (%1)").arg(m_contribution.reason());
    if (allPaused && state != core::Contribution::State::Off)
        tooltip += QStringLiteral(" (all devices paused)");
    m_tray->setState(allPaused && state != core::Contribution::State::Off ? core::Contribution::State::Paused : state, tooltip);
    publishState();
}

// What the control API says of this machine (docs/CONTROL.md): the tray's state, in its own words.
void DesktopApp::publishState()
{
    if (!m_control)
        return;
    using State = core::Contribution::State;
    const auto state = m_contribution.state();
    static const QHash<State, QString> names { { State::Off, QStringLiteral("off") },
        { State::Working, QStringLiteral("working") }, { State::Waiting, QStringLiteral("waiting") },
        { State::Paused, QStringLiteral("paused") }, { State::Snoozed, QStringLiteral("snoozed") },
        { State::Offline, QStringLiteral("offline") }, { State::Error, QStringLiteral("error") } };
    QString reason = m_contribution.reason();
    if (reason.isEmpty())
        reason = state == State::Working ? QStringLiteral("training a shard")
            : state == State::Waiting    ? QStringLiteral("waiting for work")
                                         : QStringLiteral("contributing is switched off");
    NodeControl::Published published;
    published.state = names.value(state);
    published.reason = reason;
    published.paused = state == State::Paused || state == State::Snoozed;
    if (m_allDevicesPaused && state != State::Off && !published.paused) { // as the tray says it
        published.state = QStringLiteral("paused");
        published.reason = QStringLiteral("every device is paused");
        published.paused = true;
    }
    published.shard = m_progress;
    if (state == State::Snoozed)
        published.snoozedUntil = m_contribution.snoozedUntil();
    published.finishThenPause = m_finishThenPause;
    published.pausedDevices = QStringList(m_pausedDevices.begin(), m_pausedDevices.end());
    for (const auto& key : NodeControl::limitKeys(true))
        published.limits.insert(key, QJsonValue::fromVariant(m_settings->value(key)));
    published.stake = m_account ? QJsonValue(QJsonObject { { QStringLiteral("broker"), m_accountBroker },
                          { QStringLiteral("balance"), m_account->balance.toString() },
                          { QStringLiteral("stake"), m_account->stake.toString() } })
                                : QJsonValue(QJsonValue::Null);
    published.actionsTaken = m_controlActions;
    m_control->publish(published);
}

// One action of the control API, checked by it (docs/CONTROL.md, "Actions"), carried out as the
// tray and the settings dialog would.
void DesktopApp::takeControlAction(const NodeControl::Action& action)
{
    if (action.name == u"pause" || action.name == u"resume") {
        m_contribution.setHeld(action.name == u"pause");
        if (action.name == u"resume") {
            m_contribution.endSnooze();
            m_finishThenPause = false;
        }
    } else if (action.name == u"snooze") {
        m_contribution.snoozeUntil(action.until);
    } else if (action.name == u"finish") {
        // With no shard in training there is nothing to finish: it pauses now.
        // The thread pauses before its next shard itself: no next shard starts while this
        // app hears of the end. With no shard in training there is nothing to finish: it pauses now.
        if (m_progress && m_contributor) {
            m_finishThenPause = true;
            m_contributor->executor().thread().finishCurrentThenPause();
        } else {
            m_contribution.setHeld(true);
        }
    } else if (action.name == u"device") {
        if (action.paused)
            m_pausedDevices.insert(action.device);
        else
            m_pausedDevices.remove(action.device);
        m_tray->setDevices(trayDevices(), m_pausedDevices);
    } else if (action.name == u"limits") {
        for (const auto& [key, value] : action.limits)
            (void)m_settings->set(key, value); // checked by the API as set() checks it
        if (auto saved = m_settings->save(); !saved)
            note(QStringLiteral("error"), QStringLiteral("control"), saved.error().toString());
        applySettings();
    }
    m_controlActions = action.sequence;
    updateState();
}

void DesktopApp::startControl()
{
    // Actions come on the control thread, and are carried out here, where the tray lives.
    auto control = NodeControl::start(*m_settings, m_dataDirectory,
        { m_identity->info.nodeId, m_identity->info.name, m_identity->info.devices }, [this](const NodeControl::Action& action) {
            QMetaObject::invokeMethod(
                this, [this, action] { takeControlAction(action); }, Qt::QueuedConnection);
        });
    if (!control)
        return note(QStringLiteral("warning"), QStringLiteral("control"),
            QStringLiteral("the control API is off: %1").arg(control.error().toString()));
    m_control = std::move(*control);
    if (m_control)
        note(QStringLiteral("info"), QStringLiteral("control"),
            QStringLiteral("control API and its web dashboard at %1 (its token is %2)")
                .arg(m_control->address(), QDir(m_dataDirectory).filePath(QStringLiteral("control.token"))));
}

// The Machines tab (docs/APP.md, "Machines"): this computer through its own control API, and the
// nodes the user added. Their pushed states are shown at most 4 times a second.
void DesktopApp::startMachines()
{
    m_machines = std::make_unique<Machines>(QDir(m_dataDirectory).filePath(QStringLiteral("machines.json")));
    if (m_control) {
        const QHostAddress bind(m_settings->stringValue(names::ControlBind));
        const auto token = core::readFile(QDir(m_dataDirectory).filePath(QStringLiteral("control.token")));
        if (token)
            m_machines->setLocal({ control::localHostFor(bind), m_control->port(), token->trimmed(), m_control->fingerprint() });
    }
    if (auto loaded = m_machines->load(); !loaded)
        note(QStringLiteral("warning"), QStringLiteral("machines"), loaded.error().toString());
    m_machinesShown.setSingleShot(true);
    connect(&m_machinesShown, &QTimer::timeout, this, [this] {
        m_dashboard->machines().setRows(m_machines->rows());
        m_dashboard->machines().setTotals(m_machines->totals());
    });
    connect(m_machines.get(), &Machines::changed, this, [this] {
        if (!m_machinesShown.isActive())
            m_machinesShown.start(250);
    });
    auto& view = m_dashboard->machines();
    // The rows are shown again at once after an add or a remove: the next click's row is the one seen.
    const auto showNow = [this] {
        m_machinesShown.stop();
        m_dashboard->machines().setRows(m_machines->rows());
        m_dashboard->machines().setTotals(m_machines->totals());
    };
    connect(&view, &ui::MachinesView::addMachine, this, [this, showNow](const QString& address) {
        const auto added = m_machines->add(address);
        showNow();
        m_dashboard->machines().setAddError(added ? QString() : added.error().message);
        if (added)
            note(QStringLiteral("info"), QStringLiteral("machines"), QStringLiteral("added %1").arg(address.section(u'#', 0, 0)));
    });
    connect(&view, &ui::MachinesView::removeMachine, this, [this, showNow](int row) {
        if (auto removed = m_machines->remove(row); !removed)
            m_dashboard->machines().setAddError(removed.error().message);
        showNow();
    });
    connect(&view, &ui::MachinesView::pauseMachine, this, [this](int row) { m_machines->act(row, QStringLiteral("pause")); });
    connect(&view, &ui::MachinesView::resumeMachine, this, [this](int row) { m_machines->act(row, QStringLiteral("resume")); });
}

void DesktopApp::governDuty()
{
    const qint64 now = m_since.elapsed();
    const double seconds = m_lastGovernedMs < 0 ? 1.0 : double(now - m_lastGovernedMs) / 1000.0;
    m_lastGovernedMs = now;
    m_readings = m_sensors.read(now);
    int percent = int(m_settings->intValue(names::ComputeCpuPercent));
    // Someone at the keyboard: slower, not stopped (RunOnlyWhenIdle pauses instead, in Contribution).
    const bool inUse = m_idleSeconds.has_value() && *m_idleSeconds < m_settings->intValue(names::ComputeIdleMinutes) * 60;
    if (inUse)
        percent = std::min(percent, int(m_settings->intValue(names::ComputeCpuPercentWhileInUse)));
    if (const auto limit = m_settings->intValue(names::ComputeMaxTemperatureC); limit > 0) {
        if (!m_governor || m_governor->target() != double(limit))
            m_governor.emplace(double(limit));
        // The hottest device it can read: the CPU's sensors, each GPU's NVML.
        std::optional<double> hottest = m_readings.cpuTemperatureC;
        for (const auto& gpu : std::as_const(m_gpuReadings))
            if (gpu.temperatureC && (!hottest || *gpu.temperatureC > *hottest))
                hottest = gpu.temperatureC;
        percent = std::min(percent, m_governor->update(hottest, seconds));
    } else {
        m_governor.reset();
    }
    if (m_contributor && percent != m_dutyPercent) {
        m_contributor->executor().thread().setCpuPercent(percent);
        m_dutyPercent = percent;
    }
}

void DesktopApp::sampleGpus()
{
    if (!m_identity || m_gpuSampling)
        return;
    const bool cuda = std::any_of(m_identity->info.devices.cbegin(), m_identity->info.devices.cend(),
        [](const core::DeviceInfo& device) { return device.kind == core::DeviceInfo::Kind::Cuda; });
    const qint64 now = m_since.elapsed();
    if (!cuda || (m_lastGpuSampleMs >= 0 && now - m_lastGpuSampleMs < 10'000))
        return;
    m_gpuSampling = true;
    m_lastGpuSampleMs = now;
    QtConcurrent::run([] {
        return compute::probeGpusInChild(compute::defaultProbeProgram(), 5000);
    }).then(this, [this](const compute::DeviceReport& report) {
        m_gpuSampling = false;
        QHash<QString, ui::DevicesModel::Reading> readings;
        for (const auto& device : report.devices) {
            ui::DevicesModel::Reading reading;
            if (device.temperatureCelsius >= 0) {
                reading.temperatureC = double(device.temperatureCelsius);
                reading.temperatureSource = QStringLiteral("NVML");
            }
            if (device.powerWatts >= 0)
                reading.watts = double(device.powerWatts);
            readings.insert(ui::DevicesModel::deviceId(device), reading);
        }
        m_gpuReadings = readings;
    });
}

void DesktopApp::showReadings()
{
    if (!m_identity)
        return;
    if (!m_contribution.contributing()) // governDuty reads them otherwise
        m_readings = m_sensors.read(m_since.elapsed());
    QHash<QString, ui::DevicesModel::Reading> readings = m_gpuReadings;
    const bool working = m_contributor && !m_computePaused && m_contribution.state() == core::Contribution::State::Working;
    const int duty = m_dutyPercent < 0 ? 100 : m_dutyPercent;
    for (const auto& device : m_identity->info.devices) {
        if (device.kind != core::DeviceInfo::Kind::Cpu)
            continue;
        ui::DevicesModel::Reading cpu;
        cpu.loadPercent = working && m_progress ? duty : 0;
        cpu.temperatureC = m_readings.cpuTemperatureC;
        cpu.temperatureSource = m_readings.cpuTemperatureSource;
        if (m_readings.cpuWatts) {
            cpu.watts = m_readings.cpuWatts;
        } else if (working && m_progress) {
            cpu.watts = EnergyMeter::EstimatedWattsPerThread * double(computeThreads(*m_settings)) * double(duty) / 100.0;
            cpu.wattsEstimated = true;
        }
        readings.insert(ui::DevicesModel::deviceId(device), cpu);
    }
    m_dashboard->devices().setReadings(readings);
}

void DesktopApp::sampleIdle()
{
    if (m_idleSampling)
        return;
    m_idleSampling = true;
    QtConcurrent::run([] { return userIdleSeconds(); }).then(this, [this](std::optional<std::int64_t> idle) {
        m_idleSeconds = idle;
        m_idleSampling = false;
    });
}

void DesktopApp::notifyTransitions(const QList<core::ResultEntry>& results)
{
    const bool first = !m_statesPrimed; // what was there at start is no news
    m_statesPrimed = true;
    for (const auto& result : results) {
        const QString& assignment = result.assignment;
        using State = core::NodeResultState;
        const State state = result.state;
        const auto before = m_lastStates.constFind(assignment);
        const bool changed = before == m_lastStates.constEnd() || *before != state;
        m_lastStates.insert(assignment, state);
        if (first || !changed)
            continue;
        const QString what
            = QStringLiteral("shard %1 of round %2").arg(QString::number(result.shard), QString::number(result.round));
        if (state == State::Verified || state == State::Disputed || state == State::Slashed || state == State::Paid) {
            note(state == State::Slashed ? QStringLiteral("warning") : QStringLiteral("info"), QStringLiteral("verification"),
                QStringLiteral("%1: %2 %3").arg(what, core::nameOf(state), result.paid));
            if (!m_settings->boolValue(names::AppNotifications))
                continue;
            if (state == State::Disputed || state == State::Slashed) { // at once: the user's stake is at stake
                m_tray->notify(state == State::Disputed ? tr("Result disputed") : tr("Stake slashed"), what);
            } else if (state == State::Paid) {
                if (!m_toldFirstPayment) {
                    m_toldFirstPayment = true;
                    m_tray->notify(tr("Paid %1 credits").arg(result.paid), tr("the first paid shard: %1").arg(what));
                    continue;
                }
                ++m_digestShards;
                m_digestCredits += result.paid.toDouble();
                if (m_digestSinceMs < 0)
                    m_digestSinceMs = m_since.elapsed();
            }
        }
    }
    flushDigest();
}

void DesktopApp::flushDigest(bool force)
{
    constexpr qint64 Window = 10 * 60 * 1000;
    if (m_digestShards == 0 || (!force && m_since.elapsed() - m_digestSinceMs < Window))
        return;
    m_tray->notify(tr("Paid %n shard(s), %1 credits", nullptr, m_digestShards).arg(m_digestCredits, 0, 'f', 2),
        tr("in the last %1 minutes").arg(std::max<qint64>(1, (m_since.elapsed() - m_digestSinceMs + 59'999) / 60'000)));
    m_digestShards = 0;
    m_digestCredits = 0.0;
    m_digestSinceMs = -1;
}

void DesktopApp::refresh()
{
    ++m_ticks;
    warnOfBrokenLog();
    // In the tray only (or on the welcome page), the state is what matters: the tables and charts
    // refresh every 5 s.
    if ((!m_dashboard->isVisible() || m_dashboard->firstRunShown()) && m_ticks % 5 != 0) {
        updateState();
        return;
    }
    sampleGpus();
    showReadings();
    const auto list = brokers();
    // Each part on its own: a result log that cannot be read now stops neither the broker's
    // questions nor the Overview.
    askBroker(list);
    const Earned earned = showResults();
    updateState();
    m_dashboard->setOverview(overviewOf(list, earned));
}

void DesktopApp::warnOfBrokenLog()
{
    // Loud, once: a broker showed a ledger log that does not extend one its network signed
    // (docs/LEDGER.md, "Watching the log"); its sessions take no more work.
    if (m_logBrokenShown || !m_contributor)
        return;
    const QString why = m_contributor->logBroken();
    if (why.isEmpty())
        return;
    m_logBrokenShown = true;
    m_tray->notify(tr("The broker's ledger was rewritten"),
        tr("%1. This node takes no more work from that network; the evidence is in log-evidence/ in the data folder.").arg(why));
    note(QStringLiteral("warning"), QStringLiteral("ledger"), QStringLiteral("LEDGER LOG BROKEN: ") + why);
}

void DesktopApp::askBroker(const QList<net::BrokerAddress>& list)
{
    // The first broker: balance, stake and the user's jobs. Asked again only when the last answers
    // are in: a slow broker gets no pile of requests.
    if (list.isEmpty() || !m_identity || !(m_ticks % 2 == 1 || m_ticks < 3) || m_link.pending() != 0)
        return;
    aimLink();
    m_brokerAnswered = false;
    const QString endpoint = list.first().endpoint;
    m_link.request(net::BalanceRequest::command, net::BalanceRequest { m_identity->info.nodeId }.toHeader())
        .then(this, [this, endpoint](const core::Result<QJsonObject>& account) { accountAnswered(account, endpoint); });
    m_link.request(net::Command::List, {}).then(this, [this](const core::Result<QJsonObject>& reply) { jobsAnswered(reply); });
}

DesktopApp::Earned DesktopApp::showResults()
{
    if (!m_results)
        return m_earned;
    const auto results = m_results->list(500);
    if (!results) { // said once; the last figures stay
        if (!m_resultsUnreadable)
            note(QStringLiteral("error"), QStringLiteral("results"),
                tr("Cannot read this computer's results: %1").arg(results.error().message));
        m_resultsUnreadable = true;
        return m_earned;
    }
    m_resultsUnreadable = false;
    m_dashboard->results().setResults(*results);
    notifyTransitions(*results);
    QList<ui::Earning> earnings;
    QList<ui::StakeEventsModel::Event> events;
    Earned earned;
    const auto midnight = QDateTime(QDate::currentDate(), QTime(0, 0));
    const auto weekAgo = QDateTime(QDate::currentDate().addDays(-6), QTime(0, 0));
    for (const auto& result : *results) {
        for (const auto& step : result.history) {
            const auto at = QDateTime::fromMSecsSinceEpoch(step.at);
            if (step.state == core::NodeResultState::Paid) {
                const double credits = result.paid.toDouble();
                earnings.append({ at, credits });
                earned.today += at >= midnight ? credits : 0.0;
                earned.week += at >= weekAgo && credits > 0 ? credits : 0.0;
            } else if (step.state == core::NodeResultState::Slashed) {
                events.append({ result.assignment, at, QStringLiteral("slashed"), QString(), result.detail });
            }
        }
    }
    m_dashboard->setEarnings(earnings, QDateTime::currentDateTime());
    m_dashboard->stakeEvents().setEvents(events);
    m_earned = earned;
    return earned;
}

ui::Overview DesktopApp::overviewOf(const QList<net::BrokerAddress>& list, const Earned& earned) const
{
    ui::Overview overview;
    overview.earnedToday = tr("%1 credits earned today").arg(earned.today, 0, 'f', 2);
    overview.earnedWeek = tr("%1 credits in the last 7 days").arg(earned.week, 0, 'f', 2);
    overview.energy = m_energy.overviewLine(
        QDate::currentDate(), m_settings->stringValue(names::AppElectricityPricePerKWh).toDouble(), earned.today);
    overview.devices = deviceLines().join(u'\n');
    QStringList names;
    for (const auto& broker : list)
        names.append(m_embedded.running() && broker.endpoint == m_embedded.address()
                ? QStringLiteral("%1 (local, on this computer)").arg(broker.endpoint)
                : broker.endpoint);
    overview.brokers = names.join(QStringLiteral(", "));
    overview.machines = m_machines && m_machines->count() > 1 ? m_machines->totals() : QString();
    const bool practiceOnly = m_embedded.running() && !list.isEmpty()
        && std::all_of(list.begin(), list.end(), [this](const auto& broker) { return broker.endpoint == m_embedded.address(); });
    if (m_account) {
        overview.balance = tr("%1 credits in the wallet").arg(m_account->balance.toString());
        if (practiceOnly)
            overview.balance += tr(" (practice credits: the local broker's faucet gave this computer its stake and "
                                   "the practice jobs' budgets, and they count on this computer only)");
        overview.stake = tr("%1 credits bonded").arg(m_account->stake.toString());
        overview.atRisk = m_progress.has_value() ? tr("%1 credits (half of the stake, if this shard's result were proven false)")
                                                       .arg(double(m_account->stake.micro()) / 1e6 / 2.0, 0, 'f', 2)
                                                 : tr("none while no shard is training");
    }
    overview.state = core::nameOf(m_contribution.state());
    overview.reason = m_contribution.reason();
    // Waiting: what comes next (on the practice network, nothing will unless the user asks).
    if (m_contribution.state() == core::Contribution::State::Waiting) {
        overview.practice = practiceOnly;
        overview.next = practiceOnly
            ? tr("The practice network has no more work for this computer. To earn credits that count, join a "
                 "network: paste its address below. Or run another practice job, or submit a job of your own "
                 "from Jobs (this computer trains it too).")
            : tr("No shard for this computer right now: the brokers hand out work as jobs come in, and it "
                 "starts by itself. Meanwhile you may join another network, or submit a job from Jobs.");
    }
    describeShard(overview);
    if (const auto serving = servingLine(); m_progress && !serving.isEmpty())
        overview.shard += QStringLiteral("; ") + serving; // a replica serves beside the shard
    return overview;
}

QStringList DesktopApp::deviceLines() const
{
    QStringList lines;
    QString cpu = tr("CPU: %1 thread(s), working %2% of the time")
                      .arg(computeThreads(*m_settings))
                      .arg(m_dutyPercent < 0 ? 100 : m_dutyPercent);
    if (m_readings.cpuTemperatureC)
        cpu += tr(", %1 °C").arg(*m_readings.cpuTemperatureC, 0, 'f', 0);
    if (m_readings.cpuWatts)
        cpu += tr(", %1 W").arg(*m_readings.cpuWatts, 0, 'f', 0);
    if (m_governor && m_governor->percent() < 100)
        cpu += tr(" (held under %1 °C)").arg(m_governor->target(), 0, 'f', 0);
    lines.append(cpu);
    if (!m_identity)
        return lines;
    for (const auto& device : m_identity->info.devices) {
        const auto reading = m_gpuReadings.constFind(ui::DevicesModel::deviceId(device));
        if (device.kind == core::DeviceInfo::Kind::Cpu || reading == m_gpuReadings.constEnd())
            continue;
        QStringList parts;
        if (reading->temperatureC)
            parts.append(tr("%1 °C").arg(*reading->temperatureC, 0, 'f', 0));
        if (reading->watts)
            parts.append(tr("%1 W").arg(*reading->watts, 0, 'f', 0));
        if (!parts.isEmpty())
            lines.append(tr("%1: %2").arg(device.name, parts.join(QStringLiteral(", "))));
    }
    return lines;
}

QString DesktopApp::servingLine() const
{
    // Served models this node hosts (docs/JOBS.md, "Served models").
    QStringList serving;
    if (m_contributor) {
        for (const auto& replica : m_contributor->executor().hosted())
            serving.append(tr("serving job %1's model: %2 answered, %3 tokens")
                               .arg(replica.jobId, QString::number(replica.answered), QString::number(replica.tokens)));
    }
    return serving.join(QStringLiteral("; "));
}

void DesktopApp::describeShard(ui::Overview& overview) const
{
    const QString serving = servingLine();
    if (!m_progress) {
        overview.shard = serving.isEmpty() ? tr("none") : serving;
        overview.pauseCost.clear();
        return;
    }
    overview.progressPercent = m_progress->steps > 0 ? int(m_progress->step * 100 / m_progress->steps) : 0;
    if (!m_progress->inference.isEmpty()) {
        // An inference shard: what it does for whom, in batches (or prompts) and inputs.
        const bool generating = m_progress->inference == u"generate";
        overview.shard
            = tr("%1 for job %2, shard %3: %4 %5 of %6")
                  .arg(generating                             ? tr("generating")
                          : m_progress->inference == u"score" ? tr("scoring")
                                                              : tr("labelling"),
                      m_progress->jobId, QString::number(m_progress->shard + 1), generating ? tr("prompt") : tr("batch"),
                      QString::number(m_progress->step), QString::number(m_progress->steps));
        overview.speed = tr("%1 %2/s, %3 s left")
                             .arg(m_progress->samplesPerSecond, 0, 'f', generating ? 2 : 0)
                             .arg(generating ? tr("prompts") : tr("inputs"))
                             .arg(double(m_progress->etaMs) / 1000.0, 0, 'f', 1);
        overview.pauseCost = tr("Pausing now costs nothing: the shard stops after this step and resumes there");
        return;
    }
    describeTraining(*m_progress, overview);
}

void DesktopApp::describeTraining(const compute::ShardProgress& progress, ui::Overview& overview)
{
    const QString where = progress.stages > 0 // a pipeline's stage: its place, and so its share of the model
        ? tr("stage %1 of %2 of job %3, round %4, shard %5")
              .arg(QString::number(progress.stage + 1), QString::number(progress.stages), progress.jobId,
                  QString::number(progress.round + 1), QString::number(progress.shard + 1))
        : tr("job %1, round %2, shard %3")
              .arg(progress.jobId, QString::number(progress.round + 1), QString::number(progress.shard + 1));
    overview.shard = tr("%1: step %2 of %3").arg(where, QString::number(progress.step), QString::number(progress.steps));
    overview.speed = tr("%1 samples/s, %2 s left, loss %3")
                         .arg(progress.samplesPerSecond, 0, 'f', 0)
                         .arg(double(progress.etaMs) / 1000.0, 0, 'f', 1)
                         .arg(progress.loss, 0, 'f', 3);
    overview.pauseCost = progress.stages > 0
        ? tr("Pausing now gives this stage back after step %1: its partners cannot wait, so the broker gives it to "
             "another node and these %1 steps are not paid")
              .arg(progress.step)
        : tr("Pausing now costs nothing: the shard stops after step %1 and resumes there (if its deadline passes "
             "first, another node gets it and these %1 steps are not paid)")
              .arg(progress.step);
}

void DesktopApp::note(const QString& level, const QString& area, const QString& text)
{
    core::LogTail::process().append(level, QStringLiteral("%1: %2").arg(area, text)); // the control API's log
    m_dashboard->log().append(QDateTime::currentDateTime(), level, area, text);
}

// One identity for the node and the owner (net/identity.h): what this computer earns pays for the
// jobs its user submits, on the local broker and on any other.
std::optional<net::CurveKeys> DesktopApp::identityKeys() const
{
    return m_identity ? std::optional<net::CurveKeys>(m_identity->keys) : std::nullopt;
}

void DesktopApp::aimLink()
{
    const auto list = brokers();
    // Another broker (or none): the finished jobs the submit panel offers were the last one's.
    const QString endpoint = list.isEmpty() ? QString() : list.first().endpoint;
    if (endpoint != m_trainedFrom) {
        m_trainedFrom = endpoint;
        m_trainedJobs.clear();
        m_trainedAsked.clear();
        if (m_dashboard) // (not made yet when the app first aims its link)
            m_dashboard->submitPanel().setTrainedJobs({});
    }
    m_link.setBroker(list.isEmpty() ? std::nullopt : std::optional<net::BrokerAddress>(list.first()), identityKeys());
}

void DesktopApp::accountAnswered(const core::Result<QJsonObject>& account, const QString& endpoint)
{
    const bool reachable = account.ok();
    if (reachable != m_brokerReachable && m_ticks > 1) {
        m_tray->notify(reachable ? tr("Broker back") : tr("Broker lost"), endpoint);
        note(reachable ? QStringLiteral("info") : QStringLiteral("warning"), QStringLiteral("network"),
            reachable ? QStringLiteral("broker back") : QStringLiteral("broker lost"));
    }
    m_brokerReachable = reachable;
    if (account) {
        m_account = core::broker::AccountRecord::fromJson(*account);
        m_accountBroker = endpoint;
    }
}

void DesktopApp::jobsAnswered(const core::Result<QJsonObject>& reply)
{
    m_brokerAnswered = true;
    if (!reply)
        return;
    const auto jobs = net::ListReply::fromHeader(*reply);
    if (!jobs)
        return;
    m_dashboard->jobs().setJobs(jobs->jobs);
    for (const auto& job : jobs->jobs) {
        if (job.state != core::broker::JobState::Finished || !job.inference.isEmpty() || !job.full
            || m_trainedAsked.contains(job.id))
            continue;
        m_trainedAsked.insert(job.id);
        m_link.request(net::Command::Status, net::JobRequest { job.id }.toHeader())
            .then(this, [this](const core::Result<QJsonObject>& answer) {
                const auto status
                    = answer ? net::StatusReply::fromHeader(*answer) : core::Result<net::StatusReply>(answer.error());
                if (!status || !core::broker::trainedModelOf(status->job))
                    return;
                m_trainedJobs.insert(status->job.id, status->job);
                m_dashboard->submitPanel().setTrainedJobs(m_trainedJobs.values());
            });
    }
    const QString selected = m_dashboard->selectedJob();
    for (const auto& job : jobs->jobs) {
        if (!job.inference.isEmpty())
            m_inferenceJobs.insert(job.id, job.inference);
        if (job.id != selected)
            continue;
        QList<ui::RoundPoint> points;
        for (const auto& round : job.history)
            points.append({ int(round.round), round.testAccuracy, round.testLoss });
        m_dashboard->setJobRounds(selected, points, job.languageModel);
        if (job.inference == u"serve")
            m_dashboard->setJobSample(tr("A served model: it answers requests as they come (tessera-job ask %1); nothing "
                                         "to save")
                                          .arg(job.id));
        else if (!job.inference.isEmpty() && job.state == core::broker::JobState::Finished)
            showOutputs(selected, job.inference);
        else if (!job.inference.isEmpty())
            m_dashboard->setJobSample(
                tr("%1 of %2 shards done; the outputs come when every shard is in").arg(job.shardsDone).arg(job.shards));
        else if (job.languageModel && !job.history.isEmpty())
            showSample(selected, int(job.history.size()));
    }
}

QFuture<core::Result<QString>> DesktopApp::submit(core::JobSpec spec)
{
    auto& panel = m_dashboard->submitPanel();
    if (m_submitCancel)
        return QtFuture::makeReadyFuture(
            core::Result<QString>(core::Error { QStringLiteral("jobs"), QStringLiteral("a submission is under way") }));
    aimLink();
    m_submitCancel = std::make_shared<std::atomic<bool>>(false);
    panel.setSubmitting(true);
    QPointer<ui::SubmitPanel> shown(&panel);
    auto progress = [shown](std::int64_t done, std::int64_t total) {
        QMetaObject::invokeMethod(shown, [shown, done, total] {
            if (shown)
                shown->setSubmitProgress(done, total);
        });
    };
    return m_link.submit(std::move(spec), QDir::currentPath(), progress, m_submitCancel)
        .then(this, [this](const core::Result<QString>& submitted) {
            m_submitCancel.reset();
            m_dashboard->submitPanel().setSubmitting(false);
            note(submitted ? QStringLiteral("info") : QStringLiteral("error"), QStringLiteral("jobs"),
                submitted ? QStringLiteral("submitted %1").arg(*submitted) : submitted.error().toString());
            refresh();
            return submitted;
        });
}

QFuture<core::Result<QString>> DesktopApp::saveModel(const QString& jobId, const QString& path)
{
    aimLink();
    auto cancel = std::make_shared<std::atomic<bool>>(false);
    // A dialog that shows the download and may cancel it; the window stays usable meanwhile.
    QPointer<QProgressDialog> dialog
        = new QProgressDialog(tr("Saving the model of job %1…").arg(jobId), tr("Cancel"), 0, 1000, m_dashboard.get());
    dialog->setWindowModality(Qt::NonModal);
    dialog->setMinimumDuration(500);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &QProgressDialog::canceled, this, [cancel] { cancel->store(true); });
    auto progress = [dialog](std::int64_t done, std::int64_t total) {
        QMetaObject::invokeMethod(dialog, [dialog, done, total] {
            if (dialog && total > 0)
                dialog->setValue(int(std::clamp<std::int64_t>(done * 1000 / total, 0, 999)));
        });
    };
    return m_link.saveModel(jobId, path, progress, cancel).then(this, [this, dialog](const core::Result<QString>& saved) {
        if (dialog)
            dialog->close();
        note(saved ? QStringLiteral("info") : QStringLiteral("error"), QStringLiteral("jobs"),
            saved ? QStringLiteral("saved %1").arg(*saved) : saved.error().toString());
        return saved;
    });
}

void DesktopApp::showSample(const QString& jobId, int rounds)
{
    const QString key = QStringLiteral("%1/%2").arg(jobId).arg(rounds);
    const auto list = brokers();
    if (key == m_sampled || list.isEmpty())
        return;
    m_sampled = key;
    m_dashboard->setJobSample(tr("Writing text with round %1's weights…").arg(rounds));
    auto* watcher = new QFutureWatcher<QString>(this);
    connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher, jobId, rounds] {
        watcher->deleteLater();
        if (m_dashboard->selectedJob() == jobId)
            m_dashboard->setJobSample(tr("Written by round %1's weights (seed 1):\n%2").arg(rounds).arg(watcher->result()));
    });
    const auto address = list.first();
    const auto keys = identityKeys();
    const auto worker = toolOptionsFrom(*m_settings);
    watcher->setFuture(QtConcurrent::run([address, keys, jobId, worker]() -> QString {
        net::BrokerClient client(address, keys, 30'000);
        auto reply = client.request(net::Command::Status, net::JobRequest { jobId }.toHeader());
        if (!reply)
            return reply.error().message;
        const auto status = net::StatusReply::fromHeader(*reply);
        if (!status)
            return status.error().message;
        auto spec = core::JobSpec::fromJson(status->job.spec);
        if (!spec)
            return spec.error().message;
        auto weights = client.jobWeights(jobId);
        if (!weights)
            return weights.error().message;
        compute::SampleOptions options;
        options.tokens = 240;
        options.seed = 1;
        auto text = compute::sandbox::sampleInWorker(*spec, *weights, options, {}, worker);
        return text ? QString::fromUtf8(*text) : text.error().message;
    }));
}

void DesktopApp::showOutputs(const QString& jobId, const QString& task)
{
    const QString key = QStringLiteral("outputs/%1").arg(jobId);
    const auto list = brokers();
    if (key == m_sampled || list.isEmpty())
        return;
    m_sampled = key;
    m_dashboard->setJobSample(tr("Fetching the outputs…"));
    auto* watcher = new QFutureWatcher<QString>(this);
    connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher, jobId] {
        watcher->deleteLater();
        if (m_dashboard->selectedJob() == jobId)
            m_dashboard->setJobSample(watcher->result());
    });
    const auto address = list.first();
    const auto keys = identityKeys();
    watcher->setFuture(QtConcurrent::run([address, keys, jobId, task]() -> QString {
        net::BrokerClient client(address, keys, 30'000);
        auto bytes = client.jobWeights(jobId);
        if (!bytes)
            return bytes.error().message;
        auto lines = core::inference::linesOf(task == u"generate" ? core::inference::withText(*bytes) : *bytes);
        if (!lines)
            return lines.error().message;
        QStringList shown;
        for (const auto& line : lines->mid(0, 5))
            shown.append(QString::fromUtf8(line.left(400)));
        return tr("The first of %1 outputs (Save… writes them all, one JSON line per input):\n%2")
            .arg(lines->size())
            .arg(shown.join(u'\n'));
    }));
}

void DesktopApp::runBenchmark()
{
    m_dashboard->setBenchmarkProgress(0, tr("measuring…"));
    const QString database = QDir(m_dataDirectory).filePath(QStringLiteral("node.sqlite"));
    // The benchmark runs on a worker thread; its own torch work never touches the compute thread's.
    auto* watcher = new QFutureWatcher<QString>(this);
    connect(watcher, &QFutureWatcher<QString>::finished, this, [this, watcher] {
        m_dashboard->setBenchmarkProgress(-1, watcher->result());
        watcher->deleteLater();
        applySettings();
    });
    const int threads = computeThreads(*m_settings);
    QPointer<ui::Dashboard> dashboard = m_dashboard.get();
    const auto worker = toolOptionsFrom(*m_settings);
    watcher->setFuture(QtConcurrent::run([threads, database, dashboard, worker]() -> QString {
        compute::BenchmarkOptions options;
        options.threads = threads;
        options.maxRepetitions = 15;
        int done = 0;
        options.progress = [&done, dashboard](const QString& name, int repetition) {
            ++done;
            QMetaObject::invokeMethod(dashboard, [dashboard, name, repetition, done] {
                if (dashboard)
                    dashboard->setBenchmarkProgress(
                        std::min(95, done * 2), QStringLiteral("%1, repetition %2").arg(name).arg(repetition));
            });
        };
        const auto record = compute::sandbox::benchmarkInWorker(options, worker);
        if (!record)
            return record.error().toString();
        auto store = core::BenchmarkStore::open(database);
        if (!store)
            return store.error().toString();
        if (auto saved = (*store)->save(*record); !saved)
            return saved.error().toString();
        QStringList parts;
        for (const auto* name : { "mlp", "cnn", "matmul" }) {
            if (auto m = record->measurement(QString::fromLatin1(name)))
                parts.append(QStringLiteral("%1 %2").arg(QString::fromLatin1(name)).arg(m->value, 0, 'f', 0));
        }
        return QStringLiteral("measured: ") + parts.join(QStringLiteral(", "));
    }));
}

core::Status DesktopApp::screenshot(const QString& directory)
{
    if (!QDir().mkpath(directory))
        return core::Error { QStringLiteral("screenshot"), QStringLiteral("cannot create %1").arg(directory) };
    refresh();
    m_dashboard->resize(1100, 760);
    for (const auto& name : m_dashboard->tabNames()) {
        m_dashboard->showTab(name);
        QCoreApplication::processEvents();
        const QString file = QDir(directory).filePath(name.toLower() + QStringLiteral(".png"));
        if (!m_dashboard->grab().save(file))
            return core::Error { QStringLiteral("screenshot"), QStringLiteral("cannot write %1").arg(file) };
    }
    return {};
}

} // namespace tessera::app
