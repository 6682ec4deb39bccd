// libFuzzer target: a pipeline stage's recorded inputs (core::StageInputs, docs/PROTOCOL.md, "Stage
// tasks"), the blob a verifier's re-execution of a stage reads. A record that parses finds each of
// its tensors inside the file, and a record made of them parses to the same tensors.

#include <core/stagetensors.h>

#include <QByteArray>

#include <cstddef>
#include <cstdint>

using tessera::core::StageInputs;
using tessera::core::TensorKind;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const QByteArray file(reinterpret_cast<const char*>(data), qsizetype(size));
    const auto inputs = StageInputs::parse(QByteArray(StageInputs::Magic) + file);
    if (!inputs)
        return 0;
    // Whatever it found, a tensor is a part of the file, and the first tensors found read back.
    QByteArray again(StageInputs::Magic);
    for (std::int64_t from = 0; from < 3; ++from) {
        for (const auto kind : { TensorKind::Activation, TensorKind::Gradient, TensorKind::Squares }) {
            for (std::int64_t step = 0; step < 3; ++step) {
                if (const auto bytes = inputs->find(from, kind, step, 0)) {
                    if (bytes->size() > file.size())
                        __builtin_trap();
                    again += StageInputs::record(from, kind, step, 0, *bytes);
                }
            }
        }
    }
    const auto reread = StageInputs::parse(again);
    if (!reread)
        __builtin_trap();
    return 0;
}
