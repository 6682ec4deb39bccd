// Device detection, tested honestly without a GPU: the probe runs against fake vendor libraries
// (tests/compute/fakegpu) that report two NVIDIA GPUs and one OpenCL device, or crash, or hang.

#include <compute/devices/devices.h>

#include <QFile>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

using namespace tessera;
using compute::DeviceReport;
using core::DeviceInfo;

namespace {

const QString Probe = QStringLiteral(TESSERA_DEVICE_PROBE);

DeviceReport probeWith(
    const char* mode, const QByteArray& libraryPath = QByteArrayLiteral(TESSERA_FAKE_GPU_DIR), int timeoutMs = 15000)
{
    qputenv("LD_LIBRARY_PATH", libraryPath);
    qputenv("TESSERA_FAKE_CUDA", mode);
    auto report = compute::probeGpusInChild(Probe, timeoutMs);
    qunsetenv("LD_LIBRARY_PATH");
    qunsetenv("TESSERA_FAKE_CUDA");
    return report;
}

QList<DeviceInfo> ofKind(const QList<DeviceInfo>& devices, DeviceInfo::Kind kind)
{
    QList<DeviceInfo> matching;
    for (const auto& device : devices) {
        if (device.kind == kind)
            matching.append(device);
    }
    return matching;
}

} // namespace

class DevicesTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void readsTheCpuFromProcFiles()
    {
        QTemporaryDir dir;
        QFile cpuinfo(dir.filePath(QStringLiteral("cpuinfo")));
        QVERIFY(cpuinfo.open(QIODevice::WriteOnly));
        for (int i = 0; i < 3; ++i)
            cpuinfo.write(
                QStringLiteral("processor\t: %1\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD Ryzen 5 5600X 6-Core Processor\n"
                               "flags\t\t: fpu sse4_2 avx avx2 fma hypervisor avx512f\n\n")
                    .arg(i)
                    .toUtf8());
        cpuinfo.close();
        QFile meminfo(dir.filePath(QStringLiteral("meminfo")));
        QVERIFY(meminfo.open(QIODevice::WriteOnly));
        meminfo.write("MemTotal:       32768000 kB\nMemFree:        1000 kB\n");
        meminfo.close();

        const auto cpu = compute::detectCpu(cpuinfo.fileName(), meminfo.fileName());
        QCOMPARE(cpu.kind, DeviceInfo::Kind::Cpu);
        QCOMPARE(cpu.name, QStringLiteral("AMD Ryzen 5 5600X 6-Core Processor"));
        QCOMPARE(cpu.vendor, QStringLiteral("AuthenticAMD"));
        QCOMPARE(cpu.cores, 3);
        QCOMPARE(cpu.features,
            (QStringList { QStringLiteral("sse4_2"), QStringLiteral("avx"), QStringLiteral("avx2"), QStringLiteral("fma"),
                QStringLiteral("avx512f") }));
        QCOMPARE(cpu.memoryBytes, 32768000LL * 1024);
        QVERIFY(cpu.usable);
    }

    void readsThisMachinesCpu()
    {
        const auto cpu = compute::detectCpu();
        // The machine's logical cores; a process pinned to fewer (taskset, a cpuset) sees fewer.
        QVERIFY2(cpu.cores >= QThread::idealThreadCount() && cpu.cores >= 1,
            qPrintable(QStringLiteral("%1 cores, %2 usable by this process").arg(cpu.cores).arg(QThread::idealThreadCount())));
        QVERIFY(cpu.memoryBytes > 0);
        QVERIFY(!cpu.name.isEmpty());
    }

    void fakeDriverReportsTwoNvidiaGpusAndAnOpenClDevice()
    {
        const auto report = probeWith("ok");
        QVERIFY2(report.warnings.isEmpty(), qPrintable(report.warnings.join(u'\n')));
        const auto cuda = ofKind(report.devices, DeviceInfo::Kind::Cuda);
        QCOMPARE(cuda.size(), 2);
        QCOMPARE(cuda[0].name, QStringLiteral("Fake GeForce RTX 3060"));
        QCOMPARE(cuda[0].memoryBytes, 12LL << 30);
        QCOMPARE(cuda[0].computeCapability, QStringLiteral("8.6"));
        QCOMPARE(cuda[0].cores, 28);
        QCOMPARE(cuda[0].pciBusId, QStringLiteral("0000:01:00.0"));
        QCOMPARE(cuda[0].driverVersion, QStringLiteral("535.104.05 (CUDA 12.2)"));
        QCOMPARE(cuda[0].temperatureCelsius, 61);
        QCOMPARE(cuda[0].powerWatts, 170);
        QCOMPARE(cuda[1].name, QStringLiteral("Fake H100 80GB HBM3"));
        QCOMPARE(cuda[1].computeCapability, QStringLiteral("9.0"));
        QCOMPARE(cuda[1].index, 1);
        const auto opencl = ofKind(report.devices, DeviceInfo::Kind::OpenCl);
        QCOMPARE(opencl.size(), 1);
        QCOMPARE(opencl[0].name, QStringLiteral("Fake Radeon RX 7600"));
        QCOMPARE(opencl[0].memoryBytes, 8LL << 30);
    }

    void usabilitySaysWhy()
    {
        auto devices = probeWith("ok").devices;
        devices.prepend(compute::detectCpu());
        compute::decideUsability(devices, { false, 0 });
        QVERIFY(devices[0].usable);
        for (const auto& gpu : ofKind(devices, DeviceInfo::Kind::Cuda)) {
            QVERIFY(!gpu.usable);
            QVERIFY2(
                gpu.unusableReason.contains(QStringLiteral("this LibTorch build has no CUDA")), qPrintable(gpu.unusableReason));
        }
        QVERIFY(ofKind(devices, DeviceInfo::Kind::OpenCl)[0].unusableReason.contains(QStringLiteral("no OpenCL backend")));

        compute::decideUsability(devices, { true, 1 }); // a CUDA LibTorch that sees one of the two
        const auto cuda = ofKind(devices, DeviceInfo::Kind::Cuda);
        QVERIFY(cuda[0].usable);
        QVERIFY(cuda[0].unusableReason.isEmpty());
        QVERIFY(!cuda[1].usable);
        // Every device round-trips as JSON with its verdict.
        for (const auto& device : devices)
            QCOMPARE(*DeviceInfo::fromJson(device.toJson()), device);
    }

    void aCrashingDriverCostsOnlyTheProbe()
    {
        const auto report = probeWith("crash");
        QVERIFY(report.devices.isEmpty());
        QCOMPARE(report.warnings.size(), 1);
        QVERIFY2(report.warnings[0].contains(QStringLiteral("crashed")), qPrintable(report.warnings[0]));
    }

    void aHangingDriverIsTimedOut()
    {
        const auto report = probeWith("hang", QByteArrayLiteral(TESSERA_FAKE_GPU_DIR), 1500);
        QVERIFY(report.devices.isEmpty());
        QCOMPARE(report.warnings.size(), 1);
        QVERIFY2(report.warnings[0].contains(QStringLiteral("did not answer")), qPrintable(report.warnings[0]));
    }

    void aDriverWithoutDevicesIsQuiet()
    {
        const auto report = probeWith("fail");
        QVERIFY(ofKind(report.devices, DeviceInfo::Kind::Cuda).isEmpty());
        QVERIFY(report.warnings.isEmpty());
        // No vendor libraries at all (this machine): nothing found, nothing to warn about.
        const auto none = probeWith("ok", QByteArray());
        QVERIFY(none.devices.isEmpty());
        QVERIFY(none.warnings.isEmpty());
    }

    void aMissingProbeIsAWarning()
    {
        const auto report = compute::probeGpusInChild(QStringLiteral("/nonexistent/tessera-device-probe"));
        QVERIFY(report.devices.isEmpty());
        QVERIFY(report.warnings.value(0).contains(QStringLiteral("missing")));
    }
};

QTEST_GUILESS_MAIN(DevicesTest)
#include "tst_devices.moc"
