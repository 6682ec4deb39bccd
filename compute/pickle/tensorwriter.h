#pragma once

#include "tensorpickle.h"

#include <QByteArray>
#include <QList>
#include <QString>

#include <cstdint>

namespace tessera::compute::pickle {

// One tensor to write: its elements in row-major order, little-endian, as bytes.
struct TensorData {
    QString name;
    DType dtype = DType::Float32;
    QList<std::int64_t> sizes;
    QByteArray bytes; // product(sizes) x elementSize(dtype)
};

// A file that torch.load reads as {name: tensor, ...} (a dict, in the order given), written without
// LibTorch in the format torch.save writes: an uncompressed zip archive of archive/data.pkl (a pickle
// of protocol 2), archive/data/<i> (one storage per tensor), archive/byteorder and archive/version.
// What `tessera-job chunk` writes a dataset's chunks with. Each tensor at most 2 GiB.
QByteArray writeTensorFile(const QList<TensorData>& tensors);

} // namespace tessera::compute::pickle
