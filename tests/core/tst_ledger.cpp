#include <core/broker/logpublisher.h>
#include <core/clock.h>
#include <core/ledger/ledger.h>
#include <core/ledger/ledgerlog.h>
#include <core/ledger/loghead.h>
#include <core/ledger/merkle.h>
#include <support/teststore.h>

#include <QJsonArray>
#include <QTemporaryDir>
#include <QTest>

#include <limits>

using namespace tessera::core;
using namespace tessera::core::ledger;
using storage::Database;

namespace {

std::unique_ptr<Database> openLedgerDatabase(const QString& path)
{
    auto database = std::move(Database::open(tessera::tests::TestStore::location(path))).value();
    const auto migrations = storage::loadMigrations(QStringLiteral(":/migrations/broker"), database->engine());
    if (!migrations || !database->migrate(*migrations))
        qFatal("cannot migrate");
    return database;
}

Credits credits(std::int64_t whole)
{
    return *Credits::fromCredits(whole);
}

} // namespace

class LedgerTest : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase()
    {
        if (QString why; !tessera::tests::TestStore::ready(why))
            QSKIP(qPrintable(why));
    }
    void cleanupTestCase() { tessera::tests::TestStore::shutdown(); }

    void movesMoneyAndKeepsTheSumAtZero()
    {
        QTemporaryDir dir;
        auto db = openLedgerDatabase(dir.filePath(QStringLiteral("l.sqlite")));
        Ledger ledger(*db);
        QCOMPARE(*ledger.mint(accounts::balance(QStringLiteral("owner")), credits(100), QStringLiteral("faucet:owner"), 1),
            Applied::Now);
        QCOMPARE(*ledger.transfer(accounts::balance(QStringLiteral("owner")), accounts::escrow(QStringLiteral("job1")),
                     credits(60), QStringLiteral("escrow:job1"), QStringLiteral("budget"), 2),
            Applied::Now);
        QCOMPARE(*ledger.transfer(accounts::escrow(QStringLiteral("job1")), accounts::balance(QStringLiteral("node")),
                     Credits::fromMicro(1'500'000), QStringLiteral("pay:job1/0/0"), QStringLiteral("shard"), 3),
            Applied::Now);
        QCOMPARE(*ledger.balance(accounts::balance(QStringLiteral("owner"))), credits(40));
        QCOMPARE(*ledger.balance(accounts::escrow(QStringLiteral("job1"))), Credits::fromMicro(58'500'000));
        QCOMPARE(*ledger.balance(accounts::balance(QStringLiteral("node"))), Credits::fromMicro(1'500'000));
        QCOMPARE(*ledger.balance(accounts::Mint), Credits::fromMicro(-100'000'000));
        QCOMPARE(*ledger.balance(QStringLiteral("balance:nobody")), Credits {});
        QVERIFY(ledger.checkInvariants().ok());
        QCOMPARE(ledger.history(accounts::escrow(QStringLiteral("job1")))->size(), 2);
    }

    void eachCausePaysOnce()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("l.sqlite"));
        {
            auto db = openLedgerDatabase(path);
            Ledger ledger(*db);
            (void)ledger.mint(QStringLiteral("escrow:j"), credits(10), QStringLiteral("fund"), 1);
            QCOMPARE(*ledger.transfer(
                         QStringLiteral("escrow:j"), QStringLiteral("balance:n"), credits(2), QStringLiteral("pay:j/0/1"), {}, 2),
                Applied::Now);
            QCOMPARE(*ledger.transfer(
                         QStringLiteral("escrow:j"), QStringLiteral("balance:n"), credits(2), QStringLiteral("pay:j/0/1"), {}, 3),
                Applied::Before);
            // The same cause with another amount is a bug somewhere: refused, not silently ignored.
            QVERIFY(!ledger
                         .transfer(QStringLiteral("escrow:j"), QStringLiteral("balance:n"), credits(3),
                             QStringLiteral("pay:j/0/1"), {}, 4)
                         .ok());
        }
        auto db = openLedgerDatabase(path); // a restarted broker retries the payment
        Ledger ledger(*db);
        QCOMPARE(*ledger.transfer(
                     QStringLiteral("escrow:j"), QStringLiteral("balance:n"), credits(2), QStringLiteral("pay:j/0/1"), {}, 5),
            Applied::Before);
        QCOMPARE(*ledger.balance(QStringLiteral("balance:n")), credits(2));
        QVERIFY(ledger.checkInvariants().ok());
    }

    void refusesWhatWouldBreakTheBooks()
    {
        QTemporaryDir dir;
        auto db = openLedgerDatabase(dir.filePath(QStringLiteral("l.sqlite")));
        Ledger ledger(*db);
        (void)ledger.mint(QStringLiteral("balance:a"), credits(5), QStringLiteral("fund"), 1);
        const auto overdraft
            = ledger.transfer(QStringLiteral("balance:a"), QStringLiteral("balance:b"), credits(6), QStringLiteral("x"), {}, 2);
        QVERIFY(!overdraft.ok());
        QVERIFY(overdraft.error().message.contains(QStringLiteral("less than")));
        QVERIFY(
            !ledger.transfer(QStringLiteral("balance:a"), QStringLiteral("balance:b"), Credits {}, QStringLiteral("zero"), {}, 2)
                 .ok());
        QVERIFY(!ledger
                     .transfer(QStringLiteral("balance:a"), QStringLiteral("balance:b"), Credits::fromMicro(-1),
                         QStringLiteral("neg"), {}, 2)
                     .ok());
        QVERIFY(
            !ledger.transfer(QStringLiteral("balance:a"), QStringLiteral("balance:a"), credits(1), QStringLiteral("self"), {}, 2)
                 .ok());
        QVERIFY(!ledger.transfer(QStringLiteral("balance:a"), QStringLiteral("balance:b"), credits(1), QString(), {}, 2).ok());
        // Everything minted is owed by the mint, so no more than int64 micro-credits can ever exist.
        QVERIFY(!ledger
                     .mint(QStringLiteral("balance:rich"), Credits::fromMicro(std::numeric_limits<std::int64_t>::max() - 10),
                         QStringLiteral("big"), 3)
                     .ok());
        QCOMPARE(*ledger.balance(QStringLiteral("balance:rich")), Credits {});
        QCOMPARE(*ledger.balance(QStringLiteral("balance:a")), credits(5));
        QVERIFY(ledger.checkInvariants().ok());
    }

    void paymentsCommitOrRollBackWithTheirCause()
    {
        QTemporaryDir dir;
        auto db = openLedgerDatabase(dir.filePath(QStringLiteral("l.sqlite")));
        Ledger ledger(*db);
        (void)ledger.mint(QStringLiteral("escrow:j"), credits(10), QStringLiteral("fund"), 1);
        {
            auto transaction = db->begin();
            QCOMPARE(*ledger.transfer(
                         QStringLiteral("escrow:j"), QStringLiteral("balance:n"), credits(1), QStringLiteral("pay:1"), {}, 2),
                Applied::Now);
            // ... and the cause (say, accepting the result) fails: no commit.
        }
        QCOMPARE(*ledger.balance(QStringLiteral("balance:n")), Credits {});
        QVERIFY(!*ledger.hasCause(QStringLiteral("pay:1")));
        {
            auto transaction = db->begin();
            (void)ledger.transfer(
                QStringLiteral("escrow:j"), QStringLiteral("balance:n"), credits(1), QStringLiteral("pay:1"), {}, 3);
            QVERIFY(transaction->commit().ok());
        }
        QCOMPARE(*ledger.balance(QStringLiteral("balance:n")), credits(1));
        QVERIFY(ledger.checkInvariants().ok());
    }

    // docs/LEDGER.md: every transfer is a leaf of the log, in order, with the entry's fields; the
    // log's root is the Merkle tree's of those leaves (across a filled tile of 256), and its
    // proofs verify: an entry's inclusion, and the consistency of an earlier head with a later.
    void everyTransferIsALeafOfTheLog()
    {
        QTemporaryDir dir;
        auto db = openLedgerDatabase(dir.filePath(QStringLiteral("log.sqlite")));
        Ledger ledger(*db);
        QVERIFY(ledger.mint(accounts::balance(QStringLiteral("owner")), credits(1000), QStringLiteral("faucet"), 1).ok());
        for (int i = 0; i < 299; ++i)
            QVERIFY(ledger
                        .transfer(accounts::balance(QStringLiteral("owner")), accounts::balance(QStringLiteral("node")),
                            Credits::fromMicro(1000 + i), QStringLiteral("pay:%1").arg(i), QStringLiteral("shard"), 2 + i)
                        .ok());
        LedgerLog log(*db);
        QCOMPARE(*log.count(), 300);
        const auto entries = *log.entries(0, 1000);
        QCOMPARE(entries.size(), 300);
        QCOMPARE(entries[0].value(QStringLiteral("credit")).toString(), accounts::balance(QStringLiteral("owner")));
        QCOMPARE(entries[0].value(QStringLiteral("debit")).toString(), accounts::Mint);
        QCOMPARE(entries[5].value(QStringLiteral("cause")).toString(), QStringLiteral("pay:4"));
        QCOMPARE(entries[5].value(QStringLiteral("amount")).toString(), QStringLiteral("1004"));
        QCOMPARE(entries[5].value(QStringLiteral("kind")).toString(), QStringLiteral("transfer"));
        merkle::MemoryTree expected;
        for (const auto& entry : entries)
            expected.append(merkle::leafHash(LedgerLog::leafBytes(entry)));
        for (const std::int64_t size : { 1, 255, 256, 257, 300 })
            QCOMPARE(*merkle::root(log, size), *merkle::root(expected, size));
        const auto root = *merkle::root(log, 300);
        for (const std::int64_t index : { 0, 7, 255, 256, 299 }) {
            const auto proof = *merkle::inclusionProof(log, index, 300);
            QVERIFY(merkle::verifyInclusion(merkle::leafHash(LedgerLog::leafBytes(entries[index])), index, 300, proof, root));
        }
        const auto consistency = *merkle::consistencyProof(log, 100, 300);
        QVERIFY(merkle::verifyConsistency(100, 300, *merkle::root(log, 100), root, consistency));
    }

    // A transfer's leaf, written directly, is byte for byte what Qt writes for its entry, whatever
    // its strings hold (quotes, backslashes, control characters, non-ASCII: through Qt then).
    void aTransfersLeafIsItsEntrysCompactJson()
    {
        QStringList texts { QString(), QStringLiteral("balance:Q-%1TY+i6}4kVzlNVqU/u3K/i<]qGqdw+!IwayZ?"),
            QStringLiteral("shard 3 of round 2, verified"), QStringLiteral("quote\"back\\slash"),
            QStringLiteral("tab\tnew\nline"), QStringLiteral("caf\u00e9 \u4e2d"), QString(QChar(0x7f)), QString(QChar(0x1f)) };
        QString printable;
        for (char c = 0x20; c < 0x7f; ++c)
            printable += QLatin1Char(c);
        texts << printable;
        for (const auto& text : texts) {
            for (const std::int64_t amount :
                { std::int64_t(1), std::int64_t(1'500'000), std::numeric_limits<std::int64_t>::max() }) {
                QCOMPARE(LedgerLog::transferLeaf(text, QStringLiteral("credit"), amount, text, text, 1'764'900'000'123),
                    LedgerLog::leafBytes(
                        LedgerLog::transferEntry(text, QStringLiteral("credit"), amount, text, text, 1'764'900'000'123)));
            }
        }
    }

    // What the books refuse or roll back leaves the log as it was; a repeat adds nothing.
    void aTransferThatDidNotHappenIsNotInTheLog()
    {
        QTemporaryDir dir;
        auto db = openLedgerDatabase(dir.filePath(QStringLiteral("unlogged.sqlite")));
        Ledger ledger(*db);
        QVERIFY(ledger.mint(accounts::balance(QStringLiteral("owner")), credits(10), QStringLiteral("faucet"), 1).ok());
        LedgerLog log(*db);
        QCOMPARE(*log.count(), 1);
        QCOMPARE(
            *ledger.mint(accounts::balance(QStringLiteral("owner")), credits(10), QStringLiteral("faucet"), 1), Applied::Before);
        QVERIFY(!ledger
                     .transfer(accounts::balance(QStringLiteral("owner")), accounts::balance(QStringLiteral("node")), credits(11),
                         QStringLiteral("too much"), {}, 2)
                     .ok());
        {
            auto transaction = db->begin();
            QVERIFY(transaction.ok());
            QVERIFY(ledger
                        .transfer(accounts::balance(QStringLiteral("owner")), accounts::balance(QStringLiteral("node")),
                            credits(1), QStringLiteral("rolled back"), {}, 3)
                        .ok());
        } // rolled back
        QCOMPARE(*log.count(), 1);
        QVERIFY(!log.append(QJsonObject { { QStringLiteral("kind"), QStringLiteral("transfer") } }).ok()); // not outside one
    }

    // A ledger kept before its log existed: its transfers become the log's first entries, in the
    // order they were made, once; what follows is appended after them.
    void aLedgerFromBeforeTheLogBeginsItsLogWithItsTransfers()
    {
        QTemporaryDir dir;
        auto db = openLedgerDatabase(dir.filePath(QStringLiteral("older.sqlite")));
        for (const auto* sql : { "INSERT INTO ledger_accounts (name, balance) VALUES ('mint', -5000000), ('balance:a', 4000000), "
                                 "('balance:b', 1000000) ON CONFLICT (name) DO UPDATE SET balance = excluded.balance",
                 "INSERT INTO ledger_transfers (debit, credit, amount, cause, memo, at) VALUES "
                 "('mint', 'balance:a', 5000000, 'faucet:a', 'minted', 10)",
                 "INSERT INTO ledger_transfers (debit, credit, amount, cause, memo, at) VALUES "
                 "('balance:a', 'balance:b', 1000000, 'pay:x', 'shard', 20)" })
            QVERIFY(db->execute(QString::fromLatin1(sql)).ok());
        LedgerLog log(*db);
        QCOMPARE(*log.backfill(), 2);
        QCOMPARE(*log.backfill(), 0);
        Ledger ledger(*db);
        QVERIFY(
            ledger.transfer(QStringLiteral("balance:b"), QStringLiteral("balance:a"), credits(1), QStringLiteral("back"), {}, 30)
                .ok());
        const auto entries = *log.entries(0, 10);
        QCOMPARE(entries.size(), 3);
        QCOMPARE(entries[0],
            LedgerLog::transferEntry(QStringLiteral("mint"), QStringLiteral("balance:a"), 5'000'000, QStringLiteral("faucet:a"),
                QStringLiteral("minted"), 10));
        QCOMPARE(entries[1].value(QStringLiteral("cause")).toString(), QStringLiteral("pay:x"));
        QCOMPARE(entries[2].value(QStringLiteral("cause")).toString(), QStringLiteral("back"));
        // Each transfer knows its leaf (a receipt's proof starts there).
        QCOMPARE(*log.indexOf(QStringLiteral("faucet:a")), std::optional<std::int64_t>(0));
        QCOMPARE(*log.indexOf(QStringLiteral("pay:x")), std::optional<std::int64_t>(1));
        QCOMPARE(*log.indexOf(QStringLiteral("back")), std::optional<std::int64_t>(2));
        QCOMPARE(*log.indexOf(QStringLiteral("never")), std::nullopt);
        // Transfers logged before they kept their leaf's index (migration 19) find it at the next start.
        QVERIFY(db->execute(QStringLiteral("UPDATE ledger_transfers SET log_idx = NULL")).ok());
        QCOMPARE(*log.indexOf(QStringLiteral("pay:x")), std::nullopt);
        QCOMPARE(*log.backfill(), 0);
        QCOMPARE(*log.indexOf(QStringLiteral("pay:x")), std::optional<std::int64_t>(1));
        QCOMPARE(*log.indexOf(QStringLiteral("back")), std::optional<std::int64_t>(2));
    }

    // What the LOG-* messages answer (docs/LEDGER.md, "Asking for the log"): signed heads, a new one
    // only when the log grew and the last is old enough (or a caller holds a larger one), proofs
    // that verify against them, pages of entries, and a receipt's place.
    void thePublisherSignsHeadsAndProvesEntries()
    {
        QTemporaryDir dir;
        auto db = openLedgerDatabase(dir.filePath(QStringLiteral("published.sqlite")));
        Ledger ledger(*db);
        const auto keys = SigningKeys::generate();
        ManualClock clock(1'000'000);
        const QString network = QStringLiteral("00112233445566778899aabbccddeeff");
        broker::LogPublisher publisher(*db, keys, network, clock, 5'000);
        auto empty = publisher.head();
        QVERIFY(empty.ok());
        QCOMPARE(empty->size, 0);
        QCOMPARE(empty->root, merkle::emptyRoot());
        QVERIFY(ledger.mint(accounts::balance(QStringLiteral("a")), credits(1000), QStringLiteral("faucet"), 1).ok());
        for (int i = 0; i < 40; ++i)
            QVERIFY(ledger
                        .transfer(accounts::balance(QStringLiteral("a")), accounts::balance(QStringLiteral("b")),
                            Credits::fromMicro(10 + i), QStringLiteral("pay:%1").arg(i), QStringLiteral("shard"), 2 + i)
                        .ok());
        publisher.tick(); // the last head is not 5 s old: no new one
        QCOMPARE(publisher.head()->size, 0);
        clock.advance(5'000);
        publisher.tick();
        const auto head = *publisher.head();
        QCOMPARE(head.size, 41);
        QVERIFY(LogHead::read(head.document).ok());
        QCOMPARE(head.network, network);
        QVERIFY(ledger
                    .transfer(accounts::balance(QStringLiteral("a")), accounts::balance(QStringLiteral("b")), credits(1),
                        QStringLiteral("later"), {}, 50)
                    .ok());
        // A caller holding a head of 42 (another broker's) gets one at least as large, at once.
        auto reply = *publisher.headReply(42);
        auto newer = *LogHead::read(reply.value(QStringLiteral("head")).toObject());
        QCOMPARE(newer.size, 42);
        QVERIFY(checkExtends(head, newer, *proofFromJson(publisher.headReply(41)->value(QStringLiteral("consistency")))).ok());
        QCOMPARE(publisher.headReply(43).error().field, QStringLiteral("from"));

        auto proof = *publisher.proofReply(7, std::nullopt);
        const QByteArray entry = proof.value(QStringLiteral("entry")).toString().toUtf8();
        QVERIFY(entry.contains("\"cause\":\"pay:6\""));
        QVERIFY(merkle::verifyInclusion(
            merkle::leafHash(entry), 7, newer.size, *proofFromJson(proof.value(QStringLiteral("proof"))), newer.root));
        auto inOlder = *publisher.proofReply(7, 41);
        QVERIFY(merkle::verifyInclusion(
            merkle::leafHash(entry), 7, 41, *proofFromJson(inOlder.value(QStringLiteral("proof"))), head.root));
        QVERIFY(!publisher.proofReply(41, 41).ok());
        QVERIFY(!publisher.proofReply(42, std::nullopt).ok());
        QVERIFY(!publisher.consistencyReply(5, 43).ok());
        QVERIFY(!publisher.consistencyReply(6, 5).ok());
        auto consistency = *publisher.consistencyReply(41, 42);
        QVERIFY(
            merkle::verifyConsistency(41, 42, head.root, newer.root, *proofFromJson(consistency.value(QStringLiteral("proof")))));

        auto page = *publisher.entriesReply(40, 256);
        QCOMPARE(page.value(QStringLiteral("entries")).toArray().size(), 2);
        QVERIFY(!page.contains(QStringLiteral("next")));
        page = *publisher.entriesReply(0, 10);
        QCOMPARE(page.value(QStringLiteral("next")).toInteger(), 10);
        QVERIFY(!publisher.entriesReply(0, 257).ok());

        auto logged = *publisher.receiptLog(QStringLiteral("pay:6"));
        QCOMPARE(logged.value(QStringLiteral("index")).toInteger(), 7);
        QVERIFY(!publisher.receiptLog(QStringLiteral("never")).ok());
    }

    void invariantCheckFindsTampering()
    {
        QTemporaryDir dir;
        auto db = openLedgerDatabase(dir.filePath(QStringLiteral("l.sqlite")));
        Ledger ledger(*db);
        (void)ledger.mint(QStringLiteral("balance:a"), credits(5), QStringLiteral("fund"), 1);
        QVERIFY(db->execute(QStringLiteral("UPDATE ledger_accounts SET balance = balance + 1 WHERE name = 'balance:a'")).ok());
        const auto status = ledger.checkInvariants();
        QVERIFY(!status.ok());
        QVERIFY(status.error().message.contains(QStringLiteral("sum")));
        QVERIFY(db->execute(QStringLiteral("UPDATE ledger_accounts SET balance = balance - 1 WHERE name = 'balance:a'")).ok());
        QVERIFY(db->execute(QStringLiteral("UPDATE ledger_accounts SET balance = balance + 7 WHERE name = 'balance:a'")).ok());
        QVERIFY(db->execute(QStringLiteral("UPDATE ledger_accounts SET balance = balance - 7 WHERE name = 'mint'")).ok());
        QVERIFY(ledger.checkInvariants().error().message.contains(QStringLiteral("does not match")));
        // The database itself refuses a negative balance outside the mint.
        QVERIFY(!db->execute(QStringLiteral("UPDATE ledger_accounts SET balance = -1 WHERE name = 'balance:a'")).ok());
    }
};

QTEST_GUILESS_MAIN(LedgerTest)
#include "tst_ledger.moc"
