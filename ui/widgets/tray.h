#pragma once

#include <core/contribution.h>

#include <QIcon>
#include <QObject>

class QAction;
class QMenu;
class QSystemTrayIcon;

namespace tessera::ui {

// The tray icon and its menu: Open dashboard, Contribute on/off, Snooze (1 hour, until idle),
// pause per device, Quit; the icon's colour and tooltip say the state. Notifications go through it.
class Tray final : public QObject {
    Q_OBJECT

public:
    explicit Tray(QObject* parent = nullptr);
    ~Tray() override;

    static bool available();
    void show();
    void setState(core::Contribution::State state, const QString& tooltip);
    void setContributing(bool on);
    // Devices that can be paused one by one ("cpu:0" -> "CPU: AMD EPYC"), and which are paused.
    void setDevices(const QList<std::pair<QString, QString>>& devices, const QSet<QString>& paused);
    void notify(const QString& title, const QString& text);
    QMenu* menu() const { return m_menu; }

    // The icon for a state: a coloured disc with a ring, drawn, so that no theme is needed.
    static QIcon iconFor(core::Contribution::State state);

Q_SIGNALS:
    void openDashboard();
    void contributeToggled(bool on);
    void snoozeHour();
    void snoozeUntilIdle();
    void devicePaused(const QString& deviceId, bool paused);
    void quit();

private:
    QSystemTrayIcon* m_icon;
    QMenu* m_menu;
    QMenu* m_devices;
    QAction* m_contribute;
};

} // namespace tessera::ui
