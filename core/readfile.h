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
    // Into a buffer of the file's size, read once: QIODevice::readAll grows its buffer as it reads,
    // so a 160 MB file could cost more than its size at the peak.
    const qint64 size = file.size();
    if (size <= 0)
        return file.readAll(); // empty, or a size not known ahead (/proc)
    QByteArray bytes(size, Qt::Uninitialized);
    qint64 done = 0;
    while (done < size) {
        const qint64 got = file.read(bytes.data() + done, size - done);
        if (got < 0)
            return Error { {}, QStringLiteral("cannot read %1: %2").arg(path, file.errorString()) };
        if (got == 0)
            break; // shorter than it was a moment ago
        done += got;
    }
    bytes.truncate(done);
    if (done == size)
        bytes += file.readAll(); // a file that grew meanwhile
    return bytes;
}

} // namespace tessera::core
