#include "tensorwriter.h"

#include <QtEndian>

#include <zlib.h>

namespace tessera::compute::pickle {

namespace {

// The few pickle opcodes torch.save's tensors need.
class Pickler {
public:
    QByteArray bytes;

    void op(char code) { bytes.append(code); }
    void string(const QString& text)
    {
        const QByteArray utf8 = text.toUtf8();
        op('X');
        appendLittle(std::uint32_t(utf8.size()));
        bytes.append(utf8);
    }
    void integer(std::int64_t value)
    {
        if (value >= 0 && value < 256) {
            op('K');
            bytes.append(char(value));
        } else if (value >= INT32_MIN && value <= INT32_MAX) {
            op('J');
            appendLittle(std::uint32_t(std::int32_t(value)));
        } else { // LONG1: 8 bytes, two's complement
            bytes.append(char(0x8a));
            bytes.append(char(8));
            appendLittle(std::uint64_t(value));
        }
    }
    void global(const char* module, const QString& name)
    {
        op('c');
        bytes.append(module);
        bytes.append('\n');
        bytes.append(name.toLatin1());
        bytes.append('\n');
    }
    void integers(const QList<std::int64_t>& values)
    {
        op('(');
        for (const auto value : values)
            integer(value);
        op('t');
    }
    template<typename T> void appendLittle(T value)
    {
        value = qToLittleEndian(value);
        bytes.append(reinterpret_cast<const char*>(&value), sizeof value);
    }
};

QByteArray pickleOf(const QList<TensorData>& tensors)
{
    Pickler p;
    p.bytes.append(char(0x80));
    p.bytes.append(char(2));
    p.op('}');
    p.op('(');
    for (qsizetype i = 0; i < tensors.size(); ++i) {
        const auto& tensor = tensors[i];
        QList<std::int64_t> strides(tensor.sizes.size());
        std::int64_t stride = 1;
        for (qsizetype d = tensor.sizes.size() - 1; d >= 0; --d) {
            strides[d] = stride;
            stride *= tensor.sizes[d];
        }
        p.string(tensor.name);
        p.global("torch._utils", QStringLiteral("_rebuild_tensor_v2"));
        p.op('(');
        p.op('(');
        p.string(QStringLiteral("storage"));
        p.global("torch", storageName(tensor.dtype));
        p.string(QString::number(i));
        p.string(QStringLiteral("cpu"));
        p.integer(stride);
        p.op('t');
        p.op('Q'); // BINPERSID
        p.integer(0);
        p.integers(tensor.sizes);
        p.integers(strides);
        p.bytes.append(char(0x89)); // requires_grad False
        p.global("collections", QStringLiteral("OrderedDict"));
        p.op(')');
        p.op('R');
        p.op('t');
        p.op('R');
    }
    p.op('u');
    p.op('.');
    return p.bytes;
}

// An uncompressed ("stored") zip archive, as PyTorch's reader expects it.
class ZipWriter {
public:
    void add(const QString& name, const QByteArray& data)
    {
        const QByteArray utf8 = name.toUtf8();
        const auto crc = std::uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(data.constData()), uInt(data.size())));
        Entry entry { utf8, crc, std::uint32_t(data.size()), std::uint32_t(m_out.size()) };
        // Data aligned to 64 bytes (as torch.save does), with an extra field of padding.
        const qsizetype headerEnd = m_out.size() + 30 + utf8.size() + 4;
        const std::uint16_t padding = std::uint16_t((64 - headerEnd % 64) % 64);
        put32(0x04034b50);
        common(entry);
        put16(std::uint16_t(utf8.size()));
        put16(std::uint16_t(4 + padding));
        m_out.append(utf8);
        put16(0x4246); // "FB", PyTorch's padding field
        put16(padding);
        m_out.append(QByteArray(padding, 'Z'));
        m_out.append(data);
        m_entries.append(entry);
    }

    QByteArray finish()
    {
        const auto directoryStart = std::uint32_t(m_out.size());
        for (const auto& entry : m_entries) {
            put32(0x02014b50);
            put16(0); // made by
            common(entry);
            put16(std::uint16_t(entry.name.size()));
            put16(0); // extra
            put16(0); // comment
            put16(0); // disk
            put16(0); // internal attributes
            put32(0); // external attributes
            put32(entry.offset);
            m_out.append(entry.name);
        }
        const auto directorySize = std::uint32_t(m_out.size()) - directoryStart;
        put32(0x06054b50);
        put16(0);
        put16(0);
        put16(std::uint16_t(m_entries.size()));
        put16(std::uint16_t(m_entries.size()));
        put32(directorySize);
        put32(directoryStart);
        put16(0);
        return m_out;
    }

private:
    struct Entry {
        QByteArray name;
        std::uint32_t crc = 0;
        std::uint32_t size = 0;
        std::uint32_t offset = 0;
    };
    // Version needed, flags, method (stored), time, date, CRC, sizes.
    void common(const Entry& entry)
    {
        put16(20);
        put16(0);
        put16(0);
        put16(0);
        put16(0x21); // 1980-01-01
        put32(entry.crc);
        put32(entry.size);
        put32(entry.size);
    }
    void put16(std::uint16_t value)
    {
        value = qToLittleEndian(value);
        m_out.append(reinterpret_cast<const char*>(&value), 2);
    }
    void put32(std::uint32_t value)
    {
        value = qToLittleEndian(value);
        m_out.append(reinterpret_cast<const char*>(&value), 4);
    }

    QByteArray m_out;
    QList<Entry> m_entries;
};

} // namespace

QByteArray writeTensorFile(const QList<TensorData>& tensors)
{
    ZipWriter zip;
    zip.add(QStringLiteral("archive/data.pkl"), pickleOf(tensors));
    zip.add(QStringLiteral("archive/byteorder"), QByteArrayLiteral("little"));
    for (qsizetype i = 0; i < tensors.size(); ++i)
        zip.add(QStringLiteral("archive/data/%1").arg(i), tensors[i].bytes);
    zip.add(QStringLiteral("archive/version"), QByteArrayLiteral("3\n"));
    return zip.finish();
}

} // namespace tessera::compute::pickle
