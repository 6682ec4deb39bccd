#include "runtimeprofile.h"

#include <ATen/Version.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>

#include <dlfcn.h>

namespace tessera::compute {

namespace {

// LibTorch on Debian calls the generic libblas.so.3, which the alternatives system points at
// one implementation; the one that matters is the library that really provides sgemm_.
QString loadedBlas()
{
    void* symbol = dlsym(RTLD_DEFAULT, "sgemm_");
    Dl_info info {};
    if (!symbol || dladdr(symbol, &info) == 0 || !info.dli_fname)
        return QStringLiteral("unknown");
    const QFileInfo file(QString::fromLocal8Bit(info.dli_fname));
    const QFileInfo resolved(file.canonicalFilePath().isEmpty() ? file.filePath() : file.canonicalFilePath());
    // /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 -> "openblas-openmp"
    const QString folder = resolved.dir().dirName();
    if (folder.startsWith(u"openblas") || folder.startsWith(u"blis") || folder.startsWith(u"atlas") || folder == u"blas")
        return folder == u"blas" ? QStringLiteral("reference") : folder;
    return resolved.fileName();
}

// The CPU kernels LibTorch dispatches to (its "CPU capability"), as its build report names them.
QString cpuCapabilityName()
{
    static const QString capability = [] {
        const QString config = QString::fromStdString(at::show_config());
        static const QRegularExpression line(QStringLiteral("CPU capability usage: (\\w+)"));
        const auto match = line.match(config);
        return match.hasMatch() ? match.captured(1).toLower() : QStringLiteral("default");
    }();
    return capability;
}

} // namespace

QString RuntimeProfile::toString() const
{
    return QStringLiteral("libtorch=%1;blas=%2;threads=%3;cpu=%4;device=%5")
        .arg(libtorchVersion, blas, QString::number(threads), cpuCapability, device);
}

RuntimeProfile currentRuntimeProfile(int threads, const QString& device)
{
    return RuntimeProfile {
        QString::fromLatin1(TORCH_VERSION),
        loadedBlas(),
        threads,
        cpuCapabilityName(),
        device,
    };
}

TorchCapabilities torchCapabilities()
{
    TorchCapabilities capabilities;
    capabilities.cuda = torch::cuda::is_available();
    capabilities.cudaDevices = capabilities.cuda ? int(torch::cuda::device_count()) : 0;
    return capabilities;
}

} // namespace tessera::compute
