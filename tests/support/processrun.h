#pragma once

// Runs a program to its end for tests that drive Tessera's binaries as a user would.

#include <QProcess>
#include <QString>
#include <QStringList>

namespace tessera::tests {

struct Run {
    int exitCode = -1; // -1: timed out (and killed); -2: crashed
    QString output; // stdout and stderr together
};

inline Run run(const QString& program, const QStringList& arguments, int timeoutMs = 300'000)
{
    QProcess process;
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(program, arguments);
    if (!process.waitForFinished(timeoutMs)) {
        process.kill();
        process.waitForFinished();
        return { -1, QStringLiteral("timed out: ") + QString::fromUtf8(process.readAll()) };
    }
    return { process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -2, QString::fromUtf8(process.readAll()) };
}

} // namespace tessera::tests
