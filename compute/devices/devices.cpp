#include "devices.h"

#include <core/helperprogram.h>

#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QProcess>
#include <QRegularExpression>
#include <QThread>

#include <dlfcn.h>

#include <cstring>

namespace tessera::compute {

namespace {

// ISA extensions that decide which kernels LibTorch can use; the rest of /proc/cpuinfo's flags
// are noise to a user.
const QStringList InterestingFlags = { QStringLiteral("sse4_2"), QStringLiteral("avx"), QStringLiteral("avx2"),
    QStringLiteral("fma"), QStringLiteral("f16c"), QStringLiteral("avx512f"), QStringLiteral("avx512bw"),
    QStringLiteral("avx512vl"), QStringLiteral("avx512_vnni"), QStringLiteral("avx512_bf16"), QStringLiteral("amx_tile"),
    QStringLiteral("amx_bf16"), QStringLiteral("neon"), QStringLiteral("asimd"), QStringLiteral("sve") };

QString readText(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return {};
    return QString::fromUtf8(file.readAll());
}

// A library opened for the duration of a probe.
class Library {
public:
    explicit Library(const char* name)
        : m_handle(dlopen(name, RTLD_NOW | RTLD_LOCAL))
    { }
    ~Library()
    {
        if (m_handle)
            dlclose(m_handle);
    }
    Library(const Library&) = delete;
    Library& operator=(const Library&) = delete;

    bool loaded() const { return m_handle != nullptr; }
    template<typename F> F symbol(const char* name) const
    {
        return m_handle ? reinterpret_cast<F>(dlsym(m_handle, name)) : nullptr;
    }

private:
    void* m_handle;
};

// The CUDA driver API's calls the probe makes (libcuda.so.1), each null where the library lacks it.
struct CudaDriver {
    explicit CudaDriver(const Library& cuda)
        : init(cuda.symbol<int (*)(unsigned)>("cuInit"))
        , driverVersion(cuda.symbol<int (*)(int*)>("cuDriverGetVersion"))
        , count(cuda.symbol<int (*)(int*)>("cuDeviceGetCount"))
        , get(cuda.symbol<int (*)(int*, int)>("cuDeviceGet"))
        , name(cuda.symbol<int (*)(char*, int, int)>("cuDeviceGetName"))
        , totalMem(cuda.symbol<int (*)(std::size_t*, int)>("cuDeviceTotalMem_v2"))
        , attribute(cuda.symbol<int (*)(int*, int, int)>("cuDeviceGetAttribute"))
        , busId(cuda.symbol<int (*)(char*, int, int)>("cuDeviceGetPCIBusId"))
    { }
    bool usable() const { return init && count && get && name; }
    int (*init)(unsigned);
    int (*driverVersion)(int*);
    int (*count)(int*);
    int (*get)(int*, int);
    int (*name)(char*, int, int);
    int (*totalMem)(std::size_t*, int);
    int (*attribute)(int*, int, int);
    int (*busId)(char*, int, int);
};

// NVML (libnvidia-ml.so.1) adds what the driver API does not say: the driver's version string,
// temperature, power. Initialised for the object's life where the library is there.
class Nvml {
public:
    explicit Nvml(const Library& nvml)
        : m_shutdown(nvml.symbol<int (*)()>("nvmlShutdown"))
        , m_driver(nvml.symbol<int (*)(char*, unsigned)>("nvmlSystemGetDriverVersion"))
        , m_byBus(nvml.symbol<int (*)(const char*, void**)>("nvmlDeviceGetHandleByPciBusId_v2"))
        , m_temperature(nvml.symbol<int (*)(void*, int, unsigned*)>("nvmlDeviceGetTemperature"))
        , m_power(nvml.symbol<int (*)(void*, unsigned*)>("nvmlDeviceGetPowerUsage"))
    {
        const auto init = nvml.symbol<int (*)()>("nvmlInit_v2");
        m_up = init && init() == 0;
    }
    ~Nvml()
    {
        if (m_up && m_shutdown)
            m_shutdown();
    }
    Nvml(const Nvml&) = delete;
    Nvml& operator=(const Nvml&) = delete;

