// tessera-node: the headless provider. Subcommands grow with the roadmap; today it trains whole
// jobs on this machine (train-local) and single shards (train-shard, as a verifier would).

#include "nodecommands.h"

#include <QCoreApplication>

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("tessera-node"));
    QCoreApplication::setOrganizationName(QStringLiteral("Tessera"));
    QCoreApplication::setApplicationVersion(QStringLiteral(TESSERA_VERSION));
    return tessera::app::runNodeCommand(QCoreApplication::arguments());
}
