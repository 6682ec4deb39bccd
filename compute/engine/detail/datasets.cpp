#include "datasets.h"

#include <compute/portable/kernels.h>

#include "tensors.h"

#include <core/datasetchunks.h>
#include <core/readfile.h>

#include <torch/serialize.h>
#include <torch/torch.h>

#include <QFile>
#include <QFileInfo>
#include <QHash>

#include <zlib.h>

#include <mutex>

namespace tessera::compute::detail {

std::vector<std::int64_t> Dataset::sampleShape() const
{
    const auto sizes = x.sizes();
    return std::vector<std::int64_t>(sizes.begin() + 1, sizes.end());
}

at::Tensor Dataset::toFloat(const at::Tensor& raw) const
{
    if (!normalised)
        return raw;
    return (raw.to(torch::kFloat32) / 255.0 - normalised->mean) / normalised->std;
}

at::Tensor Dataset::samples(const at::Tensor& index, bool portable) const
{
    if (!portable || !normalised)
        return toFloat(x.index_select(0, index));
    const auto raw = x.index_select(0, index).contiguous();
    auto out = torch::empty(raw.sizes(), torch::kFloat32);
    portable::normalisePixels(
        raw.data_ptr<std::uint8_t>(), out.data_ptr<float>(), raw.numel(), float(normalised->mean), float(normalised->std));
    return out;
}

at::Tensor Dataset::slice(std::int64_t begin, std::int64_t end, bool portable) const
{
    if (portable)
        return samples(torch::arange(begin, end, torch::kInt64), true);
    return toFloat(x.slice(0, begin, end));
}

namespace {

constexpr std::int64_t MaxIdxBytes = std::int64_t(1) << 30;
constexpr std::int64_t MaxTensorFileBytes = std::int64_t(1) << 30; // as a blob (core::BlobStore::MaxBlobBytes)

core::Result<QByteArray> readGzip(const QString& path)
{
    if (!QFileInfo::exists(path))
        return core::Error { {}, QStringLiteral("%1 does not exist").arg(path) };
    gzFile file = gzopen(QFile::encodeName(path).constData(), "rb");
    if (!file)
        return core::Error { {}, QStringLiteral("cannot open %1").arg(path) };
    QByteArray bytes;
    char buffer[1 << 16];
    for (;;) {
        const int read = gzread(file, buffer, sizeof buffer);
        if (read < 0) {
            int code = 0;
            const QString message = QString::fromUtf8(gzerror(file, &code));
            gzclose(file);
            return core::Error { {}, QStringLiteral("%1 is not a valid gzip file: %2").arg(path, message) };
        }
        if (read == 0)
            break;
        bytes.append(buffer, read);
        if (bytes.size() > MaxIdxBytes) {
            gzclose(file);
            return core::Error { {}, QStringLiteral("%1 is larger than any Fashion-MNIST file").arg(path) };
        }
    }
    gzclose(file);
    return bytes;
}

std::uint32_t bigEndian32(const QByteArray& bytes, qsizetype offset)
{
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.constData() + offset);
    return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
}

// IDX: big-endian magic (0x00000803 images, 0x00000801 labels), then the sizes, then uint8 data.
core::Result<at::Tensor> readIdx(const QString& path, int dimensions)
{
    auto bytes = readGzip(path);
    if (!bytes)
        return bytes.error();
    const qsizetype header = 4 + 4 * dimensions;
    if (bytes->size() < header)
        return core::Error { {}, QStringLiteral("%1 is too short for an IDX file").arg(path) };
    const std::uint32_t magic = bigEndian32(*bytes, 0);
    if (magic != 0x800u + std::uint32_t(dimensions))
        return core::Error { {},
            QStringLiteral("%1 is not an IDX file of %2 dimensions (magic %3)")
                .arg(path, QString::number(dimensions), QString::number(magic, 16)) };
    std::vector<std::int64_t> sizes;
    std::int64_t count = 1;
    for (int i = 0; i < dimensions; ++i) {
        sizes.push_back(bigEndian32(*bytes, 4 + 4 * i));
        count *= sizes.back();
    }
    if (bytes->size() - header != count)
        return core::Error { {},
            QStringLiteral("%1 holds %2 bytes of data where its header promises %3")
                .arg(path, QString::number(bytes->size() - header), QString::number(count)) };
    auto tensor = torch::from_blob(bytes->data() + header, sizes, torch::kUInt8).clone();
    return tensor;
}

core::Result<std::shared_ptr<const Dataset>> loadIdxPair(const QString& directory, const QString& prefix)
{
    auto images = readIdx(directory + u'/' + prefix + QStringLiteral("-images-idx3-ubyte.gz"), 3);
    if (!images)
        return images.error();
    auto labels = readIdx(directory + u'/' + prefix + QStringLiteral("-labels-idx1-ubyte.gz"), 1);
    if (!labels)
        return labels.error();
    if (images->size(0) != labels->size(0))
        return core::Error { {},
            QStringLiteral("%1: %2 images but %3 labels")
                .arg(prefix, QString::number(images->size(0)), QString::number(labels->size(0))) };
    if (labels->max().item<int>() >= FashionMnistClasses)
        return core::Error { {},
            QStringLiteral("%1: a label is outside the %2 Fashion-MNIST classes")
                .arg(prefix, QString::number(FashionMnistClasses)) };
    auto dataset = std::make_shared<Dataset>();
    constexpr double Mean = 0.2860;
    constexpr double Std = 0.3530;
    dataset->x = images->to(torch::kUInt8).unsqueeze(1).contiguous();
    dataset->normalised = Dataset::Normalisation { Mean, Std };
    dataset->y = labels->to(torch::kInt64).contiguous();
    dataset->classes = FashionMnistClasses;
    return std::shared_ptr<const Dataset>(dataset);
}

std::mutex cacheMutex;
QHash<QString, DatasetSplits>& cache()
{
    static QHash<QString, DatasetSplits> splits;
    return splits;
}

} // namespace

