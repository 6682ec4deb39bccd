// tessera-device-probe: looks for GPUs through vendor libraries and prints them as JSON. It runs as
// a child process because a vendor library may crash or hang; the caller survives either.

#include <compute/devices/devices.h>

#include <QJsonDocument>

#include <cstdio>

int main()
{
    const QByteArray json = QJsonDocument(tessera::compute::probeGpusHere()).toJson(QJsonDocument::Compact);
    std::fwrite(json.constData(), 1, std::size_t(json.size()), stdout);
    std::fputc('\n', stdout);
    return 0;
}
