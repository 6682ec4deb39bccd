// Writes the weights of tst_portable's training run (portabletraining.h) to standard output as raw
// float32, tensor after tensor: their SHA-256 is the digest tst_portable records. Built without Qt,
// so that tests/compute/portable/arm64.sh can cross-compile it and run it under emulation.
#include "portabletraining.h"

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv)
{
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    for (const auto& tensor : tessera::compute::portable::testing::train(threads))
        std::fwrite(tensor.data(), sizeof(float), tensor.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
}
