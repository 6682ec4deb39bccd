#pragma once

#include "enumnames.h"
#include "error.h"

#include <QJsonObject>
#include <QString>
#include <QStringList>

#include <cstdint>

namespace tessera::core {

// A compute device found on a node, and whether Tessera can train on it (and if not, why).
struct DeviceInfo {
    enum class Kind { Cpu, Cuda, OpenCl };

    Kind kind = Kind::Cpu;
    int index = 0; // among devices of the same kind
    QString name; // "AMD EPYC 7B13", "NVIDIA GeForce RTX 3060"
    QString vendor;
    std::int64_t memoryBytes = 0; // RAM for a CPU, device memory for a GPU
    int cores = 0; // logical CPUs, or multiprocessors
    QStringList features; // ISA flags (avx2, avx512f, ...) or extensions
    QString computeCapability; // CUDA "8.6"
    QString pciBusId; // "0000:01:00.0"
    QString driverVersion;
    int temperatureCelsius = -1; // -1: unknown
    int powerWatts = -1; // -1: unknown
    bool usable = false;
    QString unusableReason; // empty when usable

    static Result<DeviceInfo> fromJson(const QJsonObject& json);
    QJsonObject toJson() const;

    bool operator==(const DeviceInfo&) const = default;
};

// A device's id among this machine's, as settings, the tray and the control API name it: "cpu:0",
// "cuda:1".
QString deviceIdOf(const DeviceInfo& device);

template<> struct EnumNames<DeviceInfo::Kind> {
    static constexpr std::array names { "cpu", "cuda", "opencl" };
};

} // namespace tessera::core
