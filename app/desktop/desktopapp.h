#pragma once

#include "contributor.h"
#include "embeddedbroker.h"

#include <net/brokerclient.h>

#include "../common/nodesetup.h"

#include <compute/computethread.h>
#include <core/contribution.h>
#include <core/resultlog.h>
#include <core/settings/settings.h>
#include <ui/widgets/dashboard.h>
#include <ui/widgets/tray.h>

#include <QFileSystemWatcher>
#include <QJsonObject>
#include <QObject>
#include <QTimer>

#include <memory>
#include <optional>

namespace tessera::app {

// The desktop app's wiring: settings, the embedded broker, the node sessions and compute thread,
// the contribute / snooze / pause state, and the dashboard and tray that show it all. Every second
// it reads the node's result log and asks its brokers for balances and jobs, and pushes plain
// rows to the dashboard's models.
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
    void snoozeFor(std::int64_t seconds);
    void snoozeUntilIdle();
    // Submits a job from the panel to the first broker (the embedded one when there is one).
    core::Result<QString> submit(core::JobSpec spec);
    // Saves a job's newest weights (torch.load reads them).
    core::Status saveModel(const QString& jobId, const QString& path);
    // Renders every tab to DIR/<tab>.png.
    core::Status screenshot(const QString& directory);

    ui::Dashboard& dashboard() { return *m_dashboard; }
    core::Contribution& contribution() { return m_contribution; }
    QString brokerAddress() const; // the first broker
    // Runs one refresh now (the timer does it every second).
    void refresh();

Q_SIGNALS:
    void quitRequested();

private:
    void applySettings();
    void ensureContributor();
    void restartSessions();
    void updateState();
    void notifyTransitions(const QList<core::ResultEntry>& results);
    QList<net::BrokerAddress> brokers() const;
    void writeAutostart(bool on);
    void runBenchmark();
    // Text from a language model job's newest weights, written on a worker thread and shown under
    // the Jobs tab's chart; once per job and round.
    void showSample(const QString& jobId, int rounds);
    // Compute/BenchmarkOnFirstStart, on a worker thread; then `then` on the GUI thread.
    void benchmarkOnFirstStartThen(std::function<void()> then);
    // A line in the dashboard's log, stamped now.
    void note(const QString& level, const QString& area, const QString& text);
    // A request to the first broker over one kept connection, with a short timeout.
    std::optional<net::CurveKeys> identityKeys() const;
    core::Result<QJsonObject> askBroker(net::Command command, QJsonObject header);

    Options m_options;
    std::unique_ptr<core::settings::Settings> m_settings;
    QFileSystemWatcher m_watcher;
    QString m_dataDirectory;
    std::optional<NodeIdentity> m_identity;
    EmbeddedBroker m_embedded;
    std::unique_ptr<Contributor> m_contributor;
    std::unique_ptr<core::ResultLog> m_results;
    core::Contribution m_contribution;
    std::unique_ptr<ui::Dashboard> m_dashboard;
    std::unique_ptr<ui::Tray> m_tray;
    QTimer m_tick;
    std::optional<compute::ShardProgress> m_progress;
    QHash<QString, QString> m_lastStates; // assignment -> state, for notifications
    bool m_brokerReachable = true;
    bool m_computePaused = false;
    bool m_measuringFirstStart = false; // the first-start benchmark runs; contributing starts after it
    bool m_firstStartChecked = false;
    QSet<QString> m_pausedDevices;
    QStringList m_sessionBrokers; // the brokers the running sessions serve
    QJsonObject m_account; // the node's balance and stake at the first broker, last asked
    std::unique_ptr<net::BrokerClient> m_client;
    QString m_clientBroker;
    int m_ticks = 0;
    QString m_sampled; // "job/rounds" of the text shown or being written
};

} // namespace tessera::app
