#include "environment.h"

#include <QFileInfo>

namespace tessera::compute {

std::optional<QString> ComputeEnvironment::locate(const core::Digest& digest, const QString& file) const
{
    if (!digest.isNull() && blobPath) {
        if (auto path = blobPath(digest))
            return path;
    }
    if (!file.isEmpty() && QFileInfo::exists(file))
        return file;
    return std::nullopt;
}

QString ComputeEnvironment::defaultFashionMnistDirectory()
{
    return QStringLiteral("/usr/share/datasets/fashion-mnist");
}

QString ComputeEnvironment::fortunesDirectoryOrDefault() const
{
    return fortunesDirectory.isEmpty() ? QStringLiteral("/usr/share/games/fortunes") : fortunesDirectory;
}

QString ComputeEnvironment::fashionMnistDirectoryOrDefault() const
{
    return fashionMnistDirectory.isEmpty() ? defaultFashionMnistDirectory() : fashionMnistDirectory;
}

} // namespace tessera::compute
