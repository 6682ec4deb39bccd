#pragma once

#include <compute/common/environment.h>
#include <compute/supervisor/computethread.h>
#include <compute/supervisor/sandbox/worker.h>
#include <core/error.h>
#include <core/nodeinfo.h>
#include <core/settings/settings.h>
#include <core/signing.h>
#include <net/curvekeys.h>
#include <net/nodeswarm.h>

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

// How the node's own LibTorch work (its runtime profile, benchmarks, a round's weights rebuilt, a
// language model's sample) runs from a program that does not load LibTorch: in a one-shot
// tessera-compute worker (compute/supervisor/sandbox/worker.h), confined as Compute/Sandbox says, at normal
// CPU priority (a benchmark measures the machine, not the desktop's load), its scratch folder
// under the data directory.
compute::sandbox::WorkerOptions toolOptionsFrom(const core::settings::Settings& settings);
// This node's runtime profile (what it registers with; results compare only between equal ones)
// and what its LibTorch can do, from a worker (about 1 s: LibTorch's start).
core::Result<compute::sandbox::RuntimeInfo> runtimeOf(const core::settings::Settings& settings);
// Compute/BenchmarkOnFirstStart: when no benchmark of this CPU is stored in the node's database
// (in dataDirectory), takes the first-start one (compute::BenchmarkOptions::firstStart, the zoo
// mlp) on `threads` threads in a worker and stores it. Its mlp samples/s, or nothing when a benchmark was
// stored already. Blocks for about 3 s when it measures: the desktop app calls it off the GUI
// thread. The callers check the setting.
core::Result<std::optional<double>> benchmarkOnFirstStart(
    const QString& dataDirectory, int threads, const compute::sandbox::WorkerOptions& worker);

// The blob swarm of the node's session with its `index`-th broker (Swarm/*; docs/SWARM.md): its
// key is swarm.key in the data directory; a fixed Swarm/Port is the first session's, the next
// sessions take the ports after it. None when Swarm/Enabled is false.
std::optional<net::NodeSwarm::Options> swarmOptionsFrom(const core::settings::Settings& settings, int index);

// The node's identity and description: its CURVE keypair (its id), its Ed25519 signing key, and
// the NodeInfo it registers with (devices, benchmark, thread limit, and the runtime profile when
// `runtime` is given: the desktop app learns it after its start, withRuntime() fills it in).
// Warnings from device detection are returned for the caller to show.
struct NodeIdentity {
    net::CurveKeys keys;
    core::SigningKeys signing;
    core::NodeInfo info;
    QStringList warnings;
};
core::Result<NodeIdentity> loadNodeIdentity(const core::settings::Settings& settings, const QString& softwareVersion,
    const std::optional<compute::sandbox::RuntimeInfo>& runtime);
// The identity with its runtime profile, and its devices' usability decided by what LibTorch can do.
void withRuntime(NodeIdentity& identity, const compute::sandbox::RuntimeInfo& runtime);

} // namespace tessera::app
