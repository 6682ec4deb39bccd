#pragma once

#include <core/broker/records.h>
#include <core/error.h>

#include <QJsonObject>
#include <QString>

#include <functional>

namespace tessera::app {

// What tessera-job does to an inference job file before it reads it (docs/JOBS.md, "Inference
// jobs"): `model.fromJob` becomes that finished job's model with its final weights (and its
// dataset, when the file has none), and a prompts file (`inference.prompts.file`, relative to
// `baseDirectory`) is counted into `inference.prompts.count`. `statusOf` asks the broker. A
// training job comes back as it is.
using StatusOf = std::function<core::Result<core::broker::JobStatus>(const QString& jobId)>;
core::Result<QJsonObject> resolveInferenceJob(QJsonObject job, const QString& baseDirectory, const StatusOf& statusOf);

// The prompts in a prompts file: its lines, a final empty line not counted.
std::int64_t promptCountOf(const QByteArray& bytes);

} // namespace tessera::app
