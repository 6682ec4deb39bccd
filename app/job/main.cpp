// tessera-job: the job owner's command line. Wiring only: the protocol lives in net/BrokerClient.
// One function per command, dispatched from one table (which also writes the help).

#include "chunking.h"

#include "ledgeraudit.h"
#include <core/inference/outputs.h>

#include <app/common/cli.h>
#include <app/common/inferencejob.h>
#include <core/jobspec.h>
#include <core/ledger/loghead.h>
#include <core/ledger/logrecord.h>
#include <core/settings/settings.h>
#include <core/signing.h>
#include <net/brokerclient.h>
#include <net/identity.h>
#include <net/messages.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QSaveFile>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTextStream>
#include <QThread>
#include <QUuid>

#include <cmath>
#include <functional>

using namespace tessera;

namespace {

using app::cli::fail;
using app::cli::out;
using app::cli::printJson;

// What a command is given: its parsed arguments and, on first use, the owner's identity and a
// connection to the broker made with it.
struct Context {
    QCommandLineParser& parser;
    QString brokerAddress;
    QStringList otherBrokers; // of the same network (--broker again), tried in order
    QString identityFile;
    std::unique_ptr<net::BrokerClient> client;
    std::optional<net::Identity> me;

    bool json() const { return parser.isSet(QStringLiteral("json")); }
    QStringList positional() const { return parser.positionalArguments(); }

    // The identity, created on first use (docs/BROKER.md, "Identity").
    core::Result<net::Identity*> identity()
    {
        if (!me) {
            const bool fresh = !QFile::exists(identityFile);
            auto loaded = net::Identity::loadOrCreate(identityFile);
            if (!loaded)
                return loaded.error();
            me = *loaded;
            if (fresh)
                QTextStream(stderr) << "tessera-job: created your identity " << identityFile
                                    << ". It is your account on every broker: keep a copy (tessera-job identity export "
                                       "FILE); a lost identity is lost credits."
                                    << Qt::endl;
        }
        return &*me;
    }

    core::Result<net::BrokerClient*> broker()
    {
        if (!client) {
            auto address = net::BrokerAddress::parse(brokerAddress);
            if (!address)
                return address.error();
            auto mine = identity();
            if (!mine)
                return mine.error();
            client = std::make_unique<net::BrokerClient>(*address, (*mine)->keys);
            QList<net::BrokerAddress> others;
            for (const auto& other : otherBrokers) {
                auto parsed = net::BrokerAddress::parse(other);
                if (!parsed)
                    return parsed.error();
                others.append(*parsed);
            }
            client->setOtherBrokers(others);
        }
        return client.get();
    }

    // One request whose reply is read as Reply; an error is printed and comes back as the exit status.
    template<typename Reply> std::optional<Reply> call(net::Command command, const QJsonObject& header, int& status)
    {
        auto reply = ask(command, header, status);
        if (!reply)
            return std::nullopt;
        auto typed = Reply::fromHeader(*reply);
        if (!typed) {
            status = fail(QStringLiteral("the broker's answer is unreadable: %1").arg(typed.error().toString()));
            return std::nullopt;
        }
        return std::move(*typed);
    }

    // Every page of a paginated listing (LIST, NODES, VERIFICATIONS), rows appended from each; with
    // `all` (--all of list and nodes) also what aged out.
    template<typename Reply, typename Rows>
    std::optional<Reply> listAll(
        net::Command command, Rows Reply::*rows, int& status, const QJsonObject& fields = {}, bool all = false)
    {
        net::PageRequest request;
        request.all = all;
        std::optional<Reply> whole;
        for (;;) {
            auto header = request.toHeader();
            for (auto it = fields.begin(); it != fields.end(); ++it)
                header.insert(it.key(), it.value());
            auto page = call<Reply>(command, header, status);
            if (!page)
                return std::nullopt;
            if (!whole)
                whole = *page;
            else
                ((*whole).*rows).append((*page).*rows);
            if (!page->page.next || *page->page.next <= request.offset)
                return whole;
            request.offset = *page->page.next;
        }
    }

