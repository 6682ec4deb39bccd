// The submit panel: it validates the job as the broker will, prices it, and submits only a valid one.

#include <ui/widgets/submitpanel.h>

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QJsonDocument>
#include <QLineEdit>
#include <QPromise>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>

using namespace tessera;
using tessera::ui::SubmitPanel;

class SubmitPanelTest : public QObject {
    Q_OBJECT

    // A stand-in for the broker's quote: 0.5 credits a shard, answered at once.
    static QFuture<core::Result<core::Quote>> quote(const core::JobSpec& spec)
    {
        return QtFuture::makeReadyFuture(quoteOf(spec));
    }
    static core::Result<core::Quote> quoteOf(const core::JobSpec& spec)
    {
        core::Quote q;
        q.shards = spec.training.rounds * spec.training.shardsPerRound;
        q.pricePerShard = core::Credits::fromMicro(500'000);
        q.training = *q.pricePerShard.checkedMultiply(q.shards);
        q.verification = *q.training.checkedScale(1, 10);
        q.total = *q.training.checkedAdd(q.verification);
        q.worstCase = *q.training.checkedMultiply(2);
        return q;
    }

private Q_SLOTS:
    void theDefaultsAreAValidJob()
    {
        SubmitPanel panel;
        auto spec = panel.spec();
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        QCOMPARE(spec->model.zoo, QStringLiteral("mlp"));
        QCOMPARE(spec->model.hidden, QList<std::int64_t>({ 256, 128 }));
        QCOMPARE(spec->training.rounds, 15);
        QVERIFY(panel.errorText().isEmpty());
    }

    // Zoo models lead with portable mode (any node checks any other); fast mode is a choice, and
    // the only mode of a TorchScript model, whose choice is then disabled.
    void zooJobsArePortableUnlessToldOtherwise()
    {
        SubmitPanel panel;
        auto* model = qobject_cast<QComboBox*>(panel.field(QStringLiteral("model")));
        auto* determinism = qobject_cast<QComboBox*>(panel.field(QStringLiteral("determinism")));
        auto* hidden = qobject_cast<QLineEdit*>(panel.field(QStringLiteral("hidden")));
        for (const char* zoo : { "mlp", "cnn", "gpt" }) {
            model->setCurrentIndex(model->findData(QString::fromLatin1(zoo)));
            hidden->setText(QStringLiteral("128")); // a cnn has one hidden layer
            const auto spec = panel.spec();
            QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
            QCOMPARE(spec->training.determinism, core::TrainingSpec::Determinism::Portable);
            QVERIFY(determinism->isEnabled());
        }
        determinism->setCurrentIndex(determinism->findData(QStringLiteral("fast")));
        QCOMPARE(panel.spec()->training.determinism, core::TrainingSpec::Determinism::Fast);
        determinism->setCurrentIndex(determinism->findData(QStringLiteral("portable")));
        model->setCurrentIndex(model->findData(QStringLiteral("torchscript")));
        QVERIFY(!determinism->isEnabled());
        QCOMPARE(panel.spec().error().field.startsWith(u"training.determinism"), false);
    }

    // "Zoo: GPT (text)" is the Fortunes GPT (FedAvg, as the example: Nesterov's outer momentum
    // overshoots over its 12 rounds): a valid language-model job with the settings it needs;
    // back to the MLP, the classifier's settings return.
    void theGptChoiceIsALanguageModelJob()
    {
        SubmitPanel panel;
        auto* model = qobject_cast<QComboBox*>(panel.field(QStringLiteral("model")));
        model->setCurrentIndex(model->findData(QStringLiteral("gpt")));
        qobject_cast<QSpinBox*>(panel.field(QStringLiteral("width")))->setValue(96);
        auto spec = panel.spec();
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        QCOMPARE(spec->model.zoo, QStringLiteral("gpt"));
        QCOMPARE(spec->model.width, 96);
        QCOMPARE(spec->dataset.builtin, QStringLiteral("fortunes"));
        QCOMPARE(spec->optimizer.kind, core::OptimizerSpec::Kind::AdamW);
        QCOMPARE(spec->optimizer.schedule.kind, core::ScheduleSpec::Kind::Cosine);
        QCOMPARE(spec->optimizer.schedule.totalSteps, spec->training.rounds * spec->training.localSteps);
        QCOMPARE(spec->optimizer.clipNorm, 1.0);
        QCOMPARE(spec->aggregation.method, core::AggregationSpec::Method::FedAvg);
        QCOMPARE(spec->aggregation.optimizerState, core::AggregationSpec::OptimizerState::Averaged);
        QVERIFY(panel.errorText().isEmpty());
        qobject_cast<QSpinBox*>(panel.field(QStringLiteral("heads")))->setValue(5); // 96 is not a multiple of 5
        QCOMPARE(panel.spec().error().field, QStringLiteral("model.width"));
        model->setCurrentIndex(model->findData(QStringLiteral("mlp")));
        spec = panel.spec();
        QVERIFY(spec.ok());
        QCOMPARE(spec->dataset.builtin, QStringLiteral("fashion-mnist"));
        QCOMPARE(spec->optimizer.kind, core::OptimizerSpec::Kind::Sgd);
    }

    // Layers on different nodes (docs/JOBS.md, "Pipeline stages"): a portable gpt's stages and
    // micro-batches, untied; more stages than blocks named as the mistake; not in fast mode.
    void aGptJobMayBeAPipeline()
    {
        SubmitPanel panel;
        auto* model = qobject_cast<QComboBox*>(panel.field(QStringLiteral("model")));
        auto* stages = qobject_cast<QSpinBox*>(panel.field(QStringLiteral("stages")));
        auto* micro = qobject_cast<QSpinBox*>(panel.field(QStringLiteral("microBatches")));
        QVERIFY(!stages->isEnabled()); // the MLP has no blocks to cut
        model->setCurrentIndex(model->findData(QStringLiteral("gpt")));
        QVERIFY(stages->isEnabled() && !micro->isEnabled()); // micro-batches are a pipeline's
        micro->setValue(4);
        QVERIFY(!panel.spec()->training.pipelined());
        stages->setValue(2);
        QVERIFY(micro->isEnabled());
        micro->setValue(4);
        auto spec = panel.spec();
        QVERIFY2(spec.ok(), qPrintable(spec.ok() ? QString() : spec.error().toString()));
        QCOMPARE(spec->stagesPerShard(), 2);
        QCOMPARE(spec->training.pipeline.microBatches, 4);
        QVERIFY(!spec->model.tied);
        QCOMPARE(spec->unitsPerRound(), 2 * spec->training.shardsPerRound);
        // int8 tensors, a pipeline's only.
        auto* int8 = qobject_cast<QCheckBox*>(panel.field(QStringLiteral("int8Tensors")));
        QVERIFY(int8 && int8->isEnabled() && !spec->training.pipeline.int8Tensors);
        int8->setChecked(true);
        QVERIFY(panel.spec()->training.pipeline.int8Tensors);
        stages->setValue(1);
        QVERIFY(!int8->isEnabled() && !panel.spec()->training.pipelined());
        stages->setValue(2);
        stages->setValue(qobject_cast<QSpinBox*>(panel.field(QStringLiteral("layers")))->value() + 1);
        QVERIFY(!panel.spec().ok());
        QVERIFY(!panel.errorText().isEmpty());
        stages->setValue(2);
        auto* determinism = qobject_cast<QComboBox*>(panel.field(QStringLiteral("determinism")));
        determinism->setCurrentIndex(determinism->findData(QStringLiteral("fast")));
        QVERIFY(!stages->isEnabled());
        QVERIFY(!panel.spec()->training.pipelined());
    }

    void mistakesAreNamedAndNotSubmitted()
    {
        SubmitPanel panel;
        QSignalSpy submitted(&panel, &SubmitPanel::submitRequested);
        qobject_cast<QLineEdit*>(panel.field(QStringLiteral("name")))->setText(QString());
        QVERIFY(panel.errorText().startsWith(QStringLiteral("name")));
        QVERIFY(!panel.submitButton()->isEnabled());
        qobject_cast<QLineEdit*>(panel.field(QStringLiteral("name")))->setText(QStringLiteral("job"));
        qobject_cast<QLineEdit*>(panel.field(QStringLiteral("hidden")))->setText(QStringLiteral("256, lots"));
        QVERIFY(panel.errorText().startsWith(QStringLiteral("model.hidden")));
        qobject_cast<QLineEdit*>(panel.field(QStringLiteral("hidden")))->setText(QStringLiteral("64"));
        qobject_cast<QLineEdit*>(panel.field(QStringLiteral("budget")))->setText(QStringLiteral("-3"));
        QVERIFY(panel.errorText().startsWith(QStringLiteral("budget")));
        qobject_cast<QLineEdit*>(panel.field(QStringLiteral("budget")))->setText(QStringLiteral("10"));
        // A batch larger than a shard's samples (60,000 / 3 shards).
        qobject_cast<QSpinBox*>(panel.field(QStringLiteral("batch")))->setValue(30'000);
        QVERIFY2(panel.errorText().contains(QStringLiteral("batchSize")), qPrintable(panel.errorText()));
        qobject_cast<QSpinBox*>(panel.field(QStringLiteral("batch")))->setValue(32);
        // A TorchScript model needs its file.
        auto* model = qobject_cast<QComboBox*>(panel.field(QStringLiteral("model")));
        model->setCurrentIndex(model->findData(QStringLiteral("torchscript")));
        QVERIFY2(panel.errorText().contains(QStringLiteral("torchscript")), qPrintable(panel.errorText()));
        QTest::mouseClick(panel.submitButton(), Qt::LeftButton);
        QCOMPARE(submitted.count(), 0);
    }

    // An inference job runs one of the owner's finished training jobs (its model and final weights,
    // as `"fromJob"` does for tessera-job): without one it names the field; with one it is a valid
    // job of the chosen task, and a served one shows its price per token.
    void anInferenceJobRunsAFinishedTrainingJob()
    {
        SubmitPanel panel;
        panel.setEstimator([](const core::JobSpec& spec) {
            auto q = quoteOf(spec);
            if (spec.isInference() && spec.inference.serves())
                q->pricePerToken = core::Credits::fromMicro(3);
            return QtFuture::makeReadyFuture(q);
        });
        auto* kind = qobject_cast<QComboBox*>(panel.field(QStringLiteral("kind")));
        kind->setCurrentIndex(kind->findData(QStringLiteral("inference")));
        QVERIFY(!panel.spec());
        QCOMPARE(panel.spec().error().field, QStringLiteral("model.fromJob"));
        QVERIFY(!panel.submitButton()->isEnabled());
        QVERIFY(!panel.field(QStringLiteral("optimizer"))->isEnabled());

        core::broker::JobStatus trained;
        trained.id = QStringLiteral("00000000000000aa");
        trained.name = QStringLiteral("small gpt");
        trained.state = core::broker::JobState::Finished;
        trained.weightsBlob = core::Digest::ofBytes("weights");
        trained.spec = QJsonDocument::fromJson(R"({ "name": "small gpt",
            "model": { "zoo": "gpt", "layers": 1, "heads": 2, "width": 32, "context": 32 },
            "dataset": { "builtin": "fortunes" }, "optimizer": { "kind": "adamw", "lr": 0.003 },
            "training": { "rounds": 1, "shardsPerRound": 1, "localSteps": 10, "batchSize": 8 }, "budget": "1" })")
                           .object();
        auto running = trained;
        running.id = QStringLiteral("00000000000000bb");
        running.state = core::broker::JobState::Running; // not offered: it has no final weights
        panel.setTrainedJobs({ trained, running });
        auto* fromJob = qobject_cast<QComboBox*>(panel.field(QStringLiteral("fromJob")));
        QCOMPARE(fromJob->count(), 1);
        auto* task = qobject_cast<QComboBox*>(panel.field(QStringLiteral("task")));
        task->setCurrentIndex(task->findData(QStringLiteral("generate")));
        qobject_cast<QSpinBox*>(panel.field(QStringLiteral("promptCount")))->setValue(7);
        auto spec = panel.spec();
        QVERIFY2(spec, qPrintable(spec ? QString() : spec.error().toString()));
        QCOMPARE(spec->inference.task, core::InferenceSpec::Task::Generate);
        QVERIFY(spec->inference.portable()); // a zoo model: any node checks any other
        QCOMPARE(spec->inference.promptCount, 7);
        QCOMPARE(spec->inference.promptText, QByteArray("%\n")); // "\n" written in the field is a new line
        QCOMPARE(spec->model.initialWeightsSha256, trained.weightsBlob);
        QCOMPARE(spec->model.width, 32);
        QVERIFY(panel.field(QStringLiteral("prompt"))->isEnabled());

        task->setCurrentIndex(task->findData(QStringLiteral("serve")));
        QVERIFY(!panel.field(QStringLiteral("prompt"))->isEnabled());
        spec = panel.spec();
        QVERIFY2(spec, qPrintable(spec ? QString() : spec.error().toString()));
        QVERIFY(spec->inference.serves());
        QCOMPARE(spec->inference.seconds, 3600);
        QVERIFY(QTest::qWaitFor([&] { return panel.estimateText().contains(QStringLiteral("0.000003")); }, 5000));
        QSignalSpy submitted(&panel, &SubmitPanel::submitRequested);
        panel.submitButton()->click();
        QCOMPARE(submitted.size(), 1);
    }

    void theEstimateFollowsTheForm()
    {
        SubmitPanel panel;
        panel.setEstimator(&quote);
        // 15 rounds x 3 shards at 0.5: 22.5 credits of training, 45 in the worst case.
        QTRY_VERIFY2(panel.estimateText().contains(QStringLiteral("training 22.5")), qPrintable(panel.estimateText()));
        QVERIFY(panel.estimateText().contains(QStringLiteral("worst case 45")));
        qobject_cast<QSpinBox*>(panel.field(QStringLiteral("rounds")))->setValue(2);
        QTRY_VERIFY2(panel.estimateText().contains(QStringLiteral("training 3,")), qPrintable(panel.estimateText()));
        // A budget below the training cannot be submitted.
        qobject_cast<QLineEdit*>(panel.field(QStringLiteral("budget")))->setText(QStringLiteral("2"));
        QTRY_VERIFY(panel.estimateText().contains(QStringLiteral("does not cover")));
        QVERIFY(!panel.submitButton()->isEnabled());
        qobject_cast<QLineEdit*>(panel.field(QStringLiteral("budget")))->setText(QStringLiteral("4"));
        QTRY_VERIFY(panel.estimateText().contains(QStringLiteral("may run out")));
        QVERIFY(panel.submitButton()->isEnabled());

        QSignalSpy submitted(&panel, &SubmitPanel::submitRequested);
        QTest::mouseClick(panel.submitButton(), Qt::LeftButton);
        QCOMPARE(submitted.count(), 1);
        const auto spec = submitted[0][0].value<core::JobSpec>();
        QCOMPARE(spec.training.rounds, 2);
        QCOMPARE(spec.budget.toString(), QStringLiteral("4"));
    }

    // Typing asks for one price once the form is still, not one a keystroke; an answer that comes
    // after the form changed again is dropped; a price that never comes leaves the form usable.
    void pricingWaitsForTheFormAndDropsStaleAnswers()
    {
        SubmitPanel panel;
        QList<std::shared_ptr<QPromise<core::Result<core::Quote>>>> asked;
        QList<core::JobSpec> specs;
        panel.setEstimator([&](const core::JobSpec& spec) {
            auto promise = std::make_shared<QPromise<core::Result<core::Quote>>>();
            promise->start();
            asked.append(promise);
            specs.append(spec);
            return promise->future();
        });
        QTRY_COMPARE(asked.size(), 1);
        auto* name = qobject_cast<QLineEdit*>(panel.field(QStringLiteral("name")));
        for (const auto* text : { "a", "ab", "abc", "abcd" })
            name->setText(QString::fromLatin1(text));
        QVERIFY(panel.estimateText().contains(QStringLiteral("Pricing")));
        QTRY_COMPARE(asked.size(), 2); // one for the four edits
        QCOMPARE(specs.last().name, QStringLiteral("abcd"));
        QVERIFY(panel.submitButton()->isEnabled()); // no price yet: the job may still go
        // The first answer is for a form that is gone.
        asked[0]->addResult(quoteOf(specs[0]));
        asked[0]->finish();
        QCoreApplication::sendPostedEvents(); // its continuation has run (it is queued to the panel)
        QVERIFY(panel.estimateText().contains(QStringLiteral("Pricing")));
        asked[1]->addResult(quoteOf(specs[1]));
        asked[1]->finish();
        QTRY_VERIFY(panel.estimateText().contains(QStringLiteral("training 22.5")));
        for (auto& promise : asked) {
            if (!promise->future().isFinished())
                promise->finish();
        }
    }

    // A broker that does not answer in time (a busy machine) is asked again, quietly, and the
    // panel says it is still pricing; only after QuoteAttempts does it say the price failed. A
    // refusal is said at once.
    void aBusyBrokerIsAskedAgainQuietly()
    {
        SubmitPanel panel;
        int asked = 0;
        int silentFor = 2;
        QString refusal;
        QStringList shown;
        panel.setEstimator([&](const core::JobSpec& spec) -> QFuture<core::Result<core::Quote>> {
            ++asked;
            shown.append(panel.estimateText());
            if (!refusal.isEmpty())
                return QtFuture::makeReadyFuture(core::Result<core::Quote>(core::Error { QStringLiteral("invalid"), refusal }));
            if (silentFor-- > 0)
                return QtFuture::makeReadyFuture(core::Result<core::Quote>(
                    core::Error { QStringLiteral("broker"), QStringLiteral("no answer from tcp://127.0.0.1:1 within 1 s") }));
            return QtFuture::makeReadyFuture(quoteOf(spec));
        });
        QTRY_VERIFY_WITH_TIMEOUT(panel.estimateText().contains(QStringLiteral("training 22.5")), 20'000);
        QCOMPARE(asked, 3);
        for (const auto& text : std::as_const(shown))
            QVERIFY2(!text.contains(QStringLiteral("Cannot price")), qPrintable(text));
        QVERIFY(shown.last().contains(QStringLiteral("asking again")));

        silentFor = 100; // never answers: said after QuoteAttempts
        asked = 0;
        qobject_cast<QSpinBox*>(panel.field(QStringLiteral("rounds")))->setValue(2);
        QTRY_VERIFY_WITH_TIMEOUT(panel.estimateText().contains(QStringLiteral("Cannot price")), 30'000);
        QCOMPARE(asked, SubmitPanel::QuoteAttempts);
        QVERIFY(panel.estimateText().contains(QStringLiteral("no answer")));

        refusal = QStringLiteral("model: too large"); // a refusal: at once
        asked = 0;
        qobject_cast<QSpinBox*>(panel.field(QStringLiteral("rounds")))->setValue(3);
        QTRY_VERIFY(panel.estimateText().contains(QStringLiteral("too large")));
        QCOMPARE(asked, 1);
    }

    // While the app submits, Submit is off and Cancel asks it to stop.
    void aSubmissionShowsItsProgressAndCanBeCancelled()
    {
        SubmitPanel panel;
        QSignalSpy cancel(&panel, &SubmitPanel::cancelRequested);
        QSignalSpy submitted(&panel, &SubmitPanel::submitRequested);
        panel.setSubmitting(true);
        QVERIFY(!panel.submitButton()->isEnabled());
        QVERIFY(panel.cancelButton()->isEnabled());
        panel.setSubmitProgress(50, 100);
        QTest::mouseClick(panel.cancelButton(), Qt::LeftButton);
        QCOMPARE(cancel.count(), 1);
        QTest::mouseClick(panel.submitButton(), Qt::LeftButton);
        QCOMPARE(submitted.count(), 0);
        panel.setSubmitting(false);
        QVERIFY(panel.submitButton()->isEnabled());
    }
};

QTEST_MAIN(SubmitPanelTest)
#include "tst_submitpanel.moc"
