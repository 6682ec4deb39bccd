#!/usr/bin/python3
"""Hostile peers of Tessera's blob swarm (docs/SWARM.md), written with Debian's python3-libtorrent,
independently of Tessera's own swarm code.

  corrupt:  a peer with a valid certificate (a node that was handed the blob and turned hostile)
            that seeds a corrupted copy of the blob, its own hash checks switched off, so that it
            sends every piece wrong. It prints "listening PORT" and serves until it is killed.
  stranger: a peer with a certificate of its own authority (or none) that dials the given peers
            and tries to fetch the blob. It prints "stranger: got N bytes, refused M times" after
            it was refused by every peer, has the whole blob (a control with a valid
            certificate), or the time given passed, and exits 0.
"""

import argparse
import os
import sys
import time

import libtorrent as lt

# RFC 7919's ffdhe2048: libtorrent wants DH parameters beside a certificate.
DH = """-----BEGIN DH PARAMETERS-----
MIIBCAKCAQEA//////////+t+FRYortKmq/cViAnPTzx2LnFg84tNpWp4TZBFGQz
+8yTnc4kmz75fS/jY2MMddj2gbICrsRhetPfHtXV/WVhJDP1H18GbtCFY2VVPe0a
87VXE15/V8k1mE8McODmi3fipona8+/och3xWKE2rec1MKzKT0g6eXq8CrGCsyT7
YdEIqUuyyOP7uWrat2DX9GgdT0Kj3jlN9K5W7edjcrsZCwenyO4KbXCeAvzhzffi
7MA0BM0oNC9hkXL+nOmFg/+OTxIy7vKBg8P+OxtMb61zO7X8vC7CIAXFjvGDfRaD
ssbzSibBsu/6iGtCOGEoXJf//////////wIBAg==
-----END DH PARAMETERS-----
"""


def session(address, hash_checks):
    settings = {
        "listen_interfaces": "%s:0s" % address,
        "outgoing_interfaces": address,
        "enable_dht": False,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        "enable_outgoing_utp": False,
        "enable_incoming_utp": False,
        "allow_multiple_connections_per_ip": True,
        "in_enc_policy": 2,  # pe_disabled
        "out_enc_policy": 2,
        "disable_hash_checks": not hash_checks,
        "alert_mask": lt.alert.category_t.all_categories,
    }
    return lt.session(settings)


def add(ses, torrent, folder, certificate, key, seed):
    params = lt.add_torrent_params()
    params.ti = lt.torrent_info(torrent)
    params.save_path = folder
    params.flags = lt.torrent_flags.paused
    if seed:
        params.flags |= lt.torrent_flags.seed_mode
    handle = ses.add_torrent(params)
    if certificate:
        dh = os.path.join(folder, "dh.pem")
        with open(dh, "w") as out:
            out.write(DH)
        handle.set_ssl_certificate(certificate, key, dh, "")
    handle.resume()
    return handle


def corrupt(args):
    ses = session(args.address, hash_checks=False)
    add(ses, args.torrent, args.folder, args.certificate, args.key, seed=True)
    port = 0
    deadline = time.time() + 30
    while port == 0 and time.time() < deadline:
        ses.wait_for_alert(100)
        for alert in ses.pop_alerts():
            if isinstance(alert, lt.listen_succeeded_alert) and alert.socket_type == lt.socket_type_t.tcp_ssl:
                port = alert.port
    print("listening %d" % port, flush=True)
    while True:
        ses.wait_for_alert(1000)
        for alert in ses.pop_alerts():
            if isinstance(alert, (lt.peer_error_alert, lt.peer_disconnected_alert)):
                print("corrupt: %s" % alert.message(), flush=True)


def stranger(args):
    ses = session(args.address, hash_checks=True)
    handle = add(ses, args.torrent, args.folder, args.certificate, args.key, seed=False)
    peers = [p.rsplit(":", 1) for p in args.peers]
    for host, port in peers:
        handle.connect_peer((host, int(port)))
    refused = set()
    deadline = time.time() + args.seconds
    while time.time() < deadline and len(refused) < len(peers) and not handle.status().is_seeding:
        ses.wait_for_alert(200)
        for alert in ses.pop_alerts():
            if isinstance(alert, lt.peer_error_alert) or isinstance(alert, lt.peer_disconnected_alert):
                refused.add("%s:%d" % (alert.ip[0], alert.ip[1]))
                print("stranger: %s" % alert.message(), file=sys.stderr, flush=True)
    got = handle.status().total_payload_download
    print("stranger: got %d bytes, refused %d times" % (got, len(refused)), flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["corrupt", "stranger"])
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--torrent", required=True)
    parser.add_argument("--folder", required=True, help="where the blob's file is (corrupt) or goes (stranger)")
    parser.add_argument("--certificate", default="")
    parser.add_argument("--key", default="")
    parser.add_argument("--peers", nargs="*", default=[])
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    if args.mode == "corrupt":
        return corrupt(args)
    return stranger(args)


if __name__ == "__main__":
    sys.exit(main())