    // One request; an error is printed and comes back as the exit status.
    std::optional<QJsonObject> ask(net::Command command, const QJsonObject& header, int& status)
    {
        auto connection = broker();
        if (!connection) {
            status = fail(connection.error().toString());
            return std::nullopt;
        }
        auto reply = (*connection)->request(command, header);
        if (!reply) {
            status = fail(reply.error().toString());
            return std::nullopt;
        }
        return *reply;
    }
};

QString text(const QJsonObject& object, const char* key)
{
    return object.value(QLatin1String(key)).toString();
}

QString percent(double fraction)
{
    return QString::number(fraction * 100.0, 'f', 2);
}

// One line of a job. All fields are substituted at once: a job's name or a failure that contains
// "%1" stays as it is.
QString describe(const core::broker::JobStatus& job)
{
    QString line
        = QStringLiteral("%1  %2  %3  round %4/%5")
              .arg(job.id, core::broker::nameOf(job.state), job.name, QString::number(job.round), QString::number(job.rounds));
    if (!job.serving.isEmpty()) { // a served job: its replicas and requests
        const auto& serving = job.serving;
        line += QStringLiteral("  serving on %1 of %2 replicas, %3 answered (%4 checked), %5 tokens, %6 waiting")
                    .arg(serving.value(QStringLiteral("replicas")).toInteger())
                    .arg(job.shards)
                    .arg(serving.value(QStringLiteral("answered")).toInteger())
                    .arg(serving.value(QStringLiteral("checked")).toInteger())
                    .arg(serving.value(QStringLiteral("tokens")).toInteger())
                    .arg(serving.value(QStringLiteral("queued")).toInteger()
                        + serving.value(QStringLiteral("answering")).toInteger());
    } else if (job.state == core::broker::JobState::Running && job.shards > 0) {
        line += QStringLiteral("  %1 %2/%3")
                    .arg(job.pipelines.isEmpty()
                                && !job.spec.value(QStringLiteral("training")).toObject().contains(QStringLiteral("pipeline"))
                            ? QStringLiteral("shards")
                            : QStringLiteral("stage tasks"))
                    .arg(job.shardsDone)
                    .arg(job.shards);
    }
    for (const auto& value : job.pipelines) { // a pipeline job's shards in training: who holds each stage
        const auto pipeline = value.toObject();
        QStringList stages;
        for (const auto& stage : pipeline.value(QStringLiteral("stages")).toArray()) {
            const auto entry = stage.toObject();
            stages.append(QStringLiteral("%1 on %2%3")
                              .arg(entry.value(QStringLiteral("stage")).toInteger() + 1)
                              .arg(entry.value(QStringLiteral("node")).toString().left(12))
                              .arg(entry.value(QStringLiteral("answered")).toBool() ? QStringLiteral(" (done)") : QString()));
        }
        line += QStringLiteral("\n    shard %1: stage %2")
                    .arg(pipeline.value(QStringLiteral("shard")).toInteger())
                    .arg(stages.join(QStringLiteral(", stage ")));
    }
    if (!job.history.isEmpty() && job.inference == u"score")
        line += QStringLiteral("  mean loss %1 (perplexity %2)")
                    .arg(job.history.last().testLoss, 0, 'f', 4)
                    .arg(std::exp(job.history.last().testLoss), 0, 'f', 2);
    else if (!job.history.isEmpty() && job.inference == u"classify")
        line += QStringLiteral("  accuracy %1%").arg(percent(job.history.last().testAccuracy));
    else if (!job.history.isEmpty() && job.inference.isEmpty())
        line += QStringLiteral("  test accuracy %1%").arg(percent(job.history.last().testAccuracy));
    if (!job.failure.isEmpty())
        line += QStringLiteral("  (%1)").arg(job.failure);
    return line;
}

int estimate(Context& context, const core::JobSpec& spec)
{
    int status = 0;
    const auto reply = context.call<net::QuoteReply>(net::Command::Quote, net::QuoteRequest { spec }.toHeader(), status);
    if (!reply)
        return status;
    const auto& quote = reply->quote;
    if (context.json())
        return printJson(QJsonDocument(quote.toJson()));
    if (!quote.pricePerToken.isZero()) {
        out() << QStringLiteral("served on %1 replicas: %2 credits a token an answer reads or writes (a checked answer "
                                "twice); the job's budget is %3\n")
                     .arg(QString::number(quote.shards), quote.pricePerToken.toString(), spec.budget.toString())
              << Qt::flush;
        return 0;
    }
    out() << QStringLiteral("%1 shards of %2 work units (1 GFLOP of training each) at %3 credits a unit\n")
                 .arg(QString::number(quote.shards), QString::number(quote.unitsPerShard), quote.pricePerUnit.toString());
    out() << "  training      " << quote.training.toString() << " credits (" << quote.pricePerShard.toString() << " a shard)\n";
    out() << "  verification  " << quote.verification.toString() << " credits (expected re-executions)\n";
    out() << "  total         " << quote.total.toString() << " credits; the job's budget is " << spec.budget.toString() << "\n";
    out() << "  worst case    " << quote.worstCase.toString() << " credits (every shard re-executed, as while the nodes are new)"
          << Qt::endl;
    return 0;
}

// A job file as the broker reads it: an inference job's fromJob and prompts file resolved first.
core::Result<core::JobSpec> readJobFile(Context& context, const QString& path, const QByteArray& text)
{
    auto json = core::parseJsonObject(text);
    if (!json)
        return json.error();
    auto statusOf = [&](const QString& jobId) -> core::Result<core::broker::JobStatus> {
        int exit = 0;
        const auto reply = context.call<net::StatusReply>(net::Command::Status, net::JobRequest { jobId }.toHeader(), exit);
        if (!reply)
            return core::Error { {}, QStringLiteral("the broker did not say what job %1 is").arg(jobId) };
        return reply->job;
    };
    auto resolved = app::resolveInferenceJob(*json, QFileInfo(path).absoluteDir().absolutePath(), statusOf);
    if (!resolved)
        return resolved.error();
    return core::JobSpec::fromJson(*resolved);
}

int submit(Context& context)
{
    const QString path = context.positional().at(0);
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1").arg(path));
    auto spec = readJobFile(context, path, file.readAll());
    if (!spec)
        return fail(QStringLiteral("%1: %2").arg(path, spec.error().toString()));
    const bool onlyEstimate = context.parser.isSet(QStringLiteral("estimate"));
    // Priced without uploading anything where the job names no file of its own (an inference job's
    // weights or prompts file is uploaded first: the broker reads a job's files by their hash).
    if (onlyEstimate && spec->model.source == core::ModelSpec::Source::Zoo
        && spec->dataset.source == core::DatasetSpec::Source::Builtin && spec->model.initialWeightsFile.isEmpty()
        && spec->inference.promptsFile.isEmpty())
        return estimate(context, *spec);
    auto connection = context.broker();
    if (!connection)
        return fail(connection.error().toString());
    // Files travel as blobs; the job names them by their SHA-256. Progress goes to stderr, so that
    // stdout holds only the job id (or the JSON).
    if (auto uploaded = (*connection)
                            ->uploadJobFiles(*spec, QFileInfo(path).absoluteDir().absolutePath(),
                                [](const QString& name, std::int64_t bytes) {
                                    QTextStream(stderr) << "uploading " << name << " (" << bytes << " bytes)" << Qt::endl;
                                });
        !uploaded)
        return fail(uploaded.error().toString());
    if (onlyEstimate)
        return estimate(context, *spec);
    const QString requestId = context.parser.value(QStringLiteral("request-id"));
    if (!requestId.isEmpty() && !net::SubmitRequest::isRequestId(requestId))
        return fail(QStringLiteral("--request-id: must be 1 to 64 of A-Z a-z 0-9 . _ : -"));
    // Asked again under the same request id while no answer comes: the broker creates one job.
    const auto jobId = (*connection)->submit(*spec, requestId);
    if (!jobId)
        return fail(jobId.error().toString());
    if (context.json())
        return printJson(QJsonDocument(net::SubmitReply { *jobId }.toHeader()));
    out() << *jobId << Qt::endl;
    return 0;
}

int status(Context& context)
{
    int exit = 0;
    if (context.positional().isEmpty()) {
        const auto reply
            = context.listAll(net::Command::List, &net::ListReply::jobs, exit, {}, context.parser.isSet(QStringLiteral("all")));
        if (!reply)
            return exit;
        if (context.json()) {
            QJsonArray jobs;
            for (const auto& job : reply->jobs)
                jobs.append(job.full ? job.toJson() : job.toPublicJson());
            return printJson(QJsonDocument(jobs));
        }
        for (const auto& job : reply->jobs)
            out() << describe(job) << "\n";
        if (reply->jobs.isEmpty())
            out() << "no jobs\n";
        out() << Qt::flush;
        return 0;
    }
    const auto reply
        = context.call<net::StatusReply>(net::Command::Status, net::JobRequest { context.positional().at(0) }.toHeader(), exit);
    if (!reply)
        return exit;
    if (context.json())
        return printJson(QJsonDocument(reply->job.full ? reply->job.toJson() : reply->job.toPublicJson()));
    out() << describe(reply->job) << Qt::endl;
    return 0;
}

int wait(Context& context)
{
    const QString jobId = context.positional().at(0);
    qsizetype shown = 0;
    for (;;) {
        int exit = 0;
        const auto reply = context.call<net::StatusReply>(net::Command::Status, net::JobRequest { jobId }.toHeader(), exit);
        if (!reply)
            return exit;
        const auto& job = reply->job;
        // A language model's figures are per token: its loss, perplexity and next-token accuracy.
        const bool text = job.spec.value(QStringLiteral("model")).toObject().value(QStringLiteral("context")).toInteger() > 0;
        for (; shown < job.history.size(); ++shown) {
            const auto& round = job.history.at(shown);
            if (context.json())
                continue;
            if (text)
                out() << QStringLiteral("round %1/%2  test loss %3  perplexity %4  token accuracy %5%  train loss %6")
                             .arg(QString::number(round.round + 1), QString::number(job.rounds),
                                 QString::number(round.testLoss, 'f', 4), QString::number(std::exp(round.testLoss), 'f', 2),
                                 percent(round.testAccuracy), QString::number(round.trainLoss, 'f', 4))
                      << Qt::endl;
            else
                out() << QStringLiteral("round %1/%2  test accuracy %3%  test loss %4  train loss %5")
                             .arg(QString::number(round.round + 1), QString::number(job.rounds), percent(round.testAccuracy),
                                 QString::number(round.testLoss, 'f', 4), QString::number(round.trainLoss, 'f', 4))
                      << Qt::endl;
        }
        if (job.state != core::broker::JobState::Running) {
            if (context.json())
                printJson(QJsonDocument(job.full ? job.toJson() : job.toPublicJson()));
            else
                out() << describe(job) << Qt::endl;
            return job.state == core::broker::JobState::Finished ? 0 : 1;
        }
        QThread::msleep(500);
    }
}

int fetch(Context& context)
{
    const QString path = context.parser.value(QStringLiteral("output"));
    const QString jobId = context.positional().at(0);
    int exit = 0;
    const auto reply = context.call<net::StatusReply>(net::Command::Status, net::JobRequest { jobId }.toHeader(), exit);
    if (!reply)
        return exit;
    const auto spec = core::JobSpec::fromJson(reply->job.spec);
    const bool inference = spec && spec->isInference();
    if (inference && spec->inference.serves())
        return fail(QStringLiteral("job %1 is a served job: its answers went to those who asked (tessera-job ask); it has no "
                                   "result to fetch")
                        .arg(jobId));
    if (inference && reply->job.state != core::broker::JobState::Finished)
        return fail(QStringLiteral("job %1 is %2 (%3 of %4 shards done): its result comes when it has finished")
                        .arg(jobId, core::broker::nameOf(reply->job.state), QString::number(reply->job.shardsDone),
                            QString::number(reply->job.shards)));
    auto connection = context.broker();
    if (!connection)
        return fail(connection.error().toString());
    auto bytes = (*connection)->jobWeights(jobId);
    if (!bytes)
        return fail(bytes.error().toString());
    if (inference && spec->inference.task == core::InferenceSpec::Task::Generate)
        *bytes = core::inference::withText(*bytes);
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(*bytes) != bytes->size() || !file.commit())
        return fail(QStringLiteral("cannot write %1").arg(path));
    if (context.json())
        return printJson(
            QJsonDocument(QJsonObject { { QStringLiteral("file"), path }, { QStringLiteral("bytes"), bytes->size() } }));
    out() << "wrote " << path << " (" << bytes->size()
          << (inference ? " bytes: one JSON line per input)" : " bytes; torch.load reads them)") << Qt::endl;
    return 0;
}

