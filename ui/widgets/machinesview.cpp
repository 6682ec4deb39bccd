#include "machinesview.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace tessera::ui {

namespace {

enum Column { Name, Address, State, Shard, Temperature, Today, Week, Columns };

} // namespace

MachinesView::MachinesView(QWidget* parent)
    : QWidget(parent)
    , m_totals(new QLabel)
    , m_address(new QLineEdit)
    , m_add(new QPushButton(tr("Add")))
    , m_addError(new QLabel)
    , m_table(new QTableWidget(0, Columns))
    , m_pause(new QPushButton(tr("Pause")))
    , m_resume(new QPushButton(tr("Resume")))
    , m_remove(new QPushButton(tr("Remove")))
{
    auto* layout = new QVBoxLayout(this);
    // What other nodes say is shown as text, never as markup.
    m_totals->setTextFormat(Qt::PlainText);
    m_addError->setTextFormat(Qt::PlainText);
    m_totals->setStyleSheet(QStringLiteral("font-size: 14pt; font-weight: 600;"));
    layout->addWidget(m_totals);

    auto* add = new QHBoxLayout;
    m_address->setPlaceholderText(tr("Another node's address: what `tessera-node ctl url` prints on it"));
    add->addWidget(m_address, 1);
    add->addWidget(m_add);
    layout->addLayout(add);
    m_addError->setStyleSheet(QStringLiteral("color: #c53030;"));
    m_addError->setWordWrap(true);
    m_addError->hide();
    layout->addWidget(m_addError);

    m_table->setHorizontalHeaderLabels(
        { tr("Machine"), tr("Address"), tr("State"), tr("Shard"), tr("Temperature"), tr("Today"), tr("7 days") });
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setSectionResizeMode(Shard, QHeaderView::Stretch);
    layout->addWidget(m_table, 1);

    auto* actions = new QHBoxLayout;
    actions->addWidget(m_pause);
    actions->addWidget(m_resume);
    actions->addStretch();
    actions->addWidget(m_remove);
    layout->addLayout(actions);

    const auto addNow = [this] {
        if (!m_address->text().trimmed().isEmpty())
            Q_EMIT addMachine(m_address->text().trimmed());
    };
    connect(m_add, &QPushButton::clicked, this, addNow);
    connect(m_address, &QLineEdit::returnPressed, this, addNow);
    connect(m_pause, &QPushButton::clicked, this, [this] { Q_EMIT pauseMachine(selectedRow()); });
    connect(m_resume, &QPushButton::clicked, this, [this] { Q_EMIT resumeMachine(selectedRow()); });
    connect(m_remove, &QPushButton::clicked, this, [this] { Q_EMIT removeMachine(selectedRow()); });
    connect(m_table, &QTableWidget::itemSelectionChanged, this, &MachinesView::enableButtons);
    enableButtons();
}

void MachinesView::setRows(const QList<MachineRow>& rows)
{
    const int selected = selectedRow();
    m_rows = rows;
    m_table->setRowCount(int(rows.size()));
    for (int i = 0; i < rows.size(); ++i) {
        const auto& row = rows[i];
        const QStringList cells { row.name, row.address, row.state, row.shard,
            row.temperature.isEmpty() ? QStringLiteral("—") : row.temperature, row.today, row.week };
        for (int column = 0; column < Columns; ++column) {
            auto* item = m_table->item(i, column);
            if (!item) {
                item = new QTableWidgetItem;
                m_table->setItem(i, column, item);
            }
            item->setText(cells[column]);
            const QString tip = column == State ? row.detail : cells[column];
            item->setToolTip(tip.isEmpty() ? QString() : QStringLiteral("<p>%1</p>").arg(tip.toHtmlEscaped())); // as text
            item->setForeground(column == State && (row.state == u"unreachable" || row.state == u"error")
                    ? QBrush(QColor(0xc5, 0x30, 0x30))
                    : QBrush());
        }
    }
    if (selected >= 0 && selected < rows.size())
        m_table->selectRow(selected);
    m_table->resizeColumnsToContents();
    m_table->horizontalHeader()->setSectionResizeMode(Shard, QHeaderView::Stretch);
    enableButtons();
}

void MachinesView::setTotals(const QString& text)
{
    m_totals->setText(text);
}

QString MachinesView::totals() const
{
    return m_totals->text();
}

void MachinesView::setAddError(const QString& text)
{
    m_addError->setText(text);
    m_addError->setVisible(!text.isEmpty());
    if (text.isEmpty())
        m_address->clear();
}

QString MachinesView::addError() const
{
    return m_addError->text();
}

int MachinesView::selectedRow() const
{
    const auto selected = m_table->selectionModel()->selectedRows();
    return selected.isEmpty() ? -1 : selected.first().row();
}

void MachinesView::enableButtons()
{
    const int row = selectedRow();
    const bool any = row >= 0 && row < m_rows.size();
    m_pause->setEnabled(any);
    m_resume->setEnabled(any);
    m_remove->setEnabled(any && m_rows[row].removable);
}

} // namespace tessera::ui
