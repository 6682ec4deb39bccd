#pragma once

#include <QString>

#include <cstdint>

namespace tessera::ui {

// Short, human forms of quantities that tables and the tray tooltip show.
QString formatDuration(std::int64_t milliseconds); // "45 s", "3 min 20 s", "2 h 05 min", "3 d 4 h"
QString formatBytes(std::int64_t bytes); // "512 B", "1.5 KiB", "3.2 GiB"
QString formatRate(double perSecond, const QString& unit); // "1,234 samples/s", "12.3 samples/s"

} // namespace tessera::ui