// Text from the job's newest weights: the language model runs in tessera-node (LibTorch), which
// tessera-job itself does without.
int sample(Context& context)
{
    const QString jobId = context.positional().at(0);
    int exit = 0;
    const auto reply = context.call<net::StatusReply>(net::Command::Status, net::JobRequest { jobId }.toHeader(), exit);
    if (!reply)
        return exit;
    const auto& job = reply->job;
    if (job.spec.isEmpty())
        return fail(
            QStringLiteral("the broker did not send job %1's spec (the job is not yours, or the broker is older)").arg(jobId));
    auto spec = core::JobSpec::fromJson(job.spec);
    if (!spec)
        return fail(spec.error().toString());
    if (spec->model.context < 1)
        return fail(QStringLiteral("job %1 trains a %2, not a language model: it writes no text").arg(jobId, spec->model.zoo));
    auto connection = context.broker();
    if (!connection)
        return fail(connection.error().toString());
    auto weights = (*connection)->jobWeights(jobId);
    if (!weights)
        return fail(weights.error().toString());
    QTemporaryDir dir;
    QSaveFile weightsFile(dir.filePath(QStringLiteral("weights.pt")));
    QSaveFile specFile(dir.filePath(QStringLiteral("job.json")));
    if (!dir.isValid() || !weightsFile.open(QIODevice::WriteOnly) || weightsFile.write(*weights) != weights->size()
        || !weightsFile.commit() || !specFile.open(QIODevice::WriteOnly)
        || specFile.write(QJsonDocument(spec->toJson()).toJson()) < 0 || !specFile.commit())
        return fail(QStringLiteral("cannot write the weights to a temporary folder"));
    QString node = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("tessera-node"));
    if (!QFileInfo(node).isExecutable())
        node = QStandardPaths::findExecutable(QStringLiteral("tessera-node"));
    if (node.isEmpty())
        return fail(QStringLiteral("writing text needs tessera-node (it runs the model with LibTorch); install it"));
    QStringList arguments { QStringLiteral("--config"), QStringLiteral("/dev/null"), QStringLiteral("sample"),
        weightsFile.fileName(), QStringLiteral("--job"), specFile.fileName() };
    for (const auto* option : { "prompt", "tokens", "temperature", "seed" }) {
        const QString name = QLatin1String(option);
        if (context.parser.isSet(name))
            arguments << QStringLiteral("--") + name << context.parser.value(name);
    }
    QProcess process;
    process.setProcessChannelMode(QProcess::ForwardedChannels);
    process.start(node, arguments);
    if (!process.waitForStarted() || !process.waitForFinished(-1))
        return fail(QStringLiteral("tessera-node did not run: %1").arg(process.errorString()));
    return process.exitStatus() == QProcess::NormalExit ? process.exitCode() : 1;
}

