#pragma once

#include <QStringList>

namespace tessera::app {

// Parses the command line of tessera-node and runs the subcommand; returns the exit code.
int runNodeCommand(const QStringList& arguments);

} // namespace tessera::app
