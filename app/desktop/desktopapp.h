#pragma once

#include "brokerlink.h"
#include "contributor.h"
#include "embeddedbroker.h"
#include "energymeter.h"
#include "machines.h"

#include "../common/nodecontrol.h"
#include "../common/nodesetup.h"

#include <compute/devices/sensors.h>
#include <compute/supervisor/computethread.h>
#include <core/broker/records.h>
#include <core/contribution.h>
#include <core/resultlog.h>
#include <core/settings/settings.h>
#include <core/thermal.h>
#include <ui/widgets/dashboard.h>
#include <ui/widgets/tray.h>

#include <QElapsedTimer>
#include <QFileSystemWatcher>
#include <QJsonObject>
#include <QObject>
#include <QTimer>

#include <memory>
#include <optional>

namespace tessera::app {

// The desktop app's wiring: settings, the embedded broker, the node sessions and compute thread,
// the contribute / snooze / pause state, and the dashboard and tray that show it all. Every second
// it reads the node's result log and asks its broker for the balance and the jobs, and pushes plain
// rows to the dashboard's models. Nothing on the GUI thread waits on a network: the broker is
// asked through a BrokerLink, and its answers fill the window in when they come.
class DesktopApp final : public QObject {
    Q_OBJECT

public:
    struct Options {
        QString configPath;
        bool forceWindow = false; // show the dashboard even when a tray exists
    };

    explicit DesktopApp(Options options, QObject* parent = nullptr);
    ~DesktopApp() override;

    // Loads settings, detects devices, starts the embedded broker when no broker is configured,
    // and resumes contributing if it was on. An error is something the user must fix.
    core::Status start();
    void startContributing();
    void stopContributing();
    // Joins a network: its broker's address (tcp://host:port#KEY) becomes Node/Brokers, the local
    // practice broker stops, and contributing goes on there.
    void joinNetwork(const QString& address);
    // The practice job the local broker gets at the first "Start contributing" (none with a
    // network configured): small, clearly named, paid by the local faucet.
    static core::JobSpec demoJob();
    // The Overview's lines for a training shard in progress (a pipeline's stage says its place).
    static void describeTraining(const compute::ShardProgress& progress, ui::Overview& overview);
    void snoozeFor(std::int64_t seconds);
    void snoozeUntilIdle();
    // Submits a job to the first broker (the embedded one when there is one): its id, when the
    // broker has it. The panel shows the progress and may cancel it.
    QFuture<core::Result<QString>> submit(core::JobSpec spec);
    // Saves a job's newest weights (torch.load reads them) to `path`, whole or not at all.
    QFuture<core::Result<QString>> saveModel(const QString& jobId, const QString& path);
    // Renders every tab to DIR/<tab>.png.
    core::Status screenshot(const QString& directory);

    ui::Dashboard& dashboard() { return *m_dashboard; }
    core::Contribution& contribution() { return m_contribution; }
    QString brokerAddress() const; // the first broker
    // Runs one refresh now (the timer does it every second); the broker's answers come later.
    void refresh();
    // Broker requests in flight (the refresh asks again only when none is).
    int brokerRequestsPending() const { return m_link.pending(); }
    // The answers to the broker's last balance and jobs have come since the last refresh asked.
    bool brokerAnswered() const { return m_brokerAnswered; }
    // A shard is training now (its progress is on the Overview).
    bool training() const { return m_progress.has_value(); }

Q_SIGNALS:
    void quitRequested();

private:
    // The parts of start(), in order: settings, identity and result log; the practice broker when
    // no broker is configured; the dashboard's, submit panel's and tray's requests; the settings
    // file watched; the first window and the refresh tick.
    core::Status openNode();
    core::Status startPracticeBroker();
    void connectDashboard();
    void connectSubmitPanel();
    void connectTray();
    void watchSettings();
    void showAtStart();
    void applySettings();
    void ensureContributor();
    void restartSessions();
    void updateState();
    void notifyTransitions(const QList<core::ResultEntry>& results);
    // The parts of a refresh, each on its own.
    struct Earned {
        double today = 0.0;
        double week = 0.0;
    };
    // The first broker's balance and the user's jobs, asked when the last answers are in.
    void askBroker(const QList<net::BrokerAddress>& list);
    // The node's own results into their tabs and charts, and what they earned; where the result
    // log cannot be read now, said once, and the last figures.
    Earned showResults();
    ui::Overview overviewOf(const QList<net::BrokerAddress>& list, const Earned& earned) const;
    QStringList deviceLines() const;
    void describeShard(ui::Overview& overview) const;
    void startControl();
    void publishState();
    QString servingLine() const; // the served models this node hosts, for the Overview
    QList<net::BrokerAddress> brokers() const;
    void writeAutostart(bool on);
    void runBenchmark();
    // Text from a language model job's newest weights, written on a worker thread and shown under
    // the Jobs tab's chart; once per job and round.
    void showSample(const QString& jobId, int rounds);
    // A finished inference job's first lines (generate: with their text), under its chart.
    void showOutputs(const QString& jobId, const QString& task);
    // Compute/BenchmarkOnFirstStart, on a worker thread; then `then` on the GUI thread.
    void benchmarkOnFirstStartThen(std::function<void()> then);
    // Asks a compute worker for this node's runtime profile (off the GUI thread) and fills it in.
    void learnRuntime();
    void takeControlAction(const NodeControl::Action& action);
    void startMachines();
    QList<std::pair<QString, QString>> trayDevices() const;
    // A line in the dashboard's log, stamped now.
    void note(const QString& level, const QString& area, const QString& text);
    void warnOfBrokenLog();
    std::optional<net::CurveKeys> identityKeys() const;
    // The link points at the first broker.
    void aimLink();
    // The broker's answers, as they come.
    void accountAnswered(const core::Result<QJsonObject>& account, const QString& endpoint);
    void jobsAnswered(const core::Result<QJsonObject>& reply);
    // The user's idle time, asked off the GUI thread (a desktop's DBus may take its time).
    void sampleIdle();
    // The compute thread's duty cycle from the settings, the user's presence and the heat
    // (Compute/CpuPercent, CpuPercentWhileInUse, MaxTemperatureC), and the readings shown.
    void governDuty();
    // GPU temperature and power through the device probe (NVML), in its child process off the
    // GUI thread, every 10 s while a CUDA device is there.
    void sampleGpus();
    // The Devices tab's load, temperature and power columns.
    void showReadings();
    // Payments told once in a while ("Paid 12 shards, 10.8 credits, in the last 10 minutes"):
    // the first at once, disputes and slashes always at once.
    void flushDigest(bool force = false);

