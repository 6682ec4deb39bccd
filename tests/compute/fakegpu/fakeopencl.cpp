// A stand-in for libOpenCL.so.1 with one platform and one device.

#include <cstdint>
#include <cstring>

extern "C" {

int clGetPlatformIDs(unsigned entries, void** platforms, unsigned* count)
{
    static int platform = 1;
    if (platforms && entries > 0)
        platforms[0] = &platform;
    if (count)
        *count = 1;
    return 0;
}

int clGetDeviceIDs(void*, std::uint64_t, unsigned entries, void** devices, unsigned* count)
{
    static int device = 1;
    if (devices && entries > 0)
        devices[0] = &device;
    if (count)
        *count = 1;
    return 0;
}

int clGetDeviceInfo(void*, unsigned what, std::size_t size, void* value, std::size_t* returned)
{
    auto text = [&](const char* s) {
        std::strncpy(static_cast<char*>(value), s, size);
        if (returned)
            *returned = std::strlen(s) + 1;
        return 0;
    };
    switch (what) {
    case 0x102B:
        return text("Fake Radeon RX 7600");
    case 0x102C:
        return text("Advanced Micro Devices, Inc.");
    case 0x102D:
        return text("3590.0 (HSA1.1,LC)");
    case 0x101F:
        *static_cast<std::uint64_t*>(value) = std::uint64_t(8) << 30;
        return 0;
    case 0x1002:
        *static_cast<unsigned*>(value) = 32;
        return 0;
    default:
        return -30; // CL_INVALID_VALUE
    }
}

} // extern "C"
