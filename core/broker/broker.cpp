#include "broker.h"

#include "../inference/outputs.h"

#include "../ledger/ledgerlog.h"
#include "../ledger/logrecord.h"

#include "../modelarchive.h"

#include "../decomposition.h"
#include "../jsonreader.h"
#include "../memoryestimate.h"

#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QLockFile>
#include <QLoggingCategory>
#include <QTimeZone>

#include <cmath>
#include <map>

Q_LOGGING_CATEGORY(lcBrokerCore, "tessera.broker.core")

namespace tessera::core::broker {

namespace {

QString newId()
{
    return QStringLiteral("%1").arg(QRandomGenerator::system()->generate64(), 16, 16, QLatin1Char('0'));
}

QString isoTime(std::int64_t ms)
{
    return QDateTime::fromMSecsSinceEpoch(ms, QTimeZone::utc()).toString(Qt::ISODate);
}

void warnIfFailed(const Status& status)
{
    if (!status)
        qCWarning(lcBrokerCore).noquote() << status.error().toString();
}

} // namespace

QList<Digest> blobsNamedBy(const JobSpec& spec)
{
    QList<Digest> blobs;
    if (spec.model.source == ModelSpec::Source::TorchScript)
        blobs.append(spec.model.scriptSha256);
    if (!spec.inference.promptsSha256.isNull())
        blobs.append(spec.inference.promptsSha256);
    if (!spec.model.initialWeightsSha256.isNull())
        blobs.append(spec.model.initialWeightsSha256);
    if (spec.dataset.source == DatasetSpec::Source::Tensors)
        blobs.append(spec.dataset.trainSha256);
    if (spec.dataset.source == DatasetSpec::Source::Chunks)
        blobs.append(spec.dataset.manifestSha256); // its chunks: a task's dataChunks
    if (spec.dataset.source != DatasetSpec::Source::Builtin && !spec.dataset.testSha256.isNull())
        blobs.append(spec.dataset.testSha256);
    return blobs;
}

Broker::Broker(std::unique_ptr<storage::Database> database, BlobStore& blobs, TrainingMath& math, const Clock& clock,
    Options options, SigningKeys signing, const QString& brokerId)
    : m_store(std::make_unique<BrokerStore>(std::move(database)))
    , m_lease(std::make_unique<NetworkLease>(*m_store, clock, NetworkLease::Identity { brokerId, options.endpoint },
          options.leaseMs, m_store->database().engine() == storage::Engine::PostgreSQL))
    , m_jobLeases(std::make_unique<JobLeases>(*m_store, clock, NetworkLease::Identity { brokerId, options.endpoint },
          options.leaseMs, m_store->database().engine() == storage::Engine::PostgreSQL))
    , m_blobs(blobs)
    , m_signing(std::move(signing))
    , m_math(math)
    , m_clock(clock)
    , m_options(options)
    , m_scheduler(options.stragglerFactor)
{
    m_ledger = std::make_unique<ledger::Ledger>(m_store->database());
    if (m_store->database().engine() == storage::Engine::PostgreSQL)
        m_mirror = std::make_unique<BlobMirror>(m_store->database(), m_blobs);
    if (m_options.randomSeed != 0)
        m_random.seed(quint32(m_options.randomSeed ^ (m_options.randomSeed >> 32)));
    else
        m_random.seed(QRandomGenerator::system()->generate());
    m_stakes = std::make_unique<Stakes>(*m_store, *m_ledger, m_signing, m_clock, m_options);
    m_verifier = std::make_unique<Verifier>(Verifier::Parts { *m_store, *m_stakes, m_scheduler, m_notices, m_blobs, m_manifests,
        m_math, m_clock, m_options, m_nodes, m_addresses, m_random });
    m_serving = std::make_unique<Serving>(Serving::Parts { *m_store, *m_stakes, m_math, m_blobs, m_clock, m_random });
    QDir().mkpath(m_blobs.stagingDirectory());
    m_pipelines.setRecordingDirectory(m_blobs.stagingDirectory());
}

Broker::~Broker() = default;

Result<std::unique_ptr<BlobStore>> Broker::openBlobs(const QString& dataDirectory)
{
    return BlobStore::open(QDir(dataDirectory).filePath(QStringLiteral("blobs")));
}

Result<std::unique_ptr<Broker>> Broker::open(
    const QString& dataDirectory, BlobStore& blobs, TrainingMath& math, const Clock& clock, Options options)
{
    if (!QDir().mkpath(dataDirectory))
        return Error { QStringLiteral("data"), QStringLiteral("cannot create %1").arg(dataDirectory) };
    // NORMAL in WAL mode survives any crash of the broker (kill -9 included) without loss; a power
    // cut may lose the last commits, which only re-runs shards. FULL would cost an fsync for every
    // assignment handed out.
    if (!options.database.isEmpty() && !storage::isPostgresUri(options.database))
        return Error { QStringLiteral("Broker/Database"),
            QStringLiteral("expected empty (SQLite in the data folder) or a postgresql:// URI") };
    const QString location
        = options.database.isEmpty() ? QDir(dataDirectory).filePath(QStringLiteral("broker.sqlite")) : options.database;
    auto database = storage::openMigrated(location, QStringLiteral(":/migrations/broker"),
        storage::DatabaseOptions { 5000, storage::DatabaseOptions::Synchronous::Normal });
    if (!database)
        return database.error();
    auto signing = SigningKeys::loadOrCreate(QDir(dataDirectory).filePath(QStringLiteral("broker.sign")));
    if (!signing)
        return signing.error();
    // One broker to a data folder: two on one broker.id would both hold the network's lease.
    auto lock = std::make_unique<QLockFile>(QDir(dataDirectory).filePath(QStringLiteral("broker.lock")));
    lock->setStaleLockTime(0); // stale only when its process is gone
    if (!lock->tryLock(3000)) // a broker on its way out (SIGTERM) may still hold it a moment
        return Error { QStringLiteral("data"),
            QStringLiteral("another tessera-broker uses %1 (broker.lock); one broker to a data folder").arg(dataDirectory) };
    auto id = NetworkLease::loadOrCreateId(QDir(dataDirectory).filePath(QStringLiteral("broker.id")));
    if (!id)
        return id.error();
    std::unique_ptr<Broker> broker(new Broker(std::move(*database), blobs, math, clock, options, *signing, *id));
    broker->m_folderLock = std::move(lock);
    auto network = broker->m_store->networkId(NetworkLease::newId());
    if (!network)
        return network.error();
    broker->m_networkId = *network;
    broker->m_log = std::make_unique<LogPublisher>(
        broker->m_store->database(), broker->m_signing, broker->m_networkId, clock, options.logHeadMs);
    // A ledger kept before its log existed (docs/LEDGER.md): its transfers go first into the log.
    auto backfilled = ledger::LedgerLog(broker->m_store->database()).backfill();
    if (!backfilled)
        return backfilled.error();
    if (*backfilled > 0)
        qCInfo(lcBrokerCore).noquote() << "the ledger's log begins with its" << *backfilled << "earlier transfers";
    if (!broker->m_jobLeases->shared()) {
        // One broker to the file: every job is this one's, and what was in flight is handed out again.
        if (auto status = broker->recover(); !status)
            return status.error();
        return broker;
    }
    if (auto status = broker->m_store->holdLeasesAs(*id); !status)
        return status.error();
    // Blobs this broker stored before it ran on the database go there.
    auto stored = broker->m_mirror->storeMissing();
    if (!stored)
        return stored.error();
    if (*stored > 0)
        qCInfo(lcBrokerCore).noquote() << "blobs: copied" << *stored << "to the database";
    if (auto status = broker->updateLeases(); !status)
        return status.error();
    return broker;
}

Status Broker::fetchMissingBlobs()
{
    auto fetched = m_mirror->fetchMissing();
    if (!fetched)
        return fetched.error();
    if (*fetched > 0)
        qCInfo(lcBrokerCore).noquote() << "blobs: copied" << *fetched << "from the database";
    return {};
}

Status Broker::adoptJob(const QString& jobId)
{
    // The job's work in flight under its last broker is handed out again, as after a restart; a
    // node that still answers one of those assignments is heard (the first valid result wins).
    auto job = m_store->existingJob(jobId);
    if (!job)
        return job.error();
    if (job->state != JobState::Running) { // it ended between the look for it and the take
        forgetJob(jobId);
        return m_jobLeases->drop(jobId);
    }
    if (auto status = m_store->expireActiveAssignments(jobId); !status)
        return status;
    if (auto status = m_verifier->recover(jobId); !status)
        return status;
    return loadJob(*job);
}

void Broker::forgetJob(const QString& jobId)
{
    // Its pipelines are the new holder's to hand out again: forgotten here, their stages told to stop.
    for (const auto& assignment : m_pipelines.assignmentsOfJob(jobId)) {
        for (const auto& stage : m_pipelines.stagesOf(assignment))
            m_notices.add(Notice::Kind::Stop, stage.node,
                { { QStringLiteral("assignment"), stage.assignment },
                    { QStringLiteral("reason"), QStringLiteral("another broker of the network holds the job now") } });
        m_pipelines.remove(assignment);
    }
    m_serving->remove(jobId, QStringLiteral("another broker of the network holds the job now"));
    m_scheduler.remove(jobId);
    m_roundsToFinish.remove(jobId);
}

Status Broker::updateLeases()
{
    // The network's own chores (unbondings, old uploads) go to one broker at a time.
    const bool was = m_lease->held();
    if (auto renewal = m_lease->renew(); !renewal)
        qCWarning(lcBrokerCore).noquote() << "cannot renew the network lease:" << renewal.error().toString();
    else if (was != m_lease->held())
        qCInfo(lcBrokerCore).noquote() << (was ? "the network's chores went to another broker" : "doing the network's chores");
    auto renewal = m_jobLeases->renew();
    if (!renewal)
        return renewal.error();
    for (const auto& jobId : renewal->lost) {
        qCWarning(lcBrokerCore).noquote() << "job" << jobId << "was taken over by another broker of the network";
        forgetJob(jobId);
    }
    for (const auto& jobId : renewal->found)
        qCInfo(lcBrokerCore).noquote() << "job" << jobId << "is this broker's still (held before a restart)";
    QStringList adopted = renewal->found;
    // Jobs whose broker is gone (their leases lapsed): a few a tick, so that a tick stays short.
    // An error stops the takes, not the adoption of what was taken (or found) before it.
    Status trouble;
    auto unheld = m_jobLeases->unheld(MaxJobsTakenPerTick);
    if (!unheld)
        trouble = unheld.error();
    for (const auto& jobId : unheld.value_or(QStringList {})) {
        if (m_jobLeases->holds(jobId))
            continue; // renewed above: its lease lapsed only on a clock that jumped
        auto taken = m_jobLeases->take(jobId);
        if (!taken) {
            trouble = taken.error();
            break;
        }
        if (*taken) {
            qCWarning(lcBrokerCore).noquote() << "taking job" << jobId << "over: no broker of the network held it";
            adopted.append(jobId);
        }
    }
    if (adopted.isEmpty())
        return trouble;
    if (auto status = fetchMissingBlobs(); !status) {
        for (const auto& jobId : adopted)
            m_jobLeases->release(jobId);
        return status;
    }
    for (const auto& jobId : adopted) {
        if (auto status = adoptJob(jobId); !status) {
            // Given back, so that another broker of the network may take it meanwhile.
            qCWarning(lcBrokerCore).noquote()
                << "cannot take job" << jobId << "over, giving it back:" << status.error().toString();
            forgetJob(jobId);
            m_jobLeases->release(jobId);
        }
    }
    return trouble;
}

void Broker::keepLease()
{
    // Renewed only: what changed hands is sorted out by the next tick, and a transaction of a job
    // taken meanwhile is refused (its fence).
    if (m_store->database().inTransaction())
        return;
    if (m_lease->due()) {
        if (auto renewal = m_lease->renew(); !renewal)
            qCWarning(lcBrokerCore).noquote() << "cannot renew the network lease:" << renewal.error().toString();
    }
    if (m_jobLeases->due()) {
        if (auto renewal = m_jobLeases->extend(); !renewal)
            qCWarning(lcBrokerCore).noquote() << "cannot renew the jobs' leases:" << renewal.error().toString();
    }
}

Status Broker::refuseUnlessHeld(const QString& jobId, const QString& what)
{
    if (m_jobLeases->holds(jobId))
        return {};
    // An ended job is nobody's to fight over: any broker answers for it (a late result is stale).
    auto job = m_store->existingJob(jobId);
    if (!job)
        return job.error();
    if (job->state != JobState::Running)
        return {};
    const QString holder = m_jobLeases->holderEndpoint(jobId);
    return Error { QStringLiteral("standby"),
        QStringLiteral("another broker of the network holds job %1%2; %3 there")
            .arg(jobId, holder.isEmpty() ? QString() : QStringLiteral(" (") + holder + QLatin1Char(')'), what) };
}

Status Broker::recover()
{
    // Whatever was in flight when the broker stopped is handed out again; a node that still
    // answers one of these is still heard (the first valid result of a shard wins).
    if (auto status = m_store->expireActiveAssignments(); !status)
        return status;
    if (auto status = m_verifier->recover(); !status)
        return status;
    m_scheduler.clear();
    auto running = m_store->runningJobs();
    if (!running)
        return running.error();
    for (const auto& job : *running) {
        if (auto status = loadJob(job); !status)
            return status;
    }
    return {};
}

Status Broker::loadJob(const JobRow& job)
{
    auto spec = job.spec();
    if (!spec)
        return {};
    auto results = m_store->shardResults(job.id, job.round);
    if (!results)
        return results.error();
    QList<std::int64_t> answered;
    // A stage result drawn for re-execution has its check once its pipeline completed.
    QSet<QString> checked; // the assignments whose results are checked
    auto open = spec->stagesPerShard() > 1 ? m_store->openChecks(job.id) : Result<QList<Check>>(QList<Check> {});
    if (!open)
        return open.error();
    for (const auto& check : *open) {
        if (check.round == job.round && check.kind == CheckKind::Sample)
            checked.insert(check.accusedAssignment);
    }
    for (const auto& result : *results) {
        // A pipeline's stage results wait for every stage of their shard (held); the pipeline is
        // gone with the broker's last run, so its stages go out together again.
        if (spec->stagesPerShard() > 1 && result.state == ResultState::Sampled && !checked.contains(result.assignment)) {
            if (auto status = m_store->dropSampledResult(job.id, job.round, result.shard); !status)
                return status;
            continue;
        }
        answered.append(result.shard);
    }
    if (spec->isInference() && spec->inference.serves()) {
        m_serving->remove(job.id, QStringLiteral("the job was reloaded"));
        m_serving->add(job, *spec);
        return {};
    }
    const auto counted = parametersOf(*spec);
    m_scheduler.remove(job.id);
    m_scheduler.add(scheduledRound(job, *spec, counted ? counted->value_or(0) : 0), answered);
    m_roundsToFinish.insert(job.id); // a round whose every shard was in when the broker stopped
    return {};
}

// --- jobs ----------------------------------------------------------------------------------------

Result<std::optional<std::int64_t>> Broker::parametersOf(const JobSpec& spec)
{
    if (spec.model.source == ModelSpec::Source::Zoo)
        return zooParameterCount(spec);
    // A TorchScript model is counted from its archive's directory: nothing of it runs here.
    const auto path = m_blobs.path(spec.model.scriptSha256);
    if (!path)
        return Error { QStringLiteral("model.torchscript.sha256"), QStringLiteral("upload the TorchScript file first") };
    auto archive = ModelArchive::read(*path);
    if (!archive)
        return archive.error();
    return std::optional<std::int64_t>(archive->parameterEstimate());
}

Scheduler::Round Broker::scheduledRound(const JobRow& job, const JobSpec& spec, std::int64_t parameters)
{
    return { job.id, spec, job.round, job.weightsHash, job.weightsBlob, job.change,
        parameters > 0 ? trainingFlopsPerSample(spec, parameters) : 0.0, shardMemoryMiBOf(spec, parameters) };
}

std::int64_t Broker::shardMemoryMiBOf(const JobSpec& spec, std::int64_t parameters)
{
    if (parameters <= 0)
        return 0;
    const auto data = datasetBytes(spec.dataset, [this](const Digest& digest) { return m_blobs.sizeOf(digest); });
    if (spec.stagesPerShard() > 1) // any stage may go to the node: the largest
        return estimateLargestStage(spec.model, spec.optimizer, spec.training.batchSize, spec.training.pipeline.microBatches,
            spec.stagesPerShard(), spec.aggregation.optimizerState == AggregationSpec::OptimizerState::Averaged, data)
            .totalMiB();
    return estimateShardMemory(spec.model, spec.optimizer, spec.training.batchSize, 4 * parameters, data).totalMiB();
}

Result<std::optional<std::int64_t>> Broker::boundedParametersOf(const JobSpec& spec)
{
    auto counted = parametersOf(spec);
    if (!counted)
        return counted.error();
    const auto& parameters = *counted;
    if (parameters && *parameters > m_options.maxParameters)
        return Error { QStringLiteral("model"),
            QStringLiteral("%1 parameters, more than this broker trains (%2, Broker/MaxParameters)")
                .arg(QString::number(*parameters), QString::number(m_options.maxParameters)) };
    return counted;
}

Result<Quote> Broker::quoteFor(const JobSpec& spec)
{
    if (auto status = spec.validate(); !status)
        return status.error();
    auto parameters = boundedParametersOf(spec);
    if (!parameters)
        return parameters.error();
    // Priced from arithmetic (a zoo model on Fashion-MNIST) or the archive's directory (TorchScript):
    // nothing is built or loaded for a quote. (For a zoo model on tensor files the count is a bound.)
    const bool exact = spec.model.source == ModelSpec::Source::TorchScript || spec.dataset.source == DatasetSpec::Source::Builtin;
    if (*parameters && exact)
        return quote(spec, **parameters, m_options.pricePerUnit);
    auto initial = m_math.initialWeights(spec);
    if (!initial)
        return initial.error();
    return quote(spec, initial->parameters, m_options.pricePerUnit);
}

Result<QList<Digest>> Broker::chunksNamedBy(const JobSpec& spec)
{
    if (spec.dataset.source != DatasetSpec::Source::Chunks)
        return QList<Digest> {};
    auto manifest = m_manifests.of(spec.dataset.manifestSha256);
    if (!manifest)
        return manifest.error();
    return (*manifest)->digests();
}

Status Broker::checkPrompts(const JobSpec& spec)
{
    // A prompts file is counted here, once, so that no node is handed a job whose count is wrong.
    const auto& inference = spec.inference;
    if (!spec.isInference() || inference.promptsSha256.isNull())
        return {};
    const auto size = m_blobs.sizeOf(inference.promptsSha256);
    if (!size)
        return Error { QStringLiteral("inference.prompts.sha256"), QStringLiteral("upload the prompts file before submitting") };
    if (*size > InferenceSpec::MaxPromptsFileBytes)
        return Error { QStringLiteral("inference.prompts"), QStringLiteral("the prompts file is larger than 64 MiB") };
    auto bytes = m_blobs.read(inference.promptsSha256);
    if (!bytes)
        return bytes.error();
    const auto lines = bytes->count('\n') + (bytes->isEmpty() || bytes->endsWith('\n') ? 0 : 1);
    if (lines != inference.promptCount)
        return Error { QStringLiteral("inference.prompts.count"),
            QStringLiteral("the prompts file has %1 prompts, the job says %2").arg(lines).arg(inference.promptCount) };
    return {};
}

Status Broker::checkSubmittable(const JobSpec& spec, const QString& owner)
{
    if (auto status = spec.validate(); !status)
        return status;
    if (spec.model.source == ModelSpec::Source::TorchScript && !m_blobs.contains(spec.model.scriptSha256))
        return Error { QStringLiteral("model.torchscript.sha256"),
            QStringLiteral("upload the TorchScript file before submitting") };
    if (!spec.model.initialWeightsSha256.isNull() && !m_blobs.contains(spec.model.initialWeightsSha256))
        return Error { QStringLiteral("model.initialWeights.sha256"),
            QStringLiteral("upload the initial weights before submitting") };
    if (spec.dataset.source == DatasetSpec::Source::Tensors) {
        if (!m_blobs.contains(spec.dataset.trainSha256))
            return Error { QStringLiteral("dataset.tensors.trainSha256"),
                QStringLiteral("upload the training tensors before submitting") };
        if (!spec.dataset.testSha256.isNull() && !m_blobs.contains(spec.dataset.testSha256))
            return Error { QStringLiteral("dataset.tensors.testSha256"),
                QStringLiteral("upload the test tensors before submitting") };
    }
    if (auto status = m_manifests.checkSubmittable(spec.dataset, spec.training.localSteps * spec.training.batchSize); !status)
        return status;
    if (auto status = checkPrompts(spec); !status)
        return status;
    auto running = m_store->runningJobsOf(owner);
    if (!running)
        return running.error();
    int pending = 0;
    for (const auto& submit : m_pendingSubmits)
        pending += submit.owner == owner;
    if (*running + pending >= m_options.maxRunningJobsPerOwner)
        return Error { QStringLiteral("job"),
            QStringLiteral("%1 already has %2 running jobs, the most one owner may have here (Broker/MaxJobsPerOwner)")
                .arg(owner, QString::number(*running + pending)) };
    // Money before any of the owner's code runs: a caller without the budget runs nothing here.
    if (!m_options.faucet) {
        auto held = m_ledger->balance(ledger::accounts::balance(owner));
        if (!held)
            return held.error();
        if (*held < spec.budget)
            return Error { QStringLiteral("budget"),
                QStringLiteral("the budget of %1 credits is more than the owner's balance of %2; nothing was run "
                               "(the broker's operator credits accounts: tessera-broker credit)")
                    .arg(spec.budget.toString(), held->toString()) };
    }
    return {};
}

namespace {

Status paysForTraining(const JobSpec& spec, const Quote& price)
{
    if (spec.budget < price.training)
        return Error { QStringLiteral("budget"),
            QStringLiteral("%1 credits do not pay for the training, which costs %2 (%3 with the expected verification); "
                           "tessera-job submit --estimate shows the quote")
                .arg(spec.budget.toString(), price.training.toString(), price.total.toString()) };
    return {};
}

} // namespace

Result<std::optional<std::int64_t>> Broker::prepareSubmit(const JobSpec& spec, const QString& owner)
{
    if (auto status = checkSubmittable(spec, owner); !status)
        return status.error();
    auto counted = boundedParametersOf(spec); // before anything is built
    if (!counted)
        return counted.error();
    // A TorchScript job is priced as its quote was, from its archive: before its code runs.
    if (spec.model.source == ModelSpec::Source::TorchScript && *counted) {
        auto price = quote(spec, **counted, m_options.pricePerUnit);
        if (!price)
            return price.error();
        if (auto pays = paysForTraining(spec, *price); !pays)
            return pays.error();
    }
    return *counted;
}

Result<std::optional<QString>> Broker::submittedBefore(const JobSpec& spec, const QString& owner, const QString& requestId)
{
    if (requestId.isEmpty())
        return std::optional<QString> {};
    auto earlier = m_store->jobOfRequest(owner, requestId);
    if (!earlier)
        return earlier.error();
    if (!*earlier)
        return std::optional<QString> {};
    auto earlierSpec = (*earlier)->spec();
    if (!earlierSpec || !(*earlierSpec == spec))
        return Error { QStringLiteral("requestId"),
            QStringLiteral("%1 named your job %2, whose spec is another: a new job needs a new request id")
                .arg(requestId, (*earlier)->id) };
    return std::optional<QString>((*earlier)->id);
}

Result<QString> Broker::submit(const JobSpec& spec, const QString& owner, const QString& requestId)
{
    auto before = submittedBefore(spec, owner, requestId);
    if (!before)
        return before.error();
    if (*before)
        return **before;
    auto counted = prepareSubmit(spec, owner);
    if (!counted)
        return counted.error();
    auto initial = m_math.initialWeights(spec);
    if (!initial)
        return initial.error();
    return completeSubmit(spec, owner, requestId, *counted, *initial);
}

Status Broker::submitInBackground(
    const JobSpec& spec, const QString& owner, const QString& requestId, std::function<void(Result<QString>)> done)
{
    if (!requestId.isEmpty()) {
        // A repeat of a submit whose weights are still being built hears that submit's answer.
        for (auto& pending : m_pendingSubmits) {
            if (pending.owner != owner || pending.requestId != requestId)
                continue;
            if (!(pending.spec == spec))
                return Error { QStringLiteral("requestId"),
                    QStringLiteral("%1 names a job of yours being submitted with another spec: a new job needs a new "
                                   "request id")
                        .arg(requestId) };
            pending.done.push_back(std::move(done));
            return {};
        }
    }
    if (!m_jobCode || spec.model.source != ModelSpec::Source::TorchScript) {
        done(submit(spec, owner, requestId));
        return {};
    }
    auto before = submittedBefore(spec, owner, requestId);
    if (!before)
        return before.error();
    if (*before) {
        done(**before);
        return {};
    }
    int ownersPending = 0;
    for (const auto& submit : m_pendingSubmits)
        ownersPending += submit.owner == owner;
    if (ownersPending > 0 || int(m_pendingSubmits.size()) >= MaxSubmitsInBackground)
        return Error { QStringLiteral("job"),
            ownersPending > 0 ? QStringLiteral("the broker is still building the weights of your last job; submit again once it "
                                               "has answered")
                              : QStringLiteral("the broker is building %1 jobs' initial weights; submit again in a moment")
                                    .arg(m_pendingSubmits.size()) };
    auto counted = prepareSubmit(spec, owner);
    if (!counted)
        return counted.error();
    m_blobs.pin(spec.model.scriptSha256); // no eviction while its code runs
    TrainingMath* math = m_jobCode;
    m_pendingSubmits.push_back({ spec, owner, requestId, *counted,
        std::async(std::launch::async, [math, spec] { return math->initialWeights(spec); }), {} });
    m_pendingSubmits.back().done.push_back(std::move(done));
    return {};
}

void Broker::pollSubmits()
{
    for (auto it = m_pendingSubmits.begin(); it != m_pendingSubmits.end();) {
        if (it->initial.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
            ++it;
            continue;
        }
        const auto initial = it->initial.get();
        m_blobs.unpin(it->spec.model.scriptSha256);
        auto submitted = initial ? completeSubmit(it->spec, it->owner, it->requestId, it->counted, *initial)
                                 : Result<QString>(initial.error());
        auto done = std::move(it->done);
        it = m_pendingSubmits.erase(it);
        for (auto& answer : done)
            answer(submitted);
    }
}

Result<QString> Broker::completeSubmit(const JobSpec& spec, const QString& owner, const QString& requestId,
    std::optional<std::int64_t> counted, const TrainingMath::Weights& initial)
{
    // Checked again: the owner's money or running jobs may have changed while its code ran.
    if (auto status = checkSubmittable(spec, owner); !status)
        return status.error();
    auto price = quote(spec, counted.value_or(initial.parameters), m_options.pricePerUnit);
    if (!price)
        return price.error();
    if (auto pays = paysForTraining(spec, *price); !pays)
        return pays.error();
    auto blob = m_blobs.put(initial.bytes, initial.sha256);
    if (!blob)
        return blob.error();
    JobRow job;
    job.id = newId();
    job.specJson = spec.toJson();
    job.weightsHash = initial.canonicalHash;
    job.weightsBlob = *blob;
    job.owner = owner;
    // A served job has no shards: its row keeps its price per token.
    const bool serves = spec.isInference() && spec.inference.serves();
    job.pricePerShard = serves ? price->pricePerToken : price->pricePerShard;
    job.createdAt = m_clock.nowMs();
    job.requestId = requestId;
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    if (auto status = m_store->insertJob(job); !status)
        return status.error();
    for (const auto& named : blobsNamedBy(spec) + QList<Digest> { *blob }) {
        if (auto granted = allowRead(named, owner); !granted)
            return granted.error();
    }
    // A chunked dataset's chunks are named by the job now, as its other files are by its spec: no
    // longer uploads that wait for a job (and count against their owner) or are collected.
    auto chunks = chunksNamedBy(spec);
    if (!chunks)
        return chunks.error();
    for (const auto& chunk : *chunks) {
        if (auto forgotten = m_store->forgetUpload(chunk); !forgotten)
            return forgotten.error();
    }
    if (auto escrowed = m_stakes->escrowBudget(job.id, owner, spec.budget); !escrowed)
        return escrowed.error();
    // The job is this broker's (a lease of its own where brokers share the database).
    auto leased = m_jobLeases->take(job.id);
    if (!leased)
        return leased.error();
    if (!*leased)
        return Error { QStringLiteral("job"), QStringLiteral("another broker holds the new job's lease") };
    if (auto committed = transaction->commit(); !committed) {
        m_jobLeases->release(job.id);
        return committed.error().toError();
    }
    if (serves) {
        m_serving->add(job, spec);
        return job.id;
    }
    // Counted above: the model's archive is not read again.
    m_scheduler.add(scheduledRound(job, spec, counted.value_or(0)));
    return job.id;
}

Result<JobStatus> Broker::status(const QString& jobId)
{
    auto job = m_store->existingJob(jobId);
    if (!job)
        return job.error();
    const auto spec = job->spec();
    JobStatus status;
    status.id = jobId;
    status.name = spec ? spec->name : QString();
    status.rounds = spec ? spec->training.rounds : 0;
    status.state = job->state;
    status.round = job->round;
    status.weightsHash = job->weightsHash;
    status.weightsBlob = job->weightsBlob;
    status.failure = job->failure;
    status.owner = job->owner;
    status.pricePerShard = job->pricePerShard;
    status.spec = job->specJson;
    status.languageModel = spec && spec->model.context > 0;
    if (spec && spec->isInference())
        status.inference = nameOf(spec->inference.task);
    if (spec && job->state == JobState::Running) {
        status.shards = spec->unitsPerRound(); // a pipeline job's stage tasks
        status.pipelines = m_pipelines.describe(jobId);
        auto answered = m_store->shardResultCount(jobId, job->round);
        if (!answered)
            return answered.error();
        status.shardsDone = *answered;
    } else if (spec) {
        status.shards = status.shardsDone = job->state == JobState::Finished ? spec->unitsPerRound() : 0;
    }
    if (auto escrow = m_stakes->escrow(jobId))
        status.escrow = *escrow;
    status.serving = m_serving->statusOf(jobId);
    auto rounds = m_store->rounds(jobId);
    if (!rounds)
        return rounds.error();
    for (const auto& round : *rounds) {
        if (round.evaluated) // a round training.evaluateEvery skips has no test loss to list
            status.history.append(round);
    }
    return status;
}

Result<QList<JobStatus>> Broker::list(Listing listing)
{
    auto jobs = m_store->jobs();
    if (!jobs)
        return jobs.error();
    // Running jobs, and the latest ended ones (Options::listedEndedJobs); the full listing has all.
    qsizetype ended = 0;
    for (const auto& job : *jobs)
        ended += job.state != JobState::Running ? 1 : 0;
    qsizetype skipEnded = listing == Listing::Recent ? std::max<qsizetype>(0, ended - Options::listedEndedJobs) : 0;
    QList<JobStatus> statuses;
    for (const auto& job : *jobs) {
        if (job.state != JobState::Running && skipEnded > 0) {
            --skipEnded;
            continue;
        }
        auto one = status(job.id);
        if (!one)
            return one.error();
        one->spec = {}; // STATUS has it: a listing stays small
        statuses.append(*one);
    }
    return statuses;
}

Status Broker::cancel(const QString& jobId)
{
    if (auto status = refuseUnlessHeld(jobId, QStringLiteral("cancel it")); !status)
        return status;
    auto job = m_store->existingJob(jobId);
    if (!job)
        return job.error();
    if (job->state != JobState::Running)
        return Error { QStringLiteral("jobId"), QStringLiteral("the job is already %1").arg(nameOf(job->state)) };
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    if (auto ended = endAndRefund(jobId, JobState::Cancelled); !ended)
        return ended;
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    m_serving->paid(jobId);
    m_scheduler.remove(jobId);
    m_serving->remove(jobId, QStringLiteral("the job was cancelled"));
    return {};
}

Status Broker::finishServed(const QString& jobId)
{
    auto job = m_store->existingJob(jobId);
    if (!job)
        return job.error();
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    if (job->state == JobState::Running) {
        if (auto ended = endAndRefund(jobId, JobState::Finished); !ended)
            return ended;
    }
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    m_serving->paid(jobId);
    m_serving->remove(jobId, QStringLiteral("the job's time is up"));
    return {};
}

Status Broker::endAndRefund(const QString& jobId, JobState state)
{
    if (auto ended = m_store->endJob(jobId, state); !ended)
        return ended;
    // A served job's answers are paid before what is left goes back (no-ops for other jobs).
    m_serving->closeAccounts(jobId);
    if (auto paid = m_serving->flushPayments(jobId); !paid)
        return paid;
    return refund(jobId);
}

void Broker::payServed()
{
    if (!m_serving->owes())
        return; // no transaction a second for nothing
    auto transaction = m_store->begin();
    if (!transaction)
        return warnIfFailed(transaction.error());
    if (auto paid = m_serving->flushPayments(); !paid)
        return warnIfFailed(paid);
    if (auto committed = transaction->commit(); !committed)
        return warnIfFailed(committed.error().toError());
    m_serving->paid();
}

Status Broker::ask(const QString& jobId, const QString& caller, bool operatorCaller, const inference::Question& question,
    const QString& requestId, std::int64_t asker)
{
    if (auto status = refuseUnlessHeld(jobId, QStringLiteral("ask it")); !status)
        return status;
    return m_serving->ask(jobId, caller, operatorCaller, question, requestId, asker);
}

Status Broker::answered(
    const QString& nodeId, const QString& ticket, const QByteArray& line, const QJsonObject& signedAnswer, const QString& failure)
{
    const auto node = m_nodes.constFind(nodeId);
    if (node == m_nodes.constEnd())
        return Error { QStringLiteral("node"), QStringLiteral("the node has not registered") };
    return m_serving->answered(nodeId, *node, ticket, line, signedAnswer, failure);
}

Status Broker::refund(const QString& jobId)
{
    for (const auto& assignment : m_pipelines.assignmentsOfJob(jobId))
        stopPipelineOf(assignment, QStringLiteral("the job ended"), true);
    auto job = m_store->existingJob(jobId);
    if (!job)
        return job.error();
    if (auto closed = m_verifier->closeChecksOf(jobId); !closed)
        return closed;
    if (auto ended = m_jobLeases->end(jobId); !ended) // ended: no broker takes it over
        return ended;
    return m_stakes->refund(jobId, job->owner);
}

Status Broker::failJob(const QString& jobId, const QString& why)
{
    m_scheduler.remove(jobId);
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    if (auto status = m_store->endJob(jobId, JobState::Failed, why); !status)
        return status;
    if (auto refunded = refund(jobId); !refunded)
        return refunded;
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    return {};
}

// --- nodes ---------------------------------------------------------------------------------------

Status Broker::checkRegistration(const NodeInfo& node, bool authenticated)
{
    if (authenticated)
        return {};
    auto known = m_store->node(node.nodeId);
    if (!known)
        return known.error();
    const QString registered = *known ? (**known).info.value(QStringLiteral("signingKey")).toString() : QString();
    if (!registered.isEmpty() && registered != node.signingKey)
        return Error { QStringLiteral("node.signingKey"),
            QStringLiteral("node %1 registered with another signing key; on a plaintext broker a node id is a claim, and "
                           "only the key it first came with may use it again")
                .arg(node.nodeId) };
    return {};
}

Status Broker::registerNode(const NodeInfo& node, const QString& address)
{
    if (auto status = m_store->upsertNode(node.nodeId, node.toJson(), m_clock.nowMs()); !status)
        return status;
    // On a local or demo broker, new nodes get their stake bonded for them.
    if (auto status = m_stakes->faucetStake(node.nodeId); !status)
        return status;
    m_nodes.insert(node.nodeId, node);
    if (address.isEmpty())
        m_addresses.remove(node.nodeId);
    else
        m_addresses.insert(node.nodeId, address);
    return {};
}

void Broker::nodeLost(const QString& nodeId)
{
    m_nodes.remove(nodeId); // its address stays: a node that went is still not checked by its neighbours
    warnIfFailed(m_store->expireActiveAssignmentsOf(nodeId));
    for (const auto& assignment : m_pipelines.assignmentsOf(nodeId))
        stopPipelineOf(assignment, QStringLiteral("a stage's node went"), true);
    m_verifier->nodeLost(nodeId);
    m_scheduler.nodeLost(nodeId);
    m_serving->nodeLost(nodeId);
}

Result<std::optional<Assignment>> Broker::assign(const QString& nodeId)
{
    const auto node = m_nodes.constFind(nodeId);
    if (node == m_nodes.constEnd())
        return Error { QStringLiteral("node"), QStringLiteral("the node has not registered") };
    if (auto staked = m_stakes->requireStake(nodeId); !staked)
        return staked.error();
    // Re-executions first: a round waits for the checks of its sampled shards.
    auto check = m_verifier->assignCheck(*node);
    if (!check || check->has_value())
        return check;
    // Then a served job's replica, which holds none of the node's shard slots.
    auto replica = m_serving->place(nodeId, *node);
    if (!replica || replica->has_value())
        return replica;
    // However often a node asks, it holds at most this many shards: no claim captures a round.
    if (m_scheduler.heldBy(nodeId) >= m_options.maxAssignmentsPerNode)
        return std::optional<Assignment> {};
    const auto now = m_clock.nowMs();
    const auto pick = m_scheduler.pick(nodeId, node->maxThreads, now, node->maxMemoryMiB, node->capabilities);
    if (!pick)
        return std::optional<Assignment> {};
    const auto& round = *pick->round;
    auto task = m_manifests.shardTask(round.jobId, round.spec, round.round, pick->shard, round.weightsHash);
    if (!task)
        return task.error();
    Assignment assignment { newId(), std::move(*task), round.weightsBlob, 0, round.change };
    assignment.deadlineMs = m_scheduler.deadline(assignment.task, round.flopsPerSample, *node, m_options, now);
    const AssignmentRow row { assignment.id, round.jobId, round.round, pick->shard, nodeId, now, assignment.deadlineMs,
        AssignmentState::Active, AssignmentKind::Train, {} };
    auto needs = blobsNamedBy(round.spec) + QList<Digest> { round.weightsBlob } + assignment.task.dataChunks;
    if (round.change)
        needs.append(round.change->blob);
    if (auto status = m_store->insertAssignment(row, needs); !status)
        return status.error();
    m_scheduler.handedOut(round.jobId, assignment.id, pick->shard, nodeId, assignment.deadlineMs, now);
    return std::optional<Assignment>(assignment);
}

void Broker::noteRoundTrip(const QString& nodeId, std::int64_t milliseconds)
{
    if (milliseconds < 0)
        return;
    const auto before = m_roundTrips.constFind(nodeId);
    m_roundTrips.insert(nodeId, before == m_roundTrips.constEnd() ? milliseconds : (3 * *before + milliseconds) / 4);
}

std::optional<std::int64_t> Broker::roundTripOf(const QString& nodeId) const
{
    const auto found = m_roundTrips.constFind(nodeId);
    return found == m_roundTrips.constEnd() ? std::nullopt : std::optional<std::int64_t>(*found);
}

Result<QList<std::pair<QString, Assignment>>> Broker::assignPipeline(const QList<QString>& waitingNodes)
{
    QList<Scheduler::Candidate> candidates;
    for (const auto& id : waitingNodes) {
        const auto node = m_nodes.constFind(id);
        if (node == m_nodes.constEnd() || m_scheduler.heldBy(id) > 0 || !m_stakes->requireStake(id))
            continue;
        candidates.append({ id, node->maxThreads, node->maxMemoryMiB, node->capabilities, m_roundTrips.value(id, -1) });
    }
    QList<std::pair<QString, Assignment>> handed;
    const auto pick = m_scheduler.pickPipeline(candidates, m_clock.nowMs());
    if (!pick)
        return handed;
    const auto& round = *pick->round;
    const auto S = round.spec.stagesPerShard();
    const auto now = m_clock.nowMs();
    std::int64_t deadline = 0; // a stage waits on the slowest of its pipeline: each gets the latest
    for (std::int64_t s = 0; s < S; ++s) {
        const auto unit = pick->shard * S + s;
        auto task = m_manifests.shardTask(round.jobId, round.spec, round.round, unit, round.weightsHash);
        if (!task)
            return task.error();
        handed.append({ pick->nodes[s], Assignment { newId(), std::move(*task), round.weightsBlob, 0, round.change } });
        deadline = std::max(deadline,
            m_scheduler.deadline(handed.back().second.task, round.flopsPerSample, m_nodes.value(pick->nodes[s]), m_options, now));
    }
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    auto needs = blobsNamedBy(round.spec) + QList<Digest> { round.weightsBlob } + handed.front().second.task.dataChunks;
    if (round.change)
        needs.append(round.change->blob);
    std::vector<Pipelines::Stage> stages;
    for (std::int64_t s = 0; s < S; ++s) {
        auto& [nodeId, assignment] = handed[s];
        assignment.deadlineMs = deadline;
        const AssignmentRow row { assignment.id, round.jobId, round.round, pick->shard * S + s, nodeId, now, deadline,
            AssignmentState::Active, AssignmentKind::Train, {} };
        if (auto status = m_store->insertAssignment(row, needs); !status)
            return status.error();
        stages.push_back({ assignment.id, nodeId, deadline });
    }
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    for (std::int64_t s = 0; s < S; ++s)
        m_scheduler.handedOut(round.jobId, handed[s].second.id, pick->shard * S + s, handed[s].first, deadline, now);
    m_pipelines.add(handed.front().second.task, std::move(stages));
    qCInfo(lcBrokerCore).noquote() << "round" << round.round << "shard" << pick->shard << "of job" << round.jobId << "out as" << S
                                   << "stages";
    return handed;
}

std::int64_t Broker::shardOf(const AssignmentRow& assignment)
{
    if (const auto* round = m_scheduler.find(assignment.jobId))
        return assignment.shard / round->spec.stagesPerShard();
    auto job = m_store->job(assignment.jobId); // one that ended: its spec as stored
    if (job && *job) {
        if (auto spec = (**job).spec())
            return assignment.shard / spec->stagesPerShard();
    }
    return assignment.shard;
}

Result<Pipelines::Forward> Broker::relayTensor(
    const QString& nodeId, const QString& assignment, const Pipelines::Part& part, const QByteArray& payload)
{
    auto forward = m_pipelines.relay(nodeId, assignment, part, payload.size());
    if (!forward)
        return forward.error();
    m_pipelines.hash(assignment, part, payload);
    return forward;
}

void Broker::stopPipelineOf(const QString& assignmentId, const QString& why, bool named)
{
    const auto stages = m_pipelines.stagesOf(assignmentId);
    if (stages.empty())
        return;
    m_pipelines.remove(assignmentId);
    for (const auto& stage : stages) {
        auto row = m_store->assignment(stage.assignment);
        // Only the job's broker changes its rows (forgetJob forgets the pipelines of a job it lost).
        if (row && *row && !holds((**row).jobId))
            return;
        if (stage.assignment == assignmentId && !named)
            continue; // its own result says what became of it
        if (!row || !*row)
            continue;
        const auto& given = **row;
        if (given.state == AssignmentState::Answered) {
            // A stage's result held for its partners': dropped (its node told so, to let go of what
            // it kept for it), and the stage goes out again with them.
            warnIfFailed(m_store->dropSampledResult(given.jobId, given.round, given.shard));
            m_scheduler.reopen(given.jobId, given.round, given.shard);
            m_notices.add(Notice::Kind::Verdict, stage.node,
                { { QStringLiteral("assignment"), stage.assignment }, { QStringLiteral("state"), QStringLiteral("rejected") },
                    { QStringLiteral("detail"),
                        QStringLiteral("its pipeline stopped (%1): the shard is trained again").arg(why) } });
            continue;
        }
        if (given.state != AssignmentState::Active)
            continue; // already over
        warnIfFailed(m_store->setAssignmentState(stage.assignment, AssignmentState::Returned));
        m_scheduler.release(given.jobId, stage.assignment);
        m_notices.add(Notice::Kind::Stop, stage.node,
            { { QStringLiteral("assignment"), stage.assignment }, { QStringLiteral("reason"), why } });
    }
    qCInfo(lcBrokerCore).noquote() << "pipeline of assignment" << assignmentId << "stopped:" << why;
}

void Broker::stopLatePipelines()
{
    const auto now = m_clock.nowMs();
    for (const auto& assignment : m_pipelines.lateAssignments(now))
        stopPipelineOf(assignment, QStringLiteral("a stage ran past its deadline"), true);
}

Status Broker::checkStageResult(const AssignmentRow& assignment, const ShardResult& result)
{
    const auto relayed = m_pipelines.rootOf(assignment.id);
    Status checked;
    if (!relayed)
        checked = Error { QStringLiteral("assignment"), QStringLiteral("the stage's pipeline was stopped") };
    else if (result.tensorsRoot != *relayed)
        checked = Error { QStringLiteral("tensorsRoot"), QStringLiteral("not the root of the tensors the broker relayed") };
    if (!checked) { // refused: the pipeline stops, and this node does not get the shard again for a while
        stopPipelineOf(assignment.id, checked.error().toString());
        warnIfFailed(m_store->setAssignmentState(assignment.id, AssignmentState::Returned));
        m_scheduler.release(assignment.jobId, assignment.id);
        m_scheduler.returnedBy(assignment.jobId, assignment.shard, assignment.node, m_clock.nowMs());
        return checked.error();
    }
    // A stage cannot have computed its result before it received all its schedule sends it: a
    // signed result that says so is a lie (the pipeline goes out again, never to the node).
    if (!m_pipelines.receivedAll(assignment.id)) {
        const Error lie { QStringLiteral("tensorsRoot"),
            QStringLiteral("the stage answered before it received every tensor its schedule sends it") };
        warnIfFailed(m_verifier->punishSignedLie(assignment.node, assignment.id, lie));
        stopPipelineOf(assignment.id, lie.toString());
        m_scheduler.exclude(assignment.jobId, assignment.node);
        return lie;
    }
    return {};
}

Digest Broker::keepStageInputs(const QString& assignment)
{
    // What the stage received, kept for its re-execution (docs/VERIFICATION.md, "Pipeline stages").
    const auto recorded = m_pipelines.takeInputs(assignment);
    auto stored = recorded ? m_blobs.adopt(recorded->file, recorded->digest)
                           : Result<Digest>(Error { QStringLiteral("blob"), QStringLiteral("they could not be written") });
    if (stored)
        return *stored;
    qCWarning(lcBrokerCore).noquote() << "the inputs of stage" << assignment
                                      << "are not kept, so it is not re-executed:" << stored.error().toString();
    return {};
}

void Broker::refusedStage(const AssignmentRow& assignment, const Error& why)
{
    // Refused as a lie or of the wrong form (no longer active): its partners cannot go on.
    auto row = m_store->assignment(assignment.id);
    if (row && *row && (**row).state != AssignmentState::Active)
        stopPipelineOf(assignment.id, why.toString());
}

Status Broker::completePipeline(const AssignmentRow& assignment, const JobRow& job, const JobSpec& spec)
{
    if (!m_pipelines.answered(assignment.id))
        return {};
    const auto stages = m_pipelines.stagesOf(assignment.id);
    // Whatever stops the payment below drops the held results and hands the shard out again.
    auto undo = [&](const Error& error) -> Status {
        stopPipelineOf(assignment.id, error.message, true);
        return error;
    };
    auto escrow = m_stakes->escrow(job.id);
    if (!escrow)
        return undo(escrow.error());
    const auto owed = job.pricePerShard.checkedMultiply(std::int64_t(stages.size()));
    if (!owed || *escrow < *owed) {
        const QString why = QStringLiteral("the budget is spent (%1 credits left, a pipeline's stages pay %2)")
                                .arg(escrow->toString(), owed ? owed->toString() : QStringLiteral("more"));
        stopPipelineOf(assignment.id, why, true);
        return failJob(job.id, why);
    }
    // A drawn stage's check reads what it received: kept now (and the stage paid instead where it
    // cannot be).
    std::map<QString, Check> samples;
    for (const auto& stage : stages) {
        auto sample = m_pipelines.sampleOf(stage.assignment);
        if (sample && !(sample->inputs = keepStageInputs(stage.assignment)).isNull())
            samples.emplace(stage.assignment, *sample);
    }
    QList<std::tuple<QString, QString, QString>> paid; // node, assignment, the payment's cause
    // In a transaction of its own, rolled back before anything is undone.
    const Status written = [&]() -> Status {
        auto transaction = m_store->begin();
        if (!transaction)
            return transaction.error();
        for (const auto& stage : stages) {
            auto row = m_store->assignment(stage.assignment);
            if (!row)
                return row.error();
            if (!*row)
                continue;
            const auto unit = (**row).shard;
            const auto S = std::int64_t(stages.size());
            if (const auto sample = samples.find(stage.assignment); sample != samples.end()) { // paid once checked
                for (const auto& status : { m_store->insertCheck(sample->second, m_clock.nowMs()),
                         m_store->countShardDone(stage.node, m_clock.nowMs(), BrokerStore::Streak::Holds) }) {
                    if (!status)
                        return status;
                }
                continue;
            }
            if (auto status = m_store->setResultState(job.id, assignment.round, unit, ResultState::Accepted); !status)
                return status;
            const QString cause = Verifier::payCause(job.id, assignment.round, unit, stage.assignment);
            auto pay = m_stakes->payFromEscrow(job.id, stage.node, job.pricePerShard, cause,
                QStringLiteral("stage %1 of shard %2 of round %3").arg(unit % S).arg(unit / S).arg(assignment.round));
            if (!pay)
                return pay.error();
            if (auto status = m_store->countShardDone(stage.node, m_clock.nowMs(), BrokerStore::Streak::Grows); !status)
                return status;
            paid.append({ stage.node, stage.assignment, cause });
        }
        if (auto committed = transaction->commit(); !committed)
            return committed.error().toError();
        return {};
    }();
    if (!written) {
        for (const auto& [stage, sample] : samples)
            m_verifier->forgetInputs(sample.inputs);
        return undo(written.error());
    }
    m_pipelines.remove(assignment.id);
    for (const auto& [node, given, cause] : paid)
        m_notices.add(Notice::Kind::Verdict, node,
            { { QStringLiteral("assignment"), given }, { QStringLiteral("state"), QStringLiteral("paid") },
                { QStringLiteral("paid"), job.pricePerShard.toString() }, { QStringLiteral("cause"), cause },
                { QStringLiteral("detail"), QStringLiteral("every stage of the pipeline answered") } });
    return finishRoundIfComplete(job.id, spec, assignment.round);
}

Status Broker::commit(const QString& nodeId, const QJsonObject& signedCommitment)
{
    const auto node = m_nodes.constFind(nodeId);
    if (node == m_nodes.constEnd())
        return Error { QStringLiteral("node"), QStringLiteral("the node has not registered") };
    if (signedCommitment.value(QStringLiteral("signer")).toString() != node->signingKey || node->signingKey.isEmpty())
        return Error { QStringLiteral("commitment.signer"),
            QStringLiteral("the commitment is not signed with the node's registered key") };
    if (auto status = verifyDocument(signedCommitment); !status)
        return Error { QStringLiteral("commitment.") + status.error().field, status.error().message };
    JsonReader reader(signedCommitment, QStringLiteral("commitment"));
    // The kind keeps a signature made for one purpose (a stake request, a receipt) from counting as
    // another.
    if (reader.string(u"kind") != QLatin1String(ShardResult::CommitmentKind))
        return Error { QStringLiteral("commitment.kind"),
            QStringLiteral("must be %1").arg(QLatin1String(ShardResult::CommitmentKind)) };
    const QString assignmentId = reader.string(u"assignment");
    const CommitmentRow commitment { reader.digest(u"finalHash"), reader.digest(u"chainRoot") };
    const auto round = signedCommitment.value(QStringLiteral("round")).toInteger(-1);
    const auto shard = signedCommitment.value(QStringLiteral("shard")).toInteger(-1);
    if (!reader.ok())
        return reader.status().error();
    auto assignment = m_store->assignment(assignmentId);
    if (!assignment)
        return assignment.error();
    if (!*assignment || (*assignment)->node != nodeId)
        return Error { QStringLiteral("commitment.assignment"), QStringLiteral("no such assignment for this node") };
    const auto& given = **assignment;
    if (auto status = refuseUnlessHeld(given.jobId, QStringLiteral("commit")); !status)
        return status;
    // A signed commitment to another job, round or shard than the one handed out (a stale round's
    // result passed off as new) is a lie the node put its name to.
    if (signedCommitment.value(QStringLiteral("jobId")).toString() != given.jobId || round != given.round
        || shard != shardOf(given)) {
        const Error lie { QStringLiteral("commitment"),
            QStringLiteral("the commitment is for round %1, shard %2, but the assignment is round %3, shard %4")
                .arg(
                    QString::number(round), QString::number(shard), QString::number(given.round), QString::number(given.shard)) };
        warnIfFailed(m_verifier->punishSignedLie(nodeId, assignmentId, lie));
        return lie;
    }
    // The first commitment binds: a node cannot change its answer after seeing anything.
    return m_store->insertCommitment(assignmentId, nodeId, commitment, signedCommitment, m_clock.nowMs());
}

Status Broker::allowRead(const Digest& blob, const QString& principal)
{
    if (principal.isEmpty())
        return {};
    return m_store->allowRead(blob, principal);
}

// --- results -------------------------------------------------------------------------------------

Result<Acceptance> Broker::acceptResult(const QString& nodeId, const QString& assignmentId, const ShardResult& result)
{
    auto found = m_store->assignment(assignmentId);
    if (!found)
        return found.error();
    if (!*found)
        return Error { QStringLiteral("assignment"), QStringLiteral("no assignment %1").arg(assignmentId) };
    const auto& assignment = **found;
    if (assignment.node != nodeId)
        return Error { QStringLiteral("assignment"), QStringLiteral("the assignment belongs to another node") };
    if (auto status = refuseUnlessHeld(assignment.jobId, QStringLiteral("deliver the result")); !status)
        return status.error();
    if (result.jobId != assignment.jobId || result.round != assignment.round || result.shard != shardOf(assignment))
        return Error { QStringLiteral("result"), QStringLiteral("the result is for another shard than its assignment") };
    if (assignment.state == AssignmentState::Answered || assignment.state == AssignmentState::Failed
        || assignment.state == AssignmentState::Returned) // a give-back (or a refused form) is final
        return Acceptance::Stale;
    if (assignment.kind != AssignmentKind::Train) {
        auto accepted = m_verifier->acceptCheck(nodeId, assignment, result);
        applySettled();
        return accepted;
    }
    return acceptTraining(assignment, result);
}

Result<Acceptance> Broker::acceptTraining(const AssignmentRow& assignment, const ShardResult& result)
{
    auto job = m_store->job(assignment.jobId);
    if (!job)
        return job.error();
    if (!*job || (*job)->state != JobState::Running || (*job)->round != assignment.round)
        return Acceptance::Stale;
    auto answered = m_store->isAnswered(assignment.jobId, assignment.round, assignment.shard);
    if (!answered)
        return answered.error();
    if (*answered) {
        warnIfFailed(m_store->setAssignmentState(assignment.id, AssignmentState::Answered));
        m_scheduler.forget(assignment.jobId, assignment.id);
        return Acceptance::Stale;
    }
    // The scheduler holds the running job's spec, read once; a copy, for finishing the round
    // changes what the scheduler holds.
    const auto* scheduled = m_scheduler.find(assignment.jobId);
    const auto spec = scheduled ? Result<JobSpec>(scheduled->spec) : (*job)->spec();
    if (!spec)
        return spec.error();
    if (result.outcome != ShardResult::Outcome::Completed) // its partners cannot go on without it
        stopPipelineOf(assignment.id, QStringLiteral("a stage failed or was given back: %1").arg(result.failure));
    if (result.outcome == ShardResult::Outcome::Returned) {
        // Given back (the node's disk is full, say): the shard goes to another node, and neither
        // the shard's failure count nor the node's record changes.
        if (auto status = m_store->setAssignmentState(assignment.id, AssignmentState::Returned); !status)
            return status.error();
        m_scheduler.release(assignment.jobId, assignment.id);
        m_scheduler.returnedBy(assignment.jobId, assignment.shard, assignment.node, m_clock.nowMs());
        return Acceptance::Failed;
    }
    if (result.outcome == ShardResult::Outcome::Failed && spec->stagesPerShard() > 1)
        return acceptStageFailure(assignment, result);
    if (result.outcome == ShardResult::Outcome::Failed)
        return acceptFailure(assignment, result);
    return acceptCompleted(assignment, **job, *spec, result);
}

Result<Acceptance> Broker::acceptFailure(const AssignmentRow& assignment, const ShardResult& result)
{
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    // The job owner's code failing in the node's sandbox (a hang, too much memory) may be the
    // job's failure: it counts in the node's record only if the broker disproves it below.
    for (const auto& status : { m_store->setAssignmentState(assignment.id, AssignmentState::Failed),
             result.failedInSandbox() ? Status {} : m_store->countShardFailed(assignment.node) }) {
        if (!status)
            return status.error();
    }
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    m_failureReasons[failureKey(assignment.jobId, assignment.round, assignment.shard)].insert(assignment.node, result.failure);
    // The shard goes to a different node. A job never fails on its nodes' word alone (a few free
    // keys could fail anyone's job): once distinct nodes agree, or every node that could run it
    // failed it, the broker runs it itself, and only a failure there fails the job.
    m_scheduler.release(assignment.jobId, assignment.id, Scheduler::Release::Failed);
    const auto failedBy = m_scheduler.failedBy(assignment.jobId, assignment.shard);
    if (failedBy.size() >= m_options.maxShardFailures || !anotherNodeCouldRun(assignment.jobId, failedBy)) {
        if (auto status = confirmFailure(assignment, failedBy, result.failure); !status)
            return status.error();
    }
    return Acceptance::Failed;
}

Result<Acceptance> Broker::acceptStageFailure(const AssignmentRow& assignment, const ShardResult& result)
{
    // A stage's own computation failed (a stage whose partner broke it gives it back instead). The
    // broker cannot run one stage alone to confirm it yet: the unit goes out again (not to this
    // node), and once distinct nodes agree the job fails; no node's record counts it.
    if (auto status = m_store->setAssignmentState(assignment.id, AssignmentState::Failed); !status)
        return status.error();
    m_scheduler.release(assignment.jobId, assignment.id, Scheduler::Release::Failed);
    const auto failedBy = m_scheduler.failedBy(assignment.jobId, assignment.shard);
    if (failedBy.size() >= m_options.maxShardFailures) {
        if (auto status = failJob(assignment.jobId,
                QStringLiteral("round %1, stage task %2 failed on %3 different nodes (last: %4)")
                    .arg(assignment.round)
                    .arg(assignment.shard)
                    .arg(failedBy.size())
                    .arg(result.failure));
            !status)
            return status.error();
    }
    return Acceptance::Failed;
}

bool Broker::anotherNodeCouldRun(const QString& jobId, const QList<QString>& failedBy)
{
    const auto* round = m_scheduler.find(jobId);
    if (!round)
        return true;
    return std::any_of(m_nodes.cbegin(), m_nodes.cend(), [&](const NodeInfo& node) {
        return !failedBy.contains(node.nodeId) && round->runsOn(node) && m_stakes->requireStake(node.nodeId).ok();
    });
}

QString Broker::failureKey(const QString& jobId, std::int64_t round, std::int64_t shard)
{
    return QStringLiteral("%1/%2/%3").arg(jobId).arg(round).arg(shard);
}

// The nodes that reported as failed a shard the broker then trained (in confirmFailure's
// transaction). Disproved: on each node's record (a sandbox reason was not counted when it came),
// and the node gets no more of this job. Slashed only where the failure is proven false: a zoo
// model (Tessera's own code; a job owner's may behave otherwise elsewhere) on the broker's runtime
// profile (on another device or CPU it may be that machine's own), and not for time or memory (a
// busy or smaller computer runs out of them honestly).
Status Broker::judgeFailureReports(const AssignmentRow& assignment, const QList<QString>& failedBy,
    const QHash<QString, QString>& reasons, bool ownerCode, const QString& brokerProfile)
{
    for (const auto& node : failedBy) {
        const QString reason = reasons.value(node);
        if (ShardResult::isSandboxFailure(reason) || reason.isEmpty()) {
            if (auto status = m_store->countShardFailed(node); !status)
                return status;
        }
        m_scheduler.exclude(assignment.jobId, node);
        auto known = m_store->node(node);
        if (!known)
            return known.error();
        const QString profile = *known ? (**known).info.value(QStringLiteral("runtimeProfile")).toString() : QString();
        const bool resources = reason.isEmpty() || reason.startsWith(u"time limit:") || reason.startsWith(u"out of memory");
        if (ownerCode || resources || !reproduces(profile, brokerProfile)) {
            qCInfo(lcBrokerCore).noquote() << "node" << node.left(12) << "reported a shard as failed that the broker trained ("
                                           << reason << "): recorded, not slashed";
            continue;
        }
        const QString why = QStringLiteral("reported round %1, shard %2 of job %3 as failed; the broker trained it")
                                .arg(QString::number(assignment.round), QString::number(assignment.shard), assignment.jobId);
        if (auto status = m_stakes->slash(node, {},
                QStringLiteral("slash:failed:%1/%2/%3/%4")
                    .arg(assignment.jobId)
                    .arg(assignment.round)
                    .arg(assignment.shard)
                    .arg(node),
                why);
            !status)
            return status;
        qCWarning(lcBrokerCore).noquote() << "node" << node.left(12) << why << ": slashed";
    }
    return {};
}

Status Broker::confirmFailure(const AssignmentRow& assignment, const QList<QString>& failedBy, const QString& failure)
{
    // The broker runs the shard itself. If it fails here too, the failure is the job's; if it
    // trains, the reports were false: each costs its node (below), and the broker's own result
    // answers the shard, so the round goes on.
    const auto* round = m_scheduler.find(assignment.jobId);
    if (!round || round->round != assignment.round)
        return {};
    const auto made
        = m_manifests.shardTask(assignment.jobId, round->spec, assignment.round, assignment.shard, round->weightsHash);
    if (!made)
        return made.error();
    const auto& task = *made;
    auto start = m_blobs.read(round->weightsBlob);
    if (!start)
        return start.error();
    auto replay = m_math.replay(task, 0, *start, round->weightsHash, task.checkpointCount() - 1, *start);
    const auto reasons = m_failureReasons.take(failureKey(assignment.jobId, assignment.round, assignment.shard));
    if (!replay) {
        qCInfo(lcBrokerCore).noquote() << "the broker's own run of a failed shard failed too:" << replay.error().toString();
        return failJob(assignment.jobId,
            QStringLiteral("round %1, shard %2 failed on %3 (last: %4) and on the broker (%5)")
                .arg(QString::number(assignment.round), QString::number(assignment.shard),
                    failedBy.size() >= m_options.maxShardFailures ? QStringLiteral("%1 different nodes").arg(failedBy.size())
                                                                  : QStringLiteral("every node that could run it"),
                    failure, replay.error().message));
    }
    // The job may have moved on while the broker computed (another node's result came).
    round = m_scheduler.find(assignment.jobId);
    if (!round || round->round != assignment.round)
        return {};
    auto answered = m_store->isAnswered(assignment.jobId, assignment.round, assignment.shard);
    if (!answered)
        return answered.error();
    auto blob = m_blobs.put(replay->weights);
    if (!blob)
        return blob.error();
    ShardResult own;
    own.jobId = assignment.jobId;
    own.round = assignment.round;
    own.shard = assignment.shard;
    own.outcome = ShardResult::Outcome::Completed;
    own.weightsSha256 = *blob;
    own.finalHash = replay->weightsHash;
    own.checkpointHashes = QList<Digest> { task.startWeights } + replay->checkpoints;
    own.runtimeProfile = replay->runtimeProfile;
    const bool ownerCode = task.model.source == ModelSpec::Source::TorchScript;
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    if (!*answered) {
        // The broker's own run answers the shard: verified (it is the referee), paid to nobody.
        if (auto status = m_store->insertShardResult(assignment.jobId,
                ShardResultRow { assignment.round, assignment.shard, QString(), own.toJson(), ResultState::Verified, {} });
            !status)
            return status;
    }
    if (auto judged = judgeFailureReports(assignment, failedBy, reasons, ownerCode, replay->runtimeProfile); !judged)
        return judged;
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    if (*answered)
        return {};
    qCInfo(lcBrokerCore).noquote() << "round" << assignment.round << "shard" << assignment.shard << "of job" << assignment.jobId
                                   << "failed on" << failedBy.size()
                                   << "node(s) and trained on the broker: its result answers it";
    const JobSpec spec = round->spec; // finishing the round changes what the scheduler holds
    m_scheduler.answered(assignment.jobId, {}, assignment.shard);
    return finishRoundIfComplete(assignment.jobId, spec, assignment.round);
}

Result<Acceptance> Broker::acceptCompleted(
    const AssignmentRow& assignment, const JobRow& job, const JobSpec& spec, const ShardResult& result)
{
    auto admitted = m_verifier->admit(assignment, job, spec, result);
    if (!admitted) {
        if (admitted.error().field == Verifier::WrongFormField || admitted.error().field == inference::FormField) {
            // Given back, in effect, and not slashed (a node that misread a task is not a liar), but
            // a node that declared it can run this form and hands in another gets no more of this
            // job: otherwise it could take and spoil every shard of it, one refusal at a time.
            if (auto status = m_store->setAssignmentState(assignment.id, AssignmentState::Returned); !status)
                return status.error();
            m_scheduler.release(assignment.jobId, assignment.id);
            m_scheduler.returnedBy(assignment.jobId, assignment.shard, assignment.node, m_clock.nowMs());
            m_scheduler.exclude(assignment.jobId, assignment.node);
        }
        if (spec.stagesPerShard() > 1)
            refusedStage(assignment, admitted.error());
        return admitted.error();
    }
    const bool stage = spec.stagesPerShard() > 1;
    if (stage) { // a stage drawn for re-execution: its check waits for its partners (completePipeline)
        if (auto status = checkStageResult(assignment, result); !status)
            return status.error();
    }
    // A stage's result is held, unpaid, until every stage of its pipeline has answered
    // (completePipeline), and dropped if the pipeline stops first.
    const bool sampled = admitted->sample.has_value() || stage;
    auto escrow = m_stakes->escrow(job.id);
    if (!escrow)
        return escrow.error();
    if (*escrow < job.pricePerShard) {
        warnIfFailed(failJob(job.id,
            QStringLiteral("the budget is spent (%1 credits left, a shard pays %2)")
                .arg(escrow->toString(), job.pricePerShard.toString())));
        return Acceptance::Stale;
    }
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    if (!sampled) {
        auto paid = m_stakes->payFromEscrow(job.id, assignment.node, job.pricePerShard,
            QStringLiteral("pay:%1/%2/%3").arg(job.id).arg(assignment.round).arg(assignment.shard),
            QStringLiteral("shard %1 of round %2").arg(assignment.shard).arg(assignment.round));
        if (!paid)
            return paid.error();
    }
    // A stage's update norm is of its share of the model: not comparable with its partners'.
    const ShardResultRow row { assignment.round, assignment.shard, assignment.node, result.toJson(),
        sampled ? ResultState::Sampled : ResultState::Accepted, assignment.id, stage ? -1.0 : admitted->updateNorm };
    // A sampled result waits for another node to re-execute it (or the broker, in time).
    for (const auto& status : {
             m_store->insertShardResult(job.id, row),
             m_store->setAssignmentState(assignment.id, AssignmentState::Answered),
             stage ? Status {}
                   : m_store->countShardDone(
                       assignment.node, m_clock.nowMs(), sampled ? BrokerStore::Streak::Holds : BrokerStore::Streak::Grows),
             admitted->sample && !stage ? m_store->insertCheck(*admitted->sample, m_clock.nowMs()) : Status {},
         }) {
        if (!status)
            return status.error();
    }
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    m_scheduler.answered(job.id, assignment.id, assignment.shard, m_clock.nowMs());
    if (stage) {
        if (admitted->sample)
            m_pipelines.holdSample(assignment.id, *admitted->sample);
        if (auto status = completePipeline(assignment, job, spec); !status)
            return status.error();
        return Acceptance::Held;
    }
    if (sampled)
        return Acceptance::Held;
    if (auto status = finishRoundIfComplete(job.id, spec, assignment.round); !status)
        return status.error();
    return Acceptance::Accepted;
}

// --- rounds --------------------------------------------------------------------------------------

Status Broker::finishRoundIfComplete(const QString& jobId, const JobSpec& spec, std::int64_t round)
{
    // The results that came are stored whatever happens here: a round that cannot be finished now
    // (its database is busy or full) is tried again on the next tick, never left behind.
    auto finished = finishRound(jobId, spec, round);
    if (!finished) {
        qCWarning(lcBrokerCore).noquote() << "round" << round << "of job" << jobId
                                          << "could not be finished now (tried again shortly):" << finished.error().toString();
        m_roundsToFinish.insert(jobId);
        return {};
    }
    m_roundsToFinish.remove(jobId);
    return {};
}

Status Broker::finishRound(const QString& jobId, const JobSpec& spec, std::int64_t round)
{
    auto results = collectRound(jobId, spec, round);
    if (!results)
        return results.error();
    if (!*results)
        return {};
    auto job = m_store->existingJob(jobId);
    if (!job)
        return job.error();
    if (job->state != JobState::Running || job->round != round)
        return {};
    auto held = recheckImplausible(*job, round);
    if (!held)
        return held.error();
    if (*held)
        return {}; // aggregated once the re-executions confirm them
    auto aggregated
        = spec.isInference() ? assembleInference(*job, spec, **results) : aggregateRound(*job, spec, round, **results);
    if (!aggregated)
        return aggregated.error();
    if (!*aggregated)
        return {}; // the job failed for it
    if (auto status = advanceRound(*job, spec, **aggregated); !status)
        return status;
    discardUploadsOf(jobId, round);
    return {};
}

void Broker::applySettled()
{
    const auto settled = m_verifier->takeSettled();
    for (const auto& failure : settled.failedJobs)
        warnIfFailed(failJob(failure.jobId, failure.why));
    m_roundsToFinish.unite(settled.roundsToFinish); // a job that ended meanwhile is dropped there
    finishPendingRounds();
}

void Broker::finishPendingRounds()
{
    for (const auto& jobId : QSet<QString>(m_roundsToFinish)) {
        const auto* round = m_scheduler.find(jobId);
        if (!round) {
            m_roundsToFinish.remove(jobId);
            continue;
        }
        const JobSpec spec = round->spec;
        warnIfFailed(finishRoundIfComplete(jobId, spec, round->round));
    }
}

Result<bool> Broker::recheckImplausible(const JobRow& job, std::int64_t round)
{
    // No unchecked result reaches the weights without being plausible against its round: one whose
    // update norm is far from the round's others (or, with too few to compare, any) is re-executed
    // before the round aggregates (docs/VERIFICATION.md, "Unchecked results").
    auto rows = m_store->shardResults(job.id, round);
    if (!rows)
        return rows.error();
    QList<ShardResultRow> measured;
    QList<double> norms;
    for (const auto& row : *rows) {
        if (row.updateNorm >= 0.0) {
            measured.append(row);
            norms.append(row.updateNorm);
        }
    }
    if (measured.isEmpty())
        return false; // an arithmetic that does not measure norms
    // A round of one or two results is compared with its latest rounds' too (up to three back).
    QList<double> reference;
    for (std::int64_t earlier = round - 1; earlier >= std::max<std::int64_t>(0, round - 3) && norms.size() + reference.size() < 3;
         --earlier) {
        auto previous = m_store->shardResults(job.id, earlier);
        if (!previous)
            return previous.error();
        for (const auto& row : *previous) {
            if (row.updateNorm >= 0.0)
                reference.append(row.updateNorm);
        }
    }
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    int held = 0;
    for (const auto index : verification::implausibleUpdates(norms, reference, m_options.updateNormFactor)) {
        const auto& row = measured[index];
        if (row.state != ResultState::Accepted || row.node.isEmpty())
            continue; // re-executed already, or the broker's own
        auto result = ShardResult::fromJson(row.resultJson);
        if (!result)
            return result.error();
        const AssignmentRow assignment { row.assignment, job.id, round, row.shard, row.node, 0, 0, AssignmentState::Answered,
            AssignmentKind::Train, {} };
        for (const auto& status : { m_store->setResultState(job.id, round, row.shard, ResultState::Sampled),
                 m_store->insertCheck(
                     Verifier::sampleOf(assignment, job.weightsHash, job.weightsBlob, *result), m_clock.nowMs()) }) {
            if (!status)
                return status.error();
        }
        qCInfo(lcBrokerCore).noquote() << "round" << round << "shard" << row.shard << "of job" << job.id << ": update norm"
                                       << row.updateNorm
                                       << "is implausible against the round's; re-executed before it aggregates";
        ++held;
    }
    if (auto committed = transaction->commit(); !committed)
        return committed.error().toError();
    return held > 0;
}

void Broker::discardUploadsOf(const QString& jobId, std::int64_t round)
{
    auto uploads = m_store->uploadsOfRound(jobId, round);
    if (!uploads) {
        qCWarning(lcBrokerCore).noquote() << "the uploads of round" << round << "of job" << jobId
                                          << "stay:" << uploads.error().toString();
        return;
    }
    int removed = 0;
    for (const auto& digest : *uploads) {
        const auto named = m_store->blobNamed(digest);
        if (named && !*named && m_blobs.remove(digest))
            ++removed;
    }
    if (removed > 0)
        qCDebug(lcBrokerCore).noquote() << "round" << round << "of job" << jobId << "aggregated:" << removed
                                        << "shard uploads deleted";
}

Result<std::optional<QList<ShardResult>>> Broker::collectRound(const QString& jobId, const JobSpec& spec, std::int64_t round)
{
    auto rows = m_store->shardResults(jobId, round);
    if (!rows)
        return rows.error();
    QList<ShardResult> results;
    for (const auto& row : *rows) {
        if (row.state == ResultState::Sampled)
            return std::optional<QList<ShardResult>> {}; // aggregated once its check confirms it
        auto result = ShardResult::fromJson(row.resultJson);
        if (!result)
            return result.error();
        results.append(*result);
    }
    if (results.size() < spec.unitsPerRound())
        return std::optional<QList<ShardResult>> {};
    // A pipeline's stage checks whose results were dropped (a partner lied) still judge their
    // node: the round, whose weights they start from, waits for them.
    if (spec.stagesPerShard() > 1) {
        auto open = m_store->openChecks(jobId);
        if (!open)
            return open.error();
        for (const auto& check : *open) {
            if (check.round == round && check.kind == CheckKind::Sample)
                return std::optional<QList<ShardResult>> {};
        }
    }
    return std::optional<QList<ShardResult>>(results);
}

// The round's results as the arithmetic takes them: each shard's weights by file (read one shard
// at a time, off this thread) and its samples; and the mean of every step's training loss.
Result<QList<TrainingMath::Update>> Broker::updatesOf(
    const QString& jobId, const JobSpec& spec, std::int64_t round, const QList<ShardResult>& results, double& meanTrainLoss)
{
    const auto tasks = decomposeRound(jobId, spec, round, {});
    QList<TrainingMath::Update> updates;
    double lossSum = 0.0;
    std::int64_t lossCount = 0;
    // A pipeline job's results are its stages', in unit order: each shard's S parts merged into
    // the shard's weights first (a file in the store's staging folder, gone with the round), and
    // its losses are its last stage's.
    const auto S = spec.stagesPerShard();
    for (qsizetype i = 0; i + S <= results.size(); i += S) {
        const auto& result = results[i + S - 1];
        QStringList parts;
        for (qsizetype s = 0; s < S; ++s) {
            const auto file = m_blobs.storedFile(results[i + s].weightsSha256);
            if (!file || results[i + s].shard != result.shard)
                return Error { QStringLiteral("blob"), QStringLiteral("the weights of shard %1 are gone").arg(result.shard) };
            parts.append(*file);
        }
        if (S > 1) {
            const QDir staging(m_blobs.stagingDirectory());
            staging.mkpath(QStringLiteral("."));
            const auto merged = staging.filePath(QStringLiteral("stages-%1-%2-%3.part").arg(jobId).arg(round).arg(result.shard));
            if (auto hash = m_math.mergeStages(parts, merged); !hash)
                return hash.error();
            parts = { merged };
        }
        const auto& task = tasks[result.shard];
        updates.append({ result.shard, task.sampleEnd - task.sampleBegin, {}, parts.front() });
        for (double loss : result.losses)
            lossSum += loss;
        lossCount += result.losses.size();
    }
    meanTrainLoss = lossCount ? lossSum / double(lossCount) : 0.0;
    return updates;
}

Result<std::optional<Broker::AggregatedRound>> Broker::aggregateRound(
    const JobRow& job, const JobSpec& spec, std::int64_t round, const QList<ShardResult>& results)
{
    const auto global = m_blobs.storedFile(job.weightsBlob); // read record by record, off this thread
    if (!global)
        return Error { QStringLiteral("blob"), QStringLiteral("the round's weights are gone") };
    QByteArray outerState;
    if (job.outerStateBlob) {
        auto outer = m_blobs.read(*job.outerStateBlob);
        if (!outer)
            return outer.error();
        outerState = *outer;
    }
    double meanTrainLoss = 0.0;
    auto updates = updatesOf(job.id, spec, round, results, meanTrainLoss);
    if (!updates)
        return updates.error();
    auto failed = [&](const QString& what, const Error& error) -> Result<std::optional<AggregatedRound>> {
        if (auto status = failJob(job.id, QStringLiteral("round %1 could not be %2: %3").arg(round).arg(what, error.message));
            !status)
            return status.error();
        return std::optional<AggregatedRound> {};
    };
    // W_{r+1} is written straight into the store's staging folder and taken in by name.
    const QDir staging(m_blobs.stagingDirectory());
    staging.mkpath(QStringLiteral("."));
    const QString weightsOut = staging.filePath(QStringLiteral("round-%1-%2.part").arg(job.id).arg(round));
    auto aggregated = m_math.aggregate(spec.aggregationOfRound(round), *global, *updates, outerState, weightsOut);
    if (spec.stagesPerShard() > 1) { // the merged stages' files: read
        for (const auto& update : *updates)
            QFile::remove(update.weightsFile);
    }
    if (!aggregated) {
        QFile::remove(weightsOut);
        if (aggregated.error().field == QLatin1String("blob"))
            return aggregated.error(); // this broker's disk, not the job: tried again shortly
        return failed(QStringLiteral("aggregated"), aggregated.error());
    }
    auto blob = m_blobs.adopt(weightsOut, aggregated->weights.sha256);
    if (!blob)
        return blob.error();
    std::optional<Digest> changeBlob;
    if (!aggregated->change.isEmpty() && round + 1 < spec.training.rounds) { // no round follows the last
        auto stored = m_blobs.put(aggregated->change, aggregated->changeSha256);
        if (!stored)
            return stored.error();
        changeBlob = *stored;
    }
    aggregated->change.clear();
    AggregatedRound next { { round, 0.0, 0.0, meanTrainLoss, aggregated->weights.canonicalHash, *blob, m_clock.nowMs(), false },
        std::nullopt, changeBlob };
    if (spec.training.evaluates(round)) { // else recorded without a test loss, not in the history
        auto weights = m_blobs.read(*blob); // the evaluation's own copy, let go of once read
        if (!weights)
            return weights.error();
        auto evaluation = m_math.evaluate(spec, std::move(*weights));
        if (!evaluation)
            return failed(QStringLiteral("evaluated"), evaluation.error());
        if (!std::isfinite(evaluation->loss) || !std::isfinite(evaluation->accuracy))
            return failed(QStringLiteral("evaluated"),
                Error { {},
                    QStringLiteral("its weights give a test loss of %1 (the training diverged; is the learning rate too high?)")
                        .arg(evaluation->loss) });
        next.record.testLoss = evaluation->loss;
        next.record.testAccuracy = evaluation->accuracy;
        next.record.evaluated = true;
    }
    if (!aggregated->outerState.isEmpty()) {
        auto stored = m_blobs.put(aggregated->outerState);
        if (!stored)
            return stored.error();
        next.outerStateBlob = *stored;
    }
    return std::optional<AggregatedRound>(next);
}

Result<std::optional<Broker::AggregatedRound>> Broker::assembleInference(
    const JobRow& job, const JobSpec& spec, QList<ShardResult> results)
{
    // The shards' lines one after the other, in input order, written into the store's staging
    // folder a shard at a time (docs/JOBS.md, "Inference jobs"); their summary is the record's.
    std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.shard < b.shard; });
    const QDir staging(m_blobs.stagingDirectory());
    staging.mkpath(QStringLiteral("."));
    const QString path = staging.filePath(QStringLiteral("result-%1.part").arg(job.id));
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate))
        return Error { QStringLiteral("blob"), QStringLiteral("cannot write %1").arg(path) };
    QCryptographicHash hash(QCryptographicHash::Sha256);
    inference::Summary total;
    double lossSum = 0.0;
    for (const auto& result : results) {
        auto lines = m_blobs.read(result.weightsSha256);
        if (!lines) {
            file.remove();
            return Error { QStringLiteral("blob"), QStringLiteral("the lines of shard %1 are gone").arg(result.shard) };
        }
        auto summary = inference::summarize(spec.inference.task, *lines);
        if (summary) {
            total.inputs += summary->inputs;
            total.labelled += summary->labelled;
            total.correct += summary->correct;
            total.tokens += summary->tokens;
            lossSum += summary->meanLoss * double(summary->inputs);
        }
        hash.addData(*lines);
        if (file.write(*lines) != lines->size()) {
            file.remove();
            return Error { QStringLiteral("blob"), QStringLiteral("cannot write %1").arg(path) };
        }
    }
    file.close();
    const auto digest = Digest::fromRaw(hash.result()).value_or(Digest {});
    auto blob = m_blobs.adopt(path, digest);
    if (!blob)
        return blob.error();
    const bool figures = total.labelled > 0 || spec.inference.task == InferenceSpec::Task::Score;
    const double meanLoss = total.inputs > 0 ? lossSum / double(total.inputs) : 0.0;
    AggregatedRound assembled { { 0, meanLoss, total.accuracy(), 0.0, digest, *blob, m_clock.nowMs(), figures }, std::nullopt,
        std::nullopt };
    qCInfo(lcBrokerCore).noquote() << "inference job" << job.id << "assembled:" << total.inputs << "inputs from" << results.size()
                                   << "shards";
    return std::optional<AggregatedRound>(assembled);
}

