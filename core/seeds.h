#pragma once

#include <QList>

#include <cstdint>
#include <initializer_list>

namespace tessera::core {

// Every random choice of a job (data order, initialisation, dropout) comes from a seed derived from
// (job seed, round, shard, step), so that any machine can re-execute any piece of any shard.
// The generator is SplitMix64: tiny, fast, and fully specified, so a third-party node in another
// language reproduces the same data order from docs/DETERMINISM.md alone.
class SplitMix64 {
public:
    explicit SplitMix64(std::uint64_t seed)
        : m_state(seed)
    { }

    std::uint64_t next();
    // Uniform in [0, bound) without modulo bias (rejection sampling); bound > 0.
    std::uint64_t below(std::uint64_t bound);

private:
    std::uint64_t m_state;
};

// Combines a seed with a path of indices into a new well-mixed 64-bit seed:
// s = seed; for each part p: s = SplitMix64(s ^ (p * golden)).next().
std::uint64_t deriveSeed(std::uint64_t seed, std::initializer_list<std::uint64_t> path);

// A uniformly random permutation of 0..count-1 (Fisher-Yates from the last index down).
QList<std::int64_t> seededPermutation(std::int64_t count, std::uint64_t seed);

// What each seed of a job is for; part of the derivation path so that the streams never collide.
enum class SeedPurpose : std::uint64_t {
    RoundPermutation = 1,
    ShardPass = 2,
    Step = 3,
    Initialisation = 4,
    ChunkOrder = 5, // a chunked dataset's order of chunks in a round
    SegmentPass = 6, // and a shard's pass over one segment of its slice
};

} // namespace tessera::core
