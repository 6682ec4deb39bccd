// What nodes and checkers do with the ledger's log (docs/LEDGER.md): signed heads read strictly,
// a head checked against the one kept (consistency, split views, a shrunk log), a receipt's place
// in the log, the streamed root of a whole log, the replay of its entries into accounts (and
// what a tampered log looks like there), and a node's LogWatch, kept on disk across restarts.

#include <core/ledger/ledgerlog.h>
#include <core/ledger/loghead.h>
#include <core/ledger/logrecord.h>
#include <core/ledger/logreplay.h>
#include <core/ledger/logwatch.h>
#include <core/ledger/merkle.h>

#include <QDateTime>
#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTemporaryDir>
#include <QTest>
#include <QTimeZone>

#include <functional>

using namespace tessera::core;
using namespace tessera::core::ledger;

namespace {

const QString Network = QStringLiteral("0123456789abcdef0123456789abcdef");

QString transfer(const QString& debit, const QString& credit, std::int64_t amount, const QString& cause)
{
    return QString::fromUtf8(
        LedgerLog::leafBytes(LedgerLog::transferEntry(debit, credit, amount, cause, QStringLiteral("m"), 1000)));
}

QString verdict(const QString& check, const QString& accused, const QString& verifier, const QString& loser)
{
    return QString::fromUtf8(LedgerLog::leafBytes(QJsonObject { { QStringLiteral("kind"), QStringLiteral("verdict") },
        { QStringLiteral("check"), check }, { QStringLiteral("accused"), accused }, { QStringLiteral("verifier"), verifier },
        { QStringLiteral("loser"), loser } }));
}

// A log in memory: its entries and tree.
struct Log {
    QStringList entries;
    merkle::MemoryTree tree;

    void add(const QString& entry)
    {
        entries << entry;
        tree.append(merkle::leafHash(entry.toUtf8()));
    }
    LogHead head(const SigningKeys& keys, std::int64_t size = -1) const
    {
        const std::int64_t n = size < 0 ? tree.size() : size;
        return LogHead::sign(Network, n, *merkle::root(tree, n), 1000 + n, keys);
    }
    // A LOG-HEAD reply from `from`.
    QJsonObject reply(const SigningKeys& keys, std::int64_t from) const
    {
        return { { QStringLiteral("head"), head(keys).document },
            { QStringLiteral("consistency"), proofToJson(*merkle::consistencyProof(tree, from, tree.size())) } };
    }
};

Log logOf(int transfers, const QString& salt = {})
{
    Log log;
    log.add(transfer(QStringLiteral("mint"), QStringLiteral("balance:a"), 1'000'000, QStringLiteral("faucet")));
    for (int i = 1; i < transfers; ++i)
        log.add(transfer(QStringLiteral("balance:a"), QStringLiteral("balance:b"), 1, salt + QString::number(i)));
    return log;
}

} // namespace

