#pragma once

#include <core/settings/settings.h>

#include <QDialog>
#include <QHash>

class QLabel;
class QTabWidget;

namespace tessera::ui {

// Every setting of the key table (core/settings/settingskeys.cpp), one tab per group, over the
// same INI file the headless node reads. Values are checked by the same rules as the file: a wrong
// one is named and nothing is saved until it is fixed.
class SettingsDialog final : public QDialog {
    Q_OBJECT

public:
    explicit SettingsDialog(core::settings::Settings& settings, QWidget* parent = nullptr);

    // Shows the values the settings hold now.
    void load();
    // Checks every field; saves when all are valid. Returns the problems (empty: saved).
    QStringList apply();
    // The editor of a key ("Compute/MaxThreads"), for tests.
    QWidget* editor(const QString& key) const;
    // Sets an editor's value from text ("true", "4", "a, b"), as a user would type it.
    void setEditorText(const QString& key, const QString& text);

private:
    QVariant editorValue(const core::settings::Key& key) const;

    core::settings::Settings& m_settings;
    QTabWidget* m_tabs;
    QLabel* m_problems;
    QHash<QString, QWidget*> m_editors;
};

} // namespace tessera::ui
