#include "settingsdialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QTabWidget>
#include <QVBoxLayout>

namespace tessera::ui {

using core::settings::Key;
using core::settings::Type;

SettingsDialog::SettingsDialog(core::settings::Settings& settings, QWidget* parent)
    : QDialog(parent)
    , m_settings(settings)
    , m_tabs(new QTabWidget)
    , m_problems(new QLabel)
{
    setWindowTitle(tr("Tessera settings"));
    m_problems->setWordWrap(true);
    m_problems->setStyleSheet(QStringLiteral("color: #b00020"));
    QHash<QString, QFormLayout*> groups;
    for (const auto& key : core::settings::keys()) {
        const QString group = key.name.section(u'/', 0, 0);
        if (group == u"Meta")
            continue;
        if (!groups.contains(group)) {
            auto* page = new QWidget;
            auto* form = new QFormLayout(page);
            auto* scroll = new QScrollArea;
            scroll->setWidget(page);
            scroll->setWidgetResizable(true);
            m_tabs->addTab(scroll, group);
            groups.insert(group, form);
        }
        QWidget* editor = nullptr;
        switch (key.type) {
        case Type::Bool:
            editor = new QCheckBox;
            break;
        case Type::Choice: {
            auto* box = new QComboBox;
            box->addItems(key.choices);
            editor = box;
            break;
        }
        default: {
            auto* line = new QLineEdit;
            line->setPlaceholderText(key.rangeText());
            editor = line;
            break;
        }
        }
        editor->setToolTip(QStringLiteral("%1\n%2 (%3)").arg(key.doc, key.name, key.rangeText()));
        editor->setObjectName(key.name);
        m_editors.insert(key.name, editor);
        auto* label = new QLabel(key.name.section(u'/', 1));
        label->setToolTip(key.doc);
        groups[group]->addRow(label, editor);
    }
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel);
    connect(buttons, &QDialogButtonBox::accepted, this, [this] {
        if (apply().isEmpty())
            accept();
    });
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_tabs);
    layout->addWidget(m_problems);
    layout->addWidget(buttons);
    load();
}

QWidget* SettingsDialog::editor(const QString& key) const
{
    return m_editors.value(key);
}

void SettingsDialog::load()
{
    for (const auto& key : core::settings::keys()) {
        auto* editor = m_editors.value(key.name);
        if (!editor)
            continue;
        const auto value = m_settings.value(key.name);
        if (auto* check = qobject_cast<QCheckBox*>(editor))
            check->setChecked(value.toBool());
        else if (auto* box = qobject_cast<QComboBox*>(editor))
            box->setCurrentText(value.toString());
        else if (auto* line = qobject_cast<QLineEdit*>(editor))
            line->setText(key.type == Type::StringList ? value.toStringList().join(QStringLiteral(", ")) : value.toString());
    }
    m_problems->clear();
}

void SettingsDialog::setEditorText(const QString& name, const QString& text)
{
    auto* editor = m_editors.value(name);
    if (auto* check = qobject_cast<QCheckBox*>(editor))
        check->setChecked(text == u"true");
    else if (auto* box = qobject_cast<QComboBox*>(editor))
        box->setCurrentText(text);
    else if (auto* line = qobject_cast<QLineEdit*>(editor))
        line->setText(text);
}

QVariant SettingsDialog::editorValue(const Key& key) const
{
    auto* editor = m_editors.value(key.name);
    if (auto* check = qobject_cast<QCheckBox*>(editor))
        return check->isChecked();
    if (auto* box = qobject_cast<QComboBox*>(editor))
        return box->currentText();
    auto* line = qobject_cast<QLineEdit*>(editor);
    const QString text = line ? line->text().trimmed() : QString();
    if (key.type == Type::StringList) {
        QStringList items;
        for (const auto& item : text.split(u',', Qt::SkipEmptyParts))
            items.append(item.trimmed());
        return items;
    }
    return text;
}

QStringList SettingsDialog::apply()
{
    QStringList problems;
    QList<std::pair<QString, QVariant>> values;
    for (const auto& key : core::settings::keys()) {
        if (!m_editors.contains(key.name))
            continue;
        const auto value = editorValue(key);
        auto valid = core::settings::validate(key, value);
        if (!valid)
            problems.append(QStringLiteral("%1: %2").arg(key.name, valid.error().message));
        else
            values.append({ key.name, *valid });
    }
    if (problems.isEmpty()) {
        for (const auto& [name, value] : values) {
            if (auto status = m_settings.set(name, value); !status)
                problems.append(status.error().toString());
        }
    }
    if (problems.isEmpty()) {
        if (auto saved = m_settings.save(); !saved)
            problems.append(saved.error().toString());
    }
    m_problems->setText(problems.join(u'\n'));
    return problems;
}

} // namespace tessera::ui
