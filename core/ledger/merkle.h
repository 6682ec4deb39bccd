#pragma once

#include "../error.h"
#include "../hash.h"

#include <QByteArrayView>
#include <QList>

#include <cstdint>
#include <vector>

namespace tessera::core::ledger::merkle {

// The Merkle tree of an append-only log, as RFC 6962 (section 2.1) and RFC 9162 (section 2.1)
// define it, with SHA-256 (docs/LEDGER.md, "Hashing"):
//   the empty tree's hash   MTH({})   = SHA-256()
//   a leaf's hash           MTH({d})  = SHA-256(0x00 || d)
//   a larger tree's hash    MTH(D[n]) = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n])),
//                                        k the largest power of two below n.
Digest emptyRoot();
Digest leafHash(QByteArrayView entry);
Digest nodeHash(const Digest& left, const Digest& right);

// Where a tree's hashes come from (memory, or the broker's database): its size in leaves, and the
// hash of any perfect subtree inside it, the 2^level leaves from index * 2^level on (level 0: a
// leaf's hash).
class Subtrees {
public:
    virtual ~Subtrees() = default;
    virtual std::int64_t size() const = 0;
    virtual Result<Digest> subtree(int level, std::int64_t index) const = 0;
};

// The root of the tree of the first `size` leaves (size <= subtrees.size()).
Result<Digest> root(const Subtrees& subtrees, std::int64_t size);
// RFC 6962's PATH(index, D[size]): the hashes that lead from leaf `index` to the root of the
// first `size` leaves, nearest first. At most ceil(log2(size)) of them.
Result<QList<Digest>> inclusionProof(const Subtrees& subtrees, std::int64_t index, std::int64_t size);
// RFC 6962's PROOF(from, D[to]): what shows that the tree of `to` leaves extends the tree of `from`
// leaves (0 < from < to; empty where from is 0 or from == to).
Result<QList<Digest>> consistencyProof(const Subtrees& subtrees, std::int64_t from, std::int64_t to);

// RFC 9162's checks (sections 2.1.3.2 and 2.1.4.2): whatever the proof, true only where it holds.
bool verifyInclusion(const Digest& leaf, std::int64_t index, std::int64_t size, const QList<Digest>& proof, const Digest& root);
bool verifyConsistency(
    std::int64_t from, std::int64_t to, const Digest& fromRoot, const Digest& toRoot, const QList<Digest>& proof);

// A tree in memory: every perfect subtree's hash, appended leaf by leaf (about 2 hashes a leaf).
class MemoryTree final : public Subtrees {
public:
    void append(const Digest& leaf);
    std::int64_t size() const override;
    Result<Digest> subtree(int level, std::int64_t index) const override;

private:
    std::vector<std::vector<Digest>> m_levels; // m_levels[level][index]
};

} // namespace tessera::core::ledger::merkle