    Options m_options;
    std::unique_ptr<core::settings::Settings> m_settings;
    QFileSystemWatcher m_watcher;
    QString m_dataDirectory;
    std::optional<NodeIdentity> m_identity;
    EmbeddedBroker m_embedded;
    std::unique_ptr<Contributor> m_contributor;
    std::unique_ptr<NodeControl> m_control; // the control API (docs/CONTROL.md)
    std::uint64_t m_controlActions = 0; // the last of its actions carried out
    bool m_finishThenPause = false; // its "finish, then pause": held when the shard in training ends
    bool m_allDevicesPaused = false; // every usable device paused (the tray's, or the API's)
    QString m_accountBroker; // where m_account was asked
    std::unique_ptr<Machines> m_machines; // the Machines tab
    QTimer m_machinesShown; // coalesces their pushed states
    std::unique_ptr<core::ResultLog> m_results;
    core::Contribution m_contribution;
    std::unique_ptr<ui::Dashboard> m_dashboard;
    std::unique_ptr<ui::Tray> m_tray;
    QTimer m_tick;
    std::optional<compute::ShardProgress> m_progress;
    QHash<QString, core::NodeResultState> m_lastStates; // assignment -> state, for notifications
    bool m_brokerReachable = true;
    bool m_computePaused = false;
    bool m_measuringFirstStart = false; // the first-start benchmark runs; contributing starts after it
    bool m_firstStartChecked = false;
    QSet<QString> m_pausedDevices;
    QStringList m_sessionBrokers; // the brokers the running sessions serve
    std::optional<core::broker::AccountRecord> m_account; // the node's balance and stake at the first broker, last asked
    Earned m_earned; // from the result log, last read
    bool m_resultsUnreadable = false; // said once
    BrokerLink m_link;
    bool m_brokerAnswered = false;
    std::optional<std::int64_t> m_idleSeconds; // last sampled
    bool m_idleSampling = false;
    BrokerLink::Cancel m_submitCancel; // the submission under way, if any
    bool m_demoSubmitted = false;
    compute::Sensors m_sensors;
    std::optional<core::ThermalGovernor> m_governor;
    QElapsedTimer m_since; // the app's monotonic clock, for the sensors and the governor
    qint64 m_lastGovernedMs = -1;
    int m_dutyPercent = -1; // last set on the compute thread
    compute::Sensors::Readings m_readings;
    QHash<QString, ui::DevicesModel::Reading> m_gpuReadings; // "cuda:N" -> NVML's last answer
    bool m_gpuSampling = false;
    qint64 m_lastGpuSampleMs = -1;
    EnergyMeter m_energy; // CPU energy while training today, on m_since's clock
    int m_digestShards = 0;
    double m_digestCredits = 0.0;
    qint64 m_digestSinceMs = -1;
    bool m_toldFirstPayment = false;
    bool m_statesPrimed = false; // the result log's states were read once (transitions count after)
    int m_ticks = 0;
    bool m_logBrokenShown = false; // the broken ledger log was notified
    QString m_sampled; // "job/rounds" of the text shown or being written
    QHash<QString, QString> m_inferenceJobs; // job: its inference task, for the save dialog
    // The owner's finished training jobs with their spec (STATUS, asked once each): the models an
    // inference job in the submit panel may run.
    QHash<QString, core::broker::JobStatus> m_trainedJobs;
    QSet<QString> m_trainedAsked;
    QString m_trainedFrom; // the broker they are of
};

} // namespace tessera::app
