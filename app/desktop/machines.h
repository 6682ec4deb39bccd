#pragma once

#include <control/remotenode.h>
#include <core/error.h>
#include <ui/widgets/machinesview.h>

#include <QObject>
#include <QString>

#include <memory>
#include <optional>
#include <vector>

namespace tessera::app {

// The machines of the Machines tab (docs/APP.md, "Machines"): this computer through its own control
// API, and the nodes the user added by the address `tessera-node ctl url` prints, kept in
// machines.json in the data folder (mode 0600: it holds their tokens).
class Machines final : public QObject {
    Q_OBJECT

public:
    explicit Machines(QString file, QObject* parent = nullptr);

    // The nodes kept in the file; an error says why one or all could not be read (the rest stay).
    core::Status load();
    // This computer's own API, shown first while other machines are listed, and never kept in the file.
    void setLocal(const control::ControlEndpoint& endpoint);
    // A node by its address: checked (control::parsePairing), refused when it is there already.
    core::Status add(const QString& pairing);
    core::Status remove(int row);
    // An action on one machine (pause, resume): answered in its row.
    void act(int row, const QString& action);

    int count() const { return int(m_nodes.size()); }
    QList<ui::MachineRow> rows() const;
    // "3 machines: 2 working, 1 paused; 4.5 credits today, 12 in 7 days", from what they said last.
    QString totals() const;

Q_SIGNALS:
    void changed();

private:
    struct Node {
        QString pairing; // as added (empty for this computer)
        std::unique_ptr<control::RemoteNode> remote;
    };
    std::unique_ptr<control::RemoteNode> watch(const control::ControlEndpoint& endpoint);
    core::Status save() const;
    void watchLocal(); // this computer's row, while there are others

    std::optional<control::ControlEndpoint> m_local;

    QString m_file;
    std::vector<Node> m_nodes; // this computer first, where it serves its API
};

} // namespace tessera::app
