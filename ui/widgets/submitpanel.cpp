#include "submitpanel.h"

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>

namespace tessera::ui {

namespace {

QSpinBox* spin(int min, int max, int value)
{
    auto* box = new QSpinBox;
    box->setRange(min, max);
    box->setValue(value);
    return box;
}

QDoubleSpinBox* number(double min, double max, double value, int decimals)
{
    auto* box = new QDoubleSpinBox;
    box->setDecimals(decimals);
    box->setRange(min, max);
    box->setValue(value);
    box->setSingleStep(std::pow(10.0, -decimals + 1));
    return box;
}

} // namespace

SubmitPanel::SubmitPanel(QWidget* parent)
    : QWidget(parent)
    , m_name(new QLineEdit(QStringLiteral("Fashion-MNIST MLP")))
    , m_model(new QComboBox)
    , m_hidden(new QLineEdit(QStringLiteral("256, 128")))
    , m_layers(spin(1, 64, 4))
    , m_heads(spin(1, 64, 4))
    , m_width(spin(8, 4096, 160))
    , m_context(spin(2, 4096, 128))
    , m_stages(spin(1, 16, 1))
    , m_microBatches(spin(1, 1024, 1))
    , m_int8Tensors(new QCheckBox(tr("int8 tensors")))
    , m_scriptFile(new QLineEdit)
    , m_dataset(new QComboBox)
    , m_trainFile(new QLineEdit)
    , m_trainSamples(spin(1, 100'000'000, 60'000))
    , m_optimizer(new QComboBox)
    , m_lr(number(0.000001, 100.0, 0.05, 6))
    , m_momentum(number(0.0, 0.999, 0.9, 3))
    , m_rounds(spin(1, 100'000, 15))
    , m_shards(spin(1, 4096, 3))
    , m_steps(spin(1, 1'000'000, 100))
    , m_batch(spin(1, 100'000, 64))
    , m_seed(spin(0, 2'000'000'000, 42))
    , m_aggregation(new QComboBox)
    , m_determinism(new QComboBox)
    , m_kind(new QComboBox)
    , m_fromJob(new QComboBox)
    , m_task(new QComboBox)
    , m_prompt(new QLineEdit(QStringLiteral("%\\n")))
    , m_promptCount(spin(1, 10'000'000, 100))
    , m_maxTokens(spin(1, 4096, 100))
    , m_temperature(number(0.0, 100.0, 0.8, 2))
    , m_replicas(spin(1, 16, 2))
    , m_serveMinutes(spin(1, 7 * 24 * 60, 60))
    , m_budget(new QLineEdit(QStringLiteral("100")))
    , m_verification(number(0.0, 1.0, 0.1, 2))
    , m_estimate(new QLabel)
    , m_error(new QLabel)
    , m_submit(new QPushButton(tr("Submit job")))
{
    m_model->addItem(tr("Zoo: multilayer perceptron"), QStringLiteral("mlp"));
    m_model->addItem(tr("Zoo: convolutional network"), QStringLiteral("cnn"));
    m_model->addItem(tr("Zoo: GPT (text)"), QStringLiteral("gpt"));
    m_model->addItem(tr("TorchScript file"), QStringLiteral("torchscript"));
    m_dataset->addItem(tr("Fashion-MNIST (built in)"), QStringLiteral("fashion-mnist"));
    m_dataset->addItem(tr("Fortunes text (built in)"), QStringLiteral("fortunes"));
    m_dataset->addItem(tr("Tensor file (torch.save)"), QStringLiteral("tensors"));
    m_optimizer->addItem(QStringLiteral("SGD"), QStringLiteral("sgd"));
    m_optimizer->addItem(QStringLiteral("Adam"), QStringLiteral("adam"));
    m_optimizer->addItem(QStringLiteral("AdamW"), QStringLiteral("adamw"));
    m_aggregation->addItem(QStringLiteral("FedAvg"), QStringLiteral("fedavg"));
    m_aggregation->addItem(QStringLiteral("Nesterov (DiLoCo)"), QStringLiteral("nesterov"));
    // Portable first (docs/DETERMINISM.md, "Portable mode"): any node checks any other, as fast or
    // faster for the zoo models; fast mode for TorchScript models, which only LibTorch runs.
    m_determinism->addItem(tr("Portable: the same bits on every CPU"), QStringLiteral("portable"));
    m_determinism->addItem(tr("Fast: LibTorch's kernels (nodes of one CPU kind check each other)"), QStringLiteral("fast"));
    m_determinism->setToolTip(tr("Portable: Tessera's own kernels; any node verifies any other and a dispute is narrowed "
                                 "to one instruction. Fast: LibTorch's kernels; needed for TorchScript models and GPUs."));
    m_kind->addItem(tr("Train a model"), QStringLiteral("training"));
    m_kind->addItem(tr("Run a trained model (inference)"), QStringLiteral("inference"));
    m_task->addItem(tr("Classify the test set"), QStringLiteral("classify"));
    m_task->addItem(tr("Generate completions of a prompt"), QStringLiteral("generate"));
    m_task->addItem(tr("Score the test text (perplexity)"), QStringLiteral("score"));
    m_task->addItem(tr("Serve it: answer requests (tessera-job ask)"), QStringLiteral("serve"));
    m_error->setWordWrap(true);
    m_error->setStyleSheet(QStringLiteral("color: #b00020"));
    m_estimate->setWordWrap(true);

    auto fileRow = [this](QLineEdit* edit, const QString& filter) {
        auto* row = new QWidget;
        auto* layout = new QHBoxLayout(row);
        layout->setContentsMargins(0, 0, 0, 0);
        auto* browse = new QPushButton(tr("Browse…"));
        layout->addWidget(edit);
        layout->addWidget(browse);
        connect(browse, &QPushButton::clicked, this, [this, edit, filter] {
            const auto file = QFileDialog::getOpenFileName(this, tr("Choose a file"), {}, filter);
            if (!file.isEmpty())
                edit->setText(file);
        });
        return row;
    };

    auto* form = new QFormLayout;
    form->addRow(tr("Job"), m_kind);
    form->addRow(tr("Name"), m_name);
    form->addRow(tr("Trained job"), m_fromJob);
    form->addRow(tr("Task"), m_task);
    form->addRow(tr("Prompt (\\n: a new line)"), m_prompt);
    form->addRow(tr("Completions"), m_promptCount);
    form->addRow(tr("Tokens at most"), m_maxTokens);
    form->addRow(tr("Temperature"), m_temperature);
    form->addRow(tr("Replicas (nodes)"), m_replicas);
    form->addRow(tr("Serve for (minutes)"), m_serveMinutes);
    form->addRow(tr("Model"), m_model);
    form->addRow(tr("Hidden layers"), m_hidden);
    auto* transformer = new QWidget;
    {
        auto* row = new QHBoxLayout(transformer);
        row->setContentsMargins(0, 0, 0, 0);
        for (const auto& [label, box] : { std::pair { tr("layers"), m_layers }, std::pair { tr("heads"), m_heads },
                 std::pair { tr("width"), m_width }, std::pair { tr("context"), m_context } }) {
            row->addWidget(new QLabel(label));
            row->addWidget(box);
        }
    }
    form->addRow(tr("Transformer"), transformer);
    auto* pipeline = new QWidget;
    {
        auto* row = new QHBoxLayout(pipeline);
        row->setContentsMargins(0, 0, 0, 0);
        for (const auto& [label, box] :
            { std::pair { tr("stages (nodes a shard)"), m_stages }, std::pair { tr("micro-batches"), m_microBatches } }) {
            row->addWidget(new QLabel(label));
            row->addWidget(box);
        }
        row->addWidget(m_int8Tensors);
        pipeline->setToolTip(tr("Layers on different nodes: each shard's blocks cut into stages that train together on "
                                "that many nodes, each step's batch in micro-batches (portable mode)"));
        m_int8Tensors->setToolTip(tr("The stages trade their activations and gradients as int8, about a quarter of the "
                                     "bytes (docs/JOBS.md, \"Pipeline stages\")"));
    }
    form->addRow(tr("Pipeline"), pipeline);
    form->addRow(tr("TorchScript file"), fileRow(m_scriptFile, tr("TorchScript (*.pt *.pth)")));
    form->addRow(tr("Dataset"), m_dataset);
    form->addRow(tr("Training tensors"), fileRow(m_trainFile, tr("Tensors (*.pt)")));
    form->addRow(tr("Training samples"), m_trainSamples);
    form->addRow(tr("Optimizer"), m_optimizer);
    form->addRow(tr("Learning rate"), m_lr);
    form->addRow(tr("Momentum"), m_momentum);
    form->addRow(tr("Rounds"), m_rounds);
    form->addRow(tr("Shards per round"), m_shards);
    form->addRow(tr("Local steps per shard"), m_steps);
    form->addRow(tr("Batch size"), m_batch);
    form->addRow(tr("Seed"), m_seed);
    form->addRow(tr("Aggregation"), m_aggregation);
    form->addRow(tr("Determinism"), m_determinism);
    form->addRow(tr("Budget (credits)"), m_budget);
    form->addRow(tr("Verification rate"), m_verification);

    m_progress = new QProgressBar;
    m_progress->setVisible(false);
    m_progress->setFormat(tr("submitting… %p%"));
    m_cancel = new QPushButton(tr("Cancel"));
    m_cancel->setObjectName(QStringLiteral("cancelSubmit"));
    m_cancel->setVisible(false);
    connect(m_cancel, &QPushButton::clicked, this, &SubmitPanel::cancelRequested);
    auto* submitRow = new QHBoxLayout;
    submitRow->addWidget(m_submit, 1);
    submitRow->addWidget(m_progress, 2);
    submitRow->addWidget(m_cancel);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_estimate);
    layout->addWidget(m_error);
    layout->addLayout(submitRow);

    m_quoteDelay = new QTimer(this);
    m_quoteDelay->setSingleShot(true);
    m_quoteDelay->setInterval(QuoteDelayMs);
    connect(m_quoteDelay, &QTimer::timeout, this, &SubmitPanel::price);

    m_fields = { { QStringLiteral("name"), m_name }, { QStringLiteral("model"), m_model }, { QStringLiteral("hidden"), m_hidden },
        { QStringLiteral("layers"), m_layers }, { QStringLiteral("heads"), m_heads }, { QStringLiteral("width"), m_width },
        { QStringLiteral("context"), m_context }, { QStringLiteral("stages"), m_stages },
        { QStringLiteral("microBatches"), m_microBatches }, { QStringLiteral("int8Tensors"), m_int8Tensors },
        { QStringLiteral("scriptFile"), m_scriptFile }, { QStringLiteral("dataset"), m_dataset },
        { QStringLiteral("trainFile"), m_trainFile }, { QStringLiteral("trainSamples"), m_trainSamples },
        { QStringLiteral("optimizer"), m_optimizer }, { QStringLiteral("lr"), m_lr }, { QStringLiteral("momentum"), m_momentum },
        { QStringLiteral("rounds"), m_rounds }, { QStringLiteral("shards"), m_shards }, { QStringLiteral("steps"), m_steps },
        { QStringLiteral("batch"), m_batch }, { QStringLiteral("seed"), m_seed },
        { QStringLiteral("aggregation"), m_aggregation }, { QStringLiteral("determinism"), m_determinism },
        { QStringLiteral("budget"), m_budget }, { QStringLiteral("verification"), m_verification },
        { QStringLiteral("kind"), m_kind }, { QStringLiteral("fromJob"), m_fromJob }, { QStringLiteral("task"), m_task },
        { QStringLiteral("prompt"), m_prompt }, { QStringLiteral("promptCount"), m_promptCount },
        { QStringLiteral("maxTokens"), m_maxTokens }, { QStringLiteral("temperature"), m_temperature },
        { QStringLiteral("replicas"), m_replicas }, { QStringLiteral("serveMinutes"), m_serveMinutes } };
    m_trainingFields = { m_model, m_hidden, transformer, pipeline, m_scriptFile->parentWidget(), m_dataset,
        m_trainFile->parentWidget(), m_trainSamples, m_optimizer, m_lr, m_momentum, m_rounds, m_shards, m_steps, m_batch, m_seed,
        m_aggregation, m_determinism };
    m_inferenceFields = { m_fromJob, m_task, m_prompt, m_promptCount, m_maxTokens, m_temperature, m_replicas, m_serveMinutes };
    for (auto* edit : { m_name, m_hidden, m_scriptFile, m_trainFile, m_budget, m_prompt })
        connect(edit, &QLineEdit::textChanged, this, &SubmitPanel::refresh);
    for (auto* box : { m_model, m_dataset, m_optimizer, m_aggregation, m_determinism, m_kind, m_fromJob, m_task })
        connect(box, &QComboBox::currentIndexChanged, this, &SubmitPanel::refresh);
    for (auto* box : { m_trainSamples, m_rounds, m_shards, m_steps, m_batch, m_seed, m_layers, m_heads, m_width, m_context,
             m_stages, m_microBatches, m_promptCount, m_maxTokens, m_replicas, m_serveMinutes })
        connect(box, &QSpinBox::valueChanged, this, &SubmitPanel::refresh);
    for (auto* box : { m_lr, m_momentum, m_verification, m_temperature })
        connect(box, &QDoubleSpinBox::valueChanged, this, &SubmitPanel::refresh);
    connect(m_int8Tensors, &QCheckBox::toggled, this, &SubmitPanel::refresh);
    connect(m_submit, &QPushButton::clicked, this, [this] {
        auto job = spec();
        if (job && !m_submitting)
            Q_EMIT submitRequested(*job);
        else
            refresh();
    });
    refresh();
}

void SubmitPanel::setEstimator(Estimator estimator)
{
    m_estimator = std::move(estimator);
    refresh();
}

void SubmitPanel::setTrainedJobs(const QList<core::broker::JobStatus>& jobs)
{
    const QString chosen = m_fromJob->currentData().toString();
    const QSignalBlocker blocker(m_fromJob);
    m_fromJob->clear();
    m_trained.clear();
    for (const auto& job : jobs) {
        if (!core::broker::trainedModelOf(job))
            continue;
        m_trained.insert(job.id, job);
        m_fromJob->addItem(QStringLiteral("%1 (%2)").arg(job.name, job.id), job.id);
    }
    if (const int index = m_fromJob->findData(chosen); index >= 0)
        m_fromJob->setCurrentIndex(index);
    refresh();
}

core::Result<core::JobSpec> SubmitPanel::inferenceSpec() const
{
    const auto trained = m_trained.constFind(m_fromJob->currentData().toString());
    if (trained == m_trained.constEnd())
        return core::Error { QStringLiteral("model.fromJob"),
            tr("pick a finished training job of yours (none has finished on this broker yet)") };
    auto model = core::broker::trainedModelOf(*trained);
    if (!model)
        return model.error();
    const QString task = m_task->currentData().toString();
    QJsonObject inference { { QStringLiteral("task"), task } };
    // As for training: a zoo model runs portable, so that any node checks any other.
    if (model->model.contains(QStringLiteral("zoo")))
        inference.insert(QStringLiteral("determinism"), QStringLiteral("portable"));
    if (task == u"generate") {
        inference.insert(QStringLiteral("prompts"),
            QJsonObject { { QStringLiteral("text"), m_prompt->text().replace(QStringLiteral("\\n"), QStringLiteral("\n")) },
                { QStringLiteral("count"), m_promptCount->value() } });
        inference.insert(QStringLiteral("temperature"), m_temperature->value());
    }
    if (task == u"generate" || task == u"serve")
        inference.insert(QStringLiteral("maxTokens"), m_maxTokens->value());
    if (task == u"serve") {
        inference.insert(QStringLiteral("replicas"), m_replicas->value());
        inference.insert(QStringLiteral("seconds"), m_serveMinutes->value() * 60);
    }
    QJsonObject job { { QStringLiteral("version"), 1 }, { QStringLiteral("name"), m_name->text().trimmed() },
        { QStringLiteral("kind"), QStringLiteral("inference") }, { QStringLiteral("model"), model->model },
        { QStringLiteral("dataset"), model->dataset }, { QStringLiteral("inference"), inference },
        { QStringLiteral("budget"), m_budget->text().trimmed() } };
    if (task != u"serve") // a served answer's checks are its checkShare's (by default 5%)
        job.insert(QStringLiteral("verification"), QJsonObject { { QStringLiteral("rate"), m_verification->value() } });
    auto spec = core::JobSpec::fromJson(job);
    if (!spec)
        return spec.error();
    if (auto valid = spec->validate(); !valid)
        return valid.error();
    return spec;
}

QWidget* SubmitPanel::field(const QString& name) const
{
    return m_fields.value(name);
}

core::Result<core::JobSpec> SubmitPanel::spec() const
{
    if (m_kind->currentData().toString() == u"inference")
        return inferenceSpec();
    const QString model = m_model->currentData().toString();
    QJsonObject modelJson;
    if (model == u"torchscript") {
        modelJson.insert(
            QStringLiteral("torchscript"), QJsonObject { { QStringLiteral("file"), m_scriptFile->text().trimmed() } });
    } else {
        QJsonArray hidden;
        for (const auto& part : m_hidden->text().split(u',', Qt::SkipEmptyParts)) {
            bool ok = false;
            const int width = part.trimmed().toInt(&ok);
            if (!ok)
                return core::Error { QStringLiteral("model.hidden"), QStringLiteral("write layer widths as numbers: 256, 128") };
            hidden.append(width);
        }
        modelJson = { { QStringLiteral("zoo"), model }, { QStringLiteral("hidden"), hidden } };
        if (model == u"gpt")
            modelJson = { { QStringLiteral("zoo"), model }, { QStringLiteral("layers"), m_layers->value() },
                { QStringLiteral("heads"), m_heads->value() }, { QStringLiteral("width"), m_width->value() },
                { QStringLiteral("context"), m_context->value() } };
        if (model == u"gpt" && m_stages->value() > 1
            && m_determinism->currentData().toString() == u"portable") // a tied head would span the first and the last stage
            modelJson.insert(QStringLiteral("tied"), false);
    }
    QJsonObject datasetJson;
    if (m_dataset->currentData().toString() == u"tensors")
        datasetJson.insert(QStringLiteral("tensors"),
            QJsonObject { { QStringLiteral("trainFile"), m_trainFile->text().trimmed() },
                { QStringLiteral("trainSamples"), m_trainSamples->value() } });
    else
        datasetJson.insert(QStringLiteral("builtin"), m_dataset->currentData().toString());
    QJsonObject optimizer { { QStringLiteral("kind"), m_optimizer->currentData().toString() },
        { QStringLiteral("lr"), m_lr->value() } };
    if (m_optimizer->currentData().toString() == u"sgd")
        optimizer.insert(QStringLiteral("momentum"), m_momentum->value());
    if (m_optimizer->currentData().toString() == u"adamw")
        optimizer.insert(QStringLiteral("weightDecay"), 0.1);
    if (model == u"gpt") {
        // A language model's usual care (docs/JOBS.md, "Language models"): clipped gradients, a
        // warmup of 5% of the job's steps, then cosine decay to a tenth of the rate.
        const int total = m_rounds->value() * m_steps->value();
        optimizer.insert(QStringLiteral("clipNorm"), 1.0);
        optimizer.insert(QStringLiteral("schedule"),
            QJsonObject { { QStringLiteral("kind"), QStringLiteral("cosine") },
                { QStringLiteral("warmupSteps"), std::max(1, total / 20) }, { QStringLiteral("minLr"), m_lr->value() / 10.0 } });
    }
    QJsonObject aggregation { { QStringLiteral("method"), m_aggregation->currentData().toString() } };
    if (m_aggregation->currentData().toString() == u"nesterov" && model == u"gpt") {
        aggregation.insert(QStringLiteral("outerLr"), 0.7);
        aggregation.insert(QStringLiteral("outerMomentum"), 0.9);
    }
    if (model == u"gpt" && m_optimizer->currentData().toString() != u"sgd") // AdamW's moments carried across rounds
        aggregation.insert(QStringLiteral("optimizerState"), QStringLiteral("averaged"));
    QJsonObject training { { QStringLiteral("rounds"), m_rounds->value() },
        { QStringLiteral("shardsPerRound"), m_shards->value() }, { QStringLiteral("localSteps"), m_steps->value() },
        { QStringLiteral("batchSize"), m_batch->value() }, { QStringLiteral("seed"), m_seed->value() },
        { QStringLiteral("determinism"),
            model == u"torchscript" ? QStringLiteral("fast") : m_determinism->currentData().toString() } };
    const bool portable = m_determinism->currentData().toString() == u"portable";
    if (model == u"gpt" && portable && m_stages->value() > 1) { // micro-batches are a pipeline's
        QJsonObject pipeline { { QStringLiteral("stages"), m_stages->value() },
            { QStringLiteral("microBatches"), m_microBatches->value() } };
        if (m_int8Tensors->isChecked())
            pipeline.insert(QStringLiteral("tensors"), QStringLiteral("int8"));
        training.insert(QStringLiteral("pipeline"), pipeline);
    }
    const QJsonObject job {
        { QStringLiteral("version"), 1 },
        { QStringLiteral("name"), m_name->text().trimmed() },
        { QStringLiteral("model"), modelJson },
        { QStringLiteral("dataset"), datasetJson },
        { QStringLiteral("optimizer"), optimizer },
        { QStringLiteral("training"), training },
        { QStringLiteral("aggregation"), aggregation },
        { QStringLiteral("budget"), m_budget->text().trimmed() },
        { QStringLiteral("verification"), QJsonObject { { QStringLiteral("rate"), m_verification->value() } } },
    };
    auto spec = core::JobSpec::fromJson(job);
    if (!spec)
        return spec.error();
    if (auto valid = spec->validate(); !valid)
        return valid.error();
    return spec;
}

QString SubmitPanel::estimateText() const
{
    return m_estimate->text();
}

QString SubmitPanel::errorText() const
{
    return m_error->text();
}

void SubmitPanel::applyModelPreset()
{
    const QString model = m_model->currentData().toString();
    const bool gpt = model == u"gpt";
    if ((m_lastModel == u"gpt") == gpt && !m_lastModel.isEmpty()) {
        m_lastModel = model;
        return;
    }
    m_lastModel = model;
    // examples/jobs/fortunes-gpt.json for a language model, the Fashion-MNIST MLP's otherwise.
    const QSignalBlocker blockers[] { QSignalBlocker(m_name), QSignalBlocker(m_dataset), QSignalBlocker(m_optimizer),
        QSignalBlocker(m_lr), QSignalBlocker(m_rounds), QSignalBlocker(m_shards), QSignalBlocker(m_steps),
        QSignalBlocker(m_batch), QSignalBlocker(m_aggregation), QSignalBlocker(m_budget) };
    m_name->setText(gpt ? QStringLiteral("Fortunes GPT") : QStringLiteral("Fashion-MNIST MLP"));
    m_dataset->setCurrentIndex(m_dataset->findData(gpt ? QStringLiteral("fortunes") : QStringLiteral("fashion-mnist")));
    m_optimizer->setCurrentIndex(m_optimizer->findData(gpt ? QStringLiteral("adamw") : QStringLiteral("sgd")));
    m_lr->setValue(gpt ? 0.003 : 0.05);
    m_rounds->setValue(gpt ? 24 : 15);
    m_shards->setValue(gpt ? 2 : 3);
    m_steps->setValue(gpt ? 25 : 100);
    m_batch->setValue(gpt ? 16 : 64);
    m_aggregation->setCurrentIndex(m_aggregation->findData(QStringLiteral("fedavg"))); // as the example: few rounds
    m_budget->setText(gpt ? QStringLiteral("5000") : QStringLiteral("100")); // a gpt costs about 1 GFLOP per window
}

void SubmitPanel::refresh()
{
    applyModelPreset();
    const bool inference = m_kind->currentData().toString() == u"inference";
    for (auto* widget : m_trainingFields)
        widget->setEnabled(!inference);
    for (auto* widget : m_inferenceFields)
        widget->setEnabled(inference);
    if (inference) {
        const QString task = m_task->currentData().toString();
        for (auto* widget : std::initializer_list<QWidget*> { m_prompt, m_promptCount, m_temperature })
            widget->setEnabled(task == u"generate");
        m_maxTokens->setEnabled(task == u"generate" || task == u"serve");
        m_replicas->setEnabled(task == u"serve");
        m_serveMinutes->setEnabled(task == u"serve");
        m_verification->setEnabled(task != u"serve");
    } else {
        m_verification->setEnabled(true);
    }
    const bool zoo = m_model->currentData().toString() != u"torchscript";
    const bool gpt = m_model->currentData().toString() == u"gpt";
    const bool tensors = m_dataset->currentData().toString() == u"tensors";
    for (auto* box : { m_layers, m_heads, m_width, m_context })
        box->setEnabled(gpt && !inference);
    const bool portable = m_determinism->currentData().toString() == u"portable";
    m_stages->setEnabled(gpt && portable && !inference); // a pipeline is a portable gpt's
    m_microBatches->setEnabled(m_stages->isEnabled() && m_stages->value() > 1);
    m_int8Tensors->setEnabled(m_microBatches->isEnabled());
    m_hidden->setEnabled(zoo && !gpt && !inference);
    m_scriptFile->parentWidget()->setEnabled(!zoo && !inference);
    m_determinism->setEnabled(zoo && !inference); // a TorchScript model trains in fast mode
    m_trainFile->parentWidget()->setEnabled(tensors && !inference);
    m_trainSamples->setEnabled(tensors && !inference);
    m_momentum->setEnabled(m_optimizer->currentData().toString() == u"sgd" && !inference);

    auto job = spec();
    if (!job) {
        m_error->setText(job.error().toString());
        m_estimate->clear();
        m_submit->setEnabled(false);
        return;
    }
    m_error->clear();
    m_submit->setEnabled(!m_submitting);
    ++m_generation; // any answer still on its way is for another form
    m_quoteAttempt = 0;
    if (!m_estimator) {
        m_estimate->setText(tr("No broker to price the job yet."));
        return;
    }
    m_estimate->setText(tr("Pricing the job…"));
    m_quoteDelay->start(); // once the form is still
}

void SubmitPanel::price()
{
    auto job = spec();
    if (!job || !m_estimator)
        return;
    const auto generation = m_generation;
    ++m_quoteAttempt;
    m_estimator(*job).then(this, [this, generation, job = *job](const core::Result<core::Quote>& quote) {
        if (generation == m_generation)
            showQuote(job, quote);
    });
}

void SubmitPanel::showQuote(const core::JobSpec& job, const core::Result<core::Quote>& quote)
{
    // No answer in time ("broker"), or a broker asking for patience: asked again, quietly.
    const bool busy = !quote && (quote.error().field == u"broker" || quote.error().field == u"too-many-requests");
    if (busy && m_quoteAttempt < QuoteAttempts) {
        m_estimate->setText(tr("Pricing the job… (the broker is busy; asking again)"));
        const auto generation = m_generation;
        QTimer::singleShot(QuoteRetryMs * m_quoteAttempt, this, [this, generation] {
            if (generation == m_generation)
                price();
        });
        return;
    }
    if (!quote) {
        m_estimate->setText(tr("Cannot price the job: %1").arg(quote.error().toString()));
        return;
    }
    if (!quote->pricePerToken.isZero()) { // a served job pays as it answers
        m_estimate->setText(tr("%1 replicas; each answer costs %2 credits a token it reads or writes (a checked answer "
                               "twice), paid from the budget as the requests come.")
                                .arg(quote->shards)
                                .arg(quote->pricePerToken.toString()));
        return;
    }
    QString text = tr("%1 shards at %2 credits: training %3, verification %4 (expected), total %5, worst case %6 credits.")
                       .arg(quote->shards)
                       .arg(quote->pricePerShard.toString(), quote->training.toString(), quote->verification.toString(),
                           quote->total.toString(), quote->worstCase.toString());
    if (job.budget < quote->training) {
        text += tr(" The budget does not cover the training.");
        m_submit->setEnabled(false);
    } else if (job.budget < quote->worstCase) {
        text += tr(" The budget may run out while the network's nodes are new.");
    }
    m_estimate->setText(text);
}

void SubmitPanel::setSubmitting(bool submitting)
{
    m_submitting = submitting;
    m_progress->setVisible(submitting);
    m_cancel->setVisible(submitting);
    m_cancel->setEnabled(submitting);
    m_progress->setRange(0, 0); // busy until the first bytes are counted
    m_submit->setEnabled(!submitting && spec().ok());
}

void SubmitPanel::setSubmitProgress(std::int64_t done, std::int64_t total)
{
    if (total <= 0) {
        m_progress->setRange(0, 0);
        return;
    }
    m_progress->setRange(0, 1000);
    m_progress->setValue(int(std::clamp<std::int64_t>(done * 1000 / total, 0, 1000)));
}

} // namespace tessera::ui