// A served job's model answers a prompt (docs/PROTOCOL.md, "Serving"): its text printed as the
// tokens come, or the answer as JSON.
int ask(Context& context)
{
    net::AskRequest request;
    request.jobId = context.positional().at(0);
    request.requestId = context.parser.isSet(QStringLiteral("request-id")) ? context.parser.value(QStringLiteral("request-id"))
                                                                           : QUuid::createUuid().toString(QUuid::WithoutBraces);
    QJsonObject question { { QStringLiteral("prompt"), context.parser.value(QStringLiteral("prompt")) } };
    if (context.parser.isSet(QStringLiteral("tokens")))
        question.insert(QStringLiteral("maxTokens"), context.parser.value(QStringLiteral("tokens")).toLongLong());
    if (context.parser.isSet(QStringLiteral("temperature")))
        question.insert(QStringLiteral("temperature"), context.parser.value(QStringLiteral("temperature")).toDouble());
    if (context.parser.isSet(QStringLiteral("seed")))
        question.insert(QStringLiteral("seed"), context.parser.value(QStringLiteral("seed")).toLongLong());
    if (context.parser.isSet(QStringLiteral("stop")))
        question.insert(QStringLiteral("stop"), QJsonArray::fromStringList(context.parser.values(QStringLiteral("stop"))));
    auto read = core::inference::Question::read(question, core::InferenceSpec::MaxTokens);
    if (!read)
        return fail(read.error().toString());
    request.question = *read;
    auto connection = context.broker();
    if (!connection)
        return fail(connection.error().toString());
    QString streamed;
    auto reply = (*connection)->streamingRequest(net::Command::Ask, request.toHeader(), [&](const net::Message& part) {
        auto tokens = net::TokensMessage::fromHeader(part.header);
        if (!tokens || context.json())
            return;
        // A stream that starts again lower (another node took the request and the two differed):
        // the text from there is replaced.
        const QString text = part.header.value(QStringLiteral("text")).toString();
        if (tokens->from < streamed.size())
            out() << "\n[from token " << tokens->from << "] ";
        streamed = streamed.left(tokens->from) + text;
        out() << text << Qt::flush;
    });
    if (!reply)
        return fail(QStringLiteral("%1 (ask again with --request-id %2: a request the broker answered is not charged twice)")
                        .arg(reply.error().toString(), request.requestId));
    const auto answer = reply->value(QStringLiteral("answer")).toObject();
    if (context.json())
        return printJson(QJsonDocument(answer));
    const QString text = answer.value(QStringLiteral("text")).toString();
    if (!text.startsWith(streamed))
        out() << "\n[answer] " << text;
    out() << "\n" << Qt::flush;
    QTextStream(stderr) << QStringLiteral("%1 tokens (%2), %3 credits%4\n")
                               .arg(answer.value(QStringLiteral("tokens")).toArray().size())
                               .arg(answer.value(QStringLiteral("finish")).toString(),
                                   answer.value(QStringLiteral("cost")).toString(),
                                   answer.value(QStringLiteral("checked")).toBool() ? QStringLiteral(", checked by a second node")
                                                                                    : QString())
                        << Qt::flush;
    return 0;
}

int cancel(Context& context)
{
    int exit = 0;
    const QString jobId = context.positional().at(0);
    const auto reply = context.ask(net::Command::Cancel, net::JobRequest { jobId }.toHeader(), exit);
    if (!reply)
        return exit;
    if (context.json())
        return printJson(QJsonDocument(QJsonObject { { QStringLiteral("cancelled"), jobId } }));
    out() << "cancelled " << jobId << Qt::endl;
    return 0;
}

int balance(Context& context)
{
    int exit = 0;
    const auto reply = context.ask(net::Command::Balance,
        net::BalanceRequest { context.positional().isEmpty() ? QString() : context.positional().at(0) }.toHeader(), exit);
    if (!reply)
        return exit;
    const auto account = core::broker::AccountRecord::fromJson(*reply);
    if (context.json())
        return printJson(QJsonDocument(account.toJson()));
    out() << account.account << ": " << account.balance.toString() << " credits, " << account.stake.toString() << " bonded"
          << Qt::endl;
    return 0;
}

int ledger(Context& context)
{
    int exit = 0;
    const auto reply = context.call<net::LedgerReply>(net::Command::Ledger, {}, exit);
    if (!reply)
        return exit;
    if (context.json())
        printJson(QJsonDocument(reply->toHeader()));
    else if (reply->consistent)
        out() << "the books balance; " << reply->minted << " credits minted in all" << Qt::endl;
    else
        out() << "THE BOOKS DO NOT BALANCE: " << reply->problem << Qt::endl;
    return reply->consistent ? 0 : 1;
}

int nodes(Context& context)
{
    int exit = 0;
    const auto reply
        = context.listAll(net::Command::Nodes, &net::NodesReply::nodes, exit, {}, context.parser.isSet(QStringLiteral("all")));
    if (!reply)
        return exit;
    if (context.json()) {
        QJsonArray list;
        for (const auto& node : reply->nodes)
            list.append(node.toJson());
        return printJson(QJsonDocument(list));
    }
    for (const auto& node : reply->nodes) {
        out() << QStringLiteral("%1  %2  %3  done %4  failed %5  verified %6  disputes lost %7  timeouts %8  stake %9  "
                                "slashed %10  %11 samples/s  last seen %12")
                     .arg(node.nodeId.left(12), node.name, node.online ? QStringLiteral("online") : QStringLiteral("offline"),
                         QString::number(node.shardsDone), QString::number(node.shardsFailed), QString::number(node.verified),
                         QString::number(node.disputesLost), QString::number(node.timeouts), node.stake.toString(),
                         node.slashed.toString(), QString::number(node.benchmarkSamplesPerSecond, 'f', 0), node.lastSeen)
              << "\n";
    }
    if (reply->nodes.isEmpty())
        out() << "no nodes\n";
    out() << Qt::flush;
    return 0;
}

int verifications(Context& context)
{
    int exit = 0;
    const QString jobId = context.positional().isEmpty() ? QString() : context.positional().at(0);
    const auto reply
        = context.listAll(net::Command::Verifications, &net::VerificationsReply::checks, exit, { { net::fields::JobId, jobId } });
    if (!reply)
        return exit;
    if (context.json()) {
        QJsonArray list;
        for (const auto& check : reply->checks)
            list.append(check.toJson());
        return printJson(QJsonDocument(list));
    }
    for (const auto& check : reply->checks) {
        out() << QStringLiteral("%1  %2  job %3 round %4 shard %5  checked %6 by %7  %8  lost: %9  %10")
                     .arg(check.id, check.kind, check.jobId, QString::number(check.round), QString::number(check.shard),
                         check.checked.left(12), check.verifier.left(12), check.state, check.outcome, check.detail)
              << "\n";
    }
    if (reply->checks.isEmpty())
        out() << "no checks\n";
    out() << Qt::flush;
    return 0;
}

