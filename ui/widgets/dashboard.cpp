#include "dashboard.h"

#include "machinesview.h"
#include "submitpanel.h"

#include <core/settings/settings.h>
#include <core/settings/settingskeys.h>

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QDateTimeAxis>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedWidget>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <QValueAxis>

#include <cmath>

namespace tessera::ui {

namespace {

QTableView* table(QAbstractItemModel* model)
{
    auto* view = new QTableView;
    view->setModel(model);
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setAlternatingRowColors(true);
    view->verticalHeader()->hide();
    view->horizontalHeader()->setStretchLastSection(true);
    view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    return view;
}

// The Overview's fields: a key (overviewText() and tests use it) and the field shown.
struct OverviewRow {
    const char* key;
    QString Overview::*field;
};
constexpr OverviewRow OverviewRows[] = {
    { "state", &Overview::state },
    { "reason", &Overview::reason },
    { "shard", &Overview::shard },
    { "speed", &Overview::speed },
    { "pauseCost", &Overview::pauseCost },
    { "balance", &Overview::balance },
    { "earnedToday", &Overview::earnedToday },
    { "earnedWeek", &Overview::earnedWeek },
    { "energy", &Overview::energy },
    { "devices", &Overview::devices },
    { "stake", &Overview::stake },
    { "atRisk", &Overview::atRisk },
    { "brokers", &Overview::brokers },
    { "machines", &Overview::machines },
    { "next", &Overview::next },
};

QChartView* chartView(const QString& title)
{
    auto* chart = new QChart;
    chart->setTitle(title);
    chart->legend()->hide();
    auto* view = new QChartView(chart);
    view->setRenderHint(QPainter::Antialiasing);
    view->setMinimumHeight(220);
    return view;
}

} // namespace

Dashboard::Dashboard(QWidget* parent)
    : QMainWindow(parent)
    , m_results(new ResultsModel(this))
    , m_devices(new DevicesModel(this))
    , m_jobs(new JobsModel(this))
    , m_log(new LogModel(this))
    , m_stakeEvents(new StakeEventsModel(this))
    , m_logFilter(new QSortFilterProxyModel(this))
{
    setWindowTitle(tr("Tessera"));
    resize(1000, 700);
    m_logFilter->setSourceModel(m_log);
    m_logFilter->setFilterKeyColumn(-1);
    m_logFilter->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_tabs = new QTabWidget;
    m_tabs->addTab(buildOverview(), tr("Overview"));
    m_tabs->addTab(buildDevices(), tr("Devices"));
    m_tabs->addTab(buildEarnings(), tr("Earnings"));
    m_tabs->addTab(buildVerification(), tr("Verification"));
    m_tabs->addTab(buildJobs(), tr("Jobs"));
    m_machines = new MachinesView;
    m_tabs->addTab(m_machines, tr("Machines"));
    m_tabs->addTab(buildLog(), tr("Log"));
    m_stack = new QStackedWidget;
    m_stack->addWidget(buildFirstRun());
    m_stack->addWidget(m_tabs);
    setCentralWidget(m_stack);
}

QHBoxLayout* Dashboard::joinRow(QLineEdit* field, QLabel* status, QPushButton* button)
{
    button->setEnabled(false);
    connect(field, &QLineEdit::textChanged, this, [status, button](const QString& typed) {
        const QString address = typed.trimmed();
        QString problem;
        if (!address.isEmpty()) {
            const auto* key = core::settings::findKey(core::settings::names::NodeBrokers);
            if (auto checked = key ? core::settings::validate(*key, QStringList { address }) : core::Result<QVariant>(QVariant());
                !checked)
                problem = tr("not a broker address: tcp://host:port, then #KEY");
            else if (!address.contains(u'#'))
                problem = tr("without #KEY the link is not encrypted: ask the operator for the broker's key");
        }
        status->setText(address.isEmpty() ? QString() : problem.isEmpty() ? tr("a valid address") : problem);
        button->setEnabled(!address.isEmpty() && problem.isEmpty());
    });
    connect(button, &QPushButton::clicked, this, [this, field] {
        showFirstRun(false);
        Q_EMIT joinNetwork(field->text().trimmed());
    });
    auto* row = new QHBoxLayout;
    row->addWidget(field, 1);
    row->addWidget(button);
    return row;
}

QWidget* Dashboard::buildFirstRun()
{
    auto* page = new QWidget;
    auto* layout = new QVBoxLayout(page);
    auto* title = new QLabel(tr("<h1>Welcome to Tessera</h1>"));
    auto* text = m_firstRunText
        = new QLabel(tr("Tessera trains other people's machine-learning models on this computer while you do not "
                        "need it, checks its work against other computers', and pays you credits for what it "
                        "verifiably did.<br><br>With no network set up, <b>Start contributing</b> practises on this "
                        "computer: a local broker gives it a small demo job, so within a minute you see a shard "
                        "train, get verified and get paid, in credits of this practice network. To join a real "
                        "network, paste its address below (or later in Settings, Node/Brokers)."));
    text->setWordWrap(true);
    m_start = new QPushButton(tr("Start contributing"));
    m_start->setObjectName(QStringLiteral("startContributing"));
    m_start->setMinimumHeight(48);
    connect(m_start, &QPushButton::clicked, this, [this] {
        showFirstRun(false);
        Q_EMIT startContributing();
    });
    // A network's address, checked as it is typed (the rule of Node/Brokers).
    m_join = new QLineEdit;
    m_join->setObjectName(QStringLiteral("joinNetwork"));
    m_join->setPlaceholderText(tr("tcp://host:port#KEY (the key: 40 characters, from the network's operator)"));
    m_joinStatus = new QLabel;
    m_joinButton = new QPushButton(tr("Join this network"));
    auto* join = joinRow(m_join, m_joinStatus, m_joinButton);
    layout->addStretch();
    layout->addWidget(title, 0, Qt::AlignHCenter);
    layout->addWidget(text);
    layout->addWidget(m_start, 0, Qt::AlignHCenter);
    layout->addSpacing(24);
    layout->addLayout(join);
    layout->addWidget(m_joinStatus);
    layout->addStretch();
    return page;
}

QWidget* Dashboard::buildOverview()
{
    auto* page = new QWidget;
    auto* layout = new QVBoxLayout(page);
    auto label = [this](const char* key, int points = 0, bool bold = false) {
        auto* value = new QLabel;
        value->setTextInteractionFlags(Qt::TextSelectableByMouse);
        value->setWordWrap(true);
        if (points > 0 || bold) {
            auto font = value->font();
            if (points > 0)
                font.setPointSize(points);
            font.setBold(bold);
            value->setFont(font);
        }
        m_overview.insert(QString::fromLatin1(key), value);
        return value;
    };
    auto group = [](const QString& title) {
        auto* box = new QGroupBox(title);
        return std::pair { box, new QVBoxLayout(box) };
    };
    // The state, large, and why.
    layout->addWidget(label("state", 20, true));
    auto* reason = label("reason");
    reason->setStyleSheet(QStringLiteral("color: palette(mid);"));
    layout->addWidget(reason);

    // What next: while the computer waits for work, what the user can do about it.
    auto [nextBox, next] = group(tr("What next"));
    nextBox->setObjectName(QStringLiteral("nextSteps"));
    next->addWidget(label("next"));
    m_nextJoin = new QLineEdit;
    m_nextJoin->setObjectName(QStringLiteral("nextJoinNetwork"));
    m_nextJoin->setPlaceholderText(tr("a network's address: tcp://host:port#KEY, from its operator"));
    auto* nextJoinStatus = new QLabel;
    next->addLayout(joinRow(m_nextJoin, nextJoinStatus, new QPushButton(tr("Join this network"))));
    next->addWidget(nextJoinStatus);
    auto* nextButtons = new QHBoxLayout;
    m_practiceAgain = new QPushButton(tr("Another practice job"));
    m_practiceAgain->setObjectName(QStringLiteral("practiceAgain"));
    connect(m_practiceAgain, &QPushButton::clicked, this, &Dashboard::practiceAgain);
    auto* submitOwn = new QPushButton(tr("Submit a job of your own…"));
    connect(submitOwn, &QPushButton::clicked, this, [this] { showTab(QStringLiteral("Jobs")); });
    nextButtons->addWidget(m_practiceAgain);
    nextButtons->addWidget(submitOwn);
    nextButtons->addStretch();
    next->addLayout(nextButtons);
    m_next = nextBox;
    m_next->setVisible(false);
    layout->addWidget(nextBox);

    auto [shardBox, shard] = group(tr("Now training"));
    shard->addWidget(label("shard"));
    m_shardProgress = new QProgressBar;
    m_shardProgress->setRange(0, 100);
    m_shardProgress->setVisible(false);
    shard->addWidget(m_shardProgress);
    shard->addWidget(label("speed"));
    auto* pause = label("pauseCost");
    pause->setStyleSheet(QStringLiteral("color: palette(mid);"));
    shard->addWidget(pause);
    layout->addWidget(shardBox);

    auto* middle = new QHBoxLayout;
    auto [moneyBox, money] = group(tr("Earnings"));
    money->addWidget(label("earnedToday", 14, true));
    money->addWidget(label("earnedWeek"));
    money->addWidget(label("balance"));
    money->addWidget(label("energy"));
    money->addWidget(label("machines"));
    auto* days = chartView(QString());
    days->setMinimumHeight(120);
    days->setMaximumHeight(160);
    m_daily = new QBarSet(tr("credits"));
    for (int i = 0; i < 7; ++i)
        *m_daily << 0.0;
    auto* daySeries = new QBarSeries;
    daySeries->append(m_daily);
    days->chart()->addSeries(daySeries);
    m_days = new QBarCategoryAxis;
    m_dailyAxis = new QValueAxis;
    m_dailyAxis->setLabelFormat(QStringLiteral("%.1f"));
    m_dailyAxis->setTickCount(3); // a small chart: more labels would not fit
    days->chart()->addAxis(m_days, Qt::AlignBottom);
    days->chart()->addAxis(m_dailyAxis, Qt::AlignLeft);
    daySeries->attachAxis(m_days);
    daySeries->attachAxis(m_dailyAxis);
    days->chart()->setMargins(QMargins(0, 0, 0, 0));
    money->addWidget(days);
    middle->addWidget(moneyBox, 3);

    auto [stakeBox, stake] = group(tr("Stake"));
    stake->addWidget(label("stake"));
    stake->addWidget(label("atRisk"));
    stake->addStretch();
    middle->addWidget(stakeBox, 2);
    layout->addLayout(middle);

    auto [devicesBox, devices] = group(tr("Devices"));
    devices->addWidget(label("devices"));
    layout->addWidget(devicesBox);

    auto* bottom = new QHBoxLayout;
    bottom->addWidget(label("brokers"), 1);
    auto* settings = new QPushButton(tr("Settings…"));
    connect(settings, &QPushButton::clicked, this, &Dashboard::openSettings);
    bottom->addWidget(settings);
    layout->addLayout(bottom);
    layout->addStretch();
    return page;
}

QWidget* Dashboard::buildDevices()
{
    auto* page = new QWidget;
    auto* layout = new QVBoxLayout(page);
    layout->addWidget(table(m_devices));
    auto* limits = new QHBoxLayout;
    m_threads = new QSpinBox;
    m_threads->setRange(1, 256);
    m_cpuPercent = new QSpinBox;
    m_cpuPercent->setRange(1, 100);
    m_cpuPercent->setSuffix(QStringLiteral(" %"));
    limits->addWidget(new QLabel(tr("Threads")));
    limits->addWidget(m_threads);
    limits->addWidget(new QLabel(tr("CPU limit")));
    limits->addWidget(m_cpuPercent);
    limits->addStretch();
    layout->addLayout(limits);
    auto emitLimits = [this] { Q_EMIT limitsChanged(m_threads->value(), m_cpuPercent->value()); };
    connect(m_threads, &QSpinBox::editingFinished, this, emitLimits);
    connect(m_cpuPercent, &QSpinBox::editingFinished, this, emitLimits);
    auto* benchmark = new QHBoxLayout;
    m_benchmarkButton = new QPushButton(tr("Run benchmark"));
    m_benchmarkProgress = new QProgressBar;
    m_benchmarkText = new QLabel;
    benchmark->addWidget(m_benchmarkButton);
    benchmark->addWidget(m_benchmarkProgress);
    benchmark->addWidget(m_benchmarkText, 1);
    layout->addLayout(benchmark);
    connect(m_benchmarkButton, &QPushButton::clicked, this, &Dashboard::runBenchmark);
    setBenchmarkProgress(-1, {});
    return page;
}

QWidget* Dashboard::buildEarnings()
{
    auto* page = new QWidget;
    auto* layout = new QVBoxLayout(page);
    m_earningsChart = chartView(tr("Credits earned per hour, last 24 hours"));
    m_balanceChart = chartView(tr("Balance over time"));
    {
        auto* chart = m_earningsChart->chart();
        m_hourly = new QBarSet(tr("credits"));
        for (int i = 0; i < 24; ++i)
            *m_hourly << 0.0;
        auto* bars = new QBarSeries;
        bars->append(m_hourly);
        chart->addSeries(bars);
        m_hours = new QBarCategoryAxis;
        m_hourlyAxis = new QValueAxis;
        m_hourlyAxis->setLabelFormat(QStringLiteral("%.2f"));
        chart->addAxis(m_hours, Qt::AlignBottom);
        chart->addAxis(m_hourlyAxis, Qt::AlignLeft);
        bars->attachAxis(m_hours);
        bars->attachAxis(m_hourlyAxis);
    }
    {
        auto* chart = m_balanceChart->chart();
        m_balance = new QLineSeries;
        chart->addSeries(m_balance);
        m_balanceTime = new QDateTimeAxis;
        m_balanceTime->setFormat(QStringLiteral("dd.MM HH:mm"));
        m_balanceAxis = new QValueAxis;
        chart->addAxis(m_balanceTime, Qt::AlignBottom);
        chart->addAxis(m_balanceAxis, Qt::AlignLeft);
        m_balance->attachAxis(m_balanceTime);
        m_balance->attachAxis(m_balanceAxis);
    }
    layout->addWidget(m_earningsChart);
    layout->addWidget(m_balanceChart);
    auto* stake = new QGroupBox(tr("Stake and slashes"));
    auto* stakeLayout = new QVBoxLayout(stake);
    stakeLayout->addWidget(table(m_stakeEvents));
    layout->addWidget(stake);
    setEarnings({}, QDateTime::currentDateTime());
    return page;
}

QWidget* Dashboard::buildVerification()
{
    auto* page = new QWidget;
    auto* layout = new QVBoxLayout(page);
    auto* text = new QLabel(tr("Every result this computer produced or re-executed for another, and what became of it: "
                               "computed → committed → sampled → verified (or disputed, slashed) → paid."));
    text->setWordWrap(true);
    layout->addWidget(text);
    layout->addWidget(table(m_results));
    return page;
}

QWidget* Dashboard::buildJobs()
{
    auto* page = new QSplitter(Qt::Horizontal);
    m_submit = new SubmitPanel;
    page->addWidget(m_submit);
    auto* right = new QWidget;
    auto* layout = new QVBoxLayout(right);
    m_jobsView = table(m_jobs);
    layout->addWidget(m_jobsView);
    auto* buttons = new QHBoxLayout;
    auto* cancel = new QPushButton(tr("Cancel job"));
    auto* save = new QPushButton(tr("Save trained model…"));
    buttons->addWidget(cancel);
    buttons->addWidget(save);
    buttons->addStretch();
    layout->addLayout(buttons);
    m_jobChart = chartView(tr("Test accuracy per round"));
    {
        auto* chart = m_jobChart->chart();
        m_accuracy = new QLineSeries;
        m_accuracy->setPointsVisible(true);
        chart->addSeries(m_accuracy);
        m_rounds = new QValueAxis;
        m_rounds->setLabelFormat(QStringLiteral("%d"));
        m_rounds->setTitleText(tr("round"));
        m_jobAxis = new QValueAxis;
        m_jobAxis->setRange(0, 100);
        m_jobAxis->setTitleText(tr("test accuracy, %"));
        chart->addAxis(m_rounds, Qt::AlignBottom);
        chart->addAxis(m_jobAxis, Qt::AlignLeft);
        m_accuracy->attachAxis(m_rounds);
        m_accuracy->attachAxis(m_jobAxis);
    }
    layout->addWidget(m_jobChart);
    m_sample = new QLabel;
    m_sample->setWordWrap(true);
    m_sample->setTextFormat(Qt::PlainText);
    m_sample->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_sample->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_sample->setVisible(false);
    layout->addWidget(m_sample);
    page->addWidget(right);
    connect(cancel, &QPushButton::clicked, this, [this] {
        if (!selectedJob().isEmpty())
            Q_EMIT cancelJob(selectedJob());
    });
    connect(save, &QPushButton::clicked, this, [this] {
        if (!selectedJob().isEmpty())
            Q_EMIT saveModel(selectedJob());
    });
    connect(m_jobsView->selectionModel(), &QItemSelectionModel::selectionChanged, this,
        [this] { Q_EMIT jobSelected(selectedJob()); });
    return page;
}

QWidget* Dashboard::buildLog()
{
    auto* page = new QWidget;
    auto* layout = new QVBoxLayout(page);
    auto* filter = new QLineEdit;
    filter->setPlaceholderText(tr("Filter (level, source or text)"));
    filter->setClearButtonEnabled(true);
    connect(filter, &QLineEdit::textChanged, m_logFilter, &QSortFilterProxyModel::setFilterFixedString);
    layout->addWidget(filter);
    layout->addWidget(table(m_logFilter));
    return page;
}

QString Dashboard::selectedJob() const
{
    const auto rows = m_jobsView->selectionModel()->selectedRows();
    if (!rows.isEmpty())
        return m_jobs->rowAt(rows.first().row()).key;
    return m_jobs->rowCount() > 0 ? m_jobs->rowAt(0).key : QString();
}

void Dashboard::setOverview(const Overview& overview)
{
    for (const auto& row : OverviewRows) {
        const QString& text = overview.*row.field;
        if (auto* label = m_overview.value(QString::fromLatin1(row.key)); label && label->text() != text) {
            label->setText(text);
            label->setVisible(!text.isEmpty());
        }
    }
    m_next->setVisible(!overview.next.isEmpty());
    m_practiceAgain->setVisible(overview.practice);
    m_shardProgress->setVisible(overview.progressPercent >= 0);
    if (overview.progressPercent >= 0 && m_shardProgress->value() != overview.progressPercent)
        m_shardProgress->setValue(overview.progressPercent);
}

QString Dashboard::overviewText() const
{
    QStringList lines;
    for (auto it = m_overview.constBegin(); it != m_overview.constEnd(); ++it)
        lines.append(it.key() + QStringLiteral(": ") + it.value()->text());
    lines.sort();
    return lines.join(u'\n');
}

void Dashboard::setEarnings(const QList<Earning>& earnings, const QDateTime& now)
{
    // Per hour over the last 24 hours.
    QList<double> hours(24, 0.0);
    m_chartedEarnings = 0.0;
    for (const auto& earning : earnings) {
        const auto age = earning.at.secsTo(now) / 3600;
        if (age >= 0 && age < 24 && earning.credits > 0) {
            hours[23 - int(age)] += earning.credits;
            m_chartedEarnings += earning.credits;
        }
    }
    QStringList labels;
    double top = 0.0;
    for (int i = 0; i < 24; ++i) {
        m_hourly->replace(i, hours[i]);
        top = std::max(top, hours[i]);
        labels.append(now.addSecs(-3600LL * (23 - i)).toString(QStringLiteral("HH")));
    }
    m_hours->setCategories(labels);
    m_hourlyAxis->setRange(0, top > 0 ? top * 1.1 : 1.0);

    // The Overview's last seven days, today last.
    QList<double> days(7, 0.0);
    for (const auto& earning : earnings) {
        const auto age = earning.at.date().daysTo(now.date());
        if (age >= 0 && age < 7 && earning.credits > 0)
            days[6 - int(age)] += earning.credits;
    }
    QStringList dayLabels;
    double topDay = 0.0;
    for (int i = 0; i < 7; ++i) {
        m_daily->replace(i, days[i]);
        topDay = std::max(topDay, days[i]);
        dayLabels.append(now.date().addDays(i - 6).toString(QStringLiteral("ddd")));
    }
    m_days->setCategories(dayLabels);
    m_dailyAxis->setRange(0, topDay > 0 ? topDay * 1.1 : 1.0);

    // Balance: the running sum of payments and slashes.
    double balance = 0.0, high = 0.0, low = 0.0;
    QDateTime first = now.addSecs(-3600), last = now;
    auto sorted = earnings;
    std::sort(sorted.begin(), sorted.end(), [](const Earning& a, const Earning& b) { return a.at < b.at; });
    if (!sorted.isEmpty())
        first = std::min(first, sorted.first().at);
    QList<QPointF> points { { double(first.toMSecsSinceEpoch()), 0.0 } };
    for (const auto& earning : sorted) {
        points.append({ double(earning.at.toMSecsSinceEpoch()), balance }); // a step, not a slope
        balance += earning.credits;
        high = std::max(high, balance);
        low = std::min(low, balance);
        points.append({ double(earning.at.toMSecsSinceEpoch()), balance });
    }
    points.append({ double(last.toMSecsSinceEpoch()), balance });
    m_balance->replace(points);
    m_balanceTime->setRange(first, last);
    m_balanceAxis->setRange(low, high > low ? high * 1.1 : low + 1.0);
}

void Dashboard::setJobRounds(const QString& jobId, const QList<RoundPoint>& rounds, bool text)
{
    m_jobChart->chart()->setTitle(
        text ? tr("Test perplexity per round: %1").arg(jobId) : tr("Test accuracy per round: %1").arg(jobId));
    QList<QPointF> points;
    int lastRound = 1;
    double highest = 1.0;
    for (const auto& point : rounds) {
        const double value = text ? std::exp(point.testLoss) : point.testAccuracy * 100.0;
        points.append({ double(point.round + 1), value });
        lastRound = std::max(lastRound, point.round + 1);
        highest = std::max(highest, value);
    }
    m_jobAxis->setTitleText(text ? tr("test perplexity") : tr("test accuracy, %"));
    m_jobAxis->setRange(0, text ? std::ceil(highest * 1.1) : 100);
    if (!text)
        setJobSample({});
    m_accuracy->replace(points);
    m_rounds->setRange(0, lastRound);
    m_rounds->setTickCount(std::min(lastRound, 10) + 1);
}

void Dashboard::setJobSample(const QString& text)
{
    m_sample->setText(text);
    m_sample->setVisible(!text.isEmpty());
}

QString Dashboard::jobSample() const
{
    return m_sample->text();
}

void Dashboard::setBenchmarkProgress(int percent, const QString& text)
{
    m_benchmarkProgress->setVisible(percent >= 0);
    m_benchmarkProgress->setValue(std::max(percent, 0));
    m_benchmarkButton->setEnabled(percent < 0);
    m_benchmarkText->setText(text);
}

void Dashboard::setLimits(int threads, int maxThreads, int cpuPercent)
{
    m_threads->setMaximum(std::max(1, maxThreads));
    m_threads->setValue(threads);
    m_cpuPercent->setValue(cpuPercent);
}

void Dashboard::showFirstRun(bool firstRun)
{
    m_stack->setCurrentIndex(firstRun ? 0 : 1);
}

QStringList Dashboard::tabNames() const
{
    QStringList names;
    for (int i = 0; i < m_tabs->count(); ++i)
        names.append(m_tabs->tabText(i));
    return names;
}

void Dashboard::showTab(const QString& name)
{
    showFirstRun(false);
    for (int i = 0; i < m_tabs->count(); ++i) {
        if (m_tabs->tabText(i) == name)
            m_tabs->setCurrentIndex(i);
    }
}

QString Dashboard::currentTab() const
{
    return m_tabs->tabText(m_tabs->currentIndex());
}

bool Dashboard::firstRunShown() const
{
    return m_stack->currentIndex() == 0;
}

QString Dashboard::firstRunText() const
{
    return m_firstRunText->text();
}

} // namespace tessera::ui
