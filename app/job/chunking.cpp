#include "chunking.h"

#include <compute/pickle/tensorfile.h>
#include <compute/pickle/tensorwriter.h>

#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QSaveFile>
#include <QtEndian>

#include <algorithm>
#include <cstring>
#include <optional>

namespace tessera::app {

namespace {

using compute::pickle::DType;
using compute::pickle::TensorData;

core::Status writeAtomically(const QString& path, const QByteArray& bytes)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
        return core::Error { path, QStringLiteral("cannot write: %1").arg(file.errorString()) };
    return {};
}

// Writes chunk files into `output` and lists them in a manifest.
class ChunkSink {
public:
    ChunkSink(QString output, core::DatasetManifest& manifest)
        : m_output(std::move(output))
        , m_manifest(manifest)
    { }

    core::Status add(const QList<TensorData>& tensors, std::int64_t samples)
    {
        const QByteArray bytes = compute::pickle::writeTensorFile(tensors);
        if (bytes.size() > core::DatasetManifest::MaxChunkBytes)
            return core::Error { QStringLiteral("chunk"), QStringLiteral("a chunk would be larger than 1 GiB") };
        const QString name = QStringLiteral("chunk-%1.pt").arg(m_manifest.chunks.size(), 5, 10, QLatin1Char('0'));
        if (auto status = writeAtomically(QDir(m_output).filePath(name), bytes); !status)
            return status;
        m_manifest.chunks.append({ core::Digest::ofBytes(bytes), samples, bytes.size(), name });
        return {};
    }

private:
    QString m_output;
    core::DatasetManifest& m_manifest;
};

QStringList filesBelow(const QString& folder)
{
    QStringList files;
    QDirIterator it(folder, QDir::Files | QDir::NoDotAndDotDot, QDirIterator::Subdirectories);
    while (it.hasNext())
        files.append(QDir(folder).relativeFilePath(it.next()));
    std::sort(files.begin(), files.end(), [](const QString& a, const QString& b) { return a.toUtf8() < b.toUtf8(); });
    return files;
}

// The classes of integer labels (or tokens): one more than the largest; none may be negative.
core::Result<std::int64_t> classesOf(const compute::pickle::TensorRef& labels, const QByteArray& labelBytes)
{
    if (labels.dtype != DType::Int64 && labels.dtype != DType::Int32 && labels.dtype != DType::Int16
        && labels.dtype != DType::UInt8 && labels.dtype != DType::Int8)
        return core::Error { {}, QStringLiteral("\"%1\" must hold integers").arg(labels.name) };
    const qsizetype element = compute::pickle::elementSize(labels.dtype);
    std::int64_t largest = -1;
    for (qsizetype i = 0; i < labelBytes.size(); i += element) {
        std::int64_t value = 0;
        const char* at = labelBytes.constData() + i;
        switch (labels.dtype) {
        case DType::Int64:
            std::memcpy(&value, at, 8);
            break;
        case DType::Int32:
            value = qFromLittleEndian<std::int32_t>(at);
            break;
        case DType::Int16:
            value = qFromLittleEndian<std::int16_t>(at);
            break;
        case DType::Int8:
            value = std::int8_t(*at);
            break;
        default:
            value = std::uint8_t(*at);
            break;
        }
        if (value < 0)
            return core::Error { {}, QStringLiteral("\"%1\" holds a negative value").arg(labels.name) };
        largest = std::max(largest, value);
    }
    return largest + 1;
}

core::Status finish(ChunkedCorpus& corpus, const QString& output)
{
    if (corpus.manifest.chunks.isEmpty())
        return core::Error { QStringLiteral("input"), QStringLiteral("holds no training samples") };
    corpus.manifestFile = QDir(output).filePath(QStringLiteral("manifest.json"));
    return writeAtomically(corpus.manifestFile, corpus.manifest.toJson());
}

} // namespace

core::Result<ChunkedCorpus> chunkTextFolder(const QString& folder, const QString& output, const ChunkOptions& options)
{
    const std::int64_t L = options.context, width = L + 1;
    if (L < 1 || L > 65536)
        return core::Error { QStringLiteral("context"), QStringLiteral("must be 1 to 65536") };
    if (options.testWindows * width > (std::int64_t(512) << 20)) // a job's file is at most 1 GiB
        return core::Error { QStringLiteral("test-windows"), QStringLiteral("the test file would be larger than 512 MiB") };
    if (!QDir().mkpath(output))
        return core::Error { output, QStringLiteral("cannot create the folder") };
    ChunkedCorpus corpus;
    corpus.manifest.kind = core::DatasetManifest::Kind::Tokens;
    corpus.manifest.sampleShape = { L };
    corpus.manifest.classes = 256;
    ChunkSink sink(output, corpus.manifest);
    const std::int64_t perChunk = std::max<std::int64_t>(1, options.chunkBytes / width);
    QByteArray windows; // of the chunk (or the test set) being filled
    std::int64_t count = 0, window = 0; // windows in `windows`; windows cut so far
    auto flush = [&]() -> core::Status {
        if (count == 0)
            return {};
        const TensorData tokens { QStringLiteral("tokens"), DType::UInt8, { count, width }, windows };
        core::Status status;
        if (corpus.testFile.isEmpty() && options.testWindows > 0) {
            corpus.testFile = QDir(output).filePath(QStringLiteral("test.pt"));
            corpus.testSamples = count;
            status = writeAtomically(corpus.testFile, compute::pickle::writeTensorFile({ tokens }));
        } else {
            status = sink.add({ tokens }, count);
        }
        windows.clear();
        count = 0;
        return status;
    };
    QByteArray stream; // bytes from the start of window `window` on
    for (const auto& name : filesBelow(folder)) {
        QFile file(QDir(folder).filePath(name));
        if (!file.open(QIODevice::ReadOnly))
            return core::Error { name, QStringLiteral("cannot read: %1").arg(file.errorString()) };
        while (!file.atEnd()) {
            const QByteArray block = file.read(std::int64_t(16) << 20);
            if (block.isEmpty())
                break;
            corpus.inputBytes += block.size();
            stream.append(block);
            qsizetype at = 0;
            for (; at + width <= stream.size(); at += L, ++window) {
                windows.append(stream.constData() + at, width);
                ++count;
                const bool testing = window < options.testWindows;
                if ((testing && count == options.testWindows) || (!testing && count == perChunk)) {
                    if (auto status = flush(); !status)
                        return status.error();
                }
            }
            stream.remove(0, at);
        }
    }
    if (auto status = flush(); !status)
        return status.error();
    if (auto status = finish(corpus, output); !status)
        return status.error();
    return corpus;
}

