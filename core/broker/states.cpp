#include "states.h"

#include <array>

namespace tessera::core::broker {

namespace {

// One table per enum, in the enum's order.
constexpr std::array JobStates { "running", "finished", "cancelled", "failed" };
constexpr std::array AssignmentStates { "active", "answered", "failed", "returned", "expired" };
constexpr std::array AssignmentKinds { "train", "verify", "canary" };
constexpr std::array ResultStates { "accepted", "sampled", "verified" };
constexpr std::array CheckKinds { "sample", "canary" };
constexpr std::array CheckStates { "waiting", "running", "disputed", "verified", "rejected", "closed", "cancelled" };
constexpr std::array Losers { "none", "accused", "verifier", "both" };

template<typename Enum, std::size_t N> QString name(const std::array<const char*, N>& table, Enum value)
{
    const auto index = std::size_t(value);
    return index < N ? QString::fromLatin1(table[index]) : QString();
}

template<typename Enum, std::size_t N> std::optional<Enum> lookup(const std::array<const char*, N>& table, QStringView name)
{
    for (std::size_t i = 0; i < N; ++i) {
        if (name == QLatin1String(table[i]))
            return Enum(i);
    }
    return std::nullopt;
}

template<std::size_t N> QStringList all(const std::array<const char*, N>& table)
{
    QStringList names;
    for (const char* entry : table)
        names.append(QString::fromLatin1(entry));
    return names;
}

} // namespace

QString nameOf(JobState state)
{
    return name(JobStates, state);
}

QString nameOf(AssignmentState state)
{
    return name(AssignmentStates, state);
}

QString nameOf(AssignmentKind kind)
{
    return name(AssignmentKinds, kind);
}

QString nameOf(ResultState state)
{
    return name(ResultStates, state);
}

QString nameOf(CheckKind kind)
{
    return name(CheckKinds, kind);
}

QString nameOf(CheckState state)
{
    return name(CheckStates, state);
}

QString nameOf(Loser loser)
{
    return name(Losers, loser);
}

template<> std::optional<JobState> fromName<JobState>(QStringView name)
{
    return lookup<JobState>(JobStates, name);
}

template<> std::optional<AssignmentState> fromName<AssignmentState>(QStringView name)
{
    return lookup<AssignmentState>(AssignmentStates, name);
}

template<> std::optional<AssignmentKind> fromName<AssignmentKind>(QStringView name)
{
    return lookup<AssignmentKind>(AssignmentKinds, name);
}

template<> std::optional<ResultState> fromName<ResultState>(QStringView name)
{
    return lookup<ResultState>(ResultStates, name);
}

template<> std::optional<CheckKind> fromName<CheckKind>(QStringView name)
{
    return lookup<CheckKind>(CheckKinds, name);
}

template<> std::optional<CheckState> fromName<CheckState>(QStringView name)
{
    return lookup<CheckState>(CheckStates, name);
}

template<> std::optional<Loser> fromName<Loser>(QStringView name)
{
    return lookup<Loser>(Losers, name);
}

template<> QStringList namesOf<JobState>()
{
    return all(JobStates);
}

template<> QStringList namesOf<AssignmentState>()
{
    return all(AssignmentStates);
}

template<> QStringList namesOf<AssignmentKind>()
{
    return all(AssignmentKinds);
}

template<> QStringList namesOf<ResultState>()
{
    return all(ResultStates);
}

template<> QStringList namesOf<CheckKind>()
{
    return all(CheckKinds);
}

template<> QStringList namesOf<CheckState>()
{
    return all(CheckStates);
}

template<> QStringList namesOf<Loser>()
{
    return all(Losers);
}

} // namespace tessera::core::broker
