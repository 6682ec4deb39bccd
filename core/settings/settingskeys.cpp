#include "settingskeys.h"

namespace tessera::core::settings {

namespace {

Key boolKey(const QString& name, bool fallback, const char* doc)
{
    return Key { name, Type::Bool, fallback, 0, 0, {}, {}, {}, QString::fromUtf8(doc) };
}

Key intKey(const QString& name, std::int64_t fallback, std::int64_t min, std::int64_t max, const char* doc)
{
    return Key { name, Type::Int, QVariant::fromValue<qint64>(fallback), min, max, {}, {}, {}, QString::fromUtf8(doc) };
}

Key stringKey(const QString& name, const QString& fallback, const char* pattern, const char* patternText, const char* doc)
{
    return Key { name, Type::String, fallback, 0, 0, {}, QString::fromUtf8(pattern), QString::fromUtf8(patternText),
        QString::fromUtf8(doc) };
}

Key pathKey(const QString& name, const char* doc)
{
    return stringKey(name, QString(), "", "a path", doc);
}

Key listKey(const QString& name, const char* pattern, const char* patternText, const char* doc)
{
    return Key { name, Type::StringList, QStringList(), 0, 0, {}, QString::fromUtf8(pattern), QString::fromUtf8(patternText),
        QString::fromUtf8(doc) };
}

Key choiceKey(const QString& name, const QString& fallback, const QStringList& choices, const char* doc)
{
    return Key { name, Type::Choice, fallback, 0, 0, choices, {}, {}, QString::fromUtf8(doc) };
}

// An endpoint, optionally followed by '#' and the broker's Z85 public key (40 characters).
constexpr const char* BrokerAddressPattern
    = R"((tcp://[^\s#]+:\d{1,5}|ipc:///[^\s#]+)(#[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40})?)";
constexpr const char* AddressPattern = R"((\d{1,3}(\.\d{1,3}){3})?)";
constexpr const char* HostPattern = R"(([A-Za-z0-9]([A-Za-z0-9.\-]{0,251}[A-Za-z0-9])?)?)";
constexpr const char* SchedulePattern
    = R"(((([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-3]):[0-5]\d)(,([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-3]):[0-5]\d)*)?)";

QList<Key> makeKeys()
{
    using namespace names;
    return {
        intKey(MetaVersion, CurrentVersion, 0, 1000,
            "Layout version of this file; Tessera migrates older files and writes the current version back."),
        stringKey(
            NodeName, QString(), R"([^\n]{0,100})", "up to 100 characters", "Name shown to brokers; empty uses the host name."),
        listKey(NodeBrokers, BrokerAddressPattern, "tcp://host:port, optionally #key (Z85, 40 characters)",
            "Brokers to contribute to, as tcp://host:port#brokerkey; empty: the app starts a local broker (a child "
            "tessera-broker)."),
        pathKey(NodeKeyFile, "The node's keypair file; empty: node.key in the data directory."),
        pathKey(NodeDataDirectory, "Database and blob cache of the node; empty: ~/.local/share/Tessera."),
        boolKey(ComputeContribute, false, "Contribute compute as soon as the app starts."),
        intKey(ComputeMaxThreads, 0, 0, 1024, "Most CPU threads the compute thread may use; 0: all cores."),
        intKey(ComputeCpuPercent, 100, 10, 100, "Duty cycle of the compute thread in percent of wall time."),
        intKey(ComputeCpuPercentWhileInUse, 100, 10, 100,
            "Duty cycle while someone uses the computer (input within Compute/IdleMinutes): training slows down instead of "
            "stopping; 100: no difference. Compute/RunOnlyWhenIdle pauses instead."),
        intKey(ComputeMaxTemperatureC, 0, 0, 110,
            "Hottest the CPU may run while training, in degrees Celsius (read from hwmon or the thermal zones): above it the "
            "compute thread's duty cycle is lowered smoothly; 0: no limit."),
        intKey(ComputeMaxMemoryMiB, 4096, 256, 1048576,
            "Largest memory a shard may take on this node (the estimate of docs/NODE.md, Memory): a larger one is given back, "
            "saying why, and the broker is told."),
        boolKey(ComputeSandbox, true,
            "Train in a confined worker process (tessera-compute, docs/SECURITY.md): the job owner's code cannot reach the "
            "node's keys, files or the network, and a shard that hangs or passes Compute/MaxMemoryMiB fails alone. false: "
            "not confined, for jobs you trust or a GPU (tessera-node trains on its compute thread itself, the desktop app "
            "in an unconfined worker)."),
        boolKey(ComputeBenchmarkOnFirstStart, true,
            "Measure this CPU (the zoo mlp, about 2 s) before contributing when no benchmark of it is stored, so that brokers "
            "schedule by a measured figure."),
        boolKey(ComputeRunOnlyWhenIdle, false, "Contribute only while the desktop session is idle."),
        intKey(ComputeIdleMinutes, 5, 1, 240, "Minutes without input before the session counts as idle."),
        boolKey(ComputePauseOnBattery, true, "Pause while the machine runs on battery."),
        stringKey(ComputeSchedule, QString(), SchedulePattern, "HH:MM-HH:MM, comma-separated",
            "Hours to contribute, as 22:00-07:00,12:00-13:00; empty: any time."),
        listKey(ComputeDisabledDevices, R"((cpu|cuda|opencl):\d+)", "kind:index", "Devices not to train on, as cuda:0."),
        intKey(CacheMaxSizeMiB, 2048, 64, 1048576, "Size limit of the node's blob cache (least recently used go first)."),
        boolKey(SwarmEnabled, true,
            "Fetch a task's blobs from other nodes over the blob swarm (docs/SWARM.md: BitTorrent over TLS, each peer with "
            "the broker's certificate for the blob) and serve them while the cache keeps them; false: every blob from the "
            "broker (GET)."),
        stringKey(SwarmAddress, QStringLiteral("0.0.0.0"), AddressPattern, "an IPv4 address",
            "Address the swarm listens on and dials from; 0.0.0.0: every interface."),
        intKey(SwarmPort, 0, 0, 65535,
            "TLS port other nodes reach this one at; 0: any free port (behind a NAT, forward a fixed one to serve)."),
        stringKey(SwarmHost, QString(), HostPattern, "an IPv4 address or a host name",
            "Address other nodes dial to reach this one when the broker sees this node on the broker's own machine "
            "(loopback); otherwise they dial the address the broker sees it come from, which a node cannot choose."),
        boolKey(SwarmServe, true,
            "Serve the blobs this node holds to the other nodes of their swarm; false: fetch only (a node behind a NAT that "
            "lets nothing in)."),
        intKey(SwarmMaxUploadKiBps, 0, 0, 10'000'000,
            "Most KiB per second this node uploads to swarm peers, those on its own network too; 0: no cap."),
        pathKey(DataFashionMnistDirectory, "Folder with the Fashion-MNIST .gz files; empty: /usr/share/datasets/fashion-mnist."),
        pathKey(DataFortunesDirectory,
            "Folder with the fortunes text files (the built-in text corpus); empty: /usr/share/games/fortunes."),
        intKey(NetworkHeartbeatIntervalMs, 1000, 250, 10000, "Interval between heartbeats to and from brokers."),
        boolKey(ControlEnabled, true,
            "Serve the control API and its web dashboard (docs/CONTROL.md): the node's state and actions, for tessera-node "
            "ctl, a browser and other programs that hold its token (control.token in the data directory)."),
        stringKey(ControlBind, QStringLiteral("127.0.0.1"), R"((\d{1,3}(\.\d{1,3}){3}|::1|::))", "an IPv4 address, ::1 or ::",
            "Address the control API listens on: a loopback address (127.x.x.x, ::1) serves this machine only, over HTTP; any "
            "other (0.0.0.0: every address) serves other machines too, over TLS only, with a self-signed certificate made in "
            "the data directory (control.crt) whose fingerprint the node prints."),
        intKey(ControlPort, 7780, 1, 65535, "TCP port of the control API; a second node on one machine needs another."),
        stringKey(BrokerBind, QStringLiteral("tcp://127.0.0.1:5555"), R"(tcp://[^\s]+:\d{1,5}|ipc:///[^\s]+)",
            "tcp://address:port or ipc:///path",
            "Endpoint the broker listens on; tcp://0.0.0.0:PORT accepts other machines (with Broker/KeyFile); ipc:///PATH "
            "only accounts that may enter PATH's folder (the app's practice broker: a 0700 folder of its own)."),
        pathKey(BrokerDataDirectory, "Database and blob store of the broker; empty: ~/.local/share/Tessera/broker."),
        stringKey(BrokerDatabase, QString(), R"((postgresql|postgres)://\S*)", "empty or a postgresql:// URI",
            "Where the broker keeps jobs, accounts and the ledger: empty, broker.sqlite in Broker/DataDirectory; or a "
            "PostgreSQL connection URI (postgresql://user@host/db, or postgresql:///db?host=/run/postgresql), which several "
            "brokers of one network share (docs/STORE.md). Keep a password out of it: use ~/.pgpass or the server's peer "
            "authentication."),
        pathKey(BrokerKeyFile, "The broker's keypair; when set, every connection is encrypted with CURVE."),
        listKey(BrokerAllowList, R"([0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40})", "Z85 public keys (40 characters)",
            "Node public keys allowed to connect (Z85); empty: anyone who has the broker's key."),
        listKey(BrokerOperatorKeys, R"([0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40})", "Z85 public keys (40 characters)",
            "Client keys that act as the operator under CURVE: every job, account, receipt and blob; empty: none."),
        boolKey(BrokerFaucet, false, "Mint credits for new accounts (local and demo brokers only)."),
        intKey(BrokerPricePerUnitMicro, 100000, 0, 1'000'000'000'000LL,
            "Micro-credits a job pays per work unit (1 GFLOP of training) of each accepted shard."),
        intKey(BrokerMinStakeMicro, 10000000, 0, 1'000'000'000'000'000LL,
            "Micro-credits a node must have bonded to take work; 0: none."),
        intKey(BrokerSamplingWarmup, 25, 0, 1'000'000,
            "A node's results are all re-executed by another node until this many in a row were accepted."),
        intKey(BrokerSamplingFloorPercent, 5, 0, 100, "The least share of a node's results re-executed, in percent."),
        intKey(BrokerCanaryPercent, 1, 0, 100, "Share of handed-out work that re-checks an already verified shard, in percent."),
        intKey(BrokerAuditPercent, 5, 0, 100,
            "Share of checks where the verifier agreed that the broker re-executes itself too, in percent (shards of at most "
            "100 GFLOP whose answer it computes exactly: a portable job, or its own runtime profile; at most 1 GFLOP/s on "
            "average); both sides are slashed when it gets other bits."),
        intKey(BrokerSlashPercent, 50, 0, 100, "Share of its stake a node loses for a lost dispute or a signed lie, in percent."),
        intKey(BrokerUpdateNormFactor, 4, 2, 1'000'000,
            "A result nobody re-executed is re-executed before its round aggregates when its update's norm is this many times "
            "above or below the median of the round's (a round of fewer than 3 is compared with its latest rounds' too; with "
            "fewer than 3 in all, always)."),
        intKey(BrokerDisputeTimeoutSeconds, 60, 1, 86'400,
            "Seconds a node has to send a checkpoint state in a dispute (at least twice the job's usual shard time: the node "
            "may re-create the state); a timeout counts as a loss."),
        listKey(BrokerTrustedNetworks, R"([0-9a-f]{32}:[A-Za-z0-9+/]{43}=)",
            "NETWORK:KEY (32 hex digits, a colon, a base64 Ed25519 key)",
            "Networks whose nodes' portable records this broker credits (docs/LEDGER.md, \"Portable records\"): each "
            "network's id and the key its heads are signed by."),
        intKey(BrokerRecordCreditMax, 12, 0, 1000,
            "The most results a portable record of another network starts a node's sampling streak from (0: records earn "
            "nothing)."),
        intKey(BrokerLogHeadMs, 5'000, 100, 600'000,
            "How often, in milliseconds, the broker signs a new head of its ledger's log while entries arrive, and how often "
            "nodes ask for it (docs/LEDGER.md)."),
        intKey(BrokerSelfVerifyAfterSeconds, 120, 0, 604'800,
            "Seconds a sampled result waits for a node to re-execute it before the broker does it itself (at once "
            "when no connected node could)."),
        intKey(BrokerUnbondingDelaySeconds, 86'400, 0, 31'536'000,
            "Seconds unbonded stake stays slashable before it returns to the node's balance."),
        intKey(BrokerMaxJobsPerOwner, 20, 1, 1'000'000, "Running jobs one owner may have at once; more are refused."),
        intKey(BrokerMaxUnnamedUploadMiB, 4096, 1, 1'048'576,
            "Uploads no job names yet that one uploader may hold (a model or data not yet submitted, a node's weights before "
            "its result); an upload of a new blob past it is refused."),
        intKey(BrokerUnnamedUploadMinutes, 60, 1, 10'080,
            "An upload no job has named for this long is removed (and no longer counts against its uploader)."),
        intKey(BrokerKeepRounds, 3, 2, 1'000'000,
            "Rounds' weights a job keeps on the broker's disk: the newest this many, beside its initial and final weights "
            "and the rounds its spec asks for (training.keepWeightsEvery); older rounds' weights are removed."),
        intKey(BrokerMaxRequestsPerSecond, 500, 0, 1'000'000,
            "Messages a peer (a CURVE key; in plaintext an address) may send per second (bursts of twice that); floods "
            "are refused, then dropped; 0: no limit."),
        intKey(BrokerMaxParameters, 100'000'000, 1, 100'000'000'000,
            "Largest model the broker accepts, in parameters (counted from the spec before anything is built)."),
        intKey(BrokerMaxShardsPerNode, 2, 1, 1024, "Shards one node may hold at once, however often it asks."),
        intKey(BrokerMinDeadlineSeconds, 30, 1, 604'800,
            "Shortest deadline of a shard, however fast the node claims to be (a deadline is 4 x the node's expected time, "
            "within this and Broker/MaxDeadlineSeconds). Raise it where machines are loaded and slower than they measured."),
        intKey(BrokerMaxDeadlineSeconds, 3'600, 30, 604'800,
            "Longest deadline of a shard, whatever the node claims; a late shard also goes to a second node."),
        intKey(BrokerJobCodeSeconds, 120, 5, 86'400,
            "Longest run of a job's TorchScript code on the broker that is no shard's (loading it for its initial weights, a "
            "round's evaluation; with Broker/Sandbox): past it, the submit is refused or the job fails. A submit's loading runs "
            "beside the broker's other work."),
        intKey(BrokerWorkerMemoryMiB, 8192, 256, 1'048'576,
            "Largest memory the broker's run of a job's code may take (with Broker/Sandbox): its replay of a shard that ran out "
            "of memory on nodes is held to this, not to the machine's."),
        boolKey(BrokerSandbox, true,
            "Run a job's TorchScript code on the broker (its initial weights, evaluation, replays) in confined tessera-compute "
            "workers, "
            "each stopped after Broker/MaxDeadlineSeconds: a model that never returns fails its job, not the broker. false: "
            "in the broker's process."),
        boolKey(BrokerSwarm, true,
            "Seed the blobs of the tasks the broker hands out over the blob swarm (docs/SWARM.md), so that nodes fetch them "
            "from each other; false: every node GETs every blob from the broker."),
        stringKey(BrokerSwarmAddress, QString(), AddressPattern, "an IPv4 address",
            "Address the broker's swarm seed listens on; empty: Broker/Bind's host (0.0.0.0 for *, 127.0.0.1 for ipc://). "
            "Nodes dial it at the host they reach the broker at."),
        intKey(
            BrokerSwarmPort, 0, 0, 65535, "TLS port of the broker's swarm seed; 0: any free port (WELCOME tells nodes which)."),
        intKey(BrokerSwarmMaxUploadKiBps, 0, 0, 10'000'000, "Most KiB per second the broker's seed uploads; 0: no cap."),
        intKey(BrokerSwarmDirectNodes, 1, 0, 50,
            "How many nodes of a blob's swarm dial the broker's seed at once; the others take the blob from them and from "
            "each other, and dial the seed only when they brought less than 2 MiB in 5 s, so a blob leaves the broker about "
            "once (docs/SWARM.md, The broker's seed); 0: every node dials the seed."),
        boolKey(AppStartAtLogin, false, "Start the app when the desktop session starts (XDG autostart)."),
        boolKey(AppNotifications, true, "Show desktop notifications for verification, payments and disputes."),
        stringKey(AppElectricityPricePerKWh, QStringLiteral("0"), R"(\d{1,6}(\.\d{1,6})?)", "a decimal number, like 0.25",
            "What a kWh of electricity costs you, in credits: the Overview shows the energy training took and what it earned "
            "net of it; 0: not shown."),
        choiceKey(LogLevel, QStringLiteral("info"),
            { QStringLiteral("debug"), QStringLiteral("info"), QStringLiteral("warning"), QStringLiteral("error") },
            "Least severe message written to the log."),
    };
}

} // namespace

QString Key::typeName() const
{
    return nameOf(type);
}

QString Key::rangeText() const
{
    switch (type) {
    case Type::Bool:
        return QStringLiteral("true, false");
    case Type::Int:
        return QStringLiteral("%1 to %2").arg(min).arg(max);
    case Type::Choice:
        return choices.join(QStringLiteral(", "));
    case Type::String:
    case Type::StringList:
        return patternText.isEmpty() ? QStringLiteral("any") : patternText;
    }
    return {};
}

const QList<Key>& keys()
{
    static const QList<Key> table = makeKeys();
    return table;
}

const Key* findKey(QStringView name)
{
    for (const auto& key : keys()) {
        if (key.name == name)
            return &key;
    }
    return nullptr;
}

QString markdownTable()
{
    QString table = QStringLiteral("| key | type | default | valid | what it does |\n|---|---|---|---|---|\n");
    for (const auto& key : keys()) {
        QString fallback;
        if (key.type == Type::StringList)
            fallback = key.defaultValue.toStringList().join(QStringLiteral(", "));
        else if (key.type == Type::Bool)
            fallback = key.defaultValue.toBool() ? QStringLiteral("true") : QStringLiteral("false");
        else
            fallback = key.defaultValue.toString();
        table += QStringLiteral("| `%1` | %2 | %3 | %4 | %5 |\n")
                     .arg(key.name, key.typeName(),
                         fallback.isEmpty() ? QStringLiteral("(empty)") : QStringLiteral("`%1`").arg(fallback), key.rangeText(),
                         key.doc);
    }
    return table;
}

} // namespace tessera::core::settings
