#pragma once

// Runs a program to its end for tests that drive Tessera's binaries as a user would.

#include <QProcess>
#include <QString>
#include <QStringList>

namespace tessera::tests {

struct Run {
    int exitCode = -1; // -1: timed out (and killed); -2: crashed
    QString output; // stdout and stderr together
    QString standardOutput; // stdout alone: where --json puts its one document
};

inline Run run(const QString& program, const QStringList& arguments, int timeoutMs = 300'000)
{
    QProcess process;
    process.start(program, arguments);
    if (!process.waitForFinished(timeoutMs)) {
        process.kill();
        process.waitForFinished();
        return { -1,
            QStringLiteral("timed out: ") + QString::fromUtf8(process.readAllStandardError() + process.readAllStandardOutput()),
            {} };
    }
    const QString standardOutput = QString::fromUtf8(process.readAllStandardOutput());
    // Messages first, then what was printed: both channels are read at the end, so their
    // interleaving is lost; tests look for lines, not their order.
    return { process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -2,
        QString::fromUtf8(process.readAllStandardError()) + standardOutput, standardOutput };
}

} // namespace tessera::tests
