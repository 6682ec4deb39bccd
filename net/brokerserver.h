#pragma once

#include "brokerswarm.h"
#include "curvekeys.h"
#include "protocol.h"

#include <core/broker/broker.h>
#include <core/clock.h>

#include <QByteArray>
#include <QHash>
#include <QString>
#include <QStringList>

#include <atomic>
#include <memory>
#include <optional>

namespace zmq {
class context_t;
}

namespace tessera::net {

struct BrokerServerOptions {
    QString bind = QStringLiteral("tcp://127.0.0.1:5555");
    std::optional<CurveKeys> keys; // with keys, only CURVE clients that know the public key connect
    QStringList allowList; // Z85 client keys; empty: any client with the broker's key
    int heartbeatMs = 1000;
    int liveness = 3; // heartbeats a node may miss before it counts as gone
    // Messages a peer may send per second (a burst of twice as many is allowed). Beyond it each
    // message is answered too-many-requests; a peer that keeps it up for 5 s is dropped and its
    // messages ignored for a minute. 0: no limit.
    int maxRequestsPerSecond = 500;
    // Z85 client keys that act as the operator under CURVE (see everything, any account). On a
    // plaintext broker every caller is the operator: it is for this machine (loopback) only.
    QStringList operatorKeys;
    // A plaintext broker binds only loopback addresses unless this is set (--insecure-plaintext):
    // without CURVE, anyone who reaches it can claim any account.
    bool insecurePlaintext = false;
    // The ZeroMQ context to bind in; null: one of its own. Tests share theirs to talk over inproc://.
    zmq::context_t* context = nullptr;
    // The blob swarm's seed (docs/SWARM.md); none: every blob goes by GET. Its address, when
    // empty, is the host of `bind` (0.0.0.0 for *, 127.0.0.1 for ipc:// and inproc://).
    std::optional<BrokerSwarm::Options> swarm;
};

// A text as the broker tells it to a peer: absolute file paths (its database, blob folder, a
// worker's scratch folder) replaced, so that no error or verdict says where the broker keeps what.
QString scrubbedForPeers(const QString& text);

// The broker's network loop: one ROUTER socket (and, with CURVE, the ZAP handler), owned by the
// thread that calls run() or pollOnce(). Every message passes the peer's rate limit, is decoded into
// a typed request (net/messages.h), checked against who may do what, and handed to one small handler
// per command; bad input gets an ERROR reply and is logged, and the loop goes on. Time comes from
// the clock it is given (heartbeats, liveness, rate limits), so tests move it.
class BrokerServer {
public:
    BrokerServer(core::broker::Broker& broker, BrokerServerOptions options, const core::Clock& clock);
    ~BrokerServer();
    BrokerServer(const BrokerServer&) = delete;
    BrokerServer& operator=(const BrokerServer&) = delete;

    // Refuses a plaintext broker on an address other than loopback unless insecurePlaintext.
    core::Status bind();
    // The address nodes connect to: the bound endpoint, plus "#KEY" with CURVE.
    QString address() const;
    // Where the swarm seed listens (0: no swarm).
    int swarmPort() const;
    // Serves until stop becomes true (checked at least every heartbeat interval), then says BYE.
    void run(const std::atomic<bool>& stop);
    // One turn of the loop: waits at most maxWaitMs (real time) for messages, handles what came,
    // and, when the clock says a heartbeat interval passed, keeps sessions alive, ticks the broker
    // and hands out work.
    void pollOnce(int maxWaitMs);
    // Called while the broker's arithmetic runs on another thread (core::broker::OffThreadMath):
    // answers heartbeats and reads (STATUS, LIST, NODES, LEDGER, BALANCE, RECEIPT, VERIFICATIONS,
    // GET) of peers with nothing waiting, keeps nodes' sessions alive, and queues everything else,
    // in order, for when the broker is free again. Does nothing when called from inside itself.
    void serveWhileBusy();

    struct Counters {
        std::int64_t messages = 0;
        std::int64_t errors = 0;
        std::int64_t tasksSent = 0;
        std::int64_t dropped = 0; // peers dropped for flooding
        std::int64_t bytesIn = 0; // every frame received and sent but the routing ids: what crossed the wire
        std::int64_t bytesOut = 0;
        std::int64_t swarmBytesOut = 0; // the payload its swarm seed uploaded to nodes
    };
    Counters counters() const;

private:
    struct Private;
    std::unique_ptr<Private> d;
};

} // namespace tessera::net
