// Device detection, tested honestly without a GPU: the probe runs against fake vendor libraries
// (tests/compute/fakegpu) that report two NVIDIA GPUs and one OpenCL device, or crash, or hang.
// Heat and energy the same way: fake sysfs trees (hwmon, thermal zones, RAPL's powercap) that a
// simulated device heats as the temperature governor lets it work.

#include <compute/devices/devices.h>
#include <compute/devices/sensors.h>
#include <core/thermal.h>

#include <QDir>
#include <QFileInfo>

#include <QFile>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <algorithm>
#include <cmath>

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

// Writes `text` to root/path, making its folders.
void put(const QString& root, const QString& path, const QByteArray& text)
{
    const QString full = QDir(root).filePath(path);
    QVERIFY(QDir().mkpath(QFileInfo(full).path()));
    QFile file(full);
    QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
    QCOMPARE(file.write(text), text.size());
}

QByteArray milli(double celsius)
{
    return QByteArray::number(qRound64(celsius * 1000.0)) + '\n';
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

    void sensorsReadTheHottestCpuChipAndIgnoreOthers()
    {
        QTemporaryDir root;
        QVERIFY(root.isValid());
        // An ACPI zone and a disk's chip are hotter, but they are not the CPU.
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon0/name"), "acpitz\n");
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon0/temp1_input"), milli(99));
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon1/name"), "nvme\n");
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon1/temp1_input"), milli(80));
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon2/name"), "k10temp\n");
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon2/temp1_input"), milli(61.25));
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon2/temp3_input"), milli(64.5));
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon2/temp4_input"), "garbage\n");
        put(root.path(), QStringLiteral("sys/class/thermal/thermal_zone0/type"), "x86_pkg_temp\n");
        put(root.path(), QStringLiteral("sys/class/thermal/thermal_zone0/temp"), milli(70));
        compute::Sensors sensors(root.path());
        auto readings = sensors.read(0);
        QVERIFY(readings.cpuTemperatureC.has_value());
        QCOMPARE(*readings.cpuTemperatureC, 64.5); // the hwmon chip wins over the zone
        QCOMPARE(readings.cpuTemperatureSource, QStringLiteral("hwmon k10temp"));
        QVERIFY(!readings.cpuWatts.has_value());
        QVERIFY(!sensors.cpuJoules().has_value());

        // Without a CPU chip, the hottest CPU thermal zone.
        QVERIFY(QDir(QDir(root.path()).filePath(QStringLiteral("sys/class/hwmon/hwmon2"))).removeRecursively());
        put(root.path(), QStringLiteral("sys/class/thermal/thermal_zone1/type"), "acpitz\n");
        put(root.path(), QStringLiteral("sys/class/thermal/thermal_zone1/temp"), milli(95));
        put(root.path(), QStringLiteral("sys/class/thermal/thermal_zone2/type"), "cpu-thermal\n");
        put(root.path(), QStringLiteral("sys/class/thermal/thermal_zone2/temp"), milli(72));
        readings = sensors.read(1000);
        QCOMPARE(*readings.cpuTemperatureC, 72.0);
        QCOMPARE(readings.cpuTemperatureSource, QStringLiteral("thermal cpu-thermal"));
    }

    void sensorsCountRaplEnergyAcrossPackagesAndWraps()
    {
        QTemporaryDir root;
        QVERIFY(root.isValid());
        const QString zero = QStringLiteral("sys/class/powercap/intel-rapl:0/");
        const QString one = QStringLiteral("sys/class/powercap/intel-rapl:1/");
        const QString core = QStringLiteral("sys/class/powercap/intel-rapl:0:0/"); // within package 0
        put(root.path(), zero + QStringLiteral("energy_uj"), "1000000\n");
        put(root.path(), zero + QStringLiteral("max_energy_range_uj"), "20000000\n");
        put(root.path(), one + QStringLiteral("energy_uj"), "500\n");
        put(root.path(), one + QStringLiteral("max_energy_range_uj"), "20000000\n");
        put(root.path(), core + QStringLiteral("energy_uj"), "7\n");
        compute::Sensors sensors(root.path());
        QVERIFY(!sensors.read(0).cpuWatts.has_value()); // one read is no interval
        QCOMPARE(*sensors.cpuJoules(), 0.0);

        // 10 J and 5 J in two seconds: 7.5 W; the subzone's counter is in package 0's already.
        put(root.path(), zero + QStringLiteral("energy_uj"), "11000000\n");
        put(root.path(), one + QStringLiteral("energy_uj"), "5000500\n");
        put(root.path(), core + QStringLiteral("energy_uj"), "9000007\n");
        auto readings = sensors.read(2000);
        QVERIFY(readings.cpuWatts.has_value());
        QCOMPARE(*readings.cpuWatts, 7.5);
        QCOMPARE(*sensors.cpuJoules(), 15.0);

        // Package 0 wraps at 20 J: 11 J -> 20 J -> 1 J is 10 J, not -10 J.
        put(root.path(), zero + QStringLiteral("energy_uj"), "1000000\n");
        readings = sensors.read(3000);
        QCOMPARE(*readings.cpuWatts, 10.0);
        QCOMPARE(*sensors.cpuJoules(), 25.0);
    }

    void noSensorsAreNothingAndNoError()
    {
        QTemporaryDir root;
        QVERIFY(root.isValid());
        compute::Sensors sensors(root.path());
        const auto readings = sensors.read(0);
        QVERIFY(!readings.cpuTemperatureC.has_value());
        QVERIFY(!readings.cpuWatts.has_value());
        QVERIFY(!sensors.cpuJoules().has_value());
        // Unreadable RAPL (root-only on most kernels) is the same as none.
        put(root.path(), QStringLiteral("sys/class/powercap/intel-rapl:0/max_energy_range_uj"), "20000000\n");
        QVERIFY(!compute::Sensors(root.path()).read(0).cpuWatts.has_value());
        // Without a reading, the governor leaves the duty cycle where it is.
        core::ThermalGovernor governor(75.0);
        QCOMPARE(governor.update(std::nullopt, 1.0), 100);
    }

    // A device whose temperature follows its load with a 20 s time constant (40 °C idle, 95 °C at
    // full duty), read through a fake hwmon file as the app reads a real one: the governor holds
    // it at the 75 °C target, and again after the room warms by 5 °C.
    void theGovernorHoldsAHeatingDeviceWithinTwoDegrees()
    {
        QTemporaryDir root;
        QVERIFY(root.isValid());
        put(root.path(), QStringLiteral("sys/class/hwmon/hwmon0/name"), "coretemp\n");
        const QString input = QStringLiteral("sys/class/hwmon/hwmon0/temp1_input");
        compute::Sensors sensors(root.path());
        core::ThermalGovernor governor(75.0);
        double temperature = 40.0, ambient = 40.0, hottest = 0.0, worstHeld = 0.0;
        int duty = 100, lowest = 100;
        for (int second = 0; second < 900; ++second) {
            if (second == 450)
                ambient += 5.0;
            const double settled = ambient + (95.0 - 40.0) * duty / 100.0;
            temperature += (settled - temperature) / 20.0;
            put(root.path(), input, milli(temperature));
            const auto readings = sensors.read(second * 1000);
            QVERIFY(readings.cpuTemperatureC.has_value());
            duty = governor.update(readings.cpuTemperatureC, 1.0);
            QVERIFY(duty >= 10 && duty <= 100);
            hottest = std::max(hottest, temperature);
            lowest = std::min(lowest, duty);
            if (second >= 120)
                worstHeld = std::max(worstHeld, std::abs(temperature - 75.0));
        }
        qInfo("hottest %.2f C on the way up, held within %.2f C of 75 C, duty down to %d%%", hottest, worstHeld, lowest);
        QVERIFY2(worstHeld <= 2.0, qPrintable(QString::number(worstHeld)));
        QVERIFY(hottest < 80.0); // a small overshoot, no oscillation
        QVERIFY(lowest > 10); // held by a duty cycle, not by stopping
        QVERIFY(duty < 100);
    }

    // Not an on/off switch: once the device cools well below the target the duty comes back to
    // the maximum, and a hot one is slowed but never below the minimum.
    void theGovernorGivesBackWhatItTook()
    {
        core::ThermalGovernor governor(70.0, 20, 90);
        QCOMPARE(governor.update(90.0, 1.0), 20);
        for (int i = 0; i < 600; ++i)
            governor.update(95.0, 1.0);
        QCOMPARE(governor.percent(), 20);
        // The integral did not wind up: one minute of cool air brings the full duty back.
        int seconds = 0;
        while (governor.update(60.0, 1.0) < 90 && seconds < 600)
            ++seconds;
        QVERIFY2(seconds < 60, qPrintable(QString::number(seconds)));
        QCOMPARE(governor.percent(), 90);
    }
};

QTEST_GUILESS_MAIN(DevicesTest)
#include "tst_devices.moc"
