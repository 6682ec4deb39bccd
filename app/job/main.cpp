// tessera-job: the job owner's command line. Wiring only: the protocol lives in net/BrokerClient.

#include <core/jobspec.h>
#include <core/settings/settings.h>
#include <core/signing.h>
#include <net/brokerclient.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>
#include <QTextStream>
#include <QThread>

using namespace tessera;

namespace {

QTextStream& out()
{
    static QTextStream stream(stdout);
    return stream;
}

int fail(const QString& message)
{
    QTextStream(stderr) << "tessera-job: " << message << Qt::endl;
    return 1;
}

const char* Usage = R"(Usage: tessera-job [--broker ADDRESS] [--config FILE] COMMAND [ARGS]

Commands:
  submit JOB.json [--estimate]
                         upload the files the job names (TorchScript model, tensor files) and submit it;
                         prints the job id. --estimate prints the broker's quote instead and submits nothing
  status [ID]            one job's progress, or every job's
  wait ID [--json]       follow a job to its end, printing each round's test accuracy
  fetch ID -o FILE       save the newest global weights (torch.load reads them)
  list                   every job on the broker
  cancel ID              stop a job (its unspent budget goes back)
  balance [ACCOUNT]      credits held and bonded (yours under CURVE; ACCOUNT on a local broker)
  ledger                 whether the broker's books balance, and how much was ever minted
  nodes                  the nodes the broker knows, with their record: shards done and failed, results
                         verified, disputes lost, dispute timeouts, stake and what was slashed
  verifications [ID]     the checks of a job (or of all jobs): re-executions, canaries, disputes, outcomes
  receipt CAUSE -o FILE  the broker's signed receipt for a payment (causes: escrow:JOB, pay:JOB/ROUND/SHARD,
                         verify:CHECK, slash:CHECK:NODE:honest|owner, refund:JOB)
  verify-receipt FILE [--signer KEY]
                         check a receipt offline: its signature, and (with --signer) that the broker whose
                         base64 signing key you know signed it

The broker is --broker, else the first of Node/Brokers in the settings, else tcp://127.0.0.1:5555.
)";

QString describe(const QJsonObject& job)
{
    const auto history = job.value(QStringLiteral("history")).toArray();
    QString text = QStringLiteral("%1  %2  %3  round %4/%5")
                       .arg(job.value(QStringLiteral("jobId")).toString(), job.value(QStringLiteral("state")).toString(),
                           job.value(QStringLiteral("name")).toString())
                       .arg(job.value(QStringLiteral("round")).toInteger())
                       .arg(job.value(QStringLiteral("rounds")).toInteger());
    if (!history.isEmpty())
        text += QStringLiteral("  test accuracy %1%")
                    .arg(history.last().toObject().value(QStringLiteral("testAccuracy")).toDouble() * 100.0, 0, 'f', 2);
    if (job.contains(QStringLiteral("failure")))
        text += QStringLiteral("  (%1)").arg(job.value(QStringLiteral("failure")).toString());
    return text;
}

int estimate(net::BrokerClient& client, const core::JobSpec& spec)
{
    auto reply = client.request(net::Command::Quote, { { QStringLiteral("job"), spec.toJson() } });
    if (!reply)
        return fail(reply.error().message);
    const auto quote = reply->value(QStringLiteral("quote")).toObject();
    out() << QStringLiteral("%1 shards of %2 work units (1 GFLOP of training each) at %3 credits a unit\n")
                 .arg(quote.value(QStringLiteral("shards")).toInteger())
                 .arg(quote.value(QStringLiteral("unitsPerShard")).toInteger())
                 .arg(quote.value(QStringLiteral("pricePerUnit")).toString());
    out() << "  training      " << quote.value(QStringLiteral("training")).toString() << " credits ("
          << quote.value(QStringLiteral("pricePerShard")).toString() << " a shard)\n";
    out() << "  verification  " << quote.value(QStringLiteral("verification")).toString()
          << " credits (expected re-executions)\n";
    out() << "  total         " << quote.value(QStringLiteral("total")).toString() << " credits; the job's budget is "
          << spec.budget.toString() << "\n";
    out() << "  worst case    " << quote.value(QStringLiteral("worstCase")).toString()
          << " credits (every shard re-executed, as while the nodes are new)" << Qt::endl;
    return 0;
}