namespace {

// The files of Debian's fortunes 1:1.99.1-7.3 (bookworm), in this order, and the SHA-256 of their
// bytes one after the other: every node must cut the same windows from the same text.
const char* const FortunesFiles[] = { "art", "ascii-art", "computers", "cookie", "debian", "definitions", "disclaimer", "drugs",
    "education", "ethnic", "food", "fortunes", "goedel", "humorists", "kids", "knghtbrd", "law", "linux", "linuxcookie",
    "literature", "love", "magic", "medicine", "men-women", "miscellaneous", "news", "paradoxum", "people", "perl", "pets",
    "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports", "startrek", "tao", "translate-me",
    "wisdom", "work", "zippy" };
const char* const FortunesSha256 = "fbc2d796dde8ea64a51345ce4c18ff486a778a2d2259603987073bedb3fc3cd7";

// Windows of context + 1 tokens with stride context: inputs and targets.
std::shared_ptr<const Dataset> windowsOf(const QByteArray& stream, std::int64_t context)
{
    const std::int64_t count = (stream.size() - 1) / context;
    auto tokens = torch::from_blob(const_cast<char*>(stream.constData()), { std::int64_t(stream.size()) }, torch::kUInt8)
                      .to(torch::kInt64);
    auto dataset = std::make_shared<Dataset>();
    dataset->x = tokens.slice(0, 0, count * context).view({ count, context }).contiguous();
    dataset->y = tokens.slice(0, 1, count * context + 1).view({ count, context }).contiguous();
    dataset->classes = ByteVocabulary;
    return dataset;
}

} // namespace

core::Result<std::pair<QByteArray, QByteArray>> fortunesStreams(const QString& directory)
{
    QByteArray all;
    QList<QByteArray> files;
    for (const char* name : FortunesFiles) {
        QFile file(directory + u'/' + QLatin1String(name));
        if (!file.open(QIODevice::ReadOnly))
            return core::Error { QStringLiteral("dataset"),
                QStringLiteral("the fortunes text is not in %1 (%2 is missing): install the Debian package fortunes, or set "
                               "Data/FortunesDirectory to the folder with its files")
                    .arg(directory, QLatin1String(name)) };
        files.append(file.readAll());
        all += files.last();
    }
    if (core::Digest::ofBytes(all).toHex() != QLatin1String(FortunesSha256))
        return core::Error { QStringLiteral("dataset"),
            QStringLiteral("the fortunes text in %1 is not the one Tessera's built-in corpus pins (Debian bookworm's "
                           "fortunes 1:1.99.1-7.3): every node must read the same bytes")
                .arg(directory) };
    QByteArray train, test;
    std::int64_t index = 0;
    for (const auto& bytes : files) {
        QByteArray fortune;
        auto finish = [&] {
            if (fortune.isEmpty())
                return;
            (index % 20 == 19 ? test : train) += fortune + "%\n";
            ++index;
            fortune.clear();
        };
        qsizetype begin = 0;
        while (begin < bytes.size()) {
            qsizetype end = bytes.indexOf('\n', begin);
            if (end < 0)
                end = bytes.size();
            const auto line = bytes.mid(begin, end - begin);
            if (line == "%")
                finish();
            else
                fortune += line + '\n';
            begin = end + 1;
        }
        finish();
    }
    return std::pair { train, test };
}

