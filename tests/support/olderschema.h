#pragma once

// A database as an older Tessera left it: the migrations of `folder` (":/migrations/broker",
// ":/migrations/node") up to `version` only, for tests that carry it over to the newest schema.

#include <core/storage/database.h>

#include <memory>

namespace tessera::tests {

inline std::unique_ptr<core::storage::Database> openAtVersion(const QString& path, const QString& folder, int version)
{
    auto database = core::storage::Database::open(path);
    if (!database)
        qFatal("%s", qPrintable(database.error().message));
    auto migrations = core::storage::loadMigrations(folder, (*database)->engine());
    if (!migrations)
        qFatal("%s", qPrintable(migrations.error().message));
    while (!migrations->isEmpty() && migrations->last().version > version)
        migrations->removeLast();
    if (auto status = (*database)->migrate(*migrations); !status)
        qFatal("%s", qPrintable(status.error().message));
    return std::move(database).value();
}

} // namespace tessera::tests
