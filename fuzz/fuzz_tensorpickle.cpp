// libFuzzer target: the reader of torch.save pickle programs (compute/pickle), which reads weights,
// checkpoint states and tensor files that strangers send. Whatever the bytes, it returns tensors or
// an error: no crash, no hang, no leak, no read outside the input.

#include <compute/pickle/tensorpickle.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const auto read
        = tessera::compute::pickle::readTensorMap(QByteArrayView(reinterpret_cast<const char*>(data), qsizetype(size)));
    if (read) {
        for (const auto& tensor : *read) {
            if (tensor.sizes.size() != tensor.strides.size() || tensor.offset < 0)
                __builtin_trap();
        }
    }
    return 0;
}
