#include "blobtorrent.h"

#include <QFileInfo>

#include <libtorrent/create_torrent.hpp>
#include <libtorrent/file_storage.hpp>
#include <libtorrent/torrent_info.hpp>

namespace tessera::swarm {

namespace {

core::Error refused(const QString& why)
{
    return core::Error { QStringLiteral("torrent"), why };
}

QString hexOf(const lt::sha256_hash& hash)
{
    return QString::fromLatin1(QByteArray(hash.data(), int(hash.size())).toHex());
}

} // namespace

int BlobTorrent::pieceBytesFor(std::int64_t size)
{
    int piece = PieceBytes;
    while (piece < MaxPieceBytes && size / (2 * std::int64_t(piece)) >= 128)
        piece *= 2;
    return piece;
}

core::Result<BlobTorrent> BlobTorrent::make(const QString& path, const QByteArray& authorityPem)
{
    const QFileInfo file(path);
    const auto blob = core::Digest::fromHex(file.fileName());
    if (!blob)
        return refused(QStringLiteral("%1 is not named by a blob's 64 hex digits").arg(path));
    if (!file.isFile() || file.size() <= PieceBytes)
        return refused(QStringLiteral("%1 is not a blob of more than one piece").arg(path));
    if (authorityPem.isEmpty())
        return refused(QStringLiteral("a blob's torrent needs an authority"));
    lt::file_storage files;
    files.add_file(file.fileName().toStdString(), file.size());
    lt::create_torrent maker(files, pieceBytesFor(file.size()), lt::create_torrent::v2_only);
    maker.set_priv(true);
    // No date and no creator: the same blob and authority make the same bytes, so the torrent's
    // own blob is the same after a broker restarts.
    maker.set_creation_date(0);
    maker.set_creator("");
    maker.set_root_cert(lt::string_view(authorityPem.constData(), std::size_t(authorityPem.size())));
    lt::error_code error;
    lt::set_piece_hashes(maker, file.absolutePath().toStdString(), error);
    if (error)
        return refused(QStringLiteral("cannot hash %1: %2").arg(path, QString::fromStdString(error.message())));
    const auto bytes = maker.generate_buf();
    return read(QByteArray(bytes.data(), int(bytes.size())));
}

core::Result<BlobTorrent> BlobTorrent::read(const QByteArray& bytes)
{
    lt::error_code error;
    const lt::torrent_info info(lt::span<char const>(bytes.constData(), bytes.size()), error, lt::from_span);
    if (error)
        return refused(QStringLiteral("not a torrent: %1").arg(QString::fromStdString(error.message())));
    if (!info.v2() || info.v1())
        return refused(QStringLiteral("not a v2-only torrent"));
    const auto& files = info.files();
    // One file, and at most the pad file libtorrent puts after it to fill its last piece.
    bool oneFile = files.num_files() >= 1 && !files.pad_file_at(lt::file_index_t { 0 });
    for (int i = 1; i < files.num_files(); ++i)
        oneFile = oneFile && files.pad_file_at(lt::file_index_t { i });
    const int piece = info.piece_length();
    const bool powerOfTwo = piece >= PieceBytes && piece <= MaxPieceBytes && (piece & (piece - 1)) == 0;
    if (!oneFile || files.num_files() > 2 || !powerOfTwo || !info.priv())
        return refused(QStringLiteral("not one private file in pieces of 16 KiB to 4 MiB"));
    const auto name = QString::fromStdString(std::string(files.file_name(lt::file_index_t { 0 })));
    const auto blob = core::Digest::fromHex(name);
    if (!blob || name != blob->toHex() || QString::fromStdString(info.name()) != name)
        return refused(QStringLiteral("its file is not named by a blob's 64 hex digits"));
    const auto authority = info.ssl_cert();
    if (authority.empty())
        return refused(QStringLiteral("it carries no authority"));
    BlobTorrent torrent;
    torrent.bytes = bytes;
    torrent.blob = *blob;
    torrent.size = files.file_size(lt::file_index_t { 0 });
    torrent.pieceBytes = piece;
    torrent.infoHash = hexOf(info.info_hashes().v2);
    torrent.authorityPem = QByteArray(authority.data(), int(authority.size()));
    return torrent;
}

} // namespace tessera::swarm
