#pragma once

#include "error.h"
#include "shardresult.h"
#include "storage/database.h"

#include <QJsonObject>
#include <QList>
#include <QString>

#include <memory>

namespace tessera::core {

// The lifecycle of a node's results, in its node.sqlite: computed, committed, then accepted (and
// paid), failed, stale or refused. One connection per thread: open one log per NodeClient.
class ResultLog {
public:
    static Result<std::unique_ptr<ResultLog>> open(const QString& path);

    Status computed(const QString& assignment, const QString& broker, const ShardResult& result);
    // state: committed, accepted, failed, stale or refused; paid: credits earned (accepted only).
    Status advance(const QString& assignment, const QString& state, const QString& paid = {}, const QString& detail = {});
    Result<QList<QJsonObject>> list(int limit = 1000);

private:
    explicit ResultLog(std::unique_ptr<storage::Database> database);
    std::unique_ptr<storage::Database> m_db;
};

} // namespace tessera::core
