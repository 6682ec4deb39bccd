#include "swarm.h"

#include <libtorrent/alert_types.hpp>
#include <libtorrent/ip_filter.hpp>
#include <libtorrent/session.hpp>
#include <libtorrent/session_params.hpp>
#include <libtorrent/settings_pack.hpp>
#include <libtorrent/torrent_flags.hpp>
#include <libtorrent/torrent_handle.hpp>
#include <libtorrent/torrent_info.hpp>
#include <libtorrent/torrent_status.hpp>

#include <QHash>

namespace tessera::swarm {

namespace {

// RFC 7919's ffdhe2048 group: libtorrent asks for DH parameters beside a certificate (its TLS
// prefers ECDHE, which needs none).
constexpr char DhParameters[] = "-----BEGIN DH PARAMETERS-----\n"
                                "MIIBCAKCAQEA//////////+t+FRYortKmq/cViAnPTzx2LnFg84tNpWp4TZBFGQz\n"
                                "+8yTnc4kmz75fS/jY2MMddj2gbICrsRhetPfHtXV/WVhJDP1H18GbtCFY2VVPe0a\n"
                                "87VXE15/V8k1mE8McODmi3fipona8+/och3xWKE2rec1MKzKT0g6eXq8CrGCsyT7\n"
                                "YdEIqUuyyOP7uWrat2DX9GgdT0Kj3jlN9K5W7edjcrsZCwenyO4KbXCeAvzhzffi\n"
                                "7MA0BM0oNC9hkXL+nOmFg/+OTxIy7vKBg8P+OxtMb61zO7X8vC7CIAXFjvGDfRaD\n"
                                "ssbzSibBsu/6iGtCOGEoXJf//////////wIBAg==\n"
                                "-----END DH PARAMETERS-----\n";

lt::settings_pack settingsFor(const Swarm::Options& options)
{
    lt::settings_pack pack;
    const std::string address = options.address.toStdString();
    pack.set_str(lt::settings_pack::listen_interfaces, address + ':' + std::to_string(options.port) + 's');
    if (options.address != QStringLiteral("0.0.0.0"))
        pack.set_str(lt::settings_pack::outgoing_interfaces, address);
    // Peers are named by the broker and prove themselves by certificate: several nodes behind one
    // address (a NAT, one test machine) are several peers.
    pack.set_bool(lt::settings_pack::allow_multiple_connections_per_ip, true);
    for (const auto setting : { lt::settings_pack::enable_dht, lt::settings_pack::enable_lsd, lt::settings_pack::enable_upnp,
             lt::settings_pack::enable_natpmp, lt::settings_pack::enable_outgoing_utp, lt::settings_pack::enable_incoming_utp })
        pack.set_bool(setting, false);
    pack.set_int(lt::settings_pack::in_enc_policy, lt::settings_pack::pe_disabled);
    pack.set_int(lt::settings_pack::out_enc_policy, lt::settings_pack::pe_disabled);
    if (options.unchokeAll)
        pack.set_int(lt::settings_pack::unchoke_slots_limit, -1);
    // Nodes handed a blob at once dial each other at once, and a peer that has not joined the
    // blob's torrent yet (it is still GETting the .torrent) refuses the handshake: dial it again
    // within a second, and keep trying, instead of libtorrent's minute and three tries.
    pack.set_int(lt::settings_pack::min_reconnect_time, 1);
    pack.set_int(lt::settings_pack::max_failcount, 30);
    pack.set_int(lt::settings_pack::upload_rate_limit, int(std::min<std::int64_t>(options.uploadBytesPerSecond, INT32_MAX)));
    pack.set_int(
        lt::settings_pack::alert_mask, int(lt::alert_category::error | lt::alert_category::status | lt::alert_category::peer));
    return pack;
}

QString hexName(const lt::torrent_handle& handle)
{
    if (!handle.is_valid()) // a peer refused before it named a torrent
        return {};
    const auto info = handle.torrent_file();
    return info ? QString::fromStdString(info->name()) : QString();
}

// libtorrent throws on a handle whose torrent went, and on a session that cannot do what it is
// asked; a swarm's trouble is an error, never a crash.
template<typename Call> core::Status guarded(Call call)
{
    try {
        return call();
    } catch (const std::exception& caught) {
        return core::Error { QStringLiteral("swarm"), QString::fromUtf8(caught.what()) };
    }
}

QString endpointText(const lt::tcp::endpoint& endpoint)
{
    return QStringLiteral("%1:%2").arg(QString::fromStdString(endpoint.address().to_string())).arg(endpoint.port());
}

} // namespace

struct Swarm::Private {
    explicit Private(lt::session_params params)
        : session(std::move(params))
    { }
    lt::session session;
    QHash<QString, lt::torrent_handle> torrents; // by blob
    std::int64_t uploadedByDropped = 0; // what torrents that left the session uploaded

