#include "update.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

namespace tessera::compute::detail {

namespace {

const std::string UpdatePrefix = "update/";
const std::string ScalePrefix = "scale/";
const std::string KeepPrefix = "keep/";
const std::string MetaName = "meta/compression";

core::Error unfit(const QString& why)
{
    return core::Error { QStringLiteral("update"), why };
}

// Runs f (which returns a Result), turning a LibTorch exception into an Error.
template<typename F> auto shielded(const QString& context, F&& f) -> decltype(f())
{
    try {
        return f();
    } catch (const std::exception& error) {
        return core::Error { QStringLiteral("update"), context + QStringLiteral(": ") + describeException(error) };
    }
}

// What is int8 in a compressed form: the model's float32 tensors. Integer counters, other float
// types and the carried optimizer state travel whole (keep/).
bool quantised(const std::string& name, const at::Tensor& w)
{
    return w.scalar_type() == at::kFloat && !isCarried(name);
}

// What a shard's contribution is the change of (final - base): the model's float tensors. For the
// rest (counters, the carried optimizer state) it is the shard's own value.
bool changes(const std::string& name, const at::Tensor& w)
{
    return w.is_floating_point() && !isCarried(name);
}

bool isCompressed(const NamedTensors& revealed)
{
    return std::any_of(revealed.begin(), revealed.end(), [](const auto& entry) { return entry.first == MetaName; });
}

// q and the scales of one float32 tensor's update d (delta(k): its k-th flattened element), block
// by block.
template<typename Delta>
core::Status quantiseBlocks(at::IntArrayRef shape, std::int64_t n, Delta delta, const std::string& name, NamedTensors& out)
{
    const std::int64_t blocks = (n + UpdateBlock - 1) / UpdateBlock;
    auto q = torch::empty(shape, torch::kInt8);
    auto scales = torch::empty({ blocks }, torch::kFloat32);
    auto* qs = q.data_ptr<std::int8_t>();
    auto* ss = scales.data_ptr<float>();
    std::vector<float> d(std::size_t(std::min<std::int64_t>(n, UpdateBlock)));
    for (std::int64_t block = 0; block < blocks; ++block) {
        const std::int64_t begin = block * UpdateBlock;
        const std::int64_t end = std::min(n, begin + UpdateBlock);
        float largest = 0.0f;
        for (std::int64_t k = begin; k < end; ++k) {
            const float value = delta(k);
            if (!std::isfinite(value))
                return unfit(QStringLiteral("the update of %1 is not finite").arg(QString::fromStdString(name)));
            d[std::size_t(k - begin)] = value;
            largest = std::max(largest, std::fabs(value));
        }
        const float scale = largest / 127.0f;
        ss[block] = scale;
        for (std::int64_t k = begin; k < end; ++k) {
            const float level = scale == 0.0f ? 0.0f : std::nearbyint(d[std::size_t(k - begin)] / scale);
            qs[k] = static_cast<std::int8_t>(std::clamp(level, -127.0f, 127.0f));
        }
    }
    out.emplace_back(UpdatePrefix + name, q);
    out.emplace_back(ScalePrefix + name, scales);
    return {};
}

core::Status quantise(const at::Tensor& start, const at::Tensor& final, const std::string& name, NamedTensors& out)
{
    const auto a = start.detach().contiguous().cpu();
    const auto b = final.detach().contiguous().cpu();
    const float* from = a.data_ptr<float>();
    const float* to = b.data_ptr<float>();
    return quantiseBlocks(
        b.sizes(), b.numel(), [&](std::int64_t k) { return to[k] - from[k]; }, name, out);
}

// q * scale, element by element, in float32 of q's shape.
at::Tensor dequantise(const at::Tensor& q, const at::Tensor& scales)
{
    const auto codes = q.contiguous();
    const auto factors = scales.contiguous();
    auto out = torch::empty(codes.sizes(), torch::kFloat32);
    const auto* qs = codes.data_ptr<std::int8_t>();
    const auto* ss = factors.data_ptr<float>();
    auto* values = out.data_ptr<float>();
    const std::int64_t n = codes.numel();
    for (std::int64_t k = 0; k < n; ++k)
        values[k] = float(qs[k]) * ss[k / UpdateBlock];
    return out;
}

} // namespace

core::Result<NamedTensors> revealedUpdate(core::Compression compression, const NamedTensors& start, const NamedTensors& final)
{
    if (compression == core::Compression::None)
        return final;
    if (start.size() != final.size())
        return unfit(QStringLiteral("the round's weights and the shard's have different tensors"));
    return shielded(QStringLiteral("compressing the update"), [&]() -> core::Result<NamedTensors> {
        NamedTensors out;
        for (std::size_t i = 0; i < final.size(); ++i) {
            const auto& [name, tensor] = final[i];
            if (start[i].first != name || start[i].second.sizes() != tensor.sizes()
                || start[i].second.scalar_type() != tensor.scalar_type())
                return unfit(QStringLiteral("'%1' does not fit the round's weights").arg(QString::fromStdString(name)));
            if (quantised(name, tensor)) {
                if (auto status = quantise(start[i].second, tensor, name, out); !status)
                    return status.error();
            } else {
                appendKept(name, tensor.detach().contiguous().cpu(), out);
            }
        }
        appendCompressionMeta(out);
        sortByName(out);
        return out;
    });
}

core::Result<at::Tensor> appendQuantisedChange(const std::string& name, const at::Tensor& change, NamedTensors& out)
{
    return shielded(QStringLiteral("compressing the round's change"), [&]() -> core::Result<at::Tensor> {
        const auto c = change.detach().contiguous().cpu();
        const float* values = c.data_ptr<float>();
        if (auto status = quantiseBlocks(
                c.sizes(), c.numel(), [&](std::int64_t k) { return values[k]; }, name, out);
            !status)
            return status.error();
        const auto& scales = out.back().second;
        const auto& q = out[out.size() - 2].second;
        return dequantise(q, scales);
    });
}

void appendCompressionMeta(NamedTensors& out)
{
    out.emplace_back(MetaName, torch::tensor({ UpdateFormatVersion, UpdateBlock }, torch::kInt64));
}

void appendKept(const std::string& name, const at::Tensor& tensor, NamedTensors& out)
{
    out.emplace_back(KeepPrefix + name, tensor);
}

bool isUpdateForm(const NamedTensors& revealed)
{
    return isCompressed(revealed);
}

bool deltaReadsBase(const NamedTensors& revealed, const NamedTensors& base)
{
    return !isCompressed(revealed) || std::any_of(base.begin(), base.end(), [](const auto& entry) {
        return !quantised(entry.first, entry.second) && changes(entry.first, entry.second);
    });
}

core::Status forEachDelta(
    const NamedTensors& revealed, const NamedTensors& base, const std::function<void(std::size_t, const at::Tensor&)>& take)
{
    return shielded(QStringLiteral("reading the update"), [&]() -> core::Status {
        torch::NoGradGuard noGrad;
        if (!isCompressed(revealed)) {
            if (revealed.size() != base.size())
                return unfit(QStringLiteral("the weights do not fit the model"));
            for (std::size_t i = 0; i < base.size(); ++i) {
                if (revealed[i].first != base[i].first || revealed[i].second.sizes() != base[i].second.sizes())
                    return unfit(QStringLiteral("the weights do not fit the model"));
            }
            for (std::size_t i = 0; i < base.size(); ++i) {
                const auto& [name, w] = base[i];
                take(i, changes(name, w) ? revealed[i].second - w : revealed[i].second);
            }
            return {};
        }
        std::map<std::string, at::Tensor> byName(revealed.begin(), revealed.end());
        const auto meta = byName[MetaName];
        if (!meta.defined() || meta.scalar_type() != at::kLong || meta.numel() != 2
            || meta[0].item<std::int64_t>() != UpdateFormatVersion || meta[1].item<std::int64_t>() != UpdateBlock)
            return unfit(QStringLiteral("meta/compression must be int64 [%1, %2]").arg(UpdateFormatVersion).arg(UpdateBlock));
        // Everything is checked before anything is decoded: a misfit is refused whole.
        std::size_t used = 1;
        for (const auto& [name, w] : base) {
            const QString what = QString::fromStdString(name);
            if (!quantised(name, w)) {
                const auto kept = byName[KeepPrefix + name];
                if (!kept.defined() || kept.sizes() != w.sizes() || kept.scalar_type() != w.scalar_type())
                    return unfit(QStringLiteral("the update has no keep/%1 of the model's shape and type").arg(what));
                ++used;
                continue;
            }
            const auto q = byName[UpdatePrefix + name];
            const auto scales = byName[ScalePrefix + name];
            const std::int64_t blocks = (w.numel() + UpdateBlock - 1) / UpdateBlock;
            if (!q.defined() || q.scalar_type() != at::kChar || q.sizes() != w.sizes())
                return unfit(QStringLiteral("the update has no update/%1 of int8 in the model's shape").arg(what));
            if (!scales.defined() || scales.scalar_type() != at::kFloat || scales.dim() != 1 || scales.numel() != blocks)
                return unfit(QStringLiteral("the update has no scale/%1 of float32 [%2]").arg(what).arg(blocks));
            if (!torch::isfinite(scales).all().item<bool>())
                return unfit(QStringLiteral("scale/%1 is not finite").arg(what));
            used += 2;
        }
        if (used != revealed.size())
            return unfit(QStringLiteral("the update holds tensors the model does not have"));
        // One tensor's change at a time: the caller adds it where it goes and lets go of it.
        for (std::size_t i = 0; i < base.size(); ++i) {
            const auto& [name, w] = base[i];
            if (!quantised(name, w)) {
                // A float tensor of another type (float64, float16) travels whole: its change is taken from it.
                const auto& kept = byName[KeepPrefix + name];
                take(i, changes(name, w) ? kept - w : kept);
            } else {
                take(i, dequantise(byName[UpdatePrefix + name], byName[ScalePrefix + name]));
            }
        }
        return {};
    });
}

core::Result<NamedTensors> shardDelta(const NamedTensors& revealed, const NamedTensors& base)
{
    NamedTensors out;
    out.reserve(base.size());
    if (auto status
        = forEachDelta(revealed, base, [&](std::size_t i, const at::Tensor& delta) { out.emplace_back(base[i].first, delta); });
        !status)
        return status.error();
    return out;
}

core::Result<NamedTensors> revealedWeights(const NamedTensors& revealed, const NamedTensors& base)
{
    if (!isCompressed(revealed))
        return revealed;
    std::map<std::string, at::Tensor> byName(revealed.begin(), revealed.end());
    NamedTensors out;
    out.reserve(base.size());
    auto status = forEachDelta(revealed, base, [&](std::size_t i, const at::Tensor& delta) {
        const auto& [name, w] = base[i];
        // Tensors that travel whole are the shard's own values, not base + (value - base).
        out.emplace_back(name, quantised(name, w) ? w + delta : byName[KeepPrefix + name]);
    });
    if (!status)
        return status.error();
    return out;
}

} // namespace tessera::compute::detail
