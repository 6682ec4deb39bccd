#include "keyedtablemodel.h"

#include <QSet>

namespace tessera::ui {

KeyedTableModel::KeyedTableModel(QStringList headers, QObject* parent)
    : QAbstractTableModel(parent)
    , m_headers(std::move(headers))
{ }

int KeyedTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_rows.size());
}

int KeyedTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_headers.size());
}

QVariant KeyedTableModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const auto& row = m_rows[index.row()];
    if (role == Qt::DisplayRole)
        return index.column() < row.cells.size() ? row.cells[index.column()] : QVariant();
    if (role == Qt::ToolTipRole)
        return index.column() < row.tips.size() ? row.tips[index.column()] : QVariant();
    return {};
}

QVariant KeyedTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (role != Qt::DisplayRole || orientation != Qt::Horizontal || section < 0 || section >= m_headers.size())
        return QAbstractTableModel::headerData(section, orientation, role);
    return m_headers[section];
}

int KeyedTableModel::indexOfKey(const QString& key) const
{
    for (qsizetype i = 0; i < m_rows.size(); ++i) {
        if (m_rows[i].key == key)
            return int(i);
    }
    return -1;
}

void KeyedTableModel::setRows(const QList<Row>& rows)
{
    m_lastChangedCells = 0;
    QSet<QString> incoming;
    for (const auto& row : rows)
        incoming.insert(row.key);
    // Rows that went.
    for (qsizetype i = m_rows.size() - 1; i >= 0; --i) {
        if (!incoming.contains(m_rows[i].key)) {
            beginRemoveRows({}, int(i), int(i));
            m_rows.removeAt(i);
            endRemoveRows();
        }
    }
    // The rows that stay must keep their order; otherwise start over (rare: tables sort by time).
    QSet<QString> present;
    for (const auto& row : std::as_const(m_rows))
        present.insert(row.key);
    QStringList staying;
    for (const auto& row : rows) {
        if (present.contains(row.key))
            staying.append(row.key);
    }
    QStringList current;
    for (const auto& row : std::as_const(m_rows))
        current.append(row.key);
    if (staying != current) {
        beginResetModel();
        m_rows = rows;
        endResetModel();
        return;
    }
    // Rows that came, and cells that changed.
    for (qsizetype j = 0; j < rows.size(); ++j) {
        if (j < m_rows.size() && m_rows[j].key == rows[j].key) {
            const Row before = m_rows[j];
            m_rows[j] = rows[j];
            auto at = [](const QList<QVariant>& list, int column) { return column < list.size() ? list[column] : QVariant(); };
            for (int column = 0; column < columnCount(); ++column) {
                if (at(before.cells, column) != at(rows[j].cells, column)
                    || at(before.tips, column) != at(rows[j].tips, column)) {
                    ++m_lastChangedCells;
                    const auto cell = index(int(j), column);
                    Q_EMIT dataChanged(cell, cell, { Qt::DisplayRole, Qt::ToolTipRole });
                }
            }
            continue;
        }
        beginInsertRows({}, int(j), int(j));
        m_rows.insert(j, rows[j]);
        endInsertRows();
    }
}

} // namespace tessera::ui