class TestLogHeads : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aHeadIsReadOnlyWhenEveryFieldAndTheSignatureHold()
    {
        const auto keys = SigningKeys::generate();
        const auto head = logOf(5).head(keys);
        auto read = LogHead::read(head.document);
        QVERIFY2(read.ok(), read.ok() ? "" : qPrintable(read.error().toString()));
        QCOMPARE(read->size, 5);
        QCOMPARE(read->root, head.root);
        QCOMPARE(read->signer, QString::fromLatin1(keys.publicKey.toBase64()));
        for (const auto& [field, value] : std::initializer_list<std::pair<QString, QJsonValue>> {
                 { QStringLiteral("size"), 6 },
                 { QStringLiteral("root"), merkle::emptyRoot().toHex() },
                 { QStringLiteral("network"), QStringLiteral("ffffffffffffffffffffffffffffffff") },
                 { QStringLiteral("at"), 7 },
                 { QStringLiteral("kind"), QStringLiteral("tessera-receipt") },
                 { QStringLiteral("extra"), 1 },
                 { QStringLiteral("size"), -1 },
                 { QStringLiteral("size"), 1.5 },
                 { QStringLiteral("root"), head.root.toHex().toUpper() },
             }) {
            QJsonObject tampered = head.document;
            tampered.insert(field, value);
            QVERIFY2(!LogHead::read(tampered).ok(), qPrintable(field));
        }
    }

    void aNewerHeadExtendsTheKeptOneOnlyByAConsistencyProof()
    {
        const auto keys = SigningKeys::generate();
        const Log log = logOf(20);
        const auto kept = log.head(keys, 7);
        const auto next = log.head(keys);
        QVERIFY(checkExtends(kept, next, *merkle::consistencyProof(log.tree, 7, 20)).ok());
        QVERIFY(checkExtends(next, next, {}).ok());
        // A changed amount, a deleted slash: another history of 20 with the same first 6 entries.
        Log other = logOf(20, QStringLiteral("x"));
        const auto forked = other.head(keys);
        QVERIFY(!checkExtends(kept, forked, *merkle::consistencyProof(other.tree, 7, 20)).ok());
        QVERIFY(!checkExtends(kept, forked, *merkle::consistencyProof(log.tree, 7, 20)).ok());
        const auto split = checkExtends(next, forked, {});
        QVERIFY(!split.ok());
        QVERIFY2(split.error().message.contains(QStringLiteral("split view")), qPrintable(split.error().message));
        QVERIFY(next.conflicts(forked));
        const auto shrunk = checkExtends(next, kept, {});
        QVERIFY(!shrunk.ok() && shrunk.error().message.contains(QStringLiteral("shrank")));
    }

    void aReceiptsPlaceInTheLogHoldsOnlyForItsOwnTransfer()
    {
        const auto keys = SigningKeys::generate();
        Log log = logOf(9);
        const QString entry = QString::fromUtf8(LedgerLog::leafBytes(LedgerLog::transferEntry(QStringLiteral("escrow:j"),
            QStringLiteral("balance:n"), 1'500'000, QStringLiteral("pay:j/0/1"), QStringLiteral("shard"), 1'764'900'000'123)));
        log.add(entry);
        log.add(transfer(QStringLiteral("balance:a"), QStringLiteral("balance:b"), 1, QStringLiteral("after")));
        const QJsonObject receipt = signDocument(
            QJsonObject {
                { QStringLiteral("kind"), QStringLiteral("tessera-receipt") },
                { QStringLiteral("version"), 1 },
                { QStringLiteral("transfer"), 10 },
                { QStringLiteral("debit"), QStringLiteral("escrow:j") },
                { QStringLiteral("credit"), QStringLiteral("balance:n") },
                { QStringLiteral("amount"), QStringLiteral("1.5") },
                { QStringLiteral("cause"), QStringLiteral("pay:j/0/1") },
                { QStringLiteral("memo"), QStringLiteral("shard") },
                { QStringLiteral("at"),
                    QDateTime::fromMSecsSinceEpoch(1'764'900'000'123, QTimeZone::utc()).toString(Qt::ISODateWithMs) },
            },
            keys);
        const QJsonObject logged { { QStringLiteral("index"), 9 }, { QStringLiteral("entry"), entry },
            { QStringLiteral("proof"), proofToJson(*merkle::inclusionProof(log.tree, 9, 11)) },
            { QStringLiteral("head"), log.head(keys).document } };
        auto checked = checkReceiptLog(receipt, logged);
        QVERIFY2(checked.ok(), checked.ok() ? "" : qPrintable(checked.error().toString()));
        QCOMPARE(checked->size, 11);

        auto tampered = [&](const QString& field, const QJsonValue& value) {
            QJsonObject copy = logged;
            copy.insert(field, value);
            return checkReceiptLog(receipt, copy).ok();
        };
        QVERIFY(!tampered(QStringLiteral("index"), 8));
        QVERIFY(!tampered(QStringLiteral("entry"), QString(entry).replace(QStringLiteral("1500000"), QStringLiteral("1500001"))));
        QVERIFY(!tampered(QStringLiteral("proof"), proofToJson(*merkle::inclusionProof(log.tree, 8, 11))));
        QVERIFY(!tampered(QStringLiteral("head"), log.head(SigningKeys::generate()).document)); // another signer
        QVERIFY(!tampered(QStringLiteral("head"), log.head(keys, 9).document)); // a tree without it
        QJsonObject otherReceipt = receipt;
        otherReceipt.insert(QStringLiteral("amount"), QStringLiteral("2"));
        QVERIFY(!checkReceiptLog(otherReceipt, logged).ok());
    }

    // docs/LEDGER.md, "Portable records": a node's record holds every entry that names it, each
    // proved under one head; it checks offline against the network's key, and any entry changed,
    // added from another node's history or proved wrongly makes it invalid.
    void aRecordShowsWhatTheLogSaysOfANode()
    {
        const auto keys = SigningKeys::generate();
        Log log = logOf(3);
        log.add(transfer(QStringLiteral("mint"), QStringLiteral("stake:n"), 10'000'000, QStringLiteral("bond:n")));
        log.add(transfer(QStringLiteral("escrow:j"), QStringLiteral("balance:n"), 900'000, QStringLiteral("pay:j/0/0")));
        log.add(verdict(QStringLiteral("v0000000000000001"), QStringLiteral("n"), QStringLiteral("w"), QStringLiteral("none"))
                    .replace(QStringLiteral("\"loser\""), QStringLiteral("\"state\":\"verified\",\"loser\"")));
        log.add(verdict(QStringLiteral("v0000000000000002"), QStringLiteral("w"), QStringLiteral("n"), QStringLiteral("none")));
        log.add(transfer(
            QStringLiteral("stake:n"), QStringLiteral("burned"), 5'000'000, QStringLiteral("slash:v0000000000000003:n:burned")));
        log.add(
            verdict(QStringLiteral("v0000000000000003"), QStringLiteral("n"), QStringLiteral("w"), QStringLiteral("accused")));
        log.add(transfer(QStringLiteral("escrow:j"), QStringLiteral("balance:w"), 900'000, QStringLiteral("pay:j/0/1")));
        const auto head = log.head(keys);
        auto record = makeRecord(QStringLiteral("n"), head, log.entries);
        QVERIFY(record.ok());
        QCOMPARE(record->value(QStringLiteral("entries")).toArray().size(), 6);
        auto summary = verifyRecord(*record, QString::fromLatin1(keys.publicKey.toBase64()));
        QVERIFY2(summary.ok(), summary.ok() ? "" : qPrintable(summary.error().toString()));
        QCOMPARE(summary->verified, 1);
        QCOMPARE(summary->agreed, 1);
        QCOMPARE(summary->disputesLost, 1);
        QCOMPARE(summary->slashes, 1);
        QCOMPARE(summary->earnedMicro, 900'000);
        QCOMPARE(summary->slashedMicro, 5'000'000);

        QVERIFY(!verifyRecord(*record, QString::fromLatin1(SigningKeys::generate().publicKey.toBase64())).ok());
        auto tamper = [&](const std::function<void(QJsonArray&)>& change) {
            QJsonObject copy = *record;
            QJsonArray entries = copy.value(QStringLiteral("entries")).toArray();
            change(entries);
            copy.insert(QStringLiteral("entries"), entries);
            return verifyRecord(copy, {}).ok();
        };
        QVERIFY(!tamper([](QJsonArray& entries) { // a changed amount
            auto item = entries[1].toObject();
            item.insert(QStringLiteral("entry"),
                item.value(QStringLiteral("entry")).toString().replace(QStringLiteral("900000"), QStringLiteral("9000000")));
            entries[1] = item;
        }));
        QVERIFY(!tamper([&](QJsonArray& entries) { // another node's payment, proved where it is
            entries.append(QJsonObject { { QStringLiteral("index"), 9 }, { QStringLiteral("entry"), log.entries[9] },
                { QStringLiteral("proof"), proofToJson(*merkle::inclusionProof(log.tree, 9, 10)) } });
        }));
        QVERIFY(!tamper([](QJsonArray& entries) { entries.append(entries[0]); })); // counted twice
        QVERIFY(tamper([](QJsonArray& entries) { entries.removeAt(4); })); // what a record leaves out it does not show
        QVERIFY(!makeRecord(QStringLiteral("n"), head, log.entries.mid(1)).ok());
    }

    void theFrontiersRootIsTheTreesForEverySize()
    {
        Frontier frontier;
        merkle::MemoryTree tree;
        QCOMPARE(frontier.root(), merkle::emptyRoot());
        for (int i = 0; i < 300; ++i) {
            const auto leaf = merkle::leafHash(QByteArray::number(i));
            frontier.append(leaf);
            tree.append(leaf);
            QCOMPARE(frontier.root(), *merkle::root(tree, i + 1));
        }
    }

    void theReplayGivesEveryAccountAndNamesWhatNoLedgerWouldDo()
    {
        LogReplay honest;
        const Log log = logOf(10);
        for (const auto& entry : log.entries)
            honest.add(entry);
        honest.add(transfer(QStringLiteral("mint"), QStringLiteral("stake:n"), 10, QStringLiteral("bond")));
        honest.add(
            transfer(QStringLiteral("stake:n"), QStringLiteral("burned"), 5, QStringLiteral("slash:v0123456789abcdef:n:honest")));
        honest.add(
            verdict(QStringLiteral("v0123456789abcdef"), QStringLiteral("n"), QStringLiteral("w"), QStringLiteral("accused")));
        QCOMPARE(honest.balanceOf(QStringLiteral("mint")), -1'000'010);
        QCOMPARE(honest.balanceOf(QStringLiteral("stake:n")), 5);
        QCOMPARE(honest.balanceOf(QStringLiteral("balance:a")), 1'000'000 - 9);
        QCOMPARE(honest.balanceOf(QStringLiteral("balance:b")), 9);
        QCOMPARE(honest.transfers(), 12);
        QCOMPARE(honest.verdicts(), 1);
        QCOMPARE(honest.problems(), QStringList {});
        LogReplay overdrawn;
        overdrawn.add(transfer(QStringLiteral("balance:a"), QStringLiteral("balance:b"), 1, QStringLiteral("c")));
        QVERIFY(overdrawn.problems().join(u' ').contains(QStringLiteral("below zero")));

        LogReplay repeated;
        for (const auto& entry : log.entries)
            repeated.add(entry);
        repeated.add(log.entries.last());
        QVERIFY(repeated.problems().join(u' ').contains(QStringLiteral("repeats the cause")));

        // A slash with no ruling, or with a ruling against someone else (node ids may hold colons).
        LogReplay unruled;
        unruled.add(transfer(QStringLiteral("mint"), QStringLiteral("stake:n:x"), 10, QStringLiteral("bond")));
        unruled.add(transfer(
            QStringLiteral("stake:n:x"), QStringLiteral("burned"), 5, QStringLiteral("slash:v0123456789abcdef:n:x:burned")));
        unruled.add(
            verdict(QStringLiteral("v0123456789abcdef"), QStringLiteral("n"), QStringLiteral("n:x:y"), QStringLiteral("both")));
        unruled.add(
            verdict(QStringLiteral("v0123456789abcdef"), QStringLiteral("n:x"), QStringLiteral("w"), QStringLiteral("verifier")));
        QCOMPARE(unruled.problems().size(), 1);
        unruled.add(
            verdict(QStringLiteral("v0123456789abcdef"), QStringLiteral("n:x"), QStringLiteral("w"), QStringLiteral("both")));
        QCOMPARE(unruled.problems(), QStringList {});

        // A slash for a check that takes from someone else's stake, or in a form the broker never writes.
        LogReplay misdirected;
        misdirected.add(transfer(QStringLiteral("mint"), QStringLiteral("stake:innocent"), 10, QStringLiteral("bond")));
        misdirected.add(transfer(
            QStringLiteral("stake:innocent"), QStringLiteral("burned"), 5, QStringLiteral("slash:v0123456789abcdef:n:burned")));
        misdirected.add(transfer(QStringLiteral("stake:innocent"), QStringLiteral("burned"), 1,
            QStringLiteral("slash:v0123456789abcdef:innocent:owner")));
        misdirected.add(
            verdict(QStringLiteral("v0123456789abcdef"), QStringLiteral("n"), QStringLiteral("w"), QStringLiteral("accused")));
        QCOMPARE(misdirected.problems().size(), 2);
        QVERIFY(misdirected.problems().join(u' ').contains(QStringLiteral("takes from stake:innocent, not from stake:n")));

        // Many accounts: the replay's sums hold however large its table grows.
        LogReplay wide;
        wide.add(transfer(QStringLiteral("mint"), QStringLiteral("balance:payer"), 1'000'000, QStringLiteral("mint")));
        for (int i = 0; i < 5000; ++i)
            wide.add(transfer(
                QStringLiteral("balance:payer"), QStringLiteral("balance:n%1").arg(i), 7, QStringLiteral("pay:%1").arg(i)));
        QCOMPARE(wide.balanceOf(QStringLiteral("balance:payer")), 1'000'000 - 5000 * 7);
        QCOMPARE(wide.balanceOf(QStringLiteral("balance:n4999")), 7);
        QCOMPARE(wide.problems(), QStringList {});

        LogReplay garbled;
        garbled.add(QStringLiteral("{\"kind\": \"transfer\"}"));
        garbled.add(QStringLiteral("not json"));
        QCOMPARE(garbled.problems().size(), 2);
    }

    void theWatchKeepsTheNewestHeadAndFlagsWhatDoesNotExtendIt()
    {
        QTemporaryDir dir;
        const auto keys = SigningKeys::generate();
        Log log = logOf(4);
        {
            LogWatch watch(dir.path());
            QCOMPARE(watch.keptSize(Network), 0);
            QCOMPARE(*watch.observe(Network, QStringLiteral("a"), log.reply(keys, 0), 0), LogWatch::Seen::Newer);
            QCOMPARE(watch.keptSize(Network), 4);
            for (int i = 0; i < 3; ++i)
                log.add(transfer(QStringLiteral("balance:a"), QStringLiteral("balance:b"), 1, QStringLiteral("more%1").arg(i)));
            QCOMPARE(*watch.observe(Network, QStringLiteral("a"), log.reply(keys, 4), 4), LogWatch::Seen::Newer);
            QCOMPARE(watch.keptSize(Network), 7);
            // A reply to a request from a size the watch no longer knows is not judged.
            QCOMPARE(*watch.observe(Network, QStringLiteral("a"), log.reply(keys, 5), 5), LogWatch::Seen::Unchecked);
            QVERIFY(!watch.anyBroken());
        }
        // Kept across a restart: a broker that rewrote history since is caught at its first head.
        LogWatch watch(dir.path());
        QCOMPARE(watch.keptSize(Network), 7);
        Log rewritten = logOf(8, QStringLiteral("changed"));
        QCOMPARE(*watch.observe(Network, QStringLiteral("b"), rewritten.reply(keys, 7), 7), LogWatch::Seen::Broken);
        QVERIFY(watch.broken(Network));
        QVERIFY(watch.whyBroken().contains(QStringLiteral("does not extend")));
        const auto evidence = QDir(dir.filePath(QStringLiteral("log-evidence"))).entryList(QDir::Files);
        QCOMPARE(evidence.size(), 1);
        QFile file(dir.filePath(QStringLiteral("log-evidence/") + evidence.first()));
        QVERIFY(file.open(QIODevice::ReadOnly));
        const auto document = QJsonDocument::fromJson(file.readAll()).object();
        QVERIFY(LogHead::read(document.value(QStringLiteral("kept")).toObject()).ok());
        QVERIFY(LogHead::read(document.value(QStringLiteral("shown")).toObject().value(QStringLiteral("head")).toObject()).ok());
        // Broken stays broken, whatever the broker shows next.
        QCOMPARE(*watch.observe(Network, QStringLiteral("b"), log.reply(keys, 7), 7), LogWatch::Seen::Broken);
    }

    void twoHeadsOfOneSizeFromTwoBrokersAreASplitView()
    {
        const auto keys = SigningKeys::generate();
        const auto otherKeys = SigningKeys::generate();
        LogWatch watch({});
        const Log shown = logOf(6);
        const Log hidden = logOf(6, QStringLiteral("fork"));
        QCOMPARE(*watch.observe(Network, QStringLiteral("a"), shown.reply(keys, 0), 0), LogWatch::Seen::Newer);
        // A reply to a request made before the first head was kept (from 0) is not judged: it is
        // asked again from the kept size.
        QCOMPARE(*watch.observe(Network, QStringLiteral("b"), hidden.reply(otherKeys, 0), 0), LogWatch::Seen::Unchecked);
        QCOMPARE(*watch.observe(Network, QStringLiteral("b"), hidden.reply(otherKeys, 6), 6), LogWatch::Seen::Broken);
        QVERIFY(watch.whyBroken().contains(QStringLiteral("split view")));
        QVERIFY(watch.brokerBroken(QStringLiteral("b")));
    }

    // A broker keeps the network it named first and the key its heads are signed by: naming a new
    // network (a fresh start that hides a rewritten history), no longer publishing, or signing with
    // another key breaks it. What is kept survives a restart and a second process on the folder.
    void aBrokerKeepsItsNetworkAndItsKey()
    {
        QTemporaryDir dir;
        const auto keys = SigningKeys::generate();
        const Log log = logOf(3);
        {
            LogWatch watch(dir.path());
            QVERIFY(watch.announced(QStringLiteral("a"), Network, true).ok());
            QCOMPARE(*watch.observe(Network, QStringLiteral("a"), log.reply(keys, 0), 0), LogWatch::Seen::Newer);
            LogWatch other(dir.path()); // the app beside tessera-node: it keeps another network's head
            const QString second = QStringLiteral("ffffffffffffffffffffffffffffffff");
            QVERIFY(other.announced(QStringLiteral("z"), second, true).ok());
            QJsonObject reply = log.reply(keys, 0);
            const auto head = LogHead::sign(second, 3, *merkle::root(log.tree, 3), 5, keys);
            reply.insert(QStringLiteral("head"), head.document);
            QCOMPARE(*other.observe(second, QStringLiteral("z"), reply, 0), LogWatch::Seen::Newer);
            QVERIFY(watch.announced(QStringLiteral("b"), Network, true).ok());
            QCOMPARE(*watch.observe(Network, QStringLiteral("b"), log.reply(keys, 3), 3), LogWatch::Seen::Known); // saves again
            LogWatch reread(dir.path());
            QCOMPARE(reread.keptSize(Network), 3);
            QCOMPARE(reread.keptSize(second), 3);
        }
        {
            LogWatch watch(dir.path());
            QVERIFY(watch.announced(QStringLiteral("a"), QStringLiteral("00000000000000000000000000000000"), true).ok());
            QVERIFY(watch.broken(Network));
            QVERIFY(watch.brokerBroken(QStringLiteral("a")));
            QVERIFY(!watch.brokerBroken(QStringLiteral("b")));
        }
        {
            LogWatch watch(dir.path());
            QVERIFY(watch.announced(QStringLiteral("a"), Network, false).ok());
            QVERIFY(watch.whyBroken().contains(QStringLiteral("no longer publishes")));
        }
        {
            LogWatch watch(dir.path());
            QCOMPARE(
                *watch.observe(Network, QStringLiteral("a"), log.reply(SigningKeys::generate(), 3), 3), LogWatch::Seen::Broken);
            QVERIFY(watch.whyBroken().contains(QStringLiteral("not by its key")));
        }
    }

    void aLogShorterThanAKeptHeadBreaksIt()
    {
        const auto keys = SigningKeys::generate();
        LogWatch watch({});
        QCOMPARE(*watch.observe(Network, QStringLiteral("a"), logOf(6).reply(keys, 0), 0), LogWatch::Seen::Newer);
        QVERIFY(watch.shorter(Network, QStringLiteral("a"), QStringLiteral("from: the log has 3 entries, fewer than 6")).ok());
        QVERIFY(watch.broken(Network));
        QVERIFY(!watch.broken(QStringLiteral("ffffffffffffffffffffffffffffffff")));
    }
};

QTEST_GUILESS_MAIN(TestLogHeads)
#include "tst_logheads.moc"