Status Broker::advanceRound(const JobRow& job, const JobSpec& spec, const AggregatedRound& aggregated)
{
    const auto& record = aggregated.record;
    const bool last = record.round + 1 >= spec.training.rounds;
    // Nodes that hold this round's weights fetch the next round's as the change from them.
    std::optional<WeightsChange> change;
    if (aggregated.changeBlob)
        change = WeightsChange { *aggregated.changeBlob, job.weightsBlob };
    auto transaction = m_store->begin();
    if (!transaction)
        return transaction.error();
    for (const auto& status : {
             m_store->insertRound(job.id, record),
             m_store->allowOwnerToRead(record.weightsBlob, job.id), // the new weights are the owner's to fetch
             m_store->advanceJob(job.id, record.round + 1, record.weightsHash, record.weightsBlob,
                 last ? JobState::Finished : JobState::Running, aggregated.outerStateBlob, change),
             // Assignments of the finished round that are still out are moot now.
             m_store->expireActiveAssignmentsIn(job.id, record.round),
             last ? refund(job.id) : Status {},
         }) {
        if (!status)
            return status;
    }
    if (auto status = transaction->commit(); !status)
        return status.error().toError();
    if (last)
        m_scheduler.remove(job.id);
    else
        m_scheduler.advance(job.id, record.round + 1, record.weightsHash, record.weightsBlob, change);
    // The change that led to this round is nobody's way to any weights now.
    if (job.change && !m_store->blobNamed(job.change->blob).value_or(true))
        m_blobs.remove(job.change->blob);
    collectOldWeights(job.id, spec, record.round);
    return {};
}