int receipt(Context& context)
{
    int exit = 0;
    const auto reply = context.ask(net::Command::Receipt, net::ReceiptRequest { context.positional().at(0) }.toHeader(), exit);
    if (!reply)
        return exit;
    QSaveFile file(context.parser.value(QStringLiteral("output")));
    if (!file.open(QIODevice::WriteOnly))
        return fail(QStringLiteral("cannot write %1").arg(file.fileName()));
    // The receipt with its transfer's place in the ledger's log, outside its signature (docs/LEDGER.md, "Receipts").
    QJsonObject saved = reply->value(QStringLiteral("receipt")).toObject();
    if (reply->value(net::fields::Log).isObject())
        saved.insert(net::fields::Log, reply->value(net::fields::Log));
    file.write(QJsonDocument(saved).toJson());
    if (!file.commit())
        return fail(QStringLiteral("cannot write %1").arg(file.fileName()));
    if (context.json())
        return printJson(QJsonDocument(QJsonObject { { QStringLiteral("file"), file.fileName() } }));
    out() << "wrote " << file.fileName() << Qt::endl;
    return 0;
}

// Offline: needs no broker.
int verifyReceipt(Context& context)
{
    QFile file(context.positional().at(0));
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1").arg(file.fileName()));
    QJsonObject receipt = QJsonDocument::fromJson(file.readAll()).object();
    if (text(receipt, "kind") != u"tessera-receipt")
        return fail(QStringLiteral("%1 is not a Tessera receipt").arg(file.fileName()));
    // Its place in the ledger's log is outside its signature and checked on its own.
    const QJsonValue log = receipt.take(net::fields::Log);
    if (auto status = core::verifyDocument(receipt); !status)
        return fail(QStringLiteral("INVALID receipt: %1").arg(status.error().message));
    const QString signer = text(receipt, "signer");
    if (context.parser.isSet(QStringLiteral("signer")) && context.parser.value(QStringLiteral("signer")) != signer)
        return fail(QStringLiteral("INVALID receipt: signed by %1, not by the broker you named").arg(signer));
    std::optional<core::ledger::LogHead> head;
    if (!log.isUndefined()) {
        auto logged = core::ledger::checkReceiptLog(receipt, log.toObject());
        if (!logged)
            return fail(QStringLiteral("INVALID receipt: its place in the ledger's log does not hold: %1")
                            .arg(logged.error().toString()));
        head = *logged;
    }
    if (context.json()) {
        QJsonObject result { { QStringLiteral("valid"), true }, { QStringLiteral("receipt"), receipt } };
        if (head)
            result.insert(QStringLiteral("logged"), log);
        return printJson(QJsonDocument(result));
    }
    out() << "valid receipt: " << text(receipt, "amount") << " credits from " << text(receipt, "debit") << " to "
          << text(receipt, "credit") << " for " << text(receipt, "cause") << " at " << text(receipt, "at")
          << ", signed by broker " << signer << Qt::endl;
    if (head)
        out() << "in the ledger's log: entry " << log.toObject().value(net::fields::Index).toInteger() << " of the " << head->size
              << " under the signed head with root " << head->root.toHex() << " (network " << head->network << ")" << Qt::endl;
    else
        out() << "no proof of its place in the ledger's log (a receipt from an older broker)" << Qt::endl;
    return 0;
}

app::job::Ask askerOf(Context& context)
{
    return
        [&context](net::Command command, const QJsonObject& header, int& status) { return context.ask(command, header, status); };
}

int auditCommand(Context& context)
{
    return app::job::audit(askerOf(context), context.json());
}

int checkHeadCommand(Context& context)
{
    return app::job::checkHead(askerOf(context), context.positional().at(0), context.json());
}

// Offline: a node's portable record (docs/LEDGER.md, "Portable records").
int verifyRecord(Context& context)
{
    QFile file(context.positional().at(0));
    if (!file.open(QIODevice::ReadOnly))
        return fail(QStringLiteral("cannot read %1").arg(file.fileName()));
    const auto record = QJsonDocument::fromJson(file.readAll()).object();
    auto summary = core::ledger::verifyRecord(record, context.parser.value(QStringLiteral("signer")));
    if (!summary)
        return fail(QStringLiteral("INVALID record: %1").arg(summary.error().toString()));
    const auto head = record.value(QStringLiteral("head")).toObject();
    if (context.json())
        return printJson(QJsonDocument(
            QJsonObject { { QStringLiteral("valid"), true }, { QStringLiteral("node"), record.value(QStringLiteral("node")) },
                { QStringLiteral("network"), head.value(QStringLiteral("network")) },
                { QStringLiteral("signer"), head.value(QStringLiteral("signer")) },
                { QStringLiteral("summary"), summary->toJson() } }));
    out() << "valid record of node " << text(record, "node") << " on network " << text(head, "network") << " (head of "
          << head.value(QStringLiteral("size")).toInteger() << " entries signed by " << text(head, "signer")
          << "): " << summary->entries << " entries, " << summary->verified << " results verified, " << summary->agreed
          << " checks agreed, " << summary->disputesLost << " disputes lost, " << summary->slashes << " slashes ("
          << core::Credits::fromMicro(summary->slashedMicro).toString() << " credits), " << summary->earned() << " credits earned"
          << Qt::endl;
    return 0;
}

int whoami(Context& context)
{
    auto mine = context.identity();
    if (!mine)
        return fail(mine.error().toString());
    const auto& me = **mine;
    if (context.json())
        return printJson(QJsonDocument(QJsonObject { { QStringLiteral("account"), me.account() },
            { QStringLiteral("keyFile"), me.keyFile }, { QStringLiteral("signingFile"), me.signingFile },
            { QStringLiteral("signingKey"), QString::fromLatin1(me.signing.publicKey.toBase64()) } }));
    out() << me.account() << "\n"
          << "  your account on every broker (and your node's id), from " << me.keyFile << " and " << me.signingFile
          << "\n  whoever holds these files holds its credits, and a lost identity is lost credits: keep a copy"
             " (tessera-job identity export FILE)"
          << Qt::endl;
    return 0;
}

