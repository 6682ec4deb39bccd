#pragma once

#include "../enumnames.h"

#include <QList>
#include <QString>
#include <QStringList>
#include <QVariant>

#include <cstdint>

namespace tessera::core::settings {

enum class Type { Bool, Int, String, StringList, Choice };

} // namespace tessera::core::settings

// As docs/SETTINGS.md names them.
template<> struct tessera::core::EnumNames<tessera::core::settings::Type> {
    static constexpr std::array names { "bool", "int", "string", "list", "choice" };
};

namespace tessera::core::settings {

// One setting: declared once here, read by the desktop app, the headless node, the broker and
// docs/SETTINGS.md (a test checks that the document and this table agree).
struct Key {
    QString name; // "Compute/MaxThreads": INI group and key
    Type type = Type::String;
    QVariant defaultValue;
    std::int64_t min = 0; // Int
    std::int64_t max = 0; // Int
    QStringList choices; // Choice
    QString pattern; // String, StringList: each value must match this regular expression in full
    QString patternText; // the pattern in words, for people and docs
    QString doc; // one line for people

    QString typeName() const;
    QString rangeText() const; // "0 to 1024", "debug, info, ...", "HH:MM-HH:MM, ..."
};

// The layout version written as Meta/Version; older files are migrated up to it.
constexpr int CurrentVersion = 1;

const QList<Key>& keys();
const Key* findKey(QStringView name);

// The table of docs/SETTINGS.md, generated from keys().
QString markdownTable();

namespace names {
inline const QString MetaVersion = QStringLiteral("Meta/Version");
inline const QString NodeName = QStringLiteral("Node/Name");
inline const QString NodeBrokers = QStringLiteral("Node/Brokers");
inline const QString NodeKeyFile = QStringLiteral("Node/KeyFile");
inline const QString NodeDataDirectory = QStringLiteral("Node/DataDirectory");
inline const QString ComputeContribute = QStringLiteral("Compute/Contribute");
inline const QString ComputeMaxThreads = QStringLiteral("Compute/MaxThreads");
inline const QString ComputeCpuPercent = QStringLiteral("Compute/CpuPercent");
inline const QString ComputeCpuPercentWhileInUse = QStringLiteral("Compute/CpuPercentWhileInUse");
inline const QString ComputeMaxTemperatureC = QStringLiteral("Compute/MaxTemperatureC");
inline const QString ComputeMaxMemoryMiB = QStringLiteral("Compute/MaxMemoryMiB");
inline const QString ComputeSandbox = QStringLiteral("Compute/Sandbox");
inline const QString ComputeBenchmarkOnFirstStart = QStringLiteral("Compute/BenchmarkOnFirstStart");
inline const QString ComputeRunOnlyWhenIdle = QStringLiteral("Compute/RunOnlyWhenIdle");
inline const QString ComputeIdleMinutes = QStringLiteral("Compute/IdleMinutes");
inline const QString ComputePauseOnBattery = QStringLiteral("Compute/PauseOnBattery");
inline const QString ComputeSchedule = QStringLiteral("Compute/Schedule");
inline const QString ComputeDisabledDevices = QStringLiteral("Compute/DisabledDevices");
inline const QString CacheMaxSizeMiB = QStringLiteral("Cache/MaxSizeMiB");
inline const QString SwarmEnabled = QStringLiteral("Swarm/Enabled");
inline const QString SwarmAddress = QStringLiteral("Swarm/Address");
inline const QString SwarmPort = QStringLiteral("Swarm/Port");
inline const QString SwarmHost = QStringLiteral("Swarm/Host");
inline const QString SwarmServe = QStringLiteral("Swarm/Serve");
inline const QString SwarmMaxUploadKiBps = QStringLiteral("Swarm/MaxUploadKiBps");
inline const QString DataFashionMnistDirectory = QStringLiteral("Data/FashionMnistDirectory");
inline const QString DataFortunesDirectory = QStringLiteral("Data/FortunesDirectory");
inline const QString NetworkHeartbeatIntervalMs = QStringLiteral("Network/HeartbeatIntervalMs");
inline const QString ControlEnabled = QStringLiteral("Control/Enabled");
inline const QString ControlBind = QStringLiteral("Control/Bind");
inline const QString ControlPort = QStringLiteral("Control/Port");
inline const QString BrokerBind = QStringLiteral("Broker/Bind");
inline const QString BrokerDataDirectory = QStringLiteral("Broker/DataDirectory");
inline const QString BrokerDatabase = QStringLiteral("Broker/Database");
inline const QString BrokerKeyFile = QStringLiteral("Broker/KeyFile");
inline const QString BrokerAllowList = QStringLiteral("Broker/AllowList");
inline const QString BrokerOperatorKeys = QStringLiteral("Broker/OperatorKeys");
inline const QString BrokerFaucet = QStringLiteral("Broker/Faucet");
inline const QString BrokerPricePerUnitMicro = QStringLiteral("Broker/PricePerUnitMicro");
inline const QString BrokerMinStakeMicro = QStringLiteral("Broker/MinStakeMicro");
inline const QString BrokerSamplingWarmup = QStringLiteral("Broker/SamplingWarmup");
inline const QString BrokerSamplingFloorPercent = QStringLiteral("Broker/SamplingFloorPercent");
inline const QString BrokerCanaryPercent = QStringLiteral("Broker/CanaryPercent");
inline const QString BrokerAuditPercent = QStringLiteral("Broker/AuditPercent");
inline const QString BrokerSlashPercent = QStringLiteral("Broker/SlashPercent");
inline const QString BrokerUpdateNormFactor = QStringLiteral("Broker/UpdateNormFactor");
inline const QString BrokerDisputeTimeoutSeconds = QStringLiteral("Broker/DisputeTimeoutSeconds");
inline const QString BrokerLogHeadMs = QStringLiteral("Broker/LogHeadMs");
inline const QString BrokerTrustedNetworks = QStringLiteral("Broker/TrustedNetworks");
inline const QString BrokerRecordCreditMax = QStringLiteral("Broker/RecordCreditMax");
inline const QString BrokerSelfVerifyAfterSeconds = QStringLiteral("Broker/SelfVerifyAfterSeconds");
inline const QString BrokerUnbondingDelaySeconds = QStringLiteral("Broker/UnbondingDelaySeconds");
inline const QString BrokerMaxJobsPerOwner = QStringLiteral("Broker/MaxJobsPerOwner");
inline const QString BrokerMaxUnnamedUploadMiB = QStringLiteral("Broker/MaxUnnamedUploadMiB");
inline const QString BrokerUnnamedUploadMinutes = QStringLiteral("Broker/UnnamedUploadMinutes");
inline const QString BrokerKeepRounds = QStringLiteral("Broker/KeepRounds");
inline const QString BrokerMaxRequestsPerSecond = QStringLiteral("Broker/MaxRequestsPerSecond");
inline const QString BrokerMaxParameters = QStringLiteral("Broker/MaxParameters");
inline const QString BrokerMaxShardsPerNode = QStringLiteral("Broker/MaxShardsPerNode");
inline const QString BrokerSandbox = QStringLiteral("Broker/Sandbox");
inline const QString BrokerMinDeadlineSeconds = QStringLiteral("Broker/MinDeadlineSeconds");
inline const QString BrokerMaxDeadlineSeconds = QStringLiteral("Broker/MaxDeadlineSeconds");
inline const QString BrokerJobCodeSeconds = QStringLiteral("Broker/JobCodeSeconds");
inline const QString BrokerWorkerMemoryMiB = QStringLiteral("Broker/WorkerMemoryMiB");
inline const QString BrokerSwarm = QStringLiteral("Broker/Swarm");
inline const QString BrokerSwarmAddress = QStringLiteral("Broker/SwarmAddress");
inline const QString BrokerSwarmPort = QStringLiteral("Broker/SwarmPort");
inline const QString BrokerSwarmMaxUploadKiBps = QStringLiteral("Broker/SwarmMaxUploadKiBps");
inline const QString BrokerSwarmDirectNodes = QStringLiteral("Broker/SwarmDirectNodes");
inline const QString AppStartAtLogin = QStringLiteral("App/StartAtLogin");
inline const QString AppNotifications = QStringLiteral("App/Notifications");
inline const QString AppElectricityPricePerKWh = QStringLiteral("App/ElectricityPricePerKWh");
inline const QString LogLevel = QStringLiteral("Log/Level");
} // namespace names

} // namespace tessera::core::settings
