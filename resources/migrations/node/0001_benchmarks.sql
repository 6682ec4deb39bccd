-- Benchmark results of this node's devices, kept so that the app shows them without re-running and
-- the broker can be told the node's throughput when it registers.
CREATE TABLE benchmark_runs (
    id INTEGER PRIMARY KEY,
    measured_at TEXT NOT NULL,          -- ISO 8601, UTC
    device TEXT NOT NULL,               -- e.g. "cpu:0 AMD Ryzen 5 5600X"
    runtime_profile TEXT NOT NULL
);

CREATE TABLE benchmark_measurements (
    run INTEGER NOT NULL REFERENCES benchmark_runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,                 -- mlp, cnn, matmul
    value REAL NOT NULL,
    unit TEXT NOT NULL,                 -- samples/s, GFLOPS
    cv REAL NOT NULL,                   -- coefficient of variation of the repetitions
    repetitions INTEGER NOT NULL,
    PRIMARY KEY (run, name)
);

CREATE INDEX benchmark_runs_by_device ON benchmark_runs (device, measured_at);
