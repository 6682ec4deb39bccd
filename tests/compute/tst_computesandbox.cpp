// The compute worker (tessera-compute) as the supervisor drives it: the same bits as in process,
// confinement, time and memory limits, a job's output kept from the supervisor, and pause and
// resume across workers.

#include "computetesting.h"

#include <compute/supervisor/inthread.h>
#include <core/inference/outputs.h>
#include <core/inference/question.h>
#include <core/smalljobs.h>

using namespace tessera;
using namespace tessera::computetests;

class ComputeSandboxTest : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_fixtures;

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_fixtures.isValid());
        QVERIFY2(makeFixtures(m_fixtures.path()), "could not make the PyTorch fixtures");
    }

    // The sandboxed compute worker (tessera-compute; docs/SECURITY.md, "The compute worker").

    // A shard trained in the confined worker has the bits the node's own thread gives it, so
    // verification cannot tell where it ran; its progress comes through the pipe.
    // What a program without LibTorch (the desktop app, the node's set-up) asks a worker: the
    // runtime profile it registers with is the one its shards are computed under, and a benchmark
    // is measured there and comes back whole.
    void theRuntimeProfileAndBenchmarksComeFromAWorker()
    {
        const auto runtime = compute::sandbox::runtimeInWorker(1, workerOptions(m_scratch));
        QVERIFY2(runtime, qPrintable(runtime ? QString() : runtime.error().toString()));
        QCOMPARE(runtime->runtimeProfile, compute::currentRuntimeProfile(1).toString());
        QCOMPARE(runtime->torch.cuda, compute::torchCapabilities().cuda);
        const auto prepared = prepare(smallJob());
        QCOMPARE(runtime->runtimeProfile, compute::runShard(prepared.tasks[0], prepared.start.bytes, {}).result.runtimeProfile);

        auto benchmark = compute::BenchmarkOptions::firstStart(1);
        benchmark.minRepetitions = 1;
        benchmark.maxRepetitions = 2;
        int reported = 0;
        benchmark.progress = [&](const QString& name, int) {
            QCOMPARE(name, QStringLiteral("mlp"));
            ++reported;
        };
        const auto record = compute::sandbox::benchmarkInWorker(benchmark, workerOptions(m_scratch));
        QVERIFY2(record, qPrintable(record ? QString() : record.error().toString()));
        QVERIFY(record->measurement(u"mlp") && record->measurement(u"mlp")->value > 0.0);
        QVERIFY(!record->measurement(u"cnn"));
        QVERIFY(record->device.startsWith(QStringLiteral("cpu:0 ")));
        QVERIFY(reported >= 1);

        // A worker that is not there is the node's problem, said as such.
        auto missing = workerOptions(m_scratch);
        missing.program = m_scratch.filePath(QStringLiteral("no-such-worker"));
        const auto none = compute::sandbox::runtimeInWorker(1, missing);
        QVERIFY(!none);
        QCOMPARE(none.error().field, QStringLiteral("worker"));
    }

    void aShardTrainedInTheWorkerHasTheBitsOfOneTrainedInProcess()
    {
        const auto prepared = prepare(smallJob());
        const auto here = compute::runShard(prepared.tasks[0], prepared.start.bytes, {});
        QCOMPARE(here.result.outcome, core::ShardResult::Outcome::Completed);
        int progressed = 0;
        auto options = workerOptions(m_scratch);
        options.progress = [&](const compute::ShardProgress& progress) {
            QCOMPARE(progress.steps, prepared.tasks[0].localSteps);
            ++progressed;
        };
        const auto there = compute::sandbox::runShardInWorker(prepared.tasks[0], prepared.start.bytes, {}, options);
        QVERIFY2(there.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(there.result.failure));
        QCOMPARE(there.result.finalHash, here.result.finalHash);
        QCOMPARE(there.result.checkpointHashes, here.result.checkpointHashes);
        QCOMPARE(there.result.losses, here.result.losses);
        QCOMPARE(there.result.runtimeProfile, here.result.runtimeProfile);
        QCOMPARE(there.weights, here.weights);
        QCOMPARE(there.keptState.size(), here.keptState.size()); // it also holds the time it took
        QVERIFY(progressed >= 1);
        QVERIFY(QDir(m_scratch.path()).entryList(QDir::Dirs | QDir::NoDotAndDotDot).isEmpty()); // scratch removed
    }

    // A served model's replica in a confined worker (the desktop app's, which has no LibTorch):
    // each answer's line and streamed tokens are those of the model in this process, and a
    // question after the worker is gone is an error, not a hang.
    void aReplicaHostedInAWorkerAnswersAsInProcess()
    {
        const auto trained = smallGpt();
        const auto start = compute::initialWeights(trained, {});
        QVERIFY(start);
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("gpt.pt"));
        QFile out(file);
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write(start->bytes);
        out.close();
        core::InferenceSpec serve;
        serve.task = core::InferenceSpec::Task::Serve;
        serve.batchSize = serve.samplesPerShard = serve.threads = serve.replicas = 1;
        serve.seconds = 60;
        serve.maxTokens = 30;
        const auto served = core::inferenceJobOf(trained, file, serve);
        QVERIFY(served);
        const auto replica = core::decomposeShard(QStringLiteral("0123456789abcdef"), *served, 0, 0, start->canonicalHash);
        auto here = compute::inThreadCompute()->host(replica, start->bytes, {});
        auto there = compute::sandbox::hostInWorker(replica, start->bytes, {}, workerOptions(m_scratch));
        QVERIFY2(here && there, qPrintable(there ? QString() : there.error().toString()));
        for (const auto temperature : { 0.0, 0.8 }) {
            core::inference::Question question;
            question.prompt = QByteArrayLiteral("Tell me ");
            question.maxTokens = 30;
            question.temperature = temperature;
            question.seed = 4;
            QList<std::int64_t> streamed;
            const auto line = (*there)->answer(question, [&](std::int64_t from, const QList<std::int64_t>& tokens) {
                QCOMPARE(from, streamed.size());
                streamed += tokens;
            });
            QVERIFY2(line, qPrintable(line ? QString() : line.error().toString()));
            QCOMPARE(*line, *(*here)->answer(question, {}));
            QCOMPARE(streamed, core::inference::completionOf(*line)->tokens);
        }
        // A question it cannot read comes back as an error, and the replica answers the next.
        core::inference::Question wrong;
        wrong.prompt = QByteArrayLiteral("x");
        wrong.maxTokens = 5000;
        QVERIFY(!(*there)->answer(wrong, {}));
        core::inference::Question fine;
        fine.prompt = QByteArrayLiteral("x");
        fine.maxTokens = 3;
        QVERIFY((*there)->answer(fine, {}));
    }

    // What a hostile job's code would try first, tried by the worker itself once confined: each is
    // refused by the kernel (Landlock for files, seccomp for sockets, programs, other processes,
    // memfds and priorities), and the worker says why.
    void theWorkerCannotReadTheNodesKeysOpenSocketsOrStartPrograms()
    {
        QTemporaryDir data; // stands for the node's data folder
        QFile key(QDir(data.path()).filePath(QStringLiteral("node.key")));
        QVERIFY(key.open(QIODevice::WriteOnly));
        key.write("secret");
        key.close();
        QTemporaryDir scratch;
        QProcess worker;
        worker.start(QStringLiteral(TESSERA_COMPUTE_WORKER),
            { QStringLiteral("probe"), QStringLiteral("--scratch"), scratch.path(), QStringLiteral("--memory-mib"),
                QStringLiteral("512"), QStringLiteral("--try-read"), key.fileName() });
        QVERIFY(worker.waitForFinished(60'000));
        const QString said = QString::fromLocal8Bit(worker.readAllStandardOutput());
        qInfo("%s", qPrintable(said));
        QCOMPARE(worker.exitCode(), 0);
        QVERIFY2(said.contains(QStringLiteral("socket: refused (Operation not permitted)")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("unix socket: refused (Operation not permitted)")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("exec: refused (Operation not permitted)")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("write scratch: allowed")), qPrintable(said));
        // Native code in a hostile job (what a LibTorch memory bug would hand it): it cannot signal
        // its supervisor by any call, hold memory outside its address space in a memfd, or put
        // itself ahead of the computer's owner, even when the worker runs as root (CI does); it
        // still signals its own threads (abort() needs that) and reads its limits.
        for (const auto* refused : { "signal supervisor", "pidfd", "memfd", "raise priority", "real-time", "lift memory limit" })
            QVERIFY2(said.contains(QStringLiteral("%1: refused (").arg(QLatin1String(refused))), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("signal itself: allowed")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("read limits: allowed")), qPrintable(said));
        if (said.contains(QStringLiteral("landlock=0")))
            QSKIP("this kernel has no Landlock: the worker's files are not confined here (the worker warns)");
        QVERIFY2(said.contains(QStringLiteral("read: refused (Permission denied)")), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("write outside: refused (Permission denied)")), qPrintable(said));
    }

    // forward() that never returns: the worker is killed at the shard's time limit, the result says
    // so, and the next shard trains.
    void anEndlessForwardIsStoppedAtTheTimeLimitAndTheNextShardTrains()
    {
        auto task = hostileTask(QStringLiteral("endless.pt"));
        auto options = workerOptions(m_scratch);
        options.timeLimitMs = 3000;
        const auto stopped = compute::sandbox::runShardInWorker(task.first, task.second, {}, options);
        QCOMPARE(stopped.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(stopped.result.failure.startsWith(QStringLiteral("time limit")), qPrintable(stopped.result.failure));
        nextShardTrains();
    }

    // forward() that allocates without end: the allocation past Compute/MaxMemoryMiB fails inside
    // the worker (its address space is limited), so the kernel's OOM killer never chooses among the
    // machine's processes; the result says out of memory, and the next shard trains.
    void anUnboundedAllocationStopsAtTheMemoryLimitAndTheNextShardTrains()
    {
        auto task = hostileTask(QStringLiteral("hoarder.pt"));
        auto options = workerOptions(m_scratch);
        options.memoryMiB = 1024;
        options.timeLimitMs = 120'000; // not what stops it; only a guard for the test
        const auto stopped = compute::sandbox::runShardInWorker(task.first, task.second, {}, options);
        QCOMPARE(stopped.result.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(stopped.result.failure.startsWith(QStringLiteral("out of memory")), qPrintable(stopped.result.failure));
        nextShardTrains();
    }

    // What a job's code prints (here lines that look like the worker's own answers: "done",
    // "progress ...") goes to the worker's log, never onto its answers: a driven worker and a
    // one-shot one both train the shard to the bits of a run here.
    void whatAJobsCodePrintsNeverReachesTheSupervisor()
    {
        const auto [task, start] = hostileTask(QStringLiteral("printer.pt"));
        const auto here = compute::runShard(task, start, {});
        QVERIFY2(here.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(here.result.failure));
        const auto once = compute::sandbox::runShardInWorker(task, start, {}, workerOptions(m_scratch));
        QVERIFY2(once.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(once.result.failure));
        QCOMPARE(once.result.checkpointHashes, here.result.checkpointHashes);
        auto driven = compute::sandbox::RemoteShardRun::start(task, start, {}, workerOptions(m_scratch));
        QVERIFY2(driven.ok(), qPrintable(driven.ok() ? QString() : driven.error().toString()));
        while (!(*driven)->finished())
            QVERIFY((*driven)->step(3).ok());
        const auto there = (*driven)->finish();
        QVERIFY2(there.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(there.result.failure));
        QCOMPARE(there.result.checkpointHashes, here.result.checkpointHashes);
        QCOMPARE(there.weights, here.weights);
    }

    // A long-lived worker driven a few steps at a time, as the compute thread drives its runs:
    // paused in one worker after 7 steps, resumed in another, it ends with the bits of one
    // uninterrupted run here.
    void aShardPausedInOneWorkerAndResumedInAnotherEndsWithTheSameBits()
    {
        const auto prepared = prepare(smallJob());
        const auto& task = prepared.tasks[2];
        const auto here = compute::runShard(task, prepared.start.bytes, {});
        QByteArray state;
        {
            auto first = compute::sandbox::RemoteShardRun::start(task, prepared.start.bytes, {}, workerOptions(m_scratch));
            QVERIFY2(first.ok(), qPrintable(first.ok() ? QString() : first.error().toString()));
            QVERIFY((*first)->step(7).ok());
            QCOMPARE((*first)->completedSteps(), 7);
            auto suspended = (*first)->suspend();
            QVERIFY2(suspended.ok(), qPrintable(suspended.ok() ? QString() : suspended.error().toString()));
            state = *suspended;
        } // that worker ends here
        auto second = compute::sandbox::RemoteShardRun::resume(task, state, {}, workerOptions(m_scratch), prepared.start.bytes);
        QVERIFY2(second.ok(), qPrintable(second.ok() ? QString() : second.error().toString()));
        QCOMPARE((*second)->completedSteps(), 7);
        while (!(*second)->finished())
            QVERIFY((*second)->step(5).ok());
        const auto there = (*second)->finish();
        QVERIFY2(there.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(there.result.failure));
        QCOMPARE(there.result.finalHash, here.result.finalHash);
        QCOMPARE(there.result.checkpointHashes, here.result.checkpointHashes);
        QCOMPARE(there.weights, here.weights);

        // An endless forward() in a driven worker: the worker ends at the time limit, counted from
        // the shard's start (on a busy machine the limit may already pass while the worker loads the
        // job's data; then start() says so), without taking this process with it.
        auto endless = hostileTask(QStringLiteral("endless.pt"));
        auto options = workerOptions(m_scratch);
        options.timeLimitMs = 3000;
        auto stuck = compute::sandbox::RemoteShardRun::start(endless.first, endless.second, {}, options);
        QString why = stuck.ok() ? QString() : stuck.error().message;
        if (stuck.ok()) {
            const auto stepped = (*stuck)->step(1);
            QVERIFY(!stepped.ok());
            why = stepped.error().message;
            QVERIFY(!(*stuck)->step(1).ok()); // and it stays ended
        }
        QVERIFY2(why.startsWith(QStringLiteral("time limit")), qPrintable(why));
    }

    // The compute thread with Compute/Sandbox: a shard whose forward() never returns is stopped
    // at its time limit and fails with the reason; a stuck one of a cancelled job is stopped at once;
    // the thread goes on to train the next shard either way.
    // Broker/Sandbox: the broker's runs of a job's code (initial weights, evaluation, replays) in
    // workers give what they give in its process, bit for bit; and a forward() that never returns
    // ends at the time limit as an error for that job, while the next call works.
    void theBrokersRunsOfAJobsCodeRunInWorkersWithTheSameBits()
    {
        const auto spec = smallJob();
        compute::BrokerMath here({});
        compute::BrokerMath there({});
        auto options = workerOptions(m_scratch);
        options.memoryMiB = 0;
        options.timeLimitMs = 120'000;
        there.setSandbox(options, true); // the zoo model too: the bits are the test

        const auto initial = here.initialWeights(spec);
        const auto initialThere = there.initialWeights(spec);
        QVERIFY2(initialThere, qPrintable(initialThere ? QString() : initialThere.error().toString()));
        QCOMPARE(initialThere->bytes, initial->bytes);
        QCOMPARE(initialThere->canonicalHash, initial->canonicalHash);
        QCOMPARE(initialThere->parameters, initial->parameters);

        const auto task = core::decomposeRound(QStringLiteral("job"), spec, 0, initial->canonicalHash)[0];
        const auto last = task.checkpointCount() - 1;
        QElapsedTimer clock;
        clock.start();
        const auto replayed = here.replay(task, 0, initial->bytes, initial->canonicalHash, last, initial->bytes);
        const auto replayHereMs = clock.restart();
        const auto replayedThere = there.replay(task, 0, initial->bytes, initial->canonicalHash, last, initial->bytes);
        const auto replayThereMs = clock.restart();
        QVERIFY2(replayedThere, qPrintable(replayedThere ? QString() : replayedThere.error().toString()));
        QCOMPARE(replayedThere->checkpoints, replayed->checkpoints);
        QCOMPARE(replayedThere->weightsHash, replayed->weightsHash);
        QCOMPARE(replayedThere->weights, replayed->weights);
        QCOMPARE(replayedThere->runtimeProfile, replayed->runtimeProfile);
        // A state that does not hash to what both sides agree on is refused there too.
        const auto wrong = there.replay(task, 0, initial->bytes, replayed->weightsHash, last, initial->bytes);
        QVERIFY(!wrong);

        clock.restart();
        const auto evaluation = here.evaluate(spec, replayed->weights);
        const auto evaluateHereMs = clock.restart();
        const auto evaluationThere = there.evaluate(spec, replayed->weights);
        const auto evaluateThereMs = clock.restart();
        // What a worker costs the broker (logged for docs/PERFORMANCE.md, not asserted).
        qInfo("replay of a shard: %lld ms here, %lld ms in a worker; evaluation: %lld ms here, %lld ms in a worker",
            static_cast<long long>(replayHereMs), static_cast<long long>(replayThereMs), static_cast<long long>(evaluateHereMs),
            static_cast<long long>(evaluateThereMs));
        QVERIFY2(evaluationThere, qPrintable(evaluationThere ? QString() : evaluationThere.error().toString()));
        QCOMPARE(evaluationThere->loss, evaluation->loss);
        QCOMPARE(evaluationThere->accuracy, evaluation->accuracy);

        options.timeLimitMs = 3000;
        there.setSandbox(options); // TorchScript models only, as tessera-broker runs it
        const auto [endless, start] = hostileTask(QStringLiteral("endless.pt"));
        const auto startHash = *compute::canonicalHashOf(start);
        const auto stopped = there.replay(endless, 0, start, startHash, endless.checkpointCount() - 1, start);
        QVERIFY(!stopped);
        QVERIFY2(stopped.error().message.contains(QStringLiteral("time limit")), qPrintable(stopped.error().toString()));
        // The next TorchScript model's replay, in a worker again, works and has the bits of one here
        // (with room for the worker's start however slow the machine: the limit is not the test).
        options.timeLimitMs = 120'000;
        there.setSandbox(options);
        const auto [scripted, scriptedStart] = hostileTask(QStringLiteral("scripted.pt"));
        const auto scriptedHash = *compute::canonicalHashOf(scriptedStart);
        const auto again = there.replay(scripted, 0, scriptedStart, scriptedHash, 1, scriptedStart);
        QVERIFY2(again, qPrintable(again ? QString() : again.error().toString()));
        QCOMPARE(again->checkpoints, here.replay(scripted, 0, scriptedStart, scriptedHash, 1, scriptedStart)->checkpoints);
    }

    // A compute thread without LibTorch of its own (the desktop app's) trains in a worker even with
    // the sandbox off: one that is not confined (for a GPU), to the same bits.
    void aThreadWithoutLibTorchTrainsInAnUnconfinedWorkerWithTheSandboxOff()
    {
        compute::ComputeThread thread({});
        compute::ComputeThread::Sandbox sandbox;
        sandbox.enabled = false;
        sandbox.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
        sandbox.scratchRoot = m_scratch.filePath(QStringLiteral("unconfined"));
        sandbox.nice = 0;
        thread.setSandbox(sandbox);
        QSignalSpy finished(&thread, &compute::ComputeThread::shardFinished);
        const auto good = prepare(smallJob());
        thread.submit(good.tasks[0], good.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, 240'000));
        const auto output = finished.at(0).at(0).value<compute::ShardOutput>();
        QVERIFY2(output.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(output.result.failure));
        const auto here = compute::runShard(good.tasks[0], good.start.bytes, {});
        QCOMPARE(output.result.finalHash, here.result.finalHash);
        QCOMPARE(output.weights, here.weights);
        // It ran in a worker: only a worker's start makes the scratch root (whether the worker is
        // still kept for the job depends on time, so that is not asked).
        QVERIFY(QDir(sandbox.scratchRoot).exists());
    }

    void aSandboxedComputeThreadStopsHungShardsAndTrainsTheNext()
    {
        compute::ComputeThread thread({}, compute::inThreadCompute());
        compute::ComputeThread::Sandbox sandbox;
        sandbox.enabled = true;
        sandbox.program = QStringLiteral(TESSERA_COMPUTE_WORKER);
        sandbox.scratchRoot = m_scratch.path();
        sandbox.nice = 0; // not the priority's test: a busy machine must not starve it
        thread.setSandbox(sandbox);
        QSignalSpy finished(&thread, &compute::ComputeThread::shardFinished);
        QSignalSpy cancelled(&thread, &compute::ComputeThread::shardCancelled);
        const auto endless = hostileTask(QStringLiteral("endless.pt"));
        const auto good = prepare(smallJob());

        thread.submit(endless.first, endless.second, 3000);
        thread.submit(good.tasks[1], good.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 2; }, 240'000));
        const auto stopped = finished.at(0).at(0).value<compute::ShardOutput>().result;
        QCOMPARE(stopped.outcome, core::ShardResult::Outcome::Failed);
        QVERIFY2(stopped.failure.startsWith(QStringLiteral("time limit")), qPrintable(stopped.failure));
        const auto next = finished.at(1).at(0).value<compute::ShardOutput>().result;
        QVERIFY2(next.outcome == core::ShardResult::Outcome::Completed, qPrintable(next.failure));
        QCOMPARE(next.finalHash, compute::runShard(good.tasks[1], good.start.bytes, {}).result.finalHash);

        // No time limit: only the cancel ends it (asked while its step runs, here almost always).
        auto stuck = endless.first;
        stuck.jobId = QStringLiteral("stuck-job");
        thread.submit(stuck, endless.second);
        QVERIFY(QTest::qWaitFor([&] { return thread.state() == compute::ComputeThread::State::Working; }, 60'000));
        QTest::qWait(1000);
        thread.cancelJob(stuck.jobId);
        QVERIFY(QTest::qWaitFor([&] { return cancelled.count() == 1; }, 60'000));
        // Cancelled at once, most likely while its worker still starts: cancelled all the same.
        stuck.jobId = QStringLiteral("stuck-job-2");
        thread.submit(stuck, endless.second);
        QVERIFY(QTest::qWaitFor([&] { return thread.state() == compute::ComputeThread::State::Working; }, 60'000));
        thread.cancelJob(stuck.jobId);
        QVERIFY(QTest::qWaitFor([&] { return cancelled.count() == 2; }, 60'000));
        QCOMPARE(finished.count(), 2);
        thread.submit(good.tasks[2], good.start.bytes);
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 3; }, 240'000));
        QCOMPARE(finished.at(2).at(0).value<compute::ShardOutput>().result.outcome, core::ShardResult::Outcome::Completed);
    }

private:
    QTemporaryDir m_scratch;

    // A task of the small job whose model is a hostile TorchScript file of the fixtures.
    std::pair<core::ShardTask, QByteArray> hostileTask(const QString& script)
    {
        auto spec = smallJob();
        spec.model = core::ModelSpec {};
        spec.model.source = core::ModelSpec::Source::TorchScript;
        spec.model.scriptFile = m_fixtures.filePath(script);
        const auto prepared = prepare(spec);
        return { prepared.tasks[0], prepared.start.bytes };
    }

    void nextShardTrains()
    {
        const auto prepared = prepare(smallJob());
        const auto next
            = compute::sandbox::runShardInWorker(prepared.tasks[1], prepared.start.bytes, {}, workerOptions(m_scratch));
        QVERIFY2(next.result.outcome == core::ShardResult::Outcome::Completed, qPrintable(next.result.failure));
    }
};

QTEST_GUILESS_MAIN(ComputeSandboxTest)
#include "tst_computesandbox.moc"
