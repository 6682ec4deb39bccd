#include "tensors.h"

#include <QFile>

#include <compute/pickle/tensorpickle.h>

#include <caffe2/serialize/file_adapter.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>

namespace tessera::compute::detail {

static_assert(std::endian::native == std::endian::little, "canonical weight bytes assume a little-endian host");

void sortByName(NamedTensors& tensors)
{
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

namespace {

std::uint8_t dtypeCode(at::ScalarType type)
{
    switch (type) {
    case at::kFloat:
        return 1;
    case at::kDouble:
        return 2;
    case at::kLong:
        return 3;
    case at::kInt:
        return 4;
    case at::kHalf:
        return 5;
    case at::kBFloat16:
        return 6;
    case at::kBool:
        return 7;
    case at::kByte:
        return 8;
    case at::kChar:
        return 9;
    case at::kShort:
        return 10;
    default:
        return 0;
    }
}

void addInt64(core::Sha256& hasher, std::int64_t value)
{
    hasher.addData(QByteArrayView(reinterpret_cast<const char*>(&value), sizeof value));
}

// One tensor's canonical record: its name and a NUL, the dtype byte, the dimension count and sizes
// as little-endian int64, then its bytes.
void addRecord(core::Sha256& hasher, const std::string& name, std::uint8_t code, c10::IntArrayRef sizes, const void* bytes,
    std::int64_t count)
{
    hasher.addData(QByteArrayView(name.data(), static_cast<qsizetype>(name.size() + 1))); // with the NUL
    hasher.addData(QByteArrayView(reinterpret_cast<const char*>(&code), 1));
    addInt64(hasher, std::int64_t(sizes.size()));
    for (auto size : sizes)
        addInt64(hasher, size);
    hasher.addData(QByteArrayView(static_cast<const char*>(bytes), static_cast<qsizetype>(count)));
}

} // namespace

void addCanonicalRecord(core::Sha256& hasher, const std::string& name, const at::Tensor& tensor)
{
    const auto data = tensor.detach().contiguous().cpu();
    addRecord(hasher, name, dtypeCode(data.scalar_type()), data.sizes(), data.data_ptr(), std::int64_t(data.nbytes()));
}

core::Digest canonicalHash(const NamedTensors& tensors)
{
    core::Sha256 hasher;
    for (const auto& [name, tensor] : tensors)
        addCanonicalRecord(hasher, name, tensor);
    return hasher.result();
}

core::Digest recordHash(const std::string& name, const at::Tensor& tensor)
{
    const auto data = tensor.detach().contiguous().cpu();
    core::Sha256 hasher;
    addRecord(hasher, name, dtypeCode(data.scalar_type()), data.sizes(), data.data_ptr(), std::int64_t(data.nbytes()));
    return hasher.result();
}

core::Digest recordHash(
    const std::string& name, at::ScalarType type, c10::IntArrayRef sizes, const void* bytes, std::int64_t count)
{
    core::Sha256 hasher;
    addRecord(hasher, name, dtypeCode(type), sizes, bytes, count);
    return hasher.result();
}

core::Digest rootOf(const QList<core::Digest>& leaves)
{
    core::Sha256 hasher;
    for (const auto& leaf : leaves)
        hasher.addData(leaf.toRaw());
    return hasher.result();
}

core::Digest stateRoot(const NamedTensors& tensors)
{
    QList<core::Digest> leaves;
    for (const auto& [name, tensor] : tensors)
        leaves.append(recordHash(name, tensor));
    return rootOf(leaves);
}

namespace {

// torch::pickle_save's steps, each byte handed to `sink` as it is made; `reserve` is told first
// how many bytes will come (at most).
template<typename Sink, typename Reserve> void pickleInto(const NamedTensors& tensors, Sink&& sink, Reserve&& reserve)
{
    c10::Dict<std::string, at::Tensor> dict;
    qsizetype payload = 0;
    for (const auto& [name, tensor] : tensors) {
        auto stored = tensor.detach().contiguous().cpu();
        payload += qsizetype(stored.nbytes());
        dict.insert(name, std::move(stored));
    }
    std::vector<char> program;
    torch::jit::Pickler pickler([&](const char* bytes, size_t size) { program.insert(program.end(), bytes, bytes + size); });
    pickler.protocol();
    pickler.pushIValue(c10::IValue(dict));
    pickler.stop();
    // The records, each aligned to 64 bytes, and the zip directory: about 280 bytes a record in
    // all (its local header, name and padding, its central directory entry with zip64 fields), so
    // 512 leaves room.
    reserve(payload + qsizetype(program.size()) + 512 * (qsizetype(tensors.size()) + 8) + 65536);
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) { return sink(bytes, size); });
    torch::jit::writeArchiveAndTensors("data", program.data(), program.size(), pickler.tensorData(), writer);
    writer.writeEndOfFile();
}

} // namespace

