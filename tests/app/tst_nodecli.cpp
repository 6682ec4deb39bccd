// tessera-node as a user runs it: real processes, real files.

#include <compute/engine/weights.h>
#include <core/decomposition.h>
#include <core/deviceinfo.h>
#include <core/jobspec.h>
#include <core/shardresult.h>

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <support/processrun.h>

using namespace tessera;

namespace {

using tests::Run;
using tests::run;

Run node(const QStringList& arguments, const QString& config)
{
    return run(QStringLiteral(TESSERA_NODE), QStringList { QStringLiteral("--config"), config } + arguments);
}

bool writeFile(const QString& path, const QByteArray& bytes)
{
    QFile file(path);
    return file.open(QIODevice::WriteOnly) && file.write(bytes) == bytes.size();
}

QJsonObject readJson(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(file.readAll()).object();
}

} // namespace

class NodeCliTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QString config() const { return m_dir.filePath(QStringLiteral("tessera.ini")); }

private Q_SLOTS:
    void versionAndHelp()
    {
        const auto version = node({ QStringLiteral("--version") }, config());
        QCOMPARE(version.exitCode, 0);
        QVERIFY(version.output.startsWith(QStringLiteral("tessera-node ")));
        const auto help = node({ QStringLiteral("--help") }, config());
        QCOMPARE(help.exitCode, 0);
        QVERIFY(help.output.contains(QStringLiteral("train-local")));
        const auto unknown = node({ QStringLiteral("frobnicate") }, config());
        QCOMPARE(unknown.exitCode, 1);
        QVERIFY(unknown.output.contains(QStringLiteral("unknown command")));
        // Every program's --version is one line, ended; every command's --help is its own, exit 0.
        for (const auto* program : { TESSERA_NODE, TESSERA_JOB, TESSERA_BROKER }) {
            const auto printed = run(QString::fromUtf8(program), { QStringLiteral("--version") });
            QCOMPARE(printed.exitCode, 0);
            QVERIFY2(printed.output.endsWith(u'\n') && printed.output.count(u'\n') == 1, qPrintable(printed.output));
        }
        for (const auto* command : { "run", "results", "stake", "devices", "benchmark", "train-local", "train-shard" }) {
            const auto commandHelp = node({ QString::fromLatin1(command), QStringLiteral("--help") }, config());
            QVERIFY2(commandHelp.exitCode == 0 && commandHelp.output.contains(QString::fromLatin1(command)),
                qPrintable(commandHelp.output));
        }
        for (const auto* command : { "submit", "status", "wait", "fetch", "list", "cancel", "balance", "ledger", "nodes",
                 "verifications", "receipt", "verify-receipt" }) {
            const auto jobHelp = run(QStringLiteral(TESSERA_JOB), { QString::fromLatin1(command), QStringLiteral("--help") });
            QVERIFY2(jobHelp.exitCode == 0 && jobHelp.output.startsWith(QStringLiteral("Usage: tessera-job"))
                    && jobHelp.output.contains(QString::fromLatin1(command)),
                qPrintable(jobHelp.output));
        }
        const auto wrong = run(QStringLiteral(TESSERA_JOB), { QStringLiteral("fetch"), QStringLiteral("ID") }); // no -o
        QCOMPARE(wrong.exitCode, 2);
        // A key in Z85 may begin with '-': an account named so is an argument (here one too many,
        // so the usage), while a mistyped option is still called unknown.
        const QString dashedKey = QStringLiteral("-") + QString(39, u'K');
        const auto dashed = run(QStringLiteral(TESSERA_JOB), { QStringLiteral("balance"), dashedKey, QStringLiteral("another") });
        QCOMPARE(dashed.exitCode, 2);
        QVERIFY2(!dashed.output.contains(QStringLiteral("nknown option")) && dashed.output.startsWith(QStringLiteral("Usage")),
            qPrintable(dashed.output));
        const auto typo = run(QStringLiteral(TESSERA_JOB), { QStringLiteral("balance"), QStringLiteral("--jsn") });
        QCOMPARE(typo.exitCode, 2);
        QVERIFY2(typo.output.contains(QStringLiteral("nknown option")), qPrintable(typo.output));
    }

    void initTestCase()
    {
        QVERIFY(writeFile(
            config(), QStringLiteral("[Node]\nDataDirectory=%1\n").arg(m_dir.filePath(QStringLiteral("data"))).toUtf8()));
    }

    void listsDevices()
    {
        const auto text = node({ QStringLiteral("devices") }, config());
        QCOMPARE(text.exitCode, 0);
        QVERIFY2(text.output.contains(QStringLiteral("cpu:0")) && text.output.contains(QStringLiteral("usable: yes")),
            qPrintable(text.output));
        const auto json = node({ QStringLiteral("devices"), QStringLiteral("--json") }, config());
        QCOMPARE(json.exitCode, 0);
        const auto devices
            = QJsonDocument::fromJson(json.standardOutput.toUtf8()).object().value(QStringLiteral("devices")).toArray();
        QVERIFY(!devices.isEmpty());
        const auto cpu = core::DeviceInfo::fromJson(devices.first().toObject());
        QVERIFY(cpu.ok());
        QCOMPARE(cpu->kind, core::DeviceInfo::Kind::Cpu);
        QVERIFY(cpu->usable);
    }

    void benchmarksAndKeepsTheResult()
    {
        const auto measured = node({ QStringLiteral("benchmark"), QStringLiteral("--json"), QStringLiteral("--threads"),
                                       QStringLiteral("1"), QStringLiteral("--max-repetitions"), QStringLiteral("3") },
            config());
        QVERIFY2(measured.exitCode == 0, qPrintable(measured.output));
        const auto record = QJsonDocument::fromJson(measured.standardOutput.toUtf8()).object();
        const auto measurements = record.value(QStringLiteral("measurements")).toArray();
        QCOMPARE(measurements.size(), 3);
        for (const auto& m : measurements) {
            QVERIFY(m.toObject().value(QStringLiteral("value")).toDouble() > 0);
            QVERIFY(m.toObject().value(QStringLiteral("repetitions")).toInt() <= 3);
        }
        QVERIFY(record.value(QStringLiteral("runtimeProfile")).toString().contains(QStringLiteral("threads=1")));
        // Stored in the node database: --last reads it back without measuring.
        const auto last = node({ QStringLiteral("benchmark"), QStringLiteral("--last"), QStringLiteral("--json") }, config());
        QCOMPARE(last.exitCode, 0);
        QCOMPARE(QJsonDocument::fromJson(last.standardOutput.toUtf8()).object(), record);
    }

    void sameShardInTwoProcessesGivesTheSameBits()
    {
        core::JobSpec spec = *core::JobSpec::fromJsonText(R"({"name": "t", "model": {"zoo": "mlp", "hidden": [64]},
            "dataset": {"builtin": "fashion-mnist"}, "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9},
            "training": {"rounds": 1, "shardsPerRound": 4, "localSteps": 30, "batchSize": 32, "seed": 3, "checkpointInterval": 10},
            "budget": "1"})");
        const auto start = compute::initialWeights(spec, {});
        QVERIFY(start.ok());
        const QString weights = m_dir.filePath(QStringLiteral("w0.pt"));
        QVERIFY(writeFile(weights, start->bytes));

        auto task = core::decomposeRound(QStringLiteral("job"), spec, 0, start->canonicalHash).at(2);
        const QString taskFile = m_dir.filePath(QStringLiteral("task.json"));
        QVERIFY(writeFile(taskFile, QJsonDocument(task.toJson()).toJson()));
        task.threads = 2;
        const QString twoThreadTask = m_dir.filePath(QStringLiteral("task2.json"));
        QVERIFY(writeFile(twoThreadTask, QJsonDocument(task.toJson()).toJson()));

        QList<core::ShardResult> results;
        for (const auto& [file, out] : { std::pair { taskFile, QStringLiteral("a") }, std::pair { taskFile, QStringLiteral("b") },
                 std::pair { twoThreadTask, QStringLiteral("c") } }) {
            const auto outDir = m_dir.filePath(out);
            const auto shard = node(
                { QStringLiteral("train-shard"), file, QStringLiteral("--weights"), weights, QStringLiteral("--out"), outDir },
                config());
            QVERIFY2(shard.exitCode == 0, qPrintable(shard.output));
            auto result = core::ShardResult::fromJson(readJson(outDir + QStringLiteral("/result.json")));
            QVERIFY(result.ok());
            results.append(*result);
        }
        QCOMPARE(results[0].finalHash, results[1].finalHash);
        QCOMPARE(results[0].checkpointHashes, results[1].checkpointHashes);
        QCOMPARE(results[0].checkpointHashes.size(), 4);
        QCOMPARE(results[0].runtimeProfile, results[1].runtimeProfile);
        QVERIFY(results[2].runtimeProfile != results[0].runtimeProfile);
        QVERIFY(results[2].runtimeProfile.contains(QStringLiteral("threads=2")));
    }

    void trainLocalReachesTheAccuracyGoalAndExportsForPyTorch()
    {
        const QString out = m_dir.filePath(QStringLiteral("mlp"));
        const auto trained
            = node({ QStringLiteral("train-local"), QStringLiteral(TESSERA_SOURCE_DIR "/examples/jobs/fashion-mnist-mlp.json"),
                       QStringLiteral("--out"), out },
                config());
        QVERIFY2(trained.exitCode == 0, qPrintable(trained.output));
        QVERIFY(trained.output.contains(QStringLiteral("round 15/15")));
        const auto report = readJson(out + QStringLiteral("/report.json"));
        const auto rounds = report.value(QStringLiteral("rounds")).toArray();
        QCOMPARE(rounds.size(), 15);
        const double accuracy = rounds.last().toObject().value(QStringLiteral("testAccuracy")).toDouble();
        qInfo("Fashion-MNIST MLP test accuracy after 15 rounds: %.2f%%", accuracy * 100.0);
        QVERIFY2(accuracy >= 0.85, qPrintable(QString::number(accuracy)));

        // PyTorch loads both files and measures the same accuracy.
        const auto check = run(QStringLiteral("/usr/bin/python3"),
            { QStringLiteral(TESSERA_SOURCE_DIR "/tests/compute/python/check_export.py"), out,
                QStringLiteral("/usr/share/datasets/fashion-mnist") });
        QVERIFY2(check.exitCode == 0, qPrintable(check.output));
        QVERIFY(check.output.startsWith(QStringLiteral("accuracy")));
    }

    void badJobFileIsReportedByField()
    {
        const QString job = m_dir.filePath(QStringLiteral("bad.json"));
        QVERIFY(writeFile(job, R"({"name": "t", "model": {"zoo": "mlp"}, "dataset": {"builtin": "fashion-mnist"},
            "optimizer": {"kind": "sgd", "lr": -1}, "training": {"rounds": 1, "shardsPerRound": 1, "localSteps": 1, "batchSize": 1},
            "budget": "1"})"));
        const auto result = node({ QStringLiteral("train-local"), job }, config());
        QCOMPARE(result.exitCode, 1);
        QVERIFY2(result.output.contains(QStringLiteral("optimizer.lr")), qPrintable(result.output));
        const auto missing = node({ QStringLiteral("train-local"), m_dir.filePath(QStringLiteral("none.json")) }, config());
        QCOMPARE(missing.exitCode, 1);
        QVERIFY(missing.output.contains(QStringLiteral("cannot read")));
    }

    void badSettingsAreReportedNotFatal()
    {
        const QString ini = m_dir.filePath(QStringLiteral("bad.ini"));
        QVERIFY(writeFile(ini, "[Compute]\nCpuPercent=900\n"));
        const auto result = node({ QStringLiteral("--version") }, ini);
        QCOMPARE(result.exitCode, 0);
        const auto help = run(QStringLiteral(TESSERA_NODE), { QStringLiteral("--config"), ini, QStringLiteral("train-local") });
        QVERIFY2(help.output.contains(QStringLiteral("Compute/CpuPercent")), qPrintable(help.output));
    }
};

QTEST_GUILESS_MAIN(NodeCliTest)
#include "tst_nodecli.moc"
