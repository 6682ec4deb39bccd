#pragma once

#include <QAbstractTableModel>
#include <QList>
#include <QStringList>
#include <QVariant>

namespace tessera::ui {

// A table whose rows are named by a key and refreshed as a whole on each tick: setRows() works out
// which rows came, went or changed and emits only the changed cells, so that views keep their
// selection and scroll position and repaint little. Subclasses name their columns with an
// `enum class Column` and turn their domain rows into cells.
class KeyedTableModel : public QAbstractTableModel {
    Q_OBJECT

public:
    struct Row {
        QString key;
        QList<QVariant> cells; // one per column, shown as DisplayRole
        QList<QVariant> tips; // optional ToolTipRole per column
    };

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

    void setRows(const QList<Row>& rows);
    const Row& rowAt(int row) const { return m_rows[row]; }
    int indexOfKey(const QString& key) const;
    // How many cells the last setRows() reported as changed (inserted and removed rows not counted).
    int lastChangedCells() const { return m_lastChangedCells; }

protected:
    explicit KeyedTableModel(QStringList headers, QObject* parent = nullptr);

private:
    QStringList m_headers;
    QList<Row> m_rows;
    int m_lastChangedCells = 0;
};

} // namespace tessera::ui
