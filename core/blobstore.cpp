#include "blobstore.h"

#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QSaveFile>
#include <QStorageInfo>

#include <algorithm>

namespace tessera::core {

namespace {

// A write that failed (its partial file already removed): a disk without room for the `needed`
// bytes is named (and flagged, so that the broker answers disk-full); any other failure keeps the
// system's reason.
Error writeFailed(const QString& path, const QFileDevice& file, qint64 needed)
{
    const QStorageInfo storage(QFileInfo(path).absolutePath());
    if (storage.isValid() && storage.bytesAvailable() < needed)
        return Error { QStringLiteral("blob"),
            QStringLiteral("the disk is full: %1 MiB free, %2 MiB needed; nothing was kept")
                .arg(double(storage.bytesAvailable()) / (1 << 20), 0, 'f', 1)
                .arg(double(needed) / (1 << 20), 0, 'f', 1),
            true };
    return Error { QStringLiteral("blob"), QStringLiteral("cannot write %1: %2").arg(path, file.errorString()) };
}

} // namespace

BlobStore::BlobStore(QString directory, std::int64_t limit)
    : m_directory(std::move(directory))
    , m_limit(limit)
{ }

Result<std::unique_ptr<BlobStore>> BlobStore::open(const QString& directory, std::int64_t sizeLimit)
{
    if (!QDir().mkpath(directory))
        return Error { QStringLiteral("blobs"), QStringLiteral("cannot create the folder %1").arg(directory) };
    std::unique_ptr<BlobStore> store(new BlobStore(directory, sizeLimit));
    // Rebuild the index from the files; the oldest modification time is the least recently used.
    QList<std::pair<QDateTime, Digest>> byAge;
    QDirIterator it(directory, QDir::Files, QDirIterator::Subdirectories);
    const QDir root(directory);
    while (it.hasNext()) {
        const QFileInfo info(it.next());
        if (info.fileName().endsWith(u".part")) {
            QFile::remove(info.filePath()); // an upload a crash interrupted
            continue;
        }
        if (root.relativeFilePath(info.filePath()).startsWith(QStringLiteral("staging/")))
            continue; // not blobs of the store until taken in (a node's swarm keeps its names there)
        auto digest = Digest::fromHex(info.fileName());
        if (!digest)
            continue;
        store->m_entries.insert(*digest, { info.size(), 0 });
        store->m_total += info.size();
        byAge.append({ info.lastModified(), *digest });
    }
    std::sort(byAge.begin(), byAge.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [time, digest] : byAge)
        store->m_entries[digest].lastUsed = ++store->m_clock;
    store->evict();
    return store;
}

QString BlobStore::fileOf(const Digest& digest) const
{
    const QString hex = digest.toHex();
    return m_directory + u'/' + hex.left(2) + u'/' + hex;
}

bool BlobStore::contains(const Digest& digest) const
{
    return m_entries.contains(digest);
}

std::optional<std::int64_t> BlobStore::sizeOf(const Digest& digest) const
{
    const auto it = m_entries.constFind(digest);
    if (it == m_entries.constEnd())
        return std::nullopt;
    return it->size;
}

void BlobStore::touch(const Digest& digest)
{
    auto it = m_entries.find(digest);
    if (it == m_entries.end())
        return;
    // The file's time carries the order across restarts; once a second per blob is plenty.
    const auto now = QDateTime::currentSecsSinceEpoch();
    it->lastUsed = ++m_clock;
    if (it->touchedAt == now)
        return;
    it->touchedAt = now;
    QFile file(fileOf(digest));
    if (file.open(QIODevice::ReadWrite))
        file.setFileTime(QDateTime::currentDateTimeUtc(), QFileDevice::FileModificationTime);
}

std::optional<QString> BlobStore::path(const Digest& digest)
{
    if (!contains(digest))
        return std::nullopt;
    touch(digest);
    return fileOf(digest);
}

std::optional<QString> BlobStore::storedFile(const Digest& digest) const
{
    QString file = fileOf(digest);
    if (!QFileInfo::exists(file))
        return std::nullopt;
    return file;
}

Result<QByteArray> BlobStore::read(const Digest& digest)
{
    const auto size = sizeOf(digest);
    if (!size)
        return Error { QStringLiteral("blob"), QStringLiteral("no blob %1").arg(digest.toHex()) };
    return readRange(digest, 0, *size);
}

Result<QByteArray> BlobStore::readRange(const Digest& digest, std::int64_t offset, std::int64_t length)
{
    const auto size = sizeOf(digest);
    if (!size)
        return Error { QStringLiteral("blob"), QStringLiteral("no blob %1").arg(digest.toHex()) };
    if (offset < 0 || length < 0 || offset > *size)
        return Error { QStringLiteral("offset"), QStringLiteral("the range is outside the blob's %1 bytes").arg(*size) };
    QFile file(fileOf(digest));
    if (!file.open(QIODevice::ReadOnly) || !file.seek(offset))
        return Error { QStringLiteral("blob"), QStringLiteral("cannot read %1").arg(file.fileName()) };
    touch(digest);
    return file.read(std::min(length, *size - offset));
}

Result<Digest> BlobStore::put(const QByteArray& bytes)
{
    return put(bytes, Digest {});
}

Result<Digest> BlobStore::put(const QByteArray& bytes, const Digest& computed)
{
    const Digest digest = computed.isNull() ? Digest::ofBytes(bytes) : computed;
    if (contains(digest)) {
        touch(digest);
        return digest;
    }
    const QString target = fileOf(digest);
    QDir().mkpath(QFileInfo(target).absolutePath());
    QSaveFile file(target);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
        return writeFailed(target, file, bytes.size());
    m_entries.insert(digest, { bytes.size(), ++m_clock });
    m_total += bytes.size();
    if (auto status = mirrorStored(digest, bytes.size()); !status)
        return status.error();
    evict();
    return digest;
}

Status BlobStore::mirrorStored(const Digest& digest, std::int64_t size)
{
    if (!m_mirror)
        return {};
    auto status = m_mirror->stored(digest, fileOf(digest), size);
    if (!status) {
        QFile::remove(fileOf(digest));
        m_entries.remove(digest);
        m_total -= size;
    }
    return status;
}

QString BlobStore::stagingDirectory() const
{
    return m_directory + QStringLiteral("/staging");
}

Result<Digest> BlobStore::adopt(const QString& file, const Digest& computed)
{
    const QFileInfo info(file);
    if (computed.isNull() || !info.isFile())
        return Error { QStringLiteral("blob"), QStringLiteral("cannot take in %1: no such file or no digest").arg(file) };
    if (contains(computed)) {
        QFile::remove(file);
        touch(computed);
        return computed;
    }
    const QString target = fileOf(computed);
    QDir().mkpath(QFileInfo(target).absolutePath());
    const std::int64_t size = info.size();
    if (!QFile::rename(file, target)) {
        QFile::remove(file);
        return Error { QStringLiteral("blob"), QStringLiteral("cannot move %1 to %2").arg(file, target) };
    }
    m_entries.insert(computed, { size, ++m_clock });
    m_total += size;
    if (auto status = mirrorStored(computed, size); !status)
        return status.error();
    evict();
    return computed;
}

std::int64_t BlobStore::uploadedBytes(const Digest& digest, const QString& uploader) const
{
    if (contains(digest))
        return *sizeOf(digest);
    return m_uploads.value(uploadKey(uploader, digest)).received;
}

void BlobStore::abandonUpload(const Digest& digest, const QString& uploader)
{
    dropUpload(uploadKey(uploader, digest));
}

QString BlobStore::uploadKey(const QString& uploader, const Digest& digest)
{
    return digest.toHex() + u'.' + Digest::ofBytes(uploader.toUtf8()).toHex().left(16);
}

void BlobStore::dropUpload(const QString& key)
{
    const auto it = m_uploads.find(key);
    if (it == m_uploads.end())
        return;
    QFile::remove(it->tempPath);
    m_uploads.erase(it);
}

Status BlobStore::admitUpload(const QString& uploader, std::int64_t totalSize, std::int64_t now)
{
    QStringList idle;
    for (auto it = m_uploads.cbegin(); it != m_uploads.cend(); ++it) {
        if (now - it->touched > UploadIdleMs)
            idle.append(it.key());
    }
    for (const auto& key : idle)
        dropUpload(key);
    int uploads = 0;
    std::int64_t declared = 0;
    for (const auto& upload : std::as_const(m_uploads)) {
        if (upload.uploader == uploader) {
            ++uploads;
            declared += upload.total;
        }
    }
    if (uploads >= MaxUploadsPerUploader)
        return Error { QStringLiteral("upload"),
            QStringLiteral("%1 uploads of yours are in progress, the most one uploader may have; finish one or wait %2 "
                           "minutes for an idle one to be dropped")
                .arg(uploads)
                .arg(UploadIdleMs / 60'000) };
    if (declared + totalSize > MaxUploadBytesPerUploader)
        return Error { QStringLiteral("upload"),
            QStringLiteral("your uploads in progress would declare %1 bytes, more than one uploader may (%2)")
                .arg(declared + totalSize)
                .arg(MaxUploadBytesPerUploader) };
    return {};
}

Result<BlobStore::UploadState> BlobStore::putRange(const Digest& digest, std::int64_t offset, std::int64_t totalSize,
    const QByteArray& bytes, const QString& uploader, std::int64_t now, Stored stored)
{
    const bool proving = contains(digest);
    if (proving && stored == Stored::IsComplete)
        return UploadState::Complete; // someone uploaded it already: nothing to do
    if (proving && totalSize != m_entries.value(digest).size)
        return Error { QStringLiteral("sha256"),
            QStringLiteral("the uploaded bytes do not hash to %1 (whose size is not %2); nothing was stored")
                .arg(digest.toHex())
                .arg(totalSize) };
    if (totalSize <= 0 || totalSize > MaxBlobBytes)
        return Error { QStringLiteral("size"), QStringLiteral("a blob has 1 byte to 1 GiB, not %1").arg(totalSize) };
    const QString key = uploadKey(uploader, digest);
    auto it = m_uploads.find(key);
    if (it != m_uploads.end() && offset == 0) {
        dropUpload(key); // the uploader starts over
        it = m_uploads.end();
    }
    if (it == m_uploads.end()) {
        if (offset != 0)
            return Error { QStringLiteral("offset"), QStringLiteral("an upload starts at offset 0") };
        if (auto admitted = admitUpload(uploader, totalSize, now); !admitted)
            return admitted.error();
        QString temp;
        if (!proving) {
            temp = fileOf(digest) + u'.' + key.section(u'.', 1) + QStringLiteral(".part");
            QDir().mkpath(QFileInfo(temp).absolutePath());
            QFile::remove(temp);
        }
        it = m_uploads.insert(key, { temp, 0, totalSize, uploader, now, std::make_shared<Sha256>(), proving });
    }
    it->touched = now;
    if (it->total != totalSize)
        return Error { QStringLiteral("size"),
            QStringLiteral("the upload said %1 bytes before, now %2").arg(it->total).arg(totalSize) };
    if (offset != it->received)
        return Error { QStringLiteral("offset"),
            QStringLiteral("expected the range at %1, got %2").arg(it->received).arg(offset) };
    if (offset + bytes.size() > totalSize)
        return Error { QStringLiteral("size"), QStringLiteral("the ranges run past the blob's %1 bytes").arg(totalSize) };
    if (!it->proofOnly) {
        QFile part(it->tempPath);
        // flush(): a chunk that only reached Qt's buffer is not written yet.
        if (!part.open(QIODevice::WriteOnly | QIODevice::Append) || part.write(bytes) != bytes.size() || !part.flush()) {
            m_uploads.erase(it);
            part.close();
            QFile::remove(part.fileName());
            return writeFailed(part.fileName(), part, totalSize); // the whole blob, sent again, would not fit
        }
        part.close();
    }
    it->hasher->addData(bytes);
    it->received += bytes.size();
    if (it->received < totalSize)
        return UploadState::Incomplete;

    const Upload upload = *it;
    m_uploads.erase(it);
    return completeUpload(digest, upload);
}

// The last range came: the bytes proven to be the blob (and, unless it only proves that the
// uploader holds a stored blob, taken into the store).
Result<BlobStore::UploadState> BlobStore::completeUpload(const Digest& digest, const Upload& upload)
{
    if (upload.hasher->result() != digest) {
        if (!upload.proofOnly)
            QFile::remove(upload.tempPath);
        return Error { QStringLiteral("sha256"),
            QStringLiteral("the uploaded bytes do not hash to %1; nothing was stored").arg(digest.toHex()) };
    }
    if (upload.proofOnly) {
        if (!contains(digest))
            return Error { QStringLiteral("blob"),
                QStringLiteral("the blob was removed while it was uploaded; upload it again") };
        touch(digest);
        return UploadState::Complete; // proven: the bytes were the stored blob's
    }
    if (contains(digest)) { // another uploader finished the same blob first
        QFile::remove(upload.tempPath);
        return UploadState::Complete;
    }
    if (!QFile::rename(upload.tempPath, fileOf(digest))) {
        QFile::remove(upload.tempPath);
        return Error { QStringLiteral("blob"), QStringLiteral("cannot store %1").arg(fileOf(digest)) };
    }
    m_entries.insert(digest, { upload.total, ++m_clock });
    m_total += upload.total;
    if (auto status = mirrorStored(digest, upload.total); !status)
        return status.error();
    evict();
    return UploadState::Complete;
}

void BlobStore::pin(const Digest& digest)
{
    ++m_pins[digest];
}

void BlobStore::unpin(const Digest& digest)
{
    auto it = m_pins.find(digest);
    if (it != m_pins.end() && --*it <= 0)
        m_pins.erase(it);
    evict();
}

bool BlobStore::remove(const Digest& digest)
{
    const auto it = m_entries.find(digest);
    if (it == m_entries.end() || m_pins.contains(digest))
        return false;
    QFile::remove(fileOf(digest));
    m_total -= it->size;
    m_entries.erase(it);
    if (m_mirror)
        m_mirror->removed(digest);
    return true;
}

void BlobStore::evict()
{
    if (m_limit <= 0)
        return;
    while (m_total > m_limit) {
        auto oldest = m_entries.end();
        for (auto it = m_entries.begin(); it != m_entries.end(); ++it) {
            if (!m_pins.contains(it.key()) && (oldest == m_entries.end() || it->lastUsed < oldest->lastUsed))
                oldest = it;
        }
        if (oldest == m_entries.end())
            return; // everything left is in use
        QFile::remove(fileOf(oldest.key()));
        m_total -= oldest->size;
        m_entries.erase(oldest);
    }
}

} // namespace tessera::core
