#pragma once

// What the command-line programs (tessera-node, tessera-broker, tessera-job) share: stdout and
// stderr streams, an error line that names the program, and one JSON document on stdout (what
// --json promises scripts).

#include <QJsonDocument>
#include <QString>
#include <QTextStream>

namespace tessera::app::cli {

QTextStream& out();
QTextStream& err();
// Qt's log messages kept in the process's log tail too (core::LogTail, the control API's "log").
void keepMessagesInLogTail();
// "PROGRAM: message" on stderr (PROGRAM: the application name); returns 1, the exit status.
int fail(const QString& message);
// Exactly one JSON document on stdout; returns 0.
int printJson(const QJsonDocument& document);

} // namespace tessera::app::cli
