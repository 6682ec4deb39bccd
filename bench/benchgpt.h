#pragma once

// The gpt the inference and serving benches run: the Fortunes GPT's size (4 x 160, context 128),
// freshly initialised (speed does not depend on training), its weights written to a file in `dir`
// for an inference job's initialWeights.

#include <compute/engine/weights.h>
#include <core/smalljobs.h>

#include <QFile>
#include <QTemporaryDir>

namespace tessera::bench {

struct BenchGpt {
    core::JobSpec trained;
    compute::Weights initial;
    QString file;
};

inline BenchGpt fortunesSizedGpt(const QTemporaryDir& dir)
{
    const auto trained = core::smallGptJob(QStringLiteral("bench gpt"), 4, 4, 160, 128);
    auto initial = compute::initialWeights(trained, {});
    if (!initial)
        qFatal("%s", qPrintable(initial.error().toString()));
    const QString file = dir.filePath(QStringLiteral("gpt.pt"));
    QFile out(file);
    if (!out.open(QIODevice::WriteOnly) || out.write(initial->bytes) != initial->bytes.size())
        qFatal("cannot write %s", qPrintable(file));
    return { trained, *initial, file };
}

} // namespace tessera::bench
