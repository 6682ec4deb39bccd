#pragma once

#include <compute/common/environment.h>
#include <compute/common/types.h>

#include <core/error.h>
#include <core/hash.h>
#include <core/jobspec.h>

#include <QByteArray>
#include <QList>
#include <QString>
#include <QStringList>

#include <optional>

namespace tessera::compute {

// W_0 of a job: a zoo model initialised from the job's seed, or the weights in a TorchScript file.
core::Result<Weights> initialWeights(const core::JobSpec& spec, const ComputeEnvironment& environment);

// How many numbers the weights hold.
core::Result<std::int64_t> elementCount(const QByteArray& weights);

// ||a - b|| / ||b|| over all tensors (Euclidean, in float64): how far apart two results of the
// same shard are when they come from different runtime profiles. With `base` (the round's
// weights), a and b are revealed forms (ShardOutput::weights) and a compressed update counts as
// base + update. An error when the names or shapes differ.
core::Result<double> relativeDistance(const QByteArray& a, const QByteArray& b, const QByteArray& base = {});

// The canonical hash of pickled weights (docs/DETERMINISM.md, "Canonical weights").
core::Result<core::Digest> canonicalHashOf(const QByteArray& weights);

// What a node revealed (final weights or a compressed update) against the round's weights it
// started from: its canonical hash, whether it is a finite update of the model (same tensors,
// shapes and types; every change, every weight it leads to and the carried optimizer state finite;
// second moments not negative), and the L2 norm of its change to the model's float tensors, which
// the broker compares with the round's other results (docs/VERIFICATION.md, "Unchecked results").
// Read from the two files record by record. An error only when a file cannot be read or is not a
// dict of tensors at all.
struct RevealedForm {
    core::Digest canonicalHash;
    core::Compression compression = core::Compression::None; // the form: an int8 update or whole weights
    QString unfit; // empty: it fits
    double updateNorm = 0.0;
};
// stage: a stage task's reveal (docs/PROTOCOL.md, "Stage tasks"), which must be exactly its stage's
// share of the round's tensors (unfit says when it is not).
struct RevealedStage {
    std::int64_t stage = 0;
    std::int64_t stages = 1;
    std::int64_t layers = 0;
};
core::Result<RevealedForm> inspectRevealed(
    const QString& revealedPath, const QString& roundWeightsPath, const std::optional<RevealedStage>& stage = std::nullopt);
// A pipeline shard's stage reveals (files, in stage order) merged into the shard's, written to
// `out`: every tensor of each, and the ones two stages both hold (Adam's step count, the int8
// form's meta) only when they are equal. Its canonical hash.
core::Result<core::Digest> mergeStageFiles(const QStringList& parts, const QString& out);

// Loss and accuracy of the weights on the dataset's test split (or its training split when it has
// none), on `threads` threads.
core::Result<Evaluation> evaluate(
    const core::JobSpec& spec, QByteArray weights, const ComputeEnvironment& environment, int threads);

// Text from a language model's weights (a gpt's, or a TorchScript model with the sequence
// contract): `tokens` tokens after `prompt`, each drawn from softmax(logits / temperature) with a
// uniform number from derive(seed, [i]) (so a seed gives the same text every time), or the most
// likely one at temperature 0. The context is the model's last `context` tokens. A vocabulary of
// at most 256 is bytes; the text is the prompt's continuation only.
core::Result<QByteArray> sampleText(const core::ModelSpec& model, const QByteArray& weights, const SampleOptions& options,
    const ComputeEnvironment& environment = {});

// A TorchScript file that computes the zoo model with these weights (torch.jit.load reads it).
core::Status exportTorchScript(const core::ModelSpec& model, const QByteArray& weights, const QString& path);

// One shard's contribution to a round.
struct ShardUpdate {
    std::int64_t shard = 0;
    std::int64_t samples = 0; // the weight of this shard in the mean
    QByteArray weights; // the shard's final weights, or
    QString weightsFile; // (when weights is empty) the file that holds them, read when their turn comes
};

struct AggregationOutput {
    Weights weights; // W_{r+1}
    QByteArray outerState; // Nesterov momentum, to pass to the next round (empty for FedAvg)
    // With int8 compression: W_{r+1} - W_r as an int8 update (the revealed form's format), from
    // which roundWeightsFromChange rebuilds W_{r+1}'s bytes exactly; empty for none.
    QByteArray change;
};

// With int8 compression the step is sent compressed as well: W_{r+1} = W_r + q * scale of
// -outerLr * step(g), quantised like a shard's update (docs/DETERMINISM.md, "Round weights").
// W_{r+1} = W_r - outerLr * step(g), where g = W_r - sum_i(n_i * W_i) / sum_i(n_i) is the outer
// gradient (the negated weighted mean of the shard deltas), summed in shard order in float32.
// FedAvg: step(g) = g. Nesterov (DiLoCo): m = mu * m + g; step(g) = g + mu * m. The carried
// optimizer state ("optimizer/..." entries of W and the shards' results) is not stepped: with
// spec.optimizerState Averaged it becomes sum_i (n_i / N) * s_i (from 0, in shard order, float32;
// integer counters from the first shard), with Reset (the caller's choice for a job's last round)
// it is dropped, so W_{r+1} is the model's alone. Memory: the
// global weights' tensors, g, one shard's result (its int8 update decoded one tensor at a time)
// and the pickled result, about 2.5 x the model for int8 updates (docs/BROKER.md, "Memory"); the
// bytes of `global` are let go once read; from `globalFile` they are read record by record, never
// held whole beside their tensors (the broker's way).
core::Result<AggregationOutput> aggregate(
    const core::AggregationSpec& spec, QByteArray global, QList<ShardUpdate> updates, const QByteArray& outerState);
// With `weightsOut`, W_{r+1} is pickled straight into that file as it is written (output.weights.bytes
// stays empty): its bytes are never whole in memory beside its tensors. A failure to write the file
// is an error of field "blob" (the broker's own disk, not the job's fault).
core::Result<AggregationOutput> aggregateFromFile(const core::AggregationSpec& spec, const QString& globalFile,
    QList<ShardUpdate> updates, const QByteArray& outerState, const QString& weightsOut = {});

// W_{r+1}'s bytes from W_r's (previous) and the round's int8 change (AggregationOutput::change):
// equal to the broker's own bytes, so their SHA-256 is the round's weights blob. An error when the
// change does not fit the weights.
core::Result<QByteArray> roundWeightsFromChange(const QByteArray& previous, const QByteArray& change);

} // namespace tessera::compute
