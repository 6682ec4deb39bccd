#include "identity.h"

#include <core/privatefile.h>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>

namespace tessera::net {

namespace {

const char* const BackupHeader = "# Tessera identity backup: your account on every broker, and what signs your results.\n"
                                 "# Whoever holds this file holds your credits. Keep it private; keep it safe.\n";

core::Status writePrivate(const QString& path, const QByteArray& bytes)
{
    return core::writePrivateFile(path, bytes, QStringLiteral("the file"));
}

} // namespace

QString Identity::defaultKeyFile(const core::settings::Settings& settings)
{
    const QString configured = settings.stringValue(core::settings::names::NodeKeyFile);
    if (!configured.isEmpty())
        return configured;
    QString directory = settings.stringValue(core::settings::names::NodeDataDirectory);
    if (directory.isEmpty())
        directory = QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) + QStringLiteral("/Tessera");
    return QDir(directory).filePath(QStringLiteral("node.key"));
}

QString Identity::signingFileFor(const QString& keyFile)
{
    const QFileInfo info(keyFile);
    return info.dir().filePath(info.completeBaseName() + QStringLiteral(".sign"));
}

core::Result<Identity> Identity::load(const QString& keyFile)
{
    auto keys = CurveKeys::load(keyFile);
    if (!keys)
        return keys.error();
    const QString signingFile = signingFileFor(keyFile);
    if (!QFile::exists(signingFile))
        return core::Error { signingFile, QStringLiteral("the identity's signing key is missing") };
    auto signing = core::SigningKeys::loadOrCreate(signingFile);
    if (!signing)
        return signing.error();
    return Identity { *keys, *signing, keyFile, signingFile };
}

core::Result<Identity> Identity::loadOrCreate(const QString& keyFile)
{
    if (!QDir().mkpath(QFileInfo(keyFile).absolutePath()))
        return core::Error { keyFile, QStringLiteral("cannot create its folder") };
    auto keys = CurveKeys::loadOrCreate(keyFile);
    if (!keys)
        return keys.error();
    const QString signingFile = signingFileFor(keyFile);
    auto signing = core::SigningKeys::loadOrCreate(signingFile);
    if (!signing)
        return signing.error();
    return Identity { *keys, *signing, keyFile, signingFile };
}

core::Status Identity::exportTo(const QString& path) const
{
    return writePrivate(path,
        QByteArray(BackupHeader) + "public " + keys.publicKey.toLatin1() + "\nsecret " + keys.secretKey.toLatin1()
            + "\nsign-public " + signing.publicKey.toBase64() + "\nsign-secret " + signing.secretKey.toBase64() + "\n");
}

core::Result<Identity> Identity::importFrom(const QString& backup, const QString& keyFile)
{
    // A backup holds the key file's two lines and the signing key's two lines: each loader reads
    // the lines it knows from it.
    auto keys = CurveKeys::load(backup);
    if (!keys)
        return core::Error { backup, QStringLiteral("not a Tessera identity backup (tessera-job identity export writes one)") };
    QFile file(backup);
    if (!file.open(QIODevice::ReadOnly))
        return core::Error { backup, QStringLiteral("cannot read it") };
    QByteArray signingLines;
    for (const auto& line : file.readAll().split('\n')) {
        if (line.startsWith("sign-"))
            signingLines += line + '\n';
    }
    const QString signingFile = signingFileFor(keyFile);
    if (!QDir().mkpath(QFileInfo(keyFile).absolutePath()))
        return core::Error { keyFile, QStringLiteral("cannot create its folder") };
    if (auto status = writePrivate(signingFile, signingLines); !status)
        return status.error();
    auto signing = core::SigningKeys::loadOrCreate(signingFile);
    if (!signing || signing->publicKey.isEmpty() || signing->secretKey.isEmpty()) {
        QFile::remove(signingFile);
        return core::Error { backup, QStringLiteral("the backup's signing key is missing or damaged") };
    }
    if (auto status = keys->save(keyFile); !status)
        return status.error();
    return Identity { *keys, *signing, keyFile, signingFile };
}

} // namespace tessera::net
