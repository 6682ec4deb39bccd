#pragma once

#include <core/deviceinfo.h>

#include <QJsonArray>
#include <QList>
#include <QString>
#include <QStringList>

namespace tessera::compute {

// What this machine has to compute on, and what went wrong finding out.
struct DeviceReport {
    QList<core::DeviceInfo> devices;
    QStringList warnings; // e.g. "the GPU probe crashed (a driver problem); GPUs are left out"
};

// What the LibTorch that Tessera runs on can use; decides "usable" for GPUs.
struct TorchCapabilities {
    bool cuda = false;
    int cudaDevices = 0;
};

// The CPU: model, vendor, logical cores, ISA flags (from /proc/cpuinfo) and RAM (/proc/meminfo).
// cpuinfoPath and meminfoPath exist for tests.
core::DeviceInfo detectCpu(
    const QString& cpuinfoPath = QStringLiteral("/proc/cpuinfo"), const QString& meminfoPath = QStringLiteral("/proc/meminfo"));

// NVIDIA GPUs through the driver's libcuda.so.1 and libnvidia-ml.so.1, and OpenCL devices
// through libOpenCL.so.1, all opened with dlopen: Tessera needs none of them to run. Vendor
// libraries can crash or hang, so this runs inside tessera-device-probe, never in the app itself.
// Devices come back with usable = false; the caller decides usability.
QJsonArray probeGpusHere();

// Runs the probe program in a child process with a time limit (as BOINC does) and reads its
// answer; a crash, a hang or garbage becomes a warning, never a crash of the caller.
DeviceReport probeGpusInChild(const QString& probeProgram, int timeoutMs = 15000);

// Marks which devices Tessera can train on, and why not.
void decideUsability(QList<core::DeviceInfo>& devices, const TorchCapabilities& torch);

// CPU plus probed GPUs, usability decided.
DeviceReport detectDevices(const QString& probeProgram, const TorchCapabilities& torch, int timeoutMs = 15000);

// tessera-device-probe next to the running program, else in the installed libexec folder.
QString defaultProbeProgram();

} // namespace tessera::compute
