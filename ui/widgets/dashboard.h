#pragma once

#include "../models/tablemodels.h"

#include <QDateTime>
#include <QMainWindow>

class QBarCategoryAxis;
class QBarSet;
class QChartView;
class QDateTimeAxis;
class QLineSeries;
class QValueAxis;
class QLabel;
class QHBoxLayout;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QSpinBox;
class QStackedWidget;
class QTabWidget;
class QTableView;

namespace tessera::ui {

class MachinesView;
class SubmitPanel;

// What the Overview tab shows; the app fills it on each tick. Read in two seconds: a large state
// line with its reason, the shard in training with a progress bar, what the machine earned today
// and this week (with the last seven days charted), the stake, each device's load, heat and power.
struct Overview {
    QString state; // "working", "snoozed", ...
    QString reason; // why paused, snoozed, offline or in error
    QString shard; // "Fashion-MNIST MLP, round 3, shard 1: step 40 of 100"
    int progressPercent = -1; // of the shard in training; -1: none
    QString speed; // "23,400 samples/s, 2 s left"
    QString pauseCost; // what a pause would cost now
    QString balance; // credits
    QString earnedToday;
    QString earnedWeek;
    QString energy; // "12 Wh today (RAPL), about 0.003 credits of electricity: net 4.49 credits"
    QString devices; // one line a device: "CPU: 67% of its time, 71 °C, 45 W"
    QString stake; // bonded
    QString atRisk; // stake that a lost dispute could take now
    QString brokers; // "local broker (embedded)", or the addresses
    QString machines; // with other machines added: "3 machines: 2 working, 1 paused; 4.5 credits today"
    // What the user can do now, when the computer waits for work: shown in "What next" with its
    // actions (join a network; on the practice network, another practice job; submit a job).
    QString next;
    bool practice = false; // on the practice network only: "Another practice job" is offered
};

// A payment or a slash, for the Earnings charts.
struct Earning {
    QDateTime at;
    double credits = 0.0; // negative for a slash
};

// One round of a job, for the Jobs tab's chart.
struct RoundPoint {
    int round = 0;
    double testAccuracy = 0.0;
    double testLoss = 0.0;
};

// The dashboard: one window, tabs for Overview, Devices, Earnings, Verification, Jobs (the submit
// panel), Machines and Log. It shows what the app hands it and says what the user asked for through
// signals; it decides nothing.
class Dashboard final : public QMainWindow {
    Q_OBJECT

public:
    explicit Dashboard(QWidget* parent = nullptr);

    ResultsModel& results() { return *m_results; }
    DevicesModel& devices() { return *m_devices; }
    JobsModel& jobs() { return *m_jobs; }
    LogModel& log() { return *m_log; }
    StakeEventsModel& stakeEvents() { return *m_stakeEvents; }
    SubmitPanel& submitPanel() { return *m_submit; }
    MachinesView& machines() { return *m_machines; }

    void setOverview(const Overview& overview);
    void setEarnings(const QList<Earning>& earnings, const QDateTime& now);
    // text: a language model's job, charted as perplexity (e^loss per token) instead of accuracy.
    void setJobRounds(const QString& jobId, const QList<RoundPoint>& rounds, bool text = false);
    // Text written by a language model job's newest weights (empty: none to show).
    void setJobSample(const QString& text);
    QString jobSample() const;
    void setBenchmarkProgress(int percent, const QString& text); // percent < 0: not running
    void setLimits(int threads, int maxThreads, int cpuPercent);
    // The first-run screen until the user starts contributing (or has before).
    void showFirstRun(bool firstRun);
    bool firstRunShown() const;
    QString selectedJob() const;

    // The tabs, by name, for --screenshot and tests.
    QStringList tabNames() const;
    void showTab(const QString& name);
    QString currentTab() const;
    QPushButton* startButton() const { return m_start; }
    QString firstRunText() const;
    // The first-run screen's field for a network's address, checked as it is typed.
    QLineEdit* joinField() const { return m_join; }
    QPushButton* joinButton() const { return m_joinButton; }
    // The Overview's What next: shown while the computer waits for work; its own join field.
    QWidget* nextSteps() const { return m_next; }
    QLineEdit* nextJoinField() const { return m_nextJoin; }
    QPushButton* practiceAgainButton() const { return m_practiceAgain; }
    QChartView* earningsChart() const { return m_earningsChart; }
    double chartedEarnings() const { return m_chartedEarnings; }
    QString overviewText() const;

Q_SIGNALS:
    void startContributing();
    // The user pasted a network's broker address (checked: tcp://host:port#KEY) and joins it.
    void joinNetwork(const QString& address);
    void runBenchmark();
    void limitsChanged(int threads, int cpuPercent);
    void cancelJob(const QString& jobId);
    void saveModel(const QString& jobId);
    void jobSelected(const QString& jobId);
    void openSettings();
    // "Another practice job" in the Overview's What next.
    void practiceAgain();

private:
    QWidget* buildOverview();
    QWidget* buildDevices();
    QWidget* buildEarnings();
    QWidget* buildVerification();
    QWidget* buildJobs();
    QWidget* buildLog();
    QWidget* buildFirstRun();
    // A network's address field, checked as it is typed (the rule of Node/Brokers), its status
    // line and its button, which joins: joinNetwork.
    QHBoxLayout* joinRow(QLineEdit* field, QLabel* status, QPushButton* button);

    ResultsModel* m_results;
    DevicesModel* m_devices;
    JobsModel* m_jobs;
    LogModel* m_log;
    StakeEventsModel* m_stakeEvents;
    QSortFilterProxyModel* m_logFilter;
    SubmitPanel* m_submit = nullptr;
    MachinesView* m_machines = nullptr;
    QStackedWidget* m_stack = nullptr;
    QTabWidget* m_tabs = nullptr;
    QPushButton* m_start = nullptr;
    QLabel* m_firstRunText = nullptr;
    QHash<QString, QLabel*> m_overview;
    QProgressBar* m_shardProgress = nullptr;
    QBarSet* m_daily = nullptr; // the Overview's last seven days
    QBarCategoryAxis* m_days = nullptr;
    QValueAxis* m_dailyAxis = nullptr;
    QLineEdit* m_join = nullptr;
    QLabel* m_joinStatus = nullptr;
    QWidget* m_next = nullptr;
    QLineEdit* m_nextJoin = nullptr;
    QPushButton* m_practiceAgain = nullptr;
    QPushButton* m_joinButton = nullptr;
    QProgressBar* m_benchmarkProgress = nullptr;
    QLabel* m_benchmarkText = nullptr;
    QPushButton* m_benchmarkButton = nullptr;
    QSpinBox* m_threads = nullptr;
    QSpinBox* m_cpuPercent = nullptr;
    QChartView* m_earningsChart = nullptr;
    QChartView* m_balanceChart = nullptr;
    QChartView* m_jobChart = nullptr;
    QTableView* m_jobsView = nullptr;
    double m_chartedEarnings = 0.0;
    // The charts' series and axes, made once; each refresh replaces their points.
    QBarSet* m_hourly = nullptr;
    QBarCategoryAxis* m_hours = nullptr;
    QValueAxis* m_hourlyAxis = nullptr;
    QLineSeries* m_balance = nullptr;
    QDateTimeAxis* m_balanceTime = nullptr;
    QValueAxis* m_balanceAxis = nullptr;
    QLineSeries* m_accuracy = nullptr;
    QValueAxis* m_rounds = nullptr;
    QValueAxis* m_jobAxis = nullptr;
    QLabel* m_sample = nullptr;
};

} // namespace tessera::ui
