#include <compute/engine/runtimeprofile.h>

#include <QRegularExpression>
#include <QTest>

using tessera::compute::currentRuntimeProfile;

class RuntimeProfileTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void describesTheRuntime()
    {
        const auto profile = currentRuntimeProfile(2);
        QVERIFY2(
            profile.libtorchVersion.startsWith(QStringLiteral("1.")) || profile.libtorchVersion.startsWith(QStringLiteral("2.")),
            qPrintable(profile.libtorchVersion));
        QCOMPARE(profile.threads, 2);
        QVERIFY(!profile.cpuCapability.isEmpty());
        QVERIFY2(QRegularExpression(QStringLiteral("^libtorch=[^;]+;blas=[^;]+;threads=2;cpu=[a-z0-9]+;device=cpu$"))
                     .match(profile.toString())
                     .hasMatch(),
            qPrintable(profile.toString()));
    }

    void installsTheOpenMpOpenBlas()
    {
        // scripts/install-deps.sh points libblas.so.3 at OpenBLAS (OpenMP); the reference BLAS
        // trains ~9x slower and the pthread one changes results with its own thread pool.
        QCOMPARE(currentRuntimeProfile(1).blas, QStringLiteral("openblas-openmp"));
    }

    void threadCountIsPartOfTheProfile() { QVERIFY(currentRuntimeProfile(1).toString() != currentRuntimeProfile(2).toString()); }
};

QTEST_GUILESS_MAIN(RuntimeProfileTest)
#include "tst_runtimeprofile.moc"