core::Result<DatasetSplits> loadFortunes(const QString& directory, std::int64_t context)
{
    if (context < 1)
        return core::Error { QStringLiteral("dataset.builtin"),
            QStringLiteral("the fortunes text needs a model with a context") };
    const std::lock_guard lock(cacheMutex);
    const QString key = QStringLiteral("fortunes:%1:%2").arg(directory).arg(context);
    if (auto it = cache().constFind(key); it != cache().constEnd())
        return *it;
    auto streams = fortunesStreams(directory);
    if (!streams)
        return streams.error();
    auto splits = guarded(QStringLiteral("cutting the fortunes text"), [&] {
        return DatasetSplits { windowsOf(streams->first, context), windowsOf(streams->second, context), nullptr };
    });
    if (!splits)
        return core::Error { QStringLiteral("dataset"), splits.error().message };
    cache().insert(key, *splits);
    return *splits;
}

core::Result<DatasetSplits> loadFashionMnist(const QString& directory)
{
    const std::lock_guard lock(cacheMutex);
    const QString key = QStringLiteral("fashion-mnist:") + directory;
    if (auto it = cache().constFind(key); it != cache().constEnd())
        return *it;
    if (!QFileInfo(directory).isDir())
        return core::Error { QStringLiteral("dataset"),
            QStringLiteral("Fashion-MNIST is not in %1: install the Debian package dataset-fashion-mnist, "
                           "or set Data/FashionMnistDirectory to the folder with its .gz files")
                .arg(directory) };
    auto train = loadIdxPair(directory, QStringLiteral("train"));
    if (!train)
        return core::Error { QStringLiteral("dataset"), train.error().message };
    auto test = loadIdxPair(directory, QStringLiteral("t10k"));
    if (!test)
        return core::Error { QStringLiteral("dataset"), test.error().message };
    DatasetSplits splits { *train, *test, nullptr };
    cache().insert(key, splits);
    return splits;
}

core::Result<std::shared_ptr<const Dataset>> loadTensorFile(const QString& path, std::int64_t classes)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return core::Error { QStringLiteral("dataset"), QStringLiteral("cannot read %1").arg(path) };
    if (file.size() > MaxTensorFileBytes)
        return core::Error { QStringLiteral("dataset"),
            QStringLiteral("%1 is larger than 1 GiB, the most a job's file may be").arg(path) };
    const QByteArray bytes = file.readAll();
    auto tensors
        = unpickleTensors(bytes, QStringLiteral("%1 is not a file written by torch.save({\"x\": X, \"y\": Y})").arg(path));
    if (!tensors)
        return core::Error { QStringLiteral("dataset"), tensors.error().message };
    auto loaded = guarded(QStringLiteral("%1 is not a file written by torch.save({\"x\": X, \"y\": Y})").arg(path),
        [&]() -> std::shared_ptr<const Dataset> {
            std::optional<at::Tensor> xs;
            std::optional<at::Tensor> ys;
            for (const auto& [name, tensor] : *tensors) {
                if (name == "x")
                    xs = tensor;
                else if (name == "y")
                    ys = tensor;
            }
            for (const auto& [name, tensor] : *tensors) {
                if (name != "tokens")
                    continue;
                if (tensor.dim() != 2 || tensor.size(1) < 2 || tensor.size(0) == 0)
                    throw std::runtime_error("tokens must be [N, L+1] with at least one window of 2 tokens");
                if (tensor.is_floating_point() || tensor.scalar_type() == torch::kBool)
                    throw std::runtime_error("tokens must be integers");
                const auto all = tensor.to(torch::kInt64);
                if (all.min().item<std::int64_t>() < 0)
                    throw std::runtime_error("tokens must not be negative");
                auto dataset = std::make_shared<Dataset>();
                dataset->x = all.slice(1, 0, all.size(1) - 1).contiguous();
                dataset->y = all.slice(1, 1, all.size(1)).contiguous();
                dataset->classes = std::max<std::int64_t>(classes, all.max().item<std::int64_t>() + 1);
                return dataset;
            }
            if (!xs || !ys)
                throw std::runtime_error("the dict needs tensors under \"x\" and \"y\" (or \"tokens\")");
            auto x = *xs;
            auto y = *ys;
            if (x.dim() < 2)
                throw std::runtime_error("x must have a sample dimension and at least one feature dimension");
            if (y.dim() != 1 || y.size(0) != x.size(0))
                throw std::runtime_error("y must be one label per sample of x");
            if (!x.is_floating_point())
                throw std::runtime_error("x must hold floating-point values");
            if (y.is_floating_point() || y.scalar_type() == torch::kBool)
                throw std::runtime_error("y must hold integer class labels");
            if (y.size(0) == 0)
                throw std::runtime_error("the file holds no samples");
            if (y.min().item<std::int64_t>() < 0)
                throw std::runtime_error("class labels must not be negative");
            auto dataset = std::make_shared<Dataset>();
            dataset->x = x.to(torch::kFloat32).contiguous();
            dataset->y = y.to(torch::kInt64).contiguous();
            dataset->classes = std::max<std::int64_t>(classes, dataset->y.max().item<std::int64_t>() + 1);
            return dataset;
        });
    if (!loaded)
        return core::Error { QStringLiteral("dataset"), loaded.error().message };
    return *loaded;
}

