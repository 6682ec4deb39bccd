// The ledger log's Merkle tree (docs/LEDGER.md, "Hashing"; RFC 6962 and RFC 9162): roots and
// proofs against the RFC's definitions, written out here the slow way, and against the test
// vectors of Certificate Transparency's reference code (the eight leaves below); every proof of
// every small tree verifies, and every tampered one fails.

#include <core/ledger/merkle.h>

#include <QTest>

#include <cmath>

using namespace tessera::core;
namespace merkle = tessera::core::ledger::merkle;

namespace {

const QList<QByteArray> VectorLeaves = { "", QByteArray::fromHex("00"), QByteArray::fromHex("10"), QByteArray::fromHex("2021"),
    QByteArray::fromHex("3031"), QByteArray::fromHex("40414243"), QByteArray::fromHex("5051525354555657"),
    QByteArray::fromHex("606162636465666768696a6b6c6d6e6f") };

Digest hex(const char* text)
{
    return *Digest::fromHex(QString::fromLatin1(text));
}

QList<Digest> hexes(std::initializer_list<const char*> texts)
{
    QList<Digest> digests;
    for (const auto* text : texts)
        digests.append(hex(text));
    return digests;
}

// MTH as RFC 6962 writes it, over leaf hashes.
Digest definitionRoot(const QList<Digest>& leaves)
{
    if (leaves.isEmpty())
        return merkle::emptyRoot();
    if (leaves.size() == 1)
        return leaves.first();
    qsizetype k = 1;
    while (k * 2 < leaves.size())
        k *= 2;
    return merkle::nodeHash(definitionRoot(leaves.mid(0, k)), definitionRoot(leaves.mid(k)));
}

merkle::MemoryTree treeOf(int size, QList<Digest>* leaves = nullptr, const QByteArray& salt = {})
{
    merkle::MemoryTree tree;
    for (int i = 0; i < size; ++i) {
        const auto leaf = merkle::leafHash(salt + QByteArray::number(i));
        tree.append(leaf);
        if (leaves)
            leaves->append(leaf);
    }
    return tree;
}

} // namespace

class MerkleTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void rootsAreCertificateTransparencysTestVectors()
    {
        const auto roots = hexes({ "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328" });
        merkle::MemoryTree tree;
        QCOMPARE(*merkle::root(tree, 0), hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
        for (const auto& leaf : VectorLeaves)
            tree.append(merkle::leafHash(leaf));
        for (int size = 1; size <= 8; ++size)
            QCOMPARE(*merkle::root(tree, size), roots[size - 1]);
        // Proofs from the same reference.
        QCOMPARE(*merkle::inclusionProof(tree, 0, 8),
            hexes({ "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4" }));
        QCOMPARE(*merkle::inclusionProof(tree, 5, 8),
            hexes({ "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7" }));
        QCOMPARE(*merkle::consistencyProof(tree, 6, 8),
            hexes({ "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7" }));
    }

    void rootsAreTheDefinitions()
    {
        QList<Digest> leaves;
        const auto tree = treeOf(70, &leaves);
        for (int size = 0; size <= 70; ++size)
            QCOMPARE(*merkle::root(tree, size), definitionRoot(leaves.mid(0, size)));
        QVERIFY(!merkle::root(tree, 71).ok());
    }

    void everyInclusionProofVerifiesAndNoTamperedOneDoes()
    {
        QList<Digest> leaves;
        const auto tree = treeOf(40, &leaves);
        for (int size = 1; size <= 40; ++size) {
            const auto root = *merkle::root(tree, size);
            for (int index = 0; index < size; ++index) {
                const auto proof = *merkle::inclusionProof(tree, index, size);
                QVERIFY(proof.size() <= int(std::ceil(std::log2(size))));
                QVERIFY(merkle::verifyInclusion(leaves[index], index, size, proof, root));
                QVERIFY(!merkle::verifyInclusion(merkle::leafHash("other"), index, size, proof, root));
                QVERIFY(!merkle::verifyInclusion(leaves[index], index, size, proof, merkle::leafHash("root")));
                if (size > 1) {
                    QVERIFY(!merkle::verifyInclusion(leaves[index], (index + 1) % size, size, proof, root));
                    QVERIFY(!merkle::verifyInclusion(leaves[index], index, size, proof.mid(1), root));
                    auto bent = proof;
                    bent[0] = merkle::leafHash("bent");
                    QVERIFY(!merkle::verifyInclusion(leaves[index], index, size, bent, root));
                }
                QVERIFY(!merkle::verifyInclusion(leaves[index], index, size, proof + QList<Digest> { root }, root));
            }
            QVERIFY(!merkle::inclusionProof(tree, size, size).ok());
        }
    }

    void everyConsistencyProofVerifiesAndAForkDoesNot()
    {
        const auto tree = treeOf(40);
        const auto fork = treeOf(40, nullptr, "fork "); // other entries from the first on
        for (int to = 1; to <= 40; ++to) {
            const auto toRoot = *merkle::root(tree, to);
            for (int from = 1; from <= to; ++from) {
                const auto fromRoot = *merkle::root(tree, from);
                const auto proof = *merkle::consistencyProof(tree, from, to);
                QVERIFY(merkle::verifyConsistency(from, to, fromRoot, toRoot, proof));
                // A head the broker showed before and a later one from another history.
                QVERIFY(!merkle::verifyConsistency(from, to, *merkle::root(fork, from), toRoot, proof));
                if (from < to) {
                    QVERIFY(!merkle::verifyConsistency(from, to, fromRoot, *merkle::root(fork, to), proof));
                    QVERIFY(!merkle::verifyConsistency(from, to, fromRoot, toRoot, proof.mid(1)));
                    // (A wrong size with the right roots may pass where both sizes give the proof's
                    // shape: a signed head binds size and root together, and checkers take both from it.)
                    auto bent = proof;
                    bent.last() = merkle::leafHash("bent");
                    QVERIFY(!merkle::verifyConsistency(from, to, fromRoot, toRoot, bent));
                }
            }
        }
        QVERIFY(merkle::verifyConsistency(0, 5, merkle::emptyRoot(), *merkle::root(tree, 5), {}));
        QVERIFY(!merkle::verifyConsistency(5, 4, *merkle::root(tree, 5), *merkle::root(tree, 4), {}));
        QVERIFY(!merkle::consistencyProof(tree, 5, 41).ok());
    }
};

QTEST_GUILESS_MAIN(MerkleTest)
#include "tst_merkle.moc"
