#pragma once

#include "error.h"

#include <QByteArray>
#include <QFile>
#include <QString>

namespace tessera::core {

// A whole file's bytes, or why it cannot be read (the error names the file).
inline Result<QByteArray> readFile(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return Error { {}, QStringLiteral("cannot read %1: %2").arg(path, file.errorString()) };
    return file.readAll();
}

} // namespace tessera::core
