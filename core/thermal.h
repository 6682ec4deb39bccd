#pragma once

#include <optional>

namespace tessera::core {

// Holds the hottest device under a target temperature by the share of time the compute thread
// works (its duty cycle), as a thermostat with memory would, not an on/off switch: a proportional
// and integral controller on the gap below the target (Compute/MaxTemperatureC; docs/SETTINGS.md).
// Policy only: the caller reads the sensors and sets the duty cycle (compute::ComputeThread::
// setCpuPercent). Pure arithmetic, so a test drives it with a simulated device and clock.
struct ThermalGains {
    double proportional = 8.0; // percent of duty per degree above the target
    double integral = 0.8; // percent of duty per degree-second, accumulated
};

class ThermalGovernor {
public:
    using Gains = ThermalGains;
    ThermalGovernor(double targetC, int minimumPercent = 10, int maximumPercent = 100, Gains gains = {});

    // The duty cycle (percent) after a reading of the hottest device `temperatureC`, `seconds`
    // after the last one; no reading (a machine without sensors): the maximum, unchanged.
    int update(std::optional<double> temperatureC, double seconds);
    int percent() const { return m_percent; }
    double target() const { return m_target; }

private:
    double m_target;
    int m_minimum;
    int m_maximum;
    Gains m_gains;
    double m_integral = 0.0; // in percent, kept within what the output can use (no wind-up)
    int m_percent;
};

} // namespace tessera::core
