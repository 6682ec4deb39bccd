#pragma once

#include <QString>

namespace tessera::net {

// The ZeroMQ library Tessera runs on, as nodes and brokers report it.
struct TransportInfo {
    QString libzmqVersion; // "4.3.4"
    bool curve = false; // libzmq built with CURVE (libsodium): encrypted, authenticated links
};

TransportInfo transportInfo();

} // namespace tessera::net