std::int64_t ChunkRows::sampleCount() const
{
    std::int64_t total = 0;
    for (const auto samples : chunkSamples)
        total += samples;
    return total;
}

namespace {

// A chunk as the manifest says it is: its samples, their shape, labels below the classes.
core::Status checkChunk(const Dataset& chunk, const core::DatasetManifest& manifest, qsizetype index)
{
    const auto& expected = manifest.chunks[index];
    const auto shape = chunk.sampleShape();
    const QList<std::int64_t> got(shape.begin(), shape.end());
    QString wrong;
    if (chunk.size() != expected.samples)
        wrong = QStringLiteral("holds %1 samples, not the %2 the manifest says").arg(chunk.size()).arg(expected.samples);
    else if (got != manifest.sampleShape)
        wrong = QStringLiteral("has samples of another shape than the manifest's");
    else if (chunk.classes > manifest.classes)
        wrong = QStringLiteral("has labels of %1 or more, the manifest's classes").arg(manifest.classes);
    else if ((manifest.kind == core::DatasetManifest::Kind::Tokens) != (chunk.x.scalar_type() == torch::kInt64))
        wrong = QStringLiteral("is not of the manifest's kind");
    if (wrong.isEmpty())
        return {};
    return core::Error { QStringLiteral("dataset.chunks"), QStringLiteral("chunk %1 %2").arg(index).arg(wrong) };
}

} // namespace

core::Result<core::DatasetManifest> readManifest(const core::DatasetSpec& spec, const ComputeEnvironment& environment)
{
    const auto manifestPath = environment.locate(spec.manifestSha256, spec.manifestFile);
    if (!manifestPath)
        return core::Error { QStringLiteral("dataset.chunks.manifestFile"),
            QStringLiteral("the manifest is not on this machine") };
    auto text = core::readFile(*manifestPath);
    if (!text)
        return core::Error { QStringLiteral("dataset.chunks.manifestFile"), text.error().message };
    auto manifest = core::DatasetManifest::fromJson(*text);
    if (!manifest)
        return core::Error { QStringLiteral("dataset.chunks.manifestFile"), manifest.error().toString() };
    return manifest;
}

