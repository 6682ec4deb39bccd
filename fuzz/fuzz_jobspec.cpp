// libFuzzer target: the job-spec parser (JSON from job owners) and its validation.

#include <core/jobspec.h>

#include <QByteArray>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    auto spec = tessera::core::JobSpec::fromJsonText(QByteArray(reinterpret_cast<const char*>(data), qsizetype(size)));
    if (spec) {
        (void)spec->validate();
        // A spec that parses must survive its own JSON.
        auto again = tessera::core::JobSpec::fromJson(spec->toJson());
        if (!again)
            __builtin_trap();
    }
    return 0;
}