int identityCommand(Context& context)
{
    const auto positional = context.positional();
    const QString action = positional.at(0);
    const QString file = positional.size() > 1 ? positional.at(1) : QString();
    if (action == u"export" && !file.isEmpty()) {
        auto mine = context.identity();
        if (!mine)
            return fail(mine.error().toString());
        if (auto status = (*mine)->exportTo(file); !status)
            return fail(status.error().toString());
        if (context.json())
            return printJson(QJsonDocument(
                QJsonObject { { QStringLiteral("account"), (*mine)->account() }, { QStringLiteral("file"), file } }));
        out() << "wrote " << file << ", a backup of " << (*mine)->account()
              << " (readable by you only; whoever holds it holds your credits)" << Qt::endl;
        return 0;
    }
    if (action == u"import" && !file.isEmpty()) {
        if (QFile::exists(context.identityFile) && !context.parser.isSet(QStringLiteral("force"))) {
            auto current = net::Identity::load(context.identityFile);
            return fail(QStringLiteral("%1 already holds identity %2; importing over it would lose that account's credits "
                                       "unless you have a copy. Export it first, then import with --force")
                            .arg(context.identityFile, current ? current->account() : QStringLiteral("(unreadable)")));
        }
        auto imported = net::Identity::importFrom(file, context.identityFile);
        if (!imported)
            return fail(imported.error().toString());
        if (context.json())
            return printJson(QJsonDocument(QJsonObject {
                { QStringLiteral("account"), imported->account() }, { QStringLiteral("keyFile"), imported->keyFile } }));
        out() << "your identity is now " << imported->account() << " (" << imported->keyFile << ")" << Qt::endl;
        return 0;
    }
    QTextStream(stderr) << "usage: tessera-job identity export FILE | identity import FILE [--force]" << Qt::endl;
    return 2;
}

int chunk(Context& context)
{
    const auto& parser = context.parser;
    app::ChunkOptions options;
    bool ok = true;
    auto number = [&](const QString& name, std::int64_t fallback, std::int64_t low, std::int64_t high) {
        if (!parser.isSet(name))
            return fallback;
        bool numeric = false;
        const auto value = parser.value(name).toLongLong(&numeric);
        if (!numeric || value < low || value > high) {
            ok = false;
            QTextStream(stderr) << "tessera-job: --" << name << " must be a whole number from " << low << " to " << high
                                << Qt::endl;
        }
        return std::int64_t(value);
    };
    options.context = number(QStringLiteral("context"), options.context, 1, 65536);
    if (parser.isSet(QStringLiteral("chunk-mib"))) { // a fraction is fine: 0.25 is 256 KiB
        bool numeric = false;
        const double mib = parser.value(QStringLiteral("chunk-mib")).toDouble(&numeric);
        if (!numeric || !(mib >= 1.0 / 256 && mib <= 1024))
            return fail(QStringLiteral("--chunk-mib must be a number from 1/256 (4 KiB) to 1024"));
        options.chunkBytes = std::int64_t(mib * double(1 << 20));
    }
    options.testWindows = number(QStringLiteral("test-windows"), options.testWindows, 0, 1 << 24);
    if (!ok)
        return 2;
    const QString input = context.positional().first(), output = parser.value(QStringLiteral("output"));
    if (!QFileInfo::exists(input))
        return fail(QStringLiteral("%1 does not exist").arg(input));
    auto corpus
        = QFileInfo(input).isDir() ? app::chunkTextFolder(input, output, options) : app::chunkTensorFile(input, output, options);
    if (!corpus)
        return fail(corpus.error().toString());
    QJsonObject chunks { { QStringLiteral("manifestFile"), QFileInfo(corpus->manifestFile).absoluteFilePath() },
        { QStringLiteral("trainSamples"), qint64(corpus->manifest.sampleCount()) } };
    chunks.insert(QStringLiteral("testFile"),
        corpus->testFile.isEmpty() ? QStringLiteral("YOUR-TEST-FILE.pt") : QFileInfo(corpus->testFile).absoluteFilePath());
    const QJsonObject dataset { { QStringLiteral("chunks"), chunks } };
    if (context.json())
        return printJson(QJsonDocument(QJsonObject { { QStringLiteral("dataset"), dataset },
            { QStringLiteral("chunks"), qint64(corpus->manifest.chunks.size()) },
            { QStringLiteral("inputBytes"), qint64(corpus->inputBytes) },
            { QStringLiteral("testSamples"), qint64(corpus->testSamples) } }));
    out() << corpus->manifest.chunks.size() << " chunks of " << corpus->manifest.sampleCount() << " samples from "
          << corpus->inputBytes << " bytes";
    if (!corpus->testFile.isEmpty())
        out() << ", " << corpus->testSamples << " test windows in " << corpus->testFile;
    out() << "\nthe job file's dataset:\n"
          << QJsonDocument(QJsonObject { { QStringLiteral("dataset"), dataset } }).toJson(QJsonDocument::Indented) << Qt::flush;
    return 0;
}

struct CommandInfo {
    QString name;
    QString synopsis; // what follows the name
    QString help;
    int minArguments = 0;
    int maxArguments = 0;
    QStringList options; // of json, estimate, output, signer
    QStringList requiredOptions;
    std::function<int(Context&)> run;
};