QByteArray pickleTensors(const NamedTensors& tensors)
{
    // Written straight into the QByteArray (pickle_save returns a std::vector that would be copied
    // once more), reserved for all of it: an array that grew at the end would copy the whole
    // archive, a second model's worth of memory for a moment (a 40 M gpt node's kept training
    // state took 2.2 GB instead of 1.5 before the estimate was right).
    QByteArray out;
    pickleInto(
        tensors,
        [&](const void* bytes, size_t size) {
            out.append(static_cast<const char*>(bytes), qsizetype(size));
            return size;
        },
        [&](qsizetype bytes) { out.reserve(bytes); });
    Q_ASSERT(out.size() <= out.capacity());
    return out;
}

core::Status pickleTensorsToFile(const NamedTensors& tensors, const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate))
        return core::Error { QStringLiteral("file"), QStringLiteral("cannot write %1: %2").arg(path, file.errorString()) };
    bool failed = false;
    try {
        pickleInto(
            tensors,
            [&](const void* bytes, size_t size) -> size_t {
                if (failed || file.write(static_cast<const char*>(bytes), qint64(size)) != qint64(size)) {
                    failed = true;
                    return 0; // the writer stops with an error (it throws)
                }
                return size;
            },
            [](qsizetype) {});
    } catch (const std::exception&) {
        failed = true;
    }
    if (failed || !file.flush()) {
        file.remove();
        return core::Error { QStringLiteral("file"), QStringLiteral("cannot write %1: %2").arg(path, file.errorString()) };
    }
    return {};
}

namespace {

at::ScalarType scalarType(pickle::DType type)
{
    switch (type) {
    case pickle::DType::Float32:
        return at::kFloat;
    case pickle::DType::Float64:
        return at::kDouble;
    case pickle::DType::Float16:
        return at::kHalf;
    case pickle::DType::BFloat16:
        return at::kBFloat16;
    case pickle::DType::Int64:
        return at::kLong;
    case pickle::DType::Int32:
        return at::kInt;
    case pickle::DType::Int16:
        return at::kShort;
    case pickle::DType::Int8:
        return at::kChar;
    case pickle::DType::UInt8:
        return at::kByte;
    case pickle::DType::Bool:
        return at::kBool;
    }
    return at::kFloat;
}

} // namespace

