#pragma once

#include <core/broker/records.h>
#include <core/error.h>
#include <core/jobspec.h>
#include <core/pricing.h>

#include <QFuture>
#include <QWidget>

#include <functional>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QTimer;
class QSpinBox;

namespace tessera::ui {

// The job submit panel: a training job (a zoo model or a TorchScript file, the built-in dataset or
// tensor files, hyper-parameters, rounds / shards / steps) or an inference job that runs one of the
// owner's finished training jobs (classify, generate, score, or serve it: docs/JOBS.md,
// "Inference jobs"), with its budget and the cost estimate, and the verification level.
// It builds a core::JobSpec and validates it as the broker will (errors name the field); what it
// costs comes from the estimator the app hands in (the broker's quote), asked once the form has
// been still for a moment and answered whenever the broker answers: an answer for a form that
// changed since is dropped. It submits nothing itself: submitRequested() carries a valid spec,
// and while the app submits it the panel shows its progress and offers to cancel.
class SubmitPanel final : public QWidget {
    Q_OBJECT

public:
    using Estimator = std::function<QFuture<core::Result<core::Quote>>(const core::JobSpec&)>;
    // How long the form must be still before it is priced.
    static constexpr int QuoteDelayMs = 300;
    // A broker that does not answer in time (a busy machine) is asked again, quietly, this many
    // times, waiting QuoteRetryMs times the attempt's number, before the panel says it failed.
    static constexpr int QuoteAttempts = 5;
    static constexpr int QuoteRetryMs = 1000;

    explicit SubmitPanel(QWidget* parent = nullptr);
    void setEstimator(Estimator estimator);
    // The owner's finished training jobs (STATUS, with their spec): what an inference job may run.
    void setTrainedJobs(const QList<core::broker::JobStatus>& jobs);

    // The job the form describes, or the first thing wrong with it.
    core::Result<core::JobSpec> spec() const;
    // The estimate shown now ("" until a valid job has been priced), and the error shown.
    QString estimateText() const;
    QString errorText() const;
    QPushButton* submitButton() const { return m_submit; }
    QPushButton* cancelButton() const { return m_cancel; }

    // A submission under way (uploading the job's files, then submitting it): Submit is off, the
    // progress shows, Cancel emits cancelRequested(). done and total are bytes (total 0: unknown).
    void setSubmitting(bool submitting);
    void setSubmitProgress(std::int64_t done, std::int64_t total);
    bool submitting() const { return m_submitting; }

    // For tests and the screenshot mode: the form's fields by name.
    QWidget* field(const QString& name) const;

public Q_SLOTS:
    void refresh(); // validates and re-prices; called on every edit

Q_SIGNALS:
    void submitRequested(const tessera::core::JobSpec& spec);
    void cancelRequested();

private:
    void price();
    core::Result<core::JobSpec> inferenceSpec() const;
    void showQuote(const core::JobSpec& job, const core::Result<core::Quote>& quote);

    Estimator m_estimator;
    QTimer* m_quoteDelay;
    std::uint64_t m_generation = 0; // the form's edits: a quote for an older one is stale
    int m_quoteAttempt = 0; // of the form's current edit
    bool m_submitting = false;
    QProgressBar* m_progress;
    QPushButton* m_cancel;
    QLineEdit* m_name;
    QComboBox* m_model;
    QLineEdit* m_hidden;
    QSpinBox* m_layers; // gpt
    QSpinBox* m_heads;
    QSpinBox* m_width;
    QSpinBox* m_context;
    QSpinBox* m_stages; // gpt, portable: a pipeline (docs/JOBS.md, "Pipeline stages")
    QSpinBox* m_microBatches;
    QCheckBox* m_int8Tensors; // what the stages trade: int8 rows (training.pipeline.tensors)
    QLineEdit* m_scriptFile;
    QComboBox* m_dataset;
    QLineEdit* m_trainFile;
    QSpinBox* m_trainSamples;
    QComboBox* m_optimizer;
    QDoubleSpinBox* m_lr;
    QDoubleSpinBox* m_momentum;
    QSpinBox* m_rounds;
    QSpinBox* m_shards;
    QSpinBox* m_steps;
    QSpinBox* m_batch;
    QSpinBox* m_seed;
    QComboBox* m_aggregation;
    QComboBox* m_determinism; // portable (the default for zoo models) or fast
    QComboBox* m_kind; // training or inference
    QComboBox* m_fromJob; // inference: a finished training job of the owner's
    QComboBox* m_task;
    QLineEdit* m_prompt; // generate
    QSpinBox* m_promptCount;
    QSpinBox* m_maxTokens; // generate, serve
    QDoubleSpinBox* m_temperature; // generate
    QSpinBox* m_replicas; // serve
    QSpinBox* m_serveMinutes;
    QHash<QString, core::broker::JobStatus> m_trained;
    QList<QWidget*> m_trainingFields; // off for an inference job
    QList<QWidget*> m_inferenceFields; // off for a training job
    QLineEdit* m_budget;
    QDoubleSpinBox* m_verification;
    QLabel* m_estimate;
    QLabel* m_error;
    QPushButton* m_submit;
    QHash<QString, QWidget*> m_fields;
    QString m_lastModel; // a change to or from the gpt sets the fields a language model needs
    void applyModelPreset();
};

} // namespace tessera::ui
