#pragma once

#include "tensorpickle.h"

#include <core/error.h>
#include <core/hash.h>

#include <QByteArray>
#include <QByteArrayView>
#include <QHash>
#include <QList>

namespace tessera::compute::pickle {

// A file written by torch.save (or LibTorch's pickle_save) holding a mapping of names to tensors,
// read without LibTorch: the zip archive's stored records (data.pkl and data/<storage>) and the
// tensors' views into them. What the supervisor of a compute worker needs to check the worker's
// weights (canonicalHash) without loading LibTorch. Never throws; bounded in memory by the input.
class TensorFile {
public:
    // An error names what is wrong: not a zip archive, a compressed or missing record, a storage
    // smaller than the views into it.
    static core::Result<TensorFile> read(QByteArray bytes);

    const QList<TensorRef>& tensors() const { return m_tensors; }
    // One tensor's elements in row-major order (what .contiguous() holds), as bytes.
    QByteArray contiguousBytes(const TensorRef& tensor) const;

private:
    QByteArray m_bytes;
    QList<TensorRef> m_tensors; // sorted by name (UTF-8 bytes)
    QHash<QString, QByteArrayView> m_storages; // storage key -> its record's bytes in m_bytes
};

// The canonical hash of a file of tensors (docs/DETERMINISM.md, "Canonical weight hash"): what
// compute::canonicalHashOf gives with LibTorch, bit for bit.
core::Result<core::Digest> canonicalHash(const QByteArray& file);

} // namespace tessera::compute::pickle
