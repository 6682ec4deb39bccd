// libFuzzer target: the zip directory reader that sizes a TorchScript file before the broker loads
// it (core::ModelArchive), on bytes a stranger uploaded. It must answer a count or an error, never
// read outside what it was given.

#include <core/modelarchive.h>

#include <QFile>
#include <QTemporaryDir>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    static QTemporaryDir dir;
    static const QString path = dir.filePath(QStringLiteral("model.pt"));
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate))
        return 0;
    file.write(reinterpret_cast<const char*>(data), qint64(size));
    file.close();
    auto archive = tessera::core::ModelArchive::read(path);
    if (archive && archive->tensorBytes < 0)
        __builtin_trap();
    return 0;
}