int submit(net::BrokerClient& client, const QString& path, bool onlyEstimate)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1").arg(path));
    auto spec = core::JobSpec::fromJsonText(file.readAll());
    if (!spec)
        return fail(QStringLiteral("%1: %2").arg(path, spec.error().toString()));
    const QDir base = QFileInfo(path).absoluteDir();
    if (onlyEstimate && spec->model.source == core::ModelSpec::Source::Zoo
        && spec->dataset.source == core::DatasetSpec::Source::Builtin)
        return estimate(client, *spec);
    // Files travel as blobs; the job names them by their SHA-256.
    if (auto uploaded = client.uploadJobFiles(*spec, base.absolutePath(),
            [](const QString& name, std::int64_t bytes) {
                out() << "uploading " << name << " (" << bytes << " bytes)" << Qt::endl;
            });
        !uploaded)
        return fail(uploaded.error().toString());
    if (onlyEstimate)
        return estimate(client, *spec);
    auto reply = client.request(net::Command::Submit, { { QStringLiteral("job"), spec->toJson() } });
    if (!reply)
        return fail(reply.error().message);
    out() << reply->value(QStringLiteral("jobId")).toString() << Qt::endl;
    return 0;
}

int wait(net::BrokerClient& client, const QString& jobId, bool json)
{
    qint64 shown = 0;
    for (;;) {
        auto reply = client.request(net::Command::Status, { { QStringLiteral("jobId"), jobId } });
        if (!reply)
            return fail(reply.error().message);
        const auto job = reply->value(QStringLiteral("job")).toObject();
        const auto history = job.value(QStringLiteral("history")).toArray();
        for (; shown < history.size(); ++shown) {
            const auto round = history.at(shown).toObject();
            if (!json)
                out() << QStringLiteral("round %1/%2  test accuracy %3%  test loss %4  train loss %5")
                             .arg(round.value(QStringLiteral("round")).toInteger() + 1)
                             .arg(job.value(QStringLiteral("rounds")).toInteger())
                             .arg(round.value(QStringLiteral("testAccuracy")).toDouble() * 100.0, 0, 'f', 2)
                             .arg(round.value(QStringLiteral("testLoss")).toDouble(), 0, 'f', 4)
                             .arg(round.value(QStringLiteral("trainLoss")).toDouble(), 0, 'f', 4)
                      << Qt::endl;
        }
        const QString state = job.value(QStringLiteral("state")).toString();
        if (state != u"running") {
            if (json)
                out() << QJsonDocument(job).toJson();
            else
                out() << describe(job) << Qt::endl;
            return state == u"finished" ? 0 : 1;
        }
        QThread::msleep(500);
    }
}

int fetch(net::BrokerClient& client, const QString& jobId, const QString& path)
{
    auto bytes = client.jobWeights(jobId);
    if (!bytes)
        return fail(bytes.error().message);
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(*bytes) != bytes->size() || !file.commit())
        return fail(QStringLiteral("cannot write %1").arg(path));
    out() << "wrote " << path << " (" << bytes->size() << " bytes; torch.load reads it)" << Qt::endl;
    return 0;
}