const QList<CommandInfo>& commands()
{
    static const QList<CommandInfo> list {
        { QStringLiteral("submit"), QStringLiteral("JOB.json [--estimate] [--request-id ID] [--json]"),
            QStringLiteral("upload the files the job names (TorchScript model, tensor files) and submit it; prints the job "
                           "id. --estimate prints the broker's quote instead and submits nothing. A submit is named by a "
                           "request id (new each time, or ID): asking again under the same one gives the job it "
                           "created, never a second one"),
            1, 1, { QStringLiteral("estimate"), QStringLiteral("request-id"), QStringLiteral("json") }, {}, submit },
        { QStringLiteral("chunk"), QStringLiteral("INPUT -o FOLDER [--context L] [--chunk-mib N] [--test-windows T] [--json]"),
            QStringLiteral("cut a large dataset into content-addressed chunks with a manifest (FOLDER/manifest.json), so "
                           "that each shard fetches only the chunks it reads. INPUT is a folder of text files (byte "
                           "tokens in windows of L+1 bytes, L 128; its first T windows, 1024, go to FOLDER/test.pt) or a "
                           "torch.save file of \"x\"/\"y\" or \"tokens\"; chunks of at most N MiB (64). Prints the job "
                           "file's \"dataset\""),
            1, 1,
            { QStringLiteral("output"), QStringLiteral("context"), QStringLiteral("chunk-mib"), QStringLiteral("test-windows"),
                QStringLiteral("json") },
            { QStringLiteral("output") }, chunk },
        { QStringLiteral("status"), QStringLiteral("[ID] [--json]"), QStringLiteral("one job's progress, or every job's"), 0, 1,
            { QStringLiteral("json") }, {}, status },
        { QStringLiteral("wait"), QStringLiteral("ID [--json]"),
            QStringLiteral("follow a job to its end, printing each round's test accuracy (--json: only the final status); "
                           "exits 0 when it finished, 1 otherwise"),
            1, 1, { QStringLiteral("json") }, {}, wait },
        { QStringLiteral("fetch"), QStringLiteral("ID -o FILE [--json]"),
            QStringLiteral("save the newest global weights (torch.load reads them), or a finished inference job's "
                           "result (one JSON line per input)"),
            1, 1, { QStringLiteral("output"), QStringLiteral("json") }, { QStringLiteral("output") }, fetch },
        { QStringLiteral("sample"), QStringLiteral("ID [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]"),
            QStringLiteral("text written by a language model job's newest weights: N tokens (200) after TEXT, at "
                           "temperature T (0.8; 0: the likeliest), the same text for the same seed S (0); runs "
                           "tessera-node"),
            1, 1, { QStringLiteral("prompt"), QStringLiteral("tokens"), QStringLiteral("temperature"), QStringLiteral("seed") },
            {}, sample },
        { QStringLiteral("ask"),
            QStringLiteral("ID --prompt TEXT [--tokens N] [--temperature T] [--seed S] [--stop TEXT]... [--request-id ID] "
                           "[--json]"),
            QStringLiteral("ask a served job's model (yours) to complete TEXT: its tokens are printed as they come (N at "
                           "most, the job's maxTokens; temperature 0.8, seed 0); the same request id is answered once"),
            1, 1,
            { QStringLiteral("prompt"), QStringLiteral("tokens"), QStringLiteral("temperature"), QStringLiteral("seed"),
                QStringLiteral("stop"), QStringLiteral("request-id"), QStringLiteral("json") },
            { QStringLiteral("prompt") }, ask },
        { QStringLiteral("list"), QStringLiteral("[--all] [--json]"),
            QStringLiteral("the broker's running jobs and its latest 50 ended ones (--all: every job)"), 0, 0,
            { QStringLiteral("all"), QStringLiteral("json") }, {}, status },
        { QStringLiteral("cancel"), QStringLiteral("ID [--json]"),
            QStringLiteral("stop a job (its unspent budget goes back to its owner)"), 1, 1, { QStringLiteral("json") }, {},
            cancel },
        { QStringLiteral("balance"), QStringLiteral("[ACCOUNT] [--json]"),
            QStringLiteral("credits held and bonded (yours under CURVE; ACCOUNT on a local broker)"), 0, 1,
            { QStringLiteral("json") }, {}, balance },
        { QStringLiteral("ledger"), QStringLiteral("[--json]"),
            QStringLiteral("whether the broker's books balance, and how much was ever minted; exits 1 when they do not"), 0, 0,
            { QStringLiteral("json") }, {}, ledger },
        { QStringLiteral("nodes"), QStringLiteral("[--all] [--json]"),
            QStringLiteral("the nodes the broker knows, with their record: shards done and failed, results verified, "
                           "disputes lost, dispute timeouts, stake and what was slashed (connected or seen in the last "
                           "7 days; --all: every one)"),
            0, 0, { QStringLiteral("all"), QStringLiteral("json") }, {}, nodes },
        { QStringLiteral("verifications"), QStringLiteral("[ID] [--json]"),
            QStringLiteral("the checks of a job (or of all jobs): re-executions, canaries, disputes, outcomes"), 0, 1,
            { QStringLiteral("json") }, {}, verifications },
        { QStringLiteral("receipt"), QStringLiteral("CAUSE -o FILE [--json]"),
            QStringLiteral("the broker's signed receipt for a payment (causes: escrow:JOB, pay:JOB/ROUND/SHARD, "
                           "verify:CHECK, slash:CHECK:NODE:honest|owner, refund:JOB)"),
            1, 1, { QStringLiteral("output"), QStringLiteral("json") }, { QStringLiteral("output") }, receipt },
        { QStringLiteral("audit"), QStringLiteral("[--json]"),
            QStringLiteral("fetch the broker's whole ledger log, check it against a signed head, replay every account and "
                           "compare with what the broker reports; exits 1 when anything differs (docs/LEDGER.md)"),
            0, 0, { QStringLiteral("json") }, {}, auditCommand },
        { QStringLiteral("check-head"), QStringLiteral("FILE [--json]"),
            QStringLiteral("check that the broker's ledger log extends a signed head kept or published elsewhere; exits 1 "
                           "when it does not"),
            1, 1, { QStringLiteral("json") }, {}, checkHeadCommand },
        { QStringLiteral("verify-record"), QStringLiteral("FILE [--signer KEY] [--json]"),
            QStringLiteral("check a node's record (tessera-node record) offline: every entry in the signed head's tree "
                           "and naming the node, and (with --signer) the head signed by the network's key you know"),
            1, 1, { QStringLiteral("signer"), QStringLiteral("json") }, {}, verifyRecord },
        { QStringLiteral("whoami"), QStringLiteral("[--json]"),
            QStringLiteral("your identity: the account you submit and pay with (created on first use, shared with the app "
                           "and tessera-node on this machine)"),
            0, 0, { QStringLiteral("json") }, {}, whoami },
        { QStringLiteral("identity"), QStringLiteral("export FILE | import FILE [--force] [--json]"),
            QStringLiteral("back up your identity to FILE, or make FILE (a backup) your identity; a lost identity is lost "
                           "credits"),
            2, 2, { QStringLiteral("force"), QStringLiteral("json") }, {}, identityCommand },
        { QStringLiteral("verify-receipt"), QStringLiteral("FILE [--signer KEY] [--json]"),
            QStringLiteral("check a receipt offline: its signature, and (with --signer) that the broker whose base64 "
                           "signing key you know signed it"),
            1, 1, { QStringLiteral("signer"), QStringLiteral("json") }, {}, verifyReceipt },
    };
    return list;
}

QString usage()
{
    QString text = QStringLiteral("Usage: tessera-job [--broker ADDRESS] [--config FILE] COMMAND [ARGS]\n\nCommands:\n");
    for (const auto& command : commands()) {
        text += QStringLiteral("  %1 %2\n").arg(command.name, command.synopsis);
        text += QStringLiteral("      %1\n").arg(command.help);
    }
    text += QStringLiteral(
        "\nGlobal options (before the command):\n"
        "  --broker ADDRESS  the broker: tcp://host:port, with #KEY for CURVE (default: the first of Node/Brokers in the\n"
        "                    settings, else tcp://127.0.0.1:5555); again for each other broker of the same network,\n"
        "                    asked in turn when one stands by (ERROR standby) or does not answer\n"
        "  --config FILE     settings file (default ~/.config/Tessera/tessera.ini)\n"
        "  --identity FILE   your identity's key file (default: Node/KeyFile, else node.key in the data folder,\n"
        "                    ~/.local/share/Tessera; created on first use)\n"
        "  --version, --help\n"
        "Every command takes --help. --json prints exactly one JSON document on stdout; messages go to stderr.\n");
    return text;
}