void Broker::collectOldWeights(const QString& jobId, const JobSpec& spec, std::int64_t finished)
{
    // The round that has just fallen out of the newest keepRounds: its weights go, unless the owner
    // asked for them. The last round's never do (no round comes after it), nor the initial weights.
    const auto old = finished - std::max<std::int64_t>(2, m_options.keepRounds);
    const auto every = spec.training.keepWeightsEvery;
    if (old < 0 || (every > 0 && (old + 1) % every == 0))
        return;
    auto blob = m_store->forgetRoundWeights(jobId, old);
    if (!blob) {
        qCWarning(lcBrokerCore).noquote() << "round" << old << "of job" << jobId
                                          << "keeps its weights:" << blob.error().toString();
        return;
    }
    if (*blob && !m_store->blobNamed(**blob).value_or(true))
        m_blobs.remove(**blob);
}

// --- checks, records and time --------------------------------------------------------------------

Status Broker::checkpointDelivered(const QString& nodeId, const QString& checkId, const Digest& blob)
{
    auto check = m_store->check(checkId);
    if (!check)
        return check.error();
    if (*check) {
        if (auto status = refuseUnlessHeld((*check)->jobId, QStringLiteral("deliver the checkpoint")); !status)
            return status;
    }
    auto status = m_verifier->checkpointDelivered(nodeId, checkId, blob);
    applySettled();
    return status;
}

