#pragma once

#include <core/error.h>

#include <QByteArrayView>
#include <QList>
#include <QString>

#include <cstdint>

namespace tessera::compute::pickle {

// The element types a tensor file may hold, named as PyTorch names its storages.
enum class DType { Float32, Float64, Float16, BFloat16, Int64, Int32, Int16, Int8, UInt8, Bool };

int elementSize(DType type);
QString dtypeName(DType type);
// The storage class torch.save names for it, in module torch ("FloatStorage"): what a file reads
// and what writeTensorFile writes.
QString storageName(DType type);

// One tensor of a torch.save file: a view (sizes, strides, offset, in elements) into a storage that
// the archive keeps as the record data/<storageKey> of storageNumel elements.
struct TensorRef {
    QString name;
    DType dtype = DType::Float32;
    QList<std::int64_t> sizes;
    QList<std::int64_t> strides;
    std::int64_t offset = 0;
    QString storageKey;
    std::int64_t storageNumel = 0;
};

// Reads the pickle program (data.pkl) of a file written by torch.save (or LibTorch's pickle_save)
// whose object is a mapping from names to tensors: a dict, an OrderedDict (what state_dict()
// returns, its _metadata ignored), typed or not, of tensors or nn.Parameters, in any pickle
// protocol from 2 to 5. It runs no code: the only callables it knows build dicts and tensors, and
// any other global, a sparse or quantised tensor or a name that is not a string is refused with an
// error that says what was found. Never throws; bounded in memory by the input.
core::Result<QList<TensorRef>> readTensorMap(QByteArrayView pickle);

} // namespace tessera::compute::pickle
