#include "tensors.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <bit>

namespace tessera::compute::detail {

static_assert(std::endian::native == std::endian::little, "canonical weight bytes assume a little-endian host");

void sortByName(NamedTensors& tensors)
{
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

namespace {

std::uint8_t dtypeCode(at::ScalarType type)
{
    switch (type) {
    case at::kFloat:
        return 1;
    case at::kDouble:
        return 2;
    case at::kLong:
        return 3;
    case at::kInt:
        return 4;
    case at::kHalf:
        return 5;
    case at::kBFloat16:
        return 6;
    case at::kBool:
        return 7;
    case at::kByte:
        return 8;
    default:
        return 0;
    }
}

void addInt64(core::Sha256& hasher, std::int64_t value)
{
    hasher.addData(QByteArrayView(reinterpret_cast<const char*>(&value), sizeof value));
}

} // namespace

core::Digest canonicalHash(const NamedTensors& tensors)
{
    core::Sha256 hasher;
    for (const auto& [name, tensor] : tensors) {
        const auto data = tensor.detach().contiguous().cpu();
        hasher.addData(QByteArrayView(name.data(), static_cast<qsizetype>(name.size() + 1))); // with the NUL
        const std::uint8_t code = dtypeCode(data.scalar_type());
        hasher.addData(QByteArrayView(reinterpret_cast<const char*>(&code), 1));
        addInt64(hasher, data.dim());
        for (auto size : data.sizes())
            addInt64(hasher, size);
        hasher.addData(QByteArrayView(static_cast<const char*>(data.data_ptr()), static_cast<qsizetype>(data.nbytes())));
    }
    return hasher.result();
}

QByteArray pickleTensors(const NamedTensors& tensors)
{
    c10::Dict<std::string, at::Tensor> dict;
    for (const auto& [name, tensor] : tensors)
        dict.insert(name, tensor.detach().contiguous().cpu());
    const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
    return QByteArray(bytes.data(), static_cast<qsizetype>(bytes.size()));
}

core::Result<NamedTensors> unpickleTensors(const QByteArray& bytes, const QString& what)
{
    return guarded(what, [&]() -> NamedTensors {
        const std::vector<char> data(bytes.begin(), bytes.end());
        const c10::IValue value = torch::pickle_load(data);
        if (!value.isGenericDict())
            throw std::runtime_error("expected a dict of tensors (torch.save({name: tensor, ...}))");
        NamedTensors tensors;
        for (const auto& entry : value.toGenericDict()) {
            if (!entry.key().isString() || !entry.value().isTensor())
                throw std::runtime_error("expected a dict from names to tensors");
            tensors.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
        }
        sortByName(tensors);
        return tensors;
    });
}

NamedTensors cloneTensors(const NamedTensors& tensors)
{
    NamedTensors copies;
    copies.reserve(tensors.size());
    for (const auto& [name, tensor] : tensors)
        copies.emplace_back(name, tensor.detach().clone().contiguous());
    return copies;
}

QString describeException(const std::exception& error)
{
    if (const auto* torchError = dynamic_cast<const c10::Error*>(&error))
        return QString::fromStdString(torchError->what_without_backtrace()).trimmed();
    return QString::fromUtf8(error.what()).trimmed();
}

} // namespace tessera::compute::detail
