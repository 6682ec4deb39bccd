// A stand-in for libnvidia-ml.so.1 that knows the two devices of the fake libcuda.so.1.

#include <cstring>

extern "C" {

int nvmlInit_v2()
{
    return 0;
}

int nvmlShutdown()
{
    return 0;
}

int nvmlSystemGetDriverVersion(char* version, unsigned length)
{
    std::strncpy(version, "535.104.05", length);
    return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device)
{
    static int devices[2] = { 0, 1 };
    *device = std::strcmp(bus, "0000:01:00.0") == 0 ? &devices[0] : &devices[1];
    return 0;
}

int nvmlDeviceGetTemperature(void* device, int, unsigned* celsius)
{
    *celsius = *static_cast<int*>(device) == 0 ? 61 : 45;
    return 0;
}

int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts)
{
    *milliwatts = *static_cast<int*>(device) == 0 ? 170500 : 350000;
    return 0;
}

} // extern "C"
