#pragma once

#include "../blobstore.h"
#include "../error.h"

#include <QList>
#include <QString>

#include <cstdint>

namespace tessera::core::broker {

// tessera-broker migrate-store (docs/STORE.md, "Moving a network to PostgreSQL"): a broker's
// SQLite database copied whole into an empty PostgreSQL database, and its blobs into the
// database's copy of them, so that the network goes on there (one broker or several).
struct StoreMigration {
    struct Table {
        QString name;
        std::int64_t rows = 0;
    };
    QList<Table> tables; // in the order they were copied (a table after those it refers to)
    int blobs = 0; // copied into blob_copies
};

// Copies every row of `sqlitePath` (brought to the newest schema first) into `postgresUri`, whose
// schema it makes; one transaction, so a failure leaves the target as it was. Refused when the
// target holds any row already (it is another network, or a half-done earlier attempt's was
// rolled back: empty). Every table's count is compared after the copy and the ledger's
// invariants checked on the target. `blobs`: the broker's blob store (its data folder), copied
// after the rows; none: the broker copies them on its first start on PostgreSQL.
Result<StoreMigration> migrateStore(const QString& sqlitePath, const QString& postgresUri, BlobStore* blobs);

} // namespace tessera::core::broker
