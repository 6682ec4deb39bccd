// A stand-in for NVIDIA's libcuda.so.1 that reports two GPUs, so that device detection is tested
// honestly on machines without one. TESSERA_FAKE_CUDA=crash|hang|fail makes cuInit misbehave the
// way broken drivers do.

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

const char* mode()
{
    const char* value = std::getenv("TESSERA_FAKE_CUDA");
    return value ? value : "ok";
}

void copy(char* out, int length, const char* text)
{
    std::strncpy(out, text, std::size_t(length));
    out[length - 1] = '\0';
}

} // namespace

extern "C" {

int cuInit(unsigned)
{
    if (std::strcmp(mode(), "crash") == 0) {
        volatile int* nowhere = nullptr;
        *nowhere = 1;
    }
    if (std::strcmp(mode(), "hang") == 0)
        std::this_thread::sleep_for(std::chrono::hours(1));
    if (std::strcmp(mode(), "fail") == 0)
        return 100; // CUDA_ERROR_NO_DEVICE
    return 0;
}

int cuDriverGetVersion(int* version)
{
    *version = 12020;
    return 0;
}

int cuDeviceGetCount(int* count)
{
    *count = 2;
    return 0;
}

int cuDeviceGet(int* device, int ordinal)
{
    if (ordinal < 0 || ordinal > 1)
        return 101; // CUDA_ERROR_INVALID_DEVICE
    *device = ordinal;
    return 0;
}

int cuDeviceGetName(char* name, int length, int device)
{
    copy(name, length, device == 0 ? "Fake GeForce RTX 3060" : "Fake H100 80GB HBM3");
    return 0;
}

int cuDeviceTotalMem_v2(std::size_t* bytes, int device)
{
    *bytes = device == 0 ? (std::size_t(12) << 30) : (std::size_t(80) << 30);
    return 0;
}

int cuDeviceGetAttribute(int* value, int attribute, int device)
{
    switch (attribute) {
    case 75:
        *value = device == 0 ? 8 : 9;
        return 0; // compute capability major
    case 76:
        *value = device == 0 ? 6 : 0;
        return 0; // minor
    case 16:
        *value = device == 0 ? 28 : 132;
        return 0; // multiprocessors
    default:
        return 1;
    }
}

int cuDeviceGetPCIBusId(char* bus, int length, int device)
{
    copy(bus, length, device == 0 ? "0000:01:00.0" : "0000:41:00.0");
    return 0;
}

} // extern "C"
