#include "merkle.h"

namespace tessera::core::ledger::merkle {

namespace {

// The largest power of two strictly below n (n >= 2).
std::int64_t split(std::int64_t n)
{
    std::int64_t k = 1;
    while (k * 2 < n)
        k *= 2;
    return k;
}

bool isPowerOfTwo(std::int64_t n)
{
    return n > 0 && (n & (n - 1)) == 0;
}

// MTH(D[begin:end]) (begin < end): a perfect subtree where the range is one, else split as the
// RFC splits it (the left part is always perfect).
Result<Digest> rangeRoot(const Subtrees& subtrees, std::int64_t begin, std::int64_t end)
{
    const std::int64_t n = end - begin;
    if (isPowerOfTwo(n) && begin % n == 0) {
        int level = 0;
        while ((std::int64_t(1) << level) < n)
            ++level;
        return subtrees.subtree(level, begin >> level);
    }
    const std::int64_t k = split(n);
    auto left = rangeRoot(subtrees, begin, begin + k);
    if (!left)
        return left.error();
    auto right = rangeRoot(subtrees, begin + k, end);
    if (!right)
        return right.error();
    return nodeHash(*left, *right);
}

// PATH(m, D[begin:end]), appended to `proof`.
Status path(const Subtrees& subtrees, std::int64_t m, std::int64_t begin, std::int64_t end, QList<Digest>& proof)
{
    const std::int64_t n = end - begin;
    if (n <= 1)
        return {};
    const std::int64_t k = split(n);
    const bool left = m < k;
    if (auto status = left ? path(subtrees, m, begin, begin + k, proof) : path(subtrees, m - k, begin + k, end, proof); !status)
        return status;
    auto sibling = left ? rangeRoot(subtrees, begin + k, end) : rangeRoot(subtrees, begin, begin + k);
    if (!sibling)
        return sibling.error();
    proof.append(*sibling);
    return {};
}

// SUBPROOF(m, D[begin:end], whole), appended to `proof`.
Status subproof(const Subtrees& subtrees, std::int64_t m, std::int64_t begin, std::int64_t end, bool whole, QList<Digest>& proof)
{
    const std::int64_t n = end - begin;
    if (m == n) {
        if (whole)
            return {};
        auto hash = rangeRoot(subtrees, begin, end);
        if (!hash)
            return hash.error();
        proof.append(*hash);
        return {};
    }
    const std::int64_t k = split(n);
    const bool left = m <= k;
    if (auto status
        = left ? subproof(subtrees, m, begin, begin + k, whole, proof) : subproof(subtrees, m - k, begin + k, end, false, proof);
        !status)
        return status;
    auto sibling = left ? rangeRoot(subtrees, begin + k, end) : rangeRoot(subtrees, begin, begin + k);
    if (!sibling)
        return sibling.error();
    proof.append(*sibling);
    return {};
}

// RFC 9162's "right-shift both fn and sn equally until either LSB(fn) is set or fn is 0".
void shiftWhileEven(std::int64_t& fn, std::int64_t& sn)
{
    while ((fn & 1) == 0 && fn != 0) {
        fn >>= 1;
        sn >>= 1;
    }
}

Digest hashOf(char prefix, QByteArrayView first, QByteArrayView second = {})
{
    Sha256 hash;
    hash.addData(QByteArrayView(&prefix, 1));
    hash.addData(first);
    hash.addData(second);
    return hash.result();
}

} // namespace

Digest emptyRoot()
{
    return Digest::ofBytes({});
}

Digest leafHash(QByteArrayView entry)
{
    return hashOf('\x00', entry);
}

Digest nodeHash(const Digest& left, const Digest& right)
{
    return hashOf('\x01', left.toRaw(), right.toRaw());
}

Result<Digest> root(const Subtrees& subtrees, std::int64_t size)
{
    if (size < 0 || size > subtrees.size())
        return Error { QStringLiteral("size"),
            QStringLiteral("%1 leaves asked for; the log holds %2").arg(size).arg(subtrees.size()) };
    if (size == 0)
        return emptyRoot();
    return rangeRoot(subtrees, 0, size);
}

Result<QList<Digest>> inclusionProof(const Subtrees& subtrees, std::int64_t index, std::int64_t size)
{
    if (size < 1 || size > subtrees.size() || index < 0 || index >= size)
        return Error { QStringLiteral("index"),
            QStringLiteral("leaf %1 of a tree of %2 leaves (the log holds %3)").arg(index).arg(size).arg(subtrees.size()) };
    QList<Digest> proof;
    if (auto status = path(subtrees, index, 0, size, proof); !status)
        return status.error();
    return proof;
}

Result<QList<Digest>> consistencyProof(const Subtrees& subtrees, std::int64_t from, std::int64_t to)
{
    if (from < 0 || to < from || to > subtrees.size())
        return Error { QStringLiteral("size"),
            QStringLiteral("from %1 to %2 leaves (the log holds %3)").arg(from).arg(to).arg(subtrees.size()) };
    QList<Digest> proof;
    if (from == 0 || from == to)
        return proof;
    if (auto status = subproof(subtrees, from, 0, to, true, proof); !status)
        return status.error();
    return proof;
}

bool verifyInclusion(const Digest& leaf, std::int64_t index, std::int64_t size, const QList<Digest>& proof, const Digest& root)
{
    if (index < 0 || index >= size)
        return false;
    std::int64_t fn = index;
    std::int64_t sn = size - 1;
    Digest r = leaf;
    for (const auto& p : proof) {
        if (sn == 0)
            return false;
        if ((fn & 1) != 0 || fn == sn) {
            r = nodeHash(p, r);
            shiftWhileEven(fn, sn);
        } else {
            r = nodeHash(r, p);
        }
        fn >>= 1;
        sn >>= 1;
    }
    return sn == 0 && r == root;
}

bool verifyConsistency(
    std::int64_t from, std::int64_t to, const Digest& fromRoot, const Digest& toRoot, const QList<Digest>& proof)
{
    if (from < 0 || to < from)
        return false;
    if (from == to)
        return proof.isEmpty() && fromRoot == toRoot;
    if (from == 0)
        return proof.isEmpty() && fromRoot == emptyRoot(); // every tree extends the empty one
    if (proof.isEmpty())
        return false;
    QList<Digest> path = proof;
    if (isPowerOfTwo(from))
        path.prepend(fromRoot);
    std::int64_t fn = from - 1;
    std::int64_t sn = to - 1;
    while ((fn & 1) != 0) {
        fn >>= 1;
        sn >>= 1;
    }
    Digest fr = path.first();
    Digest sr = path.first();
    for (qsizetype i = 1; i < path.size(); ++i) {
        const Digest& c = path[i];
        if (sn == 0)
            return false;
        if ((fn & 1) != 0 || fn == sn) {
            fr = nodeHash(c, fr);
            sr = nodeHash(c, sr);
            shiftWhileEven(fn, sn);
        } else {
            sr = nodeHash(sr, c);
        }
        fn >>= 1;
        sn >>= 1;
    }
    return fr == fromRoot && sr == toRoot && sn == 0;
}

void MemoryTree::append(const Digest& leaf)
{
    if (m_levels.empty())
        m_levels.emplace_back();
    m_levels[0].push_back(leaf);
    // Each level's last two, where they make a new perfect subtree, make one above.
    for (std::size_t level = 0; level < m_levels.size(); ++level) {
        const auto& below = m_levels[level];
        if (below.size() % 2 != 0)
            break;
        const Digest above = nodeHash(below[below.size() - 2], below.back());
        if (level + 1 == m_levels.size())
            m_levels.emplace_back(); // `below` may move
        m_levels[level + 1].push_back(above);
    }
}

std::int64_t MemoryTree::size() const
{
    return m_levels.empty() ? 0 : std::int64_t(m_levels[0].size());
}

Result<Digest> MemoryTree::subtree(int level, std::int64_t index) const
{
    if (level < 0 || std::size_t(level) >= m_levels.size() || index < 0 || index >= std::int64_t(m_levels[level].size()))
        return Error { QStringLiteral("subtree"), QStringLiteral("no perfect subtree %1 at level %2").arg(index).arg(level) };
    return m_levels[level][std::size_t(index)];
}

} // namespace tessera::core::ledger::merkle
