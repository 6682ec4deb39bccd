#pragma once

#include <QCoreApplication>
#include <QFileInfo>
#include <QString>

namespace tessera::core {

// Where one of Tessera's helper programs is (tessera-compute, tessera-device-probe, the desktop
// app's tessera-broker): the environment variable `variable` when it is set (tests and programs
// that run outside the build's app folder), else beside the running program (the build tree), else
// in `installedFolder`.
inline QString helperProgram(const char* variable, const QString& name, const QString& installedFolder)
{
    if (variable) {
        if (const QString named = qEnvironmentVariable(variable); !named.isEmpty())
            return named;
    }
    const QString beside = QCoreApplication::applicationDirPath() + u'/' + name;
    if (QFileInfo(beside).isExecutable())
        return beside;
    return installedFolder + u'/' + name;
}

} // namespace tessera::core
