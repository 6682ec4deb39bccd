#include "tensorfile.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace tessera::compute::pickle {

static_assert(std::endian::native == std::endian::little, "canonical weight bytes assume a little-endian host");

namespace {

core::Error bad(const QString& why)
{
    return core::Error { {}, why };
}

std::uint64_t little(QByteArrayView bytes, qsizetype at, int width)
{
    std::uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i)
        value = (value << 8) | std::uint8_t(bytes[at + i]);
    return value;
}

// The records of a zip archive as torch.save writes it (every record stored, uncompressed), by
// name without the archive's top folder ("archive/data.pkl" is "data.pkl").
core::Result<QHash<QString, QByteArrayView>> storedRecords(QByteArrayView zip)
{
    constexpr qsizetype EndSize = 22;
    if (zip.size() < EndSize)
        return bad(QStringLiteral("not a zip archive (too short)"));
    qsizetype end = -1;
    const qsizetype earliest = std::max<qsizetype>(0, zip.size() - EndSize - 0xffff);
    for (qsizetype at = zip.size() - EndSize; at >= earliest; --at) {
        if (little(zip, at, 4) == 0x06054b50) {
            end = at;
            break;
        }
    }
    if (end < 0)
        return bad(QStringLiteral("not a zip archive (no end of its directory)"));
    std::uint64_t count = little(zip, end + 10, 2);
    std::uint64_t directorySize = little(zip, end + 12, 4);
    std::uint64_t directory = little(zip, end + 16, 4);
    if (count == 0xffff || directorySize == 0xffffffff || directory == 0xffffffff) {
        // ZIP64: the locator just before the end record points at the 64-bit end record.
        const qsizetype locator = end - 20;
        if (locator < 0 || little(zip, locator, 4) != 0x07064b50)
            return bad(QStringLiteral("a ZIP64 archive without its locator"));
        const std::uint64_t end64 = little(zip, locator + 8, 8);
        if (zip.size() < 56 || end64 > std::uint64_t(zip.size()) - 56 || little(zip, qsizetype(end64), 4) != 0x06064b50)
            return bad(QStringLiteral("a ZIP64 archive without its end record"));
        count = little(zip, qsizetype(end64) + 32, 8);
        directorySize = little(zip, qsizetype(end64) + 40, 8);
        directory = little(zip, qsizetype(end64) + 48, 8);
    }
    if (directory > std::uint64_t(zip.size()) || directorySize > std::uint64_t(zip.size()) - directory)
        return bad(QStringLiteral("a zip archive whose directory lies outside it"));
    QHash<QString, QByteArrayView> records;
    qsizetype at = qsizetype(directory);
    const qsizetype directoryEnd = qsizetype(directory + directorySize);
    for (std::uint64_t i = 0; i < count; ++i) {
        if (at + 46 > directoryEnd || little(zip, at, 4) != 0x02014b50)
            return bad(QStringLiteral("a zip archive with a broken directory"));
        const auto method = little(zip, at + 10, 2);
        std::uint64_t compressed = little(zip, at + 20, 4);
        std::uint64_t size = little(zip, at + 24, 4);
        const qsizetype nameLength = qsizetype(little(zip, at + 28, 2));
        const qsizetype extraLength = qsizetype(little(zip, at + 30, 2));
        const qsizetype commentLength = qsizetype(little(zip, at + 32, 2));
        std::uint64_t local = little(zip, at + 42, 4);
        if (at + 46 + nameLength + extraLength + commentLength > directoryEnd)
            return bad(QStringLiteral("a zip archive with a broken directory"));
        const QString name = QString::fromUtf8(zip.sliced(at + 46, nameLength));
        // ZIP64 sizes and offset, in the order of the fields that overflowed.
        const qsizetype extraEnd = at + 46 + nameLength + extraLength;
        for (qsizetype extra = at + 46 + nameLength; extra + 4 <= extraEnd;) {
            const auto id = little(zip, extra, 2);
            const qsizetype length = qsizetype(little(zip, extra + 2, 2));
            if (id == 0x0001) {
                qsizetype field = extra + 4;
                auto next = [&](std::uint64_t& value) {
                    if (value == 0xffffffff && field + 8 <= std::min(extra + 4 + length, extraEnd)) {
                        value = little(zip, field, 8);
                        field += 8;
                    }
                };
                next(size);
                next(compressed);
                next(local);
            }
            extra += 4 + length;
        }
        at += 46 + nameLength + extraLength + commentLength;
        if (method != 0 || compressed != size)
            return bad(QStringLiteral("record %1 is compressed (torch.save stores its records)").arg(name));
        if (local > std::uint64_t(zip.size()) - 30 || little(zip, qsizetype(local), 4) != 0x04034b50)
            return bad(QStringLiteral("record %1 has no local header").arg(name));
        const std::uint64_t data = local + 30 + little(zip, qsizetype(local) + 26, 2) + little(zip, qsizetype(local) + 28, 2);
        if (data > std::uint64_t(zip.size()) || size > std::uint64_t(zip.size()) - data)
            return bad(QStringLiteral("record %1 lies outside the archive").arg(name));
        const qsizetype slash = name.indexOf(u'/');
        records.insert(slash < 0 ? name : name.mid(slash + 1), zip.sliced(qsizetype(data), qsizetype(size)));
    }
    return records;
}

