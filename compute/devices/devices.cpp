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

QJsonArray probeCuda()
{
    QJsonArray devices;
    Library cuda("libcuda.so.1");
    if (!cuda.loaded())
        return devices;
    using Init = int (*)(unsigned);
    using GetInt = int (*)(int*);
    using DeviceGet = int (*)(int*, int);
    using GetName = int (*)(char*, int, int);
    using TotalMem = int (*)(std::size_t*, int);
    using Attribute = int (*)(int*, int, int);
    auto init = cuda.symbol<Init>("cuInit");
    auto driverVersion = cuda.symbol<GetInt>("cuDriverGetVersion");
    auto count = cuda.symbol<GetInt>("cuDeviceGetCount");
    auto get = cuda.symbol<DeviceGet>("cuDeviceGet");
    auto name = cuda.symbol<GetName>("cuDeviceGetName");
    auto totalMem = cuda.symbol<TotalMem>("cuDeviceTotalMem_v2");
    auto attribute = cuda.symbol<Attribute>("cuDeviceGetAttribute");
    auto busId = cuda.symbol<GetName>("cuDeviceGetPCIBusId");
    if (!init || !count || !get || !name)
        return devices;
    if (init(0) != 0)
        return devices;
    int version = 0;
    if (driverVersion)
        driverVersion(&version);
    int deviceCount = 0;
    if (count(&deviceCount) != 0)
        return devices;

    // NVML adds what the driver API does not say: the driver's version string, temperature, power.
    Library nvml("libnvidia-ml.so.1");
    using NvmlInit = int (*)();
    using NvmlDriver = int (*)(char*, unsigned);
    using NvmlByBus = int (*)(const char*, void**);
    using NvmlTemperature = int (*)(void*, int, unsigned*);
    using NvmlPower = int (*)(void*, unsigned*);
    auto nvmlInit = nvml.symbol<NvmlInit>("nvmlInit_v2");
    auto nvmlShutdown = nvml.symbol<NvmlInit>("nvmlShutdown");
    auto nvmlDriver = nvml.symbol<NvmlDriver>("nvmlSystemGetDriverVersion");
    auto nvmlByBus = nvml.symbol<NvmlByBus>("nvmlDeviceGetHandleByPciBusId_v2");
    auto nvmlTemperature = nvml.symbol<NvmlTemperature>("nvmlDeviceGetTemperature");
    auto nvmlPower = nvml.symbol<NvmlPower>("nvmlDeviceGetPowerUsage");
    const bool haveNvml = nvmlInit && nvmlInit() == 0;
    QString driver = QStringLiteral("CUDA %1.%2").arg(version / 1000).arg((version % 1000) / 10);
    if (haveNvml && nvmlDriver) {
        char text[96] = {};
        if (nvmlDriver(text, sizeof text - 1) == 0)
            driver = QString::fromUtf8(text) + QStringLiteral(" (") + driver + u')';
    }

    for (int ordinal = 0; ordinal < deviceCount && ordinal < 64; ++ordinal) {
        int device = 0;
        if (get(&device, ordinal) != 0)
            continue;
        char text[256] = {};
        name(text, sizeof text - 1, device);
        QJsonObject info {
            { QStringLiteral("kind"), QStringLiteral("cuda") },
            { QStringLiteral("index"), ordinal },
            { QStringLiteral("name"), QString::fromUtf8(text).trimmed() },
            { QStringLiteral("vendor"), QStringLiteral("NVIDIA") },
            { QStringLiteral("driverVersion"), driver },
        };
        std::size_t memory = 0;
        if (totalMem && totalMem(&memory, device) == 0)
            info.insert(QStringLiteral("memoryBytes"), static_cast<qint64>(memory));
        int major = 0, minor = 0, multiprocessors = 0;
        constexpr int ComputeCapabilityMajor = 75, ComputeCapabilityMinor = 76, MultiprocessorCount = 16;
        if (attribute && attribute(&major, ComputeCapabilityMajor, device) == 0
            && attribute(&minor, ComputeCapabilityMinor, device) == 0)
            info.insert(QStringLiteral("computeCapability"), QStringLiteral("%1.%2").arg(major).arg(minor));
        if (attribute && attribute(&multiprocessors, MultiprocessorCount, device) == 0)
            info.insert(QStringLiteral("cores"), multiprocessors);
        char bus[64] = {};
        if (busId && busId(bus, sizeof bus - 1, device) == 0) {
            info.insert(QStringLiteral("pciBusId"), QString::fromLatin1(bus));
            void* handle = nullptr;
            if (haveNvml && nvmlByBus && nvmlByBus(bus, &handle) == 0) {
                unsigned temperature = 0, milliwatts = 0;
                if (nvmlTemperature && nvmlTemperature(handle, 0, &temperature) == 0)
                    info.insert(QStringLiteral("temperatureCelsius"), int(temperature));
                if (nvmlPower && nvmlPower(handle, &milliwatts) == 0)
                    info.insert(QStringLiteral("powerWatts"), int(milliwatts / 1000));
            }
        }
        devices.append(info);
    }
    if (haveNvml && nvmlShutdown)
        nvmlShutdown();
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
