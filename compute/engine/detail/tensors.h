#pragma once

// Private to compute/: includes torch.

#include <core/error.h>
#include <core/hash.h>

#include <ATen/core/Tensor.h>

#include <QByteArray>

#include <functional>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace tessera::compute::detail {

// Named tensors sorted by name: the canonical order of weights everywhere in Tessera.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

void sortByName(NamedTensors& tensors);

// SHA-256 of the canonical bytes (docs/DETERMINISM.md, "Canonical weights"): for each tensor in name
// order, its UTF-8 name, a NUL, a dtype byte, the dimension count and sizes as little-endian int64,
// then its elements as little-endian bytes, contiguous.
core::Digest canonicalHash(const NamedTensors& tensors);
// One tensor's part of those bytes: canonicalHash is these records of each tensor in name order.
void addCanonicalRecord(core::Sha256& hasher, const std::string& name, const at::Tensor& tensor);

// One tensor's record of the canonical bytes, hashed alone (a leaf); from a tensor or from raw memory.
core::Digest recordHash(const std::string& name, const at::Tensor& tensor);
core::Digest recordHash(
    const std::string& name, at::ScalarType type, c10::IntArrayRef sizes, const void* bytes, std::int64_t count);
// SHA-256 of the leaves' 32 bytes each, in order; and of a state's leaves in name order: how a
// portable job hashes its checkpoints, so that a trace's per-tensor hashes prove which state they
// belong to (docs/DETERMINISM.md, "Checkpoint chain").
core::Digest rootOf(const QList<core::Digest>& leaves);
core::Digest stateRoot(const NamedTensors& tensors);

// A dict of tensors in PyTorch's pickle format (torch.load reads it; torch.save writes what reads back).
QByteArray pickleTensors(const NamedTensors& tensors);
// The same bytes written to a file as they are made, never held whole in memory (a training state
// of 3 x the model). An error names the file.
core::Status pickleTensorsToFile(const NamedTensors& tensors, const QString& path);
core::Result<NamedTensors> unpickleTensors(const QByteArray& bytes, const QString& what);
// The same from a file, read record by record: the file's bytes are never held whole beside the
// tensors (a broker inspecting a 40 M-parameter result holds 1 x the model, not 2 x).
core::Result<NamedTensors> unpickleTensorsFromFile(const QString& path, const QString& what);
// The names, shapes and types of a file's tensors, without their values: tensors on LibTorch's
// meta device, read from the archive's data.pkl alone.
// Each of a file's tensors in name order, read and handed to `visit` one at a time: the file is
// never held whole, and a tensor `visit` does not keep is let go before the next is read (a stage
// task keeps its share of a round's weights). An error from `visit` stops the reading. Each tensor
// must be the whole of a storage of its own, contiguous (as torch.save writes a state dict):
// otherwise the file is refused before a record is read.
core::Status visitTensorsInFile(
    const QString& path, const QString& what, const std::function<core::Status(const std::string&, at::Tensor)>& visit);
core::Result<NamedTensors> tensorShapesInFile(const QString& path, const QString& what);

// The names of a training state's parts: "model/<name>", "optimizer/<name>"; prefix added, or
// the entries with it, prefix removed.
NamedTensors withPrefix(const std::string& prefix, const NamedTensors& tensors);
NamedTensors stripPrefix(const std::string& prefix, const NamedTensors& tensors);

// A round's weights may carry the shards' averaged optimizer state beside the model's tensors, under
// "optimizer/" (aggregation.optimizerState averaged; docs/DETERMINISM.md, "Carried optimizer
// state"). Such entries travel whole, are averaged rather than stepped, and are no part of the model.
inline const std::string CarriedPrefix = "optimizer/";
bool isCarried(const std::string& name);
// The model's own tensors: without the carried optimizer state.
NamedTensors modelPart(NamedTensors tensors);

// Deep copies (detached, contiguous), so that later training does not change them.
NamedTensors cloneTensors(const NamedTensors& tensors);

// Runs f, turning a LibTorch exception into an Error with context.
template<typename F> auto guarded(const QString& context, F&& f) -> core::Result<decltype(f())>;

QString describeException(const std::exception& error);

} // namespace tessera::compute::detail

#include <c10/util/Exception.h>

namespace tessera::compute::detail {

template<typename F> auto guarded(const QString& context, F&& f) -> core::Result<decltype(f())>
{
    // Memory a node does not have is its resources', not a wrong answer: said as "out of memory",
    // which the broker never holds against the node (docs/VERIFICATION.md).
    try {
        return f();
    } catch (const std::bad_alloc&) {
        return core::Error { {}, QStringLiteral("out of memory: ") + context };
    } catch (const std::exception& error) {
        const QString why = describeException(error);
        if (why.contains(QLatin1String("can't allocate memory")))
            return core::Error { {}, QStringLiteral("out of memory: ") + context + QStringLiteral(": ") + why };
        return core::Error { {}, context + QStringLiteral(": ") + why };
    }
}

} // namespace tessera::compute::detail
