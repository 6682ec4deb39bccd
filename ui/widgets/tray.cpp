#include "tray.h"

#include <QAction>
#include <QMenu>
#include <QPainter>
#include <QPixmap>
#include <QSet>
#include <QSystemTrayIcon>

namespace tessera::ui {

using State = core::Contribution::State;

Tray::Tray(QObject* parent)
    : QObject(parent)
    , m_icon(new QSystemTrayIcon(this))
    , m_menu(new QMenu)
    , m_devices(new QMenu(tr("Pause a device")))
{
    auto* open = m_menu->addAction(tr("Open dashboard"));
    m_contribute = m_menu->addAction(tr("Contribute"));
    m_contribute->setCheckable(true);
    auto* snooze = m_menu->addMenu(tr("Snooze"));
    auto* hour = snooze->addAction(tr("For 1 hour"));
    auto* idle = snooze->addAction(tr("Until the computer is idle"));
    m_menu->addMenu(m_devices);
    m_menu->addSeparator();
    auto* quit = m_menu->addAction(tr("Quit"));
    connect(open, &QAction::triggered, this, &Tray::openDashboard);
    connect(m_contribute, &QAction::toggled, this, &Tray::contributeToggled);
    connect(hour, &QAction::triggered, this, &Tray::snoozeHour);
    connect(idle, &QAction::triggered, this, &Tray::snoozeUntilIdle);
    connect(quit, &QAction::triggered, this, &Tray::quit);
    connect(m_icon, &QSystemTrayIcon::activated, this, [this](QSystemTrayIcon::ActivationReason reason) {
        if (reason == QSystemTrayIcon::Trigger || reason == QSystemTrayIcon::DoubleClick)
            Q_EMIT openDashboard();
    });
    m_icon->setContextMenu(m_menu);
    setState(State::Off, tr("Tessera: not contributing"));
}

Tray::~Tray()
{
    delete m_menu;
}

bool Tray::available()
{
    return QSystemTrayIcon::isSystemTrayAvailable();
}

void Tray::show()
{
    m_icon->show();
}

QIcon Tray::iconFor(State state)
{
    QColor fill;
    switch (state) {
    case State::Off:
        fill = QColor(0x9e, 0x9e, 0x9e);
        break;
    case State::Working:
        fill = QColor(0x2e, 0x7d, 0x32);
        break;
    case State::Waiting:
        fill = QColor(0x81, 0xc7, 0x84);
        break;
    case State::Paused:
    case State::Snoozed:
        fill = QColor(0xf9, 0xa8, 0x25);
        break;
    case State::Offline:
        fill = QColor(0x60, 0x7d, 0x8b);
        break;
    case State::Error:
        fill = QColor(0xc6, 0x28, 0x28);
        break;
    }
    QIcon icon;
    for (int size : { 16, 22, 24, 32, 48, 64 }) {
        QPixmap pixmap(size, size);
        pixmap.fill(Qt::transparent);
        QPainter painter(&pixmap);
        painter.setRenderHint(QPainter::Antialiasing);
        painter.setPen(QPen(QColor(0x26, 0x32, 0x38), std::max(1.0, size / 12.0)));
        painter.setBrush(fill);
        const double margin = size / 8.0;
        painter.drawEllipse(QRectF(margin, margin, size - 2 * margin, size - 2 * margin));
        if (state == State::Paused || state == State::Snoozed) {
            painter.setBrush(QColor(0x26, 0x32, 0x38));
            painter.setPen(Qt::NoPen);
            const double w = size / 10.0, h = size / 3.0;
            painter.drawRect(QRectF(size / 2.0 - 2 * w, size / 2.0 - h / 2, w, h));
            painter.drawRect(QRectF(size / 2.0 + w, size / 2.0 - h / 2, w, h));
        }
        icon.addPixmap(pixmap);
    }
    return icon;
}

void Tray::setState(State state, const QString& tooltip)
{
    m_icon->setIcon(iconFor(state));
    m_icon->setToolTip(tooltip);
}

void Tray::setContributing(bool on)
{
    const QSignalBlocker blocker(m_contribute);
    m_contribute->setChecked(on);
}

void Tray::setDevices(const QList<std::pair<QString, QString>>& devices, const QSet<QString>& paused)
{
    m_devices->clear();
    for (const auto& [id, name] : devices) {
        auto* action = m_devices->addAction(name);
        action->setCheckable(true);
        action->setChecked(paused.contains(id));
        connect(action, &QAction::toggled, this, [this, id = id](bool on) { Q_EMIT devicePaused(id, on); });
    }
    m_devices->setEnabled(!devices.isEmpty());
}

void Tray::notify(const QString& title, const QString& text)
{
    if (m_icon->isVisible() && QSystemTrayIcon::supportsMessages())
        m_icon->showMessage(title, text, iconFor(State::Working), 8000);
}

} // namespace tessera::ui
