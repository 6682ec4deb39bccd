#include "clock.h"

#include <QDateTime>

namespace tessera::core {

std::int64_t SystemClock::nowMs() const
{
    return QDateTime::currentMSecsSinceEpoch();
}

} // namespace tessera::core