namespace {

// One chunk of the manifest, from the blob store or (train-local) beside the manifest, checked.
core::Result<std::shared_ptr<const Dataset>> loadChunk(
    const core::DatasetManifest& manifest, const QString& manifestDirectory, qsizetype i, const ComputeEnvironment& environment)
{
    const auto& chunk = manifest.chunks[i];
    const QString file = manifestDirectory.isEmpty() || chunk.file.isEmpty() ? QString() : manifestDirectory + u'/' + chunk.file;
    const auto path = environment.locate(chunk.sha256, file);
    if (!path)
        return core::Error { QStringLiteral("dataset.chunks"),
            QStringLiteral("chunk %1 (%2) is not on this machine").arg(i).arg(chunk.sha256.toHex()) };
    if (*path == file) { // beside a manifest not uploaded (train-local): the blob store checked the others
        const auto digest = core::Digest::ofFile(*path);
        if (!digest || *digest != chunk.sha256)
            return core::Error { QStringLiteral("dataset.chunks"),
                QStringLiteral("chunk %1 (%2) is not what the manifest says (its SHA-256 differs): chunk the data again")
                    .arg(i)
                    .arg(chunk.file) };
    }
    auto loaded = loadTensorFile(*path);
    if (!loaded)
        return core::Error { QStringLiteral("dataset.chunks"),
            QStringLiteral("chunk %1: %2").arg(i).arg(loaded.error().message) };
    if (auto status = checkChunk(**loaded, manifest, i); !status)
        return status.error();
    return *loaded;
}

// The training set of a manifest's chosen chunks, one after the other in the manifest's order. The
// set is made once at its size and each chunk copied in as it loads (then freed): what it holds at
// most is the set and one chunk, not every chunk twice.
core::Result<DatasetSplits> loadChunks(const core::DatasetManifest& manifest, const QString& manifestDirectory,
    const QList<core::Digest>& chunks, const ComputeEnvironment& environment)
{
    auto rows = std::make_shared<ChunkRows>();
    rows->chunkSamples = manifest.chunkSamples();
    rows->digests = manifest.digests();
    QList<qsizetype> chosen;
    std::int64_t total = 0;
    for (qsizetype i = 0; i < manifest.chunks.size(); ++i) {
        if (chunks.contains(manifest.chunks[i].sha256)) {
            chosen.append(i);
            rows->start.insert(i, total);
            total += manifest.chunks[i].samples;
        }
    }
    auto train = std::make_shared<Dataset>();
    train->classes = manifest.classes;
    const bool tokens = manifest.kind == core::DatasetManifest::Kind::Tokens;
    std::vector<std::int64_t> xShape { total };
    xShape.insert(xShape.end(), manifest.sampleShape.begin(), manifest.sampleShape.end());
    const std::vector<std::int64_t> yShape = tokens ? xShape : std::vector<std::int64_t> { total };
    for (const auto i : chosen) {
        auto chunk = loadChunk(manifest, manifestDirectory, i, environment);
        if (!chunk)
            return chunk.error();
        auto placed = guarded(QStringLiteral("holding the chunks"), [&] {
            if (chosen.size() == 1) { // one chunk is the set as it is
                train->x = (*chunk)->x;
                train->y = (*chunk)->y;
                return true;
            }
            if (!train->x.defined()) {
                train->x = torch::empty(xShape, (*chunk)->x.scalar_type());
                train->y = torch::empty(yShape, torch::kInt64);
            }
            const auto begin = rows->start.value(i), end = begin + manifest.chunks[i].samples;
            train->x.slice(0, begin, end).copy_((*chunk)->x);
            train->y.slice(0, begin, end).copy_((*chunk)->y);
            return true;
        });
        if (!placed)
            return core::Error { QStringLiteral("dataset.chunks"), placed.error().message };
    }
    if (chosen.isEmpty()) {
        train->x = torch::empty(xShape, tokens ? torch::kInt64 : torch::kFloat32);
        train->y = torch::empty(yShape, torch::kInt64);
    }
    return DatasetSplits { train, nullptr, rows };
}

core::Result<DatasetSplits> loadChunkedDataset(
    const core::DatasetSpec& spec, const ComputeEnvironment& environment, const QList<core::Digest>& chunks)
{
    auto manifest = readManifest(spec, environment);
    if (!manifest)
        return manifest.error();
    if (manifest->sampleCount() != spec.trainSamples)
        return core::Error { QStringLiteral("dataset.chunks.trainSamples"),
            QStringLiteral("the job says %1 training samples but the manifest's chunks hold %2")
                .arg(spec.trainSamples)
                .arg(manifest->sampleCount()) };
    // Chunks sit beside a manifest that was not uploaded yet (train-local); uploaded ones by hash.
    const QString directory = spec.manifestFile.isEmpty() ? QString() : QFileInfo(spec.manifestFile).absolutePath();
    auto splits = loadChunks(*manifest, directory, chunks, environment);
    if (!splits)
        return splits.error();
    const auto testPath = environment.locate(spec.testSha256, spec.testFile);
    if (!testPath)
        return core::Error { QStringLiteral("dataset.chunks.testFile"),
            QStringLiteral("the test tensors are not on this machine") };
    auto test = loadTensorFile(*testPath, manifest->classes);
    if (!test)
        return test.error();
    const auto shape = (*test)->sampleShape();
    const QList<std::int64_t> testShape(shape.begin(), shape.end());
    if (testShape != manifest->sampleShape)
        return core::Error { QStringLiteral("dataset.chunks.testFile"),
            QStringLiteral("test samples have another shape than the manifest's") };
    if ((manifest->kind == core::DatasetManifest::Kind::Tokens) != ((*test)->x.scalar_type() == torch::kInt64))
        return core::Error { QStringLiteral("dataset.chunks.testFile"),
            QStringLiteral("the test file is not of the manifest's kind (tokens, or x and y)") };
    if ((*test)->classes > manifest->classes)
        return core::Error { QStringLiteral("dataset.chunks.testFile"),
            QStringLiteral("the test labels name classes beyond the manifest's %1").arg(manifest->classes) };
    splits->test = *test;
    return splits;
}

} // namespace