namespace {

// The tensors an archive's data.pkl names (its program read; no storage record touched).
core::Result<QList<pickle::TensorRef>> tensorRefsIn(caffe2::serialize::PyTorchStreamReader& reader, const QString& what)
{
    if (!reader.hasRecord("data.pkl"))
        return core::Error { {}, QStringLiteral("%1: not a file written by torch.save (no data.pkl)").arg(what) };
    const auto [program, programSize] = reader.getRecord("data.pkl");
    auto refs = pickle::readTensorMap(QByteArrayView(static_cast<const char*>(program.get()), qsizetype(programSize)));
    if (!refs)
        return core::Error { {}, QStringLiteral("%1: %2").arg(what, refs.error().message) };
    return refs;
}

// A reader of the file's records, or why the file cannot be read (said before LibTorch would throw).
core::Result<std::shared_ptr<caffe2::serialize::ReadAdapterInterface>> fileRecords(const QString& path)
{
    if (QFile file(path); !file.open(QIODevice::ReadOnly))
        return core::Error { {}, QStringLiteral("cannot read %1: %2").arg(path, file.errorString()) };
    return std::shared_ptr<caffe2::serialize::ReadAdapterInterface>(
        std::make_shared<caffe2::serialize::FileAdapter>(QFile::encodeName(path).toStdString()));
}

// Not torch::pickle_load: LibTorch's unpickler turns an OrderedDict (what state_dict() returns)
// into None, and knows more callables than a file of tensors needs. pickle::readTensorMap reads
// exactly a mapping of names to tensors; the archive's records are read here, from memory or
// straight from a file (each record into the tensor's own buffer), one tensor at a time in name
// order: a storage is let go once the last tensor that views it has been visited.
// ownStorages: each tensor must be the whole of a storage of its own (contiguous, offset 0): a
// file where one storage serves many tensors, or a view repeats its elements, is refused before
// any record is read (a file a stage reads a share of could otherwise make it hold far more).
core::Status visitFrom(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> records, const QString& what,
    const std::function<core::Status(const std::string&, at::Tensor)>& visit, bool ownStorages = false)
{
    auto read = guarded(what, [&]() -> core::Result<bool> {
        caffe2::serialize::PyTorchStreamReader reader(records);
        auto refs = tensorRefsIn(reader, what);
        if (!refs)
            return refs.error();
        std::stable_sort(
            refs->begin(), refs->end(), [](const auto& a, const auto& b) { return a.name.toStdString() < b.name.toStdString(); });
        std::map<QString, at::Tensor> storages;
        std::map<QString, int> users; // how many tensors view each storage
        for (const auto& ref : *refs)
            ++users[ref.storageKey];
        std::map<QString, int> left = users; // how many are still to be visited
        for (const auto& ref : ownStorages ? *refs : QList<pickle::TensorRef> {}) {
            std::int64_t numel = 1;
            bool contiguous = true;
            for (qsizetype d = ref.sizes.size() - 1; d >= 0 && contiguous; --d) {
                contiguous = ref.sizes[d] == 1 || ref.strides.value(d, -1) == numel;
                contiguous = contiguous && !__builtin_mul_overflow(numel, ref.sizes[d], &numel);
            }
            if (users[ref.storageKey] != 1 || ref.offset != 0 || !contiguous || numel != ref.storageNumel)
                return core::Error { {},
                    QStringLiteral("%1: '%2' is not the whole of a storage of its own").arg(what, ref.name) };
        }
        for (const auto& ref : *refs) {
            const auto type = scalarType(ref.dtype);
            auto found = storages.find(ref.storageKey);
            if (found == storages.end()) {
                const std::string record = "data/" + ref.storageKey.toStdString();
                if (!reader.hasRecord(record))
                    return core::Error { {},
                        QStringLiteral("%1: '%2' names storage %3, which the file does not hold")
                            .arg(what, ref.name, ref.storageKey) };
                auto [data, size] = reader.getRecord(record);
                const auto needed = std::uint64_t(ref.storageNumel) * std::uint64_t(pickle::elementSize(ref.dtype));
                if (size < needed)
                    return core::Error { {},
                        QStringLiteral("%1: storage %2 of '%3' holds %4 bytes, not %5")
                            .arg(what, ref.storageKey, ref.name, QString::number(size), QString::number(needed)) };
                // The record's own buffer becomes the storage (no copy): it is the reader's
                // allocation, aligned for any dtype.
                auto owner = std::make_shared<at::DataPtr>(std::move(data));
                auto storage = needed == 0 || !owner->get()
                    ? at::empty({ ref.storageNumel }, at::TensorOptions().dtype(type))
                    : at::from_blob(
                        owner->get(), { ref.storageNumel }, [owner](void*) mutable { owner.reset(); },
                        at::TensorOptions().dtype(type));
                found = storages.emplace(ref.storageKey, storage).first;
            }
            if (found->second.scalar_type() != type)
                return core::Error { {}, QStringLiteral("%1: storage %2 is read as two dtypes").arg(what, ref.storageKey) };
            const std::vector<std::int64_t> sizes(ref.sizes.begin(), ref.sizes.end());
            const std::vector<std::int64_t> strides(ref.strides.begin(), ref.strides.end());
            auto view = found->second.as_strided(sizes, strides, ref.offset);
            // A storage that one tensor views whole is that tensor; shared or partly used storages
            // are copied, so that every tensor owns its memory alone (tied weights come apart).
            const bool whole
                = users[ref.storageKey] == 1 && ref.offset == 0 && view.is_contiguous() && view.numel() == ref.storageNumel;
            if (--left[ref.storageKey] == 0)
                storages.erase(found);
            if (auto status = visit(ref.name.toStdString(), whole ? std::move(view) : view.clone()); !status)
                return status.error();
        }
        return true;
    });
    if (!read) // an exception
        return read.error();
    if (!*read) // what the file holds
        return read->error();
    return {};
}

core::Result<NamedTensors> unpickleFrom(std::shared_ptr<caffe2::serialize::ReadAdapterInterface> records, const QString& what)
{
    NamedTensors tensors;
    auto read = visitFrom(std::move(records), what, [&](const std::string& name, at::Tensor tensor) -> core::Status {
        tensors.emplace_back(name, std::move(tensor));
        return {};
    });
    if (!read)
        return read.error();
    sortByName(tensors);
    return tensors;
}

} // namespace