    // "550.54 (CUDA 12.4)", or the CUDA version alone.
    QString driver(const QString& cuda) const
    {
        char text[96] = {};
        if (m_up && m_driver && m_driver(text, sizeof text - 1) == 0)
            return QString::fromUtf8(text) + QStringLiteral(" (") + cuda + u')';
        return cuda;
    }
    // The temperature and power of the device on PCI bus `bus`, where NVML says them.
    void addSensors(const char* bus, QJsonObject& info) const
    {
        void* handle = nullptr;
        if (!m_up || !m_byBus || m_byBus(bus, &handle) != 0)
            return;
        unsigned temperature = 0, milliwatts = 0;
        if (m_temperature && m_temperature(handle, 0, &temperature) == 0)
            info.insert(QStringLiteral("temperatureCelsius"), int(temperature));
        if (m_power && m_power(handle, &milliwatts) == 0)
            info.insert(QStringLiteral("powerWatts"), int(milliwatts / 1000));
    }

private:
    bool m_up = false;
    int (*m_shutdown)();
    int (*m_driver)(char*, unsigned);
    int (*m_byBus)(const char*, void**);
    int (*m_temperature)(void*, int, unsigned*);
    int (*m_power)(void*, unsigned*);
};

// One CUDA device as the probe reports it (`device`: the driver's handle).
QJsonObject cudaDevice(const CudaDriver& cuda, const Nvml& nvml, int ordinal, int device, const QString& driver)
{
    char text[256] = {};
    cuda.name(text, sizeof text - 1, device);
    QJsonObject info {
        { QStringLiteral("kind"), QStringLiteral("cuda") },
        { QStringLiteral("index"), ordinal },
        { QStringLiteral("name"), QString::fromUtf8(text).trimmed() },
        { QStringLiteral("vendor"), QStringLiteral("NVIDIA") },
        { QStringLiteral("driverVersion"), driver },
    };
    std::size_t memory = 0;
    if (cuda.totalMem && cuda.totalMem(&memory, device) == 0)
        info.insert(QStringLiteral("memoryBytes"), static_cast<qint64>(memory));
    int major = 0, minor = 0, multiprocessors = 0;
    constexpr int ComputeCapabilityMajor = 75, ComputeCapabilityMinor = 76, MultiprocessorCount = 16;
    if (cuda.attribute && cuda.attribute(&major, ComputeCapabilityMajor, device) == 0
        && cuda.attribute(&minor, ComputeCapabilityMinor, device) == 0)
        info.insert(QStringLiteral("computeCapability"), QStringLiteral("%1.%2").arg(major).arg(minor));
    if (cuda.attribute && cuda.attribute(&multiprocessors, MultiprocessorCount, device) == 0)
        info.insert(QStringLiteral("cores"), multiprocessors);
    char bus[64] = {};
    if (cuda.busId && cuda.busId(bus, sizeof bus - 1, device) == 0) {
        info.insert(QStringLiteral("pciBusId"), QString::fromLatin1(bus));
        nvml.addSensors(bus, info);
    }
    return info;
}

QJsonArray probeCuda()
{
    QJsonArray devices;
    Library library("libcuda.so.1");
    if (!library.loaded())
        return devices;
    const CudaDriver cuda(library);
    if (!cuda.usable() || cuda.init(0) != 0)
        return devices;
    int version = 0;
    if (cuda.driverVersion)
        cuda.driverVersion(&version);
    int deviceCount = 0;
    if (cuda.count(&deviceCount) != 0)
        return devices;
    Library nvmlLibrary("libnvidia-ml.so.1");
    const Nvml nvml(nvmlLibrary);
    const QString driver = nvml.driver(QStringLiteral("CUDA %1.%2").arg(version / 1000).arg((version % 1000) / 10));
    for (int ordinal = 0; ordinal < deviceCount && ordinal < 64; ++ordinal) {
        int device = 0;
        if (cuda.get(&device, ordinal) == 0)
            devices.append(cudaDevice(cuda, nvml, ordinal, device, driver));
    }
    return devices;
}

QJsonArray probeOpenCl()
{
    QJsonArray devices;
    Library opencl("libOpenCL.so.1");
    using Platforms = int (*)(unsigned, void**, unsigned*);
    using DeviceIds = int (*)(void*, std::uint64_t, unsigned, void**, unsigned*);
    using DeviceInfoFn = int (*)(void*, unsigned, std::size_t, void*, std::size_t*);
    auto platforms = opencl.symbol<Platforms>("clGetPlatformIDs");
    auto deviceIds = opencl.symbol<DeviceIds>("clGetDeviceIDs");
    auto deviceInfo = opencl.symbol<DeviceInfoFn>("clGetDeviceInfo");
    if (!platforms || !deviceIds || !deviceInfo)
        return devices;
    void* platformList[16] = {};
    unsigned platformCount = 0;
    if (platforms(16, platformList, &platformCount) != 0)
        return devices;
    constexpr std::uint64_t AllDevices = 0xFFFFFFFF;
    constexpr unsigned Name = 0x102B, Vendor = 0x102C, DriverVersion = 0x102D, GlobalMemory = 0x101F, ComputeUnits = 0x1002;
    int index = 0;
    for (unsigned p = 0; p < std::min(platformCount, 16u); ++p) {
        void* deviceList[32] = {};
        unsigned deviceCount = 0;
        if (deviceIds(platformList[p], AllDevices, 32, deviceList, &deviceCount) != 0)
            continue;
        for (unsigned i = 0; i < std::min(deviceCount, 32u); ++i) {
            auto text = [&](unsigned what) {
                char buffer[256] = {};
                deviceInfo(deviceList[i], what, sizeof buffer - 1, buffer, nullptr);
                return QString::fromUtf8(buffer).trimmed();
            };
            std::uint64_t memory = 0;
            unsigned units = 0;
            deviceInfo(deviceList[i], GlobalMemory, sizeof memory, &memory, nullptr);
            deviceInfo(deviceList[i], ComputeUnits, sizeof units, &units, nullptr);
            devices.append(QJsonObject {
                { QStringLiteral("kind"), QStringLiteral("opencl") },
                { QStringLiteral("index"), index++ },
                { QStringLiteral("name"), text(Name) },
                { QStringLiteral("vendor"), text(Vendor) },
                { QStringLiteral("driverVersion"), text(DriverVersion) },
                { QStringLiteral("memoryBytes"), static_cast<qint64>(memory) },
                { QStringLiteral("cores"), int(units) },
            });
        }
    }
    return devices;
}

} // namespace

core::DeviceInfo detectCpu(const QString& cpuinfoPath, const QString& meminfoPath)
{
    core::DeviceInfo cpu;
    cpu.kind = core::DeviceInfo::Kind::Cpu;
    cpu.usable = true;
    const QString cpuinfo = readText(cpuinfoPath);
    int processors = 0;
    QStringList flags;
    for (const auto& line : cpuinfo.split(u'\n')) {
        const auto colon = line.indexOf(u':');
        if (colon < 0)
            continue;
        const QString key = line.left(colon).trimmed();
        const QString value = line.mid(colon + 1).trimmed();
        if (key == u"processor")
            ++processors;
        else if (key == u"model name" && cpu.name.isEmpty())
            cpu.name = value;
        else if (key == u"vendor_id" && cpu.vendor.isEmpty())
            cpu.vendor = value;
        else if ((key == u"flags" || key == u"Features") && flags.isEmpty())
            flags = value.split(u' ', Qt::SkipEmptyParts);
    }
    for (const auto& flag : InterestingFlags) {
        if (flags.contains(flag))
            cpu.features.append(flag);
    }
    cpu.cores = processors > 0 ? processors : QThread::idealThreadCount();
    if (cpu.name.isEmpty())
        cpu.name = QStringLiteral("CPU");
    static const QRegularExpression memTotal(QStringLiteral("^MemTotal:\\s+(\\d+)\\s+kB"), QRegularExpression::MultilineOption);
    const auto match = memTotal.match(readText(meminfoPath));
    if (match.hasMatch())
        cpu.memoryBytes = match.captured(1).toLongLong() * 1024;
    return cpu;
}

QJsonArray probeGpusHere()
{
    QJsonArray all = probeCuda();
    for (const auto& device : probeOpenCl())
        all.append(device);
    return all;
}

DeviceReport probeGpusInChild(const QString& probeProgram, int timeoutMs)
{
    DeviceReport report;
    if (!QFileInfo(probeProgram).isExecutable()) {
        report.warnings.append(QStringLiteral("the GPU probe %1 is missing; GPUs are not detected").arg(probeProgram));
        return report;
    }
    QProcess probe;
    probe.setProcessChannelMode(QProcess::SeparateChannels);
    probe.start(probeProgram, {});
    if (!probe.waitForStarted(timeoutMs)) {
        report.warnings.append(QStringLiteral("the GPU probe did not start: %1").arg(probe.errorString()));
        return report;
    }
    if (!probe.waitForFinished(timeoutMs)) {
        probe.kill();
        probe.waitForFinished(1000);
        report.warnings.append(QStringLiteral("the GPU probe did not answer within %1 s (a hung driver?); GPUs are left out")
                                   .arg(timeoutMs / 1000.0, 0, 'f', 1));
        return report;
    }
    if (probe.exitStatus() != QProcess::NormalExit) {
        report.warnings.append(
            QStringLiteral("the GPU probe crashed inside a vendor library (a driver problem); GPUs are left out"));
        return report;
    }
    const auto document = QJsonDocument::fromJson(probe.readAllStandardOutput());
    if (probe.exitCode() != 0 || !document.isArray()) {
        report.warnings.append(QStringLiteral("the GPU probe gave no usable answer; GPUs are left out"));
        return report;
    }
    for (const auto& value : document.array()) {
        // The probe only finds devices; decideUsability() says which Tessera can use.
        QJsonObject object = value.toObject();
        object.insert(QStringLiteral("usable"), false);
        object.insert(QStringLiteral("unusableReason"), QStringLiteral("not checked yet"));
        auto device = core::DeviceInfo::fromJson(object);
        if (device)
            report.devices.append(*device);
        else
            report.warnings.append(
                QStringLiteral("the GPU probe reported a device Tessera cannot read: %1").arg(device.error().toString()));
    }
    return report;
}

void decideUsability(QList<core::DeviceInfo>& devices, const TorchCapabilities& torch)
{
    for (auto& device : devices) {
        switch (device.kind) {
        case core::DeviceInfo::Kind::Cpu:
            device.usable = true;
            device.unusableReason.clear();
            break;
        case core::DeviceInfo::Kind::Cuda:
            if (!torch.cuda) {
                device.usable = false;
                device.unusableReason
                    = QStringLiteral("this LibTorch build has no CUDA (Debian's LibTorch is CPU-only; build Tessera "
                                     "with -DTorch_DIR pointing at a CUDA LibTorch to train on it)");
            } else if (device.index >= torch.cudaDevices) {
                device.usable = false;
                device.unusableReason = QStringLiteral("LibTorch sees only %1 CUDA device(s)").arg(torch.cudaDevices);
            } else {
                device.usable = true;
                device.unusableReason.clear();
            }
            break;
        case core::DeviceInfo::Kind::OpenCl:
            device.usable = false;
            device.unusableReason = QStringLiteral("LibTorch has no OpenCL backend");
            break;
        }
    }
}

DeviceReport detectDevices(const QString& probeProgram, const TorchCapabilities& torch, int timeoutMs)
{
    DeviceReport report = probeGpusInChild(probeProgram, timeoutMs);
    report.devices.prepend(detectCpu());
    decideUsability(report.devices, torch);
    return report;
}

QString defaultProbeProgram()
{
    return core::helperProgram(nullptr, QStringLiteral("tessera-device-probe"), QStringLiteral(TESSERA_LIBEXEC_DIR));
}

} // namespace tessera::compute
