#include "scriptguard.h"

#include "tensors.h"

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <QRegularExpression>

namespace tessera::compute::detail {

namespace {

// Names that TorchScript code cannot avoid writing to reach the operators above: an operator is
// called by its name (torch.save, ops.aten.from_file) and TorchScript has no getattr by string.
// A name is matched as a whole identifier anywhere in the code, strings and comments included:
// a model that merely uses such a word is refused too, and can rename it.
const QHash<QString, QString>& forbiddenNames()
{
    static const QHash<QString, QString> names {
        { QStringLiteral("save"), QStringLiteral("writes files") },
        { QStringLiteral("from_file"), QStringLiteral("reads files") },
        { QStringLiteral("fork"), QStringLiteral("starts threads") },
        { QStringLiteral("_fork"), QStringLiteral("starts threads") },
        { QStringLiteral("wait"), QStringLiteral("waits for threads") },
        { QStringLiteral("_wait"), QStringLiteral("waits for threads") },
        { QStringLiteral("manual_seed"), QStringLiteral("reseeds the process's random generator") },
        { QStringLiteral("rpc_async"), QStringLiteral("calls other machines") },
        { QStringLiteral("rpc_sync"), QStringLiteral("calls other machines") },
        { QStringLiteral("rpc_remote"), QStringLiteral("calls other machines") },
        { QStringLiteral("c10d"), QStringLiteral("uses distributed process groups") },
        { QStringLiteral("classes"), QStringLiteral("uses LibTorch's custom classes (torch.classes)") },
    };
    return names;
}

} // namespace

core::Status checkScriptArchive(const QByteArray& archive)
{
    auto records = guarded(QStringLiteral("not a TorchScript model saved by PyTorch"), [&] {
        caffe2::serialize::PyTorchStreamReader reader(
            std::make_shared<caffe2::serialize::MemoryReadAdapter>(archive.constData(), off_t(archive.size())));
        std::vector<std::pair<QString, QByteArray>> code;
        for (const auto& name : reader.getAllRecords()) {
            if (name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0)
                continue;
            auto [data, size] = reader.getRecord(name);
            code.emplace_back(QString::fromStdString(name), QByteArray(static_cast<const char*>(data.get()), qsizetype(size)));
        }
        return code;
    });
    if (!records)
        return core::Error { QStringLiteral("model.torchscript"), records.error().message };
    static const QRegularExpression identifier(QStringLiteral("[A-Za-z_][A-Za-z0-9_]*"));
    for (const auto& [name, source] : *records) {
        const QString text = QString::fromLatin1(source);
        for (auto it = identifier.globalMatch(text); it.hasNext();) {
            const auto match = it.next();
            const auto found = forbiddenNames().constFind(match.captured());
            if (found == forbiddenNames().cend())
                continue;
            const auto line = text.left(match.capturedStart()).count(u'\n') + 1;
            return core::Error { QStringLiteral("model.torchscript"),
                QStringLiteral("refused: its code calls '%1' (%2, line %3), which %4; a model trained on other "
                               "people's computers may only compute on tensors")
                    .arg(match.captured(), name, QString::number(line), found.value()) };
        }
    }
    return {};
}

} // namespace tessera::compute::detail