int verifyReceipt(const QStringList& args)
{
    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("file"), {});
    parser.addOption({ QStringLiteral("signer"), QStringLiteral("the broker's signing key (base64)"), QStringLiteral("KEY") });
    if (!parser.parse(QStringList { QStringLiteral("verify-receipt") } + args) || parser.positionalArguments().size() != 1)
        return fail(QStringLiteral("usage: tessera-job verify-receipt FILE [--signer KEY]"));
    QFile file(parser.positionalArguments().first());
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1").arg(file.fileName()));
    const auto receipt = QJsonDocument::fromJson(file.readAll()).object();
    if (receipt.value(QStringLiteral("kind")).toString() != u"tessera-receipt")
        return fail(QStringLiteral("%1 is not a Tessera receipt").arg(file.fileName()));
    if (auto status = core::verifyDocument(receipt); !status)
        return fail(QStringLiteral("INVALID receipt: %1").arg(status.error().message));
    const QString signer = receipt.value(QStringLiteral("signer")).toString();
    if (parser.isSet(QStringLiteral("signer")) && parser.value(QStringLiteral("signer")) != signer)
        return fail(QStringLiteral("INVALID receipt: signed by %1, not by the broker you named").arg(signer));
    out() << "valid receipt: " << receipt.value(QStringLiteral("amount")).toString() << " credits from "
          << receipt.value(QStringLiteral("debit")).toString() << " to " << receipt.value(QStringLiteral("credit")).toString()
          << " for " << receipt.value(QStringLiteral("cause")).toString() << " at "
          << receipt.value(QStringLiteral("at")).toString() << ", signed by broker " << signer << Qt::endl;
    return 0;
}

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("tessera-job"));
    QStringList args = app.arguments();
    QString brokerAddress;
    QString configPath = core::settings::Settings::defaultFilePath();
    while (args.size() > 1 && args[1].startsWith(u'-')) {
        const QString option = args.takeAt(1);
        if (option == u"--version") {
            out() << "tessera-job " << TESSERA_VERSION << Qt::endl;
            return 0;
        }
        if (option == u"--help" || option == u"-h") {
            out() << Usage;
            return 0;
        }
        if ((option == u"--broker" || option == u"--config") && args.size() > 1) {
            (option == u"--broker" ? brokerAddress : configPath) = args.takeAt(1);
            continue;
        }
        return fail(QStringLiteral("unknown option %1").arg(option));
    }
    if (args.size() < 2) {
        QTextStream(stderr) << Usage;
        return 2;
    }
    if (args.size() >= 3 && args[1] == u"verify-receipt")
        return verifyReceipt(args.mid(2));
    core::settings::Settings settings(configPath);
    settings.load();
    if (brokerAddress.isEmpty()) {
        const auto brokers = settings.listValue(core::settings::names::NodeBrokers);
        brokerAddress = brokers.isEmpty() ? QStringLiteral("tcp://127.0.0.1:5555") : brokers.first();
    }
    auto address = net::BrokerAddress::parse(brokerAddress);
    if (!address)
        return fail(address.error().toString());
    net::BrokerClient client(*address, std::nullopt);

    const QString command = args[1];
    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("arguments"), {});
    parser.addOption({ QStringLiteral("json"), QStringLiteral("JSON output") });
    parser.addOption({ QStringLiteral("estimate"), QStringLiteral("print the quote, submit nothing") });
    parser.addOption(
        { { QStringLiteral("o"), QStringLiteral("output") }, QStringLiteral("output file"), QStringLiteral("FILE") });
    QStringList rest = args;
    rest.removeAt(1);
    if (!parser.parse(rest))
        return fail(parser.errorText());
    const auto positional = parser.positionalArguments();

    if (command == u"submit" && positional.size() == 1)
        return submit(client, positional[0], parser.isSet(QStringLiteral("estimate")));
    if (command == u"balance" && positional.size() <= 1) {
        QJsonObject header;
        if (!positional.isEmpty())
            header.insert(QStringLiteral("account"), positional[0]);
        auto reply = client.request(net::Command::Balance, header);
        if (!reply)
            return fail(reply.error().message);
        out() << reply->value(QStringLiteral("account")).toString() << ": " << reply->value(QStringLiteral("balance")).toString()
              << " credits, " << reply->value(QStringLiteral("stake")).toString() << " bonded" << Qt::endl;
        return 0;
    }
    if (command == u"receipt" && positional.size() == 1 && parser.isSet(QStringLiteral("output"))) {
        auto reply = client.request(net::Command::Receipt, { { QStringLiteral("cause"), positional[0] } });
        if (!reply)
            return fail(reply.error().message);
        QSaveFile file(parser.value(QStringLiteral("output")));
        if (!file.open(QIODevice::WriteOnly))
            return fail(QStringLiteral("cannot write %1").arg(file.fileName()));
        file.write(QJsonDocument(reply->value(QStringLiteral("receipt")).toObject()).toJson());
        if (!file.commit())
            return fail(QStringLiteral("cannot write %1").arg(file.fileName()));
        out() << "wrote " << file.fileName() << Qt::endl;
        return 0;
    }
    if (command == u"nodes" && positional.isEmpty()) {
        auto reply = client.request(net::Command::Nodes, {});
        if (!reply)
            return fail(reply.error().message);
        const auto nodes = reply->value(QStringLiteral("nodes")).toArray();
        if (parser.isSet(QStringLiteral("json")))
            out() << QJsonDocument(nodes).toJson();
        for (const auto& value : nodes) {
            const auto node = value.toObject();
            if (!parser.isSet(QStringLiteral("json")))
                out() << QStringLiteral("%1  %2  %3  done %4  failed %5  verified %8  disputes lost %9  timeouts %10  "
                                        "stake %11  slashed %12  %6 samples/s  last seen %7")
                             .arg(node.value(QStringLiteral("nodeId")).toString().left(12),
                                 node.value(QStringLiteral("name")).toString(),
                                 node.value(QStringLiteral("online")).toBool() ? QStringLiteral("online")
                                                                               : QStringLiteral("offline"))
                             .arg(node.value(QStringLiteral("shardsDone")).toInteger())
                             .arg(node.value(QStringLiteral("shardsFailed")).toInteger())
                             .arg(node.value(QStringLiteral("benchmarkSamplesPerSecond")).toDouble(), 0, 'f', 0)
                             .arg(node.value(QStringLiteral("lastSeen")).toString())
                             .arg(node.value(QStringLiteral("verified")).toInteger())
                             .arg(node.value(QStringLiteral("disputesLost")).toInteger())
                             .arg(node.value(QStringLiteral("timeouts")).toInteger())
                             .arg(
                                 node.value(QStringLiteral("stake")).toString(), node.value(QStringLiteral("slashed")).toString())
                      << Qt::endl;
        }
        if (nodes.isEmpty() && !parser.isSet(QStringLiteral("json")))
            out() << "no nodes" << Qt::endl;
        return 0;
    }
    if (command == u"verifications" && positional.size() <= 1) {
        auto reply = client.request(
            net::Command::Verifications, { { QStringLiteral("jobId"), positional.isEmpty() ? QString() : positional[0] } });
        if (!reply)
            return fail(reply.error().message);
        const auto checks = reply->value(QStringLiteral("verifications")).toArray();
        if (parser.isSet(QStringLiteral("json"))) {
            out() << QJsonDocument(checks).toJson();
            return 0;
        }
        for (const auto& value : checks) {
            const auto check = value.toObject();
            out() << QStringLiteral("%1  %2  job %3 round %4 shard %5  checked %6 by %7  %8  lost: %9  %10")
                         .arg(check.value(QStringLiteral("id")).toString(), check.value(QStringLiteral("kind")).toString(),
                             check.value(QStringLiteral("jobId")).toString())
                         .arg(check.value(QStringLiteral("round")).toInteger())
                         .arg(check.value(QStringLiteral("shard")).toInteger())
                         .arg(check.value(QStringLiteral("checked")).toString().left(12),
                             check.value(QStringLiteral("verifier")).toString().left(12),
                             check.value(QStringLiteral("state")).toString(), check.value(QStringLiteral("outcome")).toString(),
                             check.value(QStringLiteral("detail")).toString())
                  << Qt::endl;
        }
        if (checks.isEmpty())
            out() << "no checks" << Qt::endl;
        return 0;
    }
    if (command == u"ledger" && positional.isEmpty()) {
        auto reply = client.request(net::Command::Ledger, {});
        if (!reply)
            return fail(reply.error().message);
        if (parser.isSet(QStringLiteral("json")))
            out() << QJsonDocument(*reply).toJson();
        else if (reply->value(QStringLiteral("consistent")).toBool())
            out() << "the books balance; " << reply->value(QStringLiteral("minted")).toString() << " credits minted in all"
                  << Qt::endl;
        else
            out() << "THE BOOKS DO NOT BALANCE: " << reply->value(QStringLiteral("problem")).toString() << Qt::endl;
        return reply->value(QStringLiteral("consistent")).toBool() ? 0 : 1;
    }
    if (command == u"wait" && positional.size() == 1)
        return wait(client, positional[0], parser.isSet(QStringLiteral("json")));
    if (command == u"fetch" && positional.size() == 1 && parser.isSet(QStringLiteral("output")))
        return fetch(client, positional[0], parser.value(QStringLiteral("output")));
    if (command == u"cancel" && positional.size() == 1) {
        auto reply = client.request(net::Command::Cancel, { { QStringLiteral("jobId"), positional[0] } });
        if (!reply)
            return fail(reply.error().message);
        out() << "cancelled " << positional[0] << Qt::endl;
        return 0;
    }
    if ((command == u"status" && positional.size() == 1)) {
        auto reply = client.request(net::Command::Status, { { QStringLiteral("jobId"), positional[0] } });
        if (!reply)
            return fail(reply.error().message);
        const auto job = reply->value(QStringLiteral("job")).toObject();
        if (parser.isSet(QStringLiteral("json")))
            out() << QJsonDocument(job).toJson();
        else
            out() << describe(job) << Qt::endl;
        return 0;
    }
    if ((command == u"list" || command == u"status") && positional.isEmpty()) {
        auto reply = client.request(net::Command::List, {});
        if (!reply)
            return fail(reply.error().message);
        const auto jobs = reply->value(QStringLiteral("jobs")).toArray();
        if (parser.isSet(QStringLiteral("json")))
            out() << QJsonDocument(jobs).toJson();
        for (const auto& job : jobs) {
            if (!parser.isSet(QStringLiteral("json")))
                out() << describe(job.toObject()) << Qt::endl;
        }
        if (jobs.isEmpty() && !parser.isSet(QStringLiteral("json")))
            out() << "no jobs" << Qt::endl;
        return 0;
    }
    QTextStream(stderr) << Usage;
    return 2;
}
