#include "storemigration.h"

#include "../ledger/ledger.h"
#include "../storage/database.h"
#include "blobmirror.h"

#include <QHash>
#include <QSet>

namespace tessera::core::broker {

namespace {

using storage::Database;
using storage::Statement;

struct Column {
    QString name;
    QString type; // PostgreSQL's data_type
    bool identity = false; // its values come from a sequence, which must move past the copied rows
};

Result<QStringList> sourceTables(Database& source)
{
    // SQLite's own catalogue: this side is always SQLite.
    auto rows = storage::query(source,
        QStringLiteral("SELECT name FROM sqlite_master WHERE type = 'table' "
                       "AND name NOT LIKE 'sqlite_%' AND name <> 'schema_version' ORDER BY name"));
    if (!rows)
        return rows.error();
    return storage::collect(*rows, [](Statement& row) { return row.columnText(0); });
}

Result<QList<Column>> targetColumns(Database& target, const QString& table)
{
    auto rows = storage::query(target,
        QStringLiteral("SELECT column_name, data_type, is_identity FROM information_schema.columns "
                       "WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position"),
        table);
    if (!rows)
        return rows.error();
    return storage::collect(*rows, [](Statement& row) {
        return Column { row.columnText(0), row.columnText(1), row.columnText(2) == u"YES" };
    });
}

// The tables in an order where each comes after those its foreign keys name.
Result<QStringList> referencedFirst(Database& target, QStringList tables)
{
    auto rows = storage::query(target,
        QStringLiteral("SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
                       "AND connamespace = current_schema()::regnamespace"));
    if (!rows)
        return rows.error();
    QHash<QString, QSet<QString>> needs;
    auto pairs = storage::collect(*rows, [](Statement& row) { return std::pair { row.columnText(0), row.columnText(1) }; });
    if (!pairs)
        return pairs.error();
    for (const auto& [from, to] : *pairs)
        if (from != to)
            needs[from].insert(to);
    QStringList ordered;
    while (!tables.isEmpty()) {
        const auto ready = std::find_if(tables.begin(), tables.end(), [&](const QString& table) {
            for (const auto& needed : needs.value(table))
                if (tables.contains(needed))
                    return false;
            return true;
        });
        if (ready == tables.end())
            return Error { QStringLiteral("migrate-store"), QStringLiteral("the tables' foreign keys form a loop") };
        ordered.append(*ready);
        tables.erase(ready);
    }
    return ordered;
}

Result<std::int64_t> countOf(Database& database, const QString& table)
{
    auto rows = storage::query(database, QStringLiteral("SELECT count(*) FROM %1").arg(table));
    if (!rows)
        return rows.error();
    auto found = storage::fetch(*rows);
    if (!found)
        return found.error();
    return rows->columnInt(0);
}

void bindColumn(Statement& insert, int index, const Statement& row, int column, const QString& type)
{
    if (row.columnIsNull(column))
        insert.bindNull(index);
    else if (type == u"bytea")
        insert.bind(index, row.columnBlob(column));
    else if (type == u"double precision" || type == u"real" || type == u"numeric")
        insert.bind(index, row.columnDouble(column));
    else if (type == u"bigint" || type == u"integer" || type == u"smallint")
        insert.bind(index, row.columnInt(column));
    else
        insert.bind(index, row.columnText(column));
}

// One table's rows, and its identity sequence moved past them.
Result<std::int64_t> copyTable(Database& source, Database& target, const QString& table)
{
    auto columns = targetColumns(target, table);
    if (!columns)
        return columns.error();
    QStringList names;
    QStringList marks;
    for (const auto& column : *columns) {
        names.append(column.name);
        marks.append(QStringLiteral("?"));
    }
    auto rows = source.prepare(QStringLiteral("SELECT %1 FROM %2").arg(names.join(u", "), table));
    if (!rows)
        return rows.error().toError();
    auto insert
        = target.prepare(QStringLiteral("INSERT INTO %1 (%2) VALUES (%3)").arg(table, names.join(u", "), marks.join(u", ")));
    if (!insert)
        return insert.error().toError();
    std::int64_t copied = 0;
    for (;;) {
        auto row = rows->step();
        if (!row)
            return row.error().toError();
        if (!*row)
            break;
        for (int i = 0; i < columns->size(); ++i)
            bindColumn(*insert, i + 1, *rows, i, (*columns)[i].type);
        if (auto status = insert->run(); !status)
            return Error { QStringLiteral("migrate-store"),
                QStringLiteral("row %1 of %2: %3").arg(copied + 1).arg(table, status.error().message) };
        insert->reset();
        ++copied;
    }
    for (const auto& column : *columns)
        if (column.identity)
            if (auto status = storage::execute(target,
                    QStringLiteral("SELECT setval(pg_get_serial_sequence('%1', '%2'), COALESCE(MAX(%2), 0) + 1, false) FROM %1")
                        .arg(table, column.name));
                !status)
                return status.error();
    return copied;
}

Status requireEmpty(Database& target, QStringList tables)
{
    // The schema's own row goes once nothing else is there: the mint's account at 0 (migration
    // 2). An account that holds anything is another network's.
    tables.removeAll(QStringLiteral("ledger_accounts"));
    tables.append(QStringLiteral("ledger_accounts"));
    for (const auto& table : tables) {
        if (table == u"ledger_accounts") {
            if (auto status = storage::execute(target, QStringLiteral("DELETE FROM ledger_accounts WHERE balance = 0")); !status)
                return status;
        }
        auto count = countOf(target, table);
        if (!count)
            return count.error();
        if (*count > 0)
            return Error { QStringLiteral("migrate-store"),
                QStringLiteral("the target database is not empty (%1 holds %2 rows): it is another network's, or this one "
                               "was moved there already; give an empty database")
                    .arg(table)
                    .arg(*count) };
    }
    return {};
}

} // namespace

Result<StoreMigration> migrateStore(const QString& sqlitePath, const QString& postgresUri, BlobStore* blobs)
{
    if (!storage::isPostgresUri(postgresUri))
        return Error { QStringLiteral("to"), QStringLiteral("expected a postgresql:// URI") };
    auto source = storage::openMigrated(sqlitePath, QStringLiteral(":/migrations/broker"));
    if (!source)
        return source.error();
    auto target = storage::openMigrated(postgresUri, QStringLiteral(":/migrations/broker"));
    if (!target)
        return target.error();
    auto tables = sourceTables(**source);
    if (!tables)
        return tables.error();
    auto ordered = referencedFirst(**target, *tables);
    if (!ordered)
        return ordered.error();
    StoreMigration report;
    {
        // Both held for the copy: no broker writes the source (SQLite's write lock) or the target
        // (the writer lock) meanwhile, so the copy is one moment of the network.
        auto reading = (*source)->begin();
        if (!reading)
            return Error { QStringLiteral("migrate-store"),
                QStringLiteral("%1 is in use (stop its broker first): %2").arg(sqlitePath, reading.error().message) };
        auto transaction = (*target)->begin();
        if (!transaction)
            return transaction.error().toError();
        if (auto status = requireEmpty(**target, *ordered); !status)
            return status.error();
        for (const auto& table : *ordered) {
            auto copied = copyTable(**source, **target, table);
            if (!copied)
                return copied.error();
            auto counted = countOf(**target, table);
            if (!counted)
                return counted.error();
            if (*counted != *copied)
                return Error { QStringLiteral("migrate-store"),
                    QStringLiteral("%1: %2 rows copied, %3 there").arg(table).arg(*copied).arg(*counted) };
            report.tables.append({ table, *copied });
        }
        if (auto status = ledger::Ledger(**target).checkInvariants(); !status)
            return Error { QStringLiteral("migrate-store"),
                QStringLiteral("the books do not balance after the copy: %1").arg(status.error().message) };
        if (auto committed = transaction->commit(); !committed)
            return committed.error().toError();
    }
    if (blobs) {
        BlobMirror mirror(**target, *blobs);
        auto copied = mirror.storeMissing();
        if (!copied)
            return copied.error();
        report.blobs = *copied;
    }
    return report;
}

} // namespace tessera::core::broker
