// libFuzzer target: the settings loader on an arbitrary INI file. Every value is either used or
// reported; nothing crashes, and what the loader keeps validates.

#include <core/settings/settings.h>

#include <QDir>
#include <QFile>
#include <QTemporaryDir>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    // In memory where there is /dev/shm: the loader reads a file, and disks are slow for a fuzzer.
    static QTemporaryDir dir(
        QDir(QStringLiteral("/dev/shm")).exists() ? QStringLiteral("/dev/shm/tessera-fuzz-XXXXXX") : QString());
    const QString path = dir.filePath(QStringLiteral("fuzz.ini"));
    {
        QFile file(path);
        if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate))
            return 0;
        file.write(reinterpret_cast<const char*>(data), qint64(size));
    }
    tessera::core::settings::Settings settings(path);
    (void)settings.load();
    for (const auto& key : tessera::core::settings::keys()) {
        if (!tessera::core::settings::validate(key, settings.value(key.name)))
            __builtin_trap(); // the loader kept a value its own rules refuse
    }
    return 0;
}
