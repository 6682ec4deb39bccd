#pragma once

#include <QList>
#include <QString>
#include <QWidget>

class QLabel;
class QLineEdit;
class QPushButton;
class QTableWidget;

namespace tessera::ui {

// One machine of the Machines tab: this computer, or another node the user added by its address.
struct MachineRow {
    QString name; // what the node calls itself ("garage"); its address until it answered
    QString address; // "192.0.2.7:7780", or "this computer"
    QString state; // "working", "paused", ..., or "unreachable"
    QString detail; // its reason, or why it cannot be reached
    QString shard; // "job J, round 2, shard 1: step 40 of 100"
    QString temperature; // "61 °C"; empty where unknown
    QString today; // credits earned today
    QString week; // in the last 7 days
    bool removable = true; // this computer is not
};

// The Machines tab (docs/APP.md, "Machines"): every machine's state, shard, temperature and
// earnings in one table, with their totals; add a node by the address `tessera-node ctl url` prints
// on it, and pause, resume or remove the selected one. It decides nothing: it says what was asked.
class MachinesView final : public QWidget {
    Q_OBJECT

public:
    explicit MachinesView(QWidget* parent = nullptr);

    void setRows(const QList<MachineRow>& rows);
    void setTotals(const QString& text);
    // Why the last address pasted was not added (empty: it was).
    void setAddError(const QString& text);

    QTableWidget* table() const { return m_table; }
    QLineEdit* addField() const { return m_address; }
    QPushButton* addButton() const { return m_add; }
    QPushButton* pauseButton() const { return m_pause; }
    QPushButton* resumeButton() const { return m_resume; }
    QPushButton* removeButton() const { return m_remove; }
    QString totals() const;
    QString addError() const;

Q_SIGNALS:
    void addMachine(const QString& address);
    void pauseMachine(int row);
    void resumeMachine(int row);
    void removeMachine(int row);

private:
    int selectedRow() const;
    void enableButtons();

    QLabel* m_totals;
    QLineEdit* m_address;
    QPushButton* m_add;
    QLabel* m_addError;
    QTableWidget* m_table;
    QPushButton* m_pause;
    QPushButton* m_resume;
    QPushButton* m_remove;
    QList<MachineRow> m_rows;
};

} // namespace tessera::ui