// A CURVE key in Z85 (an account, a node) is 40 characters and may begin with '-': such an
// argument that is none of the command's options is an argument, not an unknown option. The
// options keep their values; the arguments go after "--".
QStringList keysAsArguments(const QStringList& rest, const QList<QCommandLineOption>& options)
{
    QStringList flags { rest.value(0) };
    QStringList arguments;
    for (qsizetype i = 1; i < rest.size(); ++i) {
        const QString& argument = rest[i];
        if (argument == u"--") {
            arguments += rest.mid(i + 1);
            break;
        }
        const QString name = argument.mid(argument.startsWith(QStringLiteral("--")) ? 2 : 1).section(u'=', 0, 0);
        const auto option = std::find_if(options.begin(), options.end(),
            [&](const QCommandLineOption& candidate) { return candidate.names().contains(name); });
        if (!argument.startsWith(u'-') || (argument.size() == 40 && option == options.end())) {
            arguments.append(argument);
            continue;
        }
        flags.append(argument);
        if (option != options.end() && !option->valueName().isEmpty() && !argument.contains(u'=') && i + 1 < rest.size())
            flags.append(rest[++i]);
    }
    return flags + QStringList { QStringLiteral("--") } + arguments;
}

QCommandLineOption optionNamed(const QString& name)
{
    if (name == u"json")
        return { QStringLiteral("json"), QStringLiteral("print one JSON document") };
    if (name == u"estimate")
        return { QStringLiteral("estimate"), QStringLiteral("print the quote, submit nothing") };
    if (name == u"output")
        return { { QStringLiteral("o"), QStringLiteral("output") }, QStringLiteral("output file"), QStringLiteral("FILE") };
    if (name == u"force")
        return { QStringLiteral("force"), QStringLiteral("replace the identity you have") };
    if (name == u"request-id")
        return { QStringLiteral("request-id"), QStringLiteral("the submit's name: the same one never creates a second job"),
            QStringLiteral("ID") };
    if (name == u"all")
        return { QStringLiteral("all"), QStringLiteral("also what aged out of the listing") };
    if (name == u"context" || name == u"chunk-mib" || name == u"test-windows")
        return { name, QStringLiteral("chunking: ") + name, QStringLiteral("N") };
    if (name == u"stop")
        return { name, QStringLiteral("a stop sequence (again for more)"), QStringLiteral("TEXT") };
    if (name == u"prompt" || name == u"tokens" || name == u"temperature" || name == u"seed")
        return { name, QStringLiteral("sampling: ") + name, name.toUpper() };
    return { QStringLiteral("signer"), QStringLiteral("the broker's signing key (base64)"), QStringLiteral("KEY") };
}

} // namespace

namespace {

// The options before the command: --broker (again for each other broker of the network),
// --config, --identity; an exit status where they end the run (--help, --version, a bad option).
struct GlobalOptions {
    QStringList brokerAddresses;
    QString identityFile;
    QString configPath = core::settings::Settings::defaultFilePath();
};

std::optional<int> readGlobalOptions(QStringList& args, GlobalOptions& options)
{
    while (args.size() > 1 && args[1].startsWith(u'-')) {
        const QString option = args.takeAt(1);
        if (option == u"--version" || option == u"-v") {
            out() << "tessera-job " << TESSERA_VERSION << Qt::endl;
            return 0;
        }
        if (option == u"--help" || option == u"-h") {
            out() << usage() << Qt::flush;
            return 0;
        }
        if (option == u"--broker" && args.size() > 1) { // again: the network's next broker
            options.brokerAddresses.append(args.takeAt(1));
            continue;
        }
        if ((option == u"--config" || option == u"--identity") && args.size() > 1) {
            (option == u"--config" ? options.configPath : options.identityFile) = args.takeAt(1);
            continue;
        }
        return fail(QStringLiteral("unknown option %1 (global options go before the command; see --help)").arg(option));
    }
    return std::nullopt;
}

} // namespace

int main(int argc, char* argv[])
{
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("tessera-job"));
    QStringList args = app.arguments();
    GlobalOptions global;
    if (const auto done = readGlobalOptions(args, global))
        return *done;
    QStringList& brokerAddresses = global.brokerAddresses;
    QString& identityFile = global.identityFile;
    const QString& configPath = global.configPath;
    if (args.size() < 2) {
        QTextStream(stderr) << usage() << Qt::flush;
        return 2;
    }
    const QString name = args[1];
    const auto found
        = std::find_if(commands().cbegin(), commands().cend(), [&](const CommandInfo& command) { return command.name == name; });
    if (found == commands().cend()) {
        QTextStream(stderr) << "tessera-job: unknown command '" << name << "'\n\n" << usage() << Qt::flush;
        return 2;
    }
    const auto& command = *found;
    const QString commandUsage
        = QStringLiteral("Usage: tessera-job [GLOBAL OPTIONS] %1 %2\n  %3\n").arg(command.name, command.synopsis, command.help);

    QCommandLineParser parser;
    parser.addPositionalArgument(QStringLiteral("arguments"), {});
    const QCommandLineOption help({ QStringLiteral("h"), QStringLiteral("help") }, QStringLiteral("this command's help"));
    QList<QCommandLineOption> options { help };
    for (const auto& option : command.options)
        options.append(optionNamed(option));
    parser.addOptions(options);
    QStringList rest = args;
    rest.removeAt(1);
    if (!parser.parse(keysAsArguments(rest, options))) {
        QTextStream(stderr) << "tessera-job: " << parser.errorText() << "\n" << commandUsage << Qt::flush;
        return 2;
    }
    if (parser.isSet(help)) {
        out() << commandUsage << Qt::flush;
        return 0;
    }
    const auto count = parser.positionalArguments().size();
    bool missing = count < command.minArguments || count > command.maxArguments;
    for (const auto& option : command.requiredOptions)
        missing = missing || !parser.isSet(option);
    if (missing) {
        QTextStream(stderr) << commandUsage << Qt::flush;
        return 2;
    }

    core::settings::Settings settings(configPath);
    settings.load();
    // Node/Brokers may name brokers of several networks (a node serves them all): only its first
    // is this client's; the brokers of one network are given as --broker, repeated.
    if (brokerAddresses.isEmpty()) {
        const auto brokers = settings.listValue(core::settings::names::NodeBrokers);
        brokerAddresses.append(brokers.isEmpty() ? QStringLiteral("tcp://127.0.0.1:5555") : brokers.first());
    }
    if (identityFile.isEmpty())
        identityFile = net::Identity::defaultKeyFile(settings);
    Context context { parser, brokerAddresses.first(), brokerAddresses.mid(1), identityFile, {}, {} };
    return command.run(context);
}
