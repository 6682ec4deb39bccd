#pragma once

#include "jobspec.h"

#include <QStringList>

namespace tessera::core {

// What a node says it can run (docs/PROTOCOL.md, "Capabilities"): REGISTER's NodeInfo
// `capabilities`. A broker sends a node no task (shard, re-execution, canary) whose job needs a
// capability the node did not declare, so a node written before a form existed is never handed,
// nor slashed over, work it would misread. A node that declares none (or sends no list: one from
// before capabilities) runs what the first protocol had: fast mode, float32 weights revealed whole,
// a fresh optimizer in every shard.
namespace capability {
inline const QString Int8 = QStringLiteral("int8"); // reveals int8 updates (aggregation.compression int8)
inline const QString Portable = QStringLiteral("portable"); // Tessera's portable kernels (determinism portable)
inline const QString OptimizerState = QStringLiteral("optimizer-state"); // carried optimizer state (averaged)
// A chunked dataset (dataset.chunks): its manifest, its order and the task's dataChunks.
inline const QString Chunks = QStringLiteral("chunks");
// Inference shards (a job of kind inference, docs/DETERMINISM.md, "Inference").
inline const QString Inference = QStringLiteral("inference");
// Inference shards and served answers in portable mode (inference.determinism portable).
inline const QString PortableInference = QStringLiteral("portable-inference");
inline const QString Serve = QStringLiteral("serve"); // hosts a served model's replica (docs/PROTOCOL.md, "Serving")
// Micro-batches and stage tasks of a pipeline job (docs/PROTOCOL.md, "Stage tasks"): TENSOR, STOP.
// A node declares it when its executor runs stage tasks (ShardExecutor::runsStages).
inline const QString Pipeline = QStringLiteral("pipeline");
// Stage tasks whose tensors travel as int8 rows (training.pipeline.tensors "int8", ShardTask stageTensors).
inline const QString PipelineInt8 = QStringLiteral("pipeline-int8");
// Fetches and serves blobs over the blob swarm (docs/SWARM.md); no job needs it, and a node
// declares it only while its swarm runs (Swarm/Enabled).
inline const QString Swarm = QStringLiteral("swarm");
} // namespace capability

// What Tessera's own node declares.
QStringList ownCapabilities();
// What a job's tasks need of the node that runs them.
QStringList capabilitiesNeededBy(const JobSpec& spec);
// What the job needs that `declared` lacks (empty: the node can run it).
QStringList missingCapabilities(const QStringList& declared, const JobSpec& spec);

} // namespace tessera::core
