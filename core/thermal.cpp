#include "thermal.h"

#include <algorithm>
#include <cmath>

namespace tessera::core {

ThermalGovernor::ThermalGovernor(double targetC, int minimumPercent, int maximumPercent, Gains gains)
    : m_target(targetC)
    , m_minimum(minimumPercent)
    , m_maximum(maximumPercent)
    , m_gains(gains)
    , m_integral(double(maximumPercent))
    , m_percent(maximumPercent)
{ }

int ThermalGovernor::update(std::optional<double> temperatureC, double seconds)
{
    if (!temperatureC)
        return m_percent;
    const double below = m_target - *temperatureC; // negative when too hot
    // The integral carries the duty that holds the target; the proportional part answers a change
    // at once. The integral stays within the range the output can take, so that a long cool spell
    // does not leave it owing minutes of heat.
    m_integral = std::clamp(m_integral + m_gains.integral * below * std::max(0.0, seconds), double(m_minimum), double(m_maximum));
    const double output = m_integral + m_gains.proportional * below;
    m_percent = int(std::lround(std::clamp(output, double(m_minimum), double(m_maximum))));
    return m_percent;
}

} // namespace tessera::core