core::Result<ChunkedCorpus> chunkTensorFile(const QString& path, const QString& output, const ChunkOptions& options)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return core::Error { path, QStringLiteral("cannot read: %1").arg(file.errorString()) };
    // Mapped, not read: the file may be larger than memory.
    const uchar* mapped = file.size() > 0 ? file.map(0, file.size()) : nullptr;
    if (!mapped)
        return core::Error { path, QStringLiteral("cannot map the file") };
    auto tensors = compute::pickle::TensorFile::read(QByteArray::fromRawData(reinterpret_cast<const char*>(mapped), file.size()));
    if (!tensors)
        return core::Error { path, tensors.error().message };
    auto named = [&](QStringView name) -> std::optional<compute::pickle::TensorRef> {
        for (const auto& tensor : tensors->tensors()) {
            if (tensor.name == name)
                return tensor;
        }
        return std::nullopt;
    };
    QList<compute::pickle::TensorRef> rows; // {tokens}, or {x, y}
    if (const auto tokens = named(u"tokens"))
        rows = { *tokens };
    else if (named(u"x") && named(u"y"))
        rows = { *named(u"x"), *named(u"y") };
    const bool tokens = rows.size() == 1;
    if (rows.isEmpty())
        return core::Error { path, QStringLiteral("holds neither \"tokens\" nor \"x\" and \"y\"") };
    const std::int64_t n = rows[0].sizes.value(0, 0);
    for (const auto& tensor : rows) {
        if (tensor.sizes.isEmpty() || tensor.sizes[0] != n || n == 0)
            return core::Error { path, QStringLiteral("\"%1\" does not have the %2 rows of the others").arg(tensor.name).arg(n) };
    }
    if (tokens && rows[0].sizes.size() != 2)
        return core::Error { path, QStringLiteral("tokens must be [N, L+1]") };
    const auto floating = [](DType type) {
        return type == DType::Float32 || type == DType::Float64 || type == DType::Float16 || type == DType::BFloat16;
    };
    if (!tokens && (!floating(rows[0].dtype) || rows[0].sizes.size() < 2 || rows[1].sizes.size() != 1))
        return core::Error { path, QStringLiteral("x must be floating point [N, ...] and y one label per sample, [N]") };
    if (!QDir().mkpath(output))
        return core::Error { output, QStringLiteral("cannot create the folder") };
    ChunkedCorpus corpus;
    corpus.inputBytes = file.size();
    corpus.manifest.kind = tokens ? core::DatasetManifest::Kind::Tokens : core::DatasetManifest::Kind::Samples;
    corpus.manifest.sampleShape = rows[0].sizes.mid(1);
    if (tokens)
        corpus.manifest.sampleShape[0] -= 1;
    std::int64_t rowBytes = 0;
    QList<QByteArray> whole;
    for (const auto& tensor : rows) {
        whole.append(tensors->contiguousBytes(tensor));
        rowBytes += whole.last().size() / n;
    }
    auto classes = classesOf(rows.last(), whole.last());
    if (!classes)
        return core::Error { path, classes.error().message };
    corpus.manifest.classes = *classes;
    ChunkSink sink(output, corpus.manifest);
    const std::int64_t perChunk = std::max<std::int64_t>(1, options.chunkBytes / std::max<std::int64_t>(1, rowBytes));
    for (std::int64_t first = 0; first < n; first += perChunk) {
        const std::int64_t count = std::min(perChunk, n - first);
        QList<TensorData> part;
        for (qsizetype t = 0; t < rows.size(); ++t) {
            const qsizetype bytesPerRow = whole[t].size() / n;
            auto sizes = rows[t].sizes;
            sizes[0] = count;
            part.append({ rows[t].name, rows[t].dtype, sizes, whole[t].mid(first * bytesPerRow, count * bytesPerRow) });
        }
        if (auto status = sink.add(part, count); !status)
            return status.error();
    }
    if (auto status = finish(corpus, output); !status)
        return status.error();
    return corpus;
}

} // namespace tessera::app