// The canonical dtype byte (docs/DETERMINISM.md, "Canonical weights").
std::uint8_t dtypeCode(DType type)
{
    switch (type) {
    case DType::Float32:
        return 1;
    case DType::Float64:
        return 2;
    case DType::Int64:
        return 3;
    case DType::Int32:
        return 4;
    case DType::Float16:
        return 5;
    case DType::BFloat16:
        return 6;
    case DType::Bool:
        return 7;
    case DType::UInt8:
        return 8;
    case DType::Int8:
        return 9;
    case DType::Int16:
        return 10;
    }
    return 0;
}

std::int64_t elementCount(const TensorRef& tensor)
{
    std::int64_t count = 1;
    for (auto size : tensor.sizes)
        count *= size;
    return count;
}

} // namespace

core::Result<TensorFile> TensorFile::read(QByteArray bytes)
{
    TensorFile file;
    file.m_bytes = std::move(bytes);
    auto records = storedRecords(file.m_bytes);
    if (!records)
        return records.error();
    const auto program = records->constFind(QStringLiteral("data.pkl"));
    if (program == records->constEnd())
        return bad(QStringLiteral("not a file written by torch.save (no data.pkl)"));
    auto refs = readTensorMap(*program);
    if (!refs)
        return refs.error();
    for (const auto& ref : *refs) {
        const auto record = records->constFind(QStringLiteral("data/") + ref.storageKey);
        if (record == records->constEnd())
            return bad(QStringLiteral("'%1' names storage %2, which the file does not hold").arg(ref.name, ref.storageKey));
        const auto elementBytes = std::uint64_t(elementSize(ref.dtype));
        if (ref.storageNumel < 0 || std::uint64_t(record->size()) / elementBytes < std::uint64_t(ref.storageNumel))
            return bad(QStringLiteral("storage %1 of '%2' holds %3 bytes, not %4")
                           .arg(ref.storageKey, ref.name)
                           .arg(record->size())
                           .arg(std::uint64_t(ref.storageNumel) * elementBytes));
        // Every element the view reaches lies in its storage.
        if (ref.sizes.size() != ref.strides.size() || ref.offset < 0)
            return bad(QStringLiteral("'%1' is a view with a broken shape").arg(ref.name));
        std::int64_t last = ref.offset;
        bool empty = false;
        for (qsizetype d = 0; d < ref.sizes.size(); ++d) {
            if (ref.sizes[d] < 0 || ref.strides[d] < 0)
                return bad(QStringLiteral("'%1' is a view with a broken shape").arg(ref.name));
            if (ref.sizes[d] == 0)
                empty = true;
            else if (ref.strides[d] > 0 && (ref.sizes[d] - 1) > (std::int64_t(1) << 62) / ref.strides[d])
                return bad(QStringLiteral("'%1' is a view with a broken shape").arg(ref.name));
            else
                last += (ref.sizes[d] - 1) * ref.strides[d];
        }
        if (!empty && last >= ref.storageNumel)
            return bad(QStringLiteral("'%1' reaches past the end of storage %2").arg(ref.name, ref.storageKey));
        file.m_storages.insert(ref.storageKey, *record);
    }
    file.m_tensors = std::move(*refs);
    std::sort(file.m_tensors.begin(), file.m_tensors.end(),
        [](const TensorRef& a, const TensorRef& b) { return a.name.toUtf8() < b.name.toUtf8(); });
    return file;
}

QByteArray TensorFile::contiguousBytes(const TensorRef& tensor) const
{
    const QByteArrayView storage = m_storages.value(tensor.storageKey);
    const qsizetype element = elementSize(tensor.dtype);
    const std::int64_t count = elementCount(tensor);
    QByteArray out(qsizetype(count) * element, Qt::Uninitialized);
    if (count == 0)
        return out;
    // Row-major order: the last dimension fastest; contiguous runs copied whole.
    bool contiguous = true;
    std::int64_t expected = 1;
    for (qsizetype d = tensor.sizes.size() - 1; d >= 0; --d) {
        if (tensor.sizes[d] != 1 && tensor.strides[d] != expected)
            contiguous = false;
        expected *= tensor.sizes[d];
    }
    if (contiguous) {
        std::memcpy(out.data(), storage.data() + tensor.offset * element, std::size_t(out.size()));
        return out;
    }
    const qsizetype dims = tensor.sizes.size();
    QList<std::int64_t> index(dims, 0);
    std::int64_t at = tensor.offset;
    for (std::int64_t i = 0; i < count; ++i) {
        std::memcpy(out.data() + i * element, storage.data() + at * element, std::size_t(element));
        for (qsizetype d = dims - 1; d >= 0; --d) {
            if (++index[d] < tensor.sizes[d]) {
                at += tensor.strides[d];
                break;
            }
            at -= (tensor.sizes[d] - 1) * tensor.strides[d];
            index[d] = 0;
        }
    }
    return out;
}

core::Result<core::Digest> canonicalHash(const QByteArray& bytes)
{
    auto file = TensorFile::read(bytes);
    if (!file)
        return core::Error { {}, QStringLiteral("not a dict of tensors: %1").arg(file.error().message) };
    core::Sha256 hasher;
    auto addInt64 = [&](std::int64_t value) { hasher.addData(QByteArrayView(reinterpret_cast<const char*>(&value), 8)); };
    for (const auto& tensor : file->tensors()) {
        const QByteArray name = tensor.name.toUtf8();
        hasher.addData(QByteArrayView(name.constData(), name.size() + 1)); // with the NUL
        const char code = char(dtypeCode(tensor.dtype));
        hasher.addData(QByteArrayView(&code, 1));
        addInt64(tensor.sizes.size());
        for (auto size : tensor.sizes)
            addInt64(size);
        hasher.addData(file->contiguousBytes(tensor));
    }
    return hasher.result();
}

} // namespace tessera::compute::pickle
