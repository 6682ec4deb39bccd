#include "curvekeys.h"

#include <core/privatefile.h>

#include <QFile>
#include <QFileDevice>
#include <QRegularExpression>

#include <zmq.h>

namespace tessera::net {

namespace {

bool isZ85Key(const QString& key)
{
    static const QRegularExpression z85(QStringLiteral(R"(^[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}$)"));
    return z85.match(key).hasMatch();
}

} // namespace

CurveKeys CurveKeys::generate()
{
    char publicKey[41] = {};
    char secretKey[41] = {};
    zmq_curve_keypair(publicKey, secretKey);
    return { QString::fromLatin1(publicKey), QString::fromLatin1(secretKey) };
}

core::Result<CurveKeys> CurveKeys::load(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return core::Error { path, QStringLiteral("cannot read the key file") };
    CurveKeys keys;
    for (const auto& line : QString::fromLatin1(file.readAll()).split(u'\n', Qt::SkipEmptyParts)) {
        const auto parts = line.trimmed().split(u' ', Qt::SkipEmptyParts);
        if (parts.size() != 2)
            continue;
        if (parts[0] == u"public")
            keys.publicKey = parts[1];
        else if (parts[0] == u"secret")
            keys.secretKey = parts[1];
    }
    if (!isZ85Key(keys.publicKey) || !isZ85Key(keys.secretKey))
        return core::Error { path, QStringLiteral("not a Tessera key file (two lines: \"public KEY\" and \"secret KEY\", Z85)") };
    return keys;
}

core::Result<CurveKeys> CurveKeys::loadOrCreate(const QString& path)
{
    if (QFile::exists(path))
        return load(path);
    auto keys = generate();
    if (auto status = keys.save(path); !status)
        return status.error();
    return keys;
}

core::Status CurveKeys::save(const QString& path) const
{
    return core::writePrivateFile(
        path, QStringLiteral("public %1\nsecret %2\n").arg(publicKey, secretKey).toLatin1(), QStringLiteral("the key file"));
}

core::Result<BrokerAddress> BrokerAddress::parse(const QString& address)
{
    const auto hash = address.indexOf(u'#');
    BrokerAddress parsed { hash < 0 ? address : address.left(hash), hash < 0 ? QString() : address.mid(hash + 1) };
    // ipc:///PATH: a broker on this machine behind a Unix socket (the app's practice broker).
    static const QRegularExpression endpoint(QStringLiteral(R"(^(tcp://[^\s#]+:\d{1,5}|ipc:///[^\s#]+)$)"));
    if (!endpoint.match(parsed.endpoint).hasMatch())
        return core::Error { QStringLiteral("broker"),
            QStringLiteral("'%1' is not tcp://host:port[#key] (or ipc:///path)").arg(address) };
    if (!parsed.serverKey.isEmpty() && !isZ85Key(parsed.serverKey))
        return core::Error { QStringLiteral("broker"), QStringLiteral("the key after '#' must be 40 Z85 characters") };
    return parsed;
}

QString endpointHost(const QString& endpoint)
{
    return endpoint.startsWith(u"tcp://") ? endpoint.mid(6).section(u':', 0, -2) : QString();
}

QString BrokerAddress::toString() const
{
    return serverKey.isEmpty() ? endpoint : endpoint + u'#' + serverKey;
}

} // namespace tessera::net
