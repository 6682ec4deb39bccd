#pragma once

#include <compute/computethread.h>
#include <compute/environment.h>
#include <core/error.h>
#include <core/nodeinfo.h>
#include <core/settings/settings.h>
#include <core/signing.h>
#include <net/curvekeys.h>

#include <QString>
#include <QStringList>

namespace tessera::app {

// What the headless node and the desktop app set up the same way from the settings.
compute::ComputeEnvironment environmentFrom(const core::settings::Settings& settings);
// Node/DataDirectory, or ~/.local/share/Tessera.
QString dataDirectory(const core::settings::Settings& settings);
// Compute/MaxThreads, or every core when it is 0.
int computeThreads(const core::settings::Settings& settings);
// Compute/Sandbox, with the workers' scratch folders under the data directory (not /tmp, which may
// be memory: a large model's training state is hundreds of MB).
compute::ComputeThread::Sandbox sandboxFrom(const core::settings::Settings& settings);

// Compute/BenchmarkOnFirstStart: when no benchmark of this CPU is stored in the node's database
// (in dataDirectory), takes the first-start one (compute::BenchmarkOptions::firstStart, the zoo
// mlp) on `threads` threads and stores it. Its mlp samples/s, or nothing when a benchmark was
// stored already. Blocks for about 2 s when it measures: the desktop app calls it off the GUI
// thread. The callers check the setting.
core::Result<std::optional<double>> benchmarkOnFirstStart(const QString& dataDirectory, int threads);

// The node's identity and description: its CURVE keypair (its id), its Ed25519 signing key, and
// the NodeInfo it registers with (devices, benchmark, thread limit). Warnings from device
// detection are returned for the caller to show.
struct NodeIdentity {
    net::CurveKeys keys;
    core::SigningKeys signing;
    core::NodeInfo info;
    QStringList warnings;
};
core::Result<NodeIdentity> loadNodeIdentity(const core::settings::Settings& settings, const QString& softwareVersion);

} // namespace tessera::app
