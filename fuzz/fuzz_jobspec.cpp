// libFuzzer target: the job-spec parser (JSON from job owners) and its validation.

#include <core/decomposition.h>
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
        // An inference job's shards are tasks a node accepts, the last one too.
        if (spec->isInference()) {
            for (const auto shard : { std::int64_t(0), spec->training.shardsPerRound - 1 }) {
                const auto task = tessera::core::decomposeShard(QStringLiteral("0123456789abcdef"), *spec, 0, shard, {});
                if (!task.validate() || !tessera::core::ShardTask::fromJson(task.toJson()))
                    __builtin_trap();
            }
        }
    }
    return 0;
}
