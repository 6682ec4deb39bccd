#pragma once

#include <cstdint>
#include <optional>

namespace tessera::app {

// Seconds since the user's last input in this desktop session (GNOME's Mutter idle monitor, or the
// freedesktop screensaver interface that KDE and others offer); nullopt where the desktop says
// nothing (then "run only when idle" never runs).
std::optional<std::int64_t> userIdleSeconds();

// Whether the computer runs on a discharging battery (/sys/class/power_supply).
bool onBattery();

} // namespace tessera::app
