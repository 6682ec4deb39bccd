#pragma once

#include <net/protocol.h>

#include <QJsonObject>
#include <QString>

#include <functional>
#include <optional>

namespace tessera::app::job {

// One request to the broker; an error is printed and its exit status set (tessera-job's Context::ask).
using Ask = std::function<std::optional<QJsonObject>(net::Command, const QJsonObject&, int&)>;

// tessera-job audit (docs/LEDGER.md, "Audit"): the whole log fetched, hashed to a signed head and
// replayed into every account, compared with what the broker reports. 0 when all agree.
int audit(const Ask& ask, bool json);

// tessera-job check-head FILE: a head kept or published elsewhere (an operator's page, another
// broker) against the broker's newest, by a consistency proof. 0 when the newest extends it.
int checkHead(const Ask& ask, const QString& file, bool json);

} // namespace tessera::app::job
