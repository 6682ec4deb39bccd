#pragma once

#include "deviceinfo.h"
#include "error.h"

#include <QJsonObject>
#include <QList>
#include <QString>
#include <QStringList>

#include <optional>

namespace tessera::core {

// Where a node serves the blob swarm (docs/SWARM.md): REGISTER's NodeInfo `swarm`.
struct SwarmEndpoint {
    QString key; // the public half of its swarm key (swarm.key), P-256, PEM
    int port = 0; // its TLS port; 0: it serves nobody (leech-only)
    QString host; // the address peers dial; empty: the one the broker sees the node come from

    static constexpr qsizetype MaxKeyLength = 512;
    static constexpr qsizetype MaxHostLength = 253;
    bool operator==(const SwarmEndpoint&) const = default;
};

// What a node tells a broker about itself when it registers.
struct NodeInfo {
    QString nodeId; // the node's public key (hex): its identity
    QString name; // chosen by the owner, shown in the broker's tables
    QString softwareVersion;
    QString runtimeProfile; // LibTorch version, BLAS, threads, CPU capability
    QList<DeviceInfo> devices;
    double benchmarkSamplesPerSecond = 0.0; // zoo mlp reference throughput
    int maxThreads = 1;
    std::int64_t maxMemoryMiB = 0; // Compute/MaxMemoryMiB: the largest shard it takes (core/memoryestimate.h); 0: not said
    QString signingKey; // Ed25519 public key (base64): signs the node's commitments
    // What the node can run (core/capabilities.h); none: a node from before capabilities.
    QStringList capabilities;
    std::optional<SwarmEndpoint> swarm; // with capability `swarm`

    static constexpr qsizetype MaxDevices = 64;
    // Lengths checked when a REGISTER is read (docs/PROTOCOL.md, "Limits").
    static constexpr qsizetype MaxIdLength = 128;
    static constexpr qsizetype MaxVersionLength = 64;
    static constexpr qsizetype MaxProfileLength = 512;
    static constexpr qsizetype MaxKeyLength = 64;
    static constexpr qsizetype MaxCapabilities = 64;
    static constexpr qsizetype MaxCapabilityLength = 64;

    static Result<NodeInfo> fromJson(const QJsonObject& json);
    QJsonObject toJson() const;

    bool operator==(const NodeInfo&) const = default;
};

// A runtime profile without its thread count: a node registers the profile of one thread and runs
// each shard on the shard's own thread count, so two profiles match when the rest is equal.
QString runtimeProfileFamily(const QString& profile);

// The runtime profile of results trained with the portable kernels: the same bits on every machine.
inline const QString PortableProfile = QStringLiteral("portable-v1");
// Whether a node of runtime profile `node` computes the bits of a result of profile `result`: the
// same family, or a portable result (any node).
bool reproduces(const QString& node, const QString& result);

} // namespace tessera::core
