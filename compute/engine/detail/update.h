#pragma once

// Private to compute/: includes torch. What a shard reveals for aggregation (docs/DETERMINISM.md,
// "Revealed update").

#include "tensors.h"

#include <core/jobspec.h>

#include <functional>

namespace tessera::compute::detail {

// Elements per int8 block: each block of a tensor's flattened update has its own float32 scale.
constexpr std::int64_t UpdateBlock = 256;
constexpr std::int64_t UpdateFormatVersion = 1;

// The revealed form of a shard that started at `start` and ended at `final` (both sorted by name,
// the same names and shapes). None: `final` itself. Int8: for each float32 tensor N, the update
// d = final - start (float32) as "update/N" (int8, N's shape) and "scale/N" (float32, one per block
// of 256 flattened elements), with, per block, scale = max|d| / 127 and q = round_half_even(d /
// scale) (0 where scale is 0); other tensors (integer counters) whole as "keep/N"; and
// "meta/compression" = int64 [1, 256]. The carried optimizer state ("optimizer/...", isCarried)
// travels whole as keep/ too. Element by element in plain C++, so every CPU gets the same
// bits from the same inputs. An error when the shapes differ or the update is not finite.
core::Result<NamedTensors> revealedUpdate(core::Compression compression, const NamedTensors& start, const NamedTensors& final);

// The same form built a tensor at a time, for the broker's change of the round's weights (the
// int8 download, docs/DETERMINISM.md "Round weights"): appends update/N and scale/N of `change`
// (float32) and returns q * scale decoded, the change the form stands for; appendKept adds a
// tensor that travels whole, appendCompressionMeta the meta/compression entry (sort by name after).
core::Result<at::Tensor> appendQuantisedChange(const std::string& name, const at::Tensor& change, NamedTensors& out);
void appendKept(const std::string& name, const at::Tensor& tensor, NamedTensors& out);
void appendCompressionMeta(NamedTensors& out);

// Whether a revealed form is an int8 update (it has meta/compression), not whole weights.
bool isUpdateForm(const NamedTensors& revealed);
// Whether forEachDelta(revealed, base, ...) reads base's values, not only its names, shapes and
// types: for whole weights, and for float tensors of another type that travel whole.
bool deltaReadsBase(const NamedTensors& revealed, const NamedTensors& base);

// What a revealed form contributes, aligned with `base` (the round's weights): for each float
// tensor of the model the shard's change (final - base, or q * scale decoded), for each other
// tensor (integer counters, the carried optimizer state, which travel whole) the shard's value.
// An error names what does not fit.
core::Result<NamedTensors> shardDelta(const NamedTensors& revealed, const NamedTensors& base);
// The same, one tensor at a time: take(i, change of base[i]) for each tensor in base's order, after
// the whole form was checked (nothing is taken from a form that does not fit). Only one decoded
// tensor exists at a time, so aggregating an int8 update costs one tensor, not a model, of memory.
core::Status forEachDelta(
    const NamedTensors& revealed, const NamedTensors& base, const std::function<void(std::size_t, const at::Tensor&)>& take);

// The weights a revealed form stands for: base + shardDelta (equal to `final` for None).
core::Result<NamedTensors> revealedWeights(const NamedTensors& revealed, const NamedTensors& base);

} // namespace tessera::compute::detail