    core::Status join(const BlobTorrent& torrent, const QString& directory, const QByteArray& certificatePem,
        const QByteArray& privateKeyPem, bool seeding)
    {
        const QString blob = torrent.blob.toHex();
        if (torrents.contains(blob))
            return core::Error { QStringLiteral("swarm"), QStringLiteral("blob %1 is in the swarm already").arg(blob) };
        lt::error_code error;
        lt::add_torrent_params params;
        params.ti = std::make_shared<lt::torrent_info>(
            lt::span<char const>(torrent.bytes.constData(), torrent.bytes.size()), error, lt::from_span);
        if (error)
            return core::Error { QStringLiteral("torrent"), QString::fromStdString(error.message()) };
        params.save_path = directory.toStdString();
        // Paused until its certificate is set: it must not dial a peer without one.
        params.flags = lt::torrent_flags::paused | lt::torrent_flags::disable_dht | lt::torrent_flags::disable_lsd
            | lt::torrent_flags::disable_pex | (seeding ? lt::torrent_flags::seed_mode : lt::torrent_flags_t {});
        auto handle = session.add_torrent(std::move(params), error);
        if (error)
            return core::Error { QStringLiteral("swarm"), QString::fromStdString(error.message()) };
        handle.set_ssl_certificate_buffer(certificatePem.toStdString(), privateKeyPem.toStdString(), DhParameters);
        handle.resume();
        torrents.insert(blob, handle);
        return {};
    }

    core::Status dial(const BlobTorrent& torrent, const QString& directory, const QByteArray& certificatePem,
        const QByteArray& privateKeyPem, const QStringList& peers);
    static core::Status connect(lt::torrent_handle& handle, const QStringList& peers);

