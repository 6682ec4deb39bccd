// libFuzzer target: the LibTorch-free reader of whole torch.save files (compute/pickle/tensorfile),
// with which a node's supervisor hashes the weights its compute worker (a job owner's code) returns.
// Whatever the bytes, it returns a hash or an error: no crash, no hang, no read outside the input.

#include <compute/pickle/tensorfile.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray bytes(reinterpret_cast<const char*>(data), qsizetype(size));
    const auto file = tessera::compute::pickle::TensorFile::read(bytes);
    if (file) {
        for (const auto& tensor : file->tensors())
            (void)file->contiguousBytes(tensor);
    }
    (void)tessera::compute::pickle::canonicalHash(bytes);
    return 0;
}
