#pragma once

#include "error.h"

#include <QString>

#include <cstdint>

namespace tessera::core {

// What a TorchScript file (a zip archive written by torch.jit.save) holds, read from the zip's
// central directory alone: no entry is decompressed and no model code runs. The broker bounds and
// prices a TorchScript job from it before it loads the model anywhere.
struct ModelArchive {
    std::int64_t entries = 0;
    std::int64_t tensorBytes = 0; // of the tensor storages (ARCHIVE/data/* and ARCHIVE/constants/*)

    // Parameters, taken as 4-byte floats (an estimate for pricing and limits).
    std::int64_t parameterEstimate() const { return tensorBytes / 4; }

    // An error for anything that is not a readable zip (hostile files included).
    static Result<ModelArchive> read(const QString& path);
};

} // namespace tessera::core
