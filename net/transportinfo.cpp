#include "transportinfo.h"

#include <zmq.hpp>

namespace tessera::net {

TransportInfo transportInfo()
{
    const auto [major, minor, patch] = zmq::version();
    return TransportInfo {
        QStringLiteral("%1.%2.%3").arg(major).arg(minor).arg(patch),
        zmq_has("curve") != 0,
    };
}

} // namespace tessera::net