core::Result<DatasetSplits> loadDataset(
    const core::DatasetSpec& spec, const ComputeEnvironment& environment, std::int64_t context, const QList<core::Digest>& chunks)
{
    if (spec.source == core::DatasetSpec::Source::Chunks) {
        // Only the last one is kept: a node's chunks change from task to task.
        static std::mutex chunkedMutex;
        static QString lastKey;
        static DatasetSplits last;
        QString key = spec.manifestSha256.toHex() + spec.manifestFile + u'|' + spec.testSha256.toHex() + spec.testFile;
        for (const auto& chunk : chunks)
            key += u'|' + chunk.toHex();
        if (chunks.isEmpty()) // the manifest and test file alone (shapes, evaluation): cheap, not kept
            return loadChunkedDataset(spec, environment, chunks);
        const std::lock_guard lock(chunkedMutex);
        if (key == lastKey)
            return last;
        last = {}; // the previous task's chunks go before the next ones come
        lastKey.clear();
        auto loaded = loadChunkedDataset(spec, environment, chunks);
        if (!loaded)
            return loaded.error();
        lastKey = key;
        last = *loaded;
        return last;
    }
    if (spec.source == core::DatasetSpec::Source::Builtin) {
        if (spec.builtin == u"fortunes")
            return loadFortunes(environment.fortunesDirectoryOrDefault(), context);
        if (spec.builtin != u"fashion-mnist")
            return core::Error { QStringLiteral("dataset.builtin"),
                QStringLiteral("unknown built-in dataset '%1'").arg(spec.builtin) };
        return loadFashionMnist(environment.fashionMnistDirectoryOrDefault());
    }

    const auto trainPath = environment.locate(spec.trainSha256, spec.trainFile);
    if (!trainPath)
        return core::Error { QStringLiteral("dataset.tensors.trainFile"),
            QStringLiteral("the training tensors (%1) are not on this machine")
                .arg(spec.trainFile.isEmpty() ? spec.trainSha256.toHex() : spec.trainFile) };

    auto checkCount = [&](const DatasetSplits& splits) -> core::Result<DatasetSplits> {
        if (splits.train->size() != spec.trainSamples)
            return core::Error { QStringLiteral("dataset.tensors.trainSamples"),
                QStringLiteral("the job says %1 training samples but the file holds %2")
                    .arg(spec.trainSamples)
                    .arg(splits.train->size()) };
        return splits;
    };
    const std::lock_guard lock(cacheMutex);
    const QString key = QStringLiteral("tensors:") + *trainPath + u'|' + spec.testFile + spec.testSha256.toHex();
    if (auto it = cache().constFind(key); it != cache().constEnd())
        return checkCount(*it);
    auto train = loadTensorFile(*trainPath);
    if (!train)
        return train.error();
    DatasetSplits splits { *train, nullptr, nullptr };
    if (!spec.testFile.isEmpty() || !spec.testSha256.isNull()) {
        const auto testPath = environment.locate(spec.testSha256, spec.testFile);
        if (!testPath)
            return core::Error { QStringLiteral("dataset.tensors.testFile"),
                QStringLiteral("the test tensors are not on this machine") };
        auto test = loadTensorFile(*testPath, (*train)->classes);
        if (!test)
            return test.error();
        if ((*test)->sampleShape() != (*train)->sampleShape())
            return core::Error { QStringLiteral("dataset.tensors.testFile"),
                QStringLiteral("test samples have another shape than training samples") };
        if ((*test)->classes > (*train)->classes)
            return core::Error { QStringLiteral("dataset.tensors.testFile"),
                QStringLiteral("the test labels name classes that the training labels never use") };
        splits.test = *test;
    }
    cache().insert(key, splits);
    return checkCount(splits);
}

} // namespace tessera::compute::detail
