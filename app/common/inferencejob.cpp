#include "inferencejob.h"

#include <core/readfile.h>

#include <QDir>
#include <QFileInfo>

namespace tessera::app {

std::int64_t promptCountOf(const QByteArray& bytes)
{
    if (bytes.isEmpty())
        return 0;
    return bytes.count('\n') + (bytes.endsWith('\n') ? 0 : 1);
}

namespace {

core::Status fromJob(QJsonObject& job, const StatusOf& statusOf)
{
    auto model = job.value(QStringLiteral("model")).toObject();
    const QString source = model.value(QStringLiteral("fromJob")).toString();
    if (model.size() != 1)
        return core::Error { QStringLiteral("model.fromJob"), QStringLiteral("fromJob stands alone: the model is that job's") };
    auto status = statusOf(source);
    if (!status)
        return core::Error { QStringLiteral("model.fromJob"), status.error().message };
    status->id = source;
    auto trained = core::broker::trainedModelOf(*status);
    if (!trained)
        return trained.error();
    job.insert(QStringLiteral("model"), trained->model);
    if (!job.contains(QStringLiteral("dataset")))
        job.insert(QStringLiteral("dataset"), trained->dataset);
    return {};
}

core::Status countPrompts(QJsonObject& job, const QString& baseDirectory)
{
    auto inference = job.value(QStringLiteral("inference")).toObject();
    auto prompts = inference.value(QStringLiteral("prompts")).toObject();
    const QString file = prompts.value(QStringLiteral("file")).toString();
    if (file.isEmpty() || prompts.contains(QStringLiteral("count")))
        return {};
    const QString path = QDir(baseDirectory).absoluteFilePath(file);
    if (QFileInfo(path).size() > (qint64(1) << 30))
        return core::Error { QStringLiteral("inference.prompts.file"),
            QStringLiteral("files of more than 1 GiB are not accepted") };
    auto bytes = core::readFile(path);
    if (!bytes)
        return core::Error { QStringLiteral("inference.prompts.file"), bytes.error().message };
    prompts.insert(QStringLiteral("count"), qint64(promptCountOf(*bytes)));
    inference.insert(QStringLiteral("prompts"), prompts);
    job.insert(QStringLiteral("inference"), inference);
    return {};
}

} // namespace

core::Result<QJsonObject> resolveInferenceJob(QJsonObject job, const QString& baseDirectory, const StatusOf& statusOf)
{
    if (job.value(QStringLiteral("kind")).toString() != u"inference")
        return job;
    if (job.value(QStringLiteral("model")).toObject().contains(QStringLiteral("fromJob"))) {
        if (auto status = fromJob(job, statusOf); !status)
            return status.error();
    }
    if (auto status = countPrompts(job, baseDirectory); !status)
        return status.error();
    return job;
}

} // namespace tessera::app
