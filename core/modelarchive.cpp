#include "modelarchive.h"

#include <QFile>
#include <QRegularExpression>

namespace tessera::core {

namespace {

constexpr std::uint32_t EndOfDirectory = 0x06054b50;
constexpr std::uint32_t Zip64Locator = 0x07064b50;
constexpr std::uint32_t Zip64EndOfDirectory = 0x06064b50;
constexpr std::uint32_t DirectoryEntry = 0x02014b50;
constexpr qsizetype EndRecordBytes = 22;
constexpr qsizetype MaxComment = 0xFFFF;
constexpr std::int64_t MaxEntries = 1'000'000;
constexpr std::int64_t MaxDirectoryBytes = 256LL * 1024 * 1024;

std::uint64_t little(const QByteArray& bytes, qsizetype at, int width)
{
    std::uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i)
        value = (value << 8) | std::uint8_t(bytes[at + i]);
    return value;
}

Error bad(const QString& why)
{
    return Error { QStringLiteral("model"), QStringLiteral("not a TorchScript file (a zip archive): %1").arg(why) };
}

struct Directory {
    std::uint64_t entries = 0;
    std::uint64_t size = 0;
    std::uint64_t offset = 0;
};

// The central directory's place, from the end-of-directory record (zip64 when it says so).
Result<Directory> findDirectory(QFile& file)
{
    const auto fileSize = file.size();
    if (fileSize < EndRecordBytes)
        return bad(QStringLiteral("too short"));
    const auto tailSize = std::min<qint64>(fileSize, EndRecordBytes + MaxComment);
    if (!file.seek(fileSize - tailSize))
        return bad(QStringLiteral("unreadable"));
    const QByteArray tail = file.read(tailSize);
    qsizetype at = -1;
    for (qsizetype i = tail.size() - EndRecordBytes; i >= 0; --i) {
        if (little(tail, i, 4) == EndOfDirectory) {
            at = i;
            break;
        }
    }
    if (at < 0)
        return bad(QStringLiteral("no end-of-directory record"));
    Directory directory { little(tail, at + 10, 2), little(tail, at + 12, 4), little(tail, at + 16, 4) };
    const bool zip64 = directory.entries == 0xFFFF || directory.size == 0xFFFFFFFF || directory.offset == 0xFFFFFFFF;
    if (!zip64)
        return directory;
    const qint64 locatorAt = fileSize - tailSize + at - 20;
    if (locatorAt < 0 || !file.seek(locatorAt))
        return bad(QStringLiteral("no zip64 locator"));
    const QByteArray locator = file.read(20);
    if (locator.size() != 20 || little(locator, 0, 4) != Zip64Locator)
        return bad(QStringLiteral("no zip64 locator"));
    const auto recordAt = little(locator, 8, 8);
    if (recordAt > std::uint64_t(fileSize) || !file.seek(qint64(recordAt)))
        return bad(QStringLiteral("zip64 record outside the file"));
    const QByteArray record = file.read(56);
    if (record.size() != 56 || little(record, 0, 4) != Zip64EndOfDirectory)
        return bad(QStringLiteral("no zip64 end-of-directory record"));
    return Directory { little(record, 32, 8), little(record, 40, 8), little(record, 48, 8) };
}

// An entry's uncompressed size: its 32-bit field, or the zip64 extra field when that says 0xFFFFFFFF.
std::uint64_t uncompressedSize(const QByteArray& directory, qsizetype entry, qsizetype extraAt, qsizetype extraLength)
{
    const auto size32 = little(directory, entry + 24, 4);
    if (size32 != 0xFFFFFFFF)
        return size32;
    for (qsizetype at = extraAt; at + 4 <= extraAt + extraLength;) {
        const auto id = little(directory, at, 2);
        const auto length = qsizetype(little(directory, at + 2, 2));
        if (at + 4 + length > extraAt + extraLength)
            break;
        if (id == 0x0001 && length >= 8)
            return little(directory, at + 4, 8); // the uncompressed size comes first
        at += 4 + length;
    }
    return size32;
}

} // namespace

Result<ModelArchive> ModelArchive::read(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return Error { QStringLiteral("model"), QStringLiteral("cannot read %1").arg(path) };
    auto found = findDirectory(file);
    if (!found)
        return found.error();
    const auto& where = *found;
    if (where.entries > std::uint64_t(MaxEntries) || where.size > std::uint64_t(MaxDirectoryBytes)
        || where.offset + where.size > std::uint64_t(file.size()))
        return bad(QStringLiteral("the directory is larger than the file or than any model's"));
    if (!file.seek(qint64(where.offset)))
        return bad(QStringLiteral("unreadable directory"));
    const QByteArray directory = file.read(qint64(where.size));
    if (directory.size() != qsizetype(where.size))
        return bad(QStringLiteral("truncated directory"));

    static const QRegularExpression storage(QStringLiteral("^[^/]+/(data|constants)/[^/]+$"));
    ModelArchive archive;
    qsizetype at = 0;
    for (std::uint64_t i = 0; i < where.entries; ++i) {
        constexpr qsizetype Fixed = 46;
        if (at + Fixed > directory.size() || little(directory, at, 4) != DirectoryEntry)
            return bad(QStringLiteral("entry %1 is damaged").arg(i));
        const auto nameLength = qsizetype(little(directory, at + 28, 2));
        const auto extraLength = qsizetype(little(directory, at + 30, 2));
        const auto commentLength = qsizetype(little(directory, at + 32, 2));
        const auto next = at + Fixed + nameLength + extraLength + commentLength;
        if (next > directory.size())
            return bad(QStringLiteral("entry %1 runs past the directory").arg(i));
        const QString name = QString::fromUtf8(directory.mid(at + Fixed, nameLength));
        const auto size = uncompressedSize(directory, at, at + Fixed + nameLength, extraLength);
        if (storage.match(name).hasMatch()) {
            if (size > std::uint64_t(1) << 50)
                return bad(QStringLiteral("entry %1 claims %2 bytes").arg(name).arg(size));
            archive.tensorBytes += std::int64_t(size);
            if (archive.tensorBytes > std::int64_t(1) << 52)
                return bad(QStringLiteral("its entries claim more than 4 PiB"));
        }
        ++archive.entries;
        at = next;
    }
    return archive;
}

} // namespace tessera::core
