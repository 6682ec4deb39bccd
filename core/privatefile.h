#pragma once

#include "error.h"

#include <QByteArray>
#include <QSaveFile>
#include <QString>

namespace tessera::core {

// Writes a file only its owner may read (a key, an identity): whole or not at all (a temporary file
// renamed into place). `what` names it in the error ("the signing key").
inline Status writePrivateFile(const QString& path, const QByteArray& bytes, const QString& what)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly))
        return Error { path, QStringLiteral("cannot write %1").arg(what) };
    file.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner);
    file.write(bytes);
    if (!file.commit())
        return Error { path, QStringLiteral("cannot write %1").arg(what) };
    return {};
}

} // namespace tessera::core
