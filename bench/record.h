#pragma once

// A benchmark's figures for the report: each record() appends "key value" to the file named by
// TESSERA_BENCH_RECORD (bench/run.sh sets it; bench/report.py reads it and writes
// docs/PERFORMANCE.md). Without the variable, nothing is written.

#include <cstdio>
#include <cstdlib>

namespace tessera::bench {

inline void record(const char* key, double value)
{
    const char* path = std::getenv("TESSERA_BENCH_RECORD");
    if (path == nullptr || *path == '\0')
        return;
    if (std::FILE* file = std::fopen(path, "a")) {
        std::fprintf(file, "%s %.17g\n", key, value);
        std::fclose(file);
    }
}

} // namespace tessera::bench