Status Broker::admitUpload(const QString& uploader, std::int64_t size)
{
    auto held = m_store->unnamedUploadBytes(uploader);
    if (!held)
        return held.error();
    if (*held + size > m_options.maxUnnamedUploadBytes)
        return Error { QStringLiteral("upload"),
            QStringLiteral("your uploads that no job names yet hold %1 MiB; this one would pass the %2 MiB one uploader may "
                           "hold (Broker/MaxUnnamedUploadMiB): submit the jobs that name them, or wait until they are "
                           "collected (%3 minutes after upload)")
                .arg(*held >> 20)
                .arg(m_options.maxUnnamedUploadBytes >> 20)
                .arg(m_options.unnamedUploadMs / 60'000) };
    return {};
}

Status Broker::recordUpload(const Digest& blob, const QString& uploader, std::int64_t size)
{
    return m_store->recordUpload({ blob, uploader, size, m_clock.nowMs() });
}

void Broker::collectUnnamedUploads()
{
    const auto now = m_clock.nowMs();
    if (now < m_nextUploadCollection)
        return;
    m_nextUploadCollection = now + std::clamp<std::int64_t>(m_options.unnamedUploadMs / 10, 1'000, 60'000);
    auto uploads = m_store->uploads();
    if (!uploads) {
        qCWarning(lcBrokerCore).noquote() << "uploads are not collected:" << uploads.error().toString();
        return;
    }
    int removed = 0;
    for (const auto& upload : *uploads) {
        const auto named = m_store->blobNamed(upload.blob);
        if (!named)
            return; // the database's trouble: tried again at the next collection
        const bool local = m_blobs.contains(upload.blob);
        const bool stale = !*named && now - upload.at >= m_options.unnamedUploadMs;
        // Where brokers share the database, an upload another broker took in is that one's to
        // collect; one whose broker never did (it is gone) goes after twice the time, copy and all.
        const bool orphaned = m_mirror && !local && !*named && now - upload.at >= 2 * m_options.unnamedUploadMs;
        if (*named || (local && stale) || (!m_mirror && !local) || orphaned) {
            if (stale && local && m_blobs.remove(upload.blob))
                ++removed;
            if (orphaned)
                m_mirror->removed(upload.blob);
            if (auto forgotten = m_store->forgetUpload(upload.blob); !forgotten)
                return;
        }
    }
    if (removed > 0)
        qCInfo(lcBrokerCore).noquote() << removed << "uploads no job named within" << m_options.unnamedUploadMs / 60'000
                                       << "minutes removed";
}

void Broker::tick()
{
    m_store->forgetReads();
    m_stakes->forgetStakes();
    if (m_jobLeases->shared()) {
        if (auto status = updateLeases(); !status)
            qCWarning(lcBrokerCore).noquote() << "cannot renew the leases:" << status.error().toString();
    }
    finishPendingRounds();
    collectUnnamedUploads();
    m_verifier->tick(); // of the jobs this broker holds
    applySettled();
    stopLatePipelines();
    m_serving->tick();
    payServed();
    for (const auto& jobId : m_serving->due())
        warnIfFailed(finishServed(jobId));
    if (m_lease->held()) // one broker of the network at a time
        m_stakes->releaseDueUnbondings();
    m_log->tick();
}

Result<QJsonObject> Broker::creditRecord(const QString& nodeId, const QJsonObject& record)
{
    auto fail = [](const QString& why) { return Error { QStringLiteral("record"), why }; };
    const QJsonObject head = record.value(QStringLiteral("head")).toObject();
    const QString network = head.value(QStringLiteral("network")).toString();
    if (record.value(QStringLiteral("node")).toString() != nodeId)
        return fail(QStringLiteral("it is another node's record; a node presents its own"));
    if (network == m_networkId)
        return fail(QStringLiteral("it is of this network, whose log this broker keeps"));
    QString trustedKey;
    for (const auto& entry : m_options.trustedNetworks) {
        if (entry.section(u':', 0, 0) == network)
            trustedKey = entry.section(u':', 1);
    }
    if (trustedKey.isEmpty())
        return fail(QStringLiteral("network %1 is not one this broker trusts (Broker/TrustedNetworks)").arg(network));
    auto summary = ledger::verifyRecord(record, trustedKey);
    if (!summary)
        return fail(summary.error().message);
    // A record proves what it holds, not what it leaves out: the credit is bounded, and none for a
    // record that shows a loss.
    const std::int64_t credit = summary->disputesLost > 0 || summary->slashes > 0
        ? 0
        : std::min<std::int64_t>(summary->verified + summary->agreed, m_options.recordCreditMax);
    std::int64_t granted = 0;
    if (credit > 0) {
        auto given = m_store->creditRecord(nodeId, network, credit, m_clock.nowMs());
        if (!given)
            return given.error();
        granted = *given;
    }
    if (granted > 0)
        qCInfo(lcBrokerCore).noquote() << "node" << nodeId.left(12) << "starts from a streak of" << granted
                                       << "by its record of network" << network;
    return QJsonObject { { QStringLiteral("credited"), qint64(granted) }, { QStringLiteral("summary"), summary->toJson() } };
}

Result<QList<QJsonObject>> Broker::logEntries(std::int64_t from, int limit)
{
    return ledger::LedgerLog(m_store->database()).entries(from, limit);
}

Result<QList<QJsonObject>> Broker::verifications(const QString& jobId, int limit)
{
    auto records = m_store->checkRecords(jobId, limit);
    if (!records)
        return records.error();
    QList<QJsonObject> list;
    for (const auto& record : *records)
        list.append(record.toJson());
    return list;
}

Result<QList<QJsonObject>> Broker::nodes(Listing listing)
{
    auto rows = m_store->nodes();
    if (!rows)
        return rows.error();
    QList<QJsonObject> list;
    const auto since = m_clock.nowMs() - Options::listedForMs;
    for (const auto& row : *rows) {
        if (listing == Listing::Recent && !m_nodes.contains(row.id) && row.lastSeen < since)
            continue; // long gone: only in the full listing
        NodeRecord record;
        record.nodeId = row.id;
        record.name = row.info.value(QStringLiteral("name")).toString();
        record.runtimeProfile = row.info.value(QStringLiteral("runtimeProfile")).toString();
        record.benchmarkSamplesPerSecond = row.info.value(QStringLiteral("benchmarkSamplesPerSecond")).toDouble();
        record.online = m_nodes.contains(row.id);
        record.firstSeen = isoTime(row.firstSeen);
        record.lastSeen = isoTime(row.lastSeen);
        record.shardsDone = row.shardsDone;
        record.shardsFailed = row.shardsFailed;
        record.verified = row.verified;
        record.disputesLost = row.disputesLost;
        record.timeouts = row.timeouts;
        record.slashed = row.slashed;
        record.streak = row.streak;
        record.stake = m_ledger->balance(ledger::accounts::stake(row.id)).value_or(Credits {});
        record.balance = m_ledger->balance(ledger::accounts::balance(row.id)).value_or(Credits {});
        list.append(record.toJson());
    }
    return list;
}

double Broker::schedulingScore(const QString& nodeId)
{
    const auto node = m_nodes.constFind(nodeId);
    const double throughput = node == m_nodes.constEnd() ? 0.0 : expectedSamplesPerSecond(*node);
    auto record = m_store->node(nodeId);
    if (!record || !*record)
        return throughput;
    const auto& r = **record;
    // A lost dispute weighs like ten failures, a timeout in a dispute like one.
    const double failed = double(r.shardsFailed) + 10.0 * double(r.disputesLost) + double(r.timeouts);
    return throughput * (double(r.shardsDone) + 1.0) / (double(r.shardsDone) + failed + 1.0);
}

} // namespace tessera::core::broker