    void translate(lt::alert* alert, QList<Event>& events)
    {
        if (auto* finished = lt::alert_cast<lt::torrent_finished_alert>(alert)) {
            events.append({ Event::Kind::Fetched, hexName(finished->handle), {}, {} });
        } else if (auto* banned = lt::alert_cast<lt::peer_ban_alert>(alert)) {
            events.append({ Event::Kind::Banned, hexName(banned->handle), endpointText(banned->endpoint),
                QString::fromStdString(banned->message()) });
        } else if (auto* peerError = lt::alert_cast<lt::peer_error_alert>(alert)) {
            if (peerError->op == lt::operation_t::ssl_handshake)
                events.append({ Event::Kind::Refused, hexName(peerError->handle), endpointText(peerError->endpoint),
                    QString::fromStdString(peerError->error.message()) });
        } else if (auto* torrentError = lt::alert_cast<lt::torrent_error_alert>(alert)) {
            events.append({ Event::Kind::Failed, hexName(torrentError->handle), {},
                QString::fromStdString(torrentError->error.message()) });
        }
    }
};

Swarm::Swarm(std::unique_ptr<Private> d)
    : d(std::move(d))
{ }

Swarm::~Swarm() = default;

core::Result<std::unique_ptr<Swarm>> Swarm::start(const Options& options)
{
    // No plugins: no peer exchange, and no smart-ban (unsafe on v2 torrents in libtorrent 2.0.8).
    lt::session_params params(settingsFor(options), {});
    try {
        auto swarm = std::unique_ptr<Swarm>(new Swarm(std::make_unique<Private>(std::move(params))));
        // Every peer in the global class, its rate limit included: libtorrent's default puts peers
        // on the local network (and loopback) in a class without limits.
        lt::ip_filter classes;
        const std::uint32_t global = 1u << static_cast<std::uint32_t>(lt::session::global_peer_class_id);
        classes.add_rule(lt::make_address("0.0.0.0"), lt::make_address("255.255.255.255"), global);
        classes.add_rule(lt::make_address("::"), lt::make_address("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), global);
        swarm->d->session.set_peer_class_filter(classes);
        // The listen socket is opened on the session's thread; its port is known once it is.
        for (int i = 0; i < 100 && swarm->port() == 0; ++i)
            swarm->d->session.wait_for_alert(lt::milliseconds(50));
        if (swarm->port() == 0)
            return core::Error { QStringLiteral("swarm"),
                QStringLiteral("cannot listen on %1:%2").arg(options.address).arg(options.port) };
        // On every interface (0.0.0.0), port 0 gives each interface's socket a port of its own, and
        // peers are told one: all of them listen on the first's.
        if (options.port == 0 && options.address == QStringLiteral("0.0.0.0")) {
            lt::settings_pack same;
            same.set_str(lt::settings_pack::listen_interfaces, "0.0.0.0:" + std::to_string(swarm->port()) + 's');
            swarm->d->session.apply_settings(same);
        }
        return swarm;
    } catch (const std::exception& caught) {
        return core::Error { QStringLiteral("swarm"), QString::fromUtf8(caught.what()) };
    }
}

int Swarm::port() const
{
    return d->session.ssl_listen_port();
}

core::Status Swarm::seed(
    const BlobTorrent& torrent, const QString& directory, const QByteArray& certificatePem, const QByteArray& privateKeyPem)
{
    return guarded([&] { return d->join(torrent, directory, certificatePem, privateKeyPem, true); });
}

core::Status Swarm::fetch(const BlobTorrent& torrent, const QString& directory, const QByteArray& certificatePem,
    const QByteArray& privateKeyPem, const QStringList& peers)
{
    return guarded([&] { return d->dial(torrent, directory, certificatePem, privateKeyPem, peers); });
}

core::Status Swarm::Private::dial(const BlobTorrent& torrent, const QString& directory, const QByteArray& certificatePem,
    const QByteArray& privateKeyPem, const QStringList& peers)
{
    if (auto joined = join(torrent, directory, certificatePem, privateKeyPem, false); !joined)
        return joined;
    return connect(torrents[torrent.blob.toHex()], peers);
}

core::Status Swarm::Private::connect(lt::torrent_handle& handle, const QStringList& peers)
{
    for (const auto& peer : peers) {
        const auto colon = peer.lastIndexOf(u':');
        lt::error_code error;
        const auto address = lt::make_address(peer.left(colon).toStdString(), error);
        const int port = peer.mid(colon + 1).toInt();
        if (colon < 0 || error || port <= 0 || port > 65535)
            return core::Error { QStringLiteral("peers"), QStringLiteral("'%1' is not host:port").arg(peer) };
        handle.connect_peer(lt::tcp::endpoint(address, std::uint16_t(port)));
    }
    return {};
}

core::Status Swarm::relocate(const core::Digest& blob, const QString& directory)
{
    const auto it = d->torrents.find(blob.toHex());
    if (it == d->torrents.end())
        return core::Error { QStringLiteral("swarm"), QStringLiteral("blob %1 is not in the swarm").arg(blob.toHex()) };
    // The file is at the new place already: nothing is moved, nothing is replaced.
    return guarded([&] {
        it->move_storage(directory.toStdString(), lt::move_flags_t::dont_replace);
        return core::Status {};
    });
}

core::Status Swarm::addPeers(const core::Digest& blob, const QStringList& peers)
{
    const auto it = d->torrents.find(blob.toHex());
    if (it == d->torrents.end())
        return core::Error { QStringLiteral("swarm"), QStringLiteral("blob %1 is not in the swarm").arg(blob.toHex()) };
    return guarded([&] { return d->connect(*it, peers); });
}

QList<Swarm::Event> Swarm::events(int waitMs)
{
    QList<Event> events;
    const auto status = guarded([&] {
        d->session.wait_for_alert(lt::milliseconds(std::max(0, waitMs)));
        std::vector<lt::alert*> alerts;
        d->session.pop_alerts(&alerts);
        for (auto* alert : alerts)
            d->translate(alert, events);
        return core::Status {};
    });
    if (!status)
        events.append({ Event::Kind::Failed, {}, {}, status.error().message });
    return events;
}

bool Swarm::drop(const core::Digest& blob)
{
    const auto handle = d->torrents.take(blob.toHex());
    if (!handle.is_valid())
        return false;
    (void)guarded([&] {
        d->uploadedByDropped += handle.status().total_payload_upload;
        d->session.remove_torrent(handle);
        return core::Status {};
    });
    return true;
}

bool Swarm::has(const core::Digest& blob) const
{
    return d->torrents.contains(blob.toHex());
}

std::int64_t Swarm::fetchedBytes(const core::Digest& blob) const
{
    const auto it = d->torrents.constFind(blob.toHex());
    if (it == d->torrents.constEnd() || !it->is_valid())
        return -1;
    std::int64_t done = -1;
    (void)guarded([&] {
        done = it->status().total_wanted_done;
        return core::Status {};
    });
    return done;
}

core::Status Swarm::renew(const core::Digest& blob, const QByteArray& certificatePem, const QByteArray& privateKeyPem)
{
    const auto it = d->torrents.find(blob.toHex());
    if (it == d->torrents.end())
        return core::Error { QStringLiteral("swarm"), QStringLiteral("blob %1 is not in the swarm").arg(blob.toHex()) };
    return guarded([&] {
        it->set_ssl_certificate_buffer(certificatePem.toStdString(), privateKeyPem.toStdString(), DhParameters);
        return core::Status {};
    });
}

std::int64_t Swarm::uploadedBytes() const
{
    std::int64_t total = d->uploadedByDropped;
    for (const auto& handle : d->torrents) {
        if (handle.is_valid())
            total += handle.status().total_payload_upload;
    }
    return total;
}

} // namespace tessera::swarm
