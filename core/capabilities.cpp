#include "capabilities.h"

namespace tessera::core {

QStringList ownCapabilities()
{
    return { capability::Int8, capability::Portable, capability::OptimizerState, capability::Chunks, capability::Inference,
        capability::PortableInference };
}

QStringList capabilitiesNeededBy(const JobSpec& spec)
{
    QStringList needed;
    if (spec.aggregation.compression == Compression::Int8)
        needed.append(capability::Int8);
    if (spec.training.determinism == TrainingSpec::Determinism::Portable)
        needed.append(capability::Portable);
    if (spec.aggregation.optimizerState == AggregationSpec::OptimizerState::Averaged)
        needed.append(capability::OptimizerState);
    if (spec.dataset.source == DatasetSpec::Source::Chunks)
        needed.append(capability::Chunks);
    if (spec.isInference())
        needed.append(capability::Inference);
    if (spec.isInference() && spec.inference.portable())
        needed.append(capability::PortableInference);
    if (spec.isInference() && spec.inference.serves())
        needed.append(capability::Serve);
    if (!spec.isInference() && spec.training.pipelined())
        needed.append(capability::Pipeline);
    if (!spec.isInference() && spec.training.pipeline.int8Tensors)
        needed.append(capability::PipelineInt8);
    return needed;
}

QStringList missingCapabilities(const QStringList& declared, const JobSpec& spec)
{
    QStringList missing;
    for (const auto& needed : capabilitiesNeededBy(spec)) {
        if (!declared.contains(needed))
            missing.append(needed);
    }
    return missing;
}

} // namespace tessera::core
