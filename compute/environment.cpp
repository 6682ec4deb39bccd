#include "environment.h"

namespace tessera::compute {

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