core::Result<NamedTensors> unpickleTensors(const QByteArray& bytes, const QString& what)
{
    return unpickleFrom(std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes.constData(), off_t(bytes.size())), what);
}

core::Result<NamedTensors> tensorShapesInFile(const QString& path, const QString& what)
{
    const auto records = fileRecords(path);
    if (!records)
        return records.error();
    auto read = guarded(what, [&]() -> core::Result<NamedTensors> {
        caffe2::serialize::PyTorchStreamReader reader(*records);
        const auto refs = tensorRefsIn(reader, what);
        if (!refs)
            return refs.error();
        NamedTensors shapes;
        for (const auto& ref : *refs) {
            const std::vector<std::int64_t> sizes(ref.sizes.begin(), ref.sizes.end());
            shapes.emplace_back(
                ref.name.toStdString(), at::empty(sizes, at::TensorOptions().dtype(scalarType(ref.dtype)).device(at::kMeta)));
        }
        sortByName(shapes);
        return shapes;
    });
    if (!read)
        return read.error();
    return *read;
}

core::Result<NamedTensors> unpickleTensorsFromFile(const QString& path, const QString& what)
{
    const auto records = fileRecords(path);
    if (!records)
        return records.error();
    return unpickleFrom(*records, what);
}

core::Status visitTensorsInFile(
    const QString& path, const QString& what, const std::function<core::Status(const std::string&, at::Tensor)>& visit)
{
    const auto records = fileRecords(path);
    if (!records)
        return records.error();
    return visitFrom(*records, what, visit, true);
}

NamedTensors withPrefix(const std::string& prefix, const NamedTensors& tensors)
{
    NamedTensors prefixed;
    prefixed.reserve(tensors.size());
    for (const auto& [name, tensor] : tensors)
        prefixed.emplace_back(prefix + name, tensor);
    return prefixed;
}

NamedTensors stripPrefix(const std::string& prefix, const NamedTensors& tensors)
{
    NamedTensors stripped;
    for (const auto& [name, tensor] : tensors) {
        if (name.rfind(prefix, 0) == 0)
            stripped.emplace_back(name.substr(prefix.size()), tensor);
    }
    return stripped;
}

bool isCarried(const std::string& name)
{
    return name.rfind(CarriedPrefix, 0) == 0;
}

NamedTensors modelPart(NamedTensors tensors)
{
    tensors.erase(
        std::remove_if(tensors.begin(), tensors.end(), [](const auto& entry) { return isCarried(entry.first); }), tensors.end());
    return tensors;
}

NamedTensors cloneTensors(const NamedTensors& tensors)
{
    NamedTensors copies;
    copies.reserve(tensors.size());
    for (const auto& [name, tensor] : tensors)
        copies.emplace_back(name, tensor.detach().clone().contiguous());
    return copies;
}

QString describeException(const std::exception& error)
{
    if (const auto* torchError = dynamic_cast<const c10::Error*>(&error))
        return QString::fromStdString(torchError->what_without_backtrace()).trimmed();
    return QString::fromUtf8(error.what()).trimmed();
}

} // namespace tessera::compute::detail
